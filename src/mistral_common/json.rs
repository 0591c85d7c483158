//! JSON as mistral-common handles it with Python's `json` module: `json.loads` (NaN and
//! Infinity literals, integers of any size, duplicate keys keep their first position and last
//! value) and `json.dumps(..., ensure_ascii=False)` with the default separators (`", "`,
//! `": "`) and Python's `repr` of floats.

use crate::template::pyvalue::{json_float, json_str};

/// A value as Python's `json.loads` returns it.
#[derive(Debug, Clone, PartialEq)]
pub enum PyJson {
    /// `None`.
    Null,
    /// `True` / `False`.
    Bool(bool),
    /// An `int`, as its decimal digits (Python ints have no size limit).
    Int(String),
    /// A `float`.
    Float(f64),
    /// A `str`.
    Str(String),
    /// A `list`.
    List(Vec<PyJson>),
    /// A `dict` in insertion order.
    Dict(Vec<(String, PyJson)>),
}

/// Python's `json.loads` refuses nesting deeper than this (its recursion limit); chatids
/// refuses it too rather than guess.
const MAX_DEPTH: usize = 900;
/// CPython's limit on the digits of an `int` parsed from text (`sys.set_int_max_str_digits`).
const MAX_INT_DIGITS: usize = 4300;

/// Why a string is not parsed the way Python would.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// Not JSON: Python raises `JSONDecodeError` (mistral-common then keeps the string).
    NotJson,
    /// Python would fail otherwise (or produce a string chatids cannot carry): refuse.
    Unsupported(String),
}

impl PyJson {
    /// The value of a JSON document given as a `serde_json` value (what the Python layer
    /// converted from Python objects: ints stay ints, floats stay floats).
    pub fn from_value(v: &serde_json::Value) -> PyJson {
        use serde_json::Value;
        match v {
            Value::Null => PyJson::Null,
            Value::Bool(b) => PyJson::Bool(*b),
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    PyJson::Int(i.to_string())
                } else if let Some(u) = n.as_u64() {
                    PyJson::Int(u.to_string())
                } else {
                    PyJson::Float(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => PyJson::Str(s.clone()),
            Value::Array(a) => PyJson::List(a.iter().map(PyJson::from_value).collect()),
            Value::Object(o) => PyJson::Dict(
                o.iter()
                    .map(|(k, v)| (k.clone(), PyJson::from_value(v)))
                    .collect(),
            ),
        }
    }

    /// `json.dumps(self, ensure_ascii=False)`.
    pub fn dumps(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            PyJson::Null => out.push_str("null"),
            PyJson::Bool(true) => out.push_str("true"),
            PyJson::Bool(false) => out.push_str("false"),
            PyJson::Int(digits) => out.push_str(digits),
            PyJson::Float(f) => out.push_str(&json_float(*f)),
            PyJson::Str(s) => json_str(s, false, out),
            PyJson::List(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write(out);
                }
                out.push(']');
            }
            PyJson::Dict(items) => {
                out.push('{');
                for (i, (k, v)) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    json_str(k, false, out);
                    out.push_str(": ");
                    v.write(out);
                }
                out.push('}');
            }
        }
    }
}

/// `json.loads(text)` as Python runs it (strict mode: no raw control characters in strings).
pub fn loads(text: &str) -> Result<PyJson, LoadError> {
    let mut p = Parser {
        s: text.as_bytes(),
        text,
        i: 0,
    };
    p.ws();
    let v = p.value(0)?;
    p.ws();
    if p.i != p.s.len() {
        return Err(LoadError::NotJson);
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn eat(&mut self, lit: &str) -> bool {
        if self.s[self.i..].starts_with(lit.as_bytes()) {
            self.i += lit.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<PyJson, LoadError> {
        if depth > MAX_DEPTH {
            return Err(LoadError::Unsupported(
                "JSON nested too deeply (Python's json raises RecursionError)".into(),
            ));
        }
        let Some(&c) = self.s.get(self.i) else {
            return Err(LoadError::NotJson);
        };
        match c {
            b'"' => Ok(PyJson::Str(self.string()?)),
            b'{' => {
                self.i += 1;
                let mut items: Vec<(String, PyJson)> = Vec::new();
                self.ws();
                if self.eat("}") {
                    return Ok(PyJson::Dict(items));
                }
                loop {
                    self.ws();
                    if self.s.get(self.i) != Some(&b'"') {
                        return Err(LoadError::NotJson);
                    }
                    let key = self.string()?;
                    self.ws();
                    if !self.eat(":") {
                        return Err(LoadError::NotJson);
                    }
                    self.ws();
                    let v = self.value(depth + 1)?;
                    match items.iter_mut().find(|(k, _)| *k == key) {
                        Some(slot) => slot.1 = v,
                        None => items.push((key, v)),
                    }
                    self.ws();
                    if self.eat("}") {
                        return Ok(PyJson::Dict(items));
                    }
                    if !self.eat(",") {
                        return Err(LoadError::NotJson);
                    }
                }
            }
            b'[' => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.eat("]") {
                    return Ok(PyJson::List(items));
                }
                loop {
                    self.ws();
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    if self.eat("]") {
                        return Ok(PyJson::List(items));
                    }
                    if !self.eat(",") {
                        return Err(LoadError::NotJson);
                    }
                }
            }
            _ if self.eat("null") => Ok(PyJson::Null),
            _ if self.eat("true") => Ok(PyJson::Bool(true)),
            _ if self.eat("false") => Ok(PyJson::Bool(false)),
            _ if self.eat("NaN") => Ok(PyJson::Float(f64::NAN)),
            _ if self.eat("Infinity") => Ok(PyJson::Float(f64::INFINITY)),
            _ if self.eat("-Infinity") => Ok(PyJson::Float(f64::NEG_INFINITY)),
            b'-' | b'0'..=b'9' => self.number(),
            _ => Err(LoadError::NotJson),
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
            self.i += 1;
        }
        self.i - start
    }

    fn number(&mut self) -> Result<PyJson, LoadError> {
        let start = self.i;
        let negative = self.eat("-");
        let int_start = self.i;
        match self.s.get(self.i) {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(LoadError::NotJson),
        }
        let int_digits = self.i - int_start;
        let mut float = false;
        if self.s.get(self.i) == Some(&b'.')
            && self.s.get(self.i + 1).is_some_and(u8::is_ascii_digit)
        {
            self.i += 1;
            self.digits();
            float = true;
        }
        if matches!(self.s.get(self.i), Some(b'e' | b'E')) {
            let save = self.i;
            self.i += 1;
            if matches!(self.s.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                self.i = save;
            } else {
                float = true;
            }
        }
        let text = &self.text[start..self.i];
        if float {
            // Rust's parser rounds correctly, as Python's float() does; overflow is inf.
            let f: f64 = text.parse().map_err(|_| LoadError::NotJson)?;
            Ok(PyJson::Float(f))
        } else {
            if int_digits > MAX_INT_DIGITS {
                return Err(LoadError::Unsupported(format!(
                    "an integer of more than {MAX_INT_DIGITS} digits (Python's int() raises ValueError)"
                )));
            }
            let digits = &self.text[int_start..self.i];
            let zero = digits == "0";
            Ok(PyJson::Int(if negative && !zero {
                format!("-{digits}")
            } else {
                digits.to_string()
            }))
        }
    }

    fn hex4(&mut self) -> Result<u32, LoadError> {
        let h = self.s.get(self.i..self.i + 4).ok_or(LoadError::NotJson)?;
        let h = std::str::from_utf8(h).map_err(|_| LoadError::NotJson)?;
        if !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(LoadError::NotJson);
        }
        self.i += 4;
        Ok(u32::from_str_radix(h, 16).expect("hex digits"))
    }

    fn string(&mut self) -> Result<String, LoadError> {
        self.i += 1; // the opening quote
        let mut out = String::new();
        loop {
            let start = self.i;
            while self.i < self.s.len() && !matches!(self.s[self.i], b'"' | b'\\' | 0..=0x1f) {
                self.i += 1;
            }
            out.push_str(&self.text[start..self.i]);
            match self.s.get(self.i) {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.i += 1;
                    let Some(&e) = self.s.get(self.i) else {
                        return Err(LoadError::NotJson);
                    };
                    self.i += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let u = self.hex4()?;
                            let c = if (0xD800..0xDC00).contains(&u)
                                && self.s[self.i..].starts_with(b"\\u")
                            {
                                let save = self.i;
                                self.i += 2;
                                let low = self.hex4()?;
                                if (0xDC00..0xE000).contains(&low) {
                                    char::from_u32(0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00))
                                } else {
                                    self.i = save;
                                    None
                                }
                            } else {
                                char::from_u32(u)
                            };
                            match c {
                                Some(c) => out.push(c),
                                None => {
                                    return Err(LoadError::Unsupported(
                                        "a lone surrogate escape in JSON (Python keeps it; it is not valid text)".into(),
                                    ))
                                }
                            }
                        }
                        _ => return Err(LoadError::NotJson),
                    }
                }
                // A raw control character or the end of the text.
                _ => return Err(LoadError::NotJson),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(s: &str) -> String {
        loads(s).unwrap().dumps()
    }

    #[test]
    fn loads_and_dumps_like_python() {
        assert_eq!(
            round(r#"{"a":1,"b":[true,null,"x"]}"#),
            r#"{"a": 1, "b": [true, null, "x"]}"#
        );
        assert_eq!(round(r#"{"a":1,"b":2,"a":3}"#), r#"{"a": 3, "b": 2}"#);
        assert_eq!(
            round("[1.0, 1e16, 1e15, 0.0001, 1e-5, -0, -0.0, 1E400, NaN, -Infinity]"),
            "[1.0, 1e+16, 1000000000000000.0, 0.0001, 1e-05, 0, -0.0, Infinity, NaN, -Infinity]"
        );
        assert_eq!(
            round("123456789012345678901234567890"),
            "123456789012345678901234567890"
        );
        assert_eq!(
            round(r#""\u00e9\ud83d\ude00\n\u0001 \/""#),
            "\"é😀\\n\\u0001 /\""
        );
        assert_eq!(round(" \"[INST]\" "), "\"[INST]\"");
        for bad in [
            "",
            "abc",
            "{'a': 1}",
            "[1,]",
            "01",
            "1.",
            ".5",
            "1 2",
            "\"a\tb\"",
            "\u{feff}1",
            "nan",
            "[1",
        ] {
            assert_eq!(loads(bad), Err(LoadError::NotJson), "{bad:?}");
        }
        assert!(matches!(
            loads(r#""\ud800""#),
            Err(LoadError::Unsupported(_))
        ));
    }

    #[test]
    fn values_from_python_objects_keep_their_types() {
        let v = serde_json::json!({"i": 1, "f": 1.0, "u": u64::MAX, "s": "é"});
        assert_eq!(
            PyJson::from_value(&v).dumps(),
            r#"{"i": 1, "f": 1.0, "u": 18446744073709551615, "s": "é"}"#
        );
    }
}
