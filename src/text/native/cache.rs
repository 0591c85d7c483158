//! Per-thread word caches and buffers of the native BPE core.
//!
//! Text repeats its words, so each thread remembers the ids of the words it merged, per
//! model, in a map of its own: no lock and no sharing on the hot path. A cache is bounded
//! ([`MAX_WORDS`] words and [`MAX_IDS`] ids in two generations, long words' bytes counted as
//! ids, at most about 6 MB; words longer than [`MAX_WORD_BYTES`] bytes are merged every time,
//! as in the `tokenizers` crate), and
//! its generations follow the text being encoded ([`WordCache`]). Words of at most 23 bytes are
//! keyed inline ([`Key`]); longer ones (a run of CJK characters is one word) by their bytes. A
//! word of one token keeps its id in its slot. A hit returns exactly what merging would
//! (encoding is a pure function of the word). The cache keeps ids only: where token starts are
//! wanted, the tokens' lengths come from the model ([`bpe::BpeModel::token_lens`]).

use std::cell::RefCell;

use rustc_hash::FxHashMap;

use super::bpe;
use super::table::{InlineMap, Key};

/// Words a thread's cache holds per model (in two generations of half as many each: three
/// quarters of a dense table of 2^16 slots, 2 MiB).
pub const MAX_WORDS: usize = 3 << 15;
/// Ids a thread's cache holds per model (in two generations of half as many each, 1 MiB); a
/// word longer than a [`Key`] holds counts as the ids its bytes and its map entry would fill
/// ([`long_cost`]).
pub const MAX_IDS: usize = 1 << 19;
/// Longer words are merged every time (the `tokenizers` crate's limit too).
pub const MAX_WORD_BYTES: usize = 256;
/// Models whose caches a thread keeps (the least recently used goes first).
const MODELS_PER_THREAD: usize = 4;

/// A word of one token: its id in the slot, no entry in `ids` (the top bit of a packed value).
const ONE: u64 = 1 << 63;

/// The ids of a cached word.
pub enum Hit<'a> {
    One(u32),
    Many(&'a [u32]),
}

impl Hit<'_> {
    #[inline]
    pub fn ids(&self) -> &[u32] {
        match self {
            Hit::One(id) => std::slice::from_ref(id),
            Hit::Many(ids) => ids,
        }
    }
}

/// Words and their ids, the ids of words of several tokens in one buffer.
struct Generation {
    /// Word key to `ONE | id`, or to `offset << 32 | count` in `ids`.
    words: InlineMap,
    /// The same for words longer than a [`Key`] holds.
    long_words: FxHashMap<Box<[u8]>, u64>,
    ids: Vec<u32>,
    /// The [`long_cost`] of the words in `long_words`.
    long_cost: usize,
}

impl Generation {
    fn new() -> Self {
        Generation {
            words: InlineMap::dense(1024),
            long_words: FxHashMap::default(),
            ids: Vec::new(),
            long_cost: 0,
        }
    }

    /// The packed value of `word`, if this generation has it.
    #[inline]
    fn packed(&self, word: &[u8], key: Option<Key>) -> Option<u64> {
        match key {
            Some(k) => self.words.get(k),
            None => self.long_words.get(word).copied(),
        }
    }

    /// The ids a packed value of this generation stands for.
    #[inline]
    fn hit(&self, packed: u64) -> Hit<'_> {
        if packed & ONE != 0 {
            Hit::One(packed as u32)
        } else {
            let offset = (packed >> 32) as usize;
            Hit::Many(&self.ids[offset..offset + (packed as u32) as usize])
        }
    }

    /// Whether `word` (whose key is `key`), of `count` ids, would not fit: its ids (none for
    /// a word of one token) and its [`long_cost`].
    #[inline]
    fn full(&self, word: &[u8], key: Option<Key>, count: usize) -> bool {
        let stored = if count == 1 { 0 } else { count };
        self.words.len() + self.long_words.len() >= MAX_WORDS / 2
            || self.ids.len() + self.long_cost + stored + long_cost(word, key) > MAX_IDS / 2
    }

    /// Add `word` and return its packed value.
    #[inline]
    fn insert(&mut self, word: &[u8], key: Option<Key>, ids: &[u32]) -> u64 {
        let packed = match ids {
            [id] => ONE | u64::from(*id),
            _ => {
                let offset = self.ids.len();
                self.ids.extend_from_slice(ids);
                (offset as u64) << 32 | ids.len() as u64
            }
        };
        match key {
            Some(k) => self.words.insert(k, packed),
            None => {
                self.long_cost += long_cost(word, key);
                self.long_words.insert(word.into(), packed);
            }
        }
        packed
    }

    fn clear(&mut self) {
        self.words.clear();
        self.long_words.clear();
        self.ids.clear();
        self.long_cost = 0;
    }
}

/// What a word longer than a [`Key`] holds takes besides its ids, in ids (4 bytes each): its
/// bytes on the heap, and its map entry with the allocation's header (about 32 bytes).
#[inline]
fn long_cost(word: &[u8], key: Option<Key>) -> usize {
    match key {
        Some(_) => 0,
        None => word.len().div_ceil(4) + 8,
    }
}

/// A word cache with two generations: new words go into the young one; when it is full the
/// old one is dropped and the young one takes its place; a word found in the old one is
/// copied into the young one. Frequent words stay, the memory is bounded, and a change of
/// vocabulary in the text (another language) replaces the cached words within two
/// generations.
pub struct WordCache {
    young: Generation,
    old: Generation,
}

impl Default for WordCache {
    fn default() -> Self {
        WordCache {
            young: Generation::new(),
            old: Generation::new(),
        }
    }
}

impl WordCache {
    /// The ids of `word` (whose key is `key`), if cached.
    #[inline]
    pub fn get(&mut self, word: &[u8], key: Option<Key>) -> Option<Hit<'_>> {
        if let Some(packed) = self.young.packed(word, key) {
            return Some(self.young.hit(packed));
        }
        let packed = self.old.packed(word, key)?;
        if self.young.full(word, key, self.old.hit(packed).ids().len()) {
            // Promoting would start a new generation and drop the one the word is in: keep
            // it where it is.
            return Some(self.old.hit(packed));
        }
        let packed = self.young.insert(word, key, self.old.hit(packed).ids());
        Some(self.young.hit(packed))
    }

    /// Remember the ids of `word` (whose key is `key`).
    #[inline]
    pub fn insert(&mut self, word: &[u8], key: Option<Key>, ids: &[u32]) {
        if key.is_none() && word.len() > MAX_WORD_BYTES {
            return;
        }
        if self.young.full(word, key, ids.len()) {
            std::mem::swap(&mut self.young, &mut self.old);
            self.young.clear();
        }
        self.young.insert(word, key, ids);
    }
}

/// Reusable buffers of one thread.
#[derive(Default)]
pub struct Buffers {
    pub bpe: bpe::Scratch,
    pub ids: Vec<u32>,
    pub lens: Vec<u32>,
    /// The normalizer's output.
    pub normalized: Rewrite,
    /// The Metaspace pre-tokenizer's output (of a piece of `normalized`).
    pub pre_tokenized: Rewrite,
}

/// A text rewritten by a normalizer or pre-tokenizer, and, when starts are wanted, the origin
/// in the caller's text of each of its bytes.
#[derive(Default)]
pub struct Rewrite {
    pub text: String,
    pub origins: Vec<usize>,
}

impl Rewrite {
    /// Give back the memory of a very long text.
    fn trim(&mut self, keep: usize) {
        if self.text.capacity() > keep {
            self.text = String::new();
        }
        if self.origins.capacity() > keep {
            self.origins = Vec::new();
        }
    }
}

impl Buffers {
    /// Give back the memory of a very long text.
    fn trim(&mut self) {
        const KEEP: usize = 1 << 20;
        self.normalized.trim(KEEP);
        self.pre_tokenized.trim(KEEP);
        if self.ids.capacity() > KEEP {
            self.ids = Vec::new();
            self.lens = Vec::new();
            self.bpe = bpe::Scratch::default();
        }
    }
}

#[derive(Default)]
struct ThreadState {
    /// The caches of the models this thread used last, the most recent last.
    caches: Vec<(u64, WordCache)>,
    buffers: Buffers,
}

thread_local! {
    static STATE: RefCell<ThreadState> = RefCell::new(ThreadState::default());
}

/// Run `f` with this thread's cache for model `key` and its buffers.
pub fn with<R>(key: u64, f: impl FnOnce(&mut WordCache, &mut Buffers) -> R) -> R {
    STATE.with(|state| {
        let Ok(mut state) = state.try_borrow_mut() else {
            // Re-entered (cannot happen today): run with fresh, unshared state.
            return f(&mut WordCache::default(), &mut Buffers::default());
        };
        let state = &mut *state;
        let i = match state.caches.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                if state.caches.len() >= MODELS_PER_THREAD {
                    state.caches.remove(0);
                }
                state.caches.push((key, WordCache::default()));
                state.caches.len() - 1
            }
        };
        if i + 1 != state.caches.len() {
            let entry = state.caches.remove(i);
            state.caches.push(entry);
        }
        let cache = &mut state.caches.last_mut().expect("just pushed").1;
        let r = f(cache, &mut state.buffers);
        state.buffers.trim();
        r
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(cache: &mut WordCache, word: &[u8]) -> Option<Vec<u32>> {
        cache
            .get(word, Key::new(word))
            .map(|hit| hit.ids().to_vec())
    }

    fn insert(cache: &mut WordCache, word: &[u8], ids: &[u32]) {
        cache.insert(word, Key::new(word), ids);
    }

    #[test]
    fn one_token_words_take_no_ids_and_old_words_move_to_the_young_generation() {
        let mut cache = WordCache::default();
        insert(&mut cache, b"ab", &[7]);
        insert(&mut cache, b"abc", &[1, 2, 3]);
        assert_eq!(cache.young.ids, [1, 2, 3]);
        assert_eq!(get(&mut cache, b"ab"), Some(vec![7]));
        assert_eq!(get(&mut cache, b"abc"), Some(vec![1, 2, 3]));
        assert_eq!(get(&mut cache, b"abd"), None);
        // Fill a generation: "abc" is then in the old one, and a hit brings it back.
        for i in 0..MAX_WORDS / 2 {
            insert(&mut cache, format!("w{i}").as_bytes(), &[i as u32, 0]);
        }
        assert!(cache.young.packed(b"abc", Key::new(b"abc")).is_none());
        assert_eq!(get(&mut cache, b"abc"), Some(vec![1, 2, 3]));
        assert!(cache.young.packed(b"abc", Key::new(b"abc")).is_some());
        let w = format!("w{}", MAX_WORDS / 2 - 1);
        assert_eq!(
            get(&mut cache, w.as_bytes()),
            Some(vec![MAX_WORDS as u32 / 2 - 1, 0])
        );
    }

    #[test]
    fn long_words_count_their_bytes_against_the_bound() {
        let mut cache = WordCache::default();
        let word = |i: usize| format!("{i:0>200}").into_bytes();
        for i in 0..20_000 {
            insert(&mut cache, &word(i), &[i as u32, 1]);
            for g in [&cache.young, &cache.old] {
                assert!(g.ids.len() + g.long_cost <= MAX_IDS / 2);
            }
        }
        // 20,000 words of 200 bytes would be 4 MB of keys; a generation holds about 4,600.
        assert!(cache.young.long_words.len() + cache.old.long_words.len() < 10_000);
        assert_eq!(get(&mut cache, &word(19_999)), Some(vec![19_999, 1]));
        assert_eq!(get(&mut cache, &word(0)), None);
        // Words longer than MAX_WORD_BYTES are not cached.
        let longest = vec![b'x'; MAX_WORD_BYTES + 1];
        insert(&mut cache, &longest, &[1, 2]);
        assert_eq!(get(&mut cache, &longest), None);
    }
}
