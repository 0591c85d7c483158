//! Python's value model on top of MiniJinja values.
//!
//! A template sees JSON data, so its Python types are `None`, `bool`, `int`, `float`, `str`,
//! `list` and `dict`, plus what the template makes: tuples, dict views, generators (from
//! `select`, `map`, ...), ranges, bound methods, namespaces, macros. This module names them
//! ([`Kind`]), converts JSON in, and writes them out as Python would: `str()`, `repr()` and
//! `json.dumps()`. Whatever Python would print as a memory address is an error instead.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use indexmap::IndexMap;
use minijinja::value::{Enumerator, Object, ObjectRepr, Value, ValueKind};
use minijinja::{Error, ErrorKind, State};

use super::unicode;

/// A Python `dict` (MiniJinja's own map type, so template literals are dicts too).
pub type Dict = IndexMap<Value, Value>;

/// An error raised by a Python operation (a `TypeError`, `ValueError`, ...).
pub fn err(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// The largest string or list a template may build (Python would exhaust memory instead):
/// 256 MiB, well above any real prompt (a 100 MB message renders; `"a" * 10**12` does not).
pub const MAX_SIZE: i128 = 1 << 28;

/// `n` as a size, refusing sizes beyond [`MAX_SIZE`].
pub fn check_size(n: i128) -> Result<usize, Error> {
    if n > MAX_SIZE {
        return Err(err(format!("a result of size {n} is too large")));
    }
    Ok(n.max(0) as usize)
}

/// Refuse to build a string of `bytes` bytes beyond [`MAX_SIZE`] (checked before allocating).
pub fn check_len(bytes: usize) -> Result<(), Error> {
    check_size(bytes as i128).map(|_| ())
}

/// The Python type of a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Undefined,
    None,
    Bool,
    Int,
    Float,
    Str,
    List,
    Tuple,
    Dict,
    View,
    Iter,
    Range,
    Method,
    /// Namespaces, macros, functions, `loop`, ...
    Other,
}

/// The Python type of `v`.
pub fn kind(v: &Value) -> Kind {
    match v.kind() {
        ValueKind::Undefined => Kind::Undefined,
        ValueKind::None => Kind::None,
        ValueKind::Bool => Kind::Bool,
        ValueKind::Number if v.is_integer() => Kind::Int,
        ValueKind::Number => Kind::Float,
        ValueKind::String => Kind::Str,
        _ => {
            let Some(obj) = v.as_object() else {
                return Kind::Other;
            };
            if obj.downcast_ref::<Dict>().is_some() {
                Kind::Dict
            } else if obj.downcast_ref::<Vec<Value>>().is_some() {
                Kind::List
            } else if obj.downcast_ref::<PyTuple>().is_some() {
                Kind::Tuple
            } else if obj.downcast_ref::<PyView>().is_some() {
                Kind::View
            } else if obj.downcast_ref::<PyIter>().is_some() {
                Kind::Iter
            } else if obj.downcast_ref::<PyRange>().is_some() {
                Kind::Range
            } else if obj.downcast_ref::<BoundMethod>().is_some() {
                Kind::Method
            } else if matches!(obj.repr(), ObjectRepr::Seq | ObjectRepr::Iterable) {
                // MiniJinja's lazy results of list `+`, `*` and slicing: lists.
                Kind::List
            } else {
                Kind::Other
            }
        }
    }
}

/// Python's `type(v).__name__`.
pub fn type_name(v: &Value) -> &'static str {
    match kind(v) {
        Kind::Undefined => "Undefined",
        Kind::None => "NoneType",
        Kind::Bool => "bool",
        Kind::Int => "int",
        Kind::Float => "float",
        Kind::Str => "str",
        Kind::List => "list",
        Kind::Tuple => "tuple",
        Kind::Dict => "dict",
        Kind::View => match v.downcast_object_ref::<PyView>().map(|w| w.kind) {
            Some(ViewKind::Keys) => "dict_keys",
            Some(ViewKind::Values) => "dict_values",
            _ => "dict_items",
        },
        Kind::Iter => "generator",
        Kind::Range => "range",
        Kind::Method => "builtin_function_or_method",
        Kind::Other if is_namespace(v) => "Namespace",
        Kind::Other => "object",
    }
}

/// The value of an `int` (bools count as ints, as in Python).
pub fn as_int(v: &Value) -> Option<i128> {
    match kind(v) {
        Kind::Int => i128::try_from(v.clone()).ok(),
        Kind::Bool => Some(v.is_true() as i128),
        _ => None,
    }
}

/// The value of an `int`, `bool` or `float` as a float.
pub fn as_float(v: &Value) -> Option<f64> {
    match kind(v) {
        Kind::Float => f64::try_from(v.clone()).ok(),
        Kind::Int | Kind::Bool => as_int(v).map(|i| i as f64),
        _ => None,
    }
}

/// A new `dict`.
pub fn new_dict(d: Dict) -> Value {
    Value::from_object(d)
}

/// A new `list`.
pub fn new_list(items: Vec<Value>) -> Value {
    Value::from(items)
}

/// A new `tuple`.
pub fn new_tuple(items: Vec<Value>) -> Value {
    Value::from_object(PyTuple(items, &[]))
}

/// A new named tuple (its fields are also attributes).
pub fn new_named_tuple(items: Vec<Value>, fields: &'static [&'static str]) -> Value {
    Value::from_object(PyTuple(items, fields))
}

/// Whether a MiniJinja object is a namespace (the engine's type is private; its `Debug` is not).
pub fn is_namespace(v: &Value) -> bool {
    kind(v) == Kind::Other
        && v.kind() == ValueKind::Map
        && v.as_object()
            .is_some_and(|o| format!("{o:?}").starts_with("Namespace"))
}

/// A new generator over already computed items (consumed by its first iteration).
pub fn new_iter(items: Vec<Value>) -> Value {
    Value::from_object(PyIter(Mutex::new(Some(items))))
}

/// A Python `tuple`, or a named tuple when it has field names.
#[derive(Debug)]
pub struct PyTuple(pub Vec<Value>, pub &'static [&'static str]);

impl Object for PyTuple {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        if let Some(name) = key.as_str() {
            let i = self.1.iter().position(|f| *f == name)?;
            return self.0.get(i).cloned();
        }
        self.0.get(key.as_usize()?).cloned()
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Seq(self.0.len())
    }
}

/// Which view of a dict a [`PyView`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewKind {
    Keys,
    Values,
    Items,
}

/// `dict.keys()`, `dict.values()`, `dict.items()`: iterable, sized, not subscriptable.
#[derive(Debug)]
pub struct PyView {
    pub kind: ViewKind,
    pub dict: Arc<Dict>,
}

impl PyView {
    /// The items of the view.
    pub fn items(&self) -> Vec<Value> {
        match self.kind {
            ViewKind::Keys => self.dict.keys().cloned().collect(),
            ViewKind::Values => self.dict.values().cloned().collect(),
            ViewKind::Items => self
                .dict
                .iter()
                .map(|(k, v)| new_tuple(vec![k.clone(), v.clone()]))
                .collect(),
        }
    }
}

impl Object for PyView {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Values(self.items())
    }
    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(self.dict.len())
    }
    fn is_true(self: &Arc<Self>) -> bool {
        !self.dict.is_empty()
    }
}

/// A generator or iterator: iterable once, always true, no length.
#[derive(Debug)]
pub struct PyIter(Mutex<Option<Vec<Value>>>);

impl PyIter {
    /// The remaining items; the generator is exhausted afterwards.
    pub fn take(&self) -> Vec<Value> {
        self.0
            .lock()
            .expect("not poisoned")
            .take()
            .unwrap_or_default()
    }

    /// The next item (`next(generator)`), leaving the rest.
    pub fn pop_front(&self) -> Option<Value> {
        let mut items = self.0.lock().expect("not poisoned");
        let items = items.as_mut()?;
        (!items.is_empty()).then(|| items.remove(0))
    }
}

impl Object for PyIter {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Values(self.take())
    }
    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(
            self.0
                .lock()
                .expect("not poisoned")
                .as_ref()
                .map_or(0, |v| v.len()),
        )
    }
    fn is_true(self: &Arc<Self>) -> bool {
        true
    }
}

/// A Python `range`.
#[derive(Debug)]
pub struct PyRange {
    pub start: i64,
    pub stop: i64,
    pub step: i64,
}

impl PyRange {
    /// `len(range)`.
    pub fn len(&self) -> usize {
        let (lo, hi, step) = if self.step > 0 {
            (self.start, self.stop, self.step)
        } else {
            (self.stop, self.start, -self.step)
        };
        if lo >= hi {
            0
        } else {
            ((hi - lo - 1) / step + 1) as usize
        }
    }
    fn get(&self, i: usize) -> Value {
        Value::from(self.start + self.step * i as i64)
    }
}

impl Object for PyRange {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Seq
    }
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let i = key.as_usize()?;
        (i < self.len()).then(|| self.get(i))
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Seq(self.len())
    }
}

/// A method looked up without calling it (`x.items`), as jinja2 returns it.
#[derive(Debug)]
pub struct BoundMethod {
    pub receiver: Value,
    pub name: String,
}

impl Object for BoundMethod {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }
    fn is_true(self: &Arc<Self>) -> bool {
        true
    }
    fn call(self: &Arc<Self>, state: &State<'_, '_>, args: &[Value]) -> Result<Value, Error> {
        super::methods::call_method(state, &self.receiver, &self.name, args)
    }
}

/// The items of `v` as Python's `iter(v)` yields them (a dict yields its keys).
pub fn py_iter(v: &Value) -> Result<Vec<Value>, Error> {
    match kind(v) {
        Kind::Undefined => Ok(Vec::new()),
        Kind::Str => Ok(v
            .as_str()
            .unwrap_or_default()
            .chars()
            .map(Value::from)
            .collect()),
        Kind::Dict => Ok(v
            .downcast_object_ref::<Dict>()
            .expect("dict")
            .keys()
            .cloned()
            .collect()),
        Kind::View => Ok(v.downcast_object_ref::<PyView>().expect("view").items()),
        Kind::Iter => Ok(v.downcast_object_ref::<PyIter>().expect("iter").take()),
        Kind::List | Kind::Tuple | Kind::Range => Ok(v.try_iter()?.collect()),
        _ => Err(err(format!("'{}' object is not iterable", type_name(v)))),
    }
}

/// Python's `len(v)` (an undefined value has length 0, as in jinja2).
pub fn py_len(v: &Value) -> Result<usize, Error> {
    match kind(v) {
        Kind::Undefined => Ok(0),
        Kind::Str => Ok(v.as_str().unwrap_or_default().chars().count()),
        Kind::Dict | Kind::List | Kind::Tuple | Kind::View | Kind::Range => {
            v.len().ok_or_else(|| err("object has no len()"))
        }
        _ => Err(err(format!(
            "object of type '{}' has no len()",
            type_name(v)
        ))),
    }
}

// ---- str() and repr() ----

/// Python's `repr()` of a float.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').expect("LowerExp has an exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exp: i32 = exp.parse().expect("exponent");
    let decpt = exp + 1;
    let mut out = String::new();
    if f.is_sign_negative() {
        out.push('-');
    }
    if !(-4 < decpt && decpt <= 16) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        let _ = write!(out, "e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    } else if decpt <= 0 {
        out.push_str("0.");
        out.push_str(&"0".repeat((-decpt) as usize));
        out.push_str(&digits);
    } else if decpt as usize >= digits.len() {
        out.push_str(&digits);
        out.push_str(&"0".repeat(decpt as usize - digits.len()));
        out.push_str(".0");
    } else {
        out.push_str(&digits[..decpt as usize]);
        out.push('.');
        out.push_str(&digits[decpt as usize..]);
    }
    out
}

fn unprintable(v: &Value) -> Error {
    err(format!(
        "cannot render a {} object: Python would print its memory address",
        type_name(v)
    ))
}

/// The deepest nesting of containers printed, serialized or accepted as context.
pub const MAX_DEPTH: usize = 200;

fn write_py(v: &Value, out: &mut String, repr: bool, depth: usize) -> Result<(), Error> {
    check_len(out.len())?;
    if depth > MAX_DEPTH {
        return Err(err(
            "maximum recursion depth exceeded while getting the repr of an object",
        ));
    }
    let seq = |items: Vec<Value>, out: &mut String| -> Result<(), Error> {
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            write_py(item, out, true, depth + 1)?;
        }
        Ok(())
    };
    match kind(v) {
        Kind::Undefined => {
            if repr {
                out.push_str("Undefined");
            }
        }
        Kind::None => out.push_str("None"),
        Kind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        Kind::Int => {
            let _ = write!(
                out,
                "{}",
                as_int(v).ok_or_else(|| err("integer out of range"))?
            );
        }
        Kind::Float => out.push_str(&float_repr(as_float(v).expect("float"))),
        Kind::Str => {
            let s = v.as_str().unwrap_or_default();
            if repr {
                if v.is_safe() {
                    out.push_str("Markup(");
                    unicode::repr_str(s, out);
                    out.push(')');
                } else {
                    unicode::repr_str(s, out);
                }
            } else {
                out.push_str(s);
            }
        }
        Kind::List => {
            out.push('[');
            seq(v.try_iter()?.collect(), out)?;
            out.push(']');
        }
        Kind::Tuple => {
            let items = &v.downcast_object_ref::<PyTuple>().expect("tuple").0;
            out.push('(');
            seq(items.clone(), out)?;
            if items.len() == 1 {
                out.push(',');
            }
            out.push(')');
        }
        Kind::Dict => {
            out.push('{');
            let d = v.downcast_object_ref::<Dict>().expect("dict");
            for (i, (k, val)) in d.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_py(k, out, true, depth + 1)?;
                out.push_str(": ");
                write_py(val, out, true, depth + 1)?;
            }
            out.push('}');
        }
        Kind::View => {
            let view = v.downcast_object_ref::<PyView>().expect("view");
            out.push_str(type_name(v));
            out.push_str("([");
            seq(view.items(), out)?;
            out.push_str("])");
        }
        Kind::Range => {
            let r = v.downcast_object_ref::<PyRange>().expect("range");
            if r.step == 1 {
                let _ = write!(out, "range({}, {})", r.start, r.stop);
            } else {
                let _ = write!(out, "range({}, {}, {})", r.start, r.stop, r.step);
            }
        }
        Kind::Other if super::globals::is_template_reference(v) => {
            out.push_str("<TemplateReference None>")
        }
        Kind::Iter | Kind::Method | Kind::Other => return Err(unprintable(v)),
    }
    Ok(())
}

/// [`py_str`], borrowing a string value's text instead of copying it.
pub fn py_str_ref(v: &Value) -> Result<std::borrow::Cow<'_, str>, Error> {
    match v.as_str() {
        Some(s) => Ok(std::borrow::Cow::Borrowed(s)),
        None => py_str(v).map(std::borrow::Cow::Owned),
    }
}

/// Python's `str(v)` (jinja2's `{{ v }}`; undefined prints as "").
pub fn py_str(v: &Value) -> Result<String, Error> {
    if let Some(s) = v.as_str() {
        return Ok(s.to_string());
    }
    let mut out = String::new();
    write_py(v, &mut out, false, 0)?;
    Ok(out)
}

/// Python's `repr(v)`.
pub fn py_repr(v: &Value) -> Result<String, Error> {
    let mut out = String::new();
    write_py(v, &mut out, true, 0)?;
    Ok(out)
}

// ---- JSON ----

/// A JSON value as the Python object `json.loads` makes of it.
pub fn from_json(j: &serde_json::Value) -> Value {
    match j {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(a) => new_list(a.iter().map(from_json).collect()),
        serde_json::Value::Object(o) => new_dict(
            o.iter()
                .map(|(k, v)| (Value::from(k.as_str()), from_json(v)))
                .collect(),
        ),
    }
}

/// The options of Python's `json.dumps` that transformers' `tojson` exposes.
pub struct JsonOptions {
    pub ensure_ascii: bool,
    pub indent: Option<String>,
    pub item_separator: String,
    pub key_separator: String,
    pub sort_keys: bool,
}

/// A `str` as Python's `json.dumps` writes it (`ascii`: `ensure_ascii=True`).
pub(crate) fn json_str(s: &str, ascii: bool, out: &mut String) {
    // Python's json.dumps escapes: `\\`, `"`, control characters, and with ensure_ascii
    // everything outside ' '..='~'. Plain stretches are copied whole.
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        let b = bytes[i];
        if b >= 0x20 && b != b'"' && b != b'\\' && (!ascii || b <= b'~') {
            i += 1;
            continue;
        }
        out.push_str(&s[start..i]);
        if b >= 0x7f {
            let c = s[i..].chars().next().expect("a char starts here");
            let mut buf = [0u16; 2];
            for unit in c.encode_utf16(&mut buf) {
                let _ = write!(out, "\\u{unit:04x}");
            }
            i += c.len_utf8();
        } else {
            match b {
                b'"' => out.push_str("\\\""),
                b'\\' => out.push_str("\\\\"),
                b'\n' => out.push_str("\\n"),
                b'\r' => out.push_str("\\r"),
                b'\t' => out.push_str("\\t"),
                0x08 => out.push_str("\\b"),
                0x0c => out.push_str("\\f"),
                _ => {
                    let _ = write!(out, "\\u{:04x}", b);
                }
            }
            i += 1;
        }
        start = i;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// A float as Python's `json.dumps` writes it (`NaN`, `Infinity`, else `repr`).
pub(crate) fn json_float(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        float_repr(f)
    }
}

fn not_serializable(v: &Value) -> Error {
    err(format!(
        "Object of type {} is not JSON serializable",
        type_name(v)
    ))
}

fn json_key(k: &Value) -> Result<String, Error> {
    Ok(match kind(k) {
        Kind::Str => k.as_str().unwrap_or_default().to_string(),
        Kind::Int => as_int(k).expect("int").to_string(),
        Kind::Float => json_float(as_float(k).expect("float")),
        Kind::Bool => if k.is_true() { "true" } else { "false" }.into(),
        Kind::None => "null".into(),
        _ => {
            return Err(err(format!(
                "keys must be str, int, float, bool or None, not {}",
                type_name(k)
            )))
        }
    })
}

fn write_json(v: &Value, o: &JsonOptions, level: usize, out: &mut String) -> Result<(), Error> {
    check_len(out.len())?;
    if level > MAX_DEPTH {
        return Err(err(
            "maximum recursion depth exceeded while encoding a JSON object",
        ));
    }
    let open = |out: &mut String, level: usize| {
        if let Some(indent) = &o.indent {
            out.push('\n');
            out.push_str(&indent.repeat(level + 1));
        }
    };
    let close = |out: &mut String, level: usize| {
        if let Some(indent) = &o.indent {
            out.push('\n');
            out.push_str(&indent.repeat(level));
        }
    };
    let separator = |out: &mut String, level: usize| {
        out.push_str(&o.item_separator);
        if let Some(indent) = &o.indent {
            out.push('\n');
            out.push_str(&indent.repeat(level + 1));
        }
    };
    match kind(v) {
        Kind::None => out.push_str("null"),
        Kind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        Kind::Int => out.push_str(
            &as_int(v)
                .ok_or_else(|| err("integer out of range"))?
                .to_string(),
        ),
        Kind::Float => out.push_str(&json_float(as_float(v).expect("float"))),
        Kind::Str => json_str(v.as_str().unwrap_or_default(), o.ensure_ascii, out),
        Kind::List | Kind::Tuple => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            open(out, level);
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    separator(out, level);
                }
                write_json(item, o, level + 1, out)?;
            }
            close(out, level);
            out.push(']');
        }
        Kind::Dict => {
            let d = v.downcast_object_ref::<Dict>().expect("dict");
            if d.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            let mut items: Vec<(&Value, &Value)> = d.iter().collect();
            if o.sort_keys {
                let mut failure = None;
                items.sort_by(|a, b| match super::ops::py_cmp(a.0, b.0) {
                    Ok(ord) => ord,
                    Err(e) => {
                        failure.get_or_insert(e);
                        std::cmp::Ordering::Equal
                    }
                });
                if let Some(e) = failure {
                    return Err(e);
                }
            }
            out.push('{');
            open(out, level);
            for (i, (k, val)) in items.into_iter().enumerate() {
                if i > 0 {
                    separator(out, level);
                }
                json_str(&json_key(k)?, o.ensure_ascii, out);
                out.push_str(&o.key_separator);
                write_json(val, o, level + 1, out)?;
            }
            close(out, level);
            out.push('}');
        }
        _ => return Err(not_serializable(v)),
    }
    Ok(())
}

/// Python's `json.dumps(v, ...)`.
pub fn to_json(v: &Value, o: &JsonOptions) -> Result<String, Error> {
    let mut out = String::new();
    write_json(v, o, 0, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-0.0, "-0.0"),
            (1.5e-7, "1.5e-07"),
            (1e100, "1e+100"),
            (2.5, "2.5"),
            (12345.678, "12345.678"),
        ];
        for (f, s) in cases {
            assert_eq!(float_repr(f), s, "{f}");
        }
    }
}
