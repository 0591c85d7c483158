//! Added tokens found in text, with the `tokenizers` crate's rules
//! (`AddedVocabulary::find_matches` and `extract_and_normalize` in tokenizers 0.23).
//!
//! Tokens that are not `normalized` are looked for in the raw text first; the stretches
//! between them are normalized, and `normalized` tokens are looked for in those (as their
//! normalized text). Each search takes the leftmost-longest matches; a `single_word` token
//! must not touch a word character on either side (else that match is dropped and the search
//! goes on after it); `lstrip`/`rstrip` tokens take the whitespace before/after them along.
//! Word characters and whitespace are the `regex` crate's `\w` and `\s`, as in the crate.
//!
//! The search. aho-corasick's own prefilter looks for the patterns' first bytes when there are
//! at most three of them (`<` for most tokenizers); with more, its automaton walks every byte
//! of the text. With four to six (Gemma 3's 6,415 tokens start with one of five) the matcher
//! looks for them itself ([`Starts`]): `memchr3` twice finds the next candidate, a candidate
//! whose next byte follows its first byte in no pattern is passed over (`’` starts with the
//! same byte as `▁`), and the automaton runs anchored at the others. The leftmost-longest match
//! is the longest pattern at the first position where any pattern matches, so both searches
//! give the same matches.
//!
//! The walk runs aho-corasick's DFA when the patterns hold at most [`DFA_PATTERN_BYTES`]
//! (the crate builds one itself only up to 100 patterns). Llama 3's 256 tokens, 7 KB, take
//! 230 KB of tables, and finding them in a rendered prompt costs a third fewer instructions
//! than in the crate's contiguous NFA.

use std::sync::LazyLock;

use aho_corasick::{
    AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, Anchored, FindIter, Input, Match, MatchKind,
    StartKind,
};
use regex::Regex;

use crate::text::image::{ReadResult, Reader, Writer};

/// One added token's matching flags.
#[derive(Debug, Clone)]
pub struct AddedToken {
    pub id: u32,
    pub content: String,
    pub single_word: bool,
    pub lstrip: bool,
    pub rstrip: bool,
    pub normalized: bool,
}

/// The most pattern bytes for which the walk runs a DFA: its tables take about 40 bytes per
/// pattern byte on the shared tokenizers (DeepSeek V3's 803 tokens, 26 KB: 1 MB).
const DFA_PATTERN_BYTES: usize = 32 << 10;

/// A set of added tokens searched together.
pub struct Matcher {
    automaton: AhoCorasick,
    tokens: Vec<AddedToken>,
    /// What each token is searched as (kept to write the matcher into an image).
    patterns: Vec<String>,
    /// Whether any token has a flag that needs the text around a match.
    flags: bool,
    /// The search from the first bytes, when the matcher does it (four to six first bytes).
    starts: Option<Starts>,
}

/// What the matcher's own search looks for.
struct Starts {
    /// The patterns' first bytes, in groups of at most three.
    groups: Vec<Group>,
    /// For each first byte, the bytes that follow it in a pattern, as a bit set (all of them
    /// when the byte alone is a pattern).
    follows: Box<[Bytes; 256]>,
}

impl Starts {
    /// The search for `patterns`, whose distinct first bytes are `first`; `None` if there are
    /// more than six of those.
    fn new(first: &[u8], patterns: &[String]) -> Option<Starts> {
        let groups = Group::all(first)?;
        let mut follows = Box::new([[0u64; 4]; 256]);
        for p in patterns {
            match *p.as_bytes() {
                [first] => follows[usize::from(first)] = [u64::MAX; 4],
                [first, second, ..] => {
                    follows[usize::from(first)][usize::from(second >> 6)] |= 1 << (second & 63)
                }
                [] => {}
            }
        }
        Some(Starts { groups, follows })
    }
}

/// A set of bytes.
type Bytes = [u64; 4];

#[inline]
fn has(set: &Bytes, b: u8) -> bool {
    set[usize::from(b >> 6)] >> (b & 63) & 1 != 0
}

/// Up to three bytes searched together with `memchr`.
#[derive(Debug, Clone, Copy)]
enum Group {
    One(u8),
    Two(u8, u8),
    Three(u8, u8, u8),
}

impl Group {
    #[inline]
    fn find(self, hay: &[u8]) -> Option<usize> {
        match self {
            Group::One(a) => memchr::memchr(a, hay),
            Group::Two(a, b) => memchr::memchr2(a, b, hay),
            Group::Three(a, b, c) => memchr::memchr3(a, b, c, hay),
        }
    }

    /// `bytes` in groups of three, or `None` if there are more than six.
    fn all(bytes: &[u8]) -> Option<Vec<Group>> {
        if bytes.len() > 6 {
            return None;
        }
        Some(
            bytes
                .chunks(3)
                .map(|c| match *c {
                    [a] => Group::One(a),
                    [a, b] => Group::Two(a, b),
                    [a, b, c] => Group::Three(a, b, c),
                    _ => unreachable!("chunks(3) of a non-empty slice"),
                })
                .collect(),
        )
    }
}

/// The matches in one text, leftmost-longest and without overlaps, in order.
enum Matches<'m, 't> {
    /// Anchored searches at the positions of the patterns' first bytes; `next[g]` is the next
    /// position of group `g`'s bytes at or after the last search (the text's length if none).
    Starts {
        automaton: &'m AhoCorasick,
        starts: &'m Starts,
        text: &'t [u8],
        at: usize,
        next: [Option<usize>; 2],
    },
    Walk(FindIter<'m, 't>),
}

impl Iterator for Matches<'_, '_> {
    type Item = Match;

    #[inline]
    fn next(&mut self) -> Option<Match> {
        match self {
            Matches::Walk(it) => it.next(),
            Matches::Starts {
                automaton,
                starts,
                text,
                at,
                next,
            } => loop {
                let mut candidate = text.len();
                for (group, next) in starts.groups.iter().zip(next.iter_mut()) {
                    let hit = match *next {
                        Some(n) if n >= *at => n,
                        _ => {
                            let n = group.find(&text[*at..]).map_or(text.len(), |i| *at + i);
                            *next = Some(n);
                            n
                        }
                    };
                    candidate = candidate.min(hit);
                }
                if candidate >= text.len() {
                    *at = text.len();
                    return None;
                }
                if let Some(&b) = text.get(candidate + 1) {
                    if !has(&starts.follows[usize::from(text[candidate])], b) {
                        *at = candidate + 1;
                        continue;
                    }
                }
                let input = Input::new(*text)
                    .span(candidate..text.len())
                    .anchored(Anchored::Yes);
                match automaton.find(input) {
                    Some(m) => {
                        *at = m.end();
                        return Some(m);
                    }
                    None => *at = candidate + 1,
                }
            },
        }
    }
}

/// The patterns' distinct first bytes, or `None` if a pattern is empty (it matches anywhere:
/// there is no byte to look for).
fn first_bytes(patterns: &[String]) -> Option<Vec<u8>> {
    let mut first = patterns
        .iter()
        .map(|p| p.bytes().next())
        .collect::<Option<Vec<u8>>>()?;
    first.sort_unstable();
    first.dedup();
    Some(first)
}

/// A piece of text: a stretch to encode, or an added token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Text(usize, usize),
    Token(u32, usize, usize),
}

static ENDS_WITH_WORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\w$").unwrap());
static STARTS_WITH_WORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\w").unwrap());
static SPACE_AT_START: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\s*").unwrap());
static SPACE_AT_END: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\s*$").unwrap());

impl Matcher {
    /// A matcher for `tokens` searched as `patterns` (their text, or their normalized text);
    /// `None` if there are none. `Err` if two tokens share a pattern.
    pub fn new(tokens: Vec<AddedToken>, patterns: Vec<String>) -> Result<Option<Self>, String> {
        if tokens.is_empty() {
            return Ok(None);
        }
        let mut sorted: Vec<&String> = patterns.iter().collect();
        sorted.sort();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return Err("two added tokens have the same text".into());
        }
        let starts = match first_bytes(&patterns) {
            Some(first) if (4..=6).contains(&first.len()) => Starts::new(&first, &patterns),
            _ => None,
        };
        Self::build(tokens, patterns, starts)
    }

    fn build(
        tokens: Vec<AddedToken>,
        patterns: Vec<String>,
        starts: Option<Starts>,
    ) -> Result<Option<Self>, String> {
        let bytes: usize = patterns.iter().map(String::len).sum();
        let automaton = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .start_kind(if starts.is_some() {
                StartKind::Anchored
            } else {
                StartKind::Unanchored
            })
            .kind((starts.is_none() && bytes <= DFA_PATTERN_BYTES).then_some(AhoCorasickKind::DFA))
            .build(&patterns)
            .map_err(|e| format!("cannot build the added-token matcher: {e}"))?;
        let flags = tokens.iter().any(|t| t.single_word || t.lstrip || t.rstrip);
        Ok(Some(Matcher {
            automaton,
            tokens,
            patterns,
            flags,
            starts,
        }))
    }

    /// The matches in `text`, in order.
    #[inline]
    fn matches<'m, 't>(&'m self, text: &'t str) -> Matches<'m, 't> {
        match &self.starts {
            Some(starts) => Matches::Starts {
                automaton: &self.automaton,
                starts,
                text: text.as_bytes(),
                at: 0,
                next: [None; 2],
            },
            None => Matches::Walk(self.automaton.find_iter(text)),
        }
    }

    /// Write the tokens and their patterns (the automaton is built again when read).
    pub fn write(&self, w: &mut Writer) {
        w.len(self.tokens.len());
        for (t, p) in self.tokens.iter().zip(&self.patterns) {
            w.u32(t.id);
            w.str(&t.content);
            w.u8(u8::from(t.single_word)
                | u8::from(t.lstrip) << 1
                | u8::from(t.rstrip) << 2
                | u8::from(t.normalized) << 3);
            w.str(p);
        }
    }

    /// Read a matcher [`Matcher::write`] wrote.
    pub fn read(r: &mut Reader<'_>) -> ReadResult<Option<Self>> {
        let n = r.len(4 + 8 + 1 + 8)?;
        let (mut tokens, mut patterns) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n {
            let id = r.u32()?;
            let content = r.str()?.to_string();
            let flags = r.u8()?;
            tokens.push(AddedToken {
                id,
                content,
                single_word: flags & 1 != 0,
                lstrip: flags & 2 != 0,
                rstrip: flags & 4 != 0,
                normalized: flags & 8 != 0,
            });
            patterns.push(r.str()?.to_string());
        }
        Self::new(tokens, patterns)
    }

    /// Whether `text` holds any of the tokens (a quick test before [`Matcher::split`]).
    #[inline]
    pub fn occurs_in(&self, text: &str) -> bool {
        match self.starts {
            // Any match, the earliest found: aho-corasick's own search.
            None => self.automaton.is_match(text),
            Some(_) => self.matches(text).next().is_some(),
        }
    }

    /// Cut `text` into stretches and tokens (offsets into `text`), calling `emit` in order.
    pub fn split(&self, text: &str, emit: &mut impl FnMut(Part)) {
        let mut done = 0;
        for m in self.matches(text) {
            let token = &self.tokens[m.pattern().as_usize()];
            let (mut start, mut stop) = (m.start(), m.end());
            if self.flags {
                if token.single_word {
                    let start_space = start == 0 || !ENDS_WITH_WORD.is_match(&text[..start]);
                    let stop_space =
                        stop == text.len() || !STARTS_WITH_WORD.is_match(&text[stop..]);
                    if !start_space || !stop_space {
                        continue;
                    }
                }
                if token.lstrip {
                    let new_start = SPACE_AT_END
                        .find(&text[..start])
                        .map_or(start, |s| s.start());
                    start = new_start.max(done);
                }
                if token.rstrip {
                    stop += SPACE_AT_START.find(&text[stop..]).map_or(0, |s| s.end());
                }
            }
            if done < start {
                emit(Part::Text(done, start));
            }
            emit(Part::Token(token.id, start, stop));
            done = stop;
        }
        if done < text.len() {
            emit(Part::Text(done, text.len()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(id: u32, content: &str, flags: u8) -> AddedToken {
        AddedToken {
            id,
            content: content.to_string(),
            single_word: flags & 1 != 0,
            lstrip: flags & 2 != 0,
            rstrip: flags & 4 != 0,
            normalized: false,
        }
    }

    fn parts(m: &Matcher, text: &str) -> Vec<Part> {
        let mut out = Vec::new();
        m.split(text, &mut |p| out.push(p));
        out
    }

    /// The same tokens searched by the automaton's own walk (what `split` did before the
    /// first-byte search), for comparison.
    fn walking(tokens: &[AddedToken]) -> Matcher {
        let patterns = tokens.iter().map(|t| t.content.clone()).collect();
        Matcher::build(tokens.to_vec(), patterns, None)
            .unwrap()
            .unwrap()
    }

    fn matcher(tokens: &[AddedToken]) -> Matcher {
        let patterns = tokens.iter().map(|t| t.content.clone()).collect();
        Matcher::new(tokens.to_vec(), patterns).unwrap().unwrap()
    }

    /// The first-byte search, whatever the number of first bytes (up to six).
    fn searching(tokens: &[AddedToken]) -> Matcher {
        let patterns: Vec<String> = tokens.iter().map(|t| t.content.clone()).collect();
        let starts = Starts::new(&first_bytes(&patterns).unwrap(), &patterns);
        assert!(starts.is_some());
        Matcher::build(tokens.to_vec(), patterns, starts)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn gemma_like_tokens_are_found_between_their_first_bytes() {
        // Five first bytes, as Gemma 3's added tokens: two groups of memchr.
        let tokens = [
            token(1, "\n\n", 0),
            token(2, "\n\n\n", 0),
            token(3, "<table>", 0),
            token(4, "[@BOS@]", 0),
            token(5, "\u{2581}\u{2581}", 0),
            token(6, "\t\t", 0),
        ];
        let m = matcher(&tokens);
        assert_eq!(m.starts.as_ref().map(|s| s.groups.len()), Some(2));
        let text = "a\nb\n\n\nc<tab<table>\u{2581}x\u{2581}\u{2581}\u{2581}[@BOS@]\t\t\n\n";
        let at = |s: &str| text.find(s).unwrap();
        let (t3, bos) = (at("<table>"), at("[@BOS@]"));
        let m5 = at("\u{2581}\u{2581}");
        assert_eq!(
            parts(&m, text),
            vec![
                Part::Text(0, 3),
                Part::Token(2, 3, 6),
                Part::Text(6, t3),
                Part::Token(3, t3, t3 + 7),
                Part::Text(t3 + 7, m5),
                Part::Token(5, m5, m5 + 6),
                Part::Text(m5 + 6, bos),
                Part::Token(4, bos, bos + 7),
                Part::Token(6, bos + 7, bos + 9),
                Part::Token(1, bos + 9, bos + 11),
            ]
        );
        assert!(m.occurs_in("x\t\ty"));
        assert!(!m.occurs_in("x\ty\n<tabl[@BOS@"));
    }

    #[test]
    fn up_to_three_first_bytes_are_left_to_aho_corasick() {
        let m = matcher(&[
            token(1, "<s>", 0),
            token(2, "[INST]", 0),
            token(3, "\n\n", 0),
        ]);
        assert!(m.starts.is_none());
        assert_eq!(
            parts(&m, "a<s>[INST]\n"),
            vec![
                Part::Text(0, 1),
                Part::Token(1, 1, 4),
                Part::Token(2, 4, 10),
                Part::Text(10, 11)
            ]
        );
    }

    #[test]
    fn more_than_six_first_bytes_walk_the_text() {
        let tokens: Vec<AddedToken> = "abcdefg"
            .chars()
            .zip(1..)
            .map(|(c, id)| token(id, &format!("{c}{c}"), 0))
            .collect();
        let m = matcher(&tokens);
        assert!(m.starts.is_none());
        assert_eq!(
            parts(&m, "xaagggb"),
            vec![
                Part::Text(0, 1),
                Part::Token(1, 1, 3),
                Part::Token(7, 3, 5),
                Part::Text(5, 7)
            ]
        );
    }

    /// Llama 3's tokens are walked by a DFA, which finds what the crate's own choice (its
    /// contiguous NFA) finds, on random texts built from pieces of the tokens.
    #[test]
    fn llama_3_like_tokens_are_walked_by_a_dfa_with_the_nfas_matches() {
        // 256 tokens as Llama 3's: more than the 100 up to which the crate picks a DFA itself.
        let mut tokens: Vec<AddedToken> = ["<|begin_of_text|>", "<|eot_id|>", "<|eom_id|>"]
            .iter()
            .enumerate()
            .map(|(i, t)| token(i as u32, t, 0))
            .collect();
        for i in 3..256 {
            tokens.push(token(i, &format!("<|reserved_special_token_{i}|>"), 0));
        }
        let m = matcher(&tokens);
        assert!(m.starts.is_none());
        assert_eq!(m.automaton.kind(), AhoCorasickKind::DFA);
        let nfa = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&m.patterns)
            .unwrap();
        assert_eq!(nfa.kind(), AhoCorasickKind::ContiguousNFA);
        let pieces = [
            "<|eot_id|>",
            "<|reserved_special_token_",
            "12|>",
            "2",
            "|>",
            "<|",
            "<",
            "eom_id|>",
            "a b",
        ];
        let mut rng = crate::text::TestRng(0x2545_f491_4f6c_dd1d);
        let mut found = 0;
        for _ in 0..2000 {
            let text: String = (0..rng.below(24))
                .map(|_| pieces[rng.below(pieces.len())])
                .collect();
            let spans = |a: &AhoCorasick| {
                a.find_iter(&text)
                    .map(|f| (f.pattern(), f.start(), f.end()))
                    .collect::<Vec<_>>()
            };
            let (dfa, expected) = (spans(&m.automaton), spans(&nfa));
            assert_eq!(dfa, expected, "{text:?}");
            found += dfa.len();
        }
        assert!(found > 2000, "{found}");
    }

    /// Random tokens (with their flags) over a small alphabet, on random texts: the search at
    /// the first bytes cuts every text as the automaton's walk does.
    #[test]
    fn the_first_byte_search_equals_the_walk() {
        let alphabet = ["a", "b", " ", "\n", "<", ">", "\u{e9}", "\u{2581}", "x"];
        let mut rng = crate::text::TestRng(0x9e37_79b9_7f4a_7c15);
        let mut next = |n: usize| rng.below(n);
        let mut checked = 0;
        for _ in 0..400 {
            let mut tokens: Vec<AddedToken> = Vec::new();
            for _ in 0..1 + next(8) {
                let len = 1 + next(4);
                let content: String = (0..len).map(|_| alphabet[next(alphabet.len())]).collect();
                if tokens.iter().all(|t| t.content != content) {
                    let id = tokens.len() as u32;
                    tokens.push(token(id, &content, next(8) as u8));
                }
            }
            let patterns: Vec<String> = tokens.iter().map(|t| t.content.clone()).collect();
            if first_bytes(&patterns).unwrap().len() > 6 {
                continue; // more than six first bytes
            }
            let (fast, walk) = (searching(&tokens), walking(&tokens));
            for _ in 0..20 {
                let text: String = (0..next(40))
                    .map(|_| alphabet[next(alphabet.len())])
                    .collect();
                assert_eq!(parts(&fast, &text), parts(&walk, &text), "{text:?}");
                assert_eq!(fast.occurs_in(&text), walk.occurs_in(&text));
                checked += 1;
            }
        }
        // Most draws have at most six first bytes (the rest are left to the walk).
        assert!(checked > 6000, "{checked}");
    }
}
