//! jinja2's tests (`x is defined`, `x is string`, ...) with Python semantics.

use minijinja::value::Value;
use minijinja::{Environment, Error, ErrorKind};

use super::args::bind;
use super::ops::{py_cmp, py_eq, py_in};
use super::pyvalue::{as_float, as_int, err, kind, py_str, type_name, Kind};
use super::unicode;

/// A test: the tested value and the test's arguments.
pub type TestFn = fn(&Value, &[Value]) -> Result<bool, Error>;

/// The tests chatids implements (jinja2's names).
pub const TEST_NAMES: &[&str] = &[
    "odd",
    "even",
    "divisibleby",
    "defined",
    "undefined",
    "filter",
    "test",
    "none",
    "boolean",
    "false",
    "true",
    "integer",
    "float",
    "lower",
    "upper",
    "string",
    "mapping",
    "number",
    "sequence",
    "iterable",
    "callable",
    "sameas",
    "escaped",
    "in",
    "==",
    "eq",
    "equalto",
    "!=",
    "ne",
    ">",
    "gt",
    "greaterthan",
    "ge",
    ">=",
    "<",
    "lt",
    "lessthan",
    "<=",
    "le",
];

/// jinja2 tests chatids refuses (none today; kept for symmetry with the filters).
pub const UNSUPPORTED_TESTS: &[&str] = &[];

/// The test called `name`.
pub fn lookup(name: &str) -> Option<TestFn> {
    Some(match name {
        "odd" => |v, a| no_args("odd", a).and_then(|_| modulo2(v)).map(|r| r == 1),
        "even" => |v, a| no_args("even", a).and_then(|_| modulo2(v)).map(|r| r == 0),
        "divisibleby" => divisibleby,
        "defined" => |v, a| no_args("defined", a).map(|_| !v.is_undefined()),
        "undefined" => |v, a| no_args("undefined", a).map(|_| v.is_undefined()),
        "filter" => |v, a| {
            no_args("filter", a)?;
            Ok(v.as_str()
                .is_some_and(|n| super::filters::FILTER_NAMES.contains(&n)))
        },
        "test" => |v, a| {
            no_args("test", a)?;
            Ok(v.as_str().is_some_and(|n| TEST_NAMES.contains(&n)))
        },
        "none" => |v, a| no_args("none", a).map(|_| kind(v) == Kind::None),
        "boolean" => |v, a| no_args("boolean", a).map(|_| kind(v) == Kind::Bool),
        "false" => |v, a| no_args("false", a).map(|_| kind(v) == Kind::Bool && !v.is_true()),
        "true" => |v, a| no_args("true", a).map(|_| kind(v) == Kind::Bool && v.is_true()),
        "integer" => |v, a| no_args("integer", a).map(|_| kind(v) == Kind::Int),
        "float" => |v, a| no_args("float", a).map(|_| kind(v) == Kind::Float),
        "lower" => |v, a| {
            no_args("lower", a)?;
            Ok(unicode::str_is_lower(&py_str(v)?))
        },
        "upper" => |v, a| {
            no_args("upper", a)?;
            Ok(unicode::str_is_upper(&py_str(v)?))
        },
        "string" => |v, a| no_args("string", a).map(|_| kind(v) == Kind::Str),
        "mapping" => |v, a| no_args("mapping", a).map(|_| kind(v) == Kind::Dict),
        "number" => |v, a| {
            no_args("number", a).map(|_| matches!(kind(v), Kind::Int | Kind::Float | Kind::Bool))
        },
        "sequence" => |v, a| {
            no_args("sequence", a)?;
            Ok(matches!(
                kind(v),
                Kind::Undefined | Kind::Str | Kind::List | Kind::Tuple | Kind::Dict | Kind::Range
            ))
        },
        "iterable" => |v, a| {
            no_args("iterable", a)?;
            Ok(matches!(
                kind(v),
                Kind::Undefined
                    | Kind::Str
                    | Kind::List
                    | Kind::Tuple
                    | Kind::Dict
                    | Kind::View
                    | Kind::Iter
                    | Kind::Range
            ))
        },
        "callable" => |v, a| {
            no_args("callable", a)?;
            // Undefined defines __call__ (it raises); macros, functions and `loop` are callable.
            Ok(match kind(v) {
                Kind::Undefined | Kind::Method => true,
                Kind::Other => !super::pyvalue::is_namespace(v),
                _ => false,
            })
        },
        "sameas" => sameas,
        "escaped" => |v, a| no_args("escaped", a).map(|_| v.is_safe()),
        "in" => |v, a| py_in(v, &one_arg("in", a)?),
        "==" | "eq" | "equalto" => |v, a| Ok(py_eq(v, &one_arg("eq", a)?)),
        "!=" | "ne" => |v, a| Ok(!py_eq(v, &one_arg("ne", a)?)),
        ">" | "gt" | "greaterthan" => |v, a| Ok(py_cmp(v, &one_arg("gt", a)?)?.is_gt()),
        ">=" | "ge" => |v, a| Ok(py_cmp(v, &one_arg("ge", a)?)?.is_ge()),
        "<" | "lt" | "lessthan" => |v, a| Ok(py_cmp(v, &one_arg("lt", a)?)?.is_lt()),
        "<=" | "le" => |v, a| Ok(py_cmp(v, &one_arg("le", a)?)?.is_le()),
        _ => return None,
    })
}

/// Register every test with MiniJinja.
pub fn register(env: &mut Environment<'static>) {
    for name in TEST_NAMES {
        let f = lookup(name).expect("every listed test exists");
        env.add_test(*name, move |v: &Value, args: &[Value]| f(v, args));
    }
}

/// Run test `name` (for `select`, `reject`, ...).
pub fn call_test(name: &Value, v: &Value, args: &[Value]) -> Result<bool, Error> {
    let n = name
        .as_str()
        .ok_or_else(|| err("test names must be strings"))?;
    let f = lookup(n).ok_or_else(|| err(format!("No test named '{n}'.")))?;
    f(v, args)
}

fn no_args(name: &str, args: &[Value]) -> Result<(), Error> {
    bind(name, args, &[], true).map(|_| ())
}

fn one_arg(name: &str, args: &[Value]) -> Result<Value, Error> {
    let a = bind(name, args, &["other"], true)?;
    a[0].clone()
        .ok_or_else(|| err(format!("{name}() missing 1 required positional argument")))
}

fn modulo2(v: &Value) -> Result<i128, Error> {
    match kind(v) {
        Kind::Int | Kind::Bool => Ok(as_int(v).expect("int").rem_euclid(2)),
        Kind::Float => {
            let f = as_float(v).expect("float");
            let r = f.rem_euclid(2.0);
            Ok(if r == 0.0 {
                0
            } else if r == 1.0 {
                1
            } else {
                2
            })
        }
        Kind::Undefined => Err(Error::from(ErrorKind::UndefinedError)),
        _ => Err(err(format!(
            "unsupported operand type(s) for %: '{}' and 'int'",
            type_name(v)
        ))),
    }
}

fn divisibleby(v: &Value, args: &[Value]) -> Result<bool, Error> {
    let n = one_arg("divisibleby", args)?;
    match (as_int(v), as_int(&n)) {
        (Some(_), Some(0)) => Err(err("integer division or modulo by zero")),
        (Some(a), Some(b)) => Ok(a.rem_euclid(b) == 0),
        _ => match (as_float(v), as_float(&n)) {
            (Some(_), Some(0.0)) => Err(err("float modulo")),
            (Some(a), Some(b)) => Ok(a % b == 0.0),
            _ if v.is_undefined() => Err(Error::from(ErrorKind::UndefinedError)),
            _ => Err(err(format!(
                "unsupported operand type(s) for %: '{}' and '{}'",
                type_name(v),
                type_name(&n)
            ))),
        },
    }
}

/// `is sameas`: Python identity, decidable for None, booleans and small ints only.
fn sameas(v: &Value, args: &[Value]) -> Result<bool, Error> {
    let other = one_arg("sameas", args)?;
    match (kind(v), kind(&other)) {
        (Kind::None, k) | (k, Kind::None) => Ok(k == Kind::None),
        (Kind::Bool, k) | (k, Kind::Bool) if k != Kind::Bool => Ok(false),
        (Kind::Bool, Kind::Bool) => Ok(v.is_true() == other.is_true()),
        (Kind::Int, Kind::Int) => match (as_int(v), as_int(&other)) {
            (Some(a), Some(b)) if a != b => Ok(false),
            (Some(a), _) if (-5..=256).contains(&a) => Ok(true),
            _ => Err(err(
                "'sameas' on large ints depends on CPython's object cache",
            )),
        },
        (a, b) if a != b && !matches!(a, Kind::Other) && !matches!(b, Kind::Other) => Ok(false),
        _ => Err(err(
            "'sameas' on containers and strings depends on CPython object identity",
        )),
    }
}
