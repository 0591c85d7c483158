//! The simple cases of Python's string formatting: `"%s" % x` (and the `format` filter) and
//! `str.format`. Anything with a width, precision, flag or format spec is refused.

use minijinja::value::Value;
use minijinja::Error;

use super::pyvalue::{
    as_float, as_int, check_size, err, kind, py_repr, py_str, type_name, Dict, Kind, PyTuple,
};

fn unsupported(what: &str) -> Error {
    err(format!(
        "{what} is not supported in chat templates rendered by chatids"
    ))
}

/// One `%` conversion: flags, width, precision and type.
struct Spec {
    left: bool,
    zero: bool,
    plus: bool,
    space: bool,
    alt: bool,
    width: usize,
    precision: Option<usize>,
    conv: char,
}

fn pad(spec: &Spec, sign: &str, body: &str, numeric: bool) -> String {
    let len = sign.chars().count() + body.chars().count();
    if len >= spec.width {
        return format!("{sign}{body}");
    }
    let fill = spec.width - len;
    if spec.left {
        format!("{sign}{body}{}", " ".repeat(fill))
    } else if spec.zero && numeric {
        format!("{sign}{}{body}", "0".repeat(fill))
    } else {
        format!("{}{sign}{body}", " ".repeat(fill))
    }
}

fn sign_of(spec: &Spec, negative: bool) -> &'static str {
    if negative {
        "-"
    } else if spec.plus {
        "+"
    } else if spec.space {
        " "
    } else {
        ""
    }
}

/// Python's `%e` exponent: at least two digits.
fn exp_format(x: f64, precision: usize, upper: bool) -> String {
    let s = format!("{x:.precision$e}");
    let (mantissa, exp) = s.split_once('e').expect("exponent");
    let exp: i32 = exp.parse().expect("exponent digits");
    let out = format!(
        "{mantissa}e{}{:02}",
        if exp < 0 { '-' } else { '+' },
        exp.abs()
    );
    if upper {
        out.to_uppercase()
    } else {
        out
    }
}

fn format_one(spec: &Spec, v: &Value) -> Result<String, Error> {
    let conv = spec.conv;
    match conv {
        's' | 'r' => {
            let mut text = if conv == 's' { py_str(v)? } else { py_repr(v)? };
            if let Some(p) = spec.precision {
                text = text.chars().take(p).collect();
            }
            Ok(pad(spec, "", &text, false))
        }
        'c' => {
            let text = match (kind(v), as_int(v)) {
                (Kind::Int | Kind::Bool, Some(i)) => u32::try_from(i)
                    .ok()
                    .and_then(char::from_u32)
                    .ok_or_else(|| err("%c arg not in range(0x110000)"))?
                    .to_string(),
                (Kind::Str, _) if v.as_str().is_some_and(|s| s.chars().count() == 1) => {
                    v.as_str().unwrap_or_default().to_string()
                }
                _ => return Err(err("%c requires int or char")),
            };
            Ok(pad(spec, "", &text, false))
        }
        'd' | 'i' | 'u' | 'o' | 'x' | 'X' => {
            let i = match kind(v) {
                Kind::Int | Kind::Bool => as_int(v).expect("int"),
                Kind::Float if matches!(conv, 'd' | 'i' | 'u') => {
                    let f = as_float(v).expect("float");
                    if !f.is_finite() {
                        return Err(err("cannot convert float infinity or NaN to integer"));
                    }
                    f.trunc() as i128
                }
                _ => {
                    let what = if matches!(conv, 'd' | 'i' | 'u') {
                        "a real number"
                    } else {
                        "an integer"
                    };
                    return Err(err(format!(
                        "%{conv} format: {what} is required, not {}",
                        type_name(v)
                    )));
                }
            };
            let mut digits = match conv {
                'o' => format!("{:o}", i.unsigned_abs()),
                'x' => format!("{:x}", i.unsigned_abs()),
                'X' => format!("{:X}", i.unsigned_abs()),
                _ => i.unsigned_abs().to_string(),
            };
            if let Some(p) = spec.precision {
                if digits.len() < p {
                    digits = format!("{}{digits}", "0".repeat(p - digits.len()));
                }
            }
            let prefix = match (spec.alt, conv) {
                (true, 'o') => "0o",
                (true, 'x') => "0x",
                (true, 'X') => "0X",
                _ => "",
            };
            let sign = format!("{}{prefix}", sign_of(spec, i < 0));
            Ok(pad(spec, &sign, &digits, true))
        }
        'f' | 'F' | 'e' | 'E' => {
            let f = as_float(v)
                .ok_or_else(|| err(format!("must be real number, not {}", type_name(v))))?;
            if spec.alt {
                return Err(unsupported("the # flag of float conversions"));
            }
            let p = spec.precision.unwrap_or(6);
            let body = if f.is_nan() {
                "nan".to_string()
            } else if f.is_infinite() {
                "inf".to_string()
            } else if matches!(conv, 'f' | 'F') {
                format!("{:.p$}", f.abs())
            } else {
                exp_format(f.abs(), p, conv == 'E')
            };
            let body = if conv == 'F' {
                body.to_uppercase()
            } else {
                body
            };
            Ok(pad(
                spec,
                sign_of(spec, f.is_sign_negative() && !f.is_nan()),
                &body,
                f.is_finite(),
            ))
        }
        _ => Err(unsupported(&format!("the %{conv} conversion"))),
    }
}

/// Python's `fmt % args` (`%s %r %c %d %i %u %o %x %X %f %F %e %E %%` with flags, width,
/// precision and `%(name)s`; `%g` and `*` widths are refused).
pub fn percent_format(fmt: &str, args: &Value) -> Result<String, Error> {
    let positional: Vec<Value> = match args.downcast_object_ref::<PyTuple>() {
        Some(t) => t.0.clone(),
        None => vec![args.clone()],
    };
    let mapping = args.downcast_object_ref::<Dict>();
    let mut out = String::new();
    let mut used = 0;
    let mut used_mapping = false;
    let mut chars = fmt.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut key = None;
        if chars.peek() == Some(&'(') {
            chars.next();
            let mut depth = 1;
            let mut name = String::new();
            for c in chars.by_ref() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                name.push(c);
            }
            if depth != 0 {
                return Err(err("incomplete format key"));
            }
            key = Some(name);
        }
        let mut spec = Spec {
            left: false,
            zero: false,
            plus: false,
            space: false,
            alt: false,
            width: 0,
            precision: None,
            conv: ' ',
        };
        while let Some(&f) = chars.peek() {
            match f {
                '-' => spec.left = true,
                '0' => spec.zero = true,
                '+' => spec.plus = true,
                ' ' => spec.space = true,
                '#' => spec.alt = true,
                _ => break,
            }
            chars.next();
        }
        let digits =
            |chars: &mut std::iter::Peekable<std::str::Chars>| -> Result<Option<usize>, Error> {
                if chars.peek() == Some(&'*') {
                    return Err(unsupported("* widths in %-formatting"));
                }
                let mut n: Option<usize> = None;
                while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                    n = Some(n.unwrap_or(0).saturating_mul(10).saturating_add(d as usize));
                    chars.next();
                }
                Ok(n)
            };
        spec.width = check_size(digits(&mut chars)?.unwrap_or(0) as i128)?;
        if chars.peek() == Some(&'.') {
            chars.next();
            spec.precision = Some(check_size(digits(&mut chars)?.unwrap_or(0) as i128)?);
        }
        while matches!(chars.peek(), Some('h' | 'l' | 'L')) {
            chars.next();
        }
        let Some(conv) = chars.next() else {
            return Err(err("incomplete format"));
        };
        spec.conv = conv;
        if conv == '%' {
            out.push('%');
            continue;
        }
        let value = match key {
            Some(name) => {
                let Some(m) = mapping else {
                    return Err(err("format requires a mapping"));
                };
                used_mapping = true;
                m.get(&Value::from(name.as_str()))
                    .cloned()
                    .ok_or_else(|| err(format!("KeyError: '{name}'")))?
            }
            None => {
                let v = positional
                    .get(used)
                    .cloned()
                    .ok_or_else(|| err("not enough arguments for format string"))?;
                used += 1;
                v
            }
        };
        out.push_str(&format_one(&spec, &value)?);
    }
    // Python skips the check when the argument is a mapping (anything with __getitem__ but
    // a str or tuple).
    let is_tuple = args.downcast_object_ref::<PyTuple>().is_some();
    let mapping_like = !is_tuple
        && matches!(
            kind(args),
            Kind::Dict | Kind::List | Kind::Range | Kind::Undefined
        );
    if !used_mapping && used < positional.len() && !mapping_like {
        return Err(err("not all arguments converted during string formatting"));
    }
    Ok(out)
}

/// Python's `fmt.format(*args, **kwargs)` for `{}`, `{0}`, `{name}`, `{{` and `}}`.
pub fn str_format(fmt: &str, args: &[Value], kwargs: &[(String, Value)]) -> Result<String, Error> {
    let mut out = String::new();
    let mut auto = 0usize;
    let mut chars = fmt.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                out.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                out.push('}');
            }
            '}' => return Err(err("Single '}' encountered in format string")),
            '{' => {
                let field: String = chars.by_ref().take_while(|&c| c != '}').collect();
                if field.contains([':', '!', '.', '[', '{']) {
                    return Err(unsupported(
                        "str.format with conversions, format specs or lookups",
                    ));
                }
                let value = if field.is_empty() {
                    auto += 1;
                    args.get(auto - 1)
                } else if let Ok(i) = field.parse::<usize>() {
                    args.get(i)
                } else {
                    kwargs.iter().find(|(k, _)| *k == field).map(|(_, v)| v)
                };
                let value =
                    value.ok_or_else(|| err(format!("format field '{field}' has no value")))?;
                out.push_str(&py_str(value)?);
            }
            c => out.push(c),
        }
    }
    Ok(out)
}
