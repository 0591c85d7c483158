//! Long byte-level words by their longest tokens, proved equal to the merge loop's result.
//!
//! Merging a long word pair by pair costs a rank lookup per pair and a heap operation per
//! merge; a run of Chinese or Japanese text is one pre-token, three bytes per character. This
//! module tokenizes a word by its longest tokens instead (a walk down a trie of the vocabulary
//! laid out depth first, so that walking down one token mostly stays in one cache line),
//! keeping only *compatible* adjacent pairs, and backing up to a shorter token when a pair is
//! not. A tokenization whose every adjacent pair is compatible is the merge loop's
//! tokenization (below). When the search finds none within its step budget, the caller runs
//! the merge loop. The idea comes from github/rust-gems' `bpe` crate ("backtracking" BPE) and
//! fastokens; the conditions below make it exact for the `tokenizers` crate's merge-list
//! semantics, whose ranks need not grow with the tokens (Llama 3 lists merges by the rank of
//! the token they make, so many come before the merges that make their halves).
//!
//! **Why a compatible tokenization is the merge loop's.**
//! * A token's *derivation* is what the merge loop does to the token's own bytes. A usable
//!   token is one whose derivation ends in the token itself, and whose merges are each of a
//!   higher rank than the merges that built its two halves (checked at build; the others, 107
//!   of Llama 3's 128,000 tokens for instance, are left out of the trie). Within a word, a
//!   usable token's bytes therefore go through its derivation in increasing rank order, for
//!   as long as no merge crosses its edges.
//! * Two adjacent tokens `a b` are *compatible* when the merge loop on `a`'s bytes then `b`'s
//!   gives `a b`: no merge across the boundary ever fires. At any moment the pair across the
//!   boundary is (a node of `a`'s right spine, a node of `b`'s left spine); it is present from
//!   when both exist until either is merged further, and it fires if its rank is below the rank
//!   of the merge that ends it (or equal, when that merge is to its right: the leftmost of
//!   equal ranks goes first). [`Backtrack::compatible`] walks both spines from the top, undoing
//!   the later merge each step, and checks each such pair.
//! * In a word tokenized into `t1 .. tn`, consider the first merge that crosses a boundary
//!   `ti | ti+1`. Until it, each token's bytes evolved alone, so that merge also fires in the
//!   merge loop on `ti ti+1` alone (the heap orders the same entries the same way): they were
//!   not compatible. So if every adjacent pair is compatible, no merge crosses, each token's
//!   bytes become that token, and the result is the merge loop's.
//!
//! Single bytes are usable tokens, so the longest-token walk never gets stuck. The tables are
//! built with the model and carried in its image (state version 3), so loading does not
//! rebuild them. The tests compare the two paths on random models made to break the
//! conditions (merges listed before their halves', several merges making one token, tokens
//! their own bytes do not reach), and the differential tests on every shared tokenizer.

use std::sync::atomic::{AtomicU64, Ordering};

use super::bpe::{BpeModel, Units, NONE};
use crate::text::image::{ReadResult, Reader, Writer};

/// A trie node's word: its number of children above this many bits, its token below.
const COUNT_SHIFT: u32 = 23;
/// The token field of a trie node that is not a usable token.
const NO_TOKEN: u32 = (1 << COUNT_SHIFT) - 1;
/// A child's word: its byte above 24 bits, its offset below.
const LOW: u32 = (1 << 24) - 1;

/// One token's derivation: its last merge's rank plus one (0 for a single byte), its two
/// halves, and its length in bytes.
#[derive(Clone, Copy, Default)]
struct Derivation {
    rank: u32,
    left: u32,
    right: u32,
    len: u32,
    /// The longest usable token that is a proper prefix of this one ([`NONE`] for a byte).
    shorter: u32,
}

/// The trie of usable tokens and their derivations.
pub struct Backtrack {
    /// The trie of usable tokens, depth first: a node is a word `children << 23 | token`
    /// ([`NO_TOKEN`] if the node is not a usable token), then one word per child,
    /// `byte << 24 | offset of the child`, in byte order. Depth first, a node's first child
    /// follows it, so walking down a token mostly stays within a cache line.
    trie: Vec<u32>,
    /// The offset of the node after the root by two bytes (`b0 << 8 | b1`), or [`NONE`]:
    /// 256 KiB that stay in cache, for the first two steps of every walk.
    root2: Vec<u32>,
    /// By token id.
    derivations: Vec<Derivation>,
    /// This table's number, which a thread's pair memo is kept for ([`BacktrackScratch`]).
    id: u64,
}

/// The next [`Backtrack::id`].
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Backtrack {
    /// The trie and derivations of a byte-level model; `None` for other models, or when the
    /// node numbers do not fit.
    pub fn build(model: &BpeModel) -> Option<Self> {
        if model.units != Units::Bytes {
            return None;
        }
        let mut tokens: Vec<(Vec<u8>, u32)> = model.vocab_entries();
        tokens.sort_unstable_by_key(|(_, id)| *id);
        let max_id = tokens.last()?.1;
        if max_id >= NO_TOKEN {
            return None;
        }
        let mut derivations = vec![
            Derivation {
                rank: u32::MAX,
                left: NONE,
                right: NONE,
                len: 0,
                shorter: NONE,
            };
            max_id as usize + 1
        ];
        // Derive every token; (rank, id) of the usable candidates, to check in rank order.
        // Single bytes are usable.
        let mut order: Vec<(u32, u32)> = Vec::with_capacity(tokens.len());
        let mut usable = vec![false; max_id as usize + 1];
        let (mut symbols, mut ranks) = (Vec::new(), Vec::new());
        for (bytes, id) in &tokens {
            let d = &mut derivations[*id as usize];
            d.len = bytes.len() as u32;
            if bytes.len() == 1 {
                d.rank = 0;
                d.left = *id;
                d.right = *id;
                usable[*id as usize] = true;
                continue;
            }
            if let Some((left, right, rank)) = model.derive(bytes, *id, &mut symbols, &mut ranks) {
                d.rank = rank + 1;
                d.left = left;
                d.right = right;
                order.push((rank, *id));
            }
        }
        // A derived token is usable if its last merge outranks its halves' and they are usable
        // (and are its bytes, which the merge table implies: checked, as on reading).
        order.sort_unstable();
        for &(_, id) in &order {
            let d = derivations[id as usize];
            let (l, r) = (derivations[d.left as usize], derivations[d.right as usize]);
            usable[id as usize] = usable[d.left as usize]
                && usable[d.right as usize]
                && d.rank > l.rank
                && d.rank > r.rank
                && d.len == l.len + r.len;
        }
        for (i, d) in derivations.iter_mut().enumerate() {
            if !usable[i] {
                d.rank = u32::MAX;
            }
        }
        // The trie: every prefix of a usable token is a node. In byte order, the nodes a
        // token shares with earlier ones are those it shares with the one just before.
        let mut sorted: Vec<(&[u8], u32)> = tokens
            .iter()
            .filter(|(_, id)| usable[*id as usize])
            .map(|(b, id)| (b.as_slice(), *id))
            .collect();
        sorted.sort_unstable();
        // Nodes in the order they are made, which is depth first: (token, children).
        let mut nodes: Vec<(u32, Vec<(u8, u32)>)> = vec![(NO_TOKEN, Vec::new())];
        // Along the previous token: the node after each prefix, and the longest usable token
        // among those prefixes.
        let (mut path, mut best) = (vec![0u32], vec![NONE]);
        let mut prev: &[u8] = &[];
        for &(bytes, id) in &sorted {
            let shared = prev.iter().zip(bytes).take_while(|(a, b)| a == b).count();
            path.truncate(shared + 1);
            best.truncate(shared + 1);
            for k in shared..bytes.len() {
                let end = k + 1 == bytes.len();
                let node = nodes.len() as u32;
                nodes.push((if end { id } else { NO_TOKEN }, Vec::new()));
                nodes[path[k] as usize].1.push((bytes[k], node));
                path.push(node);
                best.push(if end { id } else { best[k] });
            }
            derivations[id as usize].shorter = best[bytes.len() - 1];
            prev = bytes;
        }
        let mut offsets = Vec::with_capacity(nodes.len());
        let mut at = 0usize;
        for (_, children) in &nodes {
            offsets.push(at as u32);
            at += 1 + children.len();
        }
        if at > LOW as usize {
            return None;
        }
        let mut trie = Vec::with_capacity(at);
        for (token, children) in &nodes {
            trie.push((children.len() as u32) << COUNT_SHIFT | token);
            trie.extend(
                children
                    .iter()
                    .map(|&(b, c)| u32::from(b) << 24 | offsets[c as usize]),
            );
        }
        let mut bt = Backtrack {
            trie,
            root2: Vec::new(),
            derivations,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        };
        let mut root2 = vec![NONE; 1 << 16];
        for b0 in 0..=255u8 {
            let first = bt.child(0, b0)?;
            for b1 in 0..=255u8 {
                if let Some(node) = bt.child(first, b1) {
                    root2[(b0 as usize) << 8 | b1 as usize] = node;
                }
            }
        }
        bt.root2 = root2;
        Some(bt)
    }

    /// Write the tables (see [`crate::text::image`]).
    pub fn write(&self, w: &mut Writer) {
        w.u32s(&self.trie);
        w.u32s(&self.root2);
        let field = |f: fn(&Derivation) -> u32| self.derivations.iter().map(f).collect::<Vec<_>>();
        w.u32s(&field(|d| d.rank));
        w.u32s(&field(|d| d.left));
        w.u32s(&field(|d| d.right));
        w.u32s(&field(|d| d.len));
        w.u32s(&field(|d| d.shorter));
    }

    /// Read tables [`Backtrack::write`] wrote, checked so that no lookup can go out of
    /// bounds and every walk down a derivation ends.
    pub fn read(r: &mut Reader<'_>) -> ReadResult<Self> {
        let trie = r.u32s()?;
        let root2 = r.u32s()?;
        let (rank, left, right, len, shorter) =
            (r.u32s()?, r.u32s()?, r.u32s()?, r.u32s()?, r.u32s()?);
        let n = rank.len();
        if root2.len() != 1 << 16 || [left.len(), right.len(), len.len(), shorter.len()] != [n; 4] {
            return Err("the derivation tables do not match".into());
        }
        let derivations: Vec<Derivation> = (0..n)
            .map(|i| Derivation {
                rank: rank[i],
                left: left[i],
                right: right[i],
                len: len[i],
                shorter: shorter[i],
            })
            .collect();
        let usable = |t: u32| {
            derivations
                .get(t as usize)
                .is_some_and(|d| d.rank != u32::MAX)
        };
        for d in &derivations {
            if d.rank == u32::MAX {
                continue;
            }
            let ok = d.len > 0
                && usable(d.left)
                && usable(d.right)
                && (d.shorter == NONE || usable(d.shorter))
                && if d.rank == 0 {
                    d.len == 1
                } else {
                    let (l, r) = (derivations[d.left as usize], derivations[d.right as usize]);
                    d.rank > l.rank && d.rank > r.rank && d.len == l.len + r.len
                };
            if !ok {
                return Err("a derivation is inconsistent".into());
            }
        }
        // Every node's token is usable, and every offset is a node's.
        let mut starts = vec![false; trie.len() + 1];
        let mut at = 0;
        while at < trie.len() {
            starts[at] = true;
            let token = trie[at] & NO_TOKEN;
            if token != NO_TOKEN && !usable(token) {
                return Err("the trie names a token that is not usable".into());
            }
            at += 1 + (trie[at] >> COUNT_SHIFT) as usize;
        }
        let node = |o: u32| starts.get(o as usize).copied().unwrap_or(false);
        let children_ok = (0..trie.len()).filter(|&o| starts[o]).all(|o| {
            let n = (trie[o] >> COUNT_SHIFT) as usize;
            o + n < trie.len() && trie[o + 1..=o + n].iter().all(|&c| node(c & LOW))
        });
        if at != trie.len()
            || trie.is_empty()
            || !children_ok
            || !root2.iter().all(|&o| o == NONE || node(o))
        {
            return Err("the trie is inconsistent".into());
        }
        Ok(Backtrack {
            trie,
            root2,
            derivations,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// Whether tables read from an image belong to `model`: a byte-level model with as many
    /// ids, whose byte tokens are single-byte tokens here.
    pub fn fits(&self, model: &BpeModel) -> bool {
        model.units == Units::Bytes
            && self.derivations.len() == model.max_id() as usize + 1
            && (0..=255u8).all(|b| {
                self.derivations
                    .get(model.byte_id(b) as usize)
                    .is_some_and(|d| d.rank == 0 && d.len == 1)
            })
    }

    /// The offset of the child of the node at `node` by `byte`, if the trie has it.
    #[inline]
    fn child(&self, node: u32, byte: u8) -> Option<u32> {
        let node = node as usize;
        let n = (self.trie[node] >> COUNT_SHIFT) as usize;
        let children = &self.trie[node + 1..node + 1 + n];
        let want = u32::from(byte);
        if n <= 8 {
            children
                .iter()
                .find(|&&c| c >> 24 == want)
                .map(|&c| c & LOW)
        } else {
            children
                .binary_search_by_key(&want, |&c| c >> 24)
                .ok()
                .map(|i| children[i] & LOW)
        }
    }

    /// The longest usable token `text` starts with, and its length (`text` is not empty).
    #[inline]
    fn longest(&self, model: &BpeModel, text: &[u8]) -> (u32, usize) {
        let first = model.byte_id(text[0]);
        let Some(&b1) = text.get(1) else {
            return (first, 1);
        };
        let mut node = self.root2[(text[0] as usize) << 8 | b1 as usize];
        if node == NONE {
            return (first, 1);
        }
        let token = self.trie[node as usize] & NO_TOKEN;
        let mut best = if token != NO_TOKEN {
            (token, 2)
        } else {
            (first, 1)
        };
        for (i, &b) in text.iter().enumerate().skip(2) {
            match self.child(node, b) {
                Some(c) => {
                    node = c;
                    let token = self.trie[c as usize] & NO_TOKEN;
                    if token != NO_TOKEN {
                        best = (token, i + 1);
                    }
                }
                None => break,
            }
        }
        best
    }

    /// Whether the merge loop on `a`'s bytes then `b`'s gives `a b` (both usable tokens).
    #[inline]
    fn compatible(&self, model: &BpeModel, mut a: u32, mut b: u32) -> bool {
        // Merges of a rank below `limit` fire across the boundary.
        let mut limit = u32::MAX;
        loop {
            if let Some(r) = model.pair_rank(a, b) {
                if r < limit {
                    return false;
                }
            }
            let (da, db) = (self.derivations[a as usize], self.derivations[b as usize]);
            if da.rank > db.rank {
                // `a` was made last: before, its right half was at the boundary, until the
                // merge that made `a` (which is to the left, so it goes first on equal ranks).
                limit = da.rank - 1;
                a = da.right;
            } else {
                if db.rank == 0 {
                    return true;
                }
                // `b` was made last (or both at once, and `b` is the right one).
                limit = db.rank;
                b = db.left;
            }
        }
    }

    /// [`Backtrack::compatible`] through the thread's memo of pairs.
    #[inline]
    fn compatible_memo(&self, model: &BpeModel, a: u32, b: u32, memo: &mut [u64]) -> bool {
        let key = u64::from(a) << 32 | u64::from(b);
        let i = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 50) as usize & (memo.len() - 1);
        if let Some(ok) = memo_lookup(memo[i], a, b) {
            return ok;
        }
        let ok = self.compatible(model, a, b);
        memo[i] = memo_entry(a, b, ok);
        ok
    }

    /// The merge loop's tokens of `word`, found among its longest tokens and their prefixes,
    /// appended to `ids` and `lens`. The search keeps only compatible pairs, so what it finds
    /// is the merge loop's result (see the module documentation); it backs up when a position
    /// leads nowhere, as rust-gems' backtracking encoder does, and gives up (`false`, nothing
    /// appended) after a bounded number of steps, or if the start itself leads nowhere: the
    /// caller then runs the merge loop.
    pub fn encode(
        &self,
        model: &BpeModel,
        word: &[u8],
        ids: &mut Vec<u32>,
        lens: &mut Vec<u32>,
        scratch: &mut BacktrackScratch,
    ) -> bool {
        let start = ids.len();
        let n = word.len();
        if scratch.owner != self.id {
            // The memo holds another model's pairs.
            scratch.memo.clear();
            scratch.memo.resize(MEMO_SLOTS, MEMO_EMPTY);
            scratch.owner = self.id;
        }
        let dead = &mut scratch.dead;
        dead.clear();
        dead.resize(n / 64 + 1, 0);
        let mut budget = 4 * n + 64;
        let mut pos = 0;
        // The next token to try and its length (known from the walk that found it, so that
        // the usual step reads no derivation).
        let mut next = self.longest(model, word);
        while pos < n {
            let (mut token, mut len) = next;
            let last = (ids.len() > start).then(|| ids[ids.len() - 1]);
            loop {
                if budget == 0 {
                    ids.truncate(start);
                    lens.truncate(start);
                    return false;
                }
                budget -= 1;
                let end = pos + len;
                if dead[end / 64] & (1 << (end % 64)) == 0
                    && last.is_none_or(|l| self.compatible_memo(model, l, token, &mut scratch.memo))
                {
                    ids.push(token);
                    lens.push(len as u32);
                    pos = end;
                    if pos < n {
                        next = self.longest(model, &word[pos..]);
                    }
                    break;
                }
                let shorter = self.derivations[token as usize].shorter;
                if shorter != NONE {
                    token = shorter;
                    len = self.derivations[token as usize].len as usize;
                    continue;
                }
                // Nothing from `pos` goes on: back up one token.
                dead[pos / 64] |= 1 << (pos % 64);
                let Some(l) = last else {
                    ids.truncate(start);
                    lens.truncate(start);
                    return false;
                };
                ids.pop();
                lens.pop();
                let l_len = self.derivations[l as usize].len as usize;
                pos -= l_len;
                next = (l, l_len);
                break;
            }
        }
        true
    }
}

/// The pair memo's slots (a power of two; 128 KiB per thread).
const MEMO_SLOTS: usize = 1 << 14;
/// An empty memo slot (no pair of ids has it: ids are below 2^31).
const MEMO_EMPTY: u64 = u64::MAX;

#[inline]
fn memo_entry(a: u32, b: u32, ok: bool) -> u64 {
    u64::from(a) << 33 | u64::from(b) << 1 | u64::from(ok)
}

#[inline]
fn memo_lookup(e: u64, a: u32, b: u32) -> Option<bool> {
    (e != MEMO_EMPTY && e >> 1 == (u64::from(a) << 32 | u64::from(b))).then_some(e & 1 == 1)
}

/// The per-thread buffers of [`Backtrack::encode`]: positions that lead nowhere, and a memo of
/// compatible pairs (exact: a pair's answer never changes).
#[derive(Default)]
pub struct BacktrackScratch {
    dead: Vec<u64>,
    memo: Vec<u64>,
    /// The [`Backtrack::id`] the memo is for (0: none).
    owner: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::text::native::bpe::{BpeConfig, Scratch};

    use crate::text::TestRng as Rng;

    /// A random byte-level model over the letters `a`..`d`: merges of random pairs of tokens,
    /// some of them producing a token another merge already produces, listed in an order
    /// that is partly shuffled, so that merges come before those that make their halves,
    /// and some tokens cannot be reached from their own bytes.
    fn random_model(rng: &mut Rng) -> BpeModel {
        let mut vocab: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        let mut merges: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let letters: Vec<usize> = (b'a'..=b'd').map(usize::from).collect();
        let mut pool: Vec<usize> = letters.clone();
        for _ in 0..(20 + rng.below(60)) {
            let (a, b) = (pool[rng.below(pool.len())], pool[rng.below(pool.len())]);
            let pair = (vocab[a].clone(), vocab[b].clone());
            if merges.contains(&pair) || pair.0.len() + pair.1.len() > 10 {
                continue;
            }
            let joined = [pair.0.as_slice(), pair.1.as_slice()].concat();
            match vocab.iter().position(|t| *t == joined) {
                Some(i) => pool.push(i),
                None => {
                    vocab.push(joined);
                    pool.push(vocab.len() - 1);
                }
            }
            merges.push(pair);
        }
        for _ in 0..rng.below(6) {
            let (i, j) = (rng.below(merges.len()), rng.below(merges.len()));
            merges.swap(i, j);
        }
        BpeModel::new(BpeConfig {
            units: Units::Bytes,
            vocab: vocab.into_iter().zip(0..).collect(),
            merges,
            byte_fallback: false,
            unk_token: None,
            fuse_unk: false,
            ignore_merges: false,
        })
        .expect("a valid model")
    }

    /// On random models and random words, the longest-token path either refuses or gives the
    /// merge loop's tokens; and it refuses a minority.
    #[test]
    fn longest_tokens_equal_the_merge_loop_on_random_models() {
        let mut rng = Rng(0x5EED_1234_ABCD_0001);
        let (mut merged, mut longest) = (Vec::new(), Vec::new());
        let (mut lens, mut scratch, mut bs) =
            (Vec::new(), Scratch::default(), BacktrackScratch::default());
        let (mut words, mut refused) = (0, 0);
        for _ in 0..300 {
            let model = random_model(&mut rng);
            let bt = model.backtrack().expect("byte-level");
            let mut image = Writer::new();
            bt.write(&mut image);
            let image = image.into_bytes();
            let read = Backtrack::read(&mut Reader::new(&image)).expect("reads back");
            assert!(read.fits(&model));
            for _ in 0..200 {
                let word: Vec<u8> = (0..1 + rng.below(40))
                    .map(|_| b'a' + rng.below(4) as u8)
                    .collect();
                merged.clear();
                model.merge_word(&word, &mut scratch, &mut merged, &mut lens);
                for bt in [bt, &read] {
                    longest.clear();
                    words += 1;
                    if bt.encode(&model, &word, &mut longest, &mut lens, &mut bs) {
                        assert_eq!(longest, merged, "{:?}", String::from_utf8_lossy(&word));
                    } else {
                        refused += 1;
                    }
                }
            }
        }
        // These models are adversarial (many merges before those that make their halves);
        // most words still go the longest-token way.
        assert!(refused * 5 < words, "{refused} of {words} refused");
    }

    /// `cargo test --release --lib backtrack_speed -- --ignored --nocapture`: the longest-token
    /// path against the merge loop on the runs of CJK characters of the shared corpus.
    #[test]
    #[ignore]
    fn backtrack_speed() {
        let (Ok(models), Ok(data)) = (
            std::env::var("CHATIDS_MODELS_DIR"),
            std::env::var("CHATIDS_DATA_DIR"),
        ) else {
            return;
        };
        let name = std::env::var("BT_MODEL").unwrap_or("llama-3.1-8b-instruct".into());
        let tok =
            tokenizers::Tokenizer::from_file(format!("{models}/{name}/tokenizer.json")).unwrap();
        let native = super::super::NativeBpe::from_tokenizer(&tok).unwrap();
        let model = &native.model;
        let t = std::time::Instant::now();
        let bt = Backtrack::build(model).unwrap();
        eprintln!("build {:?}", t.elapsed());
        let mut words: Vec<Vec<u8>> = Vec::new();
        for entry in std::fs::read_dir(format!("{data}/conversations")).unwrap() {
            let path = entry.unwrap().path();
            if !path.to_string_lossy().contains("zh") {
                continue;
            }
            let text = std::fs::read_to_string(path).unwrap();
            let mut cur = String::new();
            for c in text.chars() {
                if (c as u32) >= 0x3000 {
                    cur.push(c);
                } else {
                    if cur.len() > LONG {
                        words.push(cur.as_bytes().to_vec());
                    }
                    cur.clear();
                }
            }
        }
        const LONG: usize = 16;
        let (mut a, mut b, mut l, mut sc, mut bs) = (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Default::default(),
            BacktrackScratch::default(),
        );
        let mut differ = 0;
        for w in &words {
            a.clear();
            b.clear();
            model.merge_word(w, &mut sc, &mut a, &mut l);
            if bt.encode(model, w, &mut b, &mut l, &mut bs) && a != b {
                differ += 1;
            }
        }
        assert_eq!(
            differ, 0,
            "the longest-token path differs from the merge loop"
        );
        let bytes: usize = words.iter().map(|w| w.len()).sum();
        let (mut ids, mut lens, mut scratch) = (Vec::new(), Vec::new(), Default::default());
        for round in 0..3 {
            let t = std::time::Instant::now();
            let mut n = 0;
            for w in &words {
                ids.clear();
                model.merge_word(w, &mut scratch, &mut ids, &mut lens);
                n += ids.len();
            }
            let merge = t.elapsed();
            let t = std::time::Instant::now();
            let (mut m, mut refused) = (0, 0);
            let mut ids2 = Vec::new();
            let mut bs = BacktrackScratch::default();
            for w in &words {
                ids2.clear();
                if bt.encode(model, w, &mut ids2, &mut lens, &mut bs) {
                    m += ids2.len();
                } else {
                    refused += 1;
                }
            }
            let walk = t.elapsed();
            eprintln!(
                "round {round}: {} words, {bytes} bytes, {n} tokens; merge {:.2} M tokens/s, longest-first {:.2} M tokens/s ({refused} refused, {m} tokens)",
                words.len(),
                n as f64 / merge.as_secs_f64() / 1e6,
                m as f64 / walk.as_secs_f64() / 1e6
            );
        }
    }
}
