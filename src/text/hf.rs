//! [`TextEncoder`] backed by the `tokenizers` crate.

use tokenizers::{
    Model, ModelWrapper, NormalizedString, Normalizer, NormalizerWrapper, OffsetReferential,
    OffsetType, PreTokenizedString, PreTokenizer, PreTokenizerWrapper, Tokenizer,
};
use unicode_normalization::{is_nfc_quick, IsNormalized};

use super::{TextEncoder, TextOptions};
use crate::error::{Error, Result};
use tokenizers::pre_tokenizers::metaspace::PrependScheme;

/// Words each thread's BPE cache holds (the crate's default is 10,000). A cache hit skips the
/// merge loop; the output is the same either way.
const BPE_CACHE_WORDS: usize = 100_000;

/// The `tokenizers` crate's pipeline (added tokens, normalizer, pre-tokenizer, model), run
/// without building an `Encoding` unless offsets are asked for.
pub struct HfTextEncoder {
    tokenizer: Tokenizer,
    /// The pre-tokenizer for text that does not start the string, when it differs from the
    /// tokenizer's own (a `Metaspace` with `prepend_scheme="first"` becomes `"never"`).
    pre_tokenizer_not_at_start: Option<PreTokenizerWrapper>,
}

impl HfTextEncoder {
    /// Wrap a loaded tokenizer.
    pub fn new(mut tokenizer: Tokenizer) -> Self {
        let pre_tokenizer_not_at_start =
            tokenizer.get_pre_tokenizer().and_then(without_first_prefix);
        if let ModelWrapper::BPE(bpe) = tokenizer.get_model() {
            let mut bpe = bpe.clone();
            bpe.resize_cache(BPE_CACHE_WORDS);
            tokenizer.with_model(bpe);
        }
        HfTextEncoder {
            tokenizer,
            pre_tokenizer_not_at_start,
        }
    }

    /// The wrapped tokenizer.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    fn pipeline(&self, text: &str, options: TextOptions) -> Result<PreTokenizedString> {
        let normalizer = match self.tokenizer.get_normalizer() {
            // NFC of text that is already NFC is the identity: skip building its alignments.
            Some(NormalizerWrapper::NFC(_)) if is_nfc_quick(text.chars()) == IsNormalized::Yes => {
                None
            }
            other => other,
        };
        let mut pretokenized = if options.added_tokens {
            self.tokenizer
                .get_added_vocabulary()
                .extract_and_normalize(normalizer, text)
        } else {
            let mut normalized = NormalizedString::from(text);
            if let Some(n) = normalizer {
                n.normalize(&mut normalized).map_err(tok_err)?;
            }
            PreTokenizedString::from(normalized)
        };
        let pre_tokenizer = match (&self.pre_tokenizer_not_at_start, options.at_start) {
            (Some(p), false) => Some(p),
            _ => self.tokenizer.get_pre_tokenizer(),
        };
        if let Some(p) = pre_tokenizer {
            p.pre_tokenize(&mut pretokenized).map_err(tok_err)?;
        }
        let model = self.tokenizer.get_model();
        pretokenized
            .tokenize(|normalized| model.tokenize(normalized.get()))
            .map_err(tok_err)?;
        Ok(pretokenized)
    }
}

impl TextEncoder for HfTextEncoder {
    fn encode(&self, text: &str, options: TextOptions, ids: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let pretokenized = self.pipeline(text, options)?;
        for (_, _, tokens) in
            pretokenized.get_splits(OffsetReferential::Normalized, OffsetType::None)
        {
            if let Some(tokens) = tokens {
                ids.extend(tokens.iter().map(|t| t.id));
            }
        }
        Ok(())
    }

    fn encode_with_starts(
        &self,
        text: &str,
        options: TextOptions,
        ids: &mut Vec<u32>,
        starts: &mut Vec<usize>,
    ) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let encoding = self
            .pipeline(text, options)?
            .into_encoding(None, 0, OffsetType::Byte)
            .map_err(tok_err)?;
        ids.extend_from_slice(encoding.get_ids());
        starts.extend(encoding.get_offsets().iter().map(|o| o.0));
        Ok(())
    }
}

fn tok_err(e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(e.to_string())
}

/// The same pre-tokenizer with every `Metaspace(prepend_scheme="first")` set to `"never"`,
/// or `None` if there is none (then position does not matter).
fn without_first_prefix(p: &PreTokenizerWrapper) -> Option<PreTokenizerWrapper> {
    match p {
        PreTokenizerWrapper::Metaspace(m) if m.get_prepend_scheme() == PrependScheme::First => {
            let mut m = m.clone();
            m.set_prepend_scheme(PrependScheme::Never);
            Some(PreTokenizerWrapper::Metaspace(m))
        }
        PreTokenizerWrapper::Sequence(seq) => {
            let parts: Vec<PreTokenizerWrapper> = seq.as_ref().to_vec();
            let changed: Vec<Option<PreTokenizerWrapper>> =
                parts.iter().map(without_first_prefix).collect();
            if changed.iter().all(Option::is_none) {
                return None;
            }
            let new_parts = parts
                .into_iter()
                .zip(changed)
                .map(|(old, new)| new.unwrap_or(old))
                .collect();
            Some(PreTokenizerWrapper::Sequence(
                tokenizers::pre_tokenizers::sequence::Sequence::new(new_parts),
            ))
        }
        _ => None,
    }
}
