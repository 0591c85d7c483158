//! Python methods of `str`, `dict`, `list` and `tuple`, as jinja2's immutable sandbox
//! allows them: mutating methods raise a `SecurityError`.

use minijinja::value::Value;
use minijinja::{Error, ErrorKind, State};

use super::args::{bind, split_args};
use super::format::str_format;
use super::ops::{escape_html, py_eq};
use super::pyvalue::{
    as_int, check_len, check_size, err, kind, new_dict, new_list, new_tuple, py_iter, type_name,
    Dict, Kind, PyView, ViewKind,
};
use super::unicode;

const STR_METHODS: &[&str] = &[
    "capitalize",
    "casefold",
    "center",
    "count",
    "encode",
    "endswith",
    "expandtabs",
    "find",
    "format",
    "format_map",
    "index",
    "isalnum",
    "isalpha",
    "isascii",
    "isdecimal",
    "isdigit",
    "isidentifier",
    "islower",
    "isnumeric",
    "isprintable",
    "isspace",
    "istitle",
    "isupper",
    "join",
    "ljust",
    "lower",
    "lstrip",
    "maketrans",
    "partition",
    "removeprefix",
    "removesuffix",
    "replace",
    "rfind",
    "rindex",
    "rjust",
    "rpartition",
    "rsplit",
    "rstrip",
    "split",
    "splitlines",
    "startswith",
    "strip",
    "swapcase",
    "title",
    "translate",
    "upper",
    "zfill",
];
const DICT_METHODS: &[&str] = &[
    "clear",
    "copy",
    "fromkeys",
    "get",
    "items",
    "keys",
    "pop",
    "popitem",
    "setdefault",
    "update",
    "values",
];
const LIST_METHODS: &[&str] = &[
    "append", "clear", "copy", "count", "extend", "index", "insert", "pop", "remove", "reverse",
    "sort",
];
const TUPLE_METHODS: &[&str] = &["count", "index"];
const DICT_UNSAFE: &[&str] = &["clear", "pop", "popitem", "setdefault", "update"];
const LIST_UNSAFE: &[&str] = &[
    "append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort",
];

/// Whether `name` is a method of `str`, `dict`, `list` or `tuple`.
pub fn is_method_name(name: &str) -> bool {
    STR_METHODS.contains(&name) || DICT_METHODS.contains(&name) || LIST_METHODS.contains(&name)
}

/// Whether Python's type for `k` has a method `name`.
pub fn type_has_method(k: Kind, name: &str) -> bool {
    match k {
        Kind::Str => STR_METHODS.contains(&name),
        Kind::Dict => DICT_METHODS.contains(&name),
        Kind::List => LIST_METHODS.contains(&name),
        Kind::Tuple => TUPLE_METHODS.contains(&name),
        _ => false,
    }
}

/// Whether the sandbox refuses method `name` of type `k` (it would modify the value).
pub fn is_unsafe_method(k: Kind, name: &str) -> bool {
    match k {
        Kind::Dict => DICT_UNSAFE.contains(&name),
        Kind::List => LIST_UNSAFE.contains(&name),
        _ => false,
    }
}

/// MiniJinja's unknown-method callback: Python's methods of the JSON types.
pub fn unknown_method(
    state: &State,
    value: &Value,
    name: &str,
    args: &[Value],
) -> Result<Value, Error> {
    call_method(state, value, name, args)
}

/// Call method `name` of `value`.
pub fn call_method(
    _state: &State,
    value: &Value,
    name: &str,
    args: &[Value],
) -> Result<Value, Error> {
    let k = kind(value);
    if k == Kind::Undefined {
        return Err(Error::from(ErrorKind::UndefinedError));
    }
    if is_unsafe_method(k, name) {
        return Err(err(format!(
            "SecurityError: access to attribute '{name}' of '{}' object is unsafe.",
            type_name(value)
        )));
    }
    if !type_has_method(k, name) {
        return Err(Error::from(ErrorKind::UnknownMethod));
    }
    match k {
        Kind::Str => str_method(value, name, args),
        Kind::Dict => dict_method(value, name, args),
        _ => seq_method(value, name, args),
    }
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn want_str<'a>(v: &'a Value, what: &str) -> Result<&'a str, Error> {
    v.as_str()
        .ok_or_else(|| err(format!("{what} must be str, not {}", type_name(v))))
}

fn opt_str<'a>(v: &'a Option<Value>, what: &str) -> Result<Option<&'a str>, Error> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => want_str(v, what).map(Some),
    }
}

fn opt_int(v: &Option<Value>, default: i128) -> Result<i128, Error> {
    match v {
        None => Ok(default),
        Some(v) if v.is_none() => Ok(default),
        Some(v) => as_int(v).ok_or_else(|| {
            err(format!(
                "'{}' object cannot be interpreted as an integer",
                type_name(v)
            ))
        }),
    }
}

/// Python's `ADJUST_INDICES` for `start`/`end` arguments over `len` characters.
fn adjust(start: &Option<Value>, end: &Option<Value>, len: usize) -> Result<(i128, i128), Error> {
    let len = len as i128;
    let mut s = opt_int(start, 0)?;
    let mut e = opt_int(end, len)?;
    if e > len {
        e = len;
    } else if e < 0 {
        e = (e + len).max(0);
    }
    if s < 0 {
        s = (s + len).max(0);
    }
    Ok((s, e))
}

fn strip<'s>(s: &'s str, chars: Option<&str>, left: bool, right: bool) -> &'s str {
    let pred = |c: char| match chars {
        None => unicode::is_space(c),
        Some(set) => set.contains(c),
    };
    let mut t = s;
    if left {
        t = t.trim_start_matches(pred);
    }
    if right {
        t = t.trim_end_matches(pred);
    }
    t
}

/// Python's `str.split(sep, maxsplit)`.
pub fn split(s: &str, sep: Option<&str>, maxsplit: i128) -> Result<Vec<String>, Error> {
    match sep {
        Some("") => Err(err("empty separator")),
        Some(sep) => Ok(if maxsplit < 0 {
            s.split(sep).map(str::to_string).collect()
        } else {
            s.splitn(maxsplit.min(usize::MAX as i128 - 1) as usize + 1, sep)
                .map(str::to_string)
                .collect()
        }),
        None => {
            let chars: Vec<char> = s.chars().collect();
            let n = chars.len();
            let mut out = Vec::new();
            let mut count = if maxsplit < 0 { i128::MAX } else { maxsplit };
            let mut i = 0;
            while count > 0 {
                count -= 1;
                while i < n && unicode::is_space(chars[i]) {
                    i += 1;
                }
                if i == n {
                    break;
                }
                let j = i;
                i += 1;
                while i < n && !unicode::is_space(chars[i]) {
                    i += 1;
                }
                out.push(chars[j..i].iter().collect());
            }
            if i < n {
                while i < n && unicode::is_space(chars[i]) {
                    i += 1;
                }
                if i != n {
                    out.push(chars[i..].iter().collect());
                }
            }
            Ok(out)
        }
    }
}

/// Python's `str.rsplit(sep, maxsplit)`.
pub fn rsplit(s: &str, sep: Option<&str>, maxsplit: i128) -> Result<Vec<String>, Error> {
    match sep {
        Some("") => Err(err("empty separator")),
        Some(sep) => {
            let mut parts: Vec<String> = if maxsplit < 0 {
                s.rsplit(sep).map(str::to_string).collect()
            } else {
                s.rsplitn(maxsplit.min(usize::MAX as i128 - 1) as usize + 1, sep)
                    .map(str::to_string)
                    .collect()
            };
            parts.reverse();
            Ok(parts)
        }
        None => {
            let chars: Vec<char> = s.chars().collect();
            let mut out = Vec::new();
            let mut count = if maxsplit < 0 { i128::MAX } else { maxsplit };
            let mut i = chars.len() as isize - 1;
            while count > 0 {
                count -= 1;
                while i >= 0 && unicode::is_space(chars[i as usize]) {
                    i -= 1;
                }
                if i < 0 {
                    break;
                }
                let j = i;
                i -= 1;
                while i >= 0 && !unicode::is_space(chars[i as usize]) {
                    i -= 1;
                }
                out.push(chars[(i + 1) as usize..(j + 1) as usize].iter().collect());
            }
            if i >= 0 {
                while i >= 0 && unicode::is_space(chars[i as usize]) {
                    i -= 1;
                }
                if i >= 0 {
                    out.push(chars[..(i + 1) as usize].iter().collect());
                }
            }
            out.reverse();
            Ok(out)
        }
    }
}

/// Python's `str.replace(old, new, count)`.
pub fn replace(s: &str, old: &str, new: &str, count: i128) -> Result<String, Error> {
    let hits = if old.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(old).count()
    };
    let hits = if count < 0 {
        hits
    } else {
        hits.min(count.min(usize::MAX as i128) as usize)
    };
    check_len(s.len() + hits * new.len())?;
    Ok(if count < 0 {
        s.replace(old, new)
    } else {
        s.replacen(old, new, count.min(usize::MAX as i128) as usize)
    })
}

/// Python's `str.center(width, fill)`.
pub fn center(s: &str, width: i128, fill: char) -> String {
    let len = s.chars().count() as i128;
    let marg = width - len;
    if marg <= 0 {
        return s.to_string();
    }
    let left = marg / 2 + (marg & width & 1);
    let pad = |n: i128| fill.to_string().repeat(n as usize);
    format!("{}{s}{}", pad(left), pad(marg - left))
}

fn fill_char(v: &Option<Value>) -> Result<char, Error> {
    match v {
        None => Ok(' '),
        Some(v) => {
            let s = want_str(v, "The fill character")?;
            let mut chars = s.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Ok(c),
                _ => Err(err("The fill character must be exactly one character long")),
            }
        }
    }
}

/// Character index of `sub` in `s[start:end]` searching forward or backward.
fn find(s: &str, sub: &str, start: i128, end: i128, reverse: bool) -> Option<usize> {
    let chars: Vec<char> = s.chars().collect();
    if end - start < sub.chars().count() as i128 || start > chars.len() as i128 {
        return None;
    }
    let hay: String = chars[start as usize..end as usize].iter().collect();
    let byte = if reverse {
        hay.rfind(sub)
    } else {
        hay.find(sub)
    }?;
    Some(start as usize + hay[..byte].chars().count())
}

fn count(s: &str, sub: &str, start: i128, end: i128) -> usize {
    let chars: Vec<char> = s.chars().collect();
    if start > end || start > chars.len() as i128 {
        return 0;
    }
    let hay: String = chars[start as usize..end as usize].iter().collect();
    if sub.is_empty() {
        return hay.chars().count() + 1;
    }
    hay.matches(sub).count()
}

fn affixes(v: &Value, what: &str) -> Result<Vec<String>, Error> {
    if let Some(s) = v.as_str() {
        return Ok(vec![s.to_string()]);
    }
    if kind(v) == Kind::Tuple {
        let mut out = Vec::new();
        for item in py_iter(v)? {
            out.push(
                item.as_str()
                    .ok_or_else(|| {
                        err(format!(
                            "tuple for {what} must only contain str, not {}",
                            type_name(&item)
                        ))
                    })?
                    .to_string(),
            );
        }
        return Ok(out);
    }
    Err(err(format!(
        "{what} first arg must be str or a tuple of str, not {}",
        type_name(v)
    )))
}

fn tailmatch(s: &str, sub: &str, start: i128, end: i128, suffix: bool) -> bool {
    let chars: Vec<char> = s.chars().collect();
    let n = sub.chars().count() as i128;
    if start > chars.len() as i128 || end - start < n {
        return false;
    }
    let hay: String = chars[start as usize..end as usize].iter().collect();
    if suffix {
        hay.ends_with(sub)
    } else {
        hay.starts_with(sub)
    }
}

fn all_chars(s: &str, pred: fn(char) -> bool) -> bool {
    !s.is_empty() && s.chars().all(pred)
}

/// Methods `Markup` overrides to escape their string arguments and return `Markup`.
const MARKUP_WRAPPED: &[&str] = &[
    "capitalize",
    "title",
    "lower",
    "upper",
    "replace",
    "ljust",
    "rjust",
    "lstrip",
    "rstrip",
    "center",
    "strip",
    "translate",
    "expandtabs",
    "swapcase",
    "zfill",
];

fn str_method(value: &Value, name: &str, args: &[Value]) -> Result<Value, Error> {
    if value.is_safe() {
        return markup_method(value, name, args);
    }
    let s = text(value);
    let b = |params: &[&str]| bind(name, args, params, false);
    let out = match name {
        "strip" | "lstrip" | "rstrip" => {
            let a = b(&["chars"])?;
            let chars = opt_str(&a[0], "strip arg")?;
            match strip(s, chars, name != "rstrip", name != "lstrip") {
                // Nothing stripped: the same string (no copy).
                t if t.len() == s.len() => value.clone(),
                t => Value::from(t),
            }
        }
        "split" | "rsplit" => {
            let a = bind(name, args, &["sep", "maxsplit"], true)?;
            let sep = opt_str(&a[0], "sep")?;
            let maxsplit = opt_int(&a[1], -1)?;
            let parts = if name == "split" {
                split(s, sep, maxsplit)?
            } else {
                rsplit(s, sep, maxsplit)?
            };
            new_list(parts.into_iter().map(Value::from).collect())
        }
        "splitlines" => {
            let a = bind(name, args, &["keepends"], true)?;
            let keep = a[0].as_ref().is_some_and(Value::is_true);
            new_list(
                unicode::splitlines(s, keep)
                    .into_iter()
                    .map(Value::from)
                    .collect(),
            )
        }
        "startswith" | "endswith" => {
            let a = b(&["prefix", "start", "end"])?;
            let prefix = a[0]
                .clone()
                .ok_or_else(|| err(format!("{name}() takes at least 1 argument")))?;
            let (start, end) = adjust(&a[1], &a[2], s.chars().count())?;
            let hit = affixes(&prefix, name)?
                .iter()
                .any(|p| tailmatch(s, p, start, end, name == "endswith"));
            Value::from(hit)
        }
        "replace" => {
            let a = b(&["old", "new", "count"])?;
            let old = want_str(
                a[0].as_ref()
                    .ok_or_else(|| err("replace() takes at least 2 arguments"))?,
                "replace() argument 1",
            )?;
            let new = want_str(
                a[1].as_ref()
                    .ok_or_else(|| err("replace() takes at least 2 arguments"))?,
                "replace() argument 2",
            )?;
            Value::from(replace(s, old, new, opt_int(&a[2], -1)?)?)
        }
        "upper" => Value::from(unicode::upper(s)),
        "lower" => Value::from(unicode::lower(s)),
        "title" => Value::from(unicode::title(s)),
        "capitalize" => Value::from(unicode::capitalize(s)),
        "swapcase" => Value::from(unicode::swapcase(s)),
        "casefold" => {
            b(&[])?;
            Value::from(unicode::casefold(s))
        }
        "find" | "rfind" | "index" | "rindex" => {
            let a = b(&["sub", "start", "end"])?;
            let sub = want_str(
                a[0].as_ref()
                    .ok_or_else(|| err(format!("{name}() takes at least 1 argument")))?,
                "must be str",
            )?;
            let (start, end) = adjust(&a[1], &a[2], s.chars().count())?;
            let hit = find(s, sub, start, end, name.starts_with('r'));
            match (hit, name) {
                (Some(i), _) => Value::from(i as i64),
                (None, "find" | "rfind") => Value::from(-1),
                (None, _) => return Err(err("ValueError: substring not found")),
            }
        }
        "count" => {
            let a = b(&["sub", "start", "end"])?;
            let sub = want_str(
                a[0].as_ref()
                    .ok_or_else(|| err("count() takes at least 1 argument"))?,
                "must be str",
            )?;
            let (start, end) = adjust(&a[1], &a[2], s.chars().count())?;
            Value::from(count(s, sub, start, end) as i64)
        }
        "join" => {
            let a = b(&["iterable"])?;
            let items = py_iter(
                a[0].as_ref()
                    .ok_or_else(|| err("join() takes exactly one argument"))?,
            )?;
            let mut parts = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                parts.push(item.as_str().ok_or_else(|| {
                    err(format!(
                        "sequence item {i}: expected str instance, {} found",
                        type_name(item)
                    ))
                })?);
            }
            check_len(parts.iter().map(|p| p.len()).sum::<usize>() + s.len() * parts.len())?;
            Value::from(parts.join(s))
        }
        "center" | "ljust" | "rjust" => {
            let a = b(&["width", "fillchar"])?;
            let width = opt_int(&a[0], 0)?;
            check_size(width)?;
            let fill = fill_char(&a[1])?;
            let pad = (width - s.chars().count() as i128).max(0) as usize;
            let fill_str = fill.to_string().repeat(pad);
            Value::from(match name {
                "center" => center(s, width, fill),
                "ljust" => format!("{s}{fill_str}"),
                _ => format!("{fill_str}{s}"),
            })
        }
        "zfill" => {
            let a = b(&["width"])?;
            let width = opt_int(&a[0], 0)?;
            check_size(width)?;
            let fill = width - s.chars().count() as i128;
            if fill <= 0 {
                Value::from(s)
            } else {
                let zeros = "0".repeat(fill as usize);
                match s.strip_prefix(['+', '-']) {
                    Some(rest) => Value::from(format!("{}{zeros}{rest}", &s[..1])),
                    None => Value::from(format!("{zeros}{s}")),
                }
            }
        }
        "partition" | "rpartition" => {
            let a = b(&["sep"])?;
            let sep = want_str(
                a[0].as_ref()
                    .ok_or_else(|| err("partition() takes exactly one argument"))?,
                "sep",
            )?;
            if sep.is_empty() {
                return Err(err("empty separator"));
            }
            let found = if name == "partition" {
                s.find(sep)
            } else {
                s.rfind(sep)
            };
            let parts = match (found, name) {
                (Some(i), _) => [&s[..i], sep, &s[i + sep.len()..]],
                (None, "partition") => [s, "", ""],
                (None, _) => ["", "", s],
            };
            new_tuple(parts.iter().map(|p| Value::from(*p)).collect())
        }
        "removeprefix" | "removesuffix" => {
            let a = b(&["affix"])?;
            let affix = want_str(
                a[0].as_ref()
                    .ok_or_else(|| err(format!("{name}() takes exactly one argument")))?,
                name,
            )?;
            Value::from(if name == "removeprefix" {
                s.strip_prefix(affix).unwrap_or(s)
            } else {
                s.strip_suffix(affix).unwrap_or(s)
            })
        }
        "isdigit" | "isalpha" | "isalnum" | "isspace" | "isdecimal" | "isnumeric" | "isupper"
        | "islower" | "istitle" | "isascii" | "isprintable" => {
            b(&[])?;
            Value::from(match name {
                "isdigit" => all_chars(s, unicode::is_digit),
                "isalpha" => all_chars(s, unicode::is_alpha),
                "isalnum" => all_chars(s, unicode::is_alnum),
                "isspace" => all_chars(s, unicode::is_space),
                "isdecimal" => all_chars(s, unicode::is_decimal),
                "isnumeric" => all_chars(s, unicode::is_numeric),
                "isupper" => unicode::str_is_upper(s),
                "islower" => unicode::str_is_lower(s),
                "istitle" => unicode::str_is_title(s),
                "isascii" => s.is_ascii(),
                _ => s.chars().all(unicode::is_printable),
            })
        }
        "format" => {
            let (pos, kw) = split_args(args)?;
            Value::from(str_format(s, &pos, &kw)?)
        }
        "expandtabs" => {
            let a = bind(name, args, &["tabsize"], true)?;
            let size = opt_int(&a[0], 8)?;
            check_size(size)?;
            check_len(s.len() + s.matches('\t').count() * size.max(0) as usize)?;
            let mut out = String::new();
            let mut col: i128 = 0;
            for c in s.chars() {
                match c {
                    '\t' => {
                        if size > 0 {
                            let n = size - col % size;
                            out.push_str(&" ".repeat(n as usize));
                            col += n;
                        }
                    }
                    '\n' | '\r' => {
                        out.push(c);
                        col = 0;
                    }
                    c => {
                        out.push(c);
                        col += 1;
                    }
                }
            }
            Value::from(out)
        }
        _ => {
            return Err(err(format!(
                "str.{name}() is not supported in chat templates rendered by chatids"
            )))
        }
    };
    Ok(out)
}

/// `Markup`'s methods: escape plain string arguments, keep the result `Markup`.
fn markup_method(value: &Value, name: &str, args: &[Value]) -> Result<Value, Error> {
    // markupsafe's escape(): Markup stays, anything else is str()-ed and escaped.
    let escape = |v: &Value| -> Result<Value, Error> {
        Ok(if v.is_safe() {
            v.clone()
        } else {
            Value::from_safe_string(escape_html(&super::pyvalue::py_str(v)?))
        })
    };
    let plain = Value::from(text(value));
    if MARKUP_WRAPPED.contains(&name) {
        let (pos, kw) = split_args(args)?;
        if !kw.is_empty() {
            return Err(err(format!("{name}() takes no keyword arguments")));
        }
        let pos: Vec<Value> = pos
            .iter()
            .map(|v| {
                if v.as_str().is_some() {
                    escape(v)
                } else {
                    Ok(v.clone())
                }
            })
            .collect::<Result<_, _>>()?;
        let rv = str_method(&plain, name, &pos)?;
        return Ok(Value::from_safe_string(text(&rv).to_string()));
    }
    match name {
        "split" | "rsplit" | "splitlines" | "partition" | "rpartition" => {
            let rv = str_method(&plain, name, args)?;
            let items: Vec<Value> = py_iter(&rv)?
                .iter()
                .map(|i| Value::from_safe_string(text(i).to_string()))
                .collect();
            Ok(if kind(&rv) == Kind::Tuple {
                new_tuple(items)
            } else {
                new_list(items)
            })
        }
        "join" => {
            let a = bind(name, args, &["iterable"], false)?;
            let items = py_iter(
                a[0].as_ref()
                    .ok_or_else(|| err("join() takes exactly one argument"))?,
            )?;
            let escaped: Vec<Value> = items.iter().map(escape).collect::<Result<_, _>>()?;
            let rv = str_method(&plain, "join", &[new_list(escaped)])?;
            Ok(Value::from_safe_string(text(&rv).to_string()))
        }
        "format" | "format_map" => Err(err("Markup.format is not supported")),
        _ => str_method(&plain, name, args),
    }
}

fn dict_method(value: &Value, name: &str, args: &[Value]) -> Result<Value, Error> {
    let d = value.downcast_object::<Dict>().expect("a dict");
    let b = |params: &[&str]| bind(name, args, params, false);
    Ok(match name {
        "items" | "keys" | "values" => {
            b(&[])?;
            let kind = match name {
                "items" => ViewKind::Items,
                "keys" => ViewKind::Keys,
                _ => ViewKind::Values,
            };
            Value::from_object(PyView { kind, dict: d })
        }
        "get" => {
            let a = b(&["key", "default"])?;
            let key = a[0]
                .clone()
                .ok_or_else(|| err("get expected at least 1 argument, got 0"))?;
            match super::ops::dict_get(&d, &key) {
                Some(v) => v.clone(),
                None => a[1].clone().unwrap_or(Value::from(())),
            }
        }
        "copy" => {
            b(&[])?;
            new_dict(Dict::clone(&d))
        }
        "fromkeys" => {
            let a = b(&["iterable", "value"])?;
            let keys = py_iter(
                a[0].as_ref()
                    .ok_or_else(|| err("fromkeys expected at least 1 argument"))?,
            )?;
            let v = a[1].clone().unwrap_or(Value::from(()));
            new_dict(keys.into_iter().map(|k| (k, v.clone())).collect())
        }
        _ => return Err(err(format!("dict.{name}() is not supported"))),
    })
}

fn seq_method(value: &Value, name: &str, args: &[Value]) -> Result<Value, Error> {
    let items = py_iter(value)?;
    let b = |params: &[&str]| bind(name, args, params, false);
    Ok(match name {
        "count" => {
            let a = b(&["value"])?;
            let x = a[0]
                .clone()
                .ok_or_else(|| err("count() takes exactly one argument"))?;
            Value::from(items.iter().filter(|i| py_eq(i, &x)).count() as i64)
        }
        "index" => {
            let a = b(&["value", "start", "stop"])?;
            let x = a[0]
                .clone()
                .ok_or_else(|| err("index expected at least 1 argument"))?;
            let (start, end) = adjust(&a[1], &a[2], items.len())?;
            let hit = (start.max(0)..end.max(0))
                .find(|&i| (i as usize) < items.len() && py_eq(&items[i as usize], &x));
            match hit {
                Some(i) => Value::from(i as i64),
                None => {
                    return Err(err(format!(
                        "ValueError: {} is not in {}",
                        super::pyvalue::py_repr(&x)?,
                        type_name(value)
                    )))
                }
            }
        }
        "copy" => {
            b(&[])?;
            new_list(items)
        }
        _ => {
            return Err(err(format!(
                "{}.{name}() is not supported",
                type_name(value)
            )))
        }
    })
}
