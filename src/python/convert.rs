//! Python values into the core's types: a conversation's message dicts into
//! [`Message`]s, template arguments into [`TemplateArgs`], any JSON-like value into
//! `serde_json`, each error naming the message and the field.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::error::TemplateError;
use crate::message::{Content, ContentPart, Message, TemplateArgs, TemplateValue, REASONING_KEYS};
use crate::template::DateTime;

pub(super) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// `dict[key]` unless missing or `None`; `key` interned (`pyo3::intern!`), so no key string is
/// built and hashed per lookup.
fn get<'py>(
    dict: &Bound<'py, PyDict>,
    key: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    Ok(dict.get_item(key)?.filter(|v| !v.is_none()))
}

fn string_field(value: &Bound<'_, PyAny>, i: usize, field: &str) -> Result<String, TemplateError> {
    match value.cast::<PyString>() {
        Ok(s) => s
            .to_cow()
            .map(|c| c.into_owned())
            .map_err(|e| TemplateError::at(i, format!("'{field}' is not valid text: {e}"))),
        Err(_) => Err(TemplateError::at(
            i,
            format!("'{field}' must be a str, not {}", type_name(value)),
        )),
    }
}

fn content_from_py(value: &Bound<'_, PyAny>, i: usize) -> Result<Content, TemplateError> {
    if value.is_instance_of::<PyString>() {
        return Ok(Content::Text(string_field(value, i, "content")?));
    }
    let Ok(list) = value.cast::<PyList>() else {
        return Err(TemplateError::at(
            i,
            format!("'content' must be a str or a list of {{'type': 'text', 'text': ...}} parts, not {}", type_name(value)),
        ));
    };
    let mut parts = Vec::with_capacity(list.len());
    for (j, part) in list.iter().enumerate() {
        let Ok(part) = part.cast::<PyDict>() else {
            return Err(TemplateError::at(
                i,
                format!("content part {j} must be a dict, not {}", type_name(&part)),
            ));
        };
        let py = part.py();
        let kind = match get(part, pyo3::intern!(py, "type"))
            .map_err(|e| TemplateError::at(i, e.to_string()))?
        {
            Some(t) => string_field(&t, i, &format!("content[{j}].type"))?,
            None => {
                return Err(TemplateError::at(
                    i,
                    format!("content part {j} has no 'type'"),
                ))
            }
        };
        if kind == "text" {
            let text = get(part, pyo3::intern!(py, "text"))
                .map_err(|e| TemplateError::at(i, e.to_string()))?;
            let text = text.ok_or_else(|| {
                TemplateError::at(i, format!("content part {j} of type 'text' has no 'text'"))
            })?;
            parts.push(ContentPart::Text(string_field(
                &text,
                i,
                &format!("content[{j}].text"),
            )?));
        } else {
            parts.push(ContentPart::Other { kind });
        }
    }
    Ok(Content::Parts(parts))
}

/// One message dict, with transformers' preprocessing: `None` values count as missing, and
/// the reasoning aliases fold into `reasoning_content`.
pub(super) fn message_from_py<'py>(
    obj: &Bound<'py, PyAny>,
    i: usize,
    raw: bool,
) -> Result<Message, TemplateError> {
    let Ok(dict) = obj.cast::<PyDict>() else {
        return Err(TemplateError::at(
            i,
            format!(
                "a message must be a dict with 'role' and 'content', not {}",
                type_name(obj)
            ),
        ));
    };
    let py = dict.py();
    let field = |key: &Bound<'py, PyString>| {
        get(dict, key).map_err(|e| TemplateError::at(i, e.to_string()))
    };
    // A message the native formats do not model (content parts, no content, keys they do
    // not read) may be handed to the checkpoint's template: keep the whole dict for it.
    let plain = match raw {
        false => plain_message(dict),
        true => None,
    };
    let Some(plain) = plain else {
        return raw_message_from_py(dict, i);
    };
    let role = match field(pyo3::intern!(py, "role"))? {
        Some(r) => string_field(&r, i, "role")?,
        None => return Err(TemplateError::at(i, "the message has no 'role'")),
    };
    let content = Some(Content::Text(string_field(&plain.content, i, "content")?));
    let mut reasoning_content = None;
    if plain.reasoning {
        for (key, name) in reasoning_keys(py).into_iter().zip(REASONING_KEYS) {
            if let Some(r) = field(key)? {
                reasoning_content = Some(string_field(&r, i, name)?);
                break;
            }
        }
    }
    let train = match plain.train {
        true => train_flag(field(pyo3::intern!(py, "train"))?.as_ref(), i)?,
        false => None,
    };
    Ok(Message {
        role,
        content,
        reasoning_content,
        // A message with `tool_calls` is not plain.
        tool_calls: None,
        raw: None,
        train,
    })
}

/// A message's `train` key: a bool (or None, same as absent).
fn train_flag(value: Option<&Bound<'_, PyAny>>, i: usize) -> Result<Option<bool>, TemplateError> {
    match value {
        None => Ok(None),
        Some(v) => v.cast::<PyBool>().map(|b| Some(b.is_true())).map_err(|_| {
            TemplateError::at(i, format!("'train' must be a bool, not {}", type_name(v)))
        }),
    }
}

/// Interned copies of [`REASONING_KEYS`], in its order (`intern!` takes only a literal, so the
/// constant cannot be interned in a loop).
fn reasoning_keys(py: Python<'_>) -> [&Bound<'_, PyString>; 3] {
    [
        pyo3::intern!(py, "reasoning_content"),
        pyo3::intern!(py, "thinking"),
        pyo3::intern!(py, "reasoning"),
    ]
}

/// What [`plain_message`] found in a plain message dict: its content (a str), and whether it
/// has a reasoning key and a `train` key (so that absent keys are not looked up again).
struct Plain<'py> {
    content: Bound<'py, PyAny>,
    reasoning: bool,
    train: bool,
}

/// The message dict as [`Plain`] if it holds only what native formats model: a `role`, a str
/// `content`, reasoning and `train` keys; `None` otherwise.
fn plain_message<'py>(dict: &Bound<'py, PyDict>) -> Option<Plain<'py>> {
    let py = dict.py();
    let content = match dict.get_item(pyo3::intern!(py, "content")) {
        Ok(Some(c)) => c,
        _ => return None,
    };
    if !content.is_instance_of::<pyo3::types::PyString>() {
        return None;
    }
    let mut plain = Plain {
        content,
        reasoning: false,
        train: false,
    };
    // Most messages are exactly {"role": ..., "content": ...}: once every key is known, the
    // keys not yet asked for are absent.
    enum Kind {
        Role,
        Reasoning,
        Train,
    }
    let mut known = 1;
    let keys = std::iter::once((pyo3::intern!(py, "role"), Kind::Role))
        .chain(reasoning_keys(py).map(|key| (key, Kind::Reasoning)))
        .chain(std::iter::once((pyo3::intern!(py, "train"), Kind::Train)));
    for (key, kind) in keys {
        if known == dict.len() {
            break;
        }
        if dict.contains(key).unwrap_or(false) {
            known += 1;
            match kind {
                Kind::Role => {}
                Kind::Reasoning => plain.reasoning = true,
                Kind::Train => plain.train = true,
            }
        }
    }
    (known == dict.len()).then_some(plain)
}

/// A message for the Jinja path: the whole dict as JSON (`None` values dropped, as
/// transformers does), plus the fields chatids reads itself, parsed leniently (the template
/// decides what it accepts).
fn raw_message_from_py<'py>(dict: &Bound<'py, PyDict>, i: usize) -> Result<Message, TemplateError> {
    let mut entries: Vec<(String, serde_json::Value)> = Vec::with_capacity(dict.len());
    for (key, value) in dict.iter() {
        if value.is_none() {
            continue;
        }
        let Ok(key) = key.extract::<String>() else {
            return Err(TemplateError::at(i, "message keys must be str"));
        };
        let json = json_from_py(&value, &key).map_err(|e| TemplateError::at(i, e))?;
        entries.push((key, json));
    }
    // The fields chatids reads itself, found among the few entries by their keys (a lookup in
    // the map hashes the key with SipHash each time).
    let entry = |name: &str| entries.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    // The template decides what else it accepts (a message without content is rendered as
    // the template renders it), but a message without a str role, or with a content that is
    // neither text nor a list of parts, is malformed: refuse it here, naming the message,
    // instead of letting the template render `None` or fail without saying where.
    let role = match entry("role") {
        Some(serde_json::Value::String(r)) => r.clone(),
        Some(_) => {
            let value = get(dict, pyo3::intern!(dict.py(), "role")).ok().flatten();
            let name = value.as_ref().map_or_else(|| "None".to_string(), type_name);
            return Err(TemplateError::at(
                i,
                format!("'role' must be a str, not {name}"),
            ));
        }
        None => return Err(TemplateError::at(i, "the message has no 'role'")),
    };
    let py = dict.py();
    let field = |key: &Bound<'py, PyString>| get(dict, key).ok().flatten();
    // A str content is among the entries already (converted once: encoding a long non-ASCII
    // str to UTF-8 is most of a message's conversion).
    let content = match entry("content") {
        Some(serde_json::Value::String(text)) => Some(Content::Text(text.clone())),
        _ => field(pyo3::intern!(py, "content"))
            .map(|c| content_from_py(&c, i))
            .transpose()?,
    };
    let reasoning_content = REASONING_KEYS
        .iter()
        .find_map(|k| entry(k).and_then(|v| v.as_str()).map(str::to_string));
    // The dict is asked again only for keys it has (`None` values are not among the entries,
    // and `field` passes over them too).
    let tool_calls = entry("tool_calls")
        .and_then(|_| field(pyo3::intern!(py, "tool_calls")))
        .map(|t| t.cast::<PyList>().ok().map(|l| l.len()));
    let train = match entry("train") {
        Some(_) => train_flag(field(pyo3::intern!(py, "train")).as_ref(), i)?,
        None => None,
    };
    Ok(Message {
        role,
        content,
        reasoning_content,
        tool_calls,
        raw: Some(Arc::new(entries.into_iter().collect())),
        train,
    })
}

/// How deeply lists and dicts passed to a template may nest (serde_json's own parsing limit).
/// Deeper values are refused: converting and rendering them recurses, and a value nested
/// 100,000 levels deep would overflow the stack.
pub const MAX_NESTING: usize = 128;

/// A Python value as JSON (str, int, float, bool, None, lists/tuples and str-keyed dicts);
/// `path` names it in errors.
fn json_from_py(value: &Bound<'_, PyAny>, path: &str) -> Result<serde_json::Value, String> {
    json_from_py_at(value, &Path::Root(path), 0)
}

/// Where a value sits inside the value being converted (`tools[0].function`), spelled out
/// only when an error names it.
enum Path<'a> {
    Root(&'a str),
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Path::Root(name) => f.write_str(name),
            Path::Key(parent, key) => write!(f, "{parent}.{key}"),
            Path::Index(parent, j) => write!(f, "{parent}[{j}]"),
        }
    }
}

fn json_from_py_at(
    value: &Bound<'_, PyAny>,
    path: &Path<'_>,
    depth: usize,
) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    if depth > MAX_NESTING {
        let path = path.to_string();
        let shown: String = path.chars().take(60).collect();
        let more = if shown.len() < path.len() { "..." } else { "" };
        return Err(format!(
            "{shown}{more}: lists and dicts nest deeper than {MAX_NESTING} levels here"
        ));
    }
    if value.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(i) = value.extract::<i64>() {
            return Ok(Value::from(i));
        }
        if let Ok(u) = value.extract::<u64>() {
            return Ok(Value::from(u));
        }
        return Err(format!("{path}: integer out of range"));
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        return serde_json::Number::from_f64(f.value())
            .map(Value::Number)
            .ok_or_else(|| format!("{path}: {} cannot be passed to a template", f.value()));
    }
    if let Ok(s) = value.cast::<PyString>() {
        return s
            .to_cow()
            .map(|c| Value::String(c.into_owned()))
            .map_err(|e| format!("{path}: not valid text: {e}"));
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        let mut map = serde_json::Map::new();
        for (k, v) in dict.iter() {
            let Ok(k) = k.extract::<String>() else {
                return Err(format!("{path}: dict keys must be str"));
            };
            let inner = json_from_py_at(&v, &Path::Key(path, &k), depth + 1)?;
            map.insert(k, inner);
        }
        return Ok(Value::Object(map));
    }
    let items: Vec<Bound<'_, PyAny>> = if let Ok(list) = value.cast::<PyList>() {
        list.iter().collect()
    } else if let Ok(tuple) = value.cast::<PyTuple>() {
        tuple.iter().collect()
    } else {
        return Err(format!(
            "{path}: a {} cannot be passed to a template (use str, int, float, bool, None, list or dict)",
            type_name(value)
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(j, v)| json_from_py_at(v, &Path::Index(path, j), depth + 1))
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

/// The items of a list or tuple; `what` names the expected value in the error.
pub(super) fn sequence_items<'py>(
    obj: &Bound<'py, PyAny>,
    what: &str,
) -> Result<Vec<Bound<'py, PyAny>>, TemplateError> {
    if let Ok(list) = obj.cast::<PyList>() {
        Ok(list.iter().collect())
    } else if let Ok(tuple) = obj.cast::<PyTuple>() {
        Ok(tuple.iter().collect())
    } else {
        Err(TemplateError::whole(format!(
            "{what}, not {}",
            type_name(obj)
        )))
    }
}

/// The messages of one conversation; whole dicts (`raw`) for the Jinja path, and for any
/// tool conversation, which the checkpoint's template renders (see [`crate::input::tools`]).
pub(super) fn messages_from_py(
    obj: &Bound<'_, PyAny>,
    raw: bool,
) -> Result<Vec<Message>, TemplateError> {
    let items = sequence_items(obj, "messages must be a list of dicts")?;
    let parse = |raw: bool| -> Result<Vec<Message>, TemplateError> {
        items
            .iter()
            .enumerate()
            .map(|(i, m)| message_from_py(m, i, raw))
            .collect()
    };
    let messages = parse(raw)?;
    if !raw && messages.iter().any(crate::message::is_tool_message) {
        return parse(true);
    }
    Ok(messages)
}

pub(super) fn kwargs_from_py(
    kwargs: Option<&Bound<'_, PyDict>>,
) -> Result<TemplateArgs, TemplateError> {
    let mut args = TemplateArgs::new();
    let Some(kwargs) = kwargs else {
        return Ok(args);
    };
    for (key, value) in kwargs.iter() {
        let name = key
            .extract::<String>()
            .map_err(|_| TemplateError::whole("template argument names must be str"))?;
        let v = if value.is_none() {
            TemplateValue::None
        } else if let Ok(b) = value.cast::<PyBool>() {
            TemplateValue::Bool(b.is_true())
        } else if value.is_instance_of::<PyInt>() {
            TemplateValue::Int(
                value
                    .extract::<i64>()
                    .map_err(|e| TemplateError::whole(format!("template argument {name}: {e}")))?,
            )
        } else if value.is_instance_of::<PyString>() {
            TemplateValue::Str(
                value
                    .extract::<String>()
                    .map_err(|e| TemplateError::whole(format!("template argument {name}: {e}")))?,
            )
        } else {
            TemplateValue::Json(std::sync::Arc::new(
                json_from_py(&value, &name).map_err(TemplateError::whole)?,
            ))
        };
        args.insert(name, v);
    }
    Ok(args)
}

/// A `(year, month, day, hour, minute, second)` tuple from Python as the template's clock.
pub(super) fn clock(
    (year, month, day, hour, minute, second): (i32, u32, u32, u32, u32, u32),
) -> DateTime {
    DateTime {
        year,
        month,
        day,
        hour,
        minute,
        second,
    }
}

/// One row of pairs: a prompt (a list of message dicts) and its completions (each a message
/// dict or a list of them), converted as one conversation would be: completion message `j` is
/// message `len(prompt) + j`, and every part is whole (`raw`) when any part holds a tool message.
pub(super) fn pair_row_from_py(
    prompt: &Bound<'_, PyAny>,
    completions: &[Bound<'_, PyAny>],
    raw: bool,
) -> Result<(Vec<Message>, Vec<Vec<Message>>), TemplateError> {
    let prompt_items = sequence_items(prompt, "a prompt must be a list of message dicts")?;
    let completion_items = completions
        .iter()
        .map(|c| {
            if c.cast::<PyDict>().is_ok() {
                Ok(vec![c.clone()])
            } else {
                sequence_items(
                    c,
                    "a completion must be a message dict or a list of message dicts",
                )
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let n = prompt_items.len();
    let parse = |raw: bool| -> Result<(Vec<Message>, Vec<Vec<Message>>), TemplateError> {
        let prompt = prompt_items
            .iter()
            .enumerate()
            .map(|(i, m)| message_from_py(m, i, raw))
            .collect::<Result<Vec<_>, _>>()?;
        let completions = completion_items
            .iter()
            .map(|items| {
                items
                    .iter()
                    .enumerate()
                    .map(|(j, m)| message_from_py(m, n + j, raw))
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((prompt, completions))
    };
    let (prompt, completions) = parse(raw)?;
    let any_tool = prompt
        .iter()
        .chain(completions.iter().flatten())
        .any(crate::message::is_tool_message);
    if !raw && any_tool {
        return parse(true);
    }
    Ok((prompt, completions))
}
