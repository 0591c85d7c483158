//! Control tokens: the added tokens that content must never produce.
//!
//! Following transformers' `sanitize_control_tokens`, the control tokens of a checkpoint are
//! its *special* added tokens plus the non-special added tokens that appear in the chat
//! template's literal text (its raw text and its string constants), except whitespace-only
//! tokens. [`template_literals`] extracts that literal text with a small Jinja lexer.
//!
//! [`TokenSplitter`] finds, among all added tokens, the special ones inside template text that
//! are hard BPE boundaries (a session resumes encoding right after one).

use std::borrow::Cow;
use std::collections::HashSet;

use aho_corasick::{AhoCorasick, MatchKind};

use crate::pieces::{Piece, PieceKind};
use crate::pystr;

/// An added token of the tokenizer, with the flags that decide how it is matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedTokenInfo {
    /// Token id.
    pub id: u32,
    /// Token text.
    pub content: String,
    /// Whether the token is special (special tokens are always control tokens).
    pub special: bool,
    /// Whether the token absorbs whitespace on its left.
    pub lstrip: bool,
    /// Whether the token absorbs whitespace on its right.
    pub rstrip: bool,
    /// Whether the token only matches as a whole word.
    pub single_word: bool,
    /// Whether the token is matched on normalized text.
    pub normalized: bool,
}

/// The control tokens of a checkpoint and a matcher that finds them in text.
#[derive(Debug, Clone)]
pub struct ControlTokens {
    tokens: Vec<(String, u32)>,
    matcher: Option<AhoCorasick>,
    /// Every proper prefix of a token (`<|eot` of `<|eot_id|>`).
    prefixes: HashSet<String>,
    /// Every proper suffix of a token (`_id|>`).
    suffixes: HashSet<String>,
    /// The longest token's length in bytes.
    longest: usize,
    /// The first bytes and the last bytes of the tokens: a prefix starts with one, a suffix
    /// ends with one (checked before hashing).
    first_bytes: [bool; 256],
    last_bytes: [bool; 256],
}

/// One control token found in a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlMatch {
    /// Byte offset where the token starts.
    pub start: usize,
    /// Byte offset just past the token.
    pub end: usize,
    /// The token's id.
    pub id: u32,
}

impl ControlTokens {
    /// A matcher for exactly these `(text, id)` tokens.
    pub fn new(mut tokens: Vec<(String, u32)>) -> Self {
        tokens.retain(|(t, _)| !t.is_empty());
        tokens.sort();
        tokens.dedup();
        let matcher = if tokens.is_empty() {
            None
        } else {
            // Leftmost-longest is what transformers' longest-first regex alternation finds.
            Some(
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(tokens.iter().map(|(t, _)| t.as_str()))
                    .expect("control token matcher"),
            )
        };
        let (mut prefixes, mut suffixes) = (HashSet::new(), HashSet::new());
        for (t, _) in &tokens {
            for (i, _) in t.char_indices().skip(1) {
                prefixes.insert(t[..i].to_string());
                suffixes.insert(t[i..].to_string());
            }
        }
        let longest = tokens.iter().map(|(t, _)| t.len()).max().unwrap_or(0);
        let (mut first_bytes, mut last_bytes) = ([false; 256], [false; 256]);
        for (t, _) in &tokens {
            first_bytes[usize::from(t.as_bytes()[0])] = true;
            last_bytes[usize::from(t.as_bytes()[t.len() - 1])] = true;
        }
        ControlTokens {
            tokens,
            matcher,
            prefixes,
            suffixes,
            longest,
            first_bytes,
            last_bytes,
        }
    }

    /// Whether `text` ends with the start of a control token or begins with the end of one:
    /// text around it could complete the token (see [`crate::piece_encoder`]).
    pub fn has_partial_edge(&self, text: &str) -> bool {
        let limit = self.longest.min(text.len() + 1);
        let bytes = text.as_bytes();
        (1..limit).any(|k| {
            let start = text.len() - k;
            (self.last_bytes[usize::from(bytes[k - 1])]
                && text.is_char_boundary(k)
                && self.suffixes.contains(&text[..k]))
                || (self.first_bytes[usize::from(bytes[start])]
                    && text.is_char_boundary(start)
                    && self.prefixes.contains(&text[start..]))
        })
    }

    /// The control tokens of a tokenizer whose added tokens are `added`, for `chat_template`.
    pub fn for_template(added: &[AddedTokenInfo], chat_template: &str) -> Self {
        let literals = template_literals(chat_template);
        let tokens = added
            .iter()
            .filter(|t| {
                t.special
                    || (!pystr::is_space(&t.content)
                        && literals.iter().any(|lit| lit.contains(&t.content)))
            })
            .map(|t| (t.content.clone(), t.id))
            .collect();
        ControlTokens::new(tokens)
    }

    /// The `(text, id)` pairs, sorted by text.
    pub fn tokens(&self) -> &[(String, u32)] {
        &self.tokens
    }

    /// Whether `id` is the id of a control token.
    pub fn contains_id(&self, id: u32) -> bool {
        self.tokens.iter().any(|&(_, i)| i == id)
    }

    /// The control tokens in `text`, left to right, longest first where two start together.
    pub fn find_iter<'t>(&'t self, text: &'t str) -> impl Iterator<Item = ControlMatch> + 't {
        self.matcher.iter().flat_map(move |m| {
            m.find_iter(text).map(move |hit| ControlMatch {
                start: hit.start(),
                end: hit.end(),
                id: self.tokens[hit.pattern().as_usize()].1,
            })
        })
    }
}

/// Finds the special tokens inside template text that are hard boundaries for the
/// checkpoint's tokenizer, so a session can resume encoding right after them (the Jinja path
/// renders one text piece with the tokens inside; native formats emit most tokens as pieces).
///
/// It matches every added token the tokenizer matches in raw text (leftmost-longest, as the
/// `tokenizers` crate does), and splits only at special ones that take no whitespace from
/// their neighbours (no `lstrip`/`rstrip`/`single_word`): after such a token the tokenizer
/// encodes the rest of the text on its own.
#[derive(Debug, Clone)]
pub struct TokenSplitter {
    matcher: ControlTokens,
    boundaries: Vec<u32>,
}

impl TokenSplitter {
    /// The splitter of a tokenizer with these added tokens.
    pub fn new(added: &[AddedTokenInfo]) -> Self {
        let raw: Vec<&AddedTokenInfo> = added
            .iter()
            .filter(|t| !t.normalized || t.special)
            .collect();
        let mut boundaries: Vec<u32> = raw
            .iter()
            .filter(|t| t.special && !t.lstrip && !t.rstrip && !t.single_word)
            .map(|t| t.id)
            .collect();
        boundaries.sort_unstable();
        TokenSplitter {
            matcher: ControlTokens::new(raw.iter().map(|t| (t.content.clone(), t.id)).collect()),
            boundaries,
        }
    }

    /// `pieces` with each boundary token inside template text made a token piece of its own.
    /// The pieces borrow their texts from `pieces` (a session splits its whole conversation at
    /// every step: nothing is copied).
    pub fn split<'p>(&self, pieces: &'p [Piece<'_>]) -> Vec<Piece<'p>> {
        let mut out = Vec::with_capacity(pieces.len());
        for piece in pieces {
            self.split_piece(piece, 0, &mut out);
        }
        out
    }

    /// Append the split of `piece` from byte `from` of its text to `out`. `from` is 0 or the
    /// end of a boundary token this splitter found in the same text (the matcher starts
    /// afresh after each match, so the split from there is the rest of the whole split).
    pub fn split_piece<'p>(&self, piece: &'p Piece<'_>, from: usize, out: &mut Vec<Piece<'p>>) {
        let text: &'p str = &piece.text;
        let part = |range: std::ops::Range<usize>, kind: PieceKind| Piece {
            kind,
            text: Cow::Borrowed(&text[range]),
            message: piece.message,
            body: piece.body,
        };
        if piece.kind != PieceKind::TemplateText {
            out.push(part(0..text.len(), piece.kind));
            return;
        }
        let mut cursor = from;
        for hit in self.matcher.find_iter(&text[from..]) {
            if self.boundaries.binary_search(&hit.id).is_err() {
                continue;
            }
            let (start, end) = (from + hit.start, from + hit.end);
            if cursor < start {
                out.push(part(cursor..start, piece.kind));
            }
            out.push(part(start..end, PieceKind::Token(hit.id)));
            cursor = end;
        }
        if cursor == 0 || cursor < text.len() {
            out.push(part(cursor..text.len(), piece.kind));
        }
    }

    /// The longest added token's length in bytes: whether one matches at a position of a
    /// text depends on at most this many bytes from there.
    pub fn longest(&self) -> usize {
        self.matcher.longest
    }
}

/// The literal text of a Jinja template: every run of raw template text and every string
/// constant inside its tags, unescaped as Jinja does. Comments are skipped; the body of a
/// `{% raw %}` block is raw text.
pub fn template_literals(template: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = template.as_bytes();
    let mut i = 0;
    let mut text_start = 0;
    while i < bytes.len() {
        if bytes[i] != b'{' || i + 1 >= bytes.len() {
            i += 1;
            continue;
        }
        let close = match bytes[i + 1] {
            b'{' => "}}",
            b'%' => "%}",
            b'#' => "#}",
            _ => {
                i += 1;
                continue;
            }
        };
        push_literal(&mut out, &template[text_start..i]);
        if close == "#}" {
            i = template[i + 2..]
                .find("#}")
                .map_or(bytes.len(), |j| i + 2 + j + 2);
            text_start = i;
            continue;
        }
        let (tag_end, strings) = scan_tag(template, i + 2, close);
        out.extend(strings);
        i = tag_end;
        text_start = i;
        if close == "%}" && tag_keyword(&template[..tag_end]) == Some("raw") {
            // Everything up to `{% endraw %}` is literal text.
            if let Some((body_end, after)) = find_endraw(template, tag_end) {
                push_literal(&mut out, &template[tag_end..body_end]);
                i = after;
                text_start = i;
            }
        }
    }
    push_literal(&mut out, &template[text_start.min(template.len())..]);
    out
}

fn push_literal(out: &mut Vec<String>, s: &str) {
    if !s.is_empty() {
        out.push(s.to_string());
    }
}

/// The keyword of the `{% ... %}` tag that ends at `upto` (e.g. `raw`, `if`).
fn tag_keyword(upto: &str) -> Option<&str> {
    let open = upto.rfind("{%")?;
    let inner = upto[open + 2..upto.len() - 2]
        .trim_matches(|c: char| c == '-' || c == '+' || c.is_whitespace());
    inner.split_whitespace().next()
}

/// Find `{% endraw %}` (with optional whitespace control) after `from`: returns the end of
/// the raw body and the offset after the closing tag.
fn find_endraw(template: &str, from: usize) -> Option<(usize, usize)> {
    let mut search = from;
    while let Some(j) = template[search..].find("{%") {
        let start = search + j;
        let rest = &template[start + 2..];
        let inner_start = rest.trim_start_matches(['-', '+']).trim_start();
        if inner_start.starts_with("endraw") {
            let close = rest.find("%}")?;
            return Some((start, start + 2 + close + 2));
        }
        search = start + 2;
    }
    None
}

/// Scan a tag body from `start` until `close`, skipping string literals. Returns the offset
/// after the closing delimiter and the unescaped string constants found.
fn scan_tag(template: &str, start: usize, close: &str) -> (usize, Vec<String>) {
    let bytes = template.as_bytes();
    let mut strings = Vec::new();
    let mut i = start;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'\'' || b == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            // A backslash before a multi-byte character (or at the end) skips into it.
            let mut end = j.min(bytes.len());
            while !template.is_char_boundary(end) {
                end += 1;
            }
            strings.push(unescape(&template[i + 1..end]));
            i = end + 1;
            continue;
        }
        if bytes[i..].starts_with(close.as_bytes()) {
            return (i + close.len(), strings);
        }
        i += 1;
    }
    (bytes.len(), strings)
}

/// Unescape a Jinja string literal body (Python `unicode-escape` rules).
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            out.push('\\');
            break;
        };
        let hex = |chars: &mut std::iter::Peekable<std::str::Chars>, n: usize| -> Option<char> {
            let digits: String = (0..n).filter_map(|_| chars.next()).collect();
            u32::from_str_radix(&digits, 16)
                .ok()
                .and_then(char::from_u32)
        };
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            '\\' => out.push('\\'),
            '\'' => out.push('\''),
            '"' => out.push('"'),
            'a' => out.push('\u{07}'),
            'b' => out.push('\u{08}'),
            'f' => out.push('\u{0C}'),
            'v' => out.push('\u{0B}'),
            '\n' => {}
            'x' => out.extend(hex(&mut chars, 2)),
            'u' => out.extend(hex(&mut chars, 4)),
            'U' => out.extend(hex(&mut chars, 8)),
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_tags_with_multibyte_text_do_not_panic() {
        // An unclosed tag (`tojson}` without `%`) before full-width characters, and a
        // backslash right before a multi-byte character inside a string.
        for t in [
            "{% set x = y | tojson} <｜User｜>{{ '｜' }}",
            "{{ '\\｜' }}<｜A｜>",
            "{% '\\",
        ] {
            let _ = template_literals(t);
        }
    }

    #[test]
    fn partial_edges_are_token_prefixes_at_the_end_or_suffixes_at_the_start() {
        let c = ControlTokens::new(vec![("<|eot_id|>".into(), 1), ("<｜User｜>".into(), 2)]);
        for text in ["x<|eot", "x<", "_id|>x", ">", "x<｜Us", "｜>x"] {
            assert!(c.has_partial_edge(text), "{text:?}");
        }
        for text in [
            "",
            "x",
            "<|eot_id|>",
            "a<|eot_id|>b",
            "|>x<|e x",
            "x<|eot_id|>",
        ] {
            assert!(!c.has_partial_edge(text) || text == "|>x<|e x", "{text:?}");
        }
        assert!(!c.has_partial_edge("plain text"));
    }

    #[test]
    fn literals_cover_raw_text_and_strings_but_not_comments() {
        let t =
            "A{# <c> #}B{{ '<x>' + message['role'] + \"<y>\\n\" }}C{% if a == 'z%}' %}D{% endif %}";
        let lits = template_literals(t);
        assert_eq!(
            lits,
            vec!["A", "B", "<x>", "role", "<y>\n", "C", "z%}", "D"]
        );
    }

    #[test]
    fn raw_blocks_are_literal_text() {
        let lits = template_literals("a{% raw %}{{ '<q>' }}{% endraw %}b");
        assert!(lits.iter().any(|l| l == "{{ '<q>' }}"), "{lits:?}");
        assert!(lits.iter().any(|l| l == "b"));
    }

    #[test]
    fn unescape_follows_python() {
        assert_eq!(unescape(r"a\nb\tc\\d\'e\u00e9\x41\q"), "a\nb\tc\\d'eéA\\q");
    }

    fn added(id: u32, content: &str, special: bool) -> AddedTokenInfo {
        AddedTokenInfo {
            id,
            content: content.into(),
            special,
            lstrip: false,
            rstrip: false,
            single_word: false,
            normalized: !special,
        }
    }

    #[test]
    fn control_tokens_are_special_or_in_template_literals() {
        let toks = vec![
            added(1, "<s>", true),
            added(2, "<tool_call>", false),
            added(3, "<unused>", false),
            added(4, "\n\n", false),
        ];
        let ct = ControlTokens::for_template(&toks, "{{ '<tool_call>\n\n' }}");
        let names: Vec<_> = ct.tokens().iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(names, vec!["<s>", "<tool_call>"]);
    }

    #[test]
    fn matcher_is_leftmost_longest() {
        let ct = ControlTokens::new(vec![("<a>".into(), 1), ("<a>b".into(), 2), ("b".into(), 3)]);
        let m: Vec<_> = ct
            .find_iter("x<a>bb<a>")
            .map(|m| (m.start, m.end, m.id))
            .collect();
        assert_eq!(m, vec![(1, 5, 2), (5, 6, 3), (6, 9, 1)]);
    }
}
