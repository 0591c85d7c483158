//! Python string semantics that chat templates rely on.
//!
//! Jinja's `trim` filter and the string methods templates call (`strip`, `lstrip('\n')`,
//! `split`) follow Python, whose idea of whitespace differs from Rust's
//! `char::is_whitespace` (Python also strips U+001C..U+001F).

/// Whether Python's `str.isspace()` is true for `c` (the set `str.strip()` removes).
pub fn is_python_whitespace(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r' | '\u{1C}'..='\u{1F}' | ' ' | '\u{85}' | '\u{A0}'
            | '\u{1680}' | '\u{2000}'..='\u{200A}' | '\u{2028}' | '\u{2029}' | '\u{202F}'
            | '\u{205F}' | '\u{3000}'
    )
}

/// Python's `s.strip()` (also Jinja's `| trim`).
pub fn strip(s: &str) -> &str {
    s.trim_matches(is_python_whitespace)
}

/// Whether every character of `s` is Python whitespace and `s` is not empty
/// (Python's `str.isspace()`).
pub fn is_space(s: &str) -> bool {
    !s.is_empty() && s.chars().all(is_python_whitespace)
}

/// Python's `s.split(sep)[0]`: the text before the first `sep` (all of `s` without one).
pub fn before_first<'a>(s: &'a str, sep: &str) -> &'a str {
    s.split(sep).next().unwrap_or(s)
}

/// Python's `s.split(sep)[-1]`: the text after the last `sep` (all of `s` without one).
pub fn after_last<'a>(s: &'a str, sep: &str) -> &'a str {
    match s.rfind(sep) {
        Some(i) => &s[i + sep.len()..],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_matches_python_isspace() {
        // Python: ''.join(chr(c) for c in range(0x110000) if chr(c).isspace())
        let python: Vec<u32> = vec![
            0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x85, 0xA0, 0x1680, 0x2000,
            0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x2028,
            0x2029, 0x202F, 0x205F, 0x3000,
        ];
        let ours: Vec<u32> = (0..=0x10FFFFu32)
            .filter_map(char::from_u32)
            .filter(|&c| is_python_whitespace(c))
            .map(|c| c as u32)
            .collect();
        assert_eq!(ours, python);
    }

    #[test]
    fn strip_keeps_inner_text_and_non_python_space() {
        assert_eq!(strip("\u{1C} a b \n"), "a b");
        assert_eq!(strip("\u{200B}x\u{200B}"), "\u{200B}x\u{200B}"); // zero width space is not whitespace
        assert_eq!(strip(" \t\n"), "");
    }

    #[test]
    fn split_helpers_follow_python() {
        assert_eq!(before_first("a</t>b</t>c", "</t>"), "a");
        assert_eq!(after_last("a</t>b</t>c", "</t>"), "c");
        assert_eq!(after_last("abc", "</t>"), "abc");
        assert_eq!(before_first("", "x"), "");
    }
}
