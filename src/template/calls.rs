//! Python's call semantics where MiniJinja's differ: `f(*args, **kwargs)`, and the argument
//! binding of the template's own macros when jinja2 gives them more than their parameters
//! (`varargs`, `kwargs`) or when the callee is a macro held in a value.
//!
//! The emitter routes such calls through `__cj_call(callee, method, star, dstar, *args,
//! **kwargs)`: `method` names a method of `callee` (or is `none`), `star`/`dstar` are the
//! `*`/`**` operands (or `none`). A macro of the template is recognised by its hidden
//! parameters (`__cj_pos`, `__cj_kw`, and `__cj_va`/`__cj_kwa` when its body reads `varargs`/
//! `kwargs`); the call then binds the arguments as jinja2's `Macro.__call__` does.

use minijinja::value::{Kwargs, Value};
use minijinja::{Error, State};

use super::args::split_args;
use super::pyvalue::{err, kind, new_dict, new_list, new_tuple, py_iter, type_name, Dict, Kind};

/// The hidden parameters the emitter gives the template's macros.
const POS: &str = "__cj_pos";
const KW: &str = "__cj_kw";
const VARARGS: &str = "__cj_va";
const KWARGS: &str = "__cj_kwa";

/// `__cj_call(callee, method, star, dstar, *args, **kwargs)`.
pub fn call(state: &State, args: &[Value]) -> Result<Value, Error> {
    let (pos, kw) = split_args(args)?;
    let [callee, method, star, dstar, rest @ ..] = pos.as_slice() else {
        return Err(err("__cj_call: missing operands"));
    };
    let mut positional: Vec<Value> = rest.to_vec();
    if !star.is_none() {
        if !matches!(
            kind(star),
            Kind::List
                | Kind::Tuple
                | Kind::Str
                | Kind::Dict
                | Kind::View
                | Kind::Range
                | Kind::Iter
        ) {
            return Err(err(format!(
                "Value after * must be an iterable, not {}",
                type_name(star)
            )));
        }
        positional.extend(py_iter(star)?);
    }
    let mut keywords: Vec<(String, Value)> = kw;
    if !dstar.is_none() {
        let Some(d) = dstar.downcast_object_ref::<Dict>() else {
            return Err(err(format!(
                "argument after ** must be a mapping, not {}",
                type_name(dstar)
            )));
        };
        for (k, v) in d.iter() {
            let Some(name) = k.as_str().filter(|_| kind(k) == Kind::Str) else {
                return Err(err("keywords must be strings"));
            };
            if keywords.iter().any(|(n, _)| n == name) {
                return Err(err(format!(
                    "got multiple values for keyword argument '{name}'"
                )));
            }
            keywords.push((name.to_string(), v.clone()));
        }
    }
    if let Some(name) = method.as_str() {
        return callee.call_method(state, name, &with_kwargs(positional, keywords));
    }
    match macro_spec(callee) {
        Some(spec) => call_macro(state, callee, &spec, positional, keywords),
        None => callee.call(state, &with_kwargs(positional, keywords)),
    }
}

fn with_kwargs(mut positional: Vec<Value>, keywords: Vec<(String, Value)>) -> Vec<Value> {
    if !keywords.is_empty() {
        positional.push(Value::from(Kwargs::from_iter(keywords)));
    }
    positional
}

/// A template macro's name and parameter names (hidden ones included).
struct MacroSpec {
    name: String,
    params: Vec<String>,
}

fn macro_spec(callee: &Value) -> Option<MacroSpec> {
    // Only MiniJinja's macro objects are callable values with an `arguments` list; the
    // template's own macros are the ones with the hidden parameters.
    if kind(callee) != Kind::Other {
        return None;
    }
    let params: Vec<String> = callee
        .get_attr("arguments")
        .ok()?
        .try_iter()
        .ok()?
        .filter_map(|v| v.as_str().map(String::from))
        .collect();
    if !params.iter().any(|p| p == POS) {
        return None;
    }
    let name = callee.get_attr("name").ok()?.as_str()?.to_string();
    Some(MacroSpec { name, params })
}

/// jinja2's `Macro.__call__`: bind positional arguments to the declared parameters, extras to
/// `varargs` when the body reads it; keyword arguments by name, extras to `kwargs` likewise.
fn call_macro(
    state: &State,
    callee: &Value,
    spec: &MacroSpec,
    positional: Vec<Value>,
    keywords: Vec<(String, Value)>,
) -> Result<Value, Error> {
    let declared: Vec<&str> = spec
        .params
        .iter()
        .map(String::as_str)
        .filter(|p| !p.starts_with("__cj_"))
        .collect();
    let has = |p: &str| spec.params.iter().any(|x| x == p);
    let n = positional.len().min(declared.len());
    let mut args: Vec<Value> = positional[..n].to_vec();
    let extra_pos = &positional[n..];
    let mut bound: Vec<(String, Value)> = Vec::new();
    let mut passed_names: Vec<Value> = Vec::new();
    let mut extra_kw = Dict::new();
    if !extra_pos.is_empty() && !has(VARARGS) {
        return Err(err(format!(
            "macro '{}' takes not more than {} argument(s)",
            spec.name,
            declared.len()
        )));
    }
    for (k, v) in keywords {
        match declared.iter().position(|p| *p == k) {
            Some(i) if i >= n => {
                passed_names.push(Value::from(k.as_str()));
                bound.push((k, v));
            }
            _ if k == "caller" => bound.push((k, v)),
            // jinja2: a name already given by position is no parameter left to fill.
            _ if has(KWARGS) => {
                extra_kw.insert(Value::from(k), v);
            }
            _ => {
                return Err(err(format!(
                    "macro '{}' takes no keyword argument '{k}'",
                    spec.name
                )))
            }
        }
    }
    bound.push((POS.into(), Value::from(n)));
    bound.push((KW.into(), new_list(passed_names)));
    if has(VARARGS) {
        bound.push((VARARGS.into(), new_tuple(extra_pos.to_vec())));
    }
    if has(KWARGS) {
        bound.push((KWARGS.into(), new_dict(extra_kw)));
    }
    args.push(Value::from(Kwargs::from_iter(bound)));
    callee.call(state, &args)
}
