//! Python semantics of the operators the emitter routes through helper filters
//! (`__cj_*`): comparisons, `in`, `~`, `/`, `//`, `%`, unary `+`, slicing, tuples, loop
//! iterables, and jinja2's sandboxed attribute and item lookup.

use std::cmp::Ordering;
use std::sync::Arc;

use minijinja::value::{Rest, Value};
use minijinja::{Environment, Error, ErrorKind};

use super::methods::{is_unsafe_method, type_has_method};
use super::pyvalue::{
    as_float, as_int, check_len, check_size, err, kind, new_list, new_tuple, py_iter, py_str,
    py_str_ref, type_name, BoundMethod, Dict, Kind, PyView, ViewKind,
};

/// Register the helper filters.
pub fn register(env: &mut Environment<'static>) {
    env.add_filter("__cj_iter", loop_iterable);
    env.add_filter("__cj_tuple", |v: Value| -> Result<Value, Error> {
        Ok(new_tuple(py_iter(&v)?))
    });
    env.add_filter("__cj_concat", |args: &[Value]| concat(args));
    env.add_filter("__cj_div", |a: Value, b: Value| true_div(&a, &b));
    env.add_filter("__cj_floordiv", |a: Value, b: Value| floor_div(&a, &b));
    env.add_filter("__cj_mod", |a: Value, b: Value| modulo(&a, &b));
    env.add_filter("__cj_add", |a: Value, b: Value| py_add(&a, &b));
    // Borrowed arguments: the operands are not cloned into a list first.
    env.add_filter("__cj_addn", |args: &[Value]| -> Result<Value, Error> {
        match args {
            [head, native, rest @ ..] => {
                let native = native.as_usize().ok_or_else(|| err("__cj_addn: no mask"))?;
                add_chain(head, native as u64, rest)
            }
            _ => Err(err("__cj_addn: missing operands")),
        }
    });
    env.add_filter("__cj_pow", |a: Value, b: Value| py_pow(&a, &b));
    env.add_filter("__cj_int", |s: String| -> Result<Value, Error> {
        s.parse::<i128>()
            .map(int_value)
            .map_err(|_| err("integer literal out of range"))
    });
    env.add_filter("__cj_pos", pos);
    env.add_filter("__cj_id", |v: Value| v);
    env.add_filter("__cj_undefined", |_: Value| Value::UNDEFINED);
    env.add_filter("__cj_neg", neg);
    env.add_filter("__cj_mul", |a: Value, b: Value| py_mul(&a, &b));
    env.add_filter("__cj_compare", compare_chain);
    env.add_filter("__cj_in", |a: Value, b: Value| {
        py_in(&a, &b).map(Value::from)
    });
    env.add_filter("__cj_eq", |a: Value, b: Value| py_eq(&a, &b));
    env.add_filter("__cj_ne", |a: Value, b: Value| !py_eq(&a, &b));
    env.add_filter("__cj_dict", dict_literal);
    env.add_filter("__cj_getattr", |v: Value, name: String| getattr(&v, &name));
    env.add_filter("__cj_item", |v: Value, key: Value| py_getitem(&v, &key));
    env.add_filter("__cj_getitem", |v: Value, key: String| {
        getitem_str(&v, &key)
    });
    env.add_filter("__cj_slice", |v: Value, a: Value, b: Value, c: Value| {
        slice(&v, &a, &b, &c)
    });
    env.add_filter(
        "__cj_fail",
        |_: Value, msg: String| -> Result<Value, Error> { Err(err(msg)) },
    );
}

fn is_number(k: Kind) -> bool {
    matches!(k, Kind::Bool | Kind::Int | Kind::Float)
}

/// Python's `a == b`.
pub fn py_eq(a: &Value, b: &Value) -> bool {
    let (ka, kb) = (kind(a), kind(b));
    match (ka, kb) {
        (Kind::Undefined, Kind::Undefined) | (Kind::None, Kind::None) => true,
        _ if is_number(ka) && is_number(kb) => {
            if ka == Kind::Float || kb == Kind::Float {
                as_float(a) == as_float(b)
            } else {
                as_int(a) == as_int(b)
            }
        }
        (Kind::Str, Kind::Str) => a.as_str() == b.as_str(),
        (Kind::List, Kind::List) | (Kind::Tuple, Kind::Tuple) | (Kind::Range, Kind::Range) => {
            let (x, y): (Vec<Value>, Vec<Value>) = match (a.try_iter(), b.try_iter()) {
                (Ok(x), Ok(y)) => (x.collect(), y.collect()),
                _ => return false,
            };
            x.len() == y.len() && x.iter().zip(&y).all(|(p, q)| py_eq(p, q))
        }
        (Kind::Dict, Kind::Dict) => {
            let (x, y) = (dict_ref(a), dict_ref(b));
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| dict_get(y, k).is_some_and(|w| py_eq(v, w)))
        }
        (Kind::View, Kind::View) => {
            let (x, y) = (view_ref(a), view_ref(b));
            if x.kind != y.kind || x.kind == ViewKind::Values {
                return Arc::ptr_eq(&x.dict, &y.dict) && x.kind == y.kind;
            }
            let (xi, yi) = (x.items(), y.items());
            xi.len() == yi.len() && xi.iter().all(|i| yi.iter().any(|j| py_eq(i, j)))
        }
        _ => {
            a.as_object().is_some()
                && a == b
                && ka == kb
                && matches!(ka, Kind::Other | Kind::Method)
        }
    }
}

fn dict_ref(v: &Value) -> &Dict {
    v.downcast_object_ref::<Dict>().expect("a dict")
}

fn view_ref(v: &Value) -> &PyView {
    v.downcast_object_ref::<PyView>().expect("a view")
}

/// `d[k]` with Python's key equality (`1 == 1.0 == True`).
pub fn dict_get<'a>(d: &'a Dict, k: &Value) -> Option<&'a Value> {
    if let Some(v) = d.get(k) {
        return Some(v);
    }
    if is_number(kind(k)) {
        return d
            .iter()
            .find(|(key, _)| is_number(kind(key)) && py_eq(key, k))
            .map(|(_, v)| v);
    }
    None
}

fn hashable(v: &Value) -> Result<(), Error> {
    match kind(v) {
        Kind::List | Kind::Dict => Err(err(format!("unhashable type: '{}'", type_name(v)))),
        Kind::Tuple => v.try_iter()?.try_for_each(|i| hashable(&i)),
        _ => Ok(()),
    }
}

fn op_symbol(op: &str) -> &'static str {
    match op {
        "lt" => "<",
        "lteq" => "<=",
        "gt" => ">",
        _ => ">=",
    }
}

/// Python's ordering of `a` and `b` (`TypeError` when `<` is not defined between them).
pub fn py_cmp(a: &Value, b: &Value) -> Result<Ordering, Error> {
    py_cmp_op(a, b, "lt")
}

fn py_cmp_op(a: &Value, b: &Value, op: &str) -> Result<Ordering, Error> {
    let (ka, kb) = (kind(a), kind(b));
    if is_number(ka) && is_number(kb) {
        if ka == Kind::Float || kb == Kind::Float {
            let (x, y) = (as_float(a).expect("number"), as_float(b).expect("number"));
            return Ok(x.partial_cmp(&y).unwrap_or(Ordering::Equal));
        }
        return Ok(as_int(a).cmp(&as_int(b)));
    }
    match (ka, kb) {
        (Kind::Str, Kind::Str) => Ok(a.as_str().cmp(&b.as_str())),
        (Kind::List, Kind::List) | (Kind::Tuple, Kind::Tuple) => {
            let x: Vec<Value> = a.try_iter()?.collect();
            let y: Vec<Value> = b.try_iter()?.collect();
            for (p, q) in x.iter().zip(&y) {
                if !py_eq(p, q) {
                    return py_cmp_op(p, q, op);
                }
            }
            Ok(x.len().cmp(&y.len()))
        }
        (Kind::Undefined, _) | (_, Kind::Undefined) => Err(Error::from(ErrorKind::UndefinedError)),
        _ => Err(err(format!(
            "'{}' not supported between instances of '{}' and '{}'",
            op_symbol(op),
            type_name(a),
            type_name(b)
        ))),
    }
}

/// Python's `a in b`.
pub fn py_in(a: &Value, b: &Value) -> Result<bool, Error> {
    match kind(b) {
        Kind::Undefined => Ok(false),
        Kind::Str => match a.as_str() {
            Some(s) => Ok(b.as_str().unwrap_or_default().contains(s)),
            None => Err(err(format!(
                "'in <string>' requires string as left operand, not {}",
                type_name(a)
            ))),
        },
        Kind::Dict => {
            hashable(a)?;
            Ok(dict_get(dict_ref(b), a).is_some())
        }
        Kind::List | Kind::Tuple | Kind::View | Kind::Iter | Kind::Range => {
            Ok(py_iter(b)?.iter().any(|item| py_eq(item, a)))
        }
        _ => Err(err(format!(
            "argument of type '{}' is not iterable",
            type_name(b)
        ))),
    }
}

fn compare_chain(first: Value, rest: Rest<Value>) -> Result<Value, Error> {
    let mut left = first;
    for pair in rest.chunks(2) {
        let (op, right) = (pair[0].as_str().unwrap_or_default(), &pair[1]);
        let ok = match op {
            "eq" => py_eq(&left, right),
            "ne" => !py_eq(&left, right),
            "in" => py_in(&left, right)?,
            "notin" => !py_in(&left, right)?,
            _ => {
                let ord = py_cmp_op(&left, right, op)?;
                match op {
                    "lt" => ord == Ordering::Less,
                    "lteq" => ord != Ordering::Greater,
                    "gt" => ord == Ordering::Greater,
                    _ => ord != Ordering::Less,
                }
            }
        };
        if !ok {
            return Ok(Value::from(false));
        }
        left = right.clone();
    }
    Ok(Value::from(true))
}

/// A dict literal with non-string keys: Python merges equal keys (`1`, `1.0`, `True`).
fn dict_literal(pairs: Value) -> Result<Value, Error> {
    let items: Vec<Value> = pairs.try_iter()?.collect();
    let mut d = Dict::new();
    for kv in items.chunks(2) {
        hashable(&kv[0])?;
        let existing = d.keys().find(|k| py_eq(k, &kv[0])).cloned();
        d.insert(existing.unwrap_or_else(|| kv[0].clone()), kv[1].clone());
    }
    Ok(Value::from_object(d))
}

/// What a `{% for %}` iterates: Python refuses `None`, numbers and other non-iterables.
fn loop_iterable(v: Value) -> Result<Value, Error> {
    match kind(&v) {
        // MiniJinja does not know a string loop's length (`loop.last`, `loop.length`).
        Kind::Str => Ok(new_list(py_iter(&v)?)),
        Kind::Undefined
        | Kind::List
        | Kind::Tuple
        | Kind::Dict
        | Kind::View
        | Kind::Iter
        | Kind::Range => Ok(v),
        _ => Err(err(format!("'{}' object is not iterable", type_name(&v)))),
    }
}

/// `a ~ b ~ ...`: the `str()` of each, joined (a string operand is read in place).
fn concat(args: &[Value]) -> Result<Value, Error> {
    let Some((first, rest)) = args.split_first() else {
        return Err(err("__cj_concat: missing operands"));
    };
    let mut out = py_str(first)?;
    for v in rest {
        let s = py_str_ref(v)?;
        check_len(out.len() + s.len())?;
        out.push_str(&s);
    }
    Ok(Value::from(out))
}

fn numbers(a: &Value, b: &Value, op: &str) -> Result<(Kind, Kind), Error> {
    let (ka, kb) = (kind(a), kind(b));
    if (ka == Kind::Undefined) || (kb == Kind::Undefined) {
        return Err(Error::from(ErrorKind::UndefinedError));
    }
    if !is_number(ka) || !is_number(kb) {
        return Err(err(format!(
            "unsupported operand type(s) for {op}: '{}' and '{}'",
            type_name(a),
            type_name(b)
        )));
    }
    Ok((ka, kb))
}

fn zero_division(what: &str) -> Error {
    err(format!("{what} by zero"))
}

fn true_div(a: &Value, b: &Value) -> Result<Value, Error> {
    numbers(a, b, "/")?;
    let (x, y) = (as_float(a).expect("number"), as_float(b).expect("number"));
    if y == 0.0 {
        return Err(zero_division("division"));
    }
    if let (Some(p), Some(q)) = (as_int(a), as_int(b)) {
        if p.unsigned_abs() > 1 << 53 || q.unsigned_abs() > 1 << 53 {
            return Err(err(
                "true division of integers beyond 2**53 is not supported",
            ));
        }
    }
    Ok(Value::from(x / y))
}

/// Python's `divmod` of two floats: (floor quotient, remainder).
fn float_divmod(vx: f64, wx: f64) -> (f64, f64) {
    let mut m = vx % wx;
    let mut div = (vx - m) / wx;
    if m != 0.0 {
        if (wx < 0.0) != (m < 0.0) {
            m += wx;
            div -= 1.0;
        }
    } else {
        m = 0.0f64.copysign(wx);
    }
    let floordiv = if div != 0.0 {
        let f = div.floor();
        if div - f > 0.5 {
            f + 1.0
        } else {
            f
        }
    } else {
        0.0f64.copysign(vx / wx)
    };
    (floordiv, m)
}

fn floor_div(a: &Value, b: &Value) -> Result<Value, Error> {
    let (ka, kb) = numbers(a, b, "//")?;
    if ka == Kind::Float || kb == Kind::Float {
        let (x, y) = (as_float(a).expect("number"), as_float(b).expect("number"));
        if y == 0.0 {
            return Err(zero_division("float floor division"));
        }
        return Ok(Value::from(float_divmod(x, y).0));
    }
    let (x, y) = (as_int(a).expect("int"), as_int(b).expect("int"));
    if y == 0 {
        return Err(zero_division("integer division or modulo"));
    }
    Ok(int_value(
        x.div_euclid(y) - if y < 0 && x.rem_euclid(y) != 0 { 1 } else { 0 },
    ))
}

fn modulo(a: &Value, b: &Value) -> Result<Value, Error> {
    if kind(a) == Kind::Str {
        return super::format::percent_format(a.as_str().unwrap_or_default(), b).map(Value::from);
    }
    let (ka, kb) = numbers(a, b, "%")?;
    if ka == Kind::Float || kb == Kind::Float {
        let (x, y) = (as_float(a).expect("number"), as_float(b).expect("number"));
        if y == 0.0 {
            return Err(zero_division("float modulo"));
        }
        return Ok(Value::from(float_divmod(x, y).1));
    }
    let (x, y) = (as_int(a).expect("int"), as_int(b).expect("int"));
    if y == 0 {
        return Err(zero_division("integer division or modulo"));
    }
    let r = x.rem_euclid(y);
    Ok(int_value(if y < 0 && r != 0 { r + y } else { r }))
}

/// An int result as a MiniJinja value.
pub fn int_value(i: i128) -> Value {
    match i64::try_from(i) {
        Ok(x) => Value::from(x),
        Err(_) => Value::from(i),
    }
}

/// Python's `a + b` (with `Markup` escaping the plain operand).
pub fn py_add(a: &Value, b: &Value) -> Result<Value, Error> {
    let (ka, kb) = (kind(a), kind(b));
    if ka == Kind::Undefined || kb == Kind::Undefined {
        return Err(Error::from(ErrorKind::UndefinedError));
    }
    if is_number(ka) && is_number(kb) {
        if ka == Kind::Float || kb == Kind::Float {
            return Ok(Value::from(
                as_float(a).expect("number") + as_float(b).expect("number"),
            ));
        }
        let sum = as_int(a).expect("int").checked_add(as_int(b).expect("int"));
        return sum.map(int_value).ok_or_else(|| err("integer overflow"));
    }
    match (ka, kb) {
        (Kind::Str, Kind::Str) => {
            let (x, y) = (
                a.as_str().unwrap_or_default(),
                b.as_str().unwrap_or_default(),
            );
            check_size((x.len() + y.len()) as i128)?;
            Ok(match (a.is_safe(), b.is_safe()) {
                (false, false) => Value::from([x, y].concat()),
                (true, true) => Value::from_safe_string([x, y].concat()),
                (true, false) => Value::from_safe_string(format!("{x}{}", escape_html(y))),
                (false, true) => Value::from_safe_string(format!("{}{y}", escape_html(x))),
            })
        }
        (Kind::List, Kind::List) => Ok(new_list(a.try_iter()?.chain(b.try_iter()?).collect())),
        (Kind::Tuple, Kind::Tuple) => Ok(new_tuple(a.try_iter()?.chain(b.try_iter()?).collect())),
        _ => Err(err(format!(
            "unsupported operand type(s) for +: '{}' and '{}'",
            type_name(a),
            type_name(b)
        ))),
    }
}

/// `head + rest[0] + rest[1] ...`, left to right, step `i` by MiniJinja's `+` where bit `i`
/// of `native` is set (the emitter's rule: one side a string literal) and by [`py_add`]
/// otherwise. Operands that are all plain strings (no `Markup`) concatenate the same way
/// under both rules, so their sum is built at once; the size limit applies where a
/// [`py_add`] step would check it.
pub fn add_chain(head: &Value, native: u64, rest: &[Value]) -> Result<Value, Error> {
    let plain = |v: &Value| v.as_str().is_some() && !v.is_safe();
    if plain(head) && rest.iter().all(plain) {
        let len = |v: &Value| v.as_str().map_or(0, str::len);
        let mut total = len(head);
        for (i, v) in rest.iter().enumerate() {
            total += len(v);
            if native & (1 << i) == 0 {
                check_size(total as i128)?;
            }
        }
        let mut out = String::with_capacity(total);
        for v in std::iter::once(head).chain(rest) {
            out.push_str(v.as_str().unwrap_or_default());
        }
        return Ok(Value::from(out));
    }
    let mut sum = head.clone();
    for (i, v) in rest.iter().enumerate() {
        sum = if native & (1 << i) != 0 {
            minijinja_add(&sum, v)?
        } else {
            py_add(&sum, v)?
        };
    }
    Ok(sum)
}

/// MiniJinja's own `+` where one operand is a string (what the emitter leaves to it): two
/// strings concatenate into a plain string, whatever their `Markup` flag; anything else is
/// MiniJinja's error.
fn minijinja_add(a: &Value, b: &Value) -> Result<Value, Error> {
    match (a.as_str(), b.as_str()) {
        (Some(x), Some(y)) => Ok(Value::from([x, y].concat())),
        _ => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!(
                "tried to use + operator on unsupported types {} and {}",
                a.kind(),
                b.kind()
            ),
        )),
    }
}

/// Python's `a ** b`.
fn py_pow(a: &Value, b: &Value) -> Result<Value, Error> {
    let (ka, kb) = numbers(a, b, "** or pow()")?;
    if ka != Kind::Float && kb != Kind::Float {
        let (x, y) = (as_int(a).expect("int"), as_int(b).expect("int"));
        if y >= 0 {
            let y = u32::try_from(y).map_err(|_| err("integer power too large"))?;
            return x
                .checked_pow(y)
                .map(int_value)
                .ok_or_else(|| err("integer power too large"));
        }
        if x == 0 {
            return Err(err("0.0 cannot be raised to a negative power"));
        }
    }
    let (x, y) = (as_float(a).expect("number"), as_float(b).expect("number"));
    if x == 0.0 && y < 0.0 {
        return Err(err("0.0 cannot be raised to a negative power"));
    }
    if x < 0.0 && y.fract() != 0.0 {
        return Err(err(
            "a negative number raised to a fractional power is complex",
        ));
    }
    let r = x.powf(y);
    if r.is_infinite() && x.is_finite() && y.is_finite() {
        return Err(err("OverflowError: (34, 'Numerical result out of range')"));
    }
    Ok(Value::from(r))
}

/// markupsafe's `escape` of a plain string.
pub fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn neg(v: Value) -> Result<Value, Error> {
    match kind(&v) {
        Kind::Bool | Kind::Int => as_int(&v)
            .expect("int")
            .checked_neg()
            .map(int_value)
            .ok_or_else(|| err("integer overflow")),
        Kind::Float => Ok(Value::from(-as_float(&v).expect("float"))),
        Kind::Undefined => Err(Error::from(ErrorKind::UndefinedError)),
        _ => Err(err(format!(
            "bad operand type for unary -: '{}'",
            type_name(&v)
        ))),
    }
}

/// Python's `a * b` (numbers, or a str/list/tuple repeated an int number of times).
fn py_mul(a: &Value, b: &Value) -> Result<Value, Error> {
    let (ka, kb) = (kind(a), kind(b));
    if ka == Kind::Undefined || kb == Kind::Undefined {
        return Err(Error::from(ErrorKind::UndefinedError));
    }
    if is_number(ka) && is_number(kb) {
        if ka == Kind::Float || kb == Kind::Float {
            return Ok(Value::from(
                as_float(a).expect("number") * as_float(b).expect("number"),
            ));
        }
        let p = as_int(a).expect("int").checked_mul(as_int(b).expect("int"));
        return p.map(int_value).ok_or_else(|| err("integer overflow"));
    }
    let (seq, n) = match (ka, kb) {
        (Kind::Str | Kind::List | Kind::Tuple, Kind::Int | Kind::Bool) => {
            (a, as_int(b).expect("int"))
        }
        (Kind::Int | Kind::Bool, Kind::Str | Kind::List | Kind::Tuple) => {
            (b, as_int(a).expect("int"))
        }
        _ => {
            return Err(err(format!(
                "unsupported operand type(s) for *: '{}' and '{}'",
                type_name(a),
                type_name(b)
            )))
        }
    };
    let n = n.max(0);
    if let Some(s) = seq.as_str() {
        check_size(n.saturating_mul(s.chars().count() as i128))?;
        let out = s.repeat(n as usize);
        return Ok(if seq.is_safe() {
            Value::from_safe_string(out)
        } else {
            Value::from(out)
        });
    }
    let items = py_iter(seq)?;
    check_size(n.saturating_mul(items.len() as i128))?;
    let mut out = Vec::with_capacity(items.len() * n as usize);
    for _ in 0..n {
        out.extend(items.iter().cloned());
    }
    Ok(if kind(seq) == Kind::Tuple {
        new_tuple(out)
    } else {
        new_list(out)
    })
}

fn pos(v: Value) -> Result<Value, Error> {
    match kind(&v) {
        Kind::Bool | Kind::Int => Ok(int_value(as_int(&v).expect("int"))),
        Kind::Float => Ok(v),
        Kind::Undefined => Err(Error::from(ErrorKind::UndefinedError)),
        _ => Err(err(format!(
            "bad operand type for unary +: '{}'",
            type_name(&v)
        ))),
    }
}

/// What Python's `getattr(v, name)` finds on a JSON type, as jinja2's sandbox returns it:
/// `Some(bound method)`, `Some(undefined)` for unsafe attributes, `None` if there is none.
fn python_attribute(v: &Value, name: &str) -> Option<Value> {
    let k = kind(v);
    if name.starts_with("__") && name.ends_with("__") && name.len() > 4 {
        return Some(Value::UNDEFINED);
    }
    if !type_has_method(k, name) {
        return None;
    }
    if is_unsafe_method(k, name) {
        return Some(Value::UNDEFINED);
    }
    Some(Value::from_object(BoundMethod {
        receiver: v.clone(),
        name: name.to_string(),
    }))
}

/// jinja2's sandboxed `getattr`: the Python attribute, else the item, else undefined.
pub fn getattr(v: &Value, name: &str) -> Result<Value, Error> {
    match kind(v) {
        Kind::Undefined => Err(Error::from(ErrorKind::UndefinedError)),
        Kind::Other => v.get_attr(name),
        _ => {
            if let Some(attr) = python_attribute(v, name) {
                return Ok(attr);
            }
            if kind(v) == Kind::Tuple {
                // a named tuple's fields (groupby's `grouper` and `list`)
                return v.get_attr(name);
            }
            Ok(item_lookup(v, &Value::from(name)).unwrap_or(Value::UNDEFINED))
        }
    }
}

/// jinja2's sandboxed `getitem`: `v[key]`, else the attribute named `key`, else undefined.
pub fn py_getitem(v: &Value, key: &Value) -> Result<Value, Error> {
    match kind(v) {
        Kind::Undefined => Err(Error::from(ErrorKind::UndefinedError)),
        Kind::Dict => {
            if let Some(x) = dict_get(dict_ref(v), key) {
                return Ok(x.clone());
            }
            match key.as_str() {
                Some(name) => getattr(v, name),
                None => Ok(Value::UNDEFINED),
            }
        }
        Kind::List | Kind::Tuple | Kind::Str | Kind::Range
            if matches!(kind(key), Kind::Int | Kind::Bool) =>
        {
            let i = as_int(key).expect("int");
            let n = super::pyvalue::py_len(v)? as i128;
            let i = if i < 0 { i + n } else { i };
            if i < 0 || i >= n {
                return Ok(Value::UNDEFINED);
            }
            Ok(match v.as_str() {
                Some(s) => Value::from(s.chars().nth(i as usize).expect("in range")),
                None => v.get_item(&Value::from(i as i64))?,
            })
        }
        Kind::Other => v.get_item(key),
        _ => match key.as_str() {
            Some(name) => getattr(v, name),
            None => Ok(Value::UNDEFINED),
        },
    }
}

fn item_lookup(v: &Value, key: &Value) -> Option<Value> {
    match kind(v) {
        Kind::Dict => dict_get(dict_ref(v), key).cloned(),
        Kind::Other => v.get_item(key).ok().filter(|x| !x.is_undefined()),
        _ => None,
    }
}

/// jinja2's sandboxed `getitem` with a string key: the item, else the Python attribute.
fn getitem_str(v: &Value, key: &str) -> Result<Value, Error> {
    match kind(v) {
        Kind::Undefined => Err(Error::from(ErrorKind::UndefinedError)),
        _ => {
            if let Some(item) = item_lookup(v, &Value::from(key)) {
                return Ok(item);
            }
            Ok(python_attribute(v, key).unwrap_or(Value::UNDEFINED))
        }
    }
}

fn slice_index(v: &Value) -> Option<Option<i128>> {
    match kind(v) {
        Kind::None => Some(None),
        Kind::Int | Kind::Bool => Some(as_int(v)),
        _ => None,
    }
}

/// Python's `v[start:stop:step]`.
fn slice(v: &Value, start: &Value, stop: &Value, step: &Value) -> Result<Value, Error> {
    let k = kind(v);
    if k == Kind::Undefined {
        return Err(Error::from(ErrorKind::UndefinedError));
    }
    // jinja2 compiles slices to plain Python subscriptions (no sandbox getitem fallback).
    match k {
        Kind::Str | Kind::List | Kind::Tuple | Kind::Range => {}
        Kind::Dict => return Err(err("unhashable type: 'slice'")),
        _ => {
            return Err(err(format!(
                "'{}' object is not subscriptable",
                type_name(v)
            )))
        }
    }
    let (Some(start), Some(stop), Some(step)) =
        (slice_index(start), slice_index(stop), slice_index(step))
    else {
        return Err(err(
            "slice indices must be integers or None or have an __index__ method",
        ));
    };
    let step = step.unwrap_or(1);
    if step == 0 {
        return Err(err("slice step cannot be zero"));
    }
    let items: Vec<Value> = match k {
        Kind::Str => Vec::new(),
        _ => v.try_iter()?.collect(),
    };
    let chars: Vec<char> = v.as_str().map(|s| s.chars().collect()).unwrap_or_default();
    let len = if k == Kind::Str {
        chars.len()
    } else {
        items.len()
    } as i128;
    let adjust = |i: Option<i128>, default: i128, lo: i128, hi: i128| -> i128 {
        match i {
            None => default,
            Some(i) if i < 0 => (i + len).max(lo),
            Some(i) => i.min(hi),
        }
    };
    let indices: Vec<usize> = if step > 0 {
        let (a, b) = (adjust(start, 0, 0, len), adjust(stop, len, 0, len));
        let mut out = Vec::new();
        let mut i = a;
        while i < b {
            out.push(i as usize);
            i += step;
        }
        out
    } else {
        let (a, b) = (
            adjust(start, len - 1, -1, len - 1),
            adjust(stop, -1, -1, len - 1),
        );
        let mut out = Vec::new();
        let mut i = a;
        while i > b {
            out.push(i as usize);
            i += step;
        }
        out
    };
    Ok(match k {
        Kind::Str => {
            let s: String = indices.iter().map(|&i| chars[i]).collect();
            if v.is_safe() {
                Value::from_safe_string(s)
            } else {
                Value::from(s)
            }
        }
        Kind::Tuple => new_tuple(indices.iter().map(|&i| items[i].clone()).collect()),
        _ => new_list(indices.iter().map(|&i| items[i].clone()).collect()),
    })
}
