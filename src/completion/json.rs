//! An incremental scanner of one JSON object that names a tool call: `{"name": ..., "arguments": ...}`.
//!
//! The scanner reads the text as it grows, without re-reading it, and says where the values of
//! the keys that matter are: the name (a string), the arguments (any JSON value, reported while
//! it grows so a stream can send argument deltas) and the call id. It checks structure only
//! (brackets, strings, separators); whether the values are valid JSON is checked once the
//! object is closed, by `serde_json`. Structural characters are ASCII, so scanning bytes is safe
//! on UTF-8 text.

/// Which value a key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    Name,
    Arguments,
    Id,
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Whitespace, then `{`.
    Open,
    /// Whitespace, then `"` (a key) or `}` (only right after `{`).
    KeyOrClose,
    /// Whitespace, then `"` (a key after a comma).
    Key,
    InKey,
    Colon,
    ValueStart,
    InValue,
    /// Whitespace, then `,` or `}`.
    AfterValue,
    Closed,
    Invalid,
}

/// Where the scanner is in a value.
#[derive(Debug, Clone, Copy, Default)]
struct ValueScan {
    /// Containers open inside the value.
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// The value is a string, a container or a scalar (number, `true`, ...).
    kind: u8,
}

/// A JSON object scanned as it grows. Offsets are byte offsets into the text the caller feeds.
#[derive(Debug, Clone)]
pub(crate) struct ObjectScanner {
    state: State,
    pos: usize,
    key_start: usize,
    slot: Slot,
    value_start: usize,
    value: ValueScan,
    args_key: &'static str,
    /// The name's JSON string, quotes included, once complete.
    pub name: Option<(usize, usize)>,
    /// The arguments value so far, and whether it is complete.
    pub arguments: Option<(usize, usize, bool)>,
    /// The id's JSON value, once complete.
    pub id: Option<(usize, usize)>,
    /// Keys other than name, arguments and id, in order.
    pub other_keys: Vec<String>,
    /// A key appeared twice.
    pub duplicate: bool,
}

impl ObjectScanner {
    /// A scanner that starts at `offset` of the text; `args_key` names the arguments
    /// (`"arguments"`, or Llama 3's `"parameters"`).
    pub fn new(offset: usize, args_key: &'static str) -> Self {
        ObjectScanner {
            state: State::Open,
            pos: offset,
            key_start: 0,
            slot: Slot::Other,
            value_start: 0,
            value: ValueScan::default(),
            args_key,
            name: None,
            arguments: None,
            id: None,
            other_keys: Vec::new(),
            duplicate: false,
        }
    }

    /// Whether the object closed (`}` read), and where: the offset just after it.
    pub fn closed_at(&self) -> Option<usize> {
        (self.state == State::Closed).then_some(self.pos)
    }

    /// Whether the text cannot be such an object.
    pub fn invalid(&self) -> bool {
        self.state == State::Invalid
    }

    /// Read `text` from where the last call stopped, up to its end or just past the object's `}`.
    pub fn feed(&mut self, text: &str) {
        let bytes = text.as_bytes();
        while self.pos < bytes.len() && !matches!(self.state, State::Closed | State::Invalid) {
            let b = bytes[self.pos];
            let mut advance = true;
            self.state = match self.state {
                State::Open if b.is_ascii_whitespace() => State::Open,
                State::Open if b == b'{' => State::KeyOrClose,
                State::KeyOrClose | State::Key if b.is_ascii_whitespace() => self.state,
                State::KeyOrClose if b == b'}' => State::Closed,
                State::KeyOrClose | State::Key if b == b'"' => {
                    self.key_start = self.pos;
                    self.value = ValueScan::default();
                    State::InKey
                }
                State::InKey => {
                    if self.value.escaped {
                        self.value.escaped = false;
                        State::InKey
                    } else if b == b'\\' {
                        self.value.escaped = true;
                        State::InKey
                    } else if b == b'"' {
                        self.slot = self.slot_of(&text[self.key_start..=self.pos]);
                        State::Colon
                    } else {
                        State::InKey
                    }
                }
                State::Colon if b.is_ascii_whitespace() => State::Colon,
                State::Colon if b == b':' => State::ValueStart,
                State::ValueStart if b.is_ascii_whitespace() => State::ValueStart,
                State::ValueStart => {
                    self.value_start = self.pos;
                    self.value = ValueScan::default();
                    match b {
                        b'"' => {
                            self.value.kind = b's';
                            self.value.in_string = true;
                        }
                        b'{' | b'[' => {
                            self.value.kind = b'c';
                            self.value.depth = 1;
                        }
                        b',' | b'}' | b']' | b':' => return self.fail(),
                        _ => self.value.kind = b'n',
                    }
                    State::InValue
                }
                State::InValue => self.value_byte(b, &mut advance),
                State::AfterValue if b.is_ascii_whitespace() => State::AfterValue,
                State::AfterValue if b == b',' => State::Key,
                State::AfterValue if b == b'}' => State::Closed,
                _ => return self.fail(),
            };
            if self.state == State::InValue && self.slot == Slot::Arguments {
                let end = if advance { self.pos + 1 } else { self.pos };
                self.arguments = Some((self.value_start, end, false));
            }
            if advance {
                self.pos += 1;
            }
        }
    }

    fn fail(&mut self) {
        self.state = State::Invalid;
    }

    fn slot_of(&mut self, key_json: &str) -> Slot {
        let key: String = serde_json::from_str(key_json).unwrap_or_default();
        let slot = match key.as_str() {
            "name" => Slot::Name,
            "id" => Slot::Id,
            k if k == self.args_key => Slot::Arguments,
            _ => Slot::Other,
        };
        let seen = match slot {
            Slot::Name => self.name.is_some(),
            Slot::Arguments => self.arguments.is_some(),
            Slot::Id => self.id.is_some(),
            Slot::Other => self.other_keys.contains(&key),
        };
        self.duplicate |= seen;
        if slot == Slot::Other {
            self.other_keys.push(key);
        }
        slot
    }

    /// One byte inside a value; the value may end here.
    fn value_byte(&mut self, b: u8, advance: &mut bool) -> State {
        let v = &mut self.value;
        if v.in_string {
            if v.escaped {
                v.escaped = false;
            } else if b == b'\\' {
                v.escaped = true;
            } else if b == b'"' {
                v.in_string = false;
                if v.kind == b's' {
                    self.end_value(self.pos + 1);
                    return State::AfterValue;
                }
            }
            return State::InValue;
        }
        match v.kind {
            b'c' => {
                match b {
                    b'"' => v.in_string = true,
                    b'{' | b'[' => v.depth += 1,
                    b'}' | b']' => {
                        v.depth -= 1;
                        if v.depth == 0 {
                            self.end_value(self.pos + 1);
                            return State::AfterValue;
                        }
                    }
                    _ => {}
                }
                State::InValue
            }
            _ => {
                if b == b',' || b == b'}' || b.is_ascii_whitespace() {
                    // The scalar ended before this byte, which AfterValue reads again.
                    *advance = false;
                    self.end_value(self.pos);
                    State::AfterValue
                } else {
                    State::InValue
                }
            }
        }
    }

    fn end_value(&mut self, end: usize) {
        let range = (self.value_start, end);
        match self.slot {
            Slot::Name => self.name = Some(range),
            Slot::Arguments => self.arguments = Some((range.0, range.1, true)),
            Slot::Id => self.id = Some(range),
            Slot::Other => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_in_chunks(text: &str, chunk: usize) -> ObjectScanner {
        let mut s = ObjectScanner::new(0, "arguments");
        let mut fed = String::new();
        for c in text.chars().collect::<Vec<_>>().chunks(chunk) {
            fed.extend(c);
            s.feed(&fed);
        }
        s
    }

    #[test]
    fn finds_name_arguments_and_id_in_any_chunking() {
        let text = r#" {"name": "get_weather", "arguments": {"city": "Paris \"x\" }", "n": [1, {"a": 2}]}, "id": "abc123XYZ"} tail"#;
        for chunk in [1, 2, 3, 7, 100] {
            let s = scan_in_chunks(text, chunk);
            let end = s.closed_at().expect("closed");
            assert_eq!(&text[end..], " tail");
            let (a, b) = s.name.unwrap();
            assert_eq!(&text[a..b], "\"get_weather\"");
            let (a, b, done) = s.arguments.unwrap();
            assert!(done);
            assert_eq!(
                &text[a..b],
                r#"{"city": "Paris \"x\" }", "n": [1, {"a": 2}]}"#
            );
            let (a, b) = s.id.unwrap();
            assert_eq!(&text[a..b], "\"abc123XYZ\"");
        }
    }

    #[test]
    fn scalar_and_string_arguments() {
        let s = scan_in_chunks(r#"{"arguments": 12.5e3 , "name":"f"}"#, 1);
        let (a, b, _) = s.arguments.unwrap();
        assert_eq!(&r#"{"arguments": 12.5e3 , "name":"f"}"#[a..b], "12.5e3");
        assert!(s.closed_at().is_some());
        let text = r#"{"name": "f", "arguments": "{\"a\": 1}"}"#;
        let s = scan_in_chunks(text, 2);
        let (a, b, _) = s.arguments.unwrap();
        assert_eq!(&text[a..b], r#""{\"a\": 1}""#);
    }

    #[test]
    fn arguments_grow_while_scanned() {
        let text = r#"{"name": "f", "arguments": {"q": "long"#;
        let mut s = ObjectScanner::new(0, "arguments");
        s.feed(text);
        let (a, b, done) = s.arguments.unwrap();
        assert!(!done);
        assert_eq!(&text[a..b], r#"{"q": "long"#);
        assert!(s.closed_at().is_none() && !s.invalid());
    }

    #[test]
    fn rejects_what_is_not_an_object() {
        for text in ["[1]", "{\"name\" \"f\"}", "{\"a\": ,}", "x{}"] {
            let s = scan_in_chunks(text, 1);
            assert!(s.invalid(), "{text}");
        }
        let s = scan_in_chunks(r#"{"name": "f", "name": "g"}"#, 1);
        assert!(s.duplicate);
    }
}
