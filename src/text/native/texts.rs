//! A cache of whole texts the native core encoded: system prompts, few-shot blocks and tool
//! schemas come back in every request and every training conversation, and a text seen before
//! costs a hash, a comparison and a copy of its ids instead of its encoding.
//!
//! * One cache per model, shared by the threads (16 shards, each behind its own lock).
//! * Until a shard first fills, every text is remembered. From then on a text is remembered
//!   from its second sighting: the first only sets a bit of the shard's doorkeeper (a Bloom
//!   filter of one hash). A stream of distinct texts, as a training set mostly is, then costs
//!   one hash per text and does not churn the cache.
//! * Bounded: [`DEFAULT_BYTES`] of texts and ids per model (`CHATIDS_TEXT_CACHE_MB` sets it, `0`
//!   turns the cache off), in two generations per shard, as the word caches ([`super::cache`]).
//! * Exact: an entry holds the text and its options, compared in full on every hit, and the
//!   ids are those the core computed for exactly that text (encoding is a pure function of
//!   the text, the options and the model). Only encodings without token offsets use it.

use std::hash::Hasher;
use std::sync::Mutex;

use rustc_hash::{FxHashMap, FxHasher};

use super::super::TextOptions;

/// Bytes of texts and ids a model's cache holds by default (64 MiB).
pub const DEFAULT_BYTES: usize = 64 << 20;
/// Shorter texts are not cached: their words are in the word caches, and a lookup would cost
/// about as much as encoding them.
const MIN_TEXT_BYTES: usize = 64;
const SHARDS: usize = 16;
/// Bits of a shard's doorkeeper; it starts over when a quarter of them were set.
const DOORKEEPER_BITS: usize = 1 << 16;
/// Bytes an entry costs besides its text and ids (the map slot, two allocations).
const ENTRY_OVERHEAD: usize = 64;

struct Entry {
    options: u8,
    text: Box<str>,
    ids: Box<[u32]>,
}

impl Entry {
    fn bytes(&self) -> usize {
        self.text.len() + 4 * self.ids.len() + ENTRY_OVERHEAD
    }
}

#[derive(Default)]
struct Shard {
    /// Text hash to entry (a hash shared by two texts keeps the later one).
    young: FxHashMap<u64, Entry>,
    old: FxHashMap<u64, Entry>,
    young_bytes: usize,
    doorkeeper: Vec<u64>,
    doorkeeper_set: usize,
}

impl Shard {
    /// The cached ids of `text` (moved to the young generation when found in the old one).
    fn get(&mut self, hash: u64, options: u8, text: &str, limit: usize) -> Option<&[u32]> {
        let matches = |e: &Entry| e.options == options && &*e.text == text;
        if self.young.get(&hash).is_some_and(matches) {
            return self.young.get(&hash).map(|e| &*e.ids);
        }
        if !self.old.get(&hash).is_some_and(matches) {
            return None;
        }
        let entry = self.old.remove(&hash)?;
        self.insert(hash, entry, limit);
        self.young.get(&hash).map(|e| &*e.ids)
    }

    /// Whether `hash` was seen before (and remember it now).
    fn seen(&mut self, hash: u64) -> bool {
        if self.doorkeeper.is_empty() || self.doorkeeper_set >= DOORKEEPER_BITS / 4 {
            self.doorkeeper = vec![0; DOORKEEPER_BITS / 64];
            self.doorkeeper_set = 0;
        }
        let bit = (hash >> 40) as usize % DOORKEEPER_BITS;
        let (word, mask) = (bit / 64, 1u64 << (bit % 64));
        let seen = self.doorkeeper[word] & mask != 0;
        if !seen {
            self.doorkeeper[word] |= mask;
            self.doorkeeper_set += 1;
        }
        seen
    }

    fn insert(&mut self, hash: u64, entry: Entry, limit: usize) {
        let bytes = entry.bytes();
        if self.young_bytes + bytes > limit / 2 {
            self.old = std::mem::take(&mut self.young);
            self.young_bytes = 0;
        }
        self.young_bytes += bytes;
        if let Some(replaced) = self.young.insert(hash, entry) {
            self.young_bytes -= replaced.bytes();
        }
    }
}

/// A model's cache of whole texts (see the module documentation).
pub struct TextCache {
    shards: Box<[Mutex<Shard>]>,
    /// Bytes one shard holds (two generations); 0 when the cache is off.
    shard_bytes: usize,
}

impl TextCache {
    /// A cache of `bytes` in all (0: off).
    pub fn new(bytes: usize) -> Self {
        TextCache {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            shard_bytes: bytes / SHARDS,
        }
    }

    /// A cache of the size `CHATIDS_TEXT_CACHE_MB` asks for (in MiB), else [`DEFAULT_BYTES`].
    pub fn from_env() -> Self {
        let bytes = std::env::var("CHATIDS_TEXT_CACHE_MB")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .map_or(DEFAULT_BYTES, |mb| mb.saturating_mul(1 << 20));
        Self::new(bytes)
    }

    /// Append the ids of `text` to `ids` from the cache, or from `encode` (which appends them),
    /// remembering them when the text was seen before.
    pub fn encode(
        &self,
        text: &str,
        options: TextOptions,
        ids: &mut Vec<u32>,
        encode: impl FnOnce(&mut Vec<u32>),
    ) {
        // An entry holds at most an eighth of its shard, so one text cannot empty a shard.
        let cacheable = text.len() >= MIN_TEXT_BYTES && 5 * text.len() <= self.shard_bytes / 8;
        if !cacheable {
            return encode(ids);
        }
        let options = u8::from(options.added_tokens) | u8::from(options.at_start) << 1;
        let mut h = FxHasher::default();
        h.write(text.as_bytes());
        h.write_u8(options);
        let hash = h.finish();
        let shard = &self.shards[(hash >> 60) as usize % SHARDS];
        let admit = {
            let Ok(mut s) = shard.lock() else {
                return encode(ids);
            };
            if let Some(cached) = s.get(hash, options, text, self.shard_bytes) {
                ids.extend_from_slice(cached);
                return;
            }
            s.old.is_empty() || s.seen(hash)
        };
        let start = ids.len();
        encode(ids);
        if admit {
            let entry = Entry {
                options,
                text: text.into(),
                ids: ids[start..].into(),
            };
            if entry.bytes() <= self.shard_bytes / 8 {
                if let Ok(mut s) = shard.lock() {
                    s.insert(hash, entry, self.shard_bytes);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTIONS: TextOptions = TextOptions {
        added_tokens: true,
        at_start: true,
    };

    /// Encode through the cache; whether the encoder ran.
    fn run(cache: &TextCache, text: &str, options: TextOptions, ids: &[u32]) -> bool {
        let mut out = vec![7];
        let mut ran = false;
        cache.encode(text, options, &mut out, |o| {
            ran = true;
            o.extend_from_slice(ids);
        });
        assert_eq!(out[0], 7);
        assert_eq!(&out[1..], ids);
        ran
    }

    #[test]
    fn a_text_is_cached_with_its_options() {
        let cache = TextCache::new(1 << 20);
        let text = "a system prompt that every request of this service starts with...";
        assert!(run(&cache, text, OPTIONS, &[1, 2, 3]));
        assert!(!run(&cache, text, OPTIONS, &[1, 2, 3]), "a hit");
        let other = TextOptions {
            added_tokens: false,
            at_start: true,
        };
        assert!(
            run(&cache, text, other, &[4]),
            "other options are another entry"
        );
        // Short texts are never cached.
        for _ in 0..3 {
            assert!(run(&cache, "short", OPTIONS, &[5]));
        }
        // Off.
        let off = TextCache::new(0);
        for _ in 0..3 {
            assert!(run(&off, text, OPTIONS, &[1, 2, 3]));
        }
    }

    #[test]
    fn a_full_cache_admits_a_text_on_its_second_sighting() {
        let cache = TextCache::new((1 << 12) * SHARDS);
        let texts: Vec<String> = (0..400).map(|i| format!("{i:>80}")).collect();
        for t in &texts {
            run(&cache, t, OPTIONS, &[1; 4]);
        }
        assert!(cache
            .shards
            .iter()
            .all(|s| !s.lock().unwrap().old.is_empty()));
        let text = "a text first seen when the cache is full, and then seen again, and again";
        assert!(run(&cache, text, OPTIONS, &[9]));
        assert!(run(&cache, text, OPTIONS, &[9]), "admitted now");
        assert!(!run(&cache, text, OPTIONS, &[9]), "a hit");
    }

    #[test]
    fn the_cache_stays_within_its_budget() {
        let budget = 1 << 16;
        let cache = TextCache::new(budget * SHARDS);
        let texts: Vec<String> = (0..2000).map(|i| format!("{i:>80}")).collect();
        for t in texts.iter().chain(&texts).chain(&texts) {
            run(&cache, t, OPTIONS, &[1; 20]);
        }
        for shard in cache.shards.iter() {
            let s = shard.lock().unwrap();
            let bytes: usize = s
                .young
                .values()
                .chain(s.old.values())
                .map(Entry::bytes)
                .sum();
            assert!(bytes <= budget, "{bytes} > {budget}");
        }
        // The most recent texts are still there.
        assert!(!run(&cache, texts.last().unwrap(), OPTIONS, &[1; 20]));
    }
}
