//! Text encoders: text in, token ids appended to a buffer.
//!
//! Everything between two template control tokens is handed to a [`TextEncoder`]. Two
//! implementations run the checkpoint's `tokenizer.json`:
//!
//! * [`NativeBpe`] (module [`native`]), chatids' own BPE core, for the tokenizer families it
//!   reproduces exactly (byte-level BPE with the known `Split` regexes, SentencePiece-style
//!   BPE), several times faster;
//! * [`HfTextEncoder`], the `tokenizers` crate (the library transformers itself uses), for
//!   everything else, and as the reference the native core is tested against.
//!
//! [`Selected`] holds both and runs the native core when it supports the tokenizer (every text
//! of it, text that is not in NFC included), else the crate.
//!
//! The way back, ids to text, is [`decode`]: the tokenizer's own decoding, one id at a time.

pub mod decode;
mod hf;
pub mod image;
pub mod lazy;
pub mod native;
pub mod sentencepiece;
pub mod tekken;

/// A small deterministic generator (xorshift) for the randomized unit tests of the encoders.
#[cfg(test)]
pub(crate) struct TestRng(pub u64);

#[cfg(test)]
impl TestRng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

pub use decode::{StreamState, TextStream, TokenText, UnknownId};
pub use hf::HfTextEncoder;
pub use lazy::{LazyTokenizer, TokenIndex};
pub use native::NativeBpe;

use std::sync::OnceLock;

use crate::error::Result;

/// GPT-2's byte -> character table (`bytes_to_unicode`): byte-level vocabularies write byte
/// `b` as character `table[b]`. The native BPE core decodes with it; the GGUF loader
/// ([`crate::checkpoint`]) rebuilds byte-level vocabularies with it.
pub fn bytes_to_unicode() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        table[b as usize] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(256 + n).expect("valid code point");
            n += 1;
            c
        };
    }
    table
}

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

/// Which text encoder [`Selected`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncoderChoice {
    /// The native core when it supports the tokenizer (the default).
    Auto,
    /// Always the `tokenizers` crate.
    Tokenizers,
}

impl EncoderChoice {
    /// The choice the environment asks for: `CHATIDS_TEXT_ENCODER=tokenizers` forces the
    /// `tokenizers` crate (for comparisons); anything else, or nothing, is [`EncoderChoice::Auto`].
    pub fn from_env() -> Self {
        match std::env::var("CHATIDS_TEXT_ENCODER").as_deref() {
            Ok("tokenizers") => EncoderChoice::Tokenizers,
            _ => EncoderChoice::Auto,
        }
    }
}

/// The checkpoint's tokenizer as both text encoders; encodes with the native core where it
/// applies. The `tokenizers` crate's encoder is made on first use (see [`lazy`]).
pub struct Selected {
    tokenizer: LazyTokenizer,
    hf: OnceLock<std::result::Result<HfTextEncoder, String>>,
    native: Option<NativeBpe>,
    /// Why the native core does not run, when it does not.
    refusal: Option<String>,
}

impl Selected {
    /// Both encoders for `tokenizer` (the native one only if it supports it and `choice`
    /// allows it).
    pub fn new(tokenizer: tokenizers::Tokenizer, choice: EncoderChoice) -> Self {
        Self::with_model(LazyTokenizer::built(tokenizer), choice, None)
    }

    /// [`Selected::new`], the native core's tables read from `model` when given (the `model`
    /// object of the JSON the tokenizer was built from; see [`native::ModelJson`]).
    pub fn with_model(
        tokenizer: LazyTokenizer,
        choice: EncoderChoice,
        model: Option<native::ModelJson>,
    ) -> Self {
        let (native, refusal) = match (choice, tokenizer.get()) {
            (EncoderChoice::Tokenizers, _) => (
                None,
                Some("CHATIDS_TEXT_ENCODER=tokenizers asks for the tokenizers crate".to_string()),
            ),
            (EncoderChoice::Auto, Err(e)) => (None, Some(e.to_string())),
            (EncoderChoice::Auto, Ok(t)) => match NativeBpe::from_tokenizer_with(t, model) {
                Ok(n) => (Some(n), None),
                Err(why) => (None, Some(why)),
            },
        };
        Selected {
            tokenizer,
            hf: OnceLock::new(),
            native,
            refusal,
        }
    }

    /// The native core read from an image, over a tokenizer built on first use.
    pub fn from_native(tokenizer: LazyTokenizer, native: NativeBpe) -> Self {
        Selected {
            tokenizer,
            hf: OnceLock::new(),
            native: Some(native),
            refusal: None,
        }
    }

    /// The `tokenizers` crate's encoder (the reference and the fallback), made now if it was
    /// not.
    pub fn hf(&self) -> Result<&HfTextEncoder> {
        self.hf
            .get_or_init(|| {
                self.tokenizer
                    .get()
                    .map(|t| HfTextEncoder::new(t.clone()))
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| crate::error::Error::Tokenizer(e.clone()))
    }

    /// The native core, if it runs for this tokenizer.
    pub fn native(&self) -> Option<&NativeBpe> {
        self.native.as_ref()
    }

    /// The tokenizer, built now if it was not.
    pub fn tokenizer(&self) -> Result<&tokenizers::Tokenizer> {
        self.tokenizer.get()
    }

    /// The tokenizer, built or not (lookups do not build it).
    pub fn lazy_tokenizer(&self) -> &LazyTokenizer {
        &self.tokenizer
    }

    /// Which encoder runs, and why, in one line (for `Encoder::explain`).
    pub fn describe(&self) -> String {
        match (&self.native, &self.refusal) {
            (Some(n), _) => format!(
                "text encoder: chatids' native BPE core ({})",
                n.description()
            ),
            (None, Some(why)) => format!("text encoder: the tokenizers crate ({why})"),
            (None, None) => "text encoder: the tokenizers crate".to_string(),
        }
    }
}

/// Which of the two encoders of a [`Selected`] to run (differential tests and benchmarks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// What [`Selected`] runs by default.
    Selected,
    /// The native core (an error if it does not support the tokenizer).
    Native,
    /// The `tokenizers` crate.
    Tokenizers,
}

impl Selected {
    /// Encode `text` with one encoder, with token starts when `starts` is given.
    pub fn encode_with(
        &self,
        which: Which,
        text: &str,
        options: TextOptions,
        ids: &mut Vec<u32>,
        starts: Option<&mut Vec<usize>>,
    ) -> Result<()> {
        let encoder: &dyn TextEncoder = match which {
            Which::Selected => self,
            Which::Tokenizers => self.hf()?,
            Which::Native => self.native_or_error()?,
        };
        match starts {
            Some(s) => encoder.encode_with_starts(text, options, ids, s),
            None => encoder.encode(text, options, ids),
        }
    }

    /// The native core, or an error saying why it does not run for this tokenizer.
    fn native_or_error(&self) -> Result<&NativeBpe> {
        self.native.as_ref().ok_or_else(|| {
            crate::error::Error::Tokenizer(format!(
                "the native BPE core does not run for this tokenizer: {}",
                self.refusal.as_deref().unwrap_or("")
            ))
        })
    }

    /// The indices of the `texts` whose ids (and token starts, with `with_starts`) differ
    /// between the native core and the `tokenizers` crate.
    pub fn differences(
        &self,
        texts: &[&str],
        options: TextOptions,
        with_starts: bool,
    ) -> Result<Vec<usize>> {
        let native = self.native_or_error()?;
        let hf = self.hf()?;
        let mut out = Vec::new();
        let (mut a, mut b, mut sa, mut sb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, text) in texts.iter().enumerate() {
            a.clear();
            b.clear();
            sa.clear();
            sb.clear();
            if with_starts {
                native.encode_with_starts(text, options, &mut a, &mut sa);
                hf.encode_with_starts(text, options, &mut b, &mut sb)?;
            } else {
                native.encode(text, options, &mut a);
                hf.encode(text, options, &mut b)?;
            }
            if a != b || sa != sb {
                out.push(i);
            }
        }
        Ok(out)
    }
}

impl Selected {
    /// The encoder that runs: the native core where it applies to the tokenizer, else the
    /// crate.
    #[inline]
    fn pick(&self) -> Result<&dyn TextEncoder> {
        match &self.native {
            Some(n) => Ok(n),
            None => Ok(self.hf()?),
        }
    }
}

impl TextEncoder for Selected {
    #[inline]
    fn encode(&self, text: &str, options: TextOptions, ids: &mut Vec<u32>) -> Result<()> {
        self.pick()?.encode(text, options, ids)
    }

    fn encode_with_starts(
        &self,
        text: &str,
        options: TextOptions,
        ids: &mut Vec<u32>,
        starts: &mut Vec<usize>,
    ) -> Result<()> {
        self.pick()?.encode_with_starts(text, options, ids, starts)
    }
}
