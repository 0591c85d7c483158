//! jinja2's lexer, as transformers configures it (`trim_blocks=True, lstrip_blocks=True`).
//!
//! The template text and all whitespace control (`-`, `+`, trim_blocks, lstrip_blocks,
//! newline normalization, the dropped trailing newline) are resolved here exactly as
//! jinja2 3.1 does it, so the engine that runs the template never applies its own rules.
//! String literals are decoded as Python's `unicode-escape` codec does.

use crate::pystr::is_python_whitespace as is_space;

/// One token of the template.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// Template text, whitespace control already applied.
    Data(String),
    VarBegin,
    VarEnd,
    BlockBegin,
    BlockEnd,
    Name(String),
    Str(String),
    Int(i128),
    Float(f64),
    /// An operator: `+ - / // * % ** ~ [ ] ( ) { } == != > >= < <= = . : | , ;`.
    Op(&'static str),
}

/// A token and the (1-based) line it starts on.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    pub tok: Tok,
    pub line: usize,
}

/// A syntax error with its line.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntaxError {
    pub message: String,
    pub line: usize,
}

const OPERATORS: [&str; 26] = [
    "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}",
    ">", "<", "=", ".", ":", "|", ",", ";",
];

#[derive(Clone, Copy, PartialEq)]
enum Tag {
    Comment,
    Block,
    Variable,
    Raw,
}

struct Lexer<'s> {
    src: &'s str,
    pos: usize,
    line: usize,
    line_starting: bool,
    out: Vec<Token>,
}

/// Tokenize `source` like jinja2's `Lexer.tokeniter` + `wrap`.
pub fn tokenize(source: &str) -> Result<Vec<Token>, SyntaxError> {
    // newline_re.split + "\n".join, and the trailing newline that keep_trailing_newline=False drops.
    let mut src = source.replace("\r\n", "\n").replace('\r', "\n");
    if src.ends_with('\n') {
        src.pop();
    }
    let mut lexer = Lexer {
        src: &src,
        pos: 0,
        line: 1,
        line_starting: true,
        out: Vec::new(),
    };
    lexer.run()?;
    Ok(lexer.out)
}

fn rstrip(s: &str) -> &str {
    s.trim_end_matches(is_space)
}

fn skip_spaces(s: &str, from: usize) -> usize {
    from + (s[from..].len() - s[from..].trim_start_matches(is_space).len())
}

impl<'s> Lexer<'s> {
    fn err<T>(&self, message: impl Into<String>) -> Result<T, SyntaxError> {
        Err(SyntaxError {
            message: message.into(),
            line: self.line,
        })
    }

    fn push(&mut self, tok: Tok) {
        self.out.push(Token {
            tok,
            line: self.line,
        });
    }

    fn advance_to(&mut self, end: usize) {
        self.line += self.src[self.pos..end].matches('\n').count();
        self.pos = end;
    }

    /// `{% raw %}` at `at` (the `{`): the end of the tag and its strip sign, if it is one.
    fn raw_begin(&self, at: usize) -> Option<(usize, u8)> {
        let s = self.src;
        let b = s.as_bytes();
        let mut i = at + 2;
        let sign = match b.get(i) {
            Some(&c @ (b'-' | b'+')) => {
                i += 1;
                c
            }
            _ => 0,
        };
        i = skip_spaces(s, i);
        if !s[i..].starts_with("raw") {
            return None;
        }
        i = skip_spaces(s, i + 3);
        if s[i..].starts_with("-%}") {
            Some((skip_spaces(s, i + 3), sign))
        } else if s[i..].starts_with("%}") {
            Some((i + 2, sign))
        } else {
            None
        }
    }

    fn run(&mut self) -> Result<(), SyntaxError> {
        let s = self.src;
        let b = s.as_bytes();
        while self.pos < s.len() {
            // Root: the earliest `{{`, `{%`, `{#`.
            let mut found = None;
            let mut i = self.pos;
            while let Some(off) = s[i..].find('{') {
                let at = i + off;
                match b.get(at + 1) {
                    Some(b'{') => found = Some((at, Tag::Variable)),
                    Some(b'%') => {
                        found = Some((
                            at,
                            if self.raw_begin(at).is_some() {
                                Tag::Raw
                            } else {
                                Tag::Block
                            },
                        ))
                    }
                    Some(b'#') => found = Some((at, Tag::Comment)),
                    _ => {
                        i = at + 1;
                        continue;
                    }
                }
                break;
            }
            let Some((at, tag)) = found else {
                let text = s[self.pos..].to_string();
                self.push(Tok::Data(text));
                self.advance_to(s.len());
                return Ok(());
            };
            let (tag_end, sign) = match tag {
                Tag::Raw => self.raw_begin(at).expect("checked"),
                _ => match b.get(at + 2) {
                    Some(&c @ (b'-' | b'+')) => (at + 3, c),
                    _ => (at + 2, 0),
                },
            };
            let text = self.strip_text(&s[self.pos..at], sign, tag != Tag::Variable);
            if !text.is_empty() {
                self.push(Tok::Data(text.to_string()));
            }
            self.advance_to(at);
            self.line_starting = s[..tag_end].ends_with('\n');
            match tag {
                Tag::Comment => self.comment(tag_end)?,
                Tag::Raw => {
                    self.advance_to(tag_end);
                    self.raw()?
                }
                Tag::Block => {
                    self.push(Tok::BlockBegin);
                    self.advance_to(tag_end);
                    self.tag(false)?
                }
                Tag::Variable => {
                    self.push(Tok::VarBegin);
                    self.advance_to(tag_end);
                    self.tag(true)?
                }
            }
        }
        Ok(())
    }

    /// jinja2's `OptionalLStrip` handling of the text before a tag.
    fn strip_text<'a>(&self, text: &'a str, sign: u8, lstrip: bool) -> &'a str {
        if sign == b'-' {
            return rstrip(text);
        }
        if sign != b'+' && lstrip {
            let l_pos = text.rfind('\n').map_or(0, |p| p + 1);
            if l_pos > 0 || self.line_starting {
                let tail = &text[l_pos..];
                if !tail.is_empty() && tail.chars().all(is_space) {
                    return &text[..l_pos];
                }
            }
        }
        text
    }

    fn comment(&mut self, start: usize) -> Result<(), SyntaxError> {
        let s = self.src;
        let Some(off) = s[start..].find("#}") else {
            self.advance_to(start);
            // jinja2's failure rule needs one more character; at the very end it just stops.
            return if start == s.len() {
                Ok(())
            } else {
                self.err("Missing end of comment tag")
            };
        };
        // `(.*?)(\+#}|\-#}\s*|#}\n?)`: the earliest match wins, so a sign right before counts.
        let at = start + off;
        let sign = if at > start { s.as_bytes()[at - 1] } else { 0 };
        let end = match sign {
            b'-' => skip_spaces(s, at + 2),
            b'+' => at + 2,
            _ if s[at + 2..].starts_with('\n') => at + 3,
            _ => at + 2,
        };
        self.advance_to(end);
        self.line_starting = s[..end].ends_with('\n');
        Ok(())
    }

    fn raw(&mut self) -> Result<(), SyntaxError> {
        let s = self.src;
        let b = s.as_bytes();
        let start = self.pos;
        let mut i = start;
        while let Some(off) = s[i..].find("{%") {
            let at = i + off;
            let mut j = at + 2;
            let sign = match b.get(j) {
                Some(&c @ (b'-' | b'+')) => {
                    j += 1;
                    c
                }
                _ => 0,
            };
            j = skip_spaces(s, j);
            if s[j..].starts_with("endraw") {
                j = skip_spaces(s, j + 6);
                let end = if s[j..].starts_with("+%}") {
                    Some(j + 3)
                } else if s[j..].starts_with("-%}") {
                    Some(skip_spaces(s, j + 3))
                } else if s[j..].starts_with("%}") {
                    Some(if s[j + 2..].starts_with('\n') {
                        j + 3
                    } else {
                        j + 2
                    })
                } else {
                    None
                };
                if let Some(end) = end {
                    let text = self.strip_text(&s[start..at], sign, true).to_string();
                    if !text.is_empty() {
                        self.push(Tok::Data(text));
                    }
                    self.advance_to(end);
                    self.line_starting = s[..end].ends_with('\n');
                    return Ok(());
                }
            }
            i = at + 2;
        }
        if start == s.len() {
            return Ok(());
        }
        self.err("Missing end of raw directive")
    }

    /// The inside of `{{ ... }}` or `{% ... %}`, up to and including its end.
    fn tag(&mut self, variable: bool) -> Result<(), SyntaxError> {
        let s = self.src;
        let b = s.as_bytes();
        let mut balance: Vec<u8> = Vec::new();
        while self.pos < s.len() {
            let rest = &s[self.pos..];
            if balance.is_empty() {
                let end = if variable {
                    if rest.starts_with("-}}") {
                        Some(skip_spaces(s, self.pos + 3))
                    } else if rest.starts_with("}}") {
                        Some(self.pos + 2)
                    } else {
                        None
                    }
                } else if rest.starts_with("+%}") {
                    Some(self.pos + 3)
                } else if rest.starts_with("-%}") {
                    Some(skip_spaces(s, self.pos + 3))
                } else if let Some(after) = rest.strip_prefix("%}") {
                    Some(if after.starts_with('\n') {
                        self.pos + 3
                    } else {
                        self.pos + 2
                    })
                } else {
                    None
                };
                if let Some(end) = end {
                    self.push(if variable { Tok::VarEnd } else { Tok::BlockEnd });
                    self.advance_to(end);
                    self.line_starting = s[..end].ends_with('\n');
                    return Ok(());
                }
            }
            let c = rest.chars().next().expect("not at end");
            if is_space(c) {
                let end = skip_spaces(s, self.pos);
                self.advance_to(end);
                continue;
            }
            let after_dot = self.pos > 0 && b[self.pos - 1] == b'.';
            if let Some((len, value)) = (!after_dot).then(|| float_token(rest)).flatten() {
                self.push(Tok::Float(value));
                self.advance_to(self.pos + len);
                continue;
            }
            if let Some((len, value)) = integer_token(rest) {
                match value {
                    Some(v) => self.push(Tok::Int(v)),
                    None => return self.err("integer literal too large"),
                }
                self.advance_to(self.pos + len);
                continue;
            }
            if c.is_ascii_alphabetic() || c == '_' {
                let len = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                if rest[len..]
                    .chars()
                    .next()
                    .is_some_and(|c| !c.is_ascii() && !is_space(c))
                {
                    return self.err("non-ASCII identifiers are not supported");
                }
                self.push(Tok::Name(rest[..len].to_string()));
                self.advance_to(self.pos + len);
                continue;
            }
            if c == '\'' || c == '"' {
                let Some(len) = string_len(rest) else {
                    return self.err(format!("unexpected char {c:?}"));
                };
                let value = match decode_string(&rest[1..len - 1]) {
                    Ok(v) => v,
                    Err(e) => return self.err(e),
                };
                self.push(Tok::Str(value));
                self.advance_to(self.pos + len);
                continue;
            }
            if let Some(op) = OPERATORS.iter().find(|op| rest.starts_with(**op)) {
                match *op {
                    "{" => balance.push(b'}'),
                    "(" => balance.push(b')'),
                    "[" => balance.push(b']'),
                    "}" | ")" | "]" => match balance.pop() {
                        None => return self.err(format!("unexpected '{op}'")),
                        Some(expected) if expected != op.as_bytes()[0] => {
                            return self.err(format!(
                                "unexpected '{op}', expected '{}'",
                                expected as char
                            ))
                        }
                        Some(_) => {}
                    },
                    _ => {}
                }
                self.push(Tok::Op(op));
                self.advance_to(self.pos + op.len());
                continue;
            }
            if !c.is_ascii() {
                return self.err("non-ASCII identifiers are not supported");
            }
            return self.err(format!("unexpected char {c:?} at {}", self.pos));
        }
        // jinja2 stops silently; the parser then reports the unexpected end.
        Ok(())
    }
}

/// `(\d+_)*\d+`: the length of a run of digits with single underscores between them.
fn digits_us(s: &str) -> usize {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
        if i + 1 < b.len() && b[i] == b'_' && b[i + 1].is_ascii_digit() {
            i += 1;
        }
    }
    i
}

/// jinja2's `float_re`: its length and value.
fn float_token(s: &str) -> Option<(usize, f64)> {
    let int_len = digits_us(s);
    if int_len == 0 {
        return None;
    }
    let b = s.as_bytes();
    let mut i = int_len;
    let mut frac = false;
    if b.get(i) == Some(&b'.') {
        let n = digits_us(&s[i + 1..]);
        if n > 0 {
            i += 1 + n;
            frac = true;
        }
    }
    let mut end = if frac { Some(i) } else { None };
    if matches!(b.get(i), Some(b'e' | b'E')) {
        let mut j = i + 1;
        if matches!(b.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        let n = digits_us(&s[j..]);
        if n > 0 {
            end = Some(j + n);
        }
    }
    let end = end?;
    let text: String = s[..end].chars().filter(|&c| c != '_').collect();
    text.parse::<f64>().ok().map(|v| (end, v))
}

/// jinja2's `integer_re`: its length and value (`None` if it does not fit an i128).
fn integer_token(s: &str) -> Option<(usize, Option<i128>)> {
    let b = s.as_bytes();
    let prefixed = |radix: u32, ok: fn(u8) -> bool| -> Option<(usize, Option<i128>)> {
        // 0b(_?[01])+ and friends
        let mut i = 2;
        let mut any = false;
        loop {
            if i < b.len() && ok(b[i]) {
                i += 1;
                any = true;
            } else if i + 1 < b.len() && b[i] == b'_' && ok(b[i + 1]) {
                i += 2;
                any = true;
            } else {
                break;
            }
        }
        any.then(|| {
            let digits: String = s[2..i].chars().filter(|&c| c != '_').collect();
            (i, i128::from_str_radix(&digits, radix).ok())
        })
    };
    if b.len() >= 2 && b[0] == b'0' {
        let p = match b[1] {
            b'b' | b'B' => prefixed(2, |c| matches!(c, b'0' | b'1')),
            b'o' | b'O' => prefixed(8, |c| matches!(c, b'0'..=b'7')),
            b'x' | b'X' => prefixed(16, |c| c.is_ascii_hexdigit()),
            _ => None,
        };
        if p.is_some() {
            return p;
        }
    }
    match b.first() {
        Some(b'1'..=b'9') => {
            let n = digits_us(s);
            let digits: String = s[..n].chars().filter(|&c| c != '_').collect();
            Some((n, digits.parse().ok()))
        }
        Some(b'0') => {
            // 0(_?0)*
            let mut i = 1;
            loop {
                if b.get(i) == Some(&b'0') {
                    i += 1;
                } else if b.get(i) == Some(&b'_') && b.get(i + 1) == Some(&b'0') {
                    i += 2;
                } else {
                    break;
                }
            }
            Some((i, Some(0)))
        }
        _ => None,
    }
}

/// The length of the string literal at the start of `s` (quotes included).
fn string_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let quote = b[0];
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            c if c == quote => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// Python's `s.encode("ascii", "backslashreplace").decode("unicode-escape")`.
pub fn decode_string(raw: &str) -> Result<String, String> {
    let mut ascii = String::with_capacity(raw.len());
    for c in raw.chars() {
        match c as u32 {
            0..=0x7F => ascii.push(c),
            n @ 0x80..=0xFF => ascii.push_str(&format!("\\x{n:02x}")),
            n @ 0x100..=0xFFFF => ascii.push_str(&format!("\\u{n:04x}")),
            n => ascii.push_str(&format!("\\U{n:08x}")),
        }
    }
    let b = ascii.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    let hex = |from: usize, n: usize, what: &str| -> Result<u32, String> {
        let digits = ascii
            .get(from..from + n)
            .filter(|d| d.bytes().all(|c| c.is_ascii_hexdigit()));
        match digits {
            Some(d) => Ok(u32::from_str_radix(d, 16).expect("hex digits")),
            None => Err(format!("truncated {what} escape")),
        }
    };
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i] as char);
            i += 1;
            continue;
        }
        let Some(&e) = b.get(i + 1) else {
            return Err("\\ at end of string".into());
        };
        i += 2;
        let c = match e {
            b'\n' => continue,
            b'\\' => '\\',
            b'\'' => '\'',
            b'"' => '"',
            b'a' => '\x07',
            b'b' => '\x08',
            b'f' => '\x0c',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'v' => '\x0b',
            b'0'..=b'7' => {
                let mut v = (e - b'0') as u32;
                for _ in 0..2 {
                    match b.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            v = v * 8 + (d - b'0') as u32;
                            i += 1;
                        }
                        _ => break,
                    }
                }
                char::from_u32(v).expect("at most 0o777")
            }
            b'x' | b'u' | b'U' => {
                let (n, what) = match e {
                    b'x' => (2, "\\xXX"),
                    b'u' => (4, "\\uXXXX"),
                    _ => (8, "\\UXXXXXXXX"),
                };
                let v = hex(i, n, what)?;
                i += n;
                match char::from_u32(v) {
                    Some(c) => c,
                    None if (0xD800..=0xDFFF).contains(&v) => {
                        return Err(
                            "surrogate code points in string literals are not supported".into()
                        )
                    }
                    None => return Err("illegal Unicode character".into()),
                }
            }
            b'N' => return Err("\\N{...} escapes are not supported".into()),
            other => {
                out.push('\\');
                other as char
            }
        };
        out.push(c);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(src: &str) -> Vec<Tok> {
        tokenize(src).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn whitespace_control() {
        let data = |src: &str| -> String {
            toks(src)
                .into_iter()
                .filter_map(|t| if let Tok::Data(d) = t { Some(d) } else { None })
                .collect()
        };
        assert_eq!(data("a\n  {% if x %}\nb\n  {%+ endif %}\n"), "a\nb\n  ");
        assert_eq!(data("a  {%- if x -%}  \n b"), "ab");
        assert_eq!(data("a {{ x }}\nb"), "a \nb");
        assert_eq!(data("x\n  {# c #}\ny\r\n"), "x\ny");
        assert_eq!(
            data("{% raw %}\n{{ x }}\n  {% endraw %}\nz"),
            "\n{{ x }}\nz"
        );
    }

    #[test]
    fn literals() {
        assert_eq!(
            toks("{{ 1_000 0x1F 1.5e3 'a\\tb\\x41\\é' \"\\u00e9\" }}")[1..6],
            [
                Tok::Int(1000),
                Tok::Int(31),
                Tok::Float(1500.0),
                Tok::Str("a\tbA\\xe9".into()),
                Tok::Str("é".into())
            ]
        );
        assert!(tokenize("{{ {'a': 1}}}").is_ok());
    }
}
