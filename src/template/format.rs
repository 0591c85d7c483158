//! Python's string formatting as chat templates use it: `"%s" % x` (and the `format` filter)
//! with flags, width and precision, and `str.format` with `!r`/`!s` and the format-spec
//! mini-language (`'{:>5}'`, `'{:08.3f}'`, `'{:,}'`). What is not implemented (`%g`, the `g`
//! and `n` presentation types, nested fields, attribute lookups) raises; nothing is guessed.

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

/// A parsed format spec: `[[fill]align][sign][#][0][width][grouping][.precision][type]`.
struct FormatSpec {
    fill: char,
    align: Option<char>,
    sign: char,
    alt: bool,
    zero: bool,
    width: usize,
    grouping: Option<char>,
    precision: Option<usize>,
    ty: Option<char>,
}

fn parse_spec(spec: &str) -> Result<FormatSpec, Error> {
    let chars: Vec<char> = spec.chars().collect();
    let mut i = 0;
    let mut out = FormatSpec {
        fill: ' ',
        align: None,
        sign: '-',
        alt: false,
        zero: false,
        width: 0,
        grouping: None,
        precision: None,
        ty: None,
    };
    let is_align = |c: char| matches!(c, '<' | '>' | '^' | '=');
    if chars.len() >= 2 && is_align(chars[1]) {
        out.fill = chars[0];
        out.align = Some(chars[1]);
        i = 2;
    } else if chars.first().is_some_and(|&c| is_align(c)) {
        out.align = Some(chars[0]);
        i = 1;
    }
    if let Some(&c @ ('+' | '-' | ' ')) = chars.get(i) {
        out.sign = c;
        i += 1;
    }
    if chars.get(i) == Some(&'z') {
        return Err(unsupported("the z option of a format spec"));
    }
    if chars.get(i) == Some(&'#') {
        out.alt = true;
        i += 1;
    }
    if chars.get(i) == Some(&'0') {
        out.zero = true;
        i += 1;
    }
    let number = |i: &mut usize| -> Result<Option<usize>, Error> {
        let start = *i;
        while chars.get(*i).is_some_and(char::is_ascii_digit) {
            *i += 1;
        }
        if *i == start {
            return Ok(None);
        }
        let digits: String = chars[start..*i].iter().collect();
        let n: i128 = digits
            .parse()
            .map_err(|_| err("Too many decimal digits in format string"))?;
        Ok(Some(check_size(n)?))
    };
    out.width = number(&mut i)?.unwrap_or(0);
    if let Some(&c @ (',' | '_')) = chars.get(i) {
        out.grouping = Some(c);
        i += 1;
    }
    if chars.get(i) == Some(&'.') {
        i += 1;
        out.precision =
            Some(number(&mut i)?.ok_or_else(|| err("Format specifier missing precision"))?);
    }
    if let Some(&c) = chars.get(i) {
        out.ty = Some(c);
        i += 1;
    }
    if i < chars.len() {
        return Err(err("Invalid format specifier"));
    }
    if out.zero && out.align.is_none() {
        out.fill = '0';
    }
    Ok(out)
}

/// Insert `sep` every `every` digits from the right of `digits`.
fn group(digits: &str, sep: char, every: usize) -> String {
    let n = digits.chars().count();
    let mut out = String::with_capacity(digits.len() + n / every);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (n - i) % every == 0 {
            out.push(sep);
        }
        out.push(c);
    }
    out
}

/// Pad `sign` + `body` to the spec's width; `default_align` is `<` for text, `>` for numbers.
fn align(spec: &FormatSpec, sign: &str, body: &str, default_align: char) -> String {
    let len = sign.chars().count() + body.chars().count();
    let align = spec.align.unwrap_or(if spec.zero && default_align == '>' {
        '='
    } else {
        default_align
    });
    if len >= spec.width {
        return format!("{sign}{body}");
    }
    let fill = |n: usize| spec.fill.to_string().repeat(n);
    let pad = spec.width - len;
    match align {
        '<' => format!("{sign}{body}{}", fill(pad)),
        '^' => format!("{}{sign}{body}{}", fill(pad / 2), fill(pad - pad / 2)),
        '=' => format!("{sign}{}{body}", fill(pad)),
        _ => format!("{}{sign}{body}", fill(pad)),
    }
}

fn numeric_sign(spec: &FormatSpec, negative: bool) -> &'static str {
    match (negative, spec.sign) {
        (true, _) => "-",
        (false, '+') => "+",
        (false, ' ') => " ",
        _ => "",
    }
}

/// Python's `format(v, spec)` (`v.__format__(spec)`) for str, int, bool and float; other
/// values take an empty spec only, as in Python.
pub fn format_value(v: &Value, spec: &str) -> Result<String, Error> {
    let k = kind(v);
    if spec.is_empty() {
        return py_str(v);
    }
    let s = parse_spec(spec)?;
    let unknown = |ty: char| {
        err(format!(
            "Unknown format code '{ty}' for object of type '{}'",
            type_name(v)
        ))
    };
    match k {
        Kind::Str => {
            if let Some(ty) = s.ty.filter(|&t| t != 's') {
                return Err(unknown(ty));
            }
            if s.sign != '-' {
                return Err(err("Sign not allowed in string format specifier"));
            }
            if s.alt {
                return Err(err(
                    "Alternate form (#) not allowed in string format specifier",
                ));
            }
            if s.align == Some('=') {
                return Err(err("'=' alignment not allowed in string format specifier"));
            }
            if s.grouping.is_some() {
                return Err(err("Cannot specify ',' with 's'."));
            }
            let text = v.as_str().unwrap_or_default();
            let text: String = match s.precision {
                Some(p) => text.chars().take(p).collect(),
                None => text.to_string(),
            };
            Ok(align(&s, "", &text, '<'))
        }
        // bool.__format__ with a non-empty spec is int.__format__.
        Kind::Int | Kind::Bool
            if !matches!(s.ty, Some('e' | 'E' | 'f' | 'F' | '%' | 'g' | 'G')) =>
        {
            let i = as_int(v).expect("int");
            let ty = s.ty.unwrap_or('d');
            if s.precision.is_some() {
                return Err(err("Precision not allowed in integer format specifier"));
            }
            let (digits, prefix, every) = match ty {
                'd' => (i.unsigned_abs().to_string(), "", 3),
                'b' => (format!("{:b}", i.unsigned_abs()), "0b", 4),
                'o' => (format!("{:o}", i.unsigned_abs()), "0o", 4),
                'x' => (format!("{:x}", i.unsigned_abs()), "0x", 4),
                'X' => (format!("{:X}", i.unsigned_abs()), "0X", 4),
                'c' => {
                    let c = u32::try_from(i)
                        .ok()
                        .and_then(char::from_u32)
                        .ok_or_else(|| err("%c arg not in range(0x110000)"))?;
                    return Ok(align(&s, "", &c.to_string(), '>'));
                }
                'n' => return Err(unsupported("the n presentation type")),
                other => return Err(unknown(other)),
            };
            let digits = match s.grouping {
                Some(',') if ty != 'd' => {
                    return Err(err(format!("Cannot specify ',' with '{ty}'.")))
                }
                Some(sep) => group_padded(
                    &s,
                    &digits,
                    sep,
                    every,
                    numeric_sign(&s, i < 0).len() + if s.alt { prefix.len() } else { 0 },
                ),
                None => digits,
            };
            let sign = format!(
                "{}{}",
                numeric_sign(&s, i < 0),
                if s.alt { prefix } else { "" }
            );
            Ok(align(&s, &sign, &digits, '>'))
        }
        Kind::Int | Kind::Bool | Kind::Float => {
            let f = as_float(v).expect("number");
            let ty = match s.ty {
                None if s.precision.is_none() => {
                    // Python's repr, aligned like a number.
                    let text = py_str(v)?;
                    let (sign, body) = match text.strip_prefix('-') {
                        Some(rest) => ("-", rest.to_string()),
                        None => (numeric_sign(&s, false), text),
                    };
                    let body = match s.grouping {
                        Some(sep) if !body.contains(['e', 'n', 'i']) => {
                            let (int, frac) = body.split_at(body.find('.').unwrap_or(body.len()));
                            let other = sign.len() + frac.chars().count();
                            format!("{}{frac}", group_padded(&s, int, sep, 3, other))
                        }
                        // An exponent form's mantissa has one integer digit; nan/inf none.
                        _ => body,
                    };
                    return Ok(align(&s, sign, &body, '>'));
                }
                None | Some('g' | 'G' | 'n') => {
                    return Err(unsupported(
                        "the general (g, n or no type with a precision) float format",
                    ))
                }
                Some(t @ ('e' | 'E' | 'f' | 'F' | '%')) => t,
                Some(other) => return Err(unknown(other)),
            };
            if s.alt {
                return Err(unsupported("the # option of float formats"));
            }
            let p = s.precision.unwrap_or(6);
            let x = if ty == '%' { f * 100.0 } else { f };
            let body = if x.is_nan() {
                "nan".to_string()
            } else if x.is_infinite() {
                "inf".to_string()
            } else if matches!(ty, 'e' | 'E') {
                exp_format(x.abs(), p, false)
            } else {
                format!("{:.p$}", x.abs())
            };
            let body = match s.grouping {
                Some(sep) if x.is_finite() && !matches!(ty, 'e' | 'E') => {
                    let (int, frac) = body.split_at(body.find('.').unwrap_or(body.len()));
                    let sign_len = numeric_sign(&s, x.is_sign_negative() && !x.is_nan()).len();
                    format!(
                        "{}{frac}",
                        group_padded(&s, int, sep, 3, sign_len + frac.chars().count())
                    )
                }
                _ => body,
            };
            let body = if matches!(ty, 'E' | 'F') {
                body.to_uppercase()
            } else {
                body
            };
            let body = if ty == '%' { format!("{body}%") } else { body };
            let sign = numeric_sign(&s, x.is_sign_negative() && !x.is_nan());
            Ok(align(&s, sign, &body, '>'))
        }
        _ => Err(err(format!(
            "unsupported format string passed to {}.__format__",
            type_name(v)
        ))),
    }
}

/// Group `digits`; with zero padding (`{:08,}`) Python pads with grouped zeros up to the width
/// (less the `other` characters around the digits).
fn group_padded(spec: &FormatSpec, digits: &str, sep: char, every: usize, other: usize) -> String {
    let mut grouped = group(digits, sep, every);
    if spec.zero && spec.align.is_none() && spec.fill == '0' {
        let mut raw = digits.to_string();
        while grouped.chars().count() + other < spec.width {
            raw.insert(0, '0');
            grouped = group(&raw, sep, every);
        }
        if grouped.starts_with(sep) {
            grouped.insert(0, '0');
        }
    }
    grouped
}

/// Python's `fmt.format(*args, **kwargs)`: `{}`, `{0}`, `{name}`, `{{`, `}}`, the `!r` and `!s`
/// conversions and a format spec after `:` ([`format_value`]). Nested fields (`{:{w}}`),
/// attribute and index lookups (`{0.x}`, `{0[k]}`) and `!a` raise.
pub fn str_format(fmt: &str, args: &[Value], kwargs: &[(String, Value)]) -> Result<String, Error> {
    let mut out = String::new();
    let mut auto = 0usize;
    let mut manual = false;
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
                let whole: String = chars.by_ref().take_while(|&c| c != '}').collect();
                if whole.contains('{') {
                    return Err(unsupported("str.format with nested fields"));
                }
                let (head, spec) = whole.split_once(':').unwrap_or((&whole, ""));
                let (field, conversion) = match head.split_once('!') {
                    Some((f, c)) => (f, Some(c)),
                    None => (head, None),
                };
                if field.contains(['.', '[']) {
                    return Err(unsupported("str.format with attribute or index lookups"));
                }
                let field = field.to_string();
                let value = if field.is_empty() {
                    if manual {
                        return Err(err(
                            "cannot switch from manual field specification to automatic field numbering",
                        ));
                    }
                    auto += 1;
                    args.get(auto - 1)
                } else if let Ok(i) = field.parse::<usize>() {
                    if auto > 0 {
                        return Err(err(
                            "cannot switch from automatic field numbering to manual field specification",
                        ));
                    }
                    manual = true;
                    args.get(i)
                } else {
                    kwargs.iter().find(|(k, _)| *k == field).map(|(_, v)| v)
                };
                let value =
                    value.ok_or_else(|| err(format!("format field '{field}' has no value")))?;
                let converted = match conversion {
                    None => None,
                    Some("s") => Some(Value::from(py_str(value)?)),
                    Some("r") => Some(Value::from(py_repr(value)?)),
                    Some("a") => return Err(unsupported("the !a conversion")),
                    Some(_) => return Err(err("Unknown conversion specifier in format string")),
                };
                out.push_str(&format_value(converted.as_ref().unwrap_or(value), spec)?);
            }
            c => out.push(c),
        }
    }
    Ok(out)
}
