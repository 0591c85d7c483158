//! An exact SentencePiece BPE encoder: `.model` file in, the ids of
//! `SentencePieceProcessor(model_file=...).encode(text)` out.
//!
//! It follows the C++ sources of `google/sentencepiece`, and where the `sentencepiece` 0.2.3
//! wheel (the reference of the tests) behaves differently from those sources, the wheel:
//!
//! * `src/sentencepiece_model.proto`: the model is a serialized `ModelProto`. It is read with a
//!   minimal protobuf wire-format decoder (module `proto`); fields it does not need are skipped.
//! * `src/model_interface.cc` (`InitializePieces`): NORMAL, USER_DEFINED and UNUSED pieces form
//!   the merge dictionary; CONTROL, UNKNOWN and BYTE pieces are looked up only by
//!   [`SentencePieceBpe::piece_to_id`]. The load-time checks are the wheel's: one `<unk>`, 256
//!   byte pieces with `byte_fallback`, no empty or NUL-holding piece (a piece that is exactly
//!   `"\0"` is kept as UNUSED under byte fallback), no text twice whatever the types.
//! * `src/normalizer.cc` (`Normalizer::Normalize`): without a precompiled charsmap (the
//!   `identity` rule) normalization only adds the dummy prefix `▁` (U+2581) and replaces every
//!   ASCII space with `▁`; `remove_extra_whitespaces`, `escape_whitespaces` and
//!   `treat_whitespace_as_suffix` are honoured too. An empty input encodes to nothing.
//! * `src/bpe_model.cc` (`Model::SampleEncode` with `alpha = 0`): the normalized text is split
//!   into characters, except that the longest USER_DEFINED piece starting at a symbol becomes
//!   one frozen symbol that never merges. Every adjacent pair whose concatenation is in the
//!   dictionary goes into a max-heap ordered by the piece's score, ties going to the leftmost
//!   pair; stale entries are skipped when popped (lazy invalidation), and each merge adds the
//!   two new pairs around the merged symbol. The scores compare in IEEE total order (the wheel
//!   ranks `-0.0` below `0.0` and a NaN above `+inf`, where the sources compared floats).
//!   Merged symbols that are UNUSED pieces are split again into the two symbols they were
//!   built from (`rev_merge`), recursively.
//! * `src/sentencepiece_processor.cc` (`PopulateSentencePieceText`): a symbol without a
//!   dictionary piece is `<unk>`, and so (in the wheel) is a character whose piece is UNUSED or
//!   CONTROL; it becomes its UTF-8 bytes as `<0xXX>` pieces when `byte_fallback` is on, else a
//!   run of them becomes one `<unk>`.
//!
//! Speed, with the same output: sentencepiece merges over the whole text at once. When no
//! dictionary piece holds a `▁` right after another character (true of Llama 2's and Mistral's
//! vocabularies), no merge can cross the start of a `▁` run, so the text is cut there into
//! words that are encoded one by one: short words by scanning their few pairs, longer ones
//! with the heap, and (with byte fallback) through a per-thread cache of word ids. Pairs of
//! dictionary pieces are looked up by their two ids in a table built at load time, so the
//! merge loop hashes integers instead of strings.
//!
//! Unigram, word and char models, models with a precompiled normalization charsmap, and
//! byte-fallback models without an UNKNOWN piece (which the wheel accepts) are refused with
//! [`Error::Load`].

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use crate::error::{Error, Result};

/// The whitespace meta symbol `▁` (U+2581) in UTF-8.
const SPACE_SYMBOL: &[u8] = "\u{2581}".as_bytes();
/// `kMaxPieceSize` of `model_interface.cc`: pieces must be shorter than this many bytes.
const MAX_PIECE_BYTES: usize = 8000;
/// The most pieces sentencepiece 0.2.3 loads.
const MAX_VOCAB: usize = 16_000_000;
/// No id (a symbol whose id is not known yet).
const NO_ID: u32 = u32::MAX;

/// The type of a piece (`ModelProto.SentencePiece.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PieceType {
    Normal = 1,
    Unknown = 2,
    Control = 3,
    UserDefined = 4,
    Unused = 5,
    Byte = 6,
}

impl PieceType {
    fn from_i32(v: i32) -> Option<Self> {
        Some(match v {
            1 => PieceType::Normal,
            2 => PieceType::Unknown,
            3 => PieceType::Control,
            4 => PieceType::UserDefined,
            5 => PieceType::Unused,
            6 => PieceType::Byte,
            _ => return None,
        })
    }

    /// Whether the piece goes into the merge dictionary (`pieces_`) rather than the reserved map.
    fn in_dictionary(self) -> bool {
        matches!(
            self,
            PieceType::Normal | PieceType::UserDefined | PieceType::Unused
        )
    }
}

/// A fast, non-cryptographic hasher for the short byte strings of the piece maps.
#[derive(Default, Clone, Copy)]
struct PieceHasher(u64);

const HASH_K: u64 = 0x9E37_79B9_7F4A_7C15;

impl PieceHasher {
    #[inline]
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(HASH_K);
    }
}

impl Hasher for PieceHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // Fold the well-mixed high bits into the low ones, which pick the bucket.
        let h = self.0;
        (h ^ (h >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ (h >> 32)
    }
}

type PieceMap<V> = HashMap<Box<[u8]>, V, BuildHasherDefault<PieceHasher>>;

/// A hasher for integer keys (one multiply; the table's top bits come from the product).
#[derive(Default, Clone, Copy)]
struct IntHasher(u64);

impl Hasher for IntHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(HASH_K);
        }
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(HASH_K);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }
}

/// The UTF-8 bytes of a single character packed into an integer, or `None` when `piece` is
/// not exactly one character.
#[inline]
fn char_key(piece: &[u8]) -> Option<u32> {
    let first = *piece.first()?;
    if piece.len() != char_len(first) {
        return None;
    }
    let mut key = [0u8; 4];
    key[..piece.len()].copy_from_slice(piece);
    Some(u32::from_le_bytes(key))
}

/// Whether `piece` holds the whitespace symbol `space` right after some other character (then
/// it could span the cut between two words).
pub(crate) fn has_space_after_other(piece: &[u8], space: &[u8]) -> bool {
    let mut pos = 0;
    let mut prev_other = false;
    while pos < piece.len() {
        if piece[pos..].starts_with(space) {
            if prev_other {
                return true;
            }
            pos += space.len();
        } else {
            prev_other = true;
            pos += char_len(piece[pos]);
        }
    }
    false
}

/// Source of [`SentencePieceBpe::cache_key`].
static NEXT_CACHE_KEY: AtomicU64 = AtomicU64::new(0);
/// Words a thread's cache holds for one model (about 50 bytes each).
const CACHE_WORDS: usize = 1 << 16;
/// Spans up to this many bytes go through [`SentencePieceBpe::bpe_small`].
const SMALL_SPAN: usize = 32;
/// Models whose word caches a thread keeps.
const CACHED_MODELS: usize = 4;

/// A normalized word of at most 23 bytes: its bytes, zero-padded, with the length last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WordKey([u64; 3]);

impl WordKey {
    /// The key of `word`, or `None` when it is too long to cache.
    #[inline]
    fn new(word: &[u8]) -> Option<Self> {
        if word.len() > 23 {
            return None;
        }
        let mut b = [0u8; 24];
        b[..word.len()].copy_from_slice(word);
        b[23] = word.len() as u8;
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        Some(WordKey([word(0), word(1), word(2)]))
    }
}

impl std::hash::Hash for WordKey {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0[0]);
        state.write_u64(self.0[1]);
        state.write_u64(self.0[2]);
    }
}

/// Normalized words and their ids: the ids of all words in one buffer.
#[derive(Default)]
struct WordCache {
    /// Word to (offset, count) in `ids`.
    words: HashMap<WordKey, (u32, u32), BuildHasherDefault<IntHasher>>,
    ids: Vec<u32>,
}

impl WordCache {
    #[inline]
    fn get(&self, key: WordKey) -> Option<&[u32]> {
        let &(offset, count) = self.words.get(&key)?;
        self.ids.get(offset as usize..(offset + count) as usize)
    }

    /// Remember the ids of a word; a full cache keeps what it has (the frequent words come
    /// early).
    fn insert(&mut self, key: WordKey, ids: &[u32]) {
        if self.words.len() >= CACHE_WORDS || self.ids.len() + ids.len() > u32::MAX as usize {
            return;
        }
        let offset = self.ids.len() as u32;
        self.ids.extend_from_slice(ids);
        self.words.insert(key, (offset, ids.len() as u32));
    }
}

/// A piece of the merge dictionary (`pieces_` in `model_interface.cc`).
#[derive(Debug, Clone, Copy)]
struct DictEntry {
    /// The score as an order-preserving integer (see [`score_key`]).
    score: u32,
    /// The piece's id.
    id: u32,
}

/// Maps a score to an integer with the order the `sentencepiece` library merges by: the IEEE
/// total order of the `float` (so `-0.0` ranks below `0.0`, and a positive NaN above `+inf`;
/// measured against sentencepiece 0.2.3, whose older sources compared plain floats).
fn score_key(score: f32) -> u32 {
    let bits = score.to_bits();
    if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    }
}

/// The byte value of a byte piece `<0xXX>` (upper-case hex, as `ByteToPiece` writes it).
fn piece_to_byte(piece: &[u8]) -> Option<u8> {
    fn hex(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
    match piece {
        [b'<', b'0', b'x', h, l, b'>'] => Some(hex(*h)? * 16 + hex(*l)?),
        _ => None,
    }
}

/// Byte length of the UTF-8 character that starts with `lead` (`string_util::OneCharLen`).
#[inline]
fn char_len(lead: u8) -> usize {
    match lead >> 4 {
        0xF => 4,
        0xE => 3,
        0xC | 0xD => 2,
        _ => 1,
    }
}

/// A SentencePiece BPE model that encodes text exactly as the `sentencepiece` library does.
///
/// Load it with [`SentencePieceBpe::from_file`] or [`SentencePieceBpe::from_bytes`]; it is
/// immutable afterwards and can be shared between threads. Each thread that encodes keeps a
/// cache of word ids for the last few models it used (at most 65,536 words, a few MB, each).
pub struct SentencePieceBpe {
    /// Piece texts by id.
    pieces: Vec<Box<str>>,
    /// Piece types by id.
    types: Vec<PieceType>,
    /// NORMAL, USER_DEFINED and UNUSED pieces.
    dict: PieceMap<DictEntry>,
    /// CONTROL, UNKNOWN and BYTE pieces.
    reserved: PieceMap<u32>,
    /// The USER_DEFINED pieces, matched whole (longest first) before anything else.
    user_defined: HashSet<Box<[u8]>, BuildHasherDefault<PieceHasher>>,
    /// Which bytes start a USER_DEFINED piece.
    user_defined_first: [bool; 256],
    /// The distinct lengths of the USER_DEFINED pieces, longest first.
    user_defined_lens: Vec<usize>,
    /// The longest dictionary piece in bytes: longer concatenations need no lookup.
    max_piece_len: usize,
    /// Ids of the single-character dictionary pieces below U+0080.
    ascii_ids: [u32; 128],
    /// Ids of the other single-character dictionary pieces, by their UTF-8 bytes.
    char_ids: HashMap<u32, u32, BuildHasherDefault<IntHasher>>,
    /// Every way to build a dictionary piece from two dictionary pieces:
    /// `(left id << 32) | right id` to the merged piece.
    pairs: HashMap<u64, Merge, BuildHasherDefault<IntHasher>>,
    /// The text can be cut before every whitespace symbol that follows another character and
    /// each part encoded alone (no dictionary piece spans such a cut, and no UNUSED piece needs
    /// the whole text's `rev_merge`).
    split_words: bool,
    /// Identifies this model in the per-thread word caches.
    cache_key: u64,
    /// The id of each `<0xXX>` piece, when `byte_fallback` is on.
    byte_ids: Option<Box<[u32; 256]>>,
    /// The UNKNOWN piece.
    unk_id: u32,
    bos_id: Option<u32>,
    eos_id: Option<u32>,
    /// Whether any dictionary piece is UNUSED (re-segmentation is needed).
    has_unused: bool,
    add_dummy_prefix: bool,
    remove_extra_whitespaces: bool,
    escape_whitespaces: bool,
    treat_whitespace_as_suffix: bool,
}

impl std::fmt::Debug for SentencePieceBpe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentencePieceBpe")
            .field("vocab_size", &self.pieces.len())
            .field("unk_id", &self.unk_id)
            .field("bos_id", &self.bos_id)
            .field("eos_id", &self.eos_id)
            .field("byte_fallback", &self.byte_ids.is_some())
            .field("user_defined", &self.user_defined.len())
            .finish()
    }
}

fn load_err(msg: impl std::fmt::Display) -> Error {
    Error::Load(format!("sentencepiece model: {msg}"))
}

impl SentencePieceBpe {
    /// Load a SentencePiece `.model` file (a serialized `sentencepiece.ModelProto`).
    ///
    /// Fails with [`Error::Load`] when the file cannot be read, is not a valid model, or is a
    /// model this encoder does not implement (not BPE, or with a precompiled charsmap).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path)
            .map_err(|e| Error::Load(format!("cannot read {}: {e}", path.display())))?;
        Self::from_bytes(&bytes).map_err(|e| match e {
            Error::Load(msg) => Error::Load(format!("{}: {msg}", path.display())),
            other => other,
        })
    }

    /// Load a model from the bytes of a `.model` file.
    ///
    /// Fails with [`Error::Load`] as [`SentencePieceBpe::from_file`] does.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let model = proto::parse_model(bytes).map_err(load_err)?;
        Self::build(model)
    }

    fn build(model: proto::Model<'_>) -> Result<Self> {
        let trainer = &model.trainer;
        match trainer.model_type {
            2 => {}
            t => {
                let name = match t {
                    1 => "UNIGRAM",
                    3 => "WORD",
                    4 => "CHAR",
                    _ => "unknown",
                };
                return Err(load_err(format!(
                    "model_type {t} ({name}) is not supported; only BPE (2) models are"
                )));
            }
        }
        if model.normalizer.precompiled_charsmap_len > 0 {
            return Err(load_err(format!(
                "the normalizer {:?} has a precompiled charsmap ({} bytes); only the identity \
                 normalization is supported",
                String::from_utf8_lossy(model.normalizer.name),
                model.normalizer.precompiled_charsmap_len
            )));
        }
        if model.pieces.len() > MAX_VOCAB {
            return Err(load_err(format!(
                "{} pieces is more than the {MAX_VOCAB} sentencepiece accepts",
                model.pieces.len()
            )));
        }

        let n = model.pieces.len();
        let mut pieces = Vec::with_capacity(n);
        let mut types = Vec::with_capacity(n);
        let mut dict: PieceMap<DictEntry> = PieceMap::default();
        dict.reserve(n);
        let mut reserved: PieceMap<u32> = PieceMap::default();
        let mut user_defined: HashSet<Box<[u8]>, BuildHasherDefault<PieceHasher>> =
            HashSet::default();
        let mut unk_id: Option<u32> = None;
        let mut byte_ids = [NO_ID; 256];
        let mut has_unused = false;
        let mut max_piece_len = 0;

        for (i, p) in model.pieces.iter().enumerate() {
            let id = i as u32;
            if p.piece.len() >= MAX_PIECE_BYTES {
                return Err(load_err(format!("piece {i} is too long")));
            }
            if p.piece.is_empty() {
                return Err(load_err(format!("piece {i} is empty")));
            }
            // sentencepiece 0.2.3 keeps a piece that is exactly "\0" as UNUSED when byte
            // fallback is on (the byte piece <0x00> covers it); any other NUL is an error.
            let kind = if p.piece == b"\0" && trainer.byte_fallback {
                PieceType::Unused
            } else if p.piece.contains(&0) {
                return Err(load_err(format!("piece {i} holds a NUL character")));
            } else {
                p.kind
            };
            let text = std::str::from_utf8(p.piece)
                .map_err(|_| load_err(format!("piece {i} is not valid UTF-8")))?;
            // One text, one piece: sentencepiece 0.2.3 refuses a text that appears twice, even
            // with types that go to different maps.
            let duplicate = if kind.in_dictionary() {
                let entry = DictEntry {
                    score: score_key(p.score),
                    id,
                };
                max_piece_len = max_piece_len.max(p.piece.len());
                has_unused |= kind == PieceType::Unused;
                dict.insert(p.piece.into(), entry).is_some() || reserved.contains_key(p.piece)
            } else {
                reserved.insert(p.piece.into(), id).is_some() || dict.contains_key(p.piece)
            };
            if duplicate {
                return Err(load_err(format!("{text:?} is already defined")));
            }
            match kind {
                PieceType::UserDefined => {
                    user_defined.insert(p.piece.into());
                }
                PieceType::Unknown => {
                    if unk_id.is_some() {
                        return Err(load_err("unk is already defined"));
                    }
                    unk_id = Some(id);
                }
                PieceType::Byte => {
                    if !trainer.byte_fallback {
                        return Err(load_err(format!(
                            "byte piece {text} is found although `byte_fallback` is false"
                        )));
                    }
                    match piece_to_byte(p.piece) {
                        Some(b) => byte_ids[b as usize] = id,
                        None => return Err(load_err(format!("byte piece {text} is invalid"))),
                    }
                }
                _ => {}
            }
            pieces.push(Box::<str>::from(text));
            types.push(kind);
        }
        // sentencepiece 0.2.3 accepts a byte-fallback model without one (its `unk_id()` is then
        // -1); this encoder's API always has an `<unk>` id, so it refuses such models.
        let unk_id =
            unk_id.ok_or_else(|| load_err("unk is not defined (no piece of type UNKNOWN)"))?;
        let byte_ids = if trainer.byte_fallback {
            if byte_ids.contains(&NO_ID) {
                return Err(load_err(
                    "there are not 256 byte pieces although `byte_fallback` is true",
                ));
            }
            Some(Box::new(byte_ids))
        } else {
            None
        };
        let mut user_defined_first = [false; 256];
        let mut user_defined_lens: Vec<usize> = Vec::new();
        for p in &user_defined {
            user_defined_first[p[0] as usize] = true;
            if !user_defined_lens.contains(&p.len()) {
                user_defined_lens.push(p.len());
            }
        }
        user_defined_lens.sort_unstable_by(|a, b| b.cmp(a));

        // Single characters and pairs of pieces, so that the merge loop looks up integers.
        let mut ascii_ids = [NO_ID; 128];
        let mut char_ids: HashMap<u32, u32, BuildHasherDefault<IntHasher>> = HashMap::default();
        let mut pairs: HashMap<u64, Merge, BuildHasherDefault<IntHasher>> = HashMap::default();
        pairs.reserve(2 * dict.len());
        for (piece, entry) in &dict {
            if let Some(key) = char_key(piece) {
                match piece[..] {
                    [b] if b < 0x80 => ascii_ids[b as usize] = entry.id,
                    _ => {
                        char_ids.insert(key, entry.id);
                    }
                }
                continue;
            }
            let merge = Merge {
                score: entry.score,
                id: entry.id,
            };
            let mut cut = char_len(piece[0]);
            while cut < piece.len() {
                if let Some(l) = dict.get(&piece[..cut]) {
                    if let Some(r) = dict.get(&piece[cut..]) {
                        pairs.insert(u64::from(l.id) << 32 | u64::from(r.id), merge);
                    }
                }
                cut += char_len(piece[cut]);
            }
        }
        let space: &[u8] = if model.normalizer.escape_whitespaces {
            SPACE_SYMBOL
        } else {
            b" "
        };
        let split_words =
            !has_unused && !dict.keys().any(|piece| has_space_after_other(piece, space));

        let mut this = SentencePieceBpe {
            pieces,
            types,
            dict,
            reserved,
            user_defined,
            user_defined_first,
            user_defined_lens,
            max_piece_len,
            ascii_ids,
            char_ids,
            pairs,
            split_words,
            cache_key: NEXT_CACHE_KEY.fetch_add(1, AtomicOrdering::Relaxed),
            byte_ids,
            unk_id,
            bos_id: None,
            eos_id: None,
            has_unused,
            add_dummy_prefix: model.normalizer.add_dummy_prefix,
            remove_extra_whitespaces: model.normalizer.remove_extra_whitespaces,
            escape_whitespaces: model.normalizer.escape_whitespaces,
            treat_whitespace_as_suffix: trainer.treat_whitespace_as_suffix,
        };
        // `SentencePieceProcessor::bos_id()`: the id of `bos_piece` if it is a CONTROL piece.
        let control = |this: &Self, piece: Option<&[u8]>, default: &str| {
            let piece = piece
                .filter(|p| !p.is_empty())
                .unwrap_or(default.as_bytes());
            let id = this.lookup(piece);
            this.is_control(id).then_some(id)
        };
        this.bos_id = control(&this, trainer.bos_piece, "<s>");
        this.eos_id = control(&this, trainer.eos_piece, "</s>");
        Ok(this)
    }

    /// `ModelInterface::PieceToId`: the piece's id, else `<unk>`.
    fn lookup(&self, piece: &[u8]) -> u32 {
        if let Some(e) = self.dict.get(piece) {
            return e.id;
        }
        self.reserved.get(piece).copied().unwrap_or(self.unk_id)
    }

    /// The id of a symbol of the merge loop: its dictionary piece, else `<unk>` (a character
    /// whose piece is CONTROL counts as unknown, as in sentencepiece 0.2.3).
    #[inline]
    fn symbol_id(&self, piece: &[u8]) -> u32 {
        self.dict.get(piece).map_or(self.unk_id, |e| e.id)
    }

    /// The id of the piece whose text is `piece` (of any type), or `None` when there is none
    /// (where sentencepiece's `PieceToId` answers the `<unk>` id).
    pub fn piece_to_id(&self, piece: &str) -> Option<u32> {
        let piece = piece.as_bytes();
        if let Some(&id) = self.reserved.get(piece) {
            return Some(id);
        }
        self.dict.get(piece).map(|e| e.id)
    }

    /// The text of piece `id`, or `None` when `id` is out of range.
    pub fn id_to_piece(&self, id: u32) -> Option<&str> {
        self.pieces.get(id as usize).map(|p| &**p)
    }

    /// The number of pieces (ids are `0..vocab_size()`).
    pub fn vocab_size(&self) -> usize {
        self.pieces.len()
    }

    /// The beginning-of-sentence id: the id of the trainer's `bos_piece` (`<s>` by default)
    /// when that is a CONTROL piece, as `SentencePieceProcessor::bos_id()` answers.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos_id
    }

    /// The end-of-sentence id: the id of the trainer's `eos_piece` (`</s>` by default) when
    /// that is a CONTROL piece.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos_id
    }

    /// The id of the (only) UNKNOWN piece.
    pub fn unk_id(&self) -> u32 {
        self.unk_id
    }

    /// Whether piece `id` is of type CONTROL.
    pub fn is_control(&self, id: u32) -> bool {
        self.types.get(id as usize) == Some(&PieceType::Control)
    }

    /// Whether piece `id` is of type BYTE (`<0xNN>`, with `byte_fallback`).
    pub fn is_byte(&self, id: u32) -> bool {
        self.types.get(id as usize) == Some(&PieceType::Byte)
    }

    /// Whether `decode` removes the space the encoder put before the text (`add_dummy_prefix`
    /// or `remove_extra_whitespaces`, as sentencepiece's `DecodeSentencePiece` asks).
    pub fn strips_first_space(&self) -> bool {
        self.add_dummy_prefix || self.remove_extra_whitespaces
    }

    /// Append the ids sentencepiece's `encode(text)` gives.
    ///
    /// Default options: no `<s>`/`</s>`, no sampling. Never panics; the output for every
    /// string is the one the `sentencepiece` library gives.
    pub fn encode(&self, text: &str, ids: &mut Vec<u32>) {
        if text.is_empty() {
            return;
        }
        let run = |scratch: &mut Scratch, ids: &mut Vec<u32>| {
            let mut normalized = std::mem::take(&mut scratch.normalized);
            self.normalize(text, &mut normalized);
            self.encode_normalized(&normalized, scratch, ids);
            scratch.normalized = normalized;
            scratch.trim();
        };
        let done = SCRATCH
            .try_with(|cell| match cell.try_borrow_mut() {
                Ok(mut scratch) => {
                    run(&mut scratch, ids);
                    true
                }
                Err(_) => false,
            })
            .unwrap_or(false);
        if !done {
            run(&mut Scratch::default(), ids);
        }
    }

    /// Encode normalized text: word by word (through the cache) when the model allows it,
    /// else as one sequence.
    fn encode_normalized(&self, text: &[u8], scratch: &mut Scratch, ids: &mut Vec<u32>) {
        let mut prev_unknown = false;
        if !self.split_words {
            self.encode_span(text, scratch, &mut prev_unknown, ids);
            return;
        }
        let space: &[u8] = if self.escape_whitespaces {
            SPACE_SYMBOL
        } else {
            b" "
        };
        let space_at = |p: usize| text[p] == space[0] && text[p..].starts_with(space);
        // With byte fallback the ids of a word do not depend on its neighbours (without it, a
        // run of unknown characters across words would be one `<unk>`), so words are cached.
        let use_cache = self.byte_ids.is_some();
        let mut cache = if use_cache {
            scratch.take_cache(self.cache_key)
        } else {
            WordCache::default()
        };
        let n = text.len();
        let mut pos = 0;
        while pos < n {
            // A word: whitespace symbols, then other characters up to the next whitespace.
            let start = pos;
            while pos < n && space_at(pos) {
                pos += space.len();
            }
            while pos < n && !space_at(pos) {
                pos += char_len(text[pos]).min(n - pos);
            }
            let word = &text[start..pos];
            match use_cache.then(|| WordKey::new(word)).flatten() {
                Some(key) => {
                    if let Some(hit) = cache.get(key) {
                        ids.extend_from_slice(hit);
                    } else {
                        let first = ids.len();
                        self.encode_span(word, scratch, &mut prev_unknown, ids);
                        cache.insert(key, &ids[first..]);
                    }
                }
                None => self.encode_span(word, scratch, &mut prev_unknown, ids),
            }
        }
        if use_cache {
            scratch.put_cache(self.cache_key, cache);
        }
    }

    /// Encode one independent span of normalized text.
    fn encode_span(
        &self,
        text: &[u8],
        scratch: &mut Scratch,
        prev_unknown: &mut bool,
        ids: &mut Vec<u32>,
    ) {
        if text.len() <= SMALL_SPAN && !self.has_unused {
            self.bpe_small(text, prev_unknown, ids);
        } else if text.len() < (u32::MAX / 2) as usize {
            self.bpe::<u32>(
                text,
                &mut scratch.symbols,
                &mut scratch.agenda,
                prev_unknown,
                ids,
            );
        } else {
            // Spans of 2 GiB and more: the same algorithm with full-width indices.
            let (mut symbols, mut agenda) = (Vec::new(), Vec::new());
            self.bpe::<usize>(text, &mut symbols, &mut agenda, prev_unknown, ids);
        }
    }

    /// The longest USER_DEFINED piece at the start of `s` (`PrefixMatcher::PrefixMatch`).
    #[inline]
    fn match_user_defined(&self, s: &[u8]) -> Option<usize> {
        let first = *s.first()?;
        if !self.user_defined_first[first as usize] {
            return None;
        }
        self.user_defined_lens
            .iter()
            .copied()
            .find(|&len| len <= s.len() && self.user_defined.contains(&s[..len]))
    }

    /// `Normalizer::Normalize` without a charsmap, into `out` (cleared first).
    fn normalize(&self, text: &str, out: &mut Vec<u8>) {
        out.clear();
        let mut input = text.as_bytes();
        if input.is_empty() {
            return;
        }
        let space: &[u8] = if self.escape_whitespaces {
            SPACE_SYMBOL
        } else {
            b" "
        };
        if !self.remove_extra_whitespaces {
            // Every character is copied, ASCII spaces escaped (the normalizer's user-defined
            // matcher changes nothing here).
            out.reserve(input.len() + 3);
            if !self.treat_whitespace_as_suffix && self.add_dummy_prefix {
                out.extend_from_slice(space);
            }
            if self.escape_whitespaces {
                let mut rest = input;
                while let Some(pos) = rest.iter().position(|&b| b == b' ') {
                    out.extend_from_slice(&rest[..pos]);
                    out.extend_from_slice(SPACE_SYMBOL);
                    rest = &rest[pos + 1..];
                }
                out.extend_from_slice(rest);
            } else {
                out.extend_from_slice(input);
            }
            if self.treat_whitespace_as_suffix && self.add_dummy_prefix {
                out.extend_from_slice(space);
            }
            return;
        }

        // `NormalizePrefix`: a whole user-defined piece, or one character.
        let prefix = |s: &[u8]| -> usize {
            self.match_user_defined(s)
                .unwrap_or_else(|| char_len(s[0]).min(s.len()))
        };
        // Leading spaces.
        while !input.is_empty() {
            let len = prefix(input);
            if &input[..len] != b" " {
                break;
            }
            input = &input[len..];
        }
        if input.is_empty() {
            return;
        }
        out.reserve(input.len() + 3);
        if !self.treat_whitespace_as_suffix && self.add_dummy_prefix {
            out.extend_from_slice(space);
        }
        let mut is_prev_space = true;
        while !input.is_empty() {
            let len = prefix(input);
            let mut sp = &input[..len];
            input = &input[len..];
            if is_prev_space {
                while let [b' ', rest @ ..] = sp {
                    sp = rest;
                }
            }
            if !sp.is_empty() {
                for &b in sp {
                    if b == b' ' {
                        out.extend_from_slice(space);
                    } else {
                        out.push(b);
                    }
                }
                is_prev_space = sp.last() == Some(&b' ');
            }
        }
        // Trailing spaces.
        while out.ends_with(space) {
            out.truncate(out.len() - space.len());
        }
        if self.treat_whitespace_as_suffix && self.add_dummy_prefix {
            out.extend_from_slice(space);
        }
    }

    /// The dictionary id of the character at the start of `s` (`NO_ID` when it has none),
    /// and its length.
    #[inline]
    fn char_id(&self, s: &[u8]) -> (u32, usize) {
        let b = s[0];
        if b < 0x80 {
            return (self.ascii_ids[b as usize], 1);
        }
        let len = char_len(b).min(s.len());
        let id = char_key(&s[..len])
            .and_then(|key| self.char_ids.get(&key).copied())
            .unwrap_or(NO_ID);
        (id, len)
    }

    /// `bpe::Model::SampleEncode(normalized, 0.0)` followed by `PopulateSentencePieceText`.
    fn bpe<I: Index>(
        &self,
        text: &[u8],
        symbols: &mut Vec<Symbol<I>>,
        agenda: &mut Vec<Pair<I>>,
        prev_unknown: &mut bool,
        ids: &mut Vec<u32>,
    ) {
        if text.is_empty() {
            return;
        }
        symbols.clear();
        agenda.clear();

        // Split into characters and whole user-defined pieces (frozen).
        let has_user_defined = !self.user_defined.is_empty();
        let mut pos = 0;
        while pos < text.len() {
            let matched = match has_user_defined {
                true => self.match_user_defined(&text[pos..]),
                false => None,
            };
            let (id, len, frozen) = match matched {
                Some(len) => (self.symbol_id(&text[pos..pos + len]), len, true),
                None => {
                    let (id, len) = self.char_id(&text[pos..]);
                    (id, len, false)
                }
            };
            let index = symbols.len();
            symbols.push(Symbol {
                start: I::from_usize(pos),
                len: I::from_usize(len),
                prev: if index == 0 {
                    I::NONE
                } else {
                    I::from_usize(index - 1)
                },
                next: if pos + len == text.len() {
                    I::NONE
                } else {
                    I::from_usize(index + 1)
                },
                id,
                frozen,
            });
            pos += len;
        }

        // `rev_merge`: for each UNUSED piece, the two symbols it was last pushed as.
        let mut rev_merge: Option<HashMap<&[u8], usize, BuildHasherDefault<PieceHasher>>> =
            self.has_unused.then(HashMap::default);

        // All bigrams, then heapify.
        for i in 1..symbols.len() {
            if let Some(pair) = self.candidate(
                text,
                symbols,
                I::from_usize(i - 1),
                I::from_usize(i),
                &mut rev_merge,
            ) {
                agenda.push(pair);
            }
        }
        let mut heap = BinaryHeap::from(std::mem::take(agenda));

        // Main loop: the best pair first, ties to the leftmost one.
        while let Some(top) = heap.pop() {
            let left = top.left.0;
            let l = left.to_usize();
            let right = symbols[l].next;
            // Stale: `left` was merged away, or either side has changed since the push.
            if symbols[l].len.to_usize() == 0
                || right == I::NONE
                || symbols[l].len.to_usize() + symbols[right.to_usize()].len.to_usize()
                    != top.size.to_usize()
            {
                continue;
            }
            let r = right.to_usize();
            let after = symbols[r].next;
            symbols[l].len = top.size;
            symbols[l].next = after;
            symbols[l].id = top.id;
            if after != I::NONE {
                symbols[after.to_usize()].prev = left;
            }
            symbols[r].len = I::from_usize(0);
            let before = symbols[l].prev;
            if let Some(pair) = self.candidate(text, symbols, before, left, &mut rev_merge) {
                heap.push(pair);
            }
            if let Some(pair) = self.candidate(text, symbols, left, after, &mut rev_merge) {
                heap.push(pair);
            }
        }
        *agenda = heap.into_vec();

        // Output, with re-segmentation of UNUSED pieces and byte fallback.
        let mut stack: Vec<(usize, usize)> = Vec::new();
        let mut index = if symbols.is_empty() {
            I::NONE
        } else {
            I::from_usize(0)
        };
        while index != I::NONE {
            let s = &symbols[index.to_usize()];
            let start = s.start.to_usize();
            let end = start + s.len.to_usize();
            index = s.next;
            let id = if s.id != NO_ID { s.id } else { self.unk_id };
            if self.types[id as usize] != PieceType::Unused {
                self.emit(id, &text[start..end], prev_unknown, ids);
                continue;
            }
            stack.push((start, end));
            while let Some((start, end)) = stack.pop() {
                let piece = &text[start..end];
                let id = self.symbol_id(piece);
                let split = match &rev_merge {
                    Some(map) if self.types[id as usize] == PieceType::Unused => {
                        map.get(piece).copied()
                    }
                    _ => None,
                };
                match split {
                    Some(left_len) => {
                        stack.push((start + left_len, end));
                        stack.push((start, start + left_len));
                    }
                    None => self.emit(id, piece, prev_unknown, ids),
                }
            }
        }
    }

    /// The piece that symbols `left_id` (at `start`) and `right_id` (right after it; `size`
    /// bytes together) merge into, if any. Neither may be frozen.
    #[inline]
    fn merge_of(
        &self,
        text: &[u8],
        start: usize,
        left_id: u32,
        size: usize,
        right_id: u32,
    ) -> Option<Merge> {
        if left_id != NO_ID && right_id != NO_ID {
            // Both sides are dictionary pieces: their concatenation is one iff it is a pair.
            return self
                .pairs
                .get(&(u64::from(left_id) << 32 | u64::from(right_id)))
                .copied();
        }
        // A character without a piece: look the concatenation up by its text.
        if size > self.max_piece_len {
            return None;
        }
        let entry = self.dict.get(&text[start..start + size])?;
        Some(Merge {
            score: entry.score,
            id: entry.id,
        })
    }

    /// The merge loop of [`SentencePieceBpe::bpe`] for a span of at most [`SMALL_SPAN`] bytes
    /// in a model without UNUSED pieces: instead of a heap, each step scans the adjacent pairs
    /// for the best score (the leftmost of equals), which picks the same merges in the same
    /// order.
    fn bpe_small(&self, text: &[u8], prev_unknown: &mut bool, ids: &mut Vec<u32>) {
        let mut sym = [SmallSymbol::default(); SMALL_SPAN];
        let mut n = 0;
        let mut pos = 0;
        let has_user_defined = !self.user_defined.is_empty();
        while pos < text.len() && n < SMALL_SPAN {
            let matched = match has_user_defined {
                true => self.match_user_defined(&text[pos..]),
                false => None,
            };
            let (id, len, frozen) = match matched {
                Some(l) => (self.symbol_id(&text[pos..pos + l]), l, true),
                None => {
                    let (i, l) = self.char_id(&text[pos..]);
                    (i, l, false)
                }
            };
            sym[n] = SmallSymbol {
                start: pos as u8,
                len: len as u8,
                frozen,
                id,
            };
            pos += len;
            n += 1;
        }
        // `best[i]`: the merge of symbols `i` and `i + 1`.
        let pair = |l: SmallSymbol, r: SmallSymbol| {
            if l.frozen || r.frozen {
                return None;
            }
            let size = l.len as usize + r.len as usize;
            self.merge_of(text, l.start as usize, l.id, size, r.id)
        };
        let mut best: [Option<Merge>; SMALL_SPAN] = [None; SMALL_SPAN];
        for i in 1..n {
            best[i - 1] = pair(sym[i - 1], sym[i]);
        }
        loop {
            let mut top: Option<(usize, Merge)> = None;
            for (i, m) in best[..n.saturating_sub(1)].iter().enumerate() {
                if let Some(m) = m {
                    if top.is_none_or(|(_, t)| m.score > t.score) {
                        top = Some((i, *m));
                    }
                }
            }
            let Some((i, m)) = top else { break };
            sym[i].len += sym[i + 1].len;
            sym[i].id = m.id;
            for k in i + 1..n - 1 {
                sym[k] = sym[k + 1];
            }
            for k in i + 1..n.saturating_sub(2) {
                best[k] = best[k + 1];
            }
            n -= 1;
            if i > 0 {
                best[i - 1] = pair(sym[i - 1], sym[i]);
            }
            best[i] = if i + 1 < n {
                pair(sym[i], sym[i + 1])
            } else {
                None
            };
        }
        for s in &sym[..n] {
            let piece_id = if s.id != NO_ID { s.id } else { self.unk_id };
            let start = s.start as usize;
            self.emit(
                piece_id,
                &text[start..start + s.len as usize],
                prev_unknown,
                ids,
            );
        }
    }

    /// `MaybeAddNewSymbolPair`: the heap entry for merging `left` and `right`, if their
    /// concatenation is a dictionary piece and neither is frozen.
    #[inline]
    fn candidate<'t, I: Index>(
        &self,
        text: &'t [u8],
        symbols: &[Symbol<I>],
        left: I,
        right: I,
        rev_merge: &mut Option<HashMap<&'t [u8], usize, BuildHasherDefault<PieceHasher>>>,
    ) -> Option<Pair<I>> {
        if left == I::NONE || right == I::NONE {
            return None;
        }
        let (ls, rs) = (&symbols[left.to_usize()], &symbols[right.to_usize()]);
        if ls.frozen || rs.frozen {
            return None;
        }
        let start = ls.start.to_usize();
        let size = ls.len.to_usize() + rs.len.to_usize();
        let merge = self.merge_of(text, start, ls.id, size, rs.id)?;
        if let Some(map) = rev_merge {
            if self.types[merge.id as usize] == PieceType::Unused {
                map.insert(&text[start..start + size], ls.len.to_usize());
            }
        }
        Some(Pair {
            score: merge.score,
            left: Reverse(left),
            size: I::from_usize(size),
            id: merge.id,
        })
    }

    /// One piece of the model's output (`PopulateSentencePieceText`).
    ///
    /// An UNUSED piece that was not built by a merge (a single character whose piece is
    /// UNUSED) counts as unknown, as sentencepiece 0.2.3 does.
    #[inline]
    fn emit(&self, out: u32, piece: &[u8], prev_unknown: &mut bool, ids: &mut Vec<u32>) {
        let unknown = matches!(
            self.types[out as usize],
            PieceType::Unknown | PieceType::Unused
        );
        match (&self.byte_ids, unknown) {
            (Some(byte_ids), true) => ids.extend(piece.iter().map(|&b| byte_ids[b as usize])),
            // A run of unknown pieces is one `<unk>`.
            (None, true) if *prev_unknown => {}
            (None, true) => ids.push(self.unk_id),
            (_, false) => ids.push(out),
        }
        *prev_unknown = unknown;
    }
}

/// Index type of the symbol arrays: `u32` for all but gigantic texts.
trait Index: Copy + Ord + Eq {
    const NONE: Self;
    fn from_usize(v: usize) -> Self;
    fn to_usize(self) -> usize;
}

impl Index for u32 {
    const NONE: Self = u32::MAX;
    #[inline]
    fn from_usize(v: usize) -> Self {
        v as u32
    }
    #[inline]
    fn to_usize(self) -> usize {
        self as usize
    }
}

impl Index for usize {
    const NONE: Self = usize::MAX;
    #[inline]
    fn from_usize(v: usize) -> Self {
        v
    }
    #[inline]
    fn to_usize(self) -> usize {
        self
    }
}

/// A symbol of the merge loop: a span of the normalized text in a doubly linked list.
#[derive(Debug, Clone, Copy)]
struct Symbol<I> {
    start: I,
    /// Length in bytes; 0 once merged into its left neighbour.
    len: I,
    prev: I,
    next: I,
    /// The dictionary id of the symbol (`NO_ID` for a character without a piece).
    id: u32,
    /// A user-defined piece: never merged.
    frozen: bool,
}

/// A heap entry: merging symbol `left` with its right neighbour into a piece of `size` bytes.
/// The derived order puts the highest score first, then the smallest `left`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Pair<I> {
    score: u32,
    left: Reverse<I>,
    size: I,
    id: u32,
}

/// A symbol of [`SentencePieceBpe::bpe_small`] (offsets fit a byte there).
#[derive(Debug, Clone, Copy, Default)]
struct SmallSymbol {
    start: u8,
    len: u8,
    frozen: bool,
    id: u32,
}

/// The piece two dictionary pieces merge into.
#[derive(Debug, Clone, Copy)]
struct Merge {
    score: u32,
    id: u32,
}

/// Buffers reused between calls on one thread, and the thread's word caches.
#[derive(Default)]
struct Scratch {
    normalized: Vec<u8>,
    symbols: Vec<Symbol<u32>>,
    agenda: Vec<Pair<u32>>,
    /// The word caches of the models this thread used last, the most recent last.
    caches: Vec<(u64, WordCache)>,
}

impl Scratch {
    /// The word cache of model `key` (an empty one the first time).
    fn take_cache(&mut self, key: u64) -> WordCache {
        match self.caches.iter().position(|(k, _)| *k == key) {
            Some(i) => self.caches.remove(i).1,
            None => WordCache::default(),
        }
    }

    /// Give back the word cache of model `key`.
    fn put_cache(&mut self, key: u64, cache: WordCache) {
        if self.caches.len() >= CACHED_MODELS {
            self.caches.remove(0);
        }
        self.caches.push((key, cache));
    }

    /// Give back the memory of a very long text.
    fn trim(&mut self) {
        const KEEP: usize = 1 << 20;
        if self.normalized.capacity() > KEEP {
            self.normalized = Vec::new();
        }
        if self.symbols.capacity() > KEEP {
            self.symbols = Vec::new();
        }
        if self.agenda.capacity() > KEEP {
            self.agenda = Vec::new();
        }
    }
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// A minimal decoder of the protobuf wire format, for the fields of `ModelProto` the encoder
/// needs. Unknown fields (and known fields with an unexpected wire type, as protobuf itself
/// does) are skipped; repeated occurrences of a singular field follow protobuf's rules (the
/// last scalar wins, messages merge).
mod proto {
    use super::PieceType;

    const VARINT: u8 = 0;
    const FIXED64: u8 = 1;
    const LEN: u8 = 2;
    const START_GROUP: u8 = 3;
    const END_GROUP: u8 = 4;
    const FIXED32: u8 = 5;
    /// Nesting limit for (deprecated) groups inside skipped fields.
    const MAX_GROUP_DEPTH: usize = 64;

    /// `ModelProto.SentencePiece`.
    #[derive(Debug, Clone, PartialEq)]
    pub(super) struct Piece<'a> {
        pub piece: &'a [u8],
        pub score: f32,
        pub kind: PieceType,
    }

    /// The fields of `TrainerSpec` the encoder uses.
    #[derive(Debug, Clone, PartialEq)]
    pub(super) struct Trainer<'a> {
        pub model_type: i32,
        pub byte_fallback: bool,
        pub treat_whitespace_as_suffix: bool,
        pub bos_piece: Option<&'a [u8]>,
        pub eos_piece: Option<&'a [u8]>,
    }

    /// The fields of `NormalizerSpec` the encoder uses.
    #[derive(Debug, Clone, PartialEq)]
    pub(super) struct Normalizer<'a> {
        pub name: &'a [u8],
        pub precompiled_charsmap_len: usize,
        pub add_dummy_prefix: bool,
        pub remove_extra_whitespaces: bool,
        pub escape_whitespaces: bool,
    }

    /// The fields of `ModelProto` the encoder uses.
    #[derive(Debug, Clone, PartialEq)]
    pub(super) struct Model<'a> {
        pub pieces: Vec<Piece<'a>>,
        pub trainer: Trainer<'a>,
        pub normalizer: Normalizer<'a>,
    }

    /// A cursor over one message's bytes.
    pub(super) struct Reader<'a> {
        buf: &'a [u8],
        pos: usize,
    }

    impl<'a> Reader<'a> {
        pub fn new(buf: &'a [u8]) -> Self {
            Reader { buf, pos: 0 }
        }

        pub fn done(&self) -> bool {
            self.pos >= self.buf.len()
        }

        pub fn varint(&mut self) -> Result<u64, String> {
            let mut value = 0u64;
            for i in 0..10 {
                let byte = *self
                    .buf
                    .get(self.pos)
                    .ok_or_else(|| "truncated varint".to_string())?;
                self.pos += 1;
                value |= u64::from(byte & 0x7F) << (7 * i);
                if byte & 0x80 == 0 {
                    return Ok(value);
                }
            }
            Err("varint longer than 10 bytes".into())
        }

        /// A field key: (field number, wire type).
        pub fn key(&mut self) -> Result<(u32, u8), String> {
            let key = self.varint()?;
            let field = key >> 3;
            if field == 0 || field > u64::from(u32::MAX >> 3) {
                return Err(format!("invalid field number {field}"));
            }
            Ok((field as u32, (key & 7) as u8))
        }

        fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
            let end = self
                .pos
                .checked_add(n)
                .filter(|&end| end <= self.buf.len())
                .ok_or_else(|| "truncated field".to_string())?;
            let bytes = &self.buf[self.pos..end];
            self.pos = end;
            Ok(bytes)
        }

        pub fn bytes(&mut self) -> Result<&'a [u8], String> {
            let len = self.varint()?;
            let len = usize::try_from(len).map_err(|_| "length out of range".to_string())?;
            self.take(len)
        }

        pub fn fixed32(&mut self) -> Result<u32, String> {
            let b = self.take(4)?;
            Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        }

        /// Skip the value of a field of `wire` type (`field` closes a group).
        pub fn skip(&mut self, field: u32, wire: u8) -> Result<(), String> {
            self.skip_at(field, wire, 0)
        }

        fn skip_at(&mut self, field: u32, wire: u8, depth: usize) -> Result<(), String> {
            match wire {
                VARINT => self.varint().map(drop),
                FIXED64 => self.take(8).map(drop),
                LEN => self.bytes().map(drop),
                FIXED32 => self.take(4).map(drop),
                START_GROUP => {
                    if depth >= MAX_GROUP_DEPTH {
                        return Err("groups nested too deeply".into());
                    }
                    loop {
                        if self.done() {
                            return Err("unterminated group".into());
                        }
                        let (f, w) = self.key()?;
                        if w == END_GROUP {
                            if f != field {
                                return Err("mismatched end of group".into());
                            }
                            return Ok(());
                        }
                        self.skip_at(f, w, depth + 1)?;
                    }
                }
                END_GROUP => Err("unexpected end of group".into()),
                w => Err(format!("invalid wire type {w}")),
            }
        }
    }

    /// An enum value as protobuf reads it (an `int32` varint).
    fn enum_value(r: &mut Reader<'_>) -> Result<i32, String> {
        Ok(r.varint()? as i32)
    }

    fn parse_piece<'a>(bytes: &'a [u8]) -> Result<Piece<'a>, String> {
        let mut piece = Piece {
            piece: b"",
            score: 0.0,
            kind: PieceType::Normal,
        };
        let mut r = Reader::new(bytes);
        while !r.done() {
            match r.key()? {
                (1, LEN) => piece.piece = r.bytes()?,
                (2, FIXED32) => piece.score = f32::from_bits(r.fixed32()?),
                (3, VARINT) => {
                    // An unknown enum value is kept aside by protobuf: the field keeps its value.
                    if let Some(kind) = PieceType::from_i32(enum_value(&mut r)?) {
                        piece.kind = kind;
                    }
                }
                (f, w) => r.skip(f, w)?,
            }
        }
        Ok(piece)
    }

    fn parse_trainer<'a>(bytes: &'a [u8], t: &mut Trainer<'a>) -> Result<(), String> {
        let mut r = Reader::new(bytes);
        while !r.done() {
            match r.key()? {
                (3, VARINT) => {
                    let v = enum_value(&mut r)?;
                    if (1..=4).contains(&v) {
                        t.model_type = v;
                    }
                }
                (24, VARINT) => t.treat_whitespace_as_suffix = r.varint()? != 0,
                (35, VARINT) => t.byte_fallback = r.varint()? != 0,
                (46, LEN) => t.bos_piece = Some(r.bytes()?),
                (47, LEN) => t.eos_piece = Some(r.bytes()?),
                (f, w) => r.skip(f, w)?,
            }
        }
        Ok(())
    }

    fn parse_normalizer<'a>(bytes: &'a [u8], n: &mut Normalizer<'a>) -> Result<(), String> {
        let mut r = Reader::new(bytes);
        while !r.done() {
            match r.key()? {
                (1, LEN) => n.name = r.bytes()?,
                (2, LEN) => n.precompiled_charsmap_len = r.bytes()?.len(),
                (3, VARINT) => n.add_dummy_prefix = r.varint()? != 0,
                (4, VARINT) => n.remove_extra_whitespaces = r.varint()? != 0,
                (5, VARINT) => n.escape_whitespaces = r.varint()? != 0,
                (f, w) => r.skip(f, w)?,
            }
        }
        Ok(())
    }

    /// Decode a serialized `ModelProto`.
    pub(super) fn parse_model(bytes: &[u8]) -> Result<Model<'_>, String> {
        let mut model = Model {
            pieces: Vec::new(),
            trainer: Trainer {
                model_type: 1,
                byte_fallback: false,
                treat_whitespace_as_suffix: false,
                bos_piece: None,
                eos_piece: None,
            },
            normalizer: Normalizer {
                name: b"",
                precompiled_charsmap_len: 0,
                add_dummy_prefix: true,
                remove_extra_whitespaces: true,
                escape_whitespaces: true,
            },
        };
        let mut r = Reader::new(bytes);
        while !r.done() {
            match r.key()? {
                (1, LEN) => model.pieces.push(parse_piece(r.bytes()?)?),
                (2, LEN) => parse_trainer(r.bytes()?, &mut model.trainer)?,
                (3, LEN) => parse_normalizer(r.bytes()?, &mut model.normalizer)?,
                (f, w) => r.skip(f, w)?,
            }
        }
        if model.pieces.is_empty() {
            return Err("no pieces (is this a sentencepiece .model file?)".into());
        }
        Ok(model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NORMAL: i32 = 1;
    const UNKNOWN: i32 = 2;
    const CONTROL: i32 = 3;
    const USER_DEFINED: i32 = 4;
    const UNUSED: i32 = 5;
    const BYTE: i32 = 6;

    // A minimal protobuf writer for building models.
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
        varint(out, (u64::from(field) << 3) | u64::from(wire));
    }
    fn len_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
        key(out, field, 2);
        varint(out, bytes.len() as u64);
        out.extend_from_slice(bytes);
    }
    fn varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
        key(out, field, 0);
        varint(out, v);
    }

    /// Settings of a test model.
    #[derive(Clone)]
    struct Spec {
        pieces: Vec<(String, f32, i32)>,
        byte_fallback: bool,
        model_type: u64,
        add_dummy_prefix: bool,
        remove_extra_whitespaces: bool,
        escape_whitespaces: bool,
        treat_whitespace_as_suffix: bool,
    }

    impl Spec {
        /// `<unk>`, `<s>`, `</s>`, the 256 byte pieces when `byte_fallback`, then `pieces`.
        fn new(pieces: &[(&str, f32, i32)], byte_fallback: bool) -> Self {
            let mut all = vec![
                ("<unk>".to_string(), 0.0, UNKNOWN),
                ("<s>".to_string(), 0.0, CONTROL),
                ("</s>".to_string(), 0.0, CONTROL),
            ];
            if byte_fallback {
                all.extend((0..256).map(|b| (format!("<0x{b:02X}>"), 0.0, BYTE)));
            }
            all.extend(pieces.iter().map(|&(p, s, t)| (p.to_string(), s, t)));
            Spec {
                pieces: all,
                byte_fallback,
                model_type: 2,
                add_dummy_prefix: true,
                remove_extra_whitespaces: false,
                escape_whitespaces: true,
                treat_whitespace_as_suffix: false,
            }
        }

        fn bytes(&self) -> Vec<u8> {
            let mut out = Vec::new();
            for (piece, score, kind) in &self.pieces {
                let mut p = Vec::new();
                len_field(&mut p, 1, piece.as_bytes());
                key(&mut p, 2, 5);
                p.extend_from_slice(&score.to_bits().to_le_bytes());
                varint_field(&mut p, 3, *kind as u64);
                len_field(&mut out, 1, &p);
            }
            let mut t = Vec::new();
            varint_field(&mut t, 3, self.model_type);
            varint_field(&mut t, 24, u64::from(self.treat_whitespace_as_suffix));
            varint_field(&mut t, 35, u64::from(self.byte_fallback));
            len_field(&mut out, 2, &t);
            let mut n = Vec::new();
            len_field(&mut n, 1, b"identity");
            varint_field(&mut n, 3, u64::from(self.add_dummy_prefix));
            varint_field(&mut n, 4, u64::from(self.remove_extra_whitespaces));
            varint_field(&mut n, 5, u64::from(self.escape_whitespaces));
            len_field(&mut out, 3, &n);
            out
        }

        fn load(&self) -> SentencePieceBpe {
            match SentencePieceBpe::from_bytes(&self.bytes()) {
                Ok(m) => m,
                Err(e) => panic!("test model does not load: {e}"),
            }
        }

        fn load_err(&self) -> String {
            match SentencePieceBpe::from_bytes(&self.bytes()) {
                Ok(_) => panic!("test model loads"),
                Err(e) => e.to_string(),
            }
        }
    }

    fn pieces(m: &SentencePieceBpe, text: &str) -> Vec<String> {
        let mut ids = Vec::new();
        m.encode(text, &mut ids);
        ids.iter()
            .map(|&i| m.id_to_piece(i).unwrap_or("?").to_string())
            .collect()
    }

    /// ▁ a b c, and `extra`.
    fn abc(extra: &[(&str, f32, i32)], byte_fallback: bool) -> Spec {
        let mut all = vec![
            ("\u{2581}", -5.0, NORMAL),
            ("a", -5.0, NORMAL),
            ("b", -5.0, NORMAL),
            ("c", -5.0, NORMAL),
        ];
        all.extend_from_slice(extra);
        Spec::new(&all, byte_fallback)
    }

    #[test]
    fn reader_decodes_and_skips_every_wire_type() {
        let mut buf = Vec::new();
        varint_field(&mut buf, 1, 300);
        key(&mut buf, 2, 1);
        buf.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        len_field(&mut buf, 3, b"xyz");
        key(&mut buf, 4, 3); // group with a nested group
        varint_field(&mut buf, 1, 5);
        key(&mut buf, 2, 3);
        key(&mut buf, 2, 4);
        key(&mut buf, 4, 4);
        key(&mut buf, 5, 5);
        buf.extend_from_slice(&7u32.to_le_bytes());
        let mut r = proto::Reader::new(&buf);
        assert_eq!(r.key(), Ok((1, 0)));
        assert_eq!(r.varint(), Ok(300));
        for (field, wire) in [(2, 1), (3, 2), (4, 3)] {
            assert_eq!(r.key(), Ok((field, wire)));
            assert_eq!(r.skip(field, wire), Ok(()));
        }
        assert_eq!(r.key(), Ok((5, 5)));
        assert_eq!(r.fixed32(), Ok(7));
        assert!(r.done());
    }

    #[test]
    fn reader_rejects_malformed_input() {
        let bad: [&[u8]; 8] = [
            &[0x80],             // truncated varint
            &[0xff; 11],         // varint longer than 10 bytes
            &[0x0e],             // wire type 6
            &[0x00],             // field 0
            &[0x0a, 0x05, b'a'], // length beyond the end
            &[0x0b, 0x08, 0x01], // unterminated group
            &[0x0b, 0x14],       // group closed by another field
            &[0x0c],             // end of group without a start
        ];
        for bytes in bad {
            let mut r = proto::Reader::new(bytes);
            let result = r.key().and_then(|(f, w)| r.skip(f, w));
            assert!(result.is_err(), "{bytes:?} was accepted");
            assert!(SentencePieceBpe::from_bytes(bytes).is_err());
        }
        assert!(SentencePieceBpe::from_bytes(b"").is_err());
    }

    #[test]
    fn parse_model_skips_unknown_fields_and_merges_messages() {
        let mut out = Vec::new();
        // A piece with unknown fields, a known field of the wrong wire type, an unknown enum.
        let mut p = Vec::new();
        varint_field(&mut p, 1, 7); // wrong wire type: skipped
        len_field(&mut p, 1, b"<unk>");
        varint_field(&mut p, 3, UNKNOWN as u64);
        len_field(&mut p, 9, b"ignored");
        key(&mut p, 2, 5);
        p.extend_from_slice(&1.5f32.to_bits().to_le_bytes());
        len_field(&mut out, 1, &p);
        let mut p = Vec::new();
        len_field(&mut p, 1, b"a");
        varint_field(&mut p, 3, 99); // unknown enum value: stays NORMAL
        len_field(&mut out, 1, &p);
        varint_field(&mut out, 15, 1);
        // The trainer spec in two parts: protobuf merges them.
        let mut t = Vec::new();
        varint_field(&mut t, 3, 2);
        len_field(&mut t, 1, b"some input");
        len_field(&mut out, 2, &t);
        let mut t = Vec::new();
        varint_field(&mut t, 24, 1);
        varint_field(&mut t, 3, 77); // unknown model type: keeps BPE
        len_field(&mut t, 46, b"a");
        len_field(&mut out, 2, &t);
        key(&mut out, 200, 1);
        out.extend_from_slice(&[0; 8]);

        let model = match proto::parse_model(&out) {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(model.pieces.len(), 2);
        assert_eq!(model.pieces[0].piece, b"<unk>");
        assert_eq!(model.pieces[0].score, 1.5);
        assert_eq!(model.pieces[0].kind, PieceType::Unknown);
        assert_eq!(model.pieces[1].kind, PieceType::Normal);
        assert_eq!(model.trainer.model_type, 2);
        assert!(model.trainer.treat_whitespace_as_suffix);
        assert!(!model.trainer.byte_fallback);
        assert_eq!(model.trainer.bos_piece, Some(&b"a"[..]));
        // The NormalizerSpec defaults.
        assert!(model.normalizer.add_dummy_prefix);
        assert!(model.normalizer.remove_extra_whitespaces);
        assert!(model.normalizer.escape_whitespaces);

        let m = match SentencePieceBpe::from_bytes(&out) {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(m.vocab_size(), 2);
        assert_eq!(m.unk_id(), 0);
        assert_eq!(m.bos_id(), None); // "a" is not a CONTROL piece
        assert_eq!(m.eos_id(), None);
    }

    #[test]
    fn accessors() {
        let m = abc(&[("ab", -1.0, NORMAL)], true).load();
        assert_eq!(m.vocab_size(), 3 + 256 + 5);
        assert_eq!((m.unk_id(), m.bos_id(), m.eos_id()), (0, Some(1), Some(2)));
        assert_eq!(m.piece_to_id("<s>"), Some(1));
        assert_eq!(m.piece_to_id("<0x41>"), Some(3 + 0x41));
        assert_eq!(m.piece_to_id("ab"), Some(3 + 256 + 4));
        assert_eq!(m.piece_to_id("abc"), None);
        assert_eq!(m.id_to_piece(3 + 256), Some("\u{2581}"));
        assert_eq!(m.id_to_piece(100_000), None);
        assert!(m.is_control(1) && m.is_control(2));
        assert!(!m.is_control(0) && !m.is_control(3) && !m.is_control(100_000));
    }

    #[test]
    fn best_score_first_and_ties_to_the_leftmost_pair() {
        let tie = abc(&[("ab", -1.0, NORMAL), ("bc", -1.0, NORMAL)], true).load();
        assert_eq!(pieces(&tie, "abc"), ["\u{2581}", "ab", "c"]);
        let right = abc(&[("ab", -1.0, NORMAL), ("bc", -0.5, NORMAL)], true).load();
        assert_eq!(pieces(&right, "abc"), ["\u{2581}", "a", "bc"]);
        let chain = abc(
            &[
                ("ab", -1.0, NORMAL),
                ("bc", -2.0, NORMAL),
                ("abc", -3.0, NORMAL),
            ],
            true,
        )
        .load();
        assert_eq!(
            pieces(&chain, "abc abc"),
            ["\u{2581}", "abc", "\u{2581}", "abc"]
        );
        // sentencepiece 0.2.3 orders scores as IEEE total order: -0.0 < 0.0 < +inf < NaN.
        let zeros = abc(&[("ab", -0.0, NORMAL), ("bc", 0.0, NORMAL)], true).load();
        assert_eq!(pieces(&zeros, "abc"), ["\u{2581}", "a", "bc"]);
        let nan = abc(
            &[("ab", f32::NAN, NORMAL), ("bc", f32::INFINITY, NORMAL)],
            true,
        )
        .load();
        assert_eq!(pieces(&nan, "abc"), ["\u{2581}", "ab", "c"]);
        let neg_nan = abc(
            &[("ab", -f32::NAN, NORMAL), ("bc", f32::NEG_INFINITY, NORMAL)],
            true,
        )
        .load();
        assert_eq!(pieces(&neg_nan, "abc"), ["\u{2581}", "a", "bc"]);
    }

    #[test]
    fn byte_fallback_and_unknown_runs() {
        let m = abc(&[("ab", -1.0, NORMAL)], true).load();
        let mut ids = Vec::new();
        m.encode("a\u{1F600}", &mut ids);
        let bytes: Vec<u32> = [0xF0, 0x9F, 0x98, 0x80].iter().map(|b| 3 + b).collect();
        assert_eq!(ids[..2], [3 + 256, 3 + 256 + 1]);
        assert_eq!(ids[2..], bytes[..]);

        let m = abc(&[], false).load();
        let mut ids = Vec::new();
        m.encode("\u{1F600}\u{1F600}x a\u{1F600}", &mut ids);
        // ▁ <unk>(😀😀x) ▁ a <unk>(😀)
        assert_eq!(ids, [3, 0, 3, 4, 0]);
    }

    #[test]
    fn user_defined_pieces_are_matched_whole_and_never_merged() {
        let m = abc(
            &[
                ("ab", -1.0, NORMAL),
                ("\u{2581}a", -0.5, NORMAL),
                ("abc", 0.0, USER_DEFINED),
                ("bca", 0.0, USER_DEFINED),
                ("bc", 0.0, USER_DEFINED),
            ],
            true,
        )
        .load();
        assert_eq!(pieces(&m, "abcb"), ["\u{2581}", "abc", "b"]);
        // Longest match at each symbol, left to right: "abc" wins over the later "bca".
        assert_eq!(pieces(&m, "aabca"), ["\u{2581}a", "abc", "a"]);
        assert_eq!(
            pieces(&m, "bcb ab"),
            ["\u{2581}", "bc", "b", "\u{2581}a", "b"]
        );
    }

    #[test]
    fn unused_pieces_are_split_again() {
        let m = abc(
            &[
                ("ab", -1.0, NORMAL),
                ("abc", -0.5, UNUSED),
                ("abca", -0.1, NORMAL),
                ("cc", -2.0, UNUSED),
            ],
            true,
        )
        .load();
        assert_eq!(pieces(&m, "abc"), ["\u{2581}", "ab", "c"]);
        assert_eq!(pieces(&m, "abca"), ["\u{2581}", "abca"]);
        // "cc" is never merged into: its halves are characters, UNUSED or not.
        assert_eq!(pieces(&m, "cc"), ["\u{2581}", "c", "c"]);

        // A character whose piece is UNUSED (or CONTROL) counts as unknown.
        let m = abc(
            &[
                ("ab", -1.0, NORMAL),
                ("e", -5.0, UNUSED),
                ("x", -5.0, CONTROL),
            ],
            true,
        )
        .load();
        assert_eq!(pieces(&m, "e"), ["\u{2581}", "<0x65>"]);
        assert_eq!(pieces(&m, "x"), ["\u{2581}", "<0x78>"]);
        let m = abc(&[("e", -5.0, UNUSED), ("ee", -1.0, NORMAL)], false).load();
        assert_eq!(pieces(&m, "eee\u{1F600}"), ["\u{2581}", "ee", "<unk>"]);
    }

    #[test]
    fn pieces_with_characters_outside_the_vocabulary_still_merge() {
        let m = abc(
            &[
                ("a\u{2603}", 1.0, NORMAL),
                ("\u{2603}\u{2603}", 2.0, NORMAL),
            ],
            true,
        )
        .load();
        assert_eq!(
            pieces(&m, "a\u{2603}\u{2603}"),
            ["\u{2581}", "a", "\u{2603}\u{2603}"]
        );
        assert_eq!(pieces(&m, "a\u{2603}"), ["\u{2581}", "a\u{2603}"]);
    }

    fn normalized(spec: &Spec, text: &str) -> String {
        let mut out = Vec::new();
        spec.load().normalize(text, &mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    fn normalizer_options() {
        let mut spec = abc(&[], true);
        assert_eq!(normalized(&spec, ""), "");
        assert_eq!(normalized(&spec, " a  b\t"), "▁▁a▁▁b\t");
        spec.remove_extra_whitespaces = true;
        assert_eq!(normalized(&spec, "  a  b  "), "▁a▁b");
        assert_eq!(normalized(&spec, "   "), "");
        assert_eq!(normalized(&spec, "▁"), "");
        assert_eq!(normalized(&spec, "a\u{3000} b"), "▁a\u{3000}▁b");
        spec.add_dummy_prefix = false;
        assert_eq!(normalized(&spec, " a b "), "a▁b");
        spec.remove_extra_whitespaces = false;
        spec.escape_whitespaces = false;
        assert_eq!(normalized(&spec, " a b"), " a b");
        spec.escape_whitespaces = true;
        spec.add_dummy_prefix = true;
        spec.treat_whitespace_as_suffix = true;
        assert_eq!(normalized(&spec, "a b"), "a▁b▁");
    }

    #[test]
    fn load_errors() {
        let err = |spec: Spec, words: &str| {
            let msg = spec.load_err();
            assert!(msg.contains(words), "{msg:?} does not say {words:?}");
        };
        let mut unigram = abc(&[], true);
        unigram.model_type = 1;
        err(unigram, "UNIGRAM");
        err(abc(&[("a", 0.0, NORMAL)], true), "already defined");
        err(abc(&[("\u{2581}", 0.0, CONTROL)], true), "already defined");
        err(
            abc(&[("<unk2>", 0.0, UNKNOWN)], true),
            "unk is already defined",
        );
        err(abc(&[("", 0.0, NORMAL)], true), "empty");
        err(abc(&[("a\0", 0.0, NORMAL)], true), "NUL");
        err(abc(&[("\0", 0.0, NORMAL)], false), "NUL");
        err(abc(&[("<0x41>", 0.0, BYTE)], false), "byte_fallback");
        err(abc(&[("<0x4g>", 0.0, BYTE)], true), "invalid");
        err(abc(&[(&"x".repeat(8000), 0.0, NORMAL)], true), "too long");
        let mut no_unk = abc(&[], true);
        no_unk.pieces[0].2 = CONTROL;
        err(no_unk, "unk is not defined");
        let mut missing_byte = abc(&[], true);
        missing_byte.pieces[3 + 0x41].2 = NORMAL;
        err(missing_byte, "256 byte pieces");
        let mut charsmap = abc(&[], true).bytes();
        let mut n = Vec::new();
        len_field(&mut n, 2, b"\x00\x00\x00\x00");
        len_field(&mut charsmap, 3, &n);
        match SentencePieceBpe::from_bytes(&charsmap) {
            Err(e) => assert!(e.to_string().contains("charsmap")),
            Ok(_) => panic!("a charsmap was accepted"),
        }
        // A piece that is exactly "\0" is kept as UNUSED when byte fallback is on.
        let m = abc(&[("\0", 0.0, NORMAL)], true).load();
        assert_eq!(pieces(&m, "a\0"), ["\u{2581}", "a", "<0x00>"]);
        assert!(matches!(
            SentencePieceBpe::from_file("/nonexistent/sentencepiece.model"),
            Err(Error::Load(_))
        ));
    }

    use crate::text::TestRng as Rng;

    const ALPHABET: [&str; 6] = ["a", "b", "c", "\u{2581}", "\u{e9}", "x"];

    /// A random model over ALPHABET, with some ties, UNUSED and USER_DEFINED pieces.
    fn random_spec(rng: &mut Rng, byte_fallback: bool, unused: bool, splittable: bool) -> Spec {
        let mut seen = HashSet::<String>::new();
        let mut extra = Vec::new();
        for _ in 0..60 {
            let len = 1 + rng.below(4);
            let piece: String = (0..len)
                .map(|_| ALPHABET[rng.below(ALPHABET.len() - 1)])
                .collect();
            if !seen.insert(piece.clone())
                || (splittable && has_space_after_other(piece.as_bytes(), SPACE_SYMBOL))
            {
                continue;
            }
            let score = [-0.0, 0.0, -1.0, -2.0, -(rng.below(100) as f32) / 7.0][rng.below(5)];
            let kind = match rng.below(20) {
                0 if len > 1 => USER_DEFINED,
                1 | 2 if unused => UNUSED,
                _ => NORMAL,
            };
            extra.push((piece, score, kind));
        }
        let refs: Vec<(&str, f32, i32)> =
            extra.iter().map(|(p, s, k)| (p.as_str(), *s, *k)).collect();
        Spec::new(&refs, byte_fallback)
    }

    fn random_text(rng: &mut Rng, max: usize) -> String {
        let n = rng.below(max + 1);
        (0..n)
            .map(|_| [" ", "a", "b", "c", "\u{2581}", "\u{e9}", "x", "ab"][rng.below(8)])
            .collect()
    }

    /// The heap loop over the whole normalized text, without word splitting or caches.
    fn reference_ids(m: &SentencePieceBpe, text: &str, wide: bool) -> Vec<u32> {
        let mut normalized = Vec::new();
        m.normalize(text, &mut normalized);
        let mut ids = Vec::new();
        let mut prev_unknown = false;
        if wide {
            m.bpe::<usize>(
                &normalized,
                &mut Vec::new(),
                &mut Vec::new(),
                &mut prev_unknown,
                &mut ids,
            );
        } else {
            m.bpe::<u32>(
                &normalized,
                &mut Vec::new(),
                &mut Vec::new(),
                &mut prev_unknown,
                &mut ids,
            );
        }
        ids
    }

    #[test]
    fn fast_paths_agree_with_the_heap_loop() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut splits = 0;
        for round in 0..300 {
            let spec = random_spec(&mut rng, round % 3 != 0, round % 4 == 0, round % 2 == 0);
            let m = spec.load();
            splits += usize::from(m.split_words);
            for _ in 0..20 {
                let text = random_text(&mut rng, if round % 5 == 0 { 80 } else { 12 });
                let mut ids = Vec::new();
                m.encode(&text, &mut ids);
                assert_eq!(
                    ids,
                    reference_ids(&m, &text, false),
                    "{text:?}, round {round}"
                );
                assert_eq!(
                    ids,
                    reference_ids(&m, &text, true),
                    "{text:?}, round {round}"
                );
                // Twice: the second time through the word cache.
                let mut again = Vec::new();
                m.encode(&text, &mut again);
                assert_eq!(ids, again);
            }
        }
        assert!(splits > 50, "only {splits} models were split into words");
    }

    #[test]
    fn odd_inputs_do_not_panic() {
        let m = abc(&[("ab", -1.0, NORMAL), ("ab", -1.0, NORMAL)][..1], true).load();
        let long_a = "a".repeat(20_000);
        let mixed = "ab \u{3000}\u{1F600}".repeat(3_000);
        for text in [
            "",
            " ",
            "\u{2581}",
            "\0",
            "\u{10FFFF}",
            "\u{FFFF}",
            "\r\n\t",
            long_a.as_str(),
            mixed.as_str(),
        ] {
            let mut ids = Vec::new();
            m.encode(text, &mut ids);
            assert_eq!(ids, reference_ids(&m, text, false));
            assert_eq!(text.is_empty(), ids.is_empty());
        }
    }
}
