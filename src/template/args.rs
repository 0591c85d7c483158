//! Python-style argument binding for filters, tests and methods.

use minijinja::value::{from_args, Kwargs, Value};
use minijinja::Error;

use super::pyvalue::err;

/// Positional values and keyword arguments (in call order).
pub type SplitArgs = (Vec<Value>, Vec<(String, Value)>);

/// Split call arguments into positional values and keyword arguments (in call order).
pub fn split_args(args: &[Value]) -> Result<SplitArgs, Error> {
    match args.last() {
        Some(last) if last.is_kwargs() => {
            let (kwargs,): (Kwargs,) = from_args(std::slice::from_ref(last))?;
            let mut kw = Vec::new();
            for name in kwargs.args() {
                kw.push((name.to_string(), kwargs.peek::<Value>(name)?));
            }
            Ok((args[..args.len() - 1].to_vec(), kw))
        }
        _ => Ok((args.to_vec(), Vec::new())),
    }
}

/// Bind `args` to the parameters `params` like a Python signature; `None` for those not given.
/// `keywords`: whether parameters may be passed by name.
pub fn bind(
    fname: &str,
    args: &[Value],
    params: &[&str],
    keywords: bool,
) -> Result<Vec<Option<Value>>, Error> {
    if !args.last().is_some_and(Value::is_kwargs) {
        // Positional only (most calls): no split.
        if args.len() > params.len() {
            return Err(too_many(fname, params.len(), args.len()));
        }
        let mut out: Vec<Option<Value>> = args.iter().cloned().map(Some).collect();
        out.resize(params.len(), None);
        return Ok(out);
    }
    let (pos, kw) = split_args(args)?;
    if pos.len() > params.len() {
        return Err(too_many(fname, params.len(), pos.len()));
    }
    let mut out: Vec<Option<Value>> = params.iter().map(|_| None).collect();
    for (i, v) in pos.into_iter().enumerate() {
        out[i] = Some(v);
    }
    for (name, v) in kw {
        if !keywords {
            return Err(err(format!("{fname}() takes no keyword arguments")));
        }
        match params.iter().position(|p| *p == name) {
            Some(i) if out[i].is_none() => out[i] = Some(v),
            Some(_) => {
                return Err(err(format!(
                    "{fname}() got multiple values for argument '{name}'"
                )))
            }
            None => {
                return Err(err(format!(
                    "{fname}() got an unexpected keyword argument '{name}'"
                )))
            }
        }
    }
    Ok(out)
}

fn too_many(fname: &str, params: usize, given: usize) -> Error {
    err(format!(
        "{fname}() takes at most {params} arguments ({given} given)"
    ))
}

/// The required argument `i` of a bound call.
pub fn required(
    bound: &[Option<Value>],
    i: usize,
    fname: &str,
    pname: &str,
) -> Result<Value, Error> {
    bound[i]
        .clone()
        .ok_or_else(|| err(format!("{fname}() missing required argument: '{pname}'")))
}
