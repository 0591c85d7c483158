//! Mistral's tekken tokenizer (`tekken.json`), exactly as mistral-common runs it.
//!
//! mistral-common's `Tekkenizer` hands the vocabulary to tiktoken: text is split with the
//! file's regex (run by `fancy-regex`, the engine and version tiktoken 0.14 uses), each piece is
//! looked up whole, else byte-pair merged by rank (always the lowest-ranked adjacent pair,
//! leftmost on ties), and every rank is shifted by the number of special tokens. Special
//! tokens are never matched in text. Only the first `default_vocab_size - num_special_tokens`
//! vocabulary entries are used, as mistral-common truncates them.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::Path;

use base64::Engine;
use serde_json::Value;

use crate::error::{Error, Result};

/// The special tokens of tekken files that do not list them (mistral-common's
/// `Tekkenizer.DEPRECATED_SPECIAL_TOKENS`); the rest up to `num_special_tokens` are fillers
/// `<SPECIAL_{id}>`.
const DEPRECATED_SPECIAL_TOKENS: &[&str] = &[
    "<unk>",
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
    "[TOOL_CALLS]",
    "[IMG]",
    "<pad>",
    "[IMG_BREAK]",
    "[IMG_END]",
    "[PREFIX]",
    "[MIDDLE]",
    "[SUFFIX]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
];

/// A loaded tekken tokenizer.
pub struct Tekken {
    ranks: HashMap<Vec<u8>, u32>,
    pattern: fancy_regex::Regex,
    num_special_tokens: u32,
    special_tokens: Vec<String>,
    version: String,
}

impl Tekken {
    /// Load a `tekken.json` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Load(format!("cannot read {}: {e}", path.display())))?;
        Self::from_json(&text).map_err(|e| Error::Load(format!("{}: {e}", path.display())))
    }

    /// Load tekken from the text of its JSON file.
    pub fn from_json(text: &str) -> std::result::Result<Self, String> {
        let data: Value = serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?;
        let config = data.get("config").ok_or("no \"config\"")?;
        let field = |name: &str| {
            config
                .get(name)
                .and_then(Value::as_u64)
                .ok_or(format!("config has no {name}"))
        };
        let vocab_size = field("default_vocab_size")? as usize;
        let num_special = field("default_num_special_tokens")? as usize;
        let pattern = config
            .get("pattern")
            .and_then(Value::as_str)
            .ok_or("config has no pattern")?;
        let version = config
            .get("version")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let vocab = data
            .get("vocab")
            .and_then(Value::as_array)
            .ok_or("no \"vocab\" list")?;
        let inner = vocab_size
            .checked_sub(num_special)
            .ok_or("default_vocab_size < num special tokens")?;
        if vocab.len() < inner {
            return Err(format!(
                "vocab has {} entries, fewer than {inner}",
                vocab.len()
            ));
        }
        let mut ranks = HashMap::with_capacity(inner);
        for (i, entry) in vocab.iter().take(inner).enumerate() {
            let b64 = entry
                .get("token_bytes")
                .and_then(Value::as_str)
                .ok_or("vocab entry without token_bytes")?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| format!("vocab entry {i}: {e}"))?;
            ranks.insert(bytes, i as u32);
        }
        let mut special_tokens: Vec<String> =
            match data.get("special_tokens").and_then(Value::as_array) {
                Some(list) => list
                    .iter()
                    .map(|t| {
                        t.get("token_str")
                            .and_then(Value::as_str)
                            .map(str::to_string)
                    })
                    .collect::<Option<Vec<_>>>()
                    .ok_or("special token without token_str")?,
                None => DEPRECATED_SPECIAL_TOKENS
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
            };
        if special_tokens.len() > num_special {
            return Err("more special tokens than num_special_tokens".into());
        }
        for i in special_tokens.len()..num_special {
            special_tokens.push(format!("<SPECIAL_{i}>"));
        }
        let pattern = fancy_regex::Regex::new(pattern).map_err(|e| format!("pattern: {e}"))?;
        Ok(Tekken {
            ranks,
            pattern,
            num_special_tokens: num_special as u32,
            special_tokens,
            version,
        })
    }

    /// A `tekken.json` that [`Tekken::from_json`] loads back into this tokenizer: the
    /// vocabulary it uses (in rank order, without the fields it does not read), the special
    /// tokens, the pattern and the version. Smaller than the original file; an Encoder's state
    /// carries it (see [`crate::persist`]).
    pub fn to_json(&self) -> String {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let inner = self.ranks.values().max().map_or(0, |&m| m as usize + 1);
        let mut by_rank: Vec<Option<&[u8]>> = vec![None; inner];
        for (bytes, &rank) in &self.ranks {
            by_rank[rank as usize] = Some(bytes);
        }
        // A rank without bytes: the file listed those bytes again at a higher rank, which
        // replaced it. Fill it with the bytes of the highest rank, which are listed last and so
        // replace it again: the loaded map is the same.
        let last = by_rank.last().copied().flatten().unwrap_or_default();
        let vocab: Vec<Value> = by_rank
            .iter()
            .enumerate()
            .map(|(rank, b)| {
                serde_json::json!({"rank": rank, "token_bytes": b64(b.unwrap_or(last))})
            })
            .collect();
        let special_tokens: Vec<Value> = self
            .special_tokens
            .iter()
            .enumerate()
            .map(|(rank, s)| serde_json::json!({"rank": rank, "token_str": s, "is_control": true}))
            .collect();
        serde_json::json!({
            "config": {
                "pattern": self.pattern.as_str(),
                "num_vocab_tokens": inner,
                "default_vocab_size": inner + self.num_special_tokens as usize,
                "default_num_special_tokens": self.num_special_tokens,
                "version": self.version,
            },
            "vocab": vocab,
            "special_tokens": special_tokens,
        })
        .to_string()
    }

    /// Every vocabulary token: its id (its rank after the special tokens) and bytes, in no
    /// order; special tokens not included.
    pub fn token_bytes(&self) -> impl Iterator<Item = (u32, &[u8])> {
        self.ranks
            .iter()
            .map(|(bytes, &rank)| (rank + self.num_special_tokens, bytes.as_slice()))
    }

    /// The `config.version` of the file (`"v3"`, `"v7"`, ...).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The special tokens, by id.
    pub fn special_tokens(&self) -> &[String] {
        &self.special_tokens
    }

    /// The id of special token `text` (`"<s>"`, `"[INST]"`, ...).
    pub fn special_id(&self, text: &str) -> Option<u32> {
        self.special_tokens
            .iter()
            .position(|t| t == text)
            .map(|i| i as u32)
    }

    /// Append the ids mistral-common's `Tekkenizer.encode(text, bos=False, eos=False)` gives.
    pub fn encode(&self, text: &str, ids: &mut Vec<u32>) -> Result<()> {
        for found in self.pattern.find_iter(text) {
            let piece = found
                .map_err(|e| Error::Tokenizer(format!("tekken pattern: {e}")))?
                .as_str()
                .as_bytes();
            match self.ranks.get(piece) {
                Some(&rank) => ids.push(rank + self.num_special_tokens),
                None => self.merge(piece, ids),
            }
        }
        Ok(())
    }

    /// Byte-pair merge `piece` by rank.
    fn merge(&self, piece: &[u8], ids: &mut Vec<u32>) {
        let n = piece.len();
        if n == 1 {
            ids.push(self.rank(piece).unwrap_or(u32::MAX) + self.num_special_tokens);
            return;
        }
        // Parts are byte ranges [start[i], start[next[i]]); a heap of candidate merges keyed by
        // (rank, start), invalidated lazily when a part's right neighbour changes.
        let mut end: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut alive = vec![true; n];
        let mut pair_rank: Vec<u32> = vec![u32::MAX; n];
        let mut heap = BinaryHeap::with_capacity(n);
        for i in 0..n - 1 {
            if let Some(r) = self.rank(&piece[i..i + 2]) {
                pair_rank[i] = r;
                heap.push(Reverse((r, i)));
            }
        }
        while let Some(Reverse((rank, left))) = heap.pop() {
            if !alive[left] || pair_rank[left] != rank {
                continue;
            }
            let right = end[left];
            if right >= n {
                continue;
            }
            // Merge `right` into `left`.
            alive[right] = false;
            end[left] = end[right];
            if end[left] < n {
                prev[end[left]] = left;
            }
            pair_rank[left] = u32::MAX;
            if end[left] < n {
                if let Some(r) = self.rank(&piece[left..end[end[left]]]) {
                    pair_rank[left] = r;
                    heap.push(Reverse((r, left)));
                }
            }
            let p = prev[left];
            if p != usize::MAX {
                pair_rank[p] = u32::MAX;
                if let Some(r) = self.rank(&piece[p..end[left]]) {
                    pair_rank[p] = r;
                    heap.push(Reverse((r, p)));
                }
            }
        }
        let mut i = 0;
        while i < n {
            let rank = self.rank(&piece[i..end[i]]).unwrap_or(u32::MAX);
            ids.push(rank.wrapping_add(self.num_special_tokens));
            i = end[i];
        }
    }

    fn rank(&self, bytes: &[u8]) -> Option<u32> {
        self.ranks.get(bytes).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy() -> Tekken {
        // Bytes 0..=255 are ranks 0..=255; then "ab" (256), "bc" (257), "abc" (258).
        let mut vocab: Vec<Value> = (0..=255u8)
            .map(|b| serde_json::json!({"rank": b, "token_bytes": base64::engine::general_purpose::STANDARD.encode([b])}))
            .collect();
        for (i, t) in ["ab", "bc", "abc"].iter().enumerate() {
            vocab.push(serde_json::json!({"rank": 256 + i, "token_bytes": base64::engine::general_purpose::STANDARD.encode(t)}));
        }
        let json = serde_json::json!({
            "config": {"pattern": r"\w+|\s+", "default_vocab_size": 259 + 30, "default_num_special_tokens": 30, "version": "v3"},
            "vocab": vocab,
        });
        Tekken::from_json(&json.to_string()).unwrap()
    }

    #[test]
    fn merges_lowest_rank_first_and_offsets_ids() {
        let t = toy();
        let mut ids = Vec::new();
        t.encode("abc", &mut ids).unwrap();
        assert_eq!(ids, vec![258 + 30]); // whole piece in vocab
        ids.clear();
        t.encode("abcb", &mut ids).unwrap();
        // "ab" (256) merges before "bc" (257): ab|c|b, then "abc" (258): abc|b.
        assert_eq!(ids, vec![258 + 30, b'b' as u32 + 30]);
        ids.clear();
        t.encode("bcab", &mut ids).unwrap();
        assert_eq!(ids, vec![257 + 30, 256 + 30]);
    }

    #[test]
    fn to_json_loads_back_into_the_same_tokenizer() {
        let t = toy();
        let back = Tekken::from_json(&t.to_json()).unwrap();
        assert_eq!(back.ranks, t.ranks);
        assert_eq!(back.pattern.as_str(), t.pattern.as_str());
        assert_eq!(back.num_special_tokens, t.num_special_tokens);
        assert_eq!(back.special_tokens, t.special_tokens);
        assert_eq!(back.version, t.version);
        assert_eq!(back.to_json(), t.to_json());
        // Bytes listed twice: the later rank wins, and the written file reproduces that.
        let b64 = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
        let vocab: Vec<Value> = ["a", "b", "a", "c"]
            .iter()
            .map(|t| serde_json::json!({"token_bytes": b64(t)}))
            .collect();
        let json = serde_json::json!({
            "config": {"pattern": r"\w+", "default_vocab_size": 4 + 30,
                "default_num_special_tokens": 30, "version": "v3"},
            "vocab": vocab,
        });
        let dup = Tekken::from_json(&json.to_string()).unwrap();
        assert_eq!(dup.ranks.get(b"a".as_slice()), Some(&2));
        assert_eq!(Tekken::from_json(&dup.to_json()).unwrap().ranks, dup.ranks);
    }

    #[test]
    fn special_tokens_default_to_the_deprecated_list() {
        let t = toy();
        assert_eq!(t.special_id("<s>"), Some(1));
        assert_eq!(t.special_id("[INST]"), Some(3));
        assert_eq!(t.special_id("<SPECIAL_25>"), Some(25)); // fillers after the listed ones
        assert_eq!(t.special_id("<SPECIAL_30>"), None);
    }
}
