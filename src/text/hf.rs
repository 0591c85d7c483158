//! [`TextEncoder`] backed by the `tokenizers` crate.

use tokenizers::{
    Model, ModelWrapper, NormalizedString, Normalizer, NormalizerWrapper, OffsetReferential,
    OffsetType, PreTokenizedString, PreTokenizer, PreTokenizerWrapper, Tokenizer,
};
use unicode_normalization::{is_nfc_quick, IsNormalized};

use std::collections::HashMap;
use std::sync::RwLock;

use super::{TextEncoder, TextOptions};
use crate::error::{Error, Result};
use tokenizers::pre_tokenizers::metaspace::PrependScheme;

/// Words each thread's BPE cache holds (the crate's default is 10,000; about 100 bytes a word,
/// so ~5 MB per thread when full). A cache hit skips the merge loop; the output is the same
/// either way.
const BPE_CACHE_WORDS: usize = 50_000;

/// The `tokenizers` crate's pipeline (added tokens, normalizer, pre-tokenizer, model), run
/// without building an `Encoding` unless offsets are asked for.
pub struct HfTextEncoder {
    tokenizer: Tokenizer,
    /// The pre-tokenizer for text that does not start the string, when it differs from the
    /// tokenizer's own (a `Metaspace` with `prepend_scheme="first"` becomes `"never"`).
    pre_tokenizer_not_at_start: Option<PreTokenizerWrapper>,
    /// Ids of short texts seen before. Chat prompts repeat the same short runs in every
    /// conversation (role names, a date block, a default system prompt), and the pipeline's
    /// fixed cost per call dominates for them. Encoding is a pure function of the text and
    /// the options, so a hit returns exactly what the pipeline would.
    /// One map per combination of [`TextOptions`] (see [`options_slot`]).
    short_runs: [RwLock<RunCache>; 4],
}

/// Short texts and their ids.
type RunCache = HashMap<Box<str>, Box<[u32]>>;

/// Texts up to this many bytes go through [`HfTextEncoder::short_runs`].
const SHORT_RUN_BYTES: usize = 256;
/// The most entries [`HfTextEncoder::short_runs`] holds; later texts are not cached.
const SHORT_RUN_ENTRIES: usize = 4096;

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
            short_runs: Default::default(),
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
        let short = text.len() <= SHORT_RUN_BYTES;
        // The cache is only ever tried, never waited for: a lock held by a thread that is gone
        // (in a child process after `fork()`) or busy just means a miss.
        if short {
            if let Some(cache) = try_lock(self.short_runs[options_slot(options)].try_read()) {
                if let Some(hit) = cache.get(text) {
                    ids.extend_from_slice(hit);
                    return Ok(());
                }
            }
        }
        let start = ids.len();
        let pretokenized = self.pipeline(text, options)?;
        for (_, _, tokens) in
            pretokenized.get_splits(OffsetReferential::Normalized, OffsetType::None)
        {
            if let Some(tokens) = tokens {
                ids.extend(tokens.iter().map(|t| t.id));
            }
        }
        if short {
            if let Some(mut cache) = try_lock(self.short_runs[options_slot(options)].try_write()) {
                if cache.len() < SHORT_RUN_ENTRIES {
                    cache.insert(Box::from(text), ids[start..].into());
                }
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

/// The guard of a `try_read`/`try_write`: `None` when the lock is busy (a poisoned lock is
/// still usable: the cache only ever holds complete entries).
fn try_lock<G>(result: std::sync::TryLockResult<G>) -> Option<G> {
    match result {
        Ok(guard) => Some(guard),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Index of the [`HfTextEncoder::short_runs`] map for `options`.
fn options_slot(options: TextOptions) -> usize {
    usize::from(options.added_tokens) * 2 + usize::from(options.at_start)
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
