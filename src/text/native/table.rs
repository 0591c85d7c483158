//! A hash table for short byte strings stored inline: the vocabulary and the word caches.
//!
//! A general map from `Box<[u8]>` keys costs two cache misses per lookup (the slot, then the
//! key's heap allocation) and an allocation per insert. Words are short, so a word of at most
//! [`MAX_KEY_BYTES`] bytes is packed into a [`Key`] of three integers (its bytes, zero padded,
//! with the length in the last byte), compared with three integer comparisons, and kept in
//! the slot itself: open addressing, linear probing, one miss per lookup. A byte of tags per
//! slot, probed first, keeps the probes past other keys (and the misses) in cache.

use crate::text::image::{ReadResult, Reader, Writer};

/// The longest word a [`Key`] holds.
pub const MAX_KEY_BYTES: usize = 23;

/// A word of at most [`MAX_KEY_BYTES`] bytes. The empty word is the empty slot, and is never
/// stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Key([u64; 3]);

impl Key {
    /// The key of `word`, or `None` if it is longer than [`MAX_KEY_BYTES`] or empty.
    #[inline]
    pub fn new(word: &[u8]) -> Option<Self> {
        if word.is_empty() || word.len() > MAX_KEY_BYTES {
            return None;
        }
        // Loaded straight from the word, not through a zeroed buffer: writing the bytes and
        // reading them back as integers stalls on store forwarding, on every word.
        let len = word.len();
        let (w0, w1, w2) = if len <= 8 {
            (load_short(word), 0, 0)
        } else if len <= 16 {
            (load8(word), load_short(&word[8..]), 0)
        } else {
            (load8(word), load8(&word[8..]), load_short(&word[16..]))
        };
        Some(Key([w0, w1, w2 | (len as u64) << 56]))
    }

    /// The key as [`Key::new`] defines it, through a buffer (the tests' reference).
    #[cfg(test)]
    fn new_through_buffer(word: &[u8]) -> Option<Self> {
        if word.is_empty() || word.len() > MAX_KEY_BYTES {
            return None;
        }
        let mut b = [0u8; 24];
        b[..word.len()].copy_from_slice(word);
        b[23] = word.len() as u8;
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        Some(Key([w(0), w(1), w(2)]))
    }

    #[inline]
    fn hash(&self) -> u64 {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let h = (self.0[0].wrapping_mul(K) ^ self.0[1])
            .wrapping_mul(K)
            .rotate_left(26)
            ^ self.0[2];
        let h = h.wrapping_mul(K);
        h ^ (h >> 32)
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.0 == [0; 3]
    }

    /// The length in bytes of the word this key holds.
    #[inline]
    pub fn byte_len(&self) -> usize {
        usize::from((self.0[2] >> 56) as u8).min(MAX_KEY_BYTES)
    }

    /// The word this key holds.
    pub fn bytes(&self) -> Vec<u8> {
        let mut b = [0u8; 24];
        for (i, w) in self.0.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        b[..usize::from(b[23]).min(MAX_KEY_BYTES)].to_vec()
    }
}

/// The first 8 bytes of `b` (at least 8), little-endian.
#[inline]
fn load8(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))
}

/// The bytes of `b` (at most 8), little-endian and zero padded, by loads that stay inside
/// `b` (two overlapping ones from 4 bytes up: the bytes both hold are the same).
#[inline]
fn load_short(b: &[u8]) -> u64 {
    let n = b.len();
    let u32_at = |i: usize| u64::from(u32::from_le_bytes(b[i..i + 4].try_into().expect("4")));
    match n {
        0 => 0,
        1..=3 => {
            u64::from(b[0])
                | u64::from(b[n / 2]) << (8 * (n / 2))
                | u64::from(b[n - 1]) << (8 * (n - 1))
        }
        _ => u32_at(0) | u32_at(n - 4) << (8 * (n - 4)),
    }
}

/// Short words to 64-bit values. Beside the slots, one tag byte per slot (7 bits of the
/// key's hash, and the top bit for a used slot) is probed first: the tags of a word cache
/// (64 KiB) stay in L2 where its slots (2 MiB) do not, so a probe past other words, and a miss,
/// read no slot, and a hit reads one.
#[derive(Clone)]
pub struct InlineMap {
    slots: Vec<(Key, u64)>,
    tags: Vec<u8>,
    len: usize,
    /// Grow when three quarters full instead of half ([`InlineMap::dense`]).
    dense: bool,
}

impl Default for InlineMap {
    fn default() -> Self {
        Self::with_capacity(16)
    }
}

/// The tag of an empty slot.
const FREE: u8 = 0;

/// The tag of a key of hash `h`: never [`FREE`].
#[inline]
fn tag(h: u64) -> u8 {
    0x80 | (h >> 57) as u8
}

impl InlineMap {
    /// An empty map of `slots` slots (a power of two, at least 16).
    fn empty(slots: usize, dense: bool) -> Self {
        InlineMap {
            slots: vec![(Key::default(), 0); slots],
            tags: vec![FREE; slots],
            len: 0,
            dense,
        }
    }

    /// A map that holds `capacity` entries before it grows.
    pub fn with_capacity(capacity: usize) -> Self {
        Self::empty((capacity * 2).next_power_of_two().max(16), false)
    }

    /// A map of `slots` slots (a power of two) that doubles when three quarters full: a
    /// quarter less memory per entry than half full, for a probe or two more on a miss (the
    /// word caches, whose memory every thread keeps).
    pub fn dense(slots: usize) -> Self {
        Self::empty(slots.next_power_of_two().max(16), true)
    }

    /// The number of entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The value of `key`.
    #[inline]
    pub fn get(&self, key: Key) -> Option<u64> {
        let mask = self.tags.len() - 1;
        let h = key.hash();
        let t = tag(h);
        let mut i = h as usize & mask;
        loop {
            let found = self.tags[i];
            if found == t {
                let (k, v) = &self.slots[i];
                if *k == key {
                    return Some(*v);
                }
            } else if found == FREE {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// Set the value of `key` (the table doubles when half full, or three quarters when
    /// dense).
    pub fn insert(&mut self, key: Key, value: u64) {
        let full = if self.dense {
            (self.len + 1) * 4 > self.slots.len() * 3
        } else {
            (self.len + 1) * 2 > self.slots.len()
        };
        if full {
            let old = std::mem::replace(self, Self::empty(self.slots.len() * 2, self.dense));
            for (k, v) in old.entries() {
                self.insert(k, v);
            }
        }
        let mask = self.tags.len() - 1;
        let h = key.hash();
        let t = tag(h);
        let mut i = h as usize & mask;
        loop {
            let found = self.tags[i];
            if found == FREE {
                self.tags[i] = t;
                self.slots[i] = (key, value);
                self.len += 1;
                return;
            }
            if found == t && self.slots[i].0 == key {
                self.slots[i].1 = value;
                return;
            }
            i = (i + 1) & mask;
        }
    }

    /// The keys and values, in slot order.
    pub fn entries(&self) -> impl Iterator<Item = (Key, u64)> + '_ {
        self.tags
            .iter()
            .zip(&self.slots)
            .filter(|(&t, _)| t != FREE)
            .map(|(_, &s)| s)
    }

    /// Write the table: its size and its entries (not its empty slots), sorted, so that equal
    /// tables write equal bytes whatever order their entries were inserted in.
    pub fn write(&self, w: &mut Writer) {
        w.len(self.slots.len());
        let mut entries: Vec<(Key, u64)> = self.entries().collect();
        entries.sort_unstable_by_key(|(k, v)| (k.0, *v));
        let flat: Vec<u64> = entries
            .into_iter()
            .flat_map(|(k, v)| [k.0[0], k.0[1], k.0[2], v])
            .collect();
        w.u64s(&flat);
    }

    /// Read a table [`InlineMap::write`] wrote (its entries inserted again, into as many
    /// slots as it had).
    pub fn read(r: &mut Reader<'_>) -> ReadResult<Self> {
        let slots = r.u64()?;
        let flat = r.u64s()?;
        let len = flat.len() / 4;
        let slots = usize::try_from(slots)
            .ok()
            .filter(|&n| n.is_power_of_two() && n >= 16 && len * 2 <= n && n <= 1 << 28)
            .ok_or("an inline table has an impossible size")?;
        if flat.len() % 4 != 0 {
            return Err("an inline table has an impossible size".into());
        }
        let mut map = Self::empty(slots, false);
        for c in flat.chunks_exact(4) {
            let key = Key([c[0], c[1], c[2]]);
            if key.is_empty() {
                return Err("an inline table has an empty key".into());
            }
            map.insert(key, c[3]);
        }
        Ok(map)
    }

    /// Remove every entry, keeping the memory (only the tags are cleared).
    pub fn clear(&mut self) {
        if self.len > 0 {
            self.tags.fill(FREE);
            self.len = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_loaded_as_the_zero_padded_bytes_and_the_length() {
        let bytes: Vec<u8> = (0..64u32).map(|i| (i * 37 + 11) as u8 | 1).collect();
        for start in 0..8 {
            for len in 0..=MAX_KEY_BYTES + 1 {
                let word = &bytes[start..start + len];
                assert_eq!(Key::new(word), Key::new_through_buffer(word), "{word:?}");
                if let Some(k) = Key::new(word) {
                    assert_eq!((k.bytes(), k.byte_len()), (word.to_vec(), len));
                }
            }
        }
        assert_eq!(Key::new(&[0xff; 3]), Key::new_through_buffer(&[0xff; 3]));
    }

    #[test]
    fn short_words_round_trip_and_long_ones_have_no_key() {
        let words: Vec<Vec<u8>> = (0..5000u32).map(|i| format!("w{i}").into_bytes()).collect();
        // (a dense map holds the words in half the slots)
        for (mut m, slots) in [(InlineMap::default(), 16384), (InlineMap::dense(16), 8192)] {
            for (i, w) in words.iter().enumerate() {
                m.insert(Key::new(w).unwrap(), i as u64);
            }
            assert_eq!((m.len(), m.slots.len()), (5000, slots));
            for (i, w) in words.iter().enumerate() {
                assert_eq!(m.get(Key::new(w).unwrap()), Some(i as u64));
            }
            assert_eq!(m.get(Key::new(b"absent").unwrap()), None);
        }
        let mut m = InlineMap::default();
        // A word and the same word with a NUL byte more differ (the length is in the key).
        m.insert(Key::new(b"a").unwrap(), 1);
        assert_eq!(m.get(Key::new(b"a\0").unwrap()), None);
        assert!(Key::new(&[b'x'; 24]).is_none() && Key::new(b"").is_none());
        m.clear();
        assert!(m.len() == 0 && m.get(Key::new(b"a").unwrap()).is_none());
        // Clearing leaves the slots as they were and frees their tags.
        m.insert(Key::new(b"b").unwrap(), 2);
        assert_eq!(m.get(Key::new(b"b").unwrap()), Some(2));
        assert_eq!(m.get(Key::new(b"a").unwrap()), None);
        assert_eq!(
            m.entries().collect::<Vec<_>>(),
            [(Key::new(b"b").unwrap(), 2)]
        );
    }
}

/// Merge pairs to their rank, packed into one 64-bit slot each (`left | right | rank` in as
/// many bits as the vocabulary and the merge list need), open addressing: half the memory of
/// a key-value table, so more of it stays in cache. A lookup is the merge loop's hot spot.
///
/// Pairs of two ids below [`GRID`] are also answered by a dense grid (one load, no probe, 1 MiB
/// that stays in L2). Vocabularies number their tokens in the order their merges were learned,
/// so low ids are the frequent tokens: bytes, characters and the first merges, which most
/// lookups of the merge loop are.
pub struct PairRanks {
    slots: Vec<u64>,
    id_bits: u32,
    rank_bits: u32,
    /// `grid[a * GRID + b]`: the rank of `(a, b)` for `a, b < GRID`, or `u32::MAX`; derived
    /// from `slots`, never written.
    grid: Vec<u32>,
    /// A two-bit Bloom filter of the pairs outside the grid (one 64-bit word per pair, 512 KiB):
    /// most pairs the merge loop asks about do not merge, and the filter answers most of those
    /// from L2 instead of a probe of the table in memory. Derived from `slots`.
    filter: Vec<u64>,
}

/// The words of [`PairRanks`]' filter (a power of two).
const FILTER_WORDS: usize = 1 << 16;

/// The side of [`PairRanks`]' dense grid.
const GRID: u32 = 512;

/// The empty slot (a packed entry leaves the top bit clear).
const EMPTY: u64 = u64::MAX;

impl PairRanks {
    /// A map of `(left, right, rank)` entries (a later entry for the same pair replaces an
    /// earlier one), or `None` if ids and ranks do not fit in 63 bits together.
    pub fn new(entries: &[(u32, u32, u32)], max_id: u32, max_rank: u32) -> Option<Self> {
        let bits = |n: u32| 32 - n.leading_zeros();
        let (id_bits, rank_bits) = (bits(max_id).max(1), bits(max_rank).max(1));
        if 2 * id_bits + rank_bits > 63 {
            return None;
        }
        let n = (entries.len() * 2).next_power_of_two().max(16);
        let mut map = PairRanks {
            slots: vec![EMPTY; n],
            id_bits,
            rank_bits,
            grid: Vec::new(),
            filter: Vec::new(),
        };
        let mask = n - 1;
        for &(a, b, rank) in entries {
            let key = map.key(a, b);
            let mut i = Self::slot(key) & mask;
            loop {
                let s = map.slots[i];
                if s == EMPTY || s >> rank_bits == key {
                    map.slots[i] = key << rank_bits | u64::from(rank);
                    break;
                }
                i = (i + 1) & mask;
            }
        }
        map.fill_grid();
        Some(map)
    }

    /// The filter word and the two bits of a pair's hash.
    #[inline]
    fn filter_bits(h: usize) -> (usize, u64) {
        let h = h as u64;
        let bits = 1u64 << (h >> 58) | 1u64 << ((h >> 52) & 63);
        ((h >> 36) as usize & (FILTER_WORDS - 1), bits)
    }

    /// Fill the dense grid and the filter from the slots.
    fn fill_grid(&mut self) {
        let mut filter = vec![0u64; FILTER_WORDS];
        let mut grid = vec![u32::MAX; (GRID * GRID) as usize];
        let (id_mask, rank_mask) = ((1u64 << self.id_bits) - 1, (1u64 << self.rank_bits) - 1);
        for &s in self.slots.iter().filter(|&&s| s != EMPTY) {
            let key = s >> self.rank_bits;
            let (a, b) = (key >> self.id_bits, key & id_mask);
            if a < u64::from(GRID) && b < u64::from(GRID) {
                grid[(a * u64::from(GRID) + b) as usize] = (s & rank_mask) as u32;
            } else {
                let (word, bits) = Self::filter_bits(Self::slot(key));
                filter[word] |= bits;
            }
        }
        self.grid = grid;
        self.filter = filter;
    }

    /// The `(left, right, rank)` entries, in slot order.
    pub fn entries(&self) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        let (id_mask, rank_mask) = ((1u64 << self.id_bits) - 1, (1u64 << self.rank_bits) - 1);
        self.slots.iter().filter(|&&s| s != EMPTY).map(move |&s| {
            let key = s >> self.rank_bits;
            (
                (key >> self.id_bits) as u32,
                (key & id_mask) as u32,
                (s & rank_mask) as u32,
            )
        })
    }

    /// The highest rank in the table.
    pub fn max_rank(&self) -> Option<u32> {
        let mask = (1u64 << self.rank_bits) - 1;
        self.slots
            .iter()
            .filter(|&&s| s != EMPTY)
            .map(|&s| (s & mask) as u32)
            .max()
    }

    /// Write the table: its layout and its entries (not its empty slots), sorted.
    pub fn write(&self, w: &mut Writer) {
        w.u32(self.id_bits);
        w.u32(self.rank_bits);
        w.len(self.slots.len());
        let mut entries: Vec<u64> = self.slots.iter().copied().filter(|&s| s != EMPTY).collect();
        entries.sort_unstable();
        w.u64s(&entries);
    }

    /// Read a table [`PairRanks::write`] wrote (its entries inserted again, into as many slots
    /// as it had).
    pub fn read(r: &mut Reader<'_>) -> ReadResult<Self> {
        let (id_bits, rank_bits) = (r.u32()?, r.u32()?);
        let slots = r.u64()?;
        let entries = r.u64s()?;
        let slots = usize::try_from(slots)
            .ok()
            .filter(|&n| n.is_power_of_two() && n > entries.len() && n <= 1 << 30);
        let (Some(n), true) = (
            slots,
            id_bits > 0 && rank_bits > 0 && 2 * id_bits + rank_bits <= 63,
        ) else {
            return Err("a merge table has an impossible layout".into());
        };
        let mut map = PairRanks {
            slots: vec![EMPTY; n],
            id_bits,
            rank_bits,
            grid: Vec::new(),
            filter: Vec::new(),
        };
        let mask = n - 1;
        for &entry in &entries {
            if entry == EMPTY || entry >> (2 * id_bits + rank_bits) != 0 {
                return Err("a merge table has an impossible entry".into());
            }
            let key = entry >> rank_bits;
            let mut i = Self::slot(key) & mask;
            while map.slots[i] != EMPTY {
                if map.slots[i] >> rank_bits == key {
                    return Err("a merge table has a pair twice".into());
                }
                i = (i + 1) & mask;
            }
            map.slots[i] = entry;
        }
        map.fill_grid();
        Ok(map)
    }

    #[inline]
    fn key(&self, a: u32, b: u32) -> u64 {
        u64::from(a) << self.id_bits | u64::from(b)
    }

    #[inline]
    fn slot(key: u64) -> usize {
        let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h ^ (h >> 29)) as usize
    }

    /// The rank of merging `a` and `b`, if they merge.
    #[inline]
    pub fn get(&self, a: u32, b: u32) -> Option<u32> {
        if a < GRID && b < GRID {
            let r = self.grid[(a * GRID + b) as usize];
            return (r != u32::MAX).then_some(r);
        }
        if a >> self.id_bits != 0 || b >> self.id_bits != 0 {
            return None;
        }
        let key = self.key(a, b);
        let h = Self::slot(key);
        let (word, bits) = Self::filter_bits(h);
        if self.filter[word] & bits != bits {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = h & mask;
        loop {
            let s = self.slots[i];
            if s == EMPTY {
                return None;
            }
            if s >> self.rank_bits == key {
                return Some((s & ((1 << self.rank_bits) - 1)) as u32);
            }
            i = (i + 1) & mask;
        }
    }
}
