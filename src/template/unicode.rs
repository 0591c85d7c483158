//! Python's `str` semantics over Unicode: character classes, case mappings, `splitlines`,
//! `repr`, all from tables generated from the Python that transformers runs on
//! ([`unicode_tables`](super::unicode_tables)), so they agree with it character for character.

use super::unicode_tables as t;

fn in_ranges(table: &[(u32, u32)], c: char) -> bool {
    let c = c as u32;
    table
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

fn mapped(table: &[(u32, [u32; 3])], c: char) -> Option<&[u32; 3]> {
    table
        .binary_search_by_key(&(c as u32), |&(k, _)| k)
        .ok()
        .map(|i| &table[i].1)
}

fn push_mapped(out: &mut String, m: &[u32; 3]) {
    for &cp in m.iter().take_while(|&&cp| cp != 0) {
        out.push(char::from_u32(cp).expect("valid table entry"));
    }
}

/// `str.isspace()` of one character (also what `str.strip()`/`split()` remove).
pub fn is_space(c: char) -> bool {
    crate::pystr::is_python_whitespace(c)
}
/// `str.isprintable()` of one character.
pub fn is_printable(c: char) -> bool {
    !in_ranges(t::NOT_PRINTABLE, c)
}
/// `str.isalpha()` of one character.
pub fn is_alpha(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphabetic();
    }
    in_ranges(t::ALPHA, c)
}
/// `str.isdecimal()` of one character.
pub fn is_decimal(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_digit();
    }
    in_ranges(t::DECIMAL, c)
}
/// `str.isdigit()` of one character.
pub fn is_digit(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_digit();
    }
    in_ranges(t::DIGIT, c)
}
/// `str.isnumeric()` of one character.
pub fn is_numeric(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_digit();
    }
    in_ranges(t::NUMERIC, c)
}
/// `str.isalnum()` of one character (also the `\w` of Python's `re`, minus `_`).
pub fn is_alnum(c: char) -> bool {
    is_alpha(c) || is_decimal(c) || is_digit(c) || is_numeric(c)
}
/// `str.isupper()` of one character.
pub fn is_upper(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_uppercase();
    }
    in_ranges(t::UPPER, c)
}
/// `str.islower()` of one character.
pub fn is_lower(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_lowercase();
    }
    in_ranges(t::LOWER, c)
}
/// A titlecase letter (category Lt).
pub fn is_title(c: char) -> bool {
    !c.is_ascii() && in_ranges(t::TITLE, c)
}
/// The Cased property.
pub fn is_cased(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphabetic();
    }
    in_ranges(t::CASED, c)
}
fn is_case_ignorable(c: char) -> bool {
    in_ranges(t::CASE_IGNORABLE, c)
}

fn push_upper(out: &mut String, c: char) {
    if c.is_ascii() {
        out.push(c.to_ascii_uppercase());
    } else if let Some(m) = mapped(t::UPPER_MAP, c) {
        push_mapped(out, m);
    } else {
        out.push(c);
    }
}

fn push_title(out: &mut String, c: char) {
    if let Some(m) = mapped(t::TITLE_MAP, c) {
        push_mapped(out, m);
    } else {
        push_upper(out, c);
    }
}

/// Python's `handle_capital_sigma`: the lowercase of U+03A3 at index `i` of `chars`.
fn lower_sigma(chars: &[char], i: usize) -> char {
    let mut j = i;
    let mut before = None;
    while j > 0 {
        j -= 1;
        if !is_case_ignorable(chars[j]) {
            before = Some(chars[j]);
            break;
        }
    }
    let mut final_sigma = before.is_some_and(is_cased);
    if final_sigma {
        let after = chars[i + 1..].iter().find(|&&c| !is_case_ignorable(c));
        final_sigma = after.is_none_or(|&c| !is_cased(c));
    }
    if final_sigma {
        '\u{3C2}'
    } else {
        '\u{3C3}'
    }
}

fn lower_into(out: &mut String, chars: &[char], i: usize) {
    let c = chars[i];
    if c.is_ascii() {
        out.push(c.to_ascii_lowercase());
    } else if c == '\u{3A3}' {
        out.push(lower_sigma(chars, i));
    } else if let Some(m) = mapped(t::LOWER_MAP, c) {
        push_mapped(out, m);
    } else {
        out.push(c);
    }
}

/// `str.upper()`.
pub fn upper(s: &str) -> String {
    if s.is_ascii() {
        return s.to_ascii_uppercase();
    }
    let mut out = String::with_capacity(s.len());
    s.chars().for_each(|c| push_upper(&mut out, c));
    out
}

/// `str.lower()`.
pub fn lower(s: &str) -> String {
    if s.is_ascii() {
        return s.to_ascii_lowercase();
    }
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    (0..chars.len()).for_each(|i| lower_into(&mut out, &chars, i));
    out
}

/// `str.casefold()`.
pub fn casefold(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if let Some(m) = mapped(t::FOLD_MAP, c) {
            push_mapped(&mut out, m);
        } else if c == '\u{3A3}' {
            out.push('\u{3C3}');
        } else if c.is_ascii() {
            out.push(c.to_ascii_lowercase());
        } else if let Some(m) = mapped(t::LOWER_MAP, c) {
            push_mapped(&mut out, m);
        } else {
            out.push(c);
        }
    }
    out
}

/// `str.title()`.
pub fn title(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut previous_cased = false;
    for (i, &c) in chars.iter().enumerate() {
        if previous_cased {
            lower_into(&mut out, &chars, i);
        } else {
            push_title(&mut out, c);
        }
        previous_cased = is_cased(c);
    }
    out
}

/// `str.capitalize()` (Python >= 3.8: titlecase first, lowercase the rest).
pub fn capitalize(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for i in 0..chars.len() {
        if i == 0 {
            push_title(&mut out, chars[0]);
        } else {
            lower_into(&mut out, &chars, i);
        }
    }
    out
}

/// `str.swapcase()`.
pub fn swapcase(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &c) in chars.iter().enumerate() {
        if is_upper(c) {
            lower_into(&mut out, &chars, i);
        } else if is_lower(c) {
            push_upper(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

/// `str.isupper()`.
pub fn str_is_upper(s: &str) -> bool {
    let mut cased = false;
    for c in s.chars() {
        if is_lower(c) || is_title(c) {
            return false;
        }
        cased |= is_upper(c);
    }
    cased
}

/// `str.islower()`.
pub fn str_is_lower(s: &str) -> bool {
    let mut cased = false;
    for c in s.chars() {
        if is_upper(c) || is_title(c) {
            return false;
        }
        cased |= is_lower(c);
    }
    cased
}

/// `str.istitle()`.
pub fn str_is_title(s: &str) -> bool {
    let (mut cased, mut previous_cased) = (false, false);
    for c in s.chars() {
        if is_upper(c) || is_title(c) {
            if previous_cased {
                return false;
            }
            previous_cased = true;
            cased = true;
        } else if is_lower(c) {
            if !previous_cased {
                return false;
            }
            previous_cased = true;
            cased = true;
        } else {
            previous_cased = false;
        }
    }
    cased
}

/// Whether `c` ends a line for `str.splitlines()`.
pub fn is_line_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r'
            | '\u{0B}'
            | '\u{0C}'
            | '\u{1C}'
            | '\u{1D}'
            | '\u{1E}'
            | '\u{85}'
            | '\u{2028}'
            | '\u{2029}'
    )
}

/// `str.splitlines(keepends)`.
pub fn splitlines(s: &str, keepends: bool) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut iter = s.char_indices().peekable();
    while let Some((i, c)) = iter.next() {
        if !is_line_break(c) {
            continue;
        }
        let mut end = i + c.len_utf8();
        if c == '\r' {
            if let Some(&(_, '\n')) = iter.peek() {
                iter.next();
                end += 1;
            }
        }
        out.push(if keepends {
            &s[start..end]
        } else {
            &s[start..i]
        });
        start = end;
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

/// Python's `repr()` of a string.
pub fn repr_str(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7F => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_ascii() || is_printable(c) => out.push(c),
            c if (c as u32) <= 0xFF => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if (c as u32) <= 0xFFFF => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_mappings_follow_python() {
        assert_eq!(upper("straße ǆ"), "STRASSE Ǆ");
        assert_eq!(lower("ΟΔΟΣ ΣΑ"), "οδος σα");
        assert_eq!(title("hello wORLD ǆx ßa"), "Hello World ǅx Ssa");
        assert_eq!(capitalize("ǆAB"), "ǅab");
        assert_eq!(lower("İ"), "i\u{307}");
        assert_eq!(casefold("Straße ΣΑΣ ﬁ"), "strasse σασ fi");
    }

    #[test]
    fn classes_follow_python() {
        assert!(is_alpha('é') && !is_alpha('\u{93E}')); // a Devanagari vowel sign is Mc
        assert!(is_digit('²') && !is_decimal('²') && is_numeric('½') && !is_digit('½'));
        assert!(str_is_upper("ABC1") && !str_is_upper("1") && str_is_lower("abc ß"));
        assert!(str_is_title("Hello World") && !str_is_title("Hello world"));
    }

    #[test]
    fn splitlines_and_repr() {
        assert_eq!(splitlines("a\r\nb\x1cc\u{85}", false), vec!["a", "b", "c"]);
        assert_eq!(splitlines("a\n\nb\n", true), vec!["a\n", "\n", "b\n"]);
        let mut s = String::new();
        repr_str("it's \"x\"\\\n\u{7f}\u{a0}é\u{200b}😀\u{e000}", &mut s);
        assert_eq!(s, "'it\\'s \"x\"\\\\\\n\\x7f\\xa0é\\u200b😀\\ue000'");
    }
}
