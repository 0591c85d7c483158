//! The PyO3 bindings (`chatids._core`): type conversion only.
//!
//! Python objects are converted to [`Message`]s (with errors that name the message and the
//! field), the core runs with the GIL released, and ids come back as numpy arrays. Rust
//! panics are caught and raised as `RuntimeError`, never as an abort.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use numpy::{IntoPyArray, PyArray1};
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::batch::{BatchOptions, OnError};
use crate::encoder::{EncodeOptions, Encoder, LoadOptions, Route};
use crate::error::{Error, TemplateError};
use crate::formats::{SystemPolicy, TemplateArgs};
use crate::lint::LintContext;
use crate::message::{Content, ContentPart, Message, TemplateValue};
use crate::template::DateTime;
use crate::training::{TrainingOptions, Truncated};

mod session;

create_exception!(
    _core,
    ChatTemplateError,
    PyValueError,
    "A conversation breaks a rule of the chat format; the message names the message index and the rule."
);
create_exception!(
    _core,
    CheckpointError,
    PyValueError,
    "A checkpoint or its chat format cannot be loaded."
);

/// `"selected"`, `"native"` or `"tokenizers"`.
fn which_text_encoder(name: &str) -> PyResult<crate::text::Which> {
    Ok(match name {
        "selected" => crate::text::Which::Selected,
        "native" => crate::text::Which::Native,
        "tokenizers" => crate::text::Which::Tokenizers,
        other => {
            return Err(PyValueError::new_err(format!(
                "encoder must be \"selected\", \"native\" or \"tokenizers\", not {other:?}"
            )))
        }
    })
}

fn to_py_err(e: Error) -> PyErr {
    match e {
        Error::Template(t) => Python::attach(|py| {
            let err = ChatTemplateError::new_err(t.to_string());
            let value = err.value(py);
            let refusal = match t.refusal {
                crate::error::Refusal::Input => "input",
                crate::error::Refusal::TemplateRaises => "template",
                crate::error::Refusal::Dropped => "dropped",
                crate::error::Refusal::Unmodeled => "unmodeled",
            };
            // Setting attributes on a fresh exception object cannot fail.
            let _ = value.setattr("refusal", refusal);
            let _ = value.setattr("message_index", t.message);
            let _ = value.setattr("conversation_index", t.conversation);
            err
        }),
        Error::Load(msg) => CheckpointError::new_err(msg),
        Error::Tokenizer(msg) => PyRuntimeError::new_err(format!("tokenizer error: {msg}")),
    }
}

/// Run `f`, turning a Rust panic into a `RuntimeError`.
fn guarded<T>(f: impl FnOnce() -> Result<T, Error>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.map_err(to_py_err),
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(PyRuntimeError::new_err(format!(
                "chatids internal error (please report): {what}"
            )))
        }
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

fn get<'py>(dict: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
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
        let kind = match get(part, "type").map_err(|e| TemplateError::at(i, e.to_string()))? {
            Some(t) => string_field(&t, i, &format!("content[{j}].type"))?,
            None => {
                return Err(TemplateError::at(
                    i,
                    format!("content part {j} has no 'type'"),
                ))
            }
        };
        if kind == "text" {
            let text = get(part, "text").map_err(|e| TemplateError::at(i, e.to_string()))?;
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
fn message_from_py(obj: &Bound<'_, PyAny>, i: usize, raw: bool) -> Result<Message, TemplateError> {
    let Ok(dict) = obj.cast::<PyDict>() else {
        return Err(TemplateError::at(
            i,
            format!(
                "a message must be a dict with 'role' and 'content', not {}",
                type_name(obj)
            ),
        ));
    };
    let field = |key: &str| get(dict, key).map_err(|e| TemplateError::at(i, e.to_string()));
    // A message the native formats do not model (content parts, no content, keys they do
    // not read) may be handed to the checkpoint's template: keep the whole dict for it.
    if raw || !plain_message(dict) {
        return raw_message_from_py(dict, i);
    }
    let role = match field("role")? {
        Some(r) => string_field(&r, i, "role")?,
        None => return Err(TemplateError::at(i, "the message has no 'role'")),
    };
    let content = field("content")?
        .map(|c| content_from_py(&c, i))
        .transpose()?;
    let mut reasoning_content = None;
    for key in ["reasoning_content", "thinking", "reasoning"] {
        if let Some(r) = field(key)? {
            reasoning_content = Some(string_field(&r, i, key)?);
            break;
        }
    }
    let tool_calls = field("tool_calls")?.map(|t| t.cast::<PyList>().ok().map(|l| l.len()));
    Ok(Message {
        role,
        content,
        reasoning_content,
        tool_calls,
        raw: None,
        train: train_flag(field("train")?.as_ref(), i)?,
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

/// Whether a message dict holds only what native formats model: a `role`, a str `content`,
/// reasoning and `train` keys.
fn plain_message(dict: &Bound<'_, PyDict>) -> bool {
    let py = dict.py();
    let content = match dict.get_item(pyo3::intern!(py, "content")) {
        Ok(Some(c)) => c,
        _ => return false,
    };
    if !content.is_instance_of::<pyo3::types::PyString>() {
        return false;
    }
    // Most messages are exactly {"role": ..., "content": ...}.
    let mut known = 1;
    for key in [
        pyo3::intern!(py, "role"),
        pyo3::intern!(py, "reasoning_content"),
        pyo3::intern!(py, "thinking"),
        pyo3::intern!(py, "reasoning"),
        pyo3::intern!(py, "train"),
    ] {
        if known == dict.len() {
            break;
        }
        known += usize::from(dict.contains(key).unwrap_or(false));
    }
    known == dict.len()
}

/// A message for the Jinja path: the whole dict as JSON (`None` values dropped, as
/// transformers does), plus the fields chatids reads itself, parsed leniently (the template
/// decides what it accepts).
fn raw_message_from_py(dict: &Bound<'_, PyDict>, i: usize) -> Result<Message, TemplateError> {
    let mut map = serde_json::Map::new();
    for (key, value) in dict.iter() {
        if value.is_none() {
            continue;
        }
        let Ok(key) = key.extract::<String>() else {
            return Err(TemplateError::at(i, "message keys must be str"));
        };
        let json = json_from_py(&value, &key).map_err(|e| TemplateError::at(i, e))?;
        map.insert(key, json);
    }
    // The template decides what else it accepts (a message without content is rendered as
    // the template renders it), but a message without a str role, or with a content that is
    // neither text nor a list of parts, is malformed: refuse it here, naming the message,
    // instead of letting the template render `None` or fail without saying where.
    let role = match map.get("role") {
        Some(serde_json::Value::String(r)) => r.clone(),
        Some(_) => {
            let value = get(dict, "role").ok().flatten();
            let name = value.as_ref().map_or_else(|| "None".to_string(), type_name);
            return Err(TemplateError::at(
                i,
                format!("'role' must be a str, not {name}"),
            ));
        }
        None => return Err(TemplateError::at(i, "the message has no 'role'")),
    };
    let field = |key: &str| get(dict, key).ok().flatten();
    let content = field("content")
        .map(|c| content_from_py(&c, i))
        .transpose()?;
    let reasoning_content = ["reasoning_content", "thinking", "reasoning"]
        .iter()
        .find_map(|k| map.get(*k).and_then(|v| v.as_str()).map(str::to_string));
    let tool_calls = field("tool_calls").map(|t| t.cast::<PyList>().ok().map(|l| l.len()));
    let train = train_flag(field("train").as_ref(), i)?;
    Ok(Message {
        role,
        content,
        reasoning_content,
        tool_calls,
        raw: Some(Arc::new(map)),
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
    json_from_py_at(value, path, 0)
}

fn json_from_py_at(
    value: &Bound<'_, PyAny>,
    path: &str,
    depth: usize,
) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    if depth > MAX_NESTING {
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
            let inner = json_from_py_at(&v, &format!("{path}.{k}"), depth + 1)?;
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
        .map(|(j, v)| json_from_py_at(v, &format!("{path}[{j}]"), depth + 1))
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

/// The items of a list or tuple; `what` names the expected value in the error.
fn sequence_items<'py>(
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
/// tool conversation, which the checkpoint's template renders (see [`crate::tools`]).
fn messages_from_py(obj: &Bound<'_, PyAny>, raw: bool) -> Result<Vec<Message>, TemplateError> {
    let items = sequence_items(obj, "messages must be a list of dicts")?;
    let parse = |raw: bool| -> Result<Vec<Message>, TemplateError> {
        items
            .iter()
            .enumerate()
            .map(|(i, m)| message_from_py(m, i, raw))
            .collect()
    };
    let messages = parse(raw)?;
    if !raw && messages.iter().any(crate::tools::is_tool_message) {
        return parse(true);
    }
    Ok(messages)
}

/// The messages and options of one call, converted.
fn request(
    messages: &Bound<'_, PyAny>,
    call: CallOptions<'_, '_>,
) -> PyResult<(Vec<Message>, EncodeOptions)> {
    let messages = messages_from_py(messages, call.raw).map_err(|e| to_py_err(e.into()))?;
    Ok((messages, options(call)?))
}

fn kwargs_from_py(kwargs: Option<&Bound<'_, PyDict>>) -> Result<TemplateArgs, TemplateError> {
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
            TemplateValue::Json(json_from_py(&value, &name).map_err(TemplateError::whole)?)
        };
        args.insert(name, v);
    }
    Ok(args)
}

/// A `(year, month, day, hour, minute, second)` tuple from Python as the template's clock.
fn clock((year, month, day, hour, minute, second): (i32, u32, u32, u32, u32, u32)) -> DateTime {
    DateTime {
        year,
        month,
        day,
        hour,
        minute,
        second,
    }
}

/// The options of one call. `system` and `merge_consecutive` are chatids' input policies.
struct CallOptions<'a, 'py> {
    add_generation_prompt: bool,
    sanitize_control_tokens: bool,
    kwargs: Option<&'a Bound<'py, PyDict>>,
    system: Option<&'a str>,
    merge_consecutive: bool,
    /// Keep each message's whole dict (the Jinja path renders from it).
    raw: bool,
    /// `strftime_now()` for the Jinja path: (year, month, day, hour, minute, second).
    now: Option<(i32, u32, u32, u32, u32, u32)>,
    /// Leave the final message open (transformers' `continue_final_message`).
    continue_final_message: bool,
}

/// A truncation report for Python: `(policy, original_length, dropped_tokens, dropped_messages)`.
type TruncationTuple = (&'static str, usize, usize, Vec<usize>);

fn truncation_tuple(t: Truncated) -> TruncationTuple {
    (
        t.policy.name(),
        t.original_length,
        t.dropped_tokens,
        t.dropped_messages,
    )
}

/// The training options of one call; `truncation=None` means `"error"`.
fn training_options(
    mask: bool,
    train_on: &str,
    max_length: Option<usize>,
    truncation: Option<&str>,
    provenance: bool,
) -> PyResult<TrainingOptions> {
    TrainingOptions::parse(mask, train_on, max_length, truncation, provenance)
        .map_err(|e| to_py_err(e.into()))
}

fn options(call: CallOptions<'_, '_>) -> PyResult<EncodeOptions> {
    let convert = || -> Result<EncodeOptions, TemplateError> {
        Ok(EncodeOptions {
            add_generation_prompt: call.add_generation_prompt,
            sanitize_control_tokens: call.sanitize_control_tokens,
            kwargs: kwargs_from_py(call.kwargs)?,
            system: SystemPolicy::parse(call.system)?,
            merge_consecutive: call.merge_consecutive,
            now: call.now.map(clock),
            continue_final_message: call.continue_final_message,
        })
    };
    convert().map_err(|e| to_py_err(e.into()))
}

/// The compiled core of a chatids encoder. Use `chatids.Encoder`, which wraps it.
#[pyclass(name = "Encoder", module = "chatids._core", frozen)]
struct PyEncoder {
    inner: Arc<Encoder>,
}

impl PyEncoder {
    /// The transformers route's text encoders, or an error on the mistral-common route.
    fn transformers_text(&self) -> PyResult<&crate::text::Selected> {
        self.inner.text_encoder().ok_or_else(|| {
            PyValueError::new_err("the mistral-common route does not use tokenizer.json")
        })
    }

    /// The arguments of the `_encode_text*` debugging calls, converted.
    fn text_call(
        &self,
        encoder: &str,
        added_tokens: bool,
        at_start: bool,
    ) -> PyResult<(
        crate::text::Which,
        &crate::text::Selected,
        crate::text::TextOptions,
    )> {
        Ok((
            which_text_encoder(encoder)?,
            self.transformers_text()?,
            crate::text::TextOptions {
                added_tokens,
                at_start,
            },
        ))
    }
}

#[pymethods]
impl PyEncoder {
    /// Load a checkpoint directory; `format` forces a native format.
    #[staticmethod]
    #[pyo3(signature = (path, format=None, reference=None, chat_template=None, allow_external=false, unknown_template_args="error"))]
    fn from_pretrained(
        py: Python<'_>,
        path: std::path::PathBuf,
        format: Option<String>,
        reference: Option<String>,
        chat_template: Option<String>,
        allow_external: bool,
        unknown_template_args: &str,
    ) -> PyResult<Self> {
        let unknown_template_args = unknown_template_args.parse().map_err(to_py_err)?;
        let encoder = py.detach(|| {
            guarded(|| {
                let reference = reference.as_deref().map(Route::parse).transpose()?;
                Encoder::load_with(
                    &path,
                    &LoadOptions {
                        format: format.as_deref(),
                        reference,
                        chat_template: chat_template.as_deref(),
                        allow_external,
                        unknown_template_args,
                    },
                )
            })
        })?;
        Ok(PyEncoder {
            inner: Arc::new(encoder),
        })
    }

    /// The same tokenizer with another chat template (the text encoders are shared).
    #[pyo3(signature = (template, format=None))]
    fn with_chat_template(
        &self,
        py: Python<'_>,
        template: String,
        format: Option<String>,
    ) -> PyResult<Self> {
        let inner = Arc::clone(&self.inner);
        let encoder =
            py.detach(|| guarded(|| inner.with_chat_template(&template, format.as_deref())))?;
        Ok(PyEncoder {
            inner: Arc::new(encoder),
        })
    }

    /// The native format's name.
    #[getter]
    fn format(&self) -> &'static str {
        self.inner.format_name()
    }

    /// Ids that end an assistant turn.
    #[getter]
    fn stop_token_ids(&self) -> Vec<u32> {
        self.inner.stop_token_ids().to_vec()
    }

    #[getter]
    fn stop_token_ids_for_tool_calls(&self) -> Vec<u32> {
        self.inner.stop_token_ids_for_tool_calls().to_vec()
    }

    /// Where appending messages can change earlier tokens (None: not known, Jinja path).
    #[getter]
    fn append_rewrites(&self) -> Option<Vec<&'static str>> {
        crate::session::append_rewrites(&self.inner).map(<[_]>::to_vec)
    }

    /// An empty append-only session with these render options.
    #[pyo3(signature = (sanitize_control_tokens=true, kwargs=None, system=None, merge_consecutive=false, now=None, on_rewrite="error"))]
    #[allow(clippy::too_many_arguments)]
    fn session(
        slf: &Bound<'_, Self>,
        sanitize_control_tokens: bool,
        kwargs: Option<&Bound<'_, PyDict>>,
        system: Option<&str>,
        merge_consecutive: bool,
        now: Option<(i32, u32, u32, u32, u32, u32)>,
        on_rewrite: &str,
    ) -> PyResult<session::PySession> {
        let options = options(CallOptions {
            add_generation_prompt: false,
            sanitize_control_tokens,
            kwargs,
            system,
            merge_consecutive,
            raw: false,
            now,
            continue_final_message: false,
        })?;
        let on_rewrite =
            crate::session::OnRewrite::parse(on_rewrite).map_err(|e| to_py_err(e.into()))?;
        Ok(session::PySession::new(
            slf.clone().unbind(),
            crate::session::Session::new(options, on_rewrite),
        ))
    }

    /// The template arguments the template reads (None: not known).
    #[getter]
    fn template_args(&self) -> Option<Vec<String>> {
        self.inner
            .template_args()
            .map(|names| names.iter().cloned().collect())
    }

    /// `"error"` or `"ignore"`: what happens to arguments the template does not read.
    #[getter]
    fn unknown_template_args(&self) -> &'static str {
        match self.inner.unknown_template_args() {
            crate::encoder::ArgsPolicy::Error => "error",
            crate::encoder::ArgsPolicy::Ignore => "ignore",
        }
    }

    /// The control tokens as `(text, id)` pairs.
    #[getter]
    fn control_tokens(&self) -> Vec<(String, u32)> {
        self.inner.control_tokens().tokens().to_vec()
    }

    /// The tokenizer as chatids runs it (tokenizer.json after the transformers adjustments),
    /// serialized as JSON. A debugging aid.
    fn tokenizer_json(&self) -> PyResult<String> {
        let text = self.inner.text_encoder().ok_or_else(|| {
            PyValueError::new_err("the mistral-common route does not use tokenizer.json")
        })?;
        text.tokenizer()
            .to_string(false)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// Which text encoder runs: `"native"` (chatids' BPE core) or `"tokenizers"` (the crate).
    #[getter]
    fn text_encoder(&self) -> Option<&'static str> {
        self.inner.text_encoder().map(|t| {
            if t.native().is_some() {
                "native"
            } else {
                "tokenizers"
            }
        })
    }

    /// Encode one text with one text encoder (`"selected"`, `"native"`, `"tokenizers"`):
    /// `(ids, starts)`, `starts` only `with_starts`. For tests and benchmarks.
    #[pyo3(signature = (text, encoder="selected", added_tokens=true, at_start=true, with_starts=false))]
    fn _encode_text(
        &self,
        py: Python<'_>,
        text: &str,
        encoder: &str,
        added_tokens: bool,
        at_start: bool,
        with_starts: bool,
    ) -> PyResult<(Vec<u32>, Option<Vec<usize>>)> {
        let (which, t, options) = self.text_call(encoder, added_tokens, at_start)?;
        py.detach(|| {
            guarded(|| {
                let mut ids = Vec::new();
                let mut starts = with_starts.then(Vec::new);
                t.encode_with(which, text, options, &mut ids, starts.as_mut())?;
                Ok((ids, starts))
            })
        })
    }

    /// Encode each text with one text encoder on this thread; the total number of tokens.
    /// For benchmarks (one call, the GIL released).
    #[pyo3(signature = (texts, encoder="selected", added_tokens=true, at_start=true))]
    fn _encode_texts(
        &self,
        py: Python<'_>,
        texts: Vec<String>,
        encoder: &str,
        added_tokens: bool,
        at_start: bool,
    ) -> PyResult<usize> {
        let (which, t, options) = self.text_call(encoder, added_tokens, at_start)?;
        py.detach(|| {
            guarded(|| {
                let mut ids = Vec::new();
                let mut total = 0;
                for text in &texts {
                    ids.clear();
                    t.encode_with(which, text, options, &mut ids, None)?;
                    total += ids.len();
                }
                Ok(total)
            })
        })
    }

    /// The indices of `texts` where the native core and the tokenizers crate differ (ids, and
    /// token starts `with_starts`). For the differential tests.
    #[pyo3(signature = (texts, added_tokens=true, at_start=true, with_starts=false))]
    fn _text_differences(
        &self,
        py: Python<'_>,
        texts: Vec<String>,
        added_tokens: bool,
        at_start: bool,
        with_starts: bool,
    ) -> PyResult<Vec<usize>> {
        let (_, t, options) = self.text_call("selected", added_tokens, at_start)?;
        py.detach(|| {
            guarded(|| {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                t.differences(&refs, options, with_starts)
            })
        })
    }

    /// Why this format was chosen, and what was adjusted to match the reference.
    fn explain(&self) -> String {
        self.inner.explain()
    }

    /// Whether the template must be rendered in Python (chatids' engine cannot compile it).
    #[getter]
    fn needs_external_renderer(&self) -> bool {
        self.inner.needs_external_renderer()
    }

    /// The chat template in use (transformers route), or None.
    #[getter]
    fn chat_template(&self) -> Option<String> {
        self.inner.chat_template().map(str::to_string)
    }

    /// The special-token variables templates see (transformers' `special_tokens_map`).
    #[getter]
    fn special_tokens_map(&self) -> Vec<(String, String)> {
        self.inner.special_tokens_map().to_vec()
    }

    /// Encode prompts rendered outside the core (see `Encoder::encode_rendered`), in parallel.
    #[pyo3(signature = (texts, marked))]
    #[allow(clippy::type_complexity)]
    fn encode_rendered_batch<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
        marked: bool,
    ) -> PyResult<(Bound<'py, PyArray1<u32>>, Bound<'py, PyArray1<i64>>)> {
        use rayon::prelude::*;
        let encoded = py.detach(|| {
            guarded(|| {
                // On chatids' own pool, never rayon's global one (see `batch::install`).
                crate::batch::install(None, || {
                    texts
                        .par_iter()
                        .map(|t| self.inner.encode_rendered(t, marked))
                        .collect::<Result<Vec<_>, _>>()
                })?
            })
        })?;
        let mut offsets = Vec::with_capacity(encoded.len() + 1);
        offsets.push(0i64);
        let mut ids = Vec::new();
        for one in encoded {
            ids.extend_from_slice(&one);
            offsets.push(ids.len() as i64);
        }
        Ok((ids.into_pyarray(py), offsets.into_pyarray(py)))
    }

    /// Whether rendering calls the template's `strftime_now()` (pass `now`).
    #[getter]
    fn reads_clock(&self) -> bool {
        self.inner.reads_clock()
    }

    /// `"transformers"` or `"mistral-common"`: the reference this encoder reproduces.
    #[getter]
    fn reference(&self) -> &'static str {
        match self.inner.route() {
            Route::Transformers => "transformers",
            Route::MistralCommon => "mistral-common",
        }
    }

    #[pyo3(signature = (messages, add_generation_prompt=false, sanitize_control_tokens=true, kwargs=None, system=None, merge_consecutive=false, now=None, continue_final_message=false))]
    #[allow(clippy::too_many_arguments)]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
        add_generation_prompt: bool,
        sanitize_control_tokens: bool,
        kwargs: Option<&Bound<'py, PyDict>>,
        system: Option<&str>,
        merge_consecutive: bool,
        now: Option<(i32, u32, u32, u32, u32, u32)>,
        continue_final_message: bool,
    ) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let (messages, options) = request(
            messages,
            CallOptions {
                add_generation_prompt,
                sanitize_control_tokens,
                kwargs,
                system,
                merge_consecutive,
                raw: self.inner.is_jinja(),
                now,
                continue_final_message,
            },
        )?;
        let ids = py.detach(|| guarded(|| self.inner.encode(&messages, &options)))?;
        Ok(ids.into_pyarray(py))
    }

    #[pyo3(signature = (messages, add_generation_prompt=false, kwargs=None, system=None, merge_consecutive=false, now=None, continue_final_message=false))]
    #[allow(clippy::too_many_arguments)]
    fn render(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        add_generation_prompt: bool,
        kwargs: Option<&Bound<'_, PyDict>>,
        system: Option<&str>,
        merge_consecutive: bool,
        now: Option<(i32, u32, u32, u32, u32, u32)>,
        continue_final_message: bool,
    ) -> PyResult<String> {
        let (messages, options) = request(
            messages,
            CallOptions {
                add_generation_prompt,
                sanitize_control_tokens: true,
                kwargs,
                system,
                merge_consecutive,
                raw: self.inner.is_jinja(),
                now,
                continue_final_message,
            },
        )?;
        py.detach(|| guarded(|| self.inner.render(&messages, &options)))
    }

    /// One conversation for training: `(ids, mask or None, truncation or None,
    /// message_indices or None, from_content or None)`; a truncation is `(policy,
    /// original_length, dropped_tokens, dropped_messages)`.
    #[pyo3(signature = (messages, add_generation_prompt=false, sanitize_control_tokens=true, kwargs=None, system=None, merge_consecutive=false, now=None, continue_final_message=false, mask=false, train_on="all_assistant", max_length=None, truncation=None, provenance=false))]
    #[allow(clippy::type_complexity, clippy::too_many_arguments)]
    fn encode_training<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
        add_generation_prompt: bool,
        sanitize_control_tokens: bool,
        kwargs: Option<&Bound<'py, PyDict>>,
        system: Option<&str>,
        merge_consecutive: bool,
        now: Option<(i32, u32, u32, u32, u32, u32)>,
        continue_final_message: bool,
        mask: bool,
        train_on: &str,
        max_length: Option<usize>,
        truncation: Option<&str>,
        provenance: bool,
    ) -> PyResult<(
        Bound<'py, PyArray1<u32>>,
        Option<Bound<'py, PyArray1<u8>>>,
        Option<TruncationTuple>,
        Option<Bound<'py, PyArray1<i32>>>,
        Option<Bound<'py, PyArray1<bool>>>,
    )> {
        let training = training_options(mask, train_on, max_length, truncation, provenance)?;
        let (messages, options) = request(
            messages,
            CallOptions {
                add_generation_prompt,
                sanitize_control_tokens,
                kwargs,
                system,
                merge_consecutive,
                raw: self.inner.is_jinja(),
                now,
                continue_final_message,
            },
        )?;
        let chat = py.detach(|| {
            guarded(|| {
                crate::training::encode_for_training(&self.inner, &messages, &options, &training)
            })
        })?;
        let (indices, origins) = match chat.provenance {
            Some(p) => (
                Some(p.message_indices.into_pyarray(py)),
                Some(p.from_content.into_pyarray(py)),
            ),
            None => (None, None),
        };
        Ok((
            chat.ids.into_pyarray(py),
            mask.then(|| chat.mask.into_pyarray(py)),
            chat.truncation.map(truncation_tuple),
            indices,
            origins,
        ))
    }

    /// Many conversations in parallel: `(ids, offsets, mask or None, truncations, errors)`,
    /// truncations as `(index, policy, original_length, dropped_tokens, dropped_messages)`,
    /// errors (with `on_error="collect"`) as `(index, message)`.
    #[pyo3(signature = (conversations, add_generation_prompt=false, sanitize_control_tokens=true, kwargs=None, num_threads=None, system=None, merge_consecutive=false, now=None, continue_final_message=false, mask=false, train_on="all_assistant", max_length=None, truncation=None, on_error="raise"))]
    #[allow(clippy::type_complexity, clippy::too_many_arguments)]
    fn encode_batch<'py>(
        &self,
        py: Python<'py>,
        conversations: &Bound<'py, PyAny>,
        add_generation_prompt: bool,
        sanitize_control_tokens: bool,
        kwargs: Option<&Bound<'py, PyDict>>,
        num_threads: Option<usize>,
        system: Option<&str>,
        merge_consecutive: bool,
        now: Option<(i32, u32, u32, u32, u32, u32)>,
        continue_final_message: bool,
        mask: bool,
        train_on: &str,
        max_length: Option<usize>,
        truncation: Option<&str>,
        on_error: &str,
    ) -> PyResult<(
        Bound<'py, PyArray1<u32>>,
        Bound<'py, PyArray1<i64>>,
        Option<Bound<'py, PyArray1<u8>>>,
        Vec<(usize, TruncationTuple)>,
        Vec<(usize, String)>,
    )> {
        let on_error: OnError = on_error
            .parse()
            .map_err(|e: TemplateError| to_py_err(e.into()))?;
        let batch_options = BatchOptions {
            training: training_options(mask, train_on, max_length, truncation, false)?,
            on_error,
            num_threads,
        };
        let items = sequence_items(
            conversations,
            "conversations must be a list of conversations (lists of message dicts)",
        )
        .map_err(|e| to_py_err(e.into()))?;
        let generic = self.inner.is_jinja();
        let convs: Vec<Result<Vec<Message>, TemplateError>> = items
            .iter()
            .map(|conv| messages_from_py(conv, generic))
            .collect();
        let options = options(CallOptions {
            add_generation_prompt,
            sanitize_control_tokens,
            kwargs,
            system,
            merge_consecutive,
            raw: false,
            now,
            continue_final_message,
        })?;
        let batch = py.detach(|| {
            guarded(|| {
                self.inner
                    .encode_batch_with(&convs, &options, &batch_options)
            })
        })?;
        Ok((
            batch.ids.into_pyarray(py),
            batch.offsets.into_pyarray(py),
            mask.then(|| batch.mask.into_pyarray(py)),
            batch
                .truncations
                .into_iter()
                .map(|(i, t)| (i, truncation_tuple(t)))
                .collect(),
            batch
                .errors
                .into_iter()
                .map(|(i, e)| (i, e.to_string()))
                .collect(),
        ))
    }

    /// Findings as `(code, message index or None, explanation)` tuples.
    #[pyo3(signature = (messages, add_generation_prompt=false, kwargs=None, system=None, merge_consecutive=false, for_generation=false, add_special_tokens=false, now=None, continue_final_message=false))]
    #[allow(clippy::too_many_arguments)]
    fn lint(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        add_generation_prompt: bool,
        kwargs: Option<&Bound<'_, PyDict>>,
        system: Option<&str>,
        merge_consecutive: bool,
        for_generation: bool,
        add_special_tokens: bool,
        now: Option<(i32, u32, u32, u32, u32, u32)>,
        continue_final_message: bool,
    ) -> PyResult<Vec<(&'static str, Option<usize>, String)>> {
        let (messages, options) = request(
            messages,
            CallOptions {
                add_generation_prompt,
                sanitize_control_tokens: true,
                kwargs,
                system,
                merge_consecutive,
                raw: self.inner.is_jinja(),
                now,
                continue_final_message,
            },
        )?;
        let context = LintContext {
            for_generation,
            add_special_tokens,
        };
        let findings =
            py.detach(|| guarded(|| Ok(self.inner.lint(&messages, &options, context))))?;
        Ok(findings
            .into_iter()
            .map(|f| (f.code, f.message, f.explanation))
            .collect())
    }

    /// The encoder's state as bytes (what `chatids.Encoder` pickles): the tokenizer and the
    /// template travel with it, so `from_bytes` reads no file.
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let state = py.detach(|| guarded(|| self.inner.to_bytes()))?;
        Ok(pyo3::types::PyBytes::new(py, &state))
    }

    /// Rebuild an encoder from `to_bytes()`; reads no file. Raises `CheckpointError` on bytes
    /// that are not a state of this chatids version.
    #[staticmethod]
    fn from_bytes(py: Python<'_>, state: &[u8]) -> PyResult<Self> {
        let encoder = py.detach(|| guarded(|| Encoder::from_bytes(state)))?;
        Ok(PyEncoder {
            inner: Arc::new(encoder),
        })
    }
}

/// Encode texts with a SentencePiece `.model` file (a test hook for the Rust encoder).
#[pyfunction]
fn _sentencepiece_encode(
    py: Python<'_>,
    model_path: std::path::PathBuf,
    texts: Vec<String>,
) -> PyResult<Vec<Vec<u32>>> {
    let sp =
        crate::text::sentencepiece::SentencePieceBpe::from_file(&model_path).map_err(to_py_err)?;
    py.detach(|| {
        guarded(|| {
            Ok(texts
                .iter()
                .map(|t| {
                    let mut ids = Vec::new();
                    sp.encode(t, &mut ids);
                    ids
                })
                .collect())
        })
    })
}

/// Encode texts with a `tekken.json` file (a test hook for the Rust encoder).
#[pyfunction]
fn _tekken_encode(
    py: Python<'_>,
    model_path: std::path::PathBuf,
    texts: Vec<String>,
) -> PyResult<Vec<Vec<u32>>> {
    let tekken = crate::text::tekken::Tekken::from_file(&model_path).map_err(to_py_err)?;
    py.detach(|| {
        guarded(|| {
            texts
                .iter()
                .map(|t| {
                    let mut ids = Vec::new();
                    tekken.encode(t, &mut ids)?;
                    Ok(ids)
                })
                .collect()
        })
    })
}

/// Render a chat template with the chatids Jinja engine (a test hook for `template`):
/// `context_json` is a JSON object of top-level variables, `now` what `strftime_now()` reads.
/// Errors are `ValueError`s: "compile: ...", "raised: <message>", "needs clock", "failed: ...".
#[pyfunction]
#[pyo3(signature = (template, context_json, now=None))]
fn _jinja_render(
    py: Python<'_>,
    template: &str,
    context_json: &str,
    now: Option<(i32, u32, u32, u32, u32, u32)>,
) -> PyResult<String> {
    use crate::template::{ChatTemplate, RenderError};
    let context: serde_json::Map<String, serde_json::Value> = serde_json::from_str(context_json)
        .map_err(|e| PyValueError::new_err(format!("context_json: {e}")))?;
    let now = now.map(clock);
    py.detach(|| {
        let t = ChatTemplate::compile(template).map_err(|e| format!("compile: {e}"))?;
        t.render(&context, now).map_err(|e| match e {
            RenderError::Raised(m) => format!("raised: {m}"),
            RenderError::NeedsClock => "needs clock".to_string(),
            RenderError::Failed(m) => format!("failed: {m}"),
        })
    })
    .map_err(PyValueError::new_err)
}

/// The tokenizer chatids rebuilds from a GGUF file (serialized as `tokenizer.json`) and the
/// file's chat template (a test hook for `checkpoint::gguf`).
#[pyfunction]
fn _gguf_tokenizer_json(py: Python<'_>, path: std::path::PathBuf) -> PyResult<(String, String)> {
    py.detach(|| {
        guarded(|| {
            let checkpoint = crate::checkpoint::gguf::load(&path)?;
            let json = checkpoint
                .tokenizer
                .to_string(false)
                .map_err(|e| Error::Tokenizer(e.to_string()))?;
            Ok((json, checkpoint.chat_template))
        })
    })
}

/// The arrays of `chatids.pack`: first-fit decreasing over `lengths` (tokens kept of each
/// conversation; 0 = not placed), then the rows, all flat: `(input_ids, labels, position_ids,
/// attention_mask, sequence_ids, conversation_index, cu_seqlens, row_offsets, members)`.
#[pyfunction]
#[pyo3(signature = (ids, offsets, lengths, seq_len, pad_id, labels=None))]
#[allow(clippy::type_complexity)]
fn _pack<'py>(
    py: Python<'py>,
    ids: numpy::PyReadonlyArray1<'py, u32>,
    offsets: numpy::PyReadonlyArray1<'py, i64>,
    lengths: numpy::PyReadonlyArray1<'py, i64>,
    seq_len: usize,
    pad_id: i64,
    labels: Option<numpy::PyReadonlyArray1<'py, i64>>,
) -> PyResult<(
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i32>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i32>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
)> {
    use crate::packing::{fill_into, first_fit_decreasing, PackedRowsMut};
    use numpy::PyArrayMethods;
    let contiguous = |e: numpy::AsSliceError| PyValueError::new_err(format!("_pack: {e}"));
    let ids = ids.as_slice().map_err(contiguous)?;
    let offsets = offsets.as_slice().map_err(contiguous)?;
    let labels = labels
        .as_ref()
        .map(|l| l.as_slice())
        .transpose()
        .map_err(contiguous)?;
    let lengths = lengths_arg(&lengths, "_pack")?;
    let packing =
        packing_call(py.detach(|| {
            catch_unwind(AssertUnwindSafe(|| first_fit_decreasing(&lengths, seq_len)))
        }))?;
    // numpy allocates the outputs (its allocator asks for huge pages, which matters at this size).
    let total = packing.num_rows() * seq_len;
    let input_ids = PyArray1::<i64>::zeros(py, total, false);
    let out_labels = PyArray1::<i64>::zeros(py, total, false);
    let position_ids = PyArray1::<i64>::zeros(py, total, false);
    let attention_mask = PyArray1::<i64>::zeros(py, total, false);
    let sequence_ids = PyArray1::<i32>::zeros(py, total, false);
    let conversation_index = PyArray1::<i64>::zeros(py, total, false);
    let cu_seqlens = {
        let mut a = input_ids.readwrite();
        let mut b = out_labels.readwrite();
        let mut c = position_ids.readwrite();
        let mut d = attention_mask.readwrite();
        let mut e = sequence_ids.readwrite();
        let mut f = conversation_index.readwrite();
        let out = PackedRowsMut {
            input_ids: a.as_slice_mut().map_err(contiguous)?,
            labels: b.as_slice_mut().map_err(contiguous)?,
            position_ids: c.as_slice_mut().map_err(contiguous)?,
            attention_mask: d.as_slice_mut().map_err(contiguous)?,
            sequence_ids: e.as_slice_mut().map_err(contiguous)?,
            conversation_index: f.as_slice_mut().map_err(contiguous)?,
        };
        packing_call(py.detach(|| {
            catch_unwind(AssertUnwindSafe(|| {
                fill_into(ids, offsets, labels, &lengths, &packing, pad_id, out)
            }))
        }))?
    };
    let as_i64 = |v: Vec<usize>| v.into_iter().map(|x| x as i64).collect::<Vec<i64>>();
    Ok((
        input_ids,
        out_labels,
        position_ids,
        attention_mask,
        sequence_ids,
        conversation_index,
        cu_seqlens.into_pyarray(py),
        as_i64(packing.row_offsets).into_pyarray(py),
        as_i64(packing.members).into_pyarray(py),
    ))
}

/// The `lengths` argument of `_pack`/`_pad` (`what`) as sizes: contiguous, none negative.
fn lengths_arg(lengths: &numpy::PyReadonlyArray1<'_, i64>, what: &str) -> PyResult<Vec<usize>> {
    lengths
        .as_slice()
        .map_err(|e| PyValueError::new_err(format!("{what}: {e}")))?
        .iter()
        .map(|&l| usize::try_from(l))
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|_| PyValueError::new_err(format!("{what}: negative length")))
}

/// A packing result as a Python error: `ValueError` for bad input, `RuntimeError` for a panic.
fn packing_call<T>(
    result: std::thread::Result<Result<T, crate::packing::PackError>>,
) -> PyResult<T> {
    match result {
        Ok(done) => done.map_err(|e| PyValueError::new_err(e.to_string())),
        Err(_) => Err(PyRuntimeError::new_err(
            "chatids internal error (please report): packing panicked",
        )),
    }
}

/// The arrays of `Batch.to_padded`: one row of `width` per conversation, its first
/// `lengths[i]` tokens then padding (before them with `left`): `(input_ids, attention_mask,
/// labels, assistant_mask)`, the last two None unless given.
#[pyfunction]
#[pyo3(signature = (ids, offsets, lengths, width, pad_id, left, labels=None, assistant_mask=None))]
#[allow(clippy::type_complexity, clippy::too_many_arguments)]
fn _pad<'py>(
    py: Python<'py>,
    ids: numpy::PyReadonlyArray1<'py, u32>,
    offsets: numpy::PyReadonlyArray1<'py, i64>,
    lengths: numpy::PyReadonlyArray1<'py, i64>,
    width: usize,
    pad_id: i64,
    left: bool,
    labels: Option<numpy::PyReadonlyArray1<'py, i64>>,
    assistant_mask: Option<numpy::PyReadonlyArray1<'py, u8>>,
) -> PyResult<(
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    Option<Bound<'py, PyArray1<i64>>>,
    Option<Bound<'py, PyArray1<i64>>>,
)> {
    use crate::packing::{fill_padded_into, PaddedRowsMut};
    use numpy::PyArrayMethods;
    let contiguous = |e: numpy::AsSliceError| PyValueError::new_err(format!("_pad: {e}"));
    let ids = ids.as_slice().map_err(contiguous)?;
    let offsets = offsets.as_slice().map_err(contiguous)?;
    let labels = labels
        .as_ref()
        .map(|l| l.as_slice())
        .transpose()
        .map_err(contiguous)?;
    let assistant_mask = assistant_mask
        .as_ref()
        .map(|m| m.as_slice())
        .transpose()
        .map_err(contiguous)?;
    let lengths = lengths_arg(&lengths, "_pad")?;
    let total = lengths
        .len()
        .checked_mul(width)
        .ok_or_else(|| PyValueError::new_err("_pad: too many rows"))?;
    // numpy allocates the outputs (its allocator asks for huge pages, which matters at this size).
    let input_ids = PyArray1::<i64>::zeros(py, total, false);
    let attention_mask = PyArray1::<i64>::zeros(py, total, false);
    let out_labels = labels.map(|_| PyArray1::<i64>::zeros(py, total, false));
    let out_mask = assistant_mask.map(|_| PyArray1::<i64>::zeros(py, total, false));
    {
        let mut a = input_ids.readwrite();
        let mut b = attention_mask.readwrite();
        let mut c = out_labels.as_ref().map(|x| x.readwrite());
        let mut d = out_mask.as_ref().map(|x| x.readwrite());
        let out = PaddedRowsMut {
            input_ids: a.as_slice_mut().map_err(contiguous)?,
            attention_mask: b.as_slice_mut().map_err(contiguous)?,
            labels: c
                .as_mut()
                .map(|x| x.as_slice_mut())
                .transpose()
                .map_err(contiguous)?,
            assistant_mask: d
                .as_mut()
                .map(|x| x.as_slice_mut())
                .transpose()
                .map_err(contiguous)?,
        };
        packing_call(py.detach(|| {
            catch_unwind(AssertUnwindSafe(|| {
                fill_padded_into(
                    ids,
                    offsets,
                    labels,
                    assistant_mask,
                    &lengths,
                    width,
                    pad_id,
                    left,
                    out,
                )
            }))
        }))?;
    }
    Ok((input_ids, attention_mask, out_labels, out_mask))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEncoder>()?;
    m.add_class::<session::PySession>()?;
    m.add_function(wrap_pyfunction!(_sentencepiece_encode, m)?)?;
    m.add_function(wrap_pyfunction!(_tekken_encode, m)?)?;
    m.add_function(wrap_pyfunction!(_jinja_render, m)?)?;
    m.add_function(wrap_pyfunction!(_gguf_tokenizer_json, m)?)?;
    m.add_function(wrap_pyfunction!(_pack, m)?)?;
    m.add_function(wrap_pyfunction!(_pad, m)?)?;
    let template_error = m.py().get_type::<ChatTemplateError>();
    // What every ChatTemplateError carries (errors raised in Python keep these defaults).
    template_error.setattr("refusal", "input")?;
    template_error.setattr("message_index", None::<usize>)?;
    template_error.setattr("conversation_index", None::<usize>)?;
    m.add("ChatTemplateError", template_error)?;
    m.add("CheckpointError", m.py().get_type::<CheckpointError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("FORMATS", crate::formats::FORMAT_NAMES.to_vec())?;
    m.add(
        "MISTRAL_COMMON_FORMATS",
        crate::mistral_common::FORMAT_NAMES.to_vec(),
    )?;
    Ok(())
}
