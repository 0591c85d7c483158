//! Text encoders: text in, token ids appended to a buffer.
//!
//! Everything between two template control tokens is handed to a [`TextEncoder`]. Today the
//! only implementation is [`HfTextEncoder`], the `tokenizers` crate (the library transformers
//! itself uses) loaded from the checkpoint's `tokenizer.json`; a faster BPE core can replace it
//! behind this interface.

mod hf;
pub mod sentencepiece;
pub mod tekken;

pub use hf::HfTextEncoder;

use crate::error::Result;

/// How a piece of text is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextOptions {
    /// Match the tokenizer's added tokens in the text (transformers' normal `encode`). When
    /// false, the text goes through normalizer, pre-tokenizer and model only, so an added
    /// token's text comes out as plain text (transformers' `_encode_without_added_tokens`).
    pub added_tokens: bool,
    /// The text starts at offset 0 of the string the reference tokenizer sees. This matters
    /// for `Metaspace(prepend_scheme="first")`, which adds its prefix space only there.
    pub at_start: bool,
}

/// Turns text into token ids.
pub trait TextEncoder: Send + Sync {
    /// Append the ids of `text` to `ids`.
    fn encode(&self, text: &str, options: TextOptions, ids: &mut Vec<u32>) -> Result<()>;

    /// Append the ids of `text` to `ids`, and for each token the byte offset in `text` where
    /// it starts to `starts`.
    fn encode_with_starts(
        &self,
        text: &str,
        options: TextOptions,
        ids: &mut Vec<u32>,
        starts: &mut Vec<usize>,
    ) -> Result<()>;
}
