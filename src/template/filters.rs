//! jinja2's filters (3.1) with Python semantics, and transformers' `tojson`.
//!
//! Filters that return generators in jinja2 (`select`, `map`, `items`, `reverse`, ...) return
//! a one-shot [`PyIter`](super::pyvalue::PyIter): iterable once, always true, without a length.

use std::cmp::Ordering;

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind};

use super::args::{bind, required, split_args};
use super::methods::{center, replace};
use super::ops::{escape_html, getattr, int_value, py_add, py_cmp, py_eq, py_getitem as getitem};
use super::predicates::call_test;
use super::pyvalue::{
    as_float, as_int, check_len, check_size, err, kind, new_iter, new_list, new_named_tuple,
    new_tuple, py_iter, py_len, py_str, py_str_ref, to_json, type_name, Dict, JsonOptions, Kind,
};
use super::unicode;

/// A filter: the filtered value and the filter's arguments.
pub type FilterFn = fn(&Value, &[Value]) -> Result<Value, Error>;

/// The filters chatids implements (jinja2's names).
pub const FILTER_NAMES: &[&str] = &[
    "abs",
    "attr",
    "batch",
    "capitalize",
    "center",
    "count",
    "d",
    "default",
    "dictsort",
    "e",
    "escape",
    "first",
    "float",
    "forceescape",
    "format",
    "groupby",
    "indent",
    "int",
    "items",
    "join",
    "last",
    "length",
    "list",
    "lower",
    "map",
    "max",
    "min",
    "reject",
    "rejectattr",
    "replace",
    "reverse",
    "round",
    "safe",
    "select",
    "selectattr",
    "slice",
    "sort",
    "string",
    "sum",
    "title",
    "tojson",
    "trim",
    "truncate",
    "unique",
    "upper",
    "wordcount",
];

/// jinja2 filters chatids refuses at compile time (random, locale- or HTML-specific).
pub const UNSUPPORTED_FILTERS: &[&str] = &[
    "filesizeformat",
    "pprint",
    "random",
    "striptags",
    "urlencode",
    "urlize",
    "wordwrap",
    "xmlattr",
];

/// Register every filter with MiniJinja.
pub fn register(env: &mut Environment<'static>) {
    for name in FILTER_NAMES {
        let f = lookup(name).expect("every listed filter exists");
        env.add_filter(*name, move |v: &Value, args: &[Value]| f(v, args));
    }
}

/// The filter called `name`.
pub fn lookup(name: &str) -> Option<FilterFn> {
    let f: FilterFn = match name {
        "abs" => abs,
        "attr" => attr,
        "batch" => batch,
        "capitalize" => |v, a| str_filter(v, a, "capitalize", unicode::capitalize),
        "center" => |v, a| {
            let b = bind("center", a, &["width"], true)?;
            let width = int_arg(&b[0], 80)?;
            check_size(width)?;
            keep_markup(v, center(&py_str(v)?, width, ' '))
        },
        "count" | "length" => |v, a| {
            bind("length", a, &[], true)?;
            Ok(Value::from(py_len(v)? as i64))
        },
        "d" | "default" => default,
        "dictsort" => dictsort,
        "e" | "escape" => |v, a| {
            bind("escape", a, &[], true)?;
            Ok(if v.is_safe() {
                v.clone()
            } else {
                Value::from_safe_string(escape_html(&py_str(v)?))
            })
        },
        "forceescape" => |v, a| {
            bind("forceescape", a, &[], true)?;
            Ok(Value::from_safe_string(escape_html(&py_str(v)?)))
        },
        "first" => |v, a| {
            bind("first", a, &[], true)?;
            if let Some(it) = v.downcast_object_ref::<super::pyvalue::PyIter>() {
                return Ok(it.pop_front().unwrap_or(Value::UNDEFINED)); // consumes one item only
            }
            Ok(py_iter(v)?.into_iter().next().unwrap_or(Value::UNDEFINED))
        },
        "last" => last,
        "float" => float,
        "format" => |v, a| {
            let (pos, kw) = split_args(a)?;
            if !pos.is_empty() && !kw.is_empty() {
                return Err(err(
                    "can't handle positional and keyword arguments at the same time",
                ));
            }
            let args = if kw.is_empty() {
                new_tuple(pos)
            } else {
                Value::from_object(
                    kw.into_iter()
                        .map(|(k, v)| (Value::from(k), v))
                        .collect::<Dict>(),
                )
            };
            let s = py_str(v)?;
            super::format::percent_format(&s, &args).map(Value::from)
        },
        "groupby" => groupby,
        "indent" => indent,
        "int" => int,
        "items" => |v, a| {
            bind("items", a, &[], true)?;
            match kind(v) {
                Kind::Undefined => Ok(new_iter(Vec::new())),
                Kind::Dict => Ok(new_iter(dict_items(v))),
                _ => Err(err("Can only get item pairs from a mapping.")),
            }
        },
        "join" => join,
        "list" => |v, a| {
            bind("list", a, &[], true)?;
            Ok(new_list(py_iter(v)?))
        },
        "lower" => |v, a| str_filter(v, a, "lower", unicode::lower),
        "upper" => |v, a| str_filter(v, a, "upper", unicode::upper),
        "map" => map,
        "max" => |v, a| min_max(v, a, Ordering::Greater),
        "min" => |v, a| min_max(v, a, Ordering::Less),
        "select" => |v, a| select_or_reject(v, a, false, true),
        "reject" => |v, a| select_or_reject(v, a, false, false),
        "selectattr" => |v, a| select_or_reject(v, a, true, true),
        "rejectattr" => |v, a| select_or_reject(v, a, true, false),
        "replace" => |v, a| {
            let b = bind("replace", a, &["old", "new", "count"], true)?;
            let old = py_str(&required(&b, 0, "replace", "old")?)?;
            let new = py_str(&required(&b, 1, "replace", "new")?)?;
            let count = match &b[2] {
                None => -1,
                Some(c) if c.is_none() => -1,
                Some(c) => as_int(c).ok_or_else(|| err("count must be an integer"))?,
            };
            Ok(Value::from(replace(&py_str(v)?, &old, &new, count)?))
        },
        "reverse" => reverse,
        "round" => round,
        "safe" => |v, a| {
            bind("safe", a, &[], true)?;
            Ok(Value::from_safe_string(py_str(v)?))
        },
        "slice" => slice,
        "sort" => sort,
        "string" => |v, a| {
            bind("string", a, &[], true)?;
            Ok(if kind(v) == Kind::Str {
                v.clone()
            } else {
                Value::from(py_str(v)?)
            })
        },
        "sum" => sum,
        "title" => |v, a| {
            bind("title", a, &[], true)?;
            Ok(Value::from(title(&py_str(v)?)))
        },
        "tojson" => tojson,
        "trim" => |v, a| {
            let b = bind("trim", a, &["chars"], true)?;
            let s = py_str_ref(v)?;
            let out = match &b[0] {
                Some(c) if !c.is_none() => {
                    let chars = c
                        .as_str()
                        .ok_or_else(|| err("strip arg must be None or str"))?;
                    s.trim_matches(|ch| chars.contains(ch))
                }
                _ => s.trim_matches(unicode::is_space),
            };
            // A string with nothing to trim is itself (no copy; `Markup` stays `Markup`).
            if out.len() == s.len() && v.as_str().is_some() {
                return Ok(v.clone());
            }
            keep_markup(v, out.to_string())
        },
        "truncate" => truncate,
        "unique" => unique,
        "wordcount" => |v, a| {
            bind("wordcount", a, &[], true)?;
            let s = py_str(v)?;
            let words = s
                .split(|c: char| !(unicode::is_alnum(c) || c == '_'))
                .filter(|w| !w.is_empty())
                .count();
            Ok(Value::from(words as i64))
        },
        _ => return None,
    };
    Some(f)
}

/// Run filter `name` (for `map`).
fn call_filter(name: &Value, v: &Value, args: &[Value]) -> Result<Value, Error> {
    let n = name
        .as_str()
        .ok_or_else(|| err("filter names must be strings"))?;
    let f = lookup(n).ok_or_else(|| err(format!("No filter named '{n}'.")))?;
    f(v, args)
}

/// A string result that stays `Markup` when the input was (jinja2 calls `Markup`'s methods).
fn keep_markup(input: &Value, out: String) -> Result<Value, Error> {
    Ok(if input.is_safe() {
        Value::from_safe_string(out)
    } else {
        Value::from(out)
    })
}

fn str_filter(v: &Value, a: &[Value], name: &str, f: fn(&str) -> String) -> Result<Value, Error> {
    bind(name, a, &[], true)?;
    keep_markup(v, f(&py_str(v)?))
}

fn int_arg(v: &Option<Value>, default: i128) -> Result<i128, Error> {
    match v {
        None => Ok(default),
        Some(v) => as_int(v).ok_or_else(|| {
            err(format!(
                "'{}' object cannot be interpreted as an integer",
                type_name(v)
            ))
        }),
    }
}

fn flag(v: &Option<Value>) -> bool {
    v.as_ref().is_some_and(Value::is_true)
}

fn dict_items(v: &Value) -> Vec<Value> {
    let d = v.downcast_object_ref::<Dict>().expect("a dict");
    d.iter()
        .map(|(k, x)| new_tuple(vec![k.clone(), x.clone()]))
        .collect()
}

/// jinja2's `_prepare_attribute_parts`: `"a.0.b"` -> `["a", 0, "b"]`.
fn attribute_parts(attr: &Value) -> Vec<Value> {
    match attr.as_str() {
        Some(s) => s
            .split('.')
            .map(|p| {
                if !p.is_empty() && p.chars().all(unicode::is_digit) && p.is_ascii() {
                    p.parse::<i64>()
                        .map(Value::from)
                        .unwrap_or_else(|_| Value::from(p))
                } else {
                    Value::from(p)
                }
            })
            .collect(),
        None if attr.is_none() => Vec::new(),
        None => vec![attr.clone()],
    }
}

fn lookup_parts(item: &Value, parts: &[Value], default: Option<&Value>) -> Result<Value, Error> {
    let mut item = item.clone();
    for part in parts {
        item = getitem(&item, part)?;
        if let Some(d) = default {
            if item.is_undefined() {
                item = d.clone();
            }
        }
    }
    Ok(item)
}

fn ignore_case(v: Value) -> Value {
    match v.as_str() {
        Some(s) => Value::from(unicode::lower(s)),
        None => v,
    }
}

fn abs(v: &Value, a: &[Value]) -> Result<Value, Error> {
    bind("abs", a, &[], true)?;
    match kind(v) {
        Kind::Int | Kind::Bool => Ok(int_value(as_int(v).expect("int").abs())),
        Kind::Float => Ok(Value::from(as_float(v).expect("float").abs())),
        Kind::Undefined => Err(Error::from(ErrorKind::UndefinedError)),
        _ => Err(err(format!(
            "bad operand type for abs(): '{}'",
            type_name(v)
        ))),
    }
}

fn attr(v: &Value, a: &[Value]) -> Result<Value, Error> {
    let b = bind("attr", a, &["name"], true)?;
    let name = required(&b, 0, "attr", "name")?;
    let name = name
        .as_str()
        .ok_or_else(|| err("attribute name must be string"))?;
    match kind(v) {
        Kind::Undefined => Err(Error::from(ErrorKind::UndefinedError)),
        Kind::Other => v.get_attr(name),
        Kind::Str | Kind::Dict | Kind::List | Kind::Tuple => {
            // Only Python attributes (methods), never items.
            let found = getattr(v, name)?;
            Ok(if found.as_object().is_some() || name.starts_with("__") {
                found
            } else {
                Value::UNDEFINED
            })
        }
        _ => Ok(Value::UNDEFINED),
    }
}

fn batch(v: &Value, a: &[Value]) -> Result<Value, Error> {
    let b = bind("batch", a, &["linecount", "fill_with"], true)?;
    let n = int_arg(&b[0], i128::MIN)?;
    if n == i128::MIN {
        return Err(err(
            "do_batch() missing 1 required positional argument: 'linecount'",
        ));
    }
    let fill = b[1].clone().filter(|f| !f.is_none());
    let mut out = Vec::new();
    let mut tmp: Vec<Value> = Vec::new();
    for item in py_iter(v)? {
        if tmp.len() as i128 == n {
            out.push(new_list(std::mem::take(&mut tmp)));
        }
        tmp.push(item);
    }
    if !tmp.is_empty() {
        if let Some(f) = fill {
            while (tmp.len() as i128) < n {
                tmp.push(f.clone());
            }
        }
        out.push(new_list(tmp));
    }
    Ok(new_iter(out))
}

fn default(v: &Value, a: &[Value]) -> Result<Value, Error> {
    let b = bind("default", a, &["default_value", "boolean"], true)?;
    if v.is_undefined() || (flag(&b[1]) && !v.is_true()) {
        Ok(b[0].clone().unwrap_or(Value::from("")))
    } else {
        Ok(v.clone())
    }
}

fn sort_values(items: &mut [(Value, Value)], reverse: bool) -> Result<(), Error> {
    let mut failure = None;
    items.sort_by(|x, y| {
        let ord = py_cmp(&x.0, &y.0).unwrap_or_else(|e| {
            failure.get_or_insert(e);
            Ordering::Equal
        });
        if reverse {
            ord.reverse()
        } else {
            ord
        }
    });
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn dictsort(v: &Value, a: &[Value]) -> Result<Value, Error> {
    let b = bind("dictsort", a, &["case_sensitive", "by", "reverse"], true)?;
    let pos = match b[1].as_ref().map(|x| x.as_str().map(str::to_string)) {
        None => 0,
        Some(Some(s)) if s == "key" => 0,
        Some(Some(s)) if s == "value" => 1,
        _ => return Err(err("You can only sort by either \"key\" or \"value\"")),
    };
    if kind(v) != Kind::Dict {
        return Err(err(format!(
            "'{}' object has no attribute 'items'",
            type_name(v)
        )));
    }
    let mut items: Vec<(Value, Value)> = dict_items(v)
        .into_iter()
        .map(|t| {
            let key = t.get_item(&Value::from(pos)).unwrap_or_default();
            (if flag(&b[0]) { key } else { ignore_case(key) }, t)
        })
        .collect();
    sort_values(&mut items, flag(&b[2]))?;
    Ok(new_list(items.into_iter().map(|x| x.1).collect()))
}

fn last(v: &Value, a: &[Value]) -> Result<Value, Error> {
    bind("last", a, &[], true)?;
    match kind(v) {
        Kind::Iter => Err(err("'generator' object is not reversible")),
        _ => Ok(py_iter(v)?.pop().unwrap_or(Value::UNDEFINED)),
    }
}

/// Python's `float(s)` of a string.
fn parse_float(s: &str) -> Option<f64> {
    let t = s.trim_matches(unicode::is_space);
    let b = t.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if c == b'_'
            && !(i > 0 && b[i - 1].is_ascii_digit() && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            return None;
        }
    }
    let cleaned: String = t.chars().filter(|&c| c != '_').collect();
    if !cleaned.is_ascii() || cleaned.is_empty() {
        return None;
    }
    let lower = cleaned.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if body.starts_with("inf") || body.starts_with("nan") {
        if !matches!(body, "inf" | "infinity" | "nan") {
            return None;
        }
    } else if !body
        .bytes()
        .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'+' | b'-'))
    {
        return None;
    }
    cleaned.parse::<f64>().ok()
}

/// Python's `int(s, base)` of a string.
fn parse_int(s: &str, base: u32) -> Option<i128> {
    let t = s.trim_matches(unicode::is_space);
    let (neg, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let lower = body.to_ascii_lowercase();
    let (base, digits) = match (base, lower.get(..2)) {
        (16 | 0, Some("0x")) => (16, &body[2..]),
        (8 | 0, Some("0o")) => (8, &body[2..]),
        (2 | 0, Some("0b")) => (2, &body[2..]),
        (0, _) => {
            if body.len() > 1
                && body.starts_with('0')
                && body.bytes().any(|c| c != b'0' && c != b'_')
            {
                return None;
            }
            (10, body)
        }
        (b, _) => (b, body),
    };
    let digits = digits
        .strip_prefix('_')
        .filter(|_| digits.len() != body.len())
        .unwrap_or(digits);
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
    {
        return None;
    }
    let cleaned: String = digits.chars().filter(|&c| c != '_').collect();
    if !cleaned.is_ascii() {
        return None;
    }
    let v = i128::from_str_radix(&cleaned, base).ok()?;
    Some(if neg { -v } else { v })
}

fn float(v: &Value, a: &[Value]) -> Result<Value, Error> {
    let b = bind("float", a, &["default"], true)?;
    let default = b[0].clone().unwrap_or(Value::from(0.0));
    Ok(match kind(v) {
        Kind::Float | Kind::Int | Kind::Bool => Value::from(as_float(v).expect("number")),
        Kind::Str => parse_float(v.as_str().unwrap_or_default())
            .map(Value::from)
            .unwrap_or(default),
        // Undefined.__float__ raises UndefinedError, which float() does not catch.
        Kind::Undefined => return Err(Error::from(ErrorKind::UndefinedError)),
        _ => default,
    })
}

fn int(v: &Value, a: &[Value]) -> Result<Value, Error> {
    let b = bind("int", a, &["default", "base"], true)?;
    let default = b[0].clone().unwrap_or(Value::from(0));
    let base = int_arg(&b[1], 10)?;
    let from_float = |f: f64| -> Result<Value, Error> {
        if f.is_nan() {
            Ok(default.clone())
        } else if f.is_infinite() {
            Err(err(
                "OverflowError: cannot convert float infinity to integer",
            ))
        } else {
            Ok(int_value(f.trunc() as i128))
        }
    };
    match kind(v) {
        Kind::Int | Kind::Bool => Ok(int_value(as_int(v).expect("int"))),
        Kind::Float => from_float(as_float(v).expect("float")),
        Kind::Str => {
            let s = v.as_str().unwrap_or_default();
            if !(base == 0 || (2..=36).contains(&base)) {
                return Err(err("int() base must be >= 2 and <= 36, or 0"));
            }
            match parse_int(s, base as u32) {
                Some(i) => Ok(int_value(i)),
                None => match parse_float(s) {
                    Some(f) if f.is_infinite() => Ok(default),
                    Some(f) => from_float(f),
                    None => Ok(default),
                },
            }
        }
        Kind::Undefined => Err(Error::from(ErrorKind::UndefinedError)),
        _ => Ok(default),
    }
}

/// jinja2 3.1's `groupby`: sorted by the attribute, as `(grouper, list)` named tuples.
fn groupby(v: &Value, a: &[Value]) -> Result<Value, Error> {
    let b = bind(
        "groupby",
        a,
        &["attribute", "default", "case_sensitive"],
        true,
    )?;
    let parts = attribute_parts(&required(&b, 0, "groupby", "attribute")?);
    let default = b[1].clone().filter(|d| !d.is_none());
    let case_sensitive = flag(&b[2]);
    let mut keyed = Vec::new();
    for item in py_iter(v)? {
        let key = lookup_parts(&item, &parts, default.as_ref())?;
        keyed.push((
            if case_sensitive {
                key
            } else {
                ignore_case(key)
            },
            item,
        ));
    }
    sort_values(&mut keyed, false)?;
    let mut groups: Vec<(Value, Vec<Value>)> = Vec::new();
    for (key, item) in keyed {
        match groups.last_mut() {
            Some((k, items)) if py_eq(k, &key) => items.push(item),
            _ => groups.push((key, vec![item])),
        }
    }
    let mut out = Vec::with_capacity(groups.len());
    for (key, items) in groups {
        let grouper = if case_sensitive {
            key
        } else {
            lookup_parts(&items[0], &parts, default.as_ref())?
        };
        out.push(new_named_tuple(
            vec![grouper, new_list(items)],
            &["grouper", "list"],
        ));
    }
    Ok(new_list(out))
}

fn indent(v: &Value, a: &[Value]) -> Result<Value, Error> {
    let b = bind("indent", a, &["width", "first", "blank"], true)?;
    let indention = match &b[0] {
        None => "    ".to_string(),
        Some(w) if kind(w) == Kind::Str => w.as_str().unwrap_or_default().to_string(),
        Some(w) => " ".repeat(check_size(
            as_int(w).ok_or_else(|| err("can't multiply sequence by non-int"))?,
        )?),
    };
    let s = match kind(v) {
        Kind::Str => v.as_str().unwrap_or_default().to_string(),
        Kind::Undefined => return Err(Error::from(ErrorKind::UndefinedError)),
        _ => {
            return Err(err(format!(
                "unsupported operand type(s) for +=: '{}' and 'str'",
                type_name(v)
            )))
        }
    };
    let s = format!("{s}\n");
    let lines = unicode::splitlines(&s, false);
    check_len(s.len() + lines.len() * (indention.len() + 1))?;
    let mut rv = if flag(&b[2]) {
        lines.join(&format!("\n{indention}"))
    } else {
        let mut rv = lines[0].to_string();
        if lines.len() > 1 {
            rv.push('\n');
            let rest: Vec<String> = lines[1..]
                .iter()
                .map(|l| {
                    if l.is_empty() {
                        String::new()
                    } else {
                        format!("{indention}{l}")
                    }
                })
                .collect();
            rv.push_str(&rest.join("\n"));
        }
        rv
    };
    if flag(&b[1]) {
        rv = format!("{indention}{rv}");
    }
    keep_markup(v, rv)
}

fn join(v: &Value, a: &[Value]) -> Result<Value, Error> {
    let b = bind("join", a, &["d", "attribute"], true)?;
    let sep = match &b[0] {
        Some(d) => py_str(d)?,
        None => String::new(),
    };
    let mut items = py_iter(v)?;
    if let Some(attr) = b[1].as_ref().filter(|x| !x.is_none()) {
        let parts = attribute_parts(attr);
        items = items
            .iter()
            .map(|i| lookup_parts(i, &parts, None))
            .collect::<Result<_, _>>()?;
    }
    let strs: Vec<String> = items.iter().map(py_str).collect::<Result<_, _>>()?;
    check_len(strs.iter().map(String::len).sum::<usize>() + sep.len() * strs.len())?;
    Ok(Value::from(strs.join(&sep)))
}

fn map(v: &Value, a: &[Value]) -> Result<Value, Error> {
    let (pos, mut kw) = split_args(a)?;
    if !v.is_true() {
        return Ok(new_iter(Vec::new()));
    }
    let items = py_iter(v)?;
    let mut out = Vec::with_capacity(items.len());
    if pos.is_empty() && kw.iter().any(|(k, _)| k == "attribute") {
        let take = |kw: &mut Vec<(String, Value)>, name: &str| {
            kw.iter()
                .position(|(k, _)| k == name)
                .map(|i| kw.remove(i).1)
        };
        let attribute = take(&mut kw, "attribute").expect("present");
        let default = take(&mut kw, "default").filter(|d| !d.is_none());
        if let Some((k, _)) = kw.first() {
            return Err(err(format!("Unexpected keyword argument '{k}'")));
        }
        let parts = attribute_parts(&attribute);
        for item in &items {
            out.push(lookup_parts(item, &parts, default.as_ref())?);
        }
    } else {
        let name = pos
            .first()
            .cloned()
            .ok_or_else(|| err("map requires a filter argument"))?;
        let mut args = pos[1..].to_vec();
        if !kw.is_empty() {
            args.push(Value::from(Kwargs::from_iter(kw)));
        }
        for item in &items {
            out.push(call_filter(&name, item, &args)?);
        }
    }
    Ok(new_iter(out))
}

fn min_max(v: &Value, a: &[Value], want: Ordering) -> Result<Value, Error> {
    let b = bind(
        if want == Ordering::Less { "min" } else { "max" },
        a,
        &["case_sensitive", "attribute"],
        true,
    )?;
    let items = py_iter(v)?;
    let parts = b[1].as_ref().map(attribute_parts).unwrap_or_default();
    let mut best: Option<(Value, Value)> = None;
    for item in items {
        let mut key = lookup_parts(&item, &parts, None)?;
        if !flag(&b[0]) {
            key = ignore_case(key);
        }
        best = match best {
            None => Some((key, item)),
            Some((bk, bi)) => {
                if py_cmp(&key, &bk)? == want {
                    Some((key, item))
                } else {
                    Some((bk, bi))
                }
            }
        };
    }
    Ok(best.map(|x| x.1).unwrap_or(Value::UNDEFINED))
}

fn select_or_reject(
    v: &Value,
    a: &[Value],
    lookup_attr: bool,
    select: bool,
) -> Result<Value, Error> {
    let (pos, kw) = split_args(a)?;
    if !v.is_true() {
        return Ok(new_iter(Vec::new()));
    }
    let items = py_iter(v)?;
    let (parts, off) = if lookup_attr {
        let attr = pos
            .first()
            .ok_or_else(|| err("Missing parameter for attribute name"))?;
        (Some(attribute_parts(attr)), 1)
    } else {
        (None, 0)
    };
    let test = pos.get(off).cloned();
    let mut args = pos
        .get(off + 1..)
        .map(<[Value]>::to_vec)
        .unwrap_or_default();
    if !kw.is_empty() {
        args.push(Value::from(Kwargs::from_iter(kw)));
    }
    let mut out = Vec::new();
    for item in items {
        let x = match &parts {
            Some(p) => lookup_parts(&item, p, None)?,
            None => item.clone(),
        };
        let hit = match &test {
            Some(name) => call_test(name, &x, &args)?,
            None => x.is_true(),
        };
        if hit == select {
            out.push(item);
        }
    }
    Ok(new_iter(out))
}

fn reverse(v: &Value, a: &[Value]) -> Result<Value, Error> {
    bind("reverse", a, &[], true)?;
    match kind(v) {
        Kind::Str => keep_markup(v, v.as_str().unwrap_or_default().chars().rev().collect()),
        Kind::Iter => {
            let mut items = py_iter(v)?;
            items.reverse();
            Ok(new_list(items))
        }
        Kind::Undefined | Kind::List | Kind::Tuple | Kind::Dict | Kind::View | Kind::Range => {
            let mut items = py_iter(v)?;
            items.reverse();
            Ok(new_iter(items))
        }
        _ => Err(err(format!(
            "argument to reversed() must be a sequence, not {}",
            type_name(v)
        ))),
    }
}

/// Python's `round(x, ndigits)` of a float (round half to even on the exact value).
fn round_float(x: f64, ndigits: i128) -> Result<f64, Error> {
    if !x.is_finite() || ndigits > 300 {
        return Ok(x);
    }
    if ndigits < 0 {
        return Err(err("round() with a negative precision is not supported"));
    }
    let s = format!("{:.*}", ndigits as usize, x);
    Ok(s.parse::<f64>().expect("formatted float"))
}

fn round(v: &Value, a: &[Value]) -> Result<Value, Error> {
    let b = bind("round", a, &["precision", "method"], true)?;
    let precision = int_arg(&b[0], 0)?;
    let method = match &b[1] {
        None => "common".to_string(),
        Some(m) => m.as_str().unwrap_or_default().to_string(),
    };
    if !matches!(method.as_str(), "common" | "ceil" | "floor") {
        return Err(err("method must be common, ceil or floor"));
    }
    let k = kind(v);
    if !matches!(k, Kind::Int | Kind::Bool | Kind::Float) {
        return Err(err(format!(
            "type {} doesn't define __round__ method",
            type_name(v)
        )));
    }
    if method == "common" {
        return match k {
            Kind::Float => Ok(Value::from(round_float(
                as_float(v).expect("float"),
                precision,
            )?)),
            _ if precision >= 0 => Ok(int_value(as_int(v).expect("int"))),
            _ => Err(err("round() with a negative precision is not supported")),
        };
    }
    if precision < 0 {
        return Err(err("round() with a negative precision is not supported"));
    }
    let scale = 10f64.powi(precision as i32);
    let x = as_float(v).expect("number") * scale;
    let r = if method == "ceil" {
        x.ceil()
    } else {
        x.floor()
    };
    Ok(Value::from(r / scale))
}

fn slice(v: &Value, a: &[Value]) -> Result<Value, Error> {
    let b = bind("slice", a, &["slices", "fill_with"], true)?;
    let slices = int_arg(&b[0], 0)?;
    check_size(slices)?;
    if slices <= 0 {
        return Err(err("slice() needs a positive number of slices"));
    }
    let fill = b[1].clone().filter(|f| !f.is_none());
    let seq = py_iter(v)?;
    let len = seq.len() as i128;
    let per = len / slices;
    let extra = len % slices;
    let mut offset = 0;
    let mut out = Vec::new();
    for n in 0..slices {
        let start = offset + n * per;
        if n < extra {
            offset += 1;
        }
        let end = offset + (n + 1) * per;
        let mut tmp: Vec<Value> = seq[start as usize..end as usize].to_vec();
        if let Some(f) = &fill {
            if n >= extra {
                tmp.push(f.clone());
            }
        }
        out.push(new_list(tmp));
    }
    Ok(new_iter(out))
}

fn sort(v: &Value, a: &[Value]) -> Result<Value, Error> {
    let b = bind("sort", a, &["reverse", "case_sensitive", "attribute"], true)?;
    let attrs: Vec<Vec<Value>> = match b[2].as_ref().filter(|x| !x.is_none()) {
        None => vec![Vec::new()],
        Some(x) => match x.as_str() {
            Some(s) => s
                .split(',')
                .map(|p| attribute_parts(&Value::from(p)))
                .collect(),
            None => vec![vec![x.clone()]],
        },
    };
    let mut keyed = Vec::new();
    for item in py_iter(v)? {
        let mut key = Vec::new();
        for parts in &attrs {
            let k = lookup_parts(&item, parts, None)?;
            key.push(if flag(&b[1]) { k } else { ignore_case(k) });
        }
        keyed.push((new_list(key), item));
    }
    sort_values(&mut keyed, flag(&b[0]))?;
    Ok(new_list(keyed.into_iter().map(|x| x.1).collect()))
}

fn sum(v: &Value, a: &[Value]) -> Result<Value, Error> {
    let b = bind("sum", a, &["attribute", "start"], true)?;
    let mut total = b[1].clone().unwrap_or(Value::from(0));
    if kind(&total) == Kind::Str {
        return Err(err("sum() can't sum strings [use ''.join(seq) instead]"));
    }
    let parts = b[0].as_ref().map(attribute_parts).unwrap_or_default();
    for item in py_iter(v)? {
        let x = lookup_parts(&item, &parts, None)?;
        total = py_add(&total, &x)?;
    }
    Ok(total)
}

/// jinja2's `title` filter: uppercase the first character of each word, lowercase the rest.
fn title(s: &str) -> String {
    let is_sep = |c: char| c == '-' || unicode::is_space(c) || matches!(c, '(' | '{' | '[' | '<');
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        let sep = is_sep(c);
        let mut item = String::new();
        while let Some(&d) = chars.peek() {
            if is_sep(d) != sep {
                break;
            }
            item.push(d);
            chars.next();
        }
        let mut it = item.chars();
        let first = it.next().expect("non-empty").to_string();
        out.push_str(&unicode::upper(&first));
        out.push_str(&unicode::lower(it.as_str()));
    }
    out
}

fn tojson(v: &Value, a: &[Value]) -> Result<Value, Error> {
    let b = bind(
        "tojson",
        a,
        &["ensure_ascii", "indent", "separators", "sort_keys"],
        true,
    )?;
    let indent = match b[1].as_ref().filter(|x| !x.is_none()) {
        None => None,
        Some(i) if kind(i) == Kind::Str => Some(i.as_str().unwrap_or_default().to_string()),
        Some(i) => Some(" ".repeat(check_size(
            as_int(i).ok_or_else(|| err("indent must be an int or a str"))?,
        )?)),
    };
    let (item_separator, key_separator) = match b[2].as_ref().filter(|x| !x.is_none()) {
        None if indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
        Some(seps) => {
            let parts = py_iter(seps)?;
            match parts.as_slice() {
                [x, y] if x.as_str().is_some() && y.as_str().is_some() => (
                    x.as_str().expect("str").to_string(),
                    y.as_str().expect("str").to_string(),
                ),
                _ => return Err(err("separators must be a pair of strings")),
            }
        }
    };
    let options = JsonOptions {
        ensure_ascii: flag(&b[0]),
        indent,
        item_separator,
        key_separator,
        sort_keys: flag(&b[3]),
    };
    // The memo's key for these options: the flags and the indent width, with the
    // separators json.dumps picks by default (anything else is written every time).
    let default_separators = options.key_separator == ": "
        && options.item_separator == if options.indent.is_some() { "," } else { ", " };
    let indent_key = match &options.indent {
        None => Some(0),
        Some(i) if i.len() < 1 << 20 && i.bytes().all(|b| b == b' ') => Some(i.len() as u64 + 1),
        Some(_) => None,
    };
    match indent_key.filter(|_| default_separators) {
        Some(indent) => {
            let key = indent << 2 | (options.ensure_ascii as u64) << 1 | options.sort_keys as u64;
            super::data::memoized_json(v, key, || to_json(v, &options))
        }
        None => to_json(v, &options).map(Value::from),
    }
}

fn truncate(v: &Value, a: &[Value]) -> Result<Value, Error> {
    let b = bind(
        "truncate",
        a,
        &["length", "killwords", "end", "leeway"],
        true,
    )?;
    let length = int_arg(&b[0], 255)?;
    let end = match &b[2] {
        Some(e) => e
            .as_str()
            .ok_or_else(|| err("end must be a string"))?
            .to_string(),
        None => "...".to_string(),
    };
    let leeway = match &b[3] {
        Some(l) if !l.is_none() => as_int(l).ok_or_else(|| err("leeway must be an int"))?,
        _ => 5,
    };
    let end_len = end.chars().count() as i128;
    if length < end_len {
        return Err(err(format!("expected length >= {end_len}, got {length}")));
    }
    if leeway < 0 {
        return Err(err(format!("expected leeway >= 0, got {leeway}")));
    }
    if py_len(v)? as i128 <= length + leeway {
        return Ok(v.clone());
    }
    let s = match kind(v) {
        Kind::Str => v.as_str().unwrap_or_default(),
        _ => {
            return Err(err(format!(
                "'{}' object has no attribute 'rsplit'",
                type_name(v)
            )))
        }
    };
    let chars: Vec<char> = s.chars().collect();
    let head: String = chars[..(length - end_len) as usize].iter().collect();
    let out = if flag(&b[1]) {
        format!("{head}{end}")
    } else {
        let cut = head.rsplit_once(' ').map_or(head.as_str(), |(h, _)| h);
        format!("{cut}{end}")
    };
    keep_markup(v, out)
}

fn unique(v: &Value, a: &[Value]) -> Result<Value, Error> {
    let b = bind("unique", a, &["case_sensitive", "attribute"], true)?;
    let parts = b[1].as_ref().map(attribute_parts).unwrap_or_default();
    let mut seen: Vec<Value> = Vec::new();
    let mut out = Vec::new();
    for item in py_iter(v)? {
        let mut key = lookup_parts(&item, &parts, None)?;
        if !flag(&b[0]) {
            key = ignore_case(key);
        }
        if matches!(kind(&key), Kind::List | Kind::Dict) {
            return Err(err(format!("unhashable type: '{}'", type_name(&key))));
        }
        if !seen.iter().any(|s| py_eq(s, &key)) {
            seen.push(key);
            out.push(item);
        }
    }
    Ok(new_iter(out))
}
