//! Per-thread word caches and buffers of the native BPE core.
//!
//! Text repeats its words, so each thread remembers the ids of the words it merged, per
//! model, in a map of its own: no lock and no sharing on the hot path. A cache is bounded
//! ([`MAX_WORDS`] words of at most [`MAX_WORD_BYTES`] bytes, at most [`MAX_IDS`] ids) and
//! starts over when full, so it follows the text being encoded. A hit returns exactly what
//! merging would (encoding is a pure function of the word).

use std::cell::RefCell;

use rustc_hash::FxHashMap;

use super::bpe;

/// Words a thread's cache holds per model before it starts over.
pub const MAX_WORDS: usize = 1 << 16;
/// Ids a thread's cache holds per model before it starts over.
pub const MAX_IDS: usize = 1 << 19;
/// Longer words are merged every time (they rarely repeat).
pub const MAX_WORD_BYTES: usize = 64;
/// Models whose caches a thread keeps (the least recently used goes first).
const MODELS_PER_THREAD: usize = 4;

/// Words and their ids and token lengths, the ids of all words in one buffer.
#[derive(Default)]
pub struct WordCache {
    words: FxHashMap<Box<[u8]>, (u32, u32)>,
    ids: Vec<u32>,
    lens: Vec<u32>,
}

impl WordCache {
    /// The ids and token lengths of `word`, if cached.
    #[inline]
    pub fn get(&self, word: &[u8]) -> Option<(&[u32], &[u32])> {
        let &(offset, count) = self.words.get(word)?;
        let range = offset as usize..(offset + count) as usize;
        Some((&self.ids[range.clone()], &self.lens[range]))
    }

    /// Remember the ids of `word`.
    #[inline]
    pub fn insert(&mut self, word: &[u8], ids: &[u32], lens: &[u32]) {
        if word.len() > MAX_WORD_BYTES {
            return;
        }
        if self.words.len() >= MAX_WORDS || self.ids.len() + ids.len() > MAX_IDS {
            self.words.clear();
            self.ids.clear();
            self.lens.clear();
        }
        let offset = self.ids.len() as u32;
        self.ids.extend_from_slice(ids);
        self.lens.extend_from_slice(lens);
        self.words.insert(word.into(), (offset, ids.len() as u32));
    }
}

/// Reusable buffers of one thread.
#[derive(Default)]
pub struct Buffers {
    pub bpe: bpe::Scratch,
    pub ids: Vec<u32>,
    pub lens: Vec<u32>,
    pub normalized: String,
    pub normalized_origins: Vec<usize>,
    pub pre_tokenized: String,
    pub pre_tokenized_origins: Vec<usize>,
}

impl Buffers {
    /// Give back the memory of a very long text.
    fn trim(&mut self) {
        const KEEP: usize = 1 << 20;
        if self.normalized.capacity() > KEEP {
            self.normalized = String::new();
        }
        if self.pre_tokenized.capacity() > KEEP {
            self.pre_tokenized = String::new();
        }
        if self.normalized_origins.capacity() > KEEP {
            self.normalized_origins = Vec::new();
        }
        if self.pre_tokenized_origins.capacity() > KEEP {
            self.pre_tokenized_origins = Vec::new();
        }
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
