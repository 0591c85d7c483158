//! The `Split` regexes of byte-level tokenizers, as hand-written scanners.
//!
//! The `tokenizers` crate runs these patterns with Oniguruma, a backtracking engine: at each
//! position the alternatives are tried in order, each with greedy quantifiers that give back
//! characters until the rest of the alternative matches. For the known patterns that search
//! has a closed form, worked out per alternative below, so each match costs time linear in
//! its length and a whole text linear in its length (no backtracking, no regex engine).
//! Character classes come from [`super::unicode`], which is Oniguruma's own view of Unicode.
//!
//! The scanners are chosen by the exact pattern text; any other pattern is not supported and
//! the tokenizer falls back to the `tokenizers` crate.

use super::unicode::{self, CRLF, L, LOWERISH, M, N, P, S, UPPERISH, WS};
use crate::text::image::{ReadResult, Reader, Writer};

/// The cl100k-style pattern of Llama 3 (`\p{N}{1,3}`).
pub const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// The same with single digits (Qwen2, Qwen2.5, Qwen3).
pub const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// The o200k-style pattern of Mistral's tekken tokenizers as converted to tokenizer.json.
pub const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// o200k itself (gpt-oss): contractions after words, `\p{N}{1,3}`.
pub const O200K: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// DeepSeek V3's three splits, applied one after the other.
pub const DEEPSEEK_DIGITS: &str = r"\p{N}{1,3}";
/// DeepSeek V3's second split: runs of CJK ideographs, hiragana and katakana.
pub const DEEPSEEK_CJK: &str = "[\u{4e00}-\u{9fa5}\u{3040}-\u{309f}\u{30a0}-\u{30ff}]+";
/// DeepSeek V3's third split.
pub const DEEPSEEK_WORDS: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;

/// One known `Split` regex (behaviour `Isolated`, not inverted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// cl100k style: contractions, letters with one leading non-letter, digit groups of at
    /// most `max_digits`, punctuation, whitespace.
    Cl100k { max_digits: usize },
    /// o200k style: words split at case changes, optionally followed by a contraction.
    O200k {
        max_digits: usize,
        contractions: bool,
    },
    /// `\p{N}{1,3}`.
    Digits3,
    /// DeepSeek's CJK runs.
    CjkRuns,
    /// DeepSeek's words and punctuation.
    DeepSeekWords,
}

impl Pattern {
    /// Write the pattern into an image.
    pub fn write(&self, w: &mut Writer) {
        match *self {
            Pattern::Cl100k { max_digits } => {
                w.u8(0);
                w.len(max_digits);
            }
            Pattern::O200k {
                max_digits,
                contractions,
            } => {
                w.u8(1);
                w.len(max_digits);
                w.bool(contractions);
            }
            Pattern::Digits3 => w.u8(2),
            Pattern::CjkRuns => w.u8(3),
            Pattern::DeepSeekWords => w.u8(4),
        }
    }

    /// Read a pattern [`Pattern::write`] wrote.
    pub fn read(r: &mut Reader<'_>) -> ReadResult<Self> {
        Ok(match r.u8()? {
            0 => Pattern::Cl100k {
                max_digits: r.len(0)?,
            },
            1 => Pattern::O200k {
                max_digits: r.len(0)?,
                contractions: r.bool()?,
            },
            2 => Pattern::Digits3,
            3 => Pattern::CjkRuns,
            4 => Pattern::DeepSeekWords,
            p => return Err(format!("unknown split pattern {p}")),
        })
    }

    /// The scanner for a regex, if it is one of the known ones. Line breaks written as
    /// characters (DeepSeek's tokenizer.json has them so) mean what `\r` and `\n` mean.
    pub fn from_regex(regex: &str) -> Option<Self> {
        let regex = regex.replace('\r', r"\r").replace('\n', r"\n");
        Some(match regex.as_str() {
            LLAMA3 => Pattern::Cl100k { max_digits: 3 },
            QWEN2 => Pattern::Cl100k { max_digits: 1 },
            TEKKEN => Pattern::O200k {
                max_digits: 1,
                contractions: false,
            },
            O200K => Pattern::O200k {
                max_digits: 3,
                contractions: true,
            },
            DEEPSEEK_DIGITS => Pattern::Digits3,
            DEEPSEEK_CJK => Pattern::CjkRuns,
            DEEPSEEK_WORDS => Pattern::DeepSeekWords,
            _ => return None,
        })
    }

    /// Call `emit` with the byte range of every piece of `text`, in order: the matches and the
    /// stretches between them (as `Split` with behaviour `Isolated` keeps both). The regex sees
    /// `text` alone: its end is the end of the string for look-aheads.
    #[inline]
    pub fn split(self, text: &str, base: usize, emit: &mut impl FnMut(usize, usize)) {
        let s = Scan::new(text);
        let mut pos = 0;
        let mut gap = 0;
        while pos < s.len() {
            match self.match_at(&s, pos) {
                Some(end) => {
                    if gap < pos {
                        emit(base + gap, base + pos);
                    }
                    emit(base + pos, base + end);
                    pos = end;
                    gap = end;
                }
                None => pos += s.char_len(pos),
            }
        }
        if gap < s.len() {
            emit(base + gap, base + s.len());
        }
    }

    /// The end of the match that starts at `pos`, if one does.
    #[inline]
    fn match_at(self, s: &Scan<'_>, pos: usize) -> Option<usize> {
        match self {
            Pattern::Cl100k { max_digits } => cl100k(s, pos, max_digits),
            Pattern::O200k {
                max_digits,
                contractions,
            } => o200k(s, pos, max_digits, contractions),
            Pattern::Digits3 => {
                let (f, _) = s.at(pos)?;
                (f & N != 0).then(|| s.run_max(pos, N, 3))
            }
            Pattern::CjkRuns => {
                let end = s.run_while(pos, |c| {
                    matches!(c, '\u{4e00}'..='\u{9fa5}' | '\u{3040}'..='\u{309f}' | '\u{30a0}'..='\u{30ff}')
                });
                (end > pos).then_some(end)
            }
            Pattern::DeepSeekWords => deepseek_words(s, pos),
        }
    }
}

/// A text with class lookups by byte position.
struct Scan<'a> {
    text: &'a str,
    bytes: &'a [u8],
}

impl<'a> Scan<'a> {
    fn new(text: &'a str) -> Self {
        Scan {
            text,
            bytes: text.as_bytes(),
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The length of the character at `pos` (a char boundary).
    #[inline]
    fn char_len(&self, pos: usize) -> usize {
        utf8_len(self.bytes[pos])
    }

    /// The character at `pos`, if `pos` is before the end.
    #[inline]
    fn char(&self, pos: usize) -> Option<char> {
        if pos >= self.bytes.len() {
            return None;
        }
        let b = self.bytes[pos];
        if b < 0x80 {
            return Some(b as char);
        }
        self.text[pos..].chars().next()
    }

    /// The classes and length of the character at `pos`, if `pos` is before the end. The
    /// ASCII case is inlined into every scanner loop; the rest is out of line, and returns its
    /// pair in registers.
    #[inline(always)]
    fn at(&self, pos: usize) -> Option<(u16, usize)> {
        let b = *self.bytes.get(pos)?;
        if b < 0x80 {
            return Some((unicode::ascii_classes(b), 1));
        }
        Some(self.wide_at(pos))
    }

    /// [`Scan::at`] of a character outside ASCII: `pos` is the boundary of a character that
    /// starts with a byte of `0x80` or more.
    #[inline(never)]
    fn wide_at(&self, pos: usize) -> (u16, usize) {
        // `pos` is a character boundary before the end, so there is a character.
        let c = self.char(pos).unwrap_or(char::REPLACEMENT_CHARACTER);
        (unicode::wide_classes(c as u32), c.len_utf8())
    }

    /// The end of the longest run from `pos` of characters with any class in `set`.
    #[inline]
    fn run(&self, mut pos: usize, set: u16) -> usize {
        while let Some((f, len)) = self.at(pos) {
            if f & set == 0 {
                break;
            }
            pos += len;
        }
        pos
    }

    /// The end of the longest run of at most `max` characters with a class in `set`.
    #[inline]
    fn run_max(&self, mut pos: usize, set: u16, max: usize) -> usize {
        for _ in 0..max {
            match self.at(pos) {
                Some((f, len)) if f & set != 0 => pos += len,
                _ => break,
            }
        }
        pos
    }

    /// The end of the longest run from `pos` of characters with no class in `set`.
    #[inline]
    fn run_without(&self, mut pos: usize, set: u16) -> usize {
        while let Some((f, len)) = self.at(pos) {
            if f & set != 0 {
                break;
            }
            pos += len;
        }
        pos
    }

    /// The end of the longest run from `pos` of characters for which `keep` holds.
    #[inline]
    fn run_while(&self, mut pos: usize, keep: impl Fn(char) -> bool) -> usize {
        while let Some(c) = self.char(pos) {
            if !keep(c) {
                break;
            }
            pos += c.len_utf8();
        }
        pos
    }

    /// The end of the longest run of ASCII bytes in `set` from `pos`.
    #[inline]
    fn run_ascii(&self, mut pos: usize, set: &[u8]) -> usize {
        while pos < self.bytes.len() && set.contains(&self.bytes[pos]) {
            pos += 1;
        }
        pos
    }
}

#[inline]
fn utf8_len(first: u8) -> usize {
    match first {
        0x00..=0x7F => 1,
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        _ => 4,
    }
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)` at `pos`: the end of the contraction, if one starts there.
/// The first letter decides the alternative (no character folds to two of them).
#[inline]
fn contraction(s: &Scan<'_>, pos: usize) -> Option<usize> {
    if s.bytes.get(pos) != Some(&b'\'') {
        return None;
    }
    let c1 = s.char(pos + 1)?;
    let after1 = pos + 1 + c1.len_utf8();
    let second = |letter: char| {
        let c2 = s.char(after1)?;
        unicode::folds_to(c2, letter).then(|| after1 + c2.len_utf8())
    };
    for letter in ['s', 't', 'm', 'd'] {
        if unicode::folds_to(c1, letter) {
            return Some(after1);
        }
    }
    if unicode::folds_to(c1, 'r') || unicode::folds_to(c1, 'v') {
        return second('e');
    }
    if unicode::folds_to(c1, 'l') {
        return second('l');
    }
    None
}

/// The whitespace alternatives every pattern ends with: `\s*[\r\n]+|\s+(?!\S)|\s+`.
///
/// * `\s*[\r\n]+`: `\s*` takes the whole whitespace run and gives characters back until a
///   line break follows, so the match ends right after the run's last `\r`/`\n`.
/// * `\s+(?!\S)`: at the end of the text the whole run; before a non-space character the run
///   less its last character (which is whitespace, so the look-ahead holds), if that leaves
///   at least one.
/// * `\s+`: the whole run (a single space before a non-space character).
#[inline]
fn whitespace(s: &Scan<'_>, pos: usize) -> Option<usize> {
    let mut end = pos;
    let mut after_last_break = None;
    let mut last_start = pos;
    while let Some((f, len)) = s.at(end) {
        if f & WS == 0 {
            break;
        }
        last_start = end;
        end += len;
        if f & CRLF != 0 {
            after_last_break = Some(end);
        }
    }
    if end == pos {
        return None;
    }
    if let Some(e) = after_last_break {
        return Some(e);
    }
    if end == s.len() || last_start == pos {
        return Some(end);
    }
    Some(last_start)
}

/// `[^\r\n\p{L}\p{N}]` (and DeepSeek's `[^\r\n\p{L}\p{P}\p{S}]`): may this character lead a word?
#[inline]
fn may_lead(classes: u16, excluded: u16) -> bool {
    classes & (CRLF | excluded) == 0
}

/// The cl100k-style pattern at `pos`.
fn cl100k(s: &Scan<'_>, pos: usize, max_digits: usize) -> Option<usize> {
    let (f0, l0) = s.at(pos)?;
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if let Some(end) = contraction(s, pos) {
        return Some(end);
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+ : a leading character that is none of those, if a letter
    // follows; else the letters from here.
    if may_lead(f0, L | N) {
        if let Some((f1, _)) = s.at(pos + l0) {
            if f1 & L != 0 {
                return Some(s.run(pos + l0, L));
            }
        }
    } else if f0 & L != 0 {
        return Some(s.run(pos, L));
    }
    // \p{N}{1,3}
    if f0 & N != 0 {
        return Some(s.run_max(pos, N, max_digits));
    }
    // ?[^\s\p{L}\p{N}]+[\r\n]*
    if let Some(end) = punctuation(s, pos, f0, WS | L | N, b"\r\n") {
        return Some(end);
    }
    whitespace(s, pos)
}

/// ` ?[^<set>]+[<trailing>]*` at `pos`: an optional ASCII space, a run of characters with no
/// class in `excluded`, then any of the `trailing` bytes.
#[inline]
fn punctuation(s: &Scan<'_>, pos: usize, f0: u16, excluded: u16, trailing: &[u8]) -> Option<usize> {
    let start = if s.bytes[pos] == b' ' {
        match s.at(pos + 1) {
            Some((f1, _)) if f1 & excluded == 0 => pos + 1,
            _ => return None,
        }
    } else if f0 & excluded == 0 {
        pos
    } else {
        return None;
    };
    let end = s.run_without(start, excluded);
    Some(s.run_ascii(end, trailing))
}

/// The o200k-style pattern at `pos`.
fn o200k(s: &Scan<'_>, pos: usize, max_digits: usize, contractions: bool) -> Option<usize> {
    let (f0, l0) = s.at(pos)?;
    let lead = may_lead(f0, L | N);
    let with_contraction = |end: usize| {
        if contractions {
            contraction(s, end).unwrap_or(end)
        } else {
            end
        }
    };
    // [^\r\n\p{L}\p{N}]?[Upper]*[Lower]+ : with the leading character first, then without.
    if lead {
        if let Some(end) = upper_star_lower_plus(s, pos + l0) {
            return Some(with_contraction(end));
        }
    }
    if let Some(end) = upper_star_lower_plus(s, pos) {
        return Some(with_contraction(end));
    }
    // [^\r\n\p{L}\p{N}]?[Upper]+[Lower]*
    if lead {
        if let Some(end) = upper_plus_lower_star(s, pos + l0) {
            return Some(with_contraction(end));
        }
    }
    if let Some(end) = upper_plus_lower_star(s, pos) {
        return Some(with_contraction(end));
    }
    if f0 & N != 0 {
        return Some(s.run_max(pos, N, max_digits));
    }
    if let Some(end) = punctuation(s, pos, f0, WS | L | N, b"\r\n/") {
        return Some(end);
    }
    whitespace(s, pos)
}

/// `[Upper]*[Lower]+` from `start`. `[Upper]*` takes its longest run and gives characters back
/// until a `[Lower]` character follows: that is the run's end if a lower character is there,
/// else the last character of the run that is also lower (Lm, Lo, M are both). `[Lower]+`
/// then runs on from there; from inside the run it stops after one character, as the run's
/// later characters are not lower.
#[inline]
fn upper_star_lower_plus(s: &Scan<'_>, start: usize) -> Option<usize> {
    let mut end = start;
    let mut last_lower_end = None;
    while let Some((f, len)) = s.at(end) {
        if f & UPPERISH == 0 {
            break;
        }
        end += len;
        if f & LOWERISH != 0 {
            last_lower_end = Some(end);
        }
    }
    match s.at(end) {
        Some((f, _)) if f & LOWERISH != 0 => Some(s.run(end, LOWERISH)),
        _ => last_lower_end,
    }
}

/// `[Upper]+[Lower]*` from `start` (no giving back: the rest always matches).
#[inline]
fn upper_plus_lower_star(s: &Scan<'_>, start: usize) -> Option<usize> {
    let end = s.run(start, UPPERISH);
    (end > start).then(|| s.run(end, LOWERISH))
}

/// DeepSeek V3's third split at `pos`.
fn deepseek_words(s: &Scan<'_>, pos: usize) -> Option<usize> {
    let (f0, l0) = s.at(pos)?;
    // [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+ : ASCII punctuation, then ASCII letters.
    if s.bytes[pos].is_ascii_punctuation()
        && s.bytes.get(pos + 1).is_some_and(u8::is_ascii_alphabetic)
    {
        let mut end = pos + 1;
        while s.bytes.get(end).is_some_and(u8::is_ascii_alphabetic) {
            end += 1;
        }
        return Some(end);
    }
    // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
    if may_lead(f0, L | P | S) {
        let end = s.run(pos + l0, L | M);
        if end > pos + l0 {
            return Some(end);
        }
    }
    let end = s.run(pos, L | M);
    if end > pos {
        return Some(end);
    }
    // ?[\p{P}\p{S}]+[\r\n]*
    let start = if s.bytes[pos] == b' ' {
        match s.at(pos + 1) {
            Some((f1, _)) if f1 & (P | S) != 0 => Some(pos + 1),
            _ => None,
        }
    } else if f0 & (P | S) != 0 {
        Some(pos)
    } else {
        None
    };
    if let Some(start) = start {
        let end = s.run(start, P | S);
        return Some(s.run_ascii(end, b"\r\n"));
    }
    whitespace(s, pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use onig::Regex;

    fn ours(pattern: Pattern, text: &str) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        pattern.split(text, 0, &mut |a, b| out.push((a, b)));
        out
    }

    fn oniguruma(regex: &Regex, text: &str) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut prev = 0;
        for (a, b) in regex.find_iter(text) {
            if prev != a {
                out.push((prev, a));
            }
            out.push((a, b));
            prev = b;
        }
        if prev != text.len() {
            out.push((prev, text.len()));
        }
        out
    }

    /// DeepSeek's third split as its tokenizer.json writes it, line breaks as characters.
    const DEEPSEEK_WORDS_AS_SHIPPED: &str = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

    const ALL: [&str; 8] = [
        LLAMA3,
        QWEN2,
        TEKKEN,
        O200K,
        DEEPSEEK_DIGITS,
        DEEPSEEK_CJK,
        DEEPSEEK_WORDS,
        DEEPSEEK_WORDS_AS_SHIPPED,
    ];

    /// Hand-picked strings where the alternatives compete, against Oniguruma itself.
    #[test]
    fn scanners_split_as_oniguruma_does() {
        let texts = [
            "Hello world! It's 12345 o'clock, DON'T 'S 'ſ 'Ll 're'VE\n\n  \t x",
            "   leading and trailing   ",
            "a\r\n\r\nb \n \n c  \u{a0}\u{3000}d\u{85}e",
            "CamelCaseWORDSandMixedÜberStraße ǅungla ʰʰa ā̈b",
            "x/y//z!\n/ (a) [b] {c} -> => ...\n\n/",
            "数字123四五六 日本語のテキスト カタカナ español",
            "\u{301}\u{301}a \u{301}B\u{2028}\u{200b}z\u{0}\u{1f600}!!",
            "1234567 ١٢٣٤ ¼½ 𝟘𝟙𝟚",
            "'s's 'x ''s a's don't we'll I'd",
            "",
            " ",
            "\n",
            "a  ",
            "  a",
        ];
        for regex in ALL {
            let pattern = Pattern::from_regex(regex).unwrap();
            let engine = Regex::new(regex).unwrap();
            for text in texts {
                assert_eq!(
                    ours(pattern, text),
                    oniguruma(&engine, text),
                    "{regex} on {text:?}"
                );
            }
        }
    }

    /// Every scalar value alone, after a letter, between letters, digits, spaces and around
    /// line breaks and apostrophes, against Oniguruma.
    #[test]
    fn every_scalar_value_in_context_splits_as_oniguruma_does() {
        let engines: Vec<(Pattern, Regex)> = ALL
            .iter()
            .map(|r| (Pattern::from_regex(r).unwrap(), Regex::new(r).unwrap()))
            .collect();
        let contexts = [
            "{}", "a{}b", "1{}2", " {} ", "\n{}\n", "'{}", "A{}a", "{}{}",
        ];
        // Sampled in the unit tests (every 7th scalar value plus the first 0x3000); the full
        // sweep runs from Python against the whole tokenizer (tests/test_native_bpe.py).
        for cp in (0..0x11_0000u32).filter(|cp| *cp < 0x3000 || cp % 7 == 0) {
            let Some(c) = char::from_u32(cp) else {
                continue;
            };
            for context in contexts {
                let text = context.replace("{}", c.encode_utf8(&mut [0u8; 4]));
                for (pattern, engine) in &engines {
                    let (a, b) = (ours(*pattern, &text), oniguruma(engine, &text));
                    assert_eq!(a, b, "U+{cp:04X} in {context:?} with {pattern:?}");
                }
            }
        }
    }

    /// Long runs of one character (the inputs where a backtracking search would give back the
    /// most) split as Oniguruma splits them. Their cost is measured by the benchmarks.
    #[test]
    fn long_runs_split_as_oniguruma_does() {
        for c in [
            "a", " ", "\n", "1", "!", "A", "\u{301}", "日", "\u{200b}", "Aa", " \n",
        ] {
            let text = c.repeat((1 << 16) / c.len());
            for regex in ALL {
                let pattern = Pattern::from_regex(regex).unwrap();
                let engine = Regex::new(regex).unwrap();
                assert_eq!(
                    ours(pattern, &text),
                    oniguruma(&engine, &text),
                    "{c:?} with {regex}"
                );
            }
        }
    }
}
