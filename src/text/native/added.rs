//! Added tokens found in text, with the `tokenizers` crate's rules
//! (`AddedVocabulary::find_matches` and `extract_and_normalize` in tokenizers 0.23).
//!
//! Tokens that are not `normalized` are looked for in the raw text first; the stretches
//! between them are normalized, and `normalized` tokens are looked for in those (as their
//! normalized text). Each search takes the leftmost-longest matches; a `single_word` token
//! must not touch a word character on either side (else that match is dropped and the search
//! goes on after it); `lstrip`/`rstrip` tokens take the whitespace before/after them along.
//! Word characters and whitespace are the `regex` crate's `\w` and `\s`, as in the crate.

use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
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

/// A set of added tokens searched together.
pub struct Matcher {
    automaton: AhoCorasick,
    tokens: Vec<AddedToken>,
    /// What each token is searched as (kept to write the matcher into an image).
    patterns: Vec<String>,
    /// Whether any token has a flag that needs the text around a match.
    flags: bool,
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
        let automaton = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)
            .map_err(|e| format!("cannot build the added-token matcher: {e}"))?;
        let flags = tokens.iter().any(|t| t.single_word || t.lstrip || t.rstrip);
        Ok(Some(Matcher {
            automaton,
            tokens,
            patterns,
            flags,
        }))
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
        self.automaton.is_match(text)
    }

    /// Cut `text` into stretches and tokens (offsets into `text`), calling `emit` in order.
    pub fn split(&self, text: &str, emit: &mut impl FnMut(Part)) {
        let mut done = 0;
        for m in self.automaton.find_iter(text) {
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
