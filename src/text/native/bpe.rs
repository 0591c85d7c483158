//! The BPE model: a word in, its token ids out, exactly as the `tokenizers` crate's `BPE`
//! model (`models/bpe/model.rs` and `word.rs` of tokenizers 0.23) produces them.
//!
//! * A word is split into its characters (its bytes for byte-level vocabularies, whose
//!   256 single-byte tokens stand for the bytes). A character missing from the vocabulary
//!   becomes its `<0xXX>` byte tokens under `byte_fallback` (when all of them exist), else the
//!   unknown token (consecutive ones fused under `fuse_unk`), else nothing.
//! * Merges: repeatedly the adjacent pair with the lowest merge rank, the leftmost of equal
//!   ranks. Words of up to [`SHORT_WORD`] symbols scan their pairs; longer ones use a heap of
//!   candidate merges with lazy invalidation, as the crate does (O(n log n): a megabyte of one
//!   character stays fast).
//! * Byte-level words of more than [`LONGEST_FIRST`] bytes are first tokenized by their
//!   longest tokens, a result proved equal to the merges' ([`super::backtrack`]); the merges
//!   run when that search gives up.
//! * `ignore_merges`: a word that is itself in the vocabulary is that one token.
//!
//! Merge pairs are looked up by their two ids packed in one integer; vocabulary entries by
//! their bytes. Both maps use the Fx hash.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::OnceLock;

use rustc_hash::FxHashMap;

use super::backtrack::{Backtrack, BacktrackScratch};
use super::table::{InlineMap, Key, PairRanks};
use crate::text::image::{ReadResult, Reader, Writer};

/// No id.
pub const NONE: u32 = u32::MAX;
/// In [`BpeModel::token_lens`]: a token whose length in the word is not always the same.
pub const VARIES: u16 = u16::MAX;
/// Words of at most this many symbols merge by scanning their pairs.
const SHORT_WORD: usize = 64;
/// Byte-level words of more than this many bytes are tokenized by their longest tokens first
/// ([`Backtrack`]), with the merge loop when that is refused.
const LONGEST_FIRST: usize = 4;

/// What the model's symbols are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Units {
    /// Bytes: a byte-level vocabulary (GPT-2's byte-to-character mapping undone at load).
    Bytes,
    /// Unicode characters (SentencePiece-style vocabularies with `▁`).
    Chars,
}

/// A loaded BPE model.
pub struct BpeModel {
    pub units: Units,
    /// Token bytes to id (for byte-level vocabularies, the raw bytes), for tokens longer than
    /// a [`Key`] holds.
    long_vocab: FxHashMap<Box<[u8]>, u32>,
    /// The same for tokens of at most 23 bytes, looked up without touching the heap.
    short_vocab: InlineMap,
    /// Units::Bytes: the id of each single byte.
    byte_ids: [u32; 256],
    /// Units::Chars: the id of each character of the Basic Multilingual Plane (`NONE` if it
    /// is not a token), and of the others.
    bmp_ids: Vec<u32>,
    astral_ids: FxHashMap<u32, u32>,
    /// The rank of each mergeable pair of ids.
    merges: PairRanks,
    /// The id each rank's merge produces.
    merged: Vec<u32>,
    /// The ids of `<0x00>` .. `<0xFF>` when byte fallback is on (`NONE` where missing).
    byte_fallback: Option<Box<[u32; 256]>>,
    unk: Option<u32>,
    fuse_unk: bool,
    pub ignore_merges: bool,
    /// Byte-level models: the longest-token path for long words.
    backtrack: Option<Backtrack>,
    /// Built on first use: [`BpeModel::token_lens`].
    token_lens: OnceLock<Box<[u16]>>,
}

/// A symbol of a word being merged: its id and its length in bytes of the word.
#[derive(Debug, Clone, Copy)]
pub struct Symbol {
    pub id: u32,
    pub len: u32,
}

/// Reusable buffers of the merge loop.
#[derive(Default)]
pub struct Scratch {
    symbols: Vec<Symbol>,
    ranks: Vec<u32>,
    prev: Vec<u32>,
    next: Vec<u32>,
    heap: BinaryHeap<Reverse<(u32, u32)>>,
    backtrack: BacktrackScratch,
}

/// Everything needed to build a [`BpeModel`].
pub struct BpeConfig {
    pub units: Units,
    /// Token text (already in model units: raw bytes for byte-level) and id.
    pub vocab: Vec<(Vec<u8>, u32)>,
    /// Merges in rank order, as token texts.
    pub merges: Vec<(Vec<u8>, Vec<u8>)>,
    pub byte_fallback: bool,
    pub unk_token: Option<Vec<u8>>,
    pub fuse_unk: bool,
    pub ignore_merges: bool,
}

/// The character at `at` in `bytes` (valid UTF-8, `at` a character boundary): its scalar
/// value and its length in bytes, read from its lead byte without validating again.
#[inline]
pub(super) fn utf8_char(bytes: &[u8], at: usize) -> (u32, usize) {
    let lead = u32::from(bytes[at]);
    let cont = |i: usize| u32::from(bytes[at + i] & 0x3F);
    match bytes[at] {
        0x00..=0x7F => (lead, 1),
        0xC0..=0xDF => ((lead & 0x1F) << 6 | cont(1), 2),
        0xE0..=0xEF => ((lead & 0x0F) << 12 | cont(1) << 6 | cont(2), 3),
        _ => (
            (lead & 0x07) << 18 | cont(1) << 12 | cont(2) << 6 | cont(3),
            4,
        ),
    }
}

impl BpeModel {
    /// Build the model; `Err` names what the native core does not support (then the
    /// `tokenizers` crate runs instead).
    pub fn new(config: BpeConfig) -> Result<Self, String> {
        let mut vocab: FxHashMap<Box<[u8]>, u32> = FxHashMap::default();
        vocab.reserve(config.vocab.len());
        let mut max_id = 0;
        for (text, id) in &config.vocab {
            if vocab.insert(text.clone().into_boxed_slice(), *id).is_some() {
                return Err("two vocabulary entries have the same bytes".into());
            }
            max_id = max_id.max(*id);
        }
        let mut short_vocab = InlineMap::with_capacity(vocab.len());
        for (text, &id) in &vocab {
            if let Some(key) = Key::new(text) {
                short_vocab.insert(key, u64::from(id));
            }
        }
        let mut byte_ids = [NONE; 256];
        let mut bmp_ids = Vec::new();
        let mut astral_ids = FxHashMap::default();
        match config.units {
            Units::Bytes => {
                for (b, slot) in byte_ids.iter_mut().enumerate() {
                    *slot = *vocab.get(&[b as u8][..]).ok_or_else(|| {
                        format!("the byte-level vocabulary has no token for byte {b:#04x}")
                    })?;
                }
            }
            Units::Chars => {
                bmp_ids = vec![NONE; 0x1_0000];
                for (text, &id) in &vocab {
                    let Ok(s) = std::str::from_utf8(text) else {
                        continue;
                    };
                    let mut chars = s.chars();
                    if let (Some(c), None) = (chars.next(), chars.next()) {
                        if (c as u32) < 0x1_0000 {
                            bmp_ids[c as usize] = id;
                        } else {
                            astral_ids.insert(c as u32, id);
                        }
                    }
                }
            }
        }
        let mut merges: Vec<(u32, u32, u32)> = Vec::with_capacity(config.merges.len());
        let mut merged: Vec<u32> = Vec::with_capacity(config.merges.len());
        let mut joined = Vec::new();
        for (rank, (a, b)) in config.merges.iter().enumerate() {
            let id = |t: &[u8]| {
                vocab
                    .get(t)
                    .copied()
                    .ok_or_else(|| "a merge uses a token that is not in the vocabulary".to_string())
            };
            let (a_id, b_id) = (id(a)?, id(b)?);
            joined.clear();
            joined.extend_from_slice(a);
            joined.extend_from_slice(b);
            let new_id = id(&joined)?;
            // A later duplicate replaces an earlier one, as when the crate collects its map.
            merges.push((a_id, b_id, rank as u32));
            merged.push(new_id);
        }
        let merges = PairRanks::new(&merges, max_id, merged.len() as u32)
            .ok_or("the vocabulary and the merges are too large to pack")?;
        let byte_fallback = if config.byte_fallback {
            let mut ids = Box::new([NONE; 256]);
            for (b, slot) in ids.iter_mut().enumerate() {
                if let Some(&id) = vocab.get(format!("<0x{b:02X}>").as_bytes()) {
                    *slot = id;
                }
            }
            Some(ids)
        } else {
            None
        };
        let unk = match &config.unk_token {
            Some(t) => Some(
                *vocab
                    .get(t.as_slice())
                    .ok_or("the unknown token is not in the vocabulary")?,
            ),
            None => None,
        };
        vocab.retain(|text, _| Key::new(text).is_none());
        Ok(BpeModel {
            units: config.units,
            long_vocab: vocab,
            short_vocab,
            byte_ids,
            bmp_ids,
            astral_ids,
            merges,
            merged,
            byte_fallback,
            unk,
            fuse_unk: config.fuse_unk,
            ignore_merges: config.ignore_merges,
            backtrack: None,
            token_lens: OnceLock::new(),
        }
        .with_backtrack())
    }

    /// The id of a whole word, if the vocabulary has it.
    #[inline]
    pub fn token_id(&self, word: &[u8]) -> Option<u32> {
        self.token_id_keyed(word, Key::new(word))
    }

    /// [`BpeModel::token_id`] with the word's key already made (`None` for long words).
    #[inline]
    pub fn token_id_keyed(&self, word: &[u8], key: Option<Key>) -> Option<u32> {
        match key {
            Some(k) => self.short_vocab.get(k).map(|id| id as u32),
            None => self.long_vocab.get(word).copied(),
        }
    }

    /// The texts of all tokens (to find where texts may be cut into words, [`super::words`]).
    pub fn vocab_texts(&self) -> Vec<Vec<u8>> {
        self.vocab_entries().into_iter().map(|(b, _)| b).collect()
    }

    /// Every token's bytes and id.
    pub fn vocab_entries(&self) -> Vec<(Vec<u8>, u32)> {
        self.short_vocab
            .entries()
            .map(|(k, id)| (k.bytes(), id as u32))
            .chain(self.long_vocab.iter().map(|(k, &id)| (k.to_vec(), id)))
            .collect()
    }

    /// The rank of merging `left` and `right`, if they merge.
    #[inline]
    pub fn pair_rank(&self, left: u32, right: u32) -> Option<u32> {
        self.merges.get(left, right)
    }

    /// The last merge (its left id, right id and rank) of the merge loop on `bytes`, if the
    /// loop ends in the single token `id` (`bytes` has two or more units). The loop is
    /// [`BpeModel::merge_short`]'s.
    pub fn derive(
        &self,
        bytes: &[u8],
        id: u32,
        symbols: &mut Vec<Symbol>,
        ranks: &mut Vec<u32>,
    ) -> Option<(u32, u32, u32)> {
        symbols.clear();
        self.initial_symbols(bytes, symbols);
        let last = self.merge_short(symbols, ranks);
        (symbols.len() == 1 && symbols[0].id == id)
            .then_some(last)
            .flatten()
    }

    /// Write the model's tables as they are laid out (see [`crate::text::image`]).
    pub fn write(&self, w: &mut Writer) {
        self.write_layout(w, true);
    }

    /// [`BpeModel::write`], or the layout of state version 2 (without the longest-token
    /// tables) when `with_backtrack` is false.
    pub fn write_layout(&self, w: &mut Writer, with_backtrack: bool) {
        w.u8(match self.units {
            Units::Bytes => 0,
            Units::Chars => 1,
        });
        let mut long: Vec<(&[u8], u32)> = self.long_vocab.iter().map(|(k, &v)| (&**k, v)).collect();
        long.sort_unstable();
        w.len(long.len());
        for (text, id) in long {
            w.bytes(text);
            w.u32(id);
        }
        self.short_vocab.write(w);
        w.u32s(&self.byte_ids);
        w.u32s(&self.bmp_ids);
        let mut astral: Vec<(u32, u32)> = self.astral_ids.iter().map(|(&c, &id)| (c, id)).collect();
        astral.sort_unstable();
        w.u32s(
            &astral
                .iter()
                .flat_map(|&(c, id)| [c, id])
                .collect::<Vec<_>>(),
        );
        self.merges.write(w);
        w.u32s(&self.merged);
        w.option(self.byte_fallback.as_deref(), |w, ids| w.u32s(ids));
        w.option(self.unk, |w, id| w.u32(id));
        w.bool(self.fuse_unk);
        w.bool(self.ignore_merges);
        if with_backtrack {
            w.option(self.backtrack.as_ref(), |w, b| b.write(w));
        }
    }

    /// Read a model [`BpeModel::write`] wrote (`with_backtrack`: the image has the
    /// longest-token tables, as since state version 3; otherwise they are built).
    pub fn read(r: &mut Reader<'_>, with_backtrack: bool) -> ReadResult<Self> {
        let units = match r.u8()? {
            0 => Units::Bytes,
            1 => Units::Chars,
            u => return Err(format!("unknown BPE units {u}")),
        };
        let n = r.len(12)?;
        let mut long_vocab = FxHashMap::default();
        long_vocab.reserve(n);
        for _ in 0..n {
            let text: Box<[u8]> = r.bytes()?.into();
            long_vocab.insert(text, r.u32()?);
        }
        let short_vocab = InlineMap::read(r)?;
        let byte_ids: [u32; 256] = r
            .u32s()?
            .try_into()
            .map_err(|_| "the byte table does not have 256 entries".to_string())?;
        let bmp_ids = r.u32s()?;
        if !(bmp_ids.is_empty() || bmp_ids.len() == 0x1_0000) {
            return Err("the character table has an impossible size".into());
        }
        let astral = r.u32s()?;
        let astral_ids = astral.chunks_exact(2).map(|p| (p[0], p[1])).collect();
        let merges = PairRanks::read(r)?;
        let merged = r.u32s()?;
        if merges
            .max_rank()
            .is_some_and(|m| m as usize >= merged.len())
        {
            return Err("a merge rank has no merged token".into());
        }
        let byte_fallback = r.option(|r| {
            let ids: [u32; 256] = r
                .u32s()?
                .try_into()
                .map_err(|_| "the byte-fallback table does not have 256 entries".to_string())?;
            Ok(Box::new(ids))
        })?;
        let unk = r.option(Reader::u32)?;
        let mut model = BpeModel {
            units,
            long_vocab,
            short_vocab,
            byte_ids,
            bmp_ids,
            astral_ids,
            merges,
            merged,
            byte_fallback,
            unk,
            fuse_unk: r.bool()?,
            ignore_merges: r.bool()?,
            backtrack: None,
            token_lens: OnceLock::new(),
        };
        model.backtrack = if with_backtrack {
            r.option(Backtrack::read)?
        } else {
            Backtrack::build(&model)
        };
        if model.backtrack.as_ref().is_some_and(|b| !b.fits(&model)) {
            return Err("the longest-token tables do not match the vocabulary".into());
        }
        Ok(model)
    }

    /// Append the ids of `word` to `ids` and their byte lengths in `word` to `lens` (the
    /// merges; `ignore_merges` is the caller's to check first).
    pub fn encode_word(
        &self,
        word: &[u8],
        scratch: &mut Scratch,
        ids: &mut Vec<u32>,
        lens: &mut Vec<u32>,
    ) {
        if word.is_empty() {
            return;
        }
        if word.len() > LONGEST_FIRST {
            // (only byte-level models have the tables)
            if let Some(bt) = self.backtrack() {
                if bt.encode(self, word, ids, lens, &mut scratch.backtrack) {
                    return;
                }
            }
        }
        self.merge_word(word, scratch, ids, lens);
    }

    /// The model with its longest-token tables built (byte-level models).
    fn with_backtrack(mut self) -> Self {
        self.backtrack = Backtrack::build(&self);
        self
    }

    /// The longest-token path of a byte-level model.
    pub fn backtrack(&self) -> Option<&Backtrack> {
        self.backtrack.as_ref()
    }

    /// For each id, the length in bytes of the word that the token stands for wherever the
    /// model puts it out ([`BpeModel::encode_word`] and whole-word tokens), or [`VARIES`]: the
    /// word cache keeps ids only and takes token lengths from here when starts are wanted.
    ///
    /// A token's length is its text's, except for tokens that stand for other bytes: the
    /// unknown token, byte-fallback tokens, and an id that two texts share are [`VARIES`]. A
    /// byte, a character or a whole word is put out as the token of its text. A merged token
    /// stands for its two halves, so its length is known where both halves' are and its text is
    /// as long as theirs together; otherwise it is [`VARIES`] too (to a fixed point, since a
    /// merge can come before those that make its halves). By induction on the merges, every
    /// token the model puts out with a length here stands for that many bytes. Built on first
    /// use (a pass over the vocabulary and the merges).
    pub fn token_lens(&self) -> &[u16] {
        self.token_lens.get_or_init(|| self.build_token_lens())
    }

    fn build_token_lens(&self) -> Box<[u16]> {
        const ABSENT: u32 = u32::MAX;
        const MIXED: u32 = u32::MAX - 1;
        let mut lens = vec![ABSENT; self.max_id() as usize + 1];
        let texts = self
            .short_vocab
            .entries()
            .map(|(k, id)| (id as u32, k.byte_len()))
            .chain(self.long_vocab.iter().map(|(t, &id)| (id, t.len())));
        for (id, len) in texts {
            if let Some(slot) = lens.get_mut(id as usize) {
                let len = u32::try_from(len).unwrap_or(MIXED).min(MIXED);
                *slot = if *slot == ABSENT || *slot == len {
                    len
                } else {
                    MIXED
                };
            }
        }
        let other_bytes = self
            .byte_fallback
            .iter()
            .flat_map(|ids| ids.iter().copied())
            .chain(self.unk);
        for id in other_bytes {
            if let Some(slot) = lens.get_mut(id as usize) {
                *slot = MIXED;
            }
        }
        let known = |lens: &[u32], id: u32| lens.get(id as usize).copied().filter(|&l| l < MIXED);
        let mut merges: Vec<(u32, u32, u32)> = self.merges.entries().collect();
        merges.sort_unstable_by_key(|&(_, _, rank)| rank);
        loop {
            let mut changed = false;
            for &(a, b, rank) in &merges {
                let Some(&x) = self.merged.get(rank as usize) else {
                    continue;
                };
                let Some(len) = known(&lens, x) else {
                    continue;
                };
                let halves = known(&lens, a)
                    .zip(known(&lens, b))
                    .and_then(|(la, lb)| la.checked_add(lb));
                if halves != Some(len) {
                    lens[x as usize] = MIXED;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        lens.into_iter()
            .map(|l| {
                u16::try_from(l)
                    .ok()
                    .filter(|&l| l != VARIES)
                    .unwrap_or(VARIES)
            })
            .collect()
    }

    /// The largest token id.
    pub fn max_id(&self) -> u32 {
        self.short_vocab
            .entries()
            .map(|(_, id)| id as u32)
            .chain(self.long_vocab.values().copied())
            .max()
            .unwrap_or(0)
    }

    /// The token of a byte (byte-level models; `NONE` for others).
    #[inline]
    pub fn byte_id(&self, b: u8) -> u32 {
        self.byte_ids[b as usize]
    }

    /// [`BpeModel::encode_word`] by the merge loop alone.
    pub fn merge_word(
        &self,
        word: &[u8],
        scratch: &mut Scratch,
        ids: &mut Vec<u32>,
        lens: &mut Vec<u32>,
    ) {
        let mut symbols = std::mem::take(&mut scratch.symbols);
        symbols.clear();
        self.initial_symbols(word, &mut symbols);
        if symbols.len() <= SHORT_WORD {
            self.merge_short(&mut symbols, &mut scratch.ranks);
        } else {
            self.merge_long(&mut symbols, scratch);
        }
        ids.extend(symbols.iter().map(|s| s.id));
        lens.extend(symbols.iter().map(|s| s.len));
        scratch.symbols = symbols;
    }

    /// The word's characters as symbols (`merge_word` before its merge loop).
    fn initial_symbols(&self, word: &[u8], symbols: &mut Vec<Symbol>) {
        match self.units {
            Units::Bytes => symbols.extend(word.iter().map(|&b| Symbol {
                id: self.byte_ids[b as usize],
                len: 1,
            })),
            Units::Chars => {
                // (unknown id, bytes covered) not yet pushed
                let mut unk: Option<(u32, u32)> = None;
                // A word is a slice of a `str` cut at character boundaries: its characters
                // are read from their lead bytes, without validating the word again.
                let mut at = 0;
                while at < word.len() {
                    let (c, len) = utf8_char(word, at);
                    let bytes = &word[at..at + len];
                    at += len;
                    let len = len as u32;
                    let id = if c < 0x1_0000 {
                        self.bmp_ids[c as usize]
                    } else {
                        self.astral_ids.get(&c).copied().unwrap_or(NONE)
                    };
                    if id != NONE {
                        if let Some((u, l)) = unk.take() {
                            symbols.push(Symbol { id: u, len: l });
                        }
                        symbols.push(Symbol { id, len });
                        continue;
                    }
                    if let Some(fallback) = &self.byte_fallback {
                        if bytes.iter().all(|&b| fallback[b as usize] != NONE) {
                            // The crate pushes a pending unknown token only before a known
                            // character, not before byte-fallback tokens.
                            symbols.extend(bytes.iter().map(|&b| Symbol {
                                id: fallback[b as usize],
                                len: 1,
                            }));
                            continue;
                        }
                    }
                    if let Some(unk_id) = self.unk {
                        unk = match (unk, self.fuse_unk) {
                            (Some((u, l)), true) => Some((u, l + len)),
                            (Some((u, l)), false) => {
                                symbols.push(Symbol { id: u, len: l });
                                Some((unk_id, len))
                            }
                            (None, _) => Some((unk_id, len)),
                        };
                    }
                }
                if let Some((u, l)) = unk {
                    symbols.push(Symbol { id: u, len: l });
                }
            }
        }
    }

    /// The rank of merging the pair, or `u32::MAX` if it does not merge.
    #[inline]
    fn rank_of(&self, left: u32, right: u32) -> u32 {
        self.merges.get(left, right).unwrap_or(u32::MAX)
    }

    /// Merge a short word: find the lowest-ranked pair, leftmost first, merge, repeat. Returns
    /// the last merge made (its left id, right id and rank).
    fn merge_short(
        &self,
        symbols: &mut Vec<Symbol>,
        ranks: &mut Vec<u32>,
    ) -> Option<(u32, u32, u32)> {
        let mut last = None;
        if symbols.len() < 2 {
            return last;
        }
        ranks.clear();
        ranks.extend(symbols.windows(2).map(|w| self.rank_of(w[0].id, w[1].id)));
        loop {
            let mut best = u32::MAX;
            let mut at = 0;
            for (i, &r) in ranks.iter().enumerate() {
                if r < best {
                    best = r;
                    at = i;
                }
            }
            if best == u32::MAX {
                break;
            }
            last = Some((symbols[at].id, symbols[at + 1].id, best));
            let merged = Symbol {
                id: self.merged[best as usize],
                len: symbols[at].len + symbols[at + 1].len,
            };
            symbols[at] = merged;
            symbols.remove(at + 1);
            ranks.remove(at);
            if at + 1 < symbols.len() {
                ranks[at] = self.rank_of(merged.id, symbols[at + 1].id);
            }
            if at > 0 {
                ranks[at - 1] = self.rank_of(symbols[at - 1].id, merged.id);
            }
        }
        last
    }

    /// Merge a long word with a heap of candidate merges ordered by (rank, position), skipping
    /// candidates that no longer apply, as `Word::merge_all` does (a candidate applies if the
    /// pair now at its position still merges into the same token).
    fn merge_long(&self, symbols: &mut Vec<Symbol>, scratch: &mut Scratch) {
        let n = symbols.len();
        let (prev, next, heap) = (&mut scratch.prev, &mut scratch.next, &mut scratch.heap);
        prev.clear();
        next.clear();
        heap.clear();
        prev.extend((0..n as u32).map(|i| i.wrapping_sub(1)));
        next.extend(1..=n as u32);
        for i in 0..n - 1 {
            let r = self.rank_of(symbols[i].id, symbols[i + 1].id);
            if r != u32::MAX {
                heap.push(Reverse((r, i as u32)));
            }
        }
        while let Some(Reverse((rank, pos))) = heap.pop() {
            let pos = pos as usize;
            if symbols[pos].len == 0 {
                continue;
            }
            let right = next[pos] as usize;
            if right >= n {
                continue;
            }
            let current = self.rank_of(symbols[pos].id, symbols[right].id);
            if current == u32::MAX {
                continue;
            }
            let new_id = self.merged[rank as usize];
            if current != rank && self.merged[current as usize] != new_id {
                continue;
            }
            symbols[pos].id = new_id;
            symbols[pos].len += symbols[right].len;
            symbols[right].len = 0;
            next[pos] = next[right];
            if (next[pos] as usize) < n {
                prev[next[pos] as usize] = pos as u32;
            }
            let before = prev[pos];
            if before != u32::MAX {
                let r = self.rank_of(symbols[before as usize].id, new_id);
                if r != u32::MAX {
                    heap.push(Reverse((r, before)));
                }
            }
            let after = next[pos] as usize;
            if after < n {
                let r = self.rank_of(new_id, symbols[after].id);
                if r != u32::MAX {
                    heap.push(Reverse((r, pos as u32)));
                }
            }
        }
        symbols.retain(|s| s.len != 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(units: Units, vocab: &[&str], merges: &[(&str, &str)]) -> BpeModel {
        BpeModel::new(BpeConfig {
            units,
            vocab: vocab
                .iter()
                .enumerate()
                .map(|(i, t)| (t.as_bytes().to_vec(), i as u32))
                .collect(),
            merges: merges
                .iter()
                .map(|(a, b)| (a.as_bytes().to_vec(), b.as_bytes().to_vec()))
                .collect(),
            byte_fallback: true,
            unk_token: Some(b"<unk>".to_vec()),
            fuse_unk: true,
            ignore_merges: false,
        })
        .unwrap()
    }

    fn encode(m: &BpeModel, word: &str) -> Vec<u32> {
        let (mut ids, mut lens) = (Vec::new(), Vec::new());
        m.encode_word(
            word.as_bytes(),
            &mut Scratch::default(),
            &mut ids,
            &mut lens,
        );
        assert_eq!(lens.iter().sum::<u32>() as usize, word.len());
        ids
    }

    #[test]
    fn short_and_long_words_merge_alike() {
        let m = model(
            Units::Chars,
            &["<unk>", "a", "b", "ab", "aa", "aaaa", "<0x63>"],
            &[("a", "a"), ("a", "b"), ("aa", "aa")],
        );
        // Leftmost first among equal ranks: "aaa" -> "aa" "a".
        assert_eq!(encode(&m, "aaa"), vec![4, 1]);
        assert_eq!(encode(&m, "aaaab"), vec![5, 2]);
        // Byte fallback for "c", the unknown token for "d" and "e" fused.
        assert_eq!(encode(&m, "acdeb"), vec![1, 6, 0, 2]);
        let long: String = "aab".repeat(40);
        let short_ids: Vec<u32> = (0..40).flat_map(|_| encode(&m, "aab")).collect();
        assert_eq!(encode(&m, &long), short_ids);
    }

    /// Token lengths: a token's text's, except where the token stands for other bytes, and
    /// then also for every token merged from it, in whatever order the merges come.
    #[test]
    fn token_lengths_are_known_only_where_they_cannot_vary() {
        let m = model(
            Units::Chars,
            &[
                "<unk>", "a", "b", "ab", "aa", "aaaa", "<0x63>", "<0x63>a", "<0x63>ab", "bab",
            ],
            &[
                ("<0x63>a", "b"),
                ("a", "a"),
                ("a", "b"),
                ("aa", "aa"),
                ("<0x63>", "a"),
                ("b", "ab"),
            ],
        );
        let lens = m.token_lens();
        let known: Vec<Option<u16>> = lens.iter().map(|&l| (l != VARIES).then_some(l)).collect();
        assert_eq!(
            known,
            [
                None,
                Some(1),
                Some(1),
                Some(2),
                Some(2),
                Some(4),
                None,
                None,
                None,
                Some(3)
            ]
        );
        // What merging gives: "c" falls back to <0x63>, which merges with "a" into a token of
        // 7 text bytes standing for 2.
        let (mut ids, mut word_lens) = (Vec::new(), Vec::new());
        m.encode_word(b"ca", &mut Scratch::default(), &mut ids, &mut word_lens);
        assert_eq!((ids, word_lens), (vec![7], vec![2]));
        // An id two texts share has no one length.
        let shared = BpeModel::new(BpeConfig {
            units: Units::Bytes,
            vocab: (0..=255u8)
                .map(|b| (vec![b], u32::from(b)))
                .chain([(b"xy".to_vec(), 256), (b"xyz".to_vec(), 256)])
                .collect(),
            merges: vec![],
            byte_fallback: false,
            unk_token: None,
            fuse_unk: false,
            ignore_merges: false,
        })
        .unwrap();
        assert_eq!(shared.token_lens()[256], VARIES);
        assert_eq!(shared.token_lens()[b'x' as usize], 1);
    }
}
