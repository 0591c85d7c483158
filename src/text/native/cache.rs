//! Per-thread word caches and buffers of the native BPE core.
//!
//! Text repeats its words, so each thread remembers the ids of the words it merged, per
//! model, in a map of its own: no lock and no sharing on the hot path. A cache is bounded
//! ([`MAX_WORDS`] words and [`MAX_IDS`] ids in two generations, at most about 12 MB; words
//! longer than [`MAX_WORD_BYTES`] bytes are merged every time, as in the `tokenizers` crate), and
//! its generations follow the text being encoded ([`WordCache`]). Words of at most 23 bytes are
//! keyed inline ([`Key`]); longer ones (a run of CJK characters is one word) by their bytes. A
//! hit returns exactly what merging would (encoding is a pure function of the word).

use std::cell::RefCell;

use rustc_hash::FxHashMap;

use super::bpe;
use super::table::{InlineMap, Key};

/// Words a thread's cache holds per model (in two generations of half as many each).
pub const MAX_WORDS: usize = 1 << 17;
/// Ids a thread's cache holds per model (in two generations of half as many each).
pub const MAX_IDS: usize = 1 << 19;
/// Longer words are merged every time (the `tokenizers` crate's limit too).
pub const MAX_WORD_BYTES: usize = 256;
/// Models whose caches a thread keeps (the least recently used goes first).
const MODELS_PER_THREAD: usize = 4;

/// Words and their ids and token lengths, the ids of all words in one buffer.
struct Generation {
    /// Word key to `offset << 32 | count` in `ids` and `lens`.
    words: InlineMap,
    /// The same for words longer than a [`Key`] holds.
    long_words: FxHashMap<Box<[u8]>, u64>,
    ids: Vec<u32>,
    lens: Vec<u32>,
}

impl Generation {
    fn new() -> Self {
        Generation {
            words: InlineMap::with_capacity(1024),
            long_words: FxHashMap::default(),
            ids: Vec::new(),
            lens: Vec::new(),
        }
    }

    #[inline]
    fn get(&self, word: &[u8], key: Option<Key>) -> Option<(usize, usize)> {
        let packed = match key {
            Some(k) => self.words.get(k)?,
            None => *self.long_words.get(word)?,
        };
        Some(((packed >> 32) as usize, (packed as u32) as usize))
    }

    #[inline]
    fn full(&self, more_ids: usize) -> bool {
        self.words.len() + self.long_words.len() >= MAX_WORDS / 2
            || self.ids.len() + more_ids > MAX_IDS / 2
    }

    #[inline]
    fn insert(
        &mut self,
        word: &[u8],
        key: Option<Key>,
        ids: &[u32],
        lens: &[u32],
    ) -> (usize, usize) {
        let offset = self.ids.len();
        let packed = (offset as u64) << 32 | ids.len() as u64;
        self.ids.extend_from_slice(ids);
        self.lens.extend_from_slice(lens);
        match key {
            Some(k) => self.words.insert(k, packed),
            None => {
                self.long_words.insert(word.into(), packed);
            }
        }
        (offset, ids.len())
    }

    fn clear(&mut self) {
        self.words.clear();
        self.long_words.clear();
        self.ids.clear();
        self.lens.clear();
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
    /// The ids and token lengths of `word` (whose key is `key`), if cached.
    #[inline]
    pub fn get(&mut self, word: &[u8], key: Option<Key>) -> Option<(&[u32], &[u32])> {
        if let Some((offset, count)) = self.young.get(word, key) {
            let range = offset..offset + count;
            return Some((&self.young.ids[range.clone()], &self.young.lens[range]));
        }
        let (offset, count) = self.old.get(word, key)?;
        let range = offset..offset + count;
        if self.young.full(count) {
            // Promoting would start a new generation and drop the one the word is in: keep
            // it where it is.
            return Some((&self.old.ids[range.clone()], &self.old.lens[range]));
        }
        let (ids, lens) = (&self.old.ids[range.clone()], &self.old.lens[range]);
        let (offset, count) = self.young.insert(word, key, ids, lens);
        let range = offset..offset + count;
        Some((&self.young.ids[range.clone()], &self.young.lens[range]))
    }

    /// Remember the ids of `word` (whose key is `key`).
    #[inline]
    pub fn insert(&mut self, word: &[u8], key: Option<Key>, ids: &[u32], lens: &[u32]) {
        if key.is_none() && word.len() > MAX_WORD_BYTES {
            return;
        }
        if self.young.full(ids.len()) {
            std::mem::swap(&mut self.young, &mut self.old);
            self.young.clear();
        }
        self.young.insert(word, key, ids, lens);
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
