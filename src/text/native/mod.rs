//! chatids' own BPE core: the ids of the `tokenizers` crate's pipeline for the tokenizer
//! families chat checkpoints use, several times faster.
//!
//! The pipeline has the crate's stages, one module each:
//!
//! 1. added tokens found in the text ([`added`]), in raw text and then in normalized text;
//! 2. the normalizer: none, NFC (the crate's own Unicode 9 tables, with the crate's alignments
//!    for token starts), or SentencePiece-style `▁` for spaces ([`Normalizer`]);
//! 3. the pre-tokenizer: the known `Split` regexes of byte-level tokenizers as hand-written
//!    scanners ([`split`], with Oniguruma's Unicode classes from [`unicode`]), or `Metaspace`;
//!    SentencePiece-style texts are cut into independently mergeable words ([`words`]);
//! 4. the BPE model ([`bpe`]; long byte-level words by their longest tokens, [`backtrack`]),
//!    behind a per-thread word cache ([`cache`]).
//!
//! Whole texts seen before come from a cache of the model's ([`texts`]).
//!
//! [`NativeBpe::from_tokenizer`] reads the tokenizer's own serialization and accepts only
//! configurations it reproduces exactly; for anything else it says why, and the `tokenizers`
//! crate runs instead ([`super::Selected`]). The differential tests compare the two on every
//! shared tokenizer (`tests/test_native_bpe.py`, the unit tests here, `fuzz/`).

pub mod added;
mod backtrack;
pub mod bpe;
mod cache;
pub mod split;
mod table;
mod texts;
pub mod unicode;
pub mod words;

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;
use serde_json::Value;
use tokenizers::{ModelWrapper, NormalizedString, Normalizer as _, Tokenizer};
use unicode_normalization::{is_nfc_quick, IsNormalized};

use self::added::{AddedToken, Matcher, Part};
use self::bpe::{BpeConfig, BpeModel, Units};
use self::split::Pattern;
use self::words::WordCutter;
use super::image::{ReadResult, Reader, Writer};
use super::TextOptions;

/// The normalizers the native core runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Normalizer {
    /// None (or an empty sequence).
    Identity,
    /// NFC: text already in NFC (the quick check says yes) is unchanged; other text goes
    /// through [`nfc`], the normalization the `tokenizers` crate runs.
    Nfc,
    /// `Replace(" ", "▁")`, after `Prepend("▁")` (of a non-empty text) when `prepend`.
    SpacesToMeta { prepend: bool },
}

/// How `Metaspace` prefixes a `▁`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prepend {
    Always,
    First,
    Never,
}

/// The pre-tokenizers the native core runs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PreTokenizer {
    /// `Split` regexes applied one after the other, then `ByteLevel` without its own regex.
    ByteLevel(Vec<Pattern>),
    /// `Metaspace` without splitting: spaces become `▁`, and a `▁` may be prefixed.
    Metaspace(Prepend),
    /// Nothing (the text reaches the model as it is, `▁`s already in place).
    Whole,
}

/// chatids' BPE core for one tokenizer.
pub struct NativeBpe {
    raw_tokens: Option<Matcher>,
    normalized_tokens: Option<Matcher>,
    normalizer: Normalizer,
    pre_tokenizer: PreTokenizer,
    model: BpeModel,
    /// SentencePiece-style models: where texts may be cut into words (`None`: never).
    cutter: Option<WordCutter>,
    /// This model's word caches (one per thread).
    cache_key: u64,
    /// Whole texts encoded before.
    texts: texts::TextCache,
    description: String,
}

static NEXT_CACHE_KEY: AtomicU64 = AtomicU64::new(1);

/// A place to put ids, and optionally where each token starts in the caller's text.
struct Out<'a> {
    ids: &'a mut Vec<u32>,
    starts: Option<&'a mut Vec<usize>>,
}

impl NativeBpe {
    /// The native core for `tokenizer`, or why it cannot reproduce it. The configuration is
    /// read from the tokenizer itself (its components serialized), so it is what the crate runs.
    pub fn from_tokenizer(tokenizer: &Tokenizer) -> Result<Self, String> {
        Self::from_tokenizer_with(tokenizer, None)
    }

    /// [`NativeBpe::from_tokenizer`], the BPE tables read from `model` (the `model` object of the
    /// JSON `tokenizer` was built from, see [`ModelJson`]) instead of from the tokenizer's model
    /// written back to JSON, which costs about a third of loading a large vocabulary.
    pub fn from_tokenizer_with(
        tokenizer: &Tokenizer,
        model: Option<ModelJson>,
    ) -> Result<Self, String> {
        let as_json = |v: Result<Value, serde_json::Error>| {
            v.map_err(|e| format!("cannot read the tokenizer: {e}"))
        };
        let normalizer =
            read_normalizer(&as_json(serde_json::to_value(tokenizer.get_normalizer()))?)?;
        let pre_tokenizer = as_json(serde_json::to_value(tokenizer.get_pre_tokenizer()))?;
        let (pre_tokenizer, units) = read_pre_tokenizer(&pre_tokenizer, normalizer)?;
        let ModelWrapper::BPE(bpe) = tokenizer.get_model() else {
            return Err("only BPE models are supported".into());
        };
        let model_config: BpeJson = match model {
            Some(ModelJson(m)) => m,
            None => {
                let model_json = serde_json::to_string(bpe)
                    .map_err(|e| format!("cannot read the BPE model: {e}"))?;
                serde_json::from_str(&model_json)
                    .map_err(|e| format!("cannot read the BPE model: {e}"))?
            }
        };
        let unk = model_config.unk_token.clone().unwrap_or_default();
        let model = read_model(model_config, units)?;
        let (raw_tokens, normalized_tokens) = read_added_tokens(tokenizer)?;
        let cutter = match units {
            Units::Bytes => None,
            Units::Chars => WordCutter::new(model.vocab_texts().iter().map(Vec::as_slice), |t| {
                contains(t, b"<0x") || (!unk.is_empty() && contains(t, unk.as_bytes()))
            }),
        };
        let description = match &pre_tokenizer {
            PreTokenizer::ByteLevel(patterns) => format!(
                "byte-level BPE, pre-tokenizer {}{}",
                patterns
                    .iter()
                    .map(|p| format!("{p:?}"))
                    .collect::<Vec<_>>()
                    .join(" + "),
                if normalizer == Normalizer::Nfc {
                    ", NFC"
                } else {
                    ""
                }
            ),
            PreTokenizer::Metaspace(p) => {
                format!("SentencePiece-style BPE (Metaspace, prepend {p:?})")
            }
            PreTokenizer::Whole => {
                "SentencePiece-style BPE (spaces to ▁ by the normalizer)".to_string()
            }
        };
        Ok(Self::assemble(
            [raw_tokens, normalized_tokens],
            normalizer,
            pre_tokenizer,
            model,
            cutter,
            description,
        ))
    }

    /// The core of its stages, with word caches of its own (a fresh cache key) and the Unicode
    /// tables its scanners read warmed up.
    fn assemble(
        [raw_tokens, normalized_tokens]: [Option<Matcher>; 2],
        normalizer: Normalizer,
        pre_tokenizer: PreTokenizer,
        model: BpeModel,
        cutter: Option<WordCutter>,
        description: String,
    ) -> Self {
        unicode::warm_up();
        NativeBpe {
            raw_tokens,
            normalized_tokens,
            normalizer,
            pre_tokenizer,
            model,
            cutter,
            cache_key: NEXT_CACHE_KEY.fetch_add(1, Ordering::Relaxed),
            texts: texts::TextCache::from_env(),
            description,
        }
    }

    /// Write the built core (see [`crate::text::image`]): [`NativeBpe::read_image`] gives it
    /// back without the tokenizer, its JSON, or rebuilding its tables.
    pub fn write_image(&self, w: &mut Writer) {
        self.write_image_layout(w, true);
    }

    /// [`NativeBpe::write_image`], or the layout of state version 2 (without the longest-token
    /// tables, [`backtrack`]) when `with_backtrack` is false.
    pub fn write_image_layout(&self, w: &mut Writer, with_backtrack: bool) {
        let matcher = |w: &mut Writer, m: &Option<Matcher>| match m {
            Some(m) => m.write(w),
            None => w.len(0),
        };
        matcher(w, &self.raw_tokens);
        matcher(w, &self.normalized_tokens);
        match self.normalizer {
            Normalizer::Identity => w.u8(0),
            Normalizer::Nfc => w.u8(1),
            Normalizer::SpacesToMeta { prepend } => {
                w.u8(2);
                w.bool(prepend);
            }
        }
        match &self.pre_tokenizer {
            PreTokenizer::ByteLevel(patterns) => {
                w.u8(0);
                w.len(patterns.len());
                for p in patterns {
                    p.write(w);
                }
            }
            PreTokenizer::Metaspace(p) => {
                w.u8(1);
                w.u8(match p {
                    Prepend::Always => 0,
                    Prepend::First => 1,
                    Prepend::Never => 2,
                });
            }
            PreTokenizer::Whole => w.u8(2),
        }
        self.model.write_layout(w, with_backtrack);
        w.option(self.cutter.as_ref(), |w, c| c.write(w));
        w.str(&self.description);
    }

    /// Read a core [`NativeBpe::write_image`] wrote.
    pub fn read_image(r: &mut Reader<'_>) -> ReadResult<Self> {
        Self::read_image_of(r, true)
    }

    /// [`NativeBpe::read_image`] of an image written before the longest-token tables were
    /// (state version 2) when `with_backtrack` is false: they are built.
    pub fn read_image_of(r: &mut Reader<'_>, with_backtrack: bool) -> ReadResult<Self> {
        let raw_tokens = Matcher::read(r)?;
        let normalized_tokens = Matcher::read(r)?;
        let normalizer = match r.u8()? {
            0 => Normalizer::Identity,
            1 => Normalizer::Nfc,
            2 => Normalizer::SpacesToMeta { prepend: r.bool()? },
            n => return Err(format!("unknown normalizer {n}")),
        };
        let pre_tokenizer = match r.u8()? {
            0 => {
                let n = r.len(1)?;
                PreTokenizer::ByteLevel(
                    (0..n)
                        .map(|_| Pattern::read(r))
                        .collect::<ReadResult<_>>()?,
                )
            }
            1 => PreTokenizer::Metaspace(match r.u8()? {
                0 => Prepend::Always,
                1 => Prepend::First,
                2 => Prepend::Never,
                p => return Err(format!("unknown prepend scheme {p}")),
            }),
            2 => PreTokenizer::Whole,
            p => return Err(format!("unknown pre-tokenizer {p}")),
        };
        let model = BpeModel::read(r, with_backtrack)?;
        let cutter = r.option(WordCutter::read)?;
        let description = r.str()?.to_string();
        Ok(Self::assemble(
            [raw_tokens, normalized_tokens],
            normalizer,
            pre_tokenizer,
            model,
            cutter,
            description,
        ))
    }

    /// What runs, in a few words (for `Encoder::explain`).
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Append the ids of `text`.
    pub fn encode(&self, text: &str, options: TextOptions, ids: &mut Vec<u32>) {
        self.texts.encode(text, options, ids, |ids| {
            self.run(text, options, Out { ids, starts: None })
        });
    }

    /// Append the ids of `text` and where each token starts in it (byte offsets).
    pub fn encode_with_starts(
        &self,
        text: &str,
        options: TextOptions,
        ids: &mut Vec<u32>,
        starts: &mut Vec<usize>,
    ) {
        self.run(
            text,
            options,
            Out {
                ids,
                starts: Some(starts),
            },
        );
    }

    fn run(&self, text: &str, options: TextOptions, mut out: Out<'_>) {
        if text.is_empty() {
            return;
        }
        cache::with(self.cache_key, |words, buffers| {
            let mut ctx = Context {
                bpe: self,
                options,
                words,
                buffers,
            };
            match &self.raw_tokens {
                Some(m) if options.added_tokens && m.occurs_in(text) => {
                    m.split(text, &mut |part| match part {
                        Part::Text(a, b) => ctx.normalize(&text[a..b], a, &mut out),
                        Part::Token(id, a, _) => out.token(id, a),
                    })
                }
                _ => ctx.normalize(text, 0, &mut out),
            }
        });
    }
}

impl super::TextEncoder for NativeBpe {
    #[inline]
    fn encode(
        &self,
        text: &str,
        options: TextOptions,
        ids: &mut Vec<u32>,
    ) -> crate::error::Result<()> {
        NativeBpe::encode(self, text, options, ids);
        Ok(())
    }

    fn encode_with_starts(
        &self,
        text: &str,
        options: TextOptions,
        ids: &mut Vec<u32>,
        starts: &mut Vec<usize>,
    ) -> crate::error::Result<()> {
        NativeBpe::encode_with_starts(self, text, options, ids, starts);
        Ok(())
    }
}

impl Out<'_> {
    #[inline]
    fn token(&mut self, id: u32, start: usize) {
        self.ids.push(id);
        if let Some(s) = self.starts.as_deref_mut() {
            s.push(start);
        }
    }

    #[inline]
    fn wants_starts(&self) -> bool {
        self.starts.is_some()
    }
}

/// Where the bytes of a transformed text were in the caller's text.
#[derive(Clone, Copy)]
enum Origin<'t> {
    /// Byte `i` was at `base + i`.
    Shift(usize),
    /// Byte `i` came from offset `table[i]` (only built when offsets are asked for).
    Table(&'t [usize]),
}

impl<'t> Origin<'t> {
    #[inline]
    fn at(self, i: usize) -> usize {
        match self {
            Origin::Shift(base) => base + i,
            Origin::Table(t) => t.get(i).copied().unwrap_or(0),
        }
    }

    #[inline]
    fn from(self, i: usize) -> Origin<'t> {
        match self {
            Origin::Shift(base) => Origin::Shift(base + i),
            Origin::Table(t) => Origin::Table(t.get(i..).unwrap_or(&[])),
        }
    }
}

/// One encode call's view of the model and this thread's buffers.
struct Context<'a> {
    bpe: &'a NativeBpe,
    options: TextOptions,
    words: &'a mut cache::WordCache,
    buffers: &'a mut cache::Buffers,
}

impl Context<'_> {
    /// Normalize a stretch between raw added tokens (at `base` in the caller's text), find
    /// the normalized added tokens in it, and pre-tokenize the rest.
    fn normalize(&mut self, text: &str, base: usize, out: &mut Out<'_>) {
        match self.bpe.normalizer {
            Normalizer::Identity => self.find_normalized_tokens(text, Origin::Shift(base), out),
            Normalizer::Nfc if is_nfc(text) => {
                self.find_normalized_tokens(text, Origin::Shift(base), out)
            }
            Normalizer::Nfc => self.rewrite(
                |b| &mut b.normalized,
                |text_out, origins| nfc(text, base, text_out, origins),
                // Without starts, only `origin.at(0)` is read (is the piece at the text's
                // start?), and NFC keeps a piece's first character where it was.
                base,
                out,
                Self::find_normalized_tokens,
            ),
            Normalizer::SpacesToMeta { prepend } => {
                let prepend = prepend && !text.is_empty();
                self.rewrite(
                    |b| &mut b.normalized,
                    |text_out, origins| {
                        spaces_to_meta(text, Origin::Shift(base), prepend, text_out, origins)
                    },
                    0,
                    out,
                    Self::find_normalized_tokens,
                )
            }
        }
    }

    /// Rewrite a text into the buffer `slot` picks with `fill` (which is given the origins
    /// table only when starts are wanted), then run `next` on the rewritten text: with its
    /// origins, or, without starts, `Origin::Shift(shift)`.
    fn rewrite(
        &mut self,
        slot: fn(&mut cache::Buffers) -> &mut cache::Rewrite,
        fill: impl FnOnce(&mut String, Option<&mut Vec<usize>>),
        shift: usize,
        out: &mut Out<'_>,
        next: impl FnOnce(&mut Self, &str, Origin<'_>, &mut Out<'_>),
    ) {
        let mut buffer = std::mem::take(slot(self.buffers));
        fill(
            &mut buffer.text,
            out.wants_starts().then_some(&mut buffer.origins),
        );
        let origin = if out.wants_starts() {
            Origin::Table(&buffer.origins)
        } else {
            Origin::Shift(shift)
        };
        next(self, &buffer.text, origin, out);
        *slot(self.buffers) = buffer;
    }

    fn find_normalized_tokens(&mut self, text: &str, origin: Origin<'_>, out: &mut Out<'_>) {
        match &self.bpe.normalized_tokens {
            Some(m) if self.options.added_tokens && m.occurs_in(text) => {
                m.split(text, &mut |part| match part {
                    Part::Text(a, b) => self.pre_tokenize(&text[a..b], origin.from(a), out),
                    Part::Token(id, a, _) => out.token(id, origin.at(a)),
                })
            }
            _ => self.pre_tokenize(text, origin, out),
        }
    }

    /// Pre-tokenize one normalized piece and encode its words.
    fn pre_tokenize(&mut self, text: &str, origin: Origin<'_>, out: &mut Out<'_>) {
        match &self.bpe.pre_tokenizer {
            PreTokenizer::ByteLevel(patterns) => self.split(patterns, text, origin, out),
            PreTokenizer::Whole => self.sentencepiece_text(text.as_bytes(), origin, out),
            PreTokenizer::Metaspace(scheme) => {
                let prefix = match scheme {
                    Prepend::Always => true,
                    Prepend::First => self.options.at_start && origin.at(0) == 0,
                    Prepend::Never => false,
                };
                let prefix = prefix && !text.starts_with(' ') && !text.starts_with('\u{2581}');
                self.rewrite(
                    |b| &mut b.pre_tokenized,
                    |replaced, origins| spaces_to_meta(text, origin, prefix, replaced, origins),
                    0,
                    out,
                    |this, replaced, origin, out| {
                        this.sentencepiece_text(replaced.as_bytes(), origin, out)
                    },
                )
            }
        }
    }

    /// Apply the `Split` patterns one after the other; each piece of the last is a word.
    fn split(&mut self, patterns: &[Pattern], text: &str, origin: Origin<'_>, out: &mut Out<'_>) {
        match patterns {
            [] => self.word(text.as_bytes(), origin, out),
            [only] => only.split(text, 0, &mut |a, b| {
                self.word(&text.as_bytes()[a..b], origin.from(a), out)
            }),
            [first, rest @ ..] => first.split(text, 0, &mut |a, b| {
                self.split(rest, &text[a..b], origin.from(a), out)
            }),
        }
    }

    /// A SentencePiece-style text, which the model sees whole: cut into words where that
    /// changes nothing ([`WordCutter`]).
    fn sentencepiece_text(&mut self, text: &[u8], origin: Origin<'_>, out: &mut Out<'_>) {
        let bpe = self.bpe;
        if bpe.model.ignore_merges {
            if let Some(id) = bpe.model.token_id(text) {
                out.token(id, origin.at(0));
                return;
            }
        }
        match &bpe.cutter {
            Some(cutter) => cutter.cut(text, &mut |a, b| {
                self.word(&text[a..b], origin.from(a), out)
            }),
            None => self.word(text, origin, out),
        }
    }

    /// One word through the cache and the model. The cache comes first: it is small and
    /// warm, where a vocabulary lookup (`ignore_merges`) is a miss to memory per word, so
    /// words of one token are cached too.
    #[inline]
    fn word(&mut self, word: &[u8], origin: Origin<'_>, out: &mut Out<'_>) {
        let model = &self.bpe.model;
        let key = table::Key::new(word);
        let cached = match self.words.get(word, key) {
            Some(hit) => {
                let ids = hit.ids();
                match out.starts.as_deref_mut() {
                    None => {
                        out.ids.extend_from_slice(ids);
                        return;
                    }
                    Some(starts) => {
                        if cached_starts(model.token_lens(), ids, word, origin, starts) {
                            out.ids.extend_from_slice(ids);
                            return;
                        }
                    }
                }
                // A token whose length varies: encode the word again for the lengths.
                true
            }
            None => false,
        };
        let b = &mut *self.buffers;
        b.ids.clear();
        b.lens.clear();
        match model.ignore_merges.then(|| model.token_id_keyed(word, key)) {
            Some(Some(id)) => {
                b.ids.push(id);
                b.lens.push(word.len() as u32);
            }
            _ => model.encode_word(word, &mut b.bpe, &mut b.ids, &mut b.lens),
        }
        if !cached {
            self.words.insert(word, key, &b.ids);
        }
        out.ids.extend_from_slice(&b.ids);
        if let Some(starts) = out.starts.as_deref_mut() {
            push_starts(b.lens.iter().map(|&l| l as usize), word, origin, starts);
        }
    }
}

/// Push where the tokens of a cached word start, from the model's token lengths; `false`
/// (and nothing pushed) if a token's length varies ([`bpe::VARIES`]) or they do not add up
/// to the word.
#[inline]
fn cached_starts(
    lens: &[u16],
    ids: &[u32],
    word: &[u8],
    origin: Origin<'_>,
    starts: &mut Vec<usize>,
) -> bool {
    let before = starts.len();
    let mut total = 0usize;
    let mut known = true;
    push_starts(
        ids.iter().map(|&id| {
            let l = lens.get(id as usize).copied().unwrap_or(0);
            known &= l != bpe::VARIES && l != 0;
            total += usize::from(l);
            usize::from(l)
        }),
        word,
        origin,
        starts,
    );
    if known && total == word.len() {
        true
    } else {
        starts.truncate(before);
        false
    }
}

/// Push where each token of a word starts, given their lengths in bytes (which add up to the
/// word's).
#[inline]
fn push_starts(
    lens: impl Iterator<Item = usize>,
    word: &[u8],
    origin: Origin<'_>,
    starts: &mut Vec<usize>,
) {
    let mut at = 0usize;
    for len in lens {
        // A token that starts inside a character (a byte-level or byte-fallback piece of
        // it) starts where the character does, as the crate's offsets say.
        let mut first = at;
        while first > 0 && first < word.len() && (word[first] & 0xC0) == 0x80 {
            first -= 1;
        }
        starts.push(origin.at(first));
        at += len;
    }
}

/// Spaces to `▁` (`Replace(" ", "▁")`, and Metaspace's replacement), after a `▁` prefix when
/// `prefix`; with the origin of each output byte when `origins` is given (the prefix comes
/// from the text's start).
fn spaces_to_meta(
    text: &str,
    origin: Origin<'_>,
    prefix: bool,
    out: &mut String,
    origins: Option<&mut Vec<usize>>,
) {
    out.clear();
    if prefix {
        out.push('\u{2581}');
    }
    let mut from = 0;
    while let Some(i) = find_byte(b' ', &text.as_bytes()[from..]) {
        out.push_str(&text[from..from + i]);
        out.push('\u{2581}');
        from += i + 1;
    }
    out.push_str(&text[from..]);
    if let Some(origins) = origins {
        origins.clear();
        if prefix {
            origins.extend([origin.at(0); 3]);
        }
        for (i, b) in text.bytes().enumerate() {
            let n = if b == b' ' { 3 } else { 1 };
            origins.extend(std::iter::repeat_n(origin.at(i), n));
        }
    }
}

/// The first `needle` in `hay`. Words are short (a space every six bytes or so in prose), and
/// `memchr`'s setup costs more than a few words' scan, so the first 32 bytes are looked at
/// eight at a time (a byte equal to `needle` is a zero byte of `word ^ needle * 0x01..01`;
/// the lowest byte the zero-byte test flags is the first zero, as a borrow only runs upward),
/// and `memchr` searches the rest.
#[inline]
fn find_byte(needle: u8, hay: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let pattern = LO * u64::from(needle);
    let mut at = 0;
    while let Some(chunk) = hay.get(at..at + 8) {
        if at == 32 {
            return memchr::memchr(needle, &hay[at..]).map(|i| at + i);
        }
        let x = u64::from_le_bytes(chunk.try_into().expect("eight bytes")) ^ pattern;
        let zero = x.wrapping_sub(LO) & !x & HI;
        if zero != 0 {
            return Some(at + (zero.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    hay[at..].iter().position(|&b| b == needle).map(|i| at + i)
}

/// Whether NFC leaves `text` unchanged, by the quick check (Unicode 18 tables: a character
/// newer than the crate's Unicode 9 answers "no" or "maybe", and goes through [`nfc`]).
#[inline]
fn is_nfc(text: &str) -> bool {
    text.is_ascii() || is_nfc_quick(text.chars()) == IsNormalized::Yes
}

/// NFC of `text` (at `base` in the caller's text) into `out`, by the same normalization and
/// tables as the `tokenizers` crate (`unicode-normalization-alignments`, Unicode 9), and with
/// `origins` where the crate's alignments put each output byte
/// (`NormalizedString::transform`): a character that replaces original ones starts where the
/// first of them started; a character NFC adds starts where the last original character used
/// so far started.
fn nfc(text: &str, base: usize, out: &mut String, origins: Option<&mut Vec<usize>>) {
    use unicode_normalization_alignments::UnicodeNormalization as _;
    out.clear();
    let Some(origins) = origins else {
        out.extend(text.nfc().map(|(c, _)| c));
        return;
    };
    origins.clear();
    let mut original = text.char_indices().peekable();
    // The start of the last original character used.
    let mut last = 0;
    for (c, change) in text.nfc() {
        let at = if change > 0 {
            last
        } else {
            let first = original.peek().map_or(text.len(), |&(i, _)| i);
            for _ in 0..=change.unsigned_abs() {
                if let Some((i, _)) = original.next() {
                    last = i;
                }
            }
            first
        };
        out.push(c);
        origins.extend(std::iter::repeat_n(base + at, c.len_utf8()));
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The normalizer of a tokenizer.json, if the native core runs it.
fn read_normalizer(n: &Value) -> Result<Normalizer, String> {
    let is_space_to_meta = |n: &Value| {
        n["type"] == "Replace" && n["pattern"]["String"] == " " && n["content"] == "\u{2581}"
    };
    let is_prepend_meta = |n: &Value| n["type"] == "Prepend" && n["prepend"] == "\u{2581}";
    match n {
        Value::Null => Ok(Normalizer::Identity),
        n if n["type"] == "NFC" => Ok(Normalizer::Nfc),
        n if is_space_to_meta(n) => Ok(Normalizer::SpacesToMeta { prepend: false }),
        n if n["type"] == "Sequence" => {
            let list = n["normalizers"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            match list {
                [] => Ok(Normalizer::Identity),
                [one] => read_normalizer(one),
                [a, b] if is_prepend_meta(a) && is_space_to_meta(b) => {
                    Ok(Normalizer::SpacesToMeta { prepend: true })
                }
                [a, b] if is_space_to_meta(a) && is_prepend_meta(b) => {
                    Ok(Normalizer::SpacesToMeta { prepend: true })
                }
                _ => Err(format!("normalizer sequence {n} is not supported")),
            }
        }
        other => Err(format!("normalizer {} is not supported", other["type"])),
    }
}

/// The pre-tokenizer of a tokenizer.json, if the native core runs it, and the model units it
/// implies.
fn read_pre_tokenizer(p: &Value, normalizer: Normalizer) -> Result<(PreTokenizer, Units), String> {
    let byte_level_ok = |b: &Value| {
        b["type"] == "ByteLevel" && b["add_prefix_space"] == false && b["use_regex"] == false
    };
    let split = |s: &Value| -> Result<Pattern, String> {
        if s["type"] != "Split" || s["behavior"] != "Isolated" || s["invert"] != false {
            return Err(format!("pre-tokenizer {s} is not supported"));
        }
        let regex = s["pattern"]["Regex"]
            .as_str()
            .ok_or_else(|| format!("Split pattern {} is not supported", s["pattern"]))?;
        Pattern::from_regex(regex)
            .ok_or_else(|| format!("Split regex {regex:?} has no native scanner"))
    };
    let spaces_removed = matches!(normalizer, Normalizer::SpacesToMeta { .. });
    match p {
        Value::Null if spaces_removed => Ok((PreTokenizer::Whole, Units::Chars)),
        p if p["type"] == "Metaspace" && normalizer == Normalizer::Identity => {
            if p["replacement"] != "\u{2581}" || p["split"] != false {
                return Err(format!("Metaspace {p} is not supported"));
            }
            let scheme = match p["prepend_scheme"].as_str() {
                Some("always") => Prepend::Always,
                Some("first") => Prepend::First,
                Some("never") => Prepend::Never,
                _ => return Err(format!("Metaspace {p} is not supported")),
            };
            Ok((PreTokenizer::Metaspace(scheme), Units::Chars))
        }
        // Gemma: after Replace(" ", "▁") no space is left for Split(" ") to cut at.
        p if spaces_removed
            && p["type"] == "Split"
            && p["pattern"]["String"] == " "
            && p["invert"] == false =>
        {
            Ok((PreTokenizer::Whole, Units::Chars))
        }
        p if byte_level_ok(p) && !spaces_removed => {
            Ok((PreTokenizer::ByteLevel(Vec::new()), Units::Bytes))
        }
        p if p["type"] == "Sequence" && !spaces_removed => {
            let list = p["pretokenizers"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            match list.split_last() {
                Some((last, splits)) if byte_level_ok(last) => {
                    let patterns = splits.iter().map(split).collect::<Result<Vec<_>, _>>()?;
                    Ok((PreTokenizer::ByteLevel(patterns), Units::Bytes))
                }
                _ => Err(format!("pre-tokenizer sequence {p} is not supported")),
            }
        }
        other => Err(format!(
            "pre-tokenizer {} is not supported with this normalizer",
            other["type"]
        )),
    }
}

/// A BPE model as the tokenizers crate serializes it.
#[derive(serde::Deserialize)]
struct BpeJson {
    #[serde(default)]
    dropout: Option<f32>,
    #[serde(default)]
    unk_token: Option<String>,
    #[serde(default)]
    continuing_subword_prefix: Option<String>,
    #[serde(default)]
    end_of_word_suffix: Option<String>,
    #[serde(default)]
    fuse_unk: bool,
    #[serde(default)]
    byte_fallback: bool,
    #[serde(default)]
    ignore_merges: bool,
    vocab: rustc_hash::FxHashMap<String, u32>,
    merges: Vec<MergeJson>,
}

/// A tokenizer.json's BPE `model` object, read from the JSON a tokenizer is built from, for
/// [`NativeBpe::from_tokenizer_with`].
pub struct ModelJson(BpeJson);

impl ModelJson {
    /// `tokenizer_json["model"]`, when it is exactly what the tokenizers crate writes back from
    /// the model it builds out of it: a `"BPE"` model (its type named) whose vocabulary gives
    /// every id to one token and whose merges name each pair once. (The crate keeps one token
    /// per id and one rank per pair, so a file with repeats writes back otherwise.) Else None,
    /// and the model is read from the tokenizer.
    pub fn from_tokenizer_json(tokenizer_json: &Value) -> Option<Self> {
        let model = tokenizer_json.get("model")?;
        if model.get("type")?.as_str()? != "BPE" {
            return None;
        }
        let m = BpeJson::deserialize(model).ok()?;
        let top = m.vocab.values().copied().max().unwrap_or(0) as usize;
        let mut seen = vec![false; top + 1];
        for &id in m.vocab.values() {
            if std::mem::replace(&mut seen[id as usize], true) {
                return None;
            }
        }
        let mut pairs = rustc_hash::FxHashSet::default();
        pairs.reserve(m.merges.len());
        for merge in &m.merges {
            if !pairs.insert(merge.pair().ok()?) {
                return None;
            }
        }
        Some(ModelJson(m))
    }
}

/// A merge: `["a", "b"]`, or `"a b"` in older files.
enum MergeJson {
    Pair(String, String),
    Joined(String),
}

impl MergeJson {
    /// The two tokens merged; `Err` with the text of a joined merge that is not two tokens
    /// separated by one space.
    fn pair(&self) -> Result<(&str, &str), &str> {
        match self {
            MergeJson::Pair(a, b) => Ok((a, b)),
            MergeJson::Joined(s) => {
                let mut parts = s.split(' ');
                match (parts.next(), parts.next(), parts.next()) {
                    (Some(a), Some(b), None) => Ok((a, b)),
                    _ => Err(s),
                }
            }
        }
    }
}

/// Read by the JSON type it finds: `#[serde(untagged)]` would buffer each of the hundreds of
/// thousands of merges and build an error message for every one in the form it tries first.
impl<'de> serde::Deserialize<'de> for MergeJson {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = MergeJson;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(r#"a merge: ["a", "b"] or "a b""#)
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<MergeJson, E> {
                Ok(MergeJson::Joined(v.to_owned()))
            }

            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<MergeJson, E> {
                Ok(MergeJson::Joined(v))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<MergeJson, A::Error> {
                use serde::de::Error;
                let mut next = |i| {
                    seq.next_element::<String>()?
                        .ok_or_else(|| A::Error::invalid_length(i, &self))
                };
                let (a, b) = (next(0)?, next(1)?);
                match seq.next_element::<serde::de::IgnoredAny>()? {
                    None => Ok(MergeJson::Pair(a, b)),
                    Some(_) => Err(A::Error::invalid_length(3, &self)),
                }
            }
        }
        deserializer.deserialize_any(Visit)
    }
}

/// The BPE model in native form.
fn read_model(m: BpeJson, units: Units) -> Result<BpeModel, String> {
    if !(m.dropout.is_none() || m.dropout == Some(0.0)) {
        return Err("BPE dropout is not supported".into());
    }
    for (key, value) in [
        ("continuing_subword_prefix", &m.continuing_subword_prefix),
        ("end_of_word_suffix", &m.end_of_word_suffix),
    ] {
        if !value.as_deref().unwrap_or_default().is_empty() {
            return Err(format!("BPE {key} is not supported"));
        }
    }
    // Byte-level vocabularies write byte b as the character BYTE_CHARS[b]; undo it.
    let mut decode = [u16::MAX; 512];
    for (b, c) in crate::text::bytes_to_unicode().iter().enumerate() {
        decode[*c as usize] = b as u16;
    }
    let to_units = |token: &str| -> Option<Vec<u8>> {
        match units {
            Units::Chars => Some(token.as_bytes().to_vec()),
            Units::Bytes => token
                .chars()
                .map(|c| match decode.get(c as usize) {
                    Some(&b) if b != u16::MAX => Some(b as u8),
                    _ => None,
                })
                .collect(),
        }
    };
    // Tokens with characters outside the byte alphabet can never come out of text.
    let vocab: Vec<(Vec<u8>, u32)> = m
        .vocab
        .iter()
        .filter_map(|(token, &id)| Some((to_units(token)?, id)))
        .collect();
    let mut merges = Vec::with_capacity(m.merges.len());
    for merge in &m.merges {
        let (a, b) = merge
            .pair()
            .map_err(|s| format!("merge {s:?} is not two tokens"))?;
        if let (Some(a), Some(b)) = (to_units(a), to_units(b)) {
            merges.push((a, b));
        }
    }
    BpeModel::new(BpeConfig {
        units,
        vocab,
        merges,
        byte_fallback: m.byte_fallback,
        unk_token: m.unk_token.map(String::into_bytes),
        fuse_unk: m.fuse_unk,
        ignore_merges: m.ignore_merges,
    })
}

/// The added tokens, split into those matched in raw text and those matched (by their
/// normalized text, as the tokenizer's normalizer makes it) in normalized text.
fn read_added_tokens(tokenizer: &Tokenizer) -> Result<(Option<Matcher>, Option<Matcher>), String> {
    let mut decoder: Vec<(u32, tokenizers::AddedToken)> =
        tokenizer.get_added_tokens_decoder().into_iter().collect();
    decoder.sort_by_key(|(id, _)| *id);
    let mut raw = (Vec::new(), Vec::new());
    let mut normalized = (Vec::new(), Vec::new());
    for (id, t) in decoder {
        if t.content.is_empty() {
            continue;
        }
        let token = AddedToken {
            id,
            content: t.content.clone(),
            single_word: t.single_word,
            lstrip: t.lstrip,
            rstrip: t.rstrip,
            normalized: t.normalized,
        };
        if token.normalized {
            let pattern = match tokenizer.get_normalizer() {
                Some(n) => {
                    let mut s = NormalizedString::from(t.content.as_str());
                    n.normalize(&mut s).map_err(|e| e.to_string())?;
                    s.get().to_string()
                }
                None => t.content.clone(),
            };
            normalized.1.push(pattern);
            normalized.0.push(token);
        } else {
            raw.1.push(t.content.clone());
            raw.0.push(token);
        }
    }
    Ok((
        Matcher::new(raw.0, raw.1)?,
        Matcher::new(normalized.0, normalized.1)?,
    ))
}

#[cfg(test)]
mod tests;
