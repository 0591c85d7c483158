//! Bindings of [`crate::completion`]: a parsed completion and its deltas as Python dicts, and
//! `chatids._core.CompletionStream`.
//!
//! The message dict has the shape `encode` takes: `role`, `content`, the reasoning under the
//! key the template reads, and `tool_calls` as `[{"id", "type": "function", "function":
//! {"name", "arguments"}}]` with `arguments` the JSON value when the model wrote valid JSON and
//! the text otherwise.

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::encoder::PyEncoder;
use super::guarded;
use crate::completion::{Delta, ParsedCompletion, Stop, StreamParser, ToolCall};
use crate::error::Error;
use crate::Encoder;

/// A JSON value as the Python value `json.loads` gives (dicts keep their key order).
fn json_to_py<'py>(py: Python<'py>, value: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    use serde_json::Value;
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => b.into_pyobject(py)?.to_owned().into_any(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any(),
            (None, Some(u)) => u.into_pyobject(py)?.into_any(),
            // Integers beyond 64 bits arrive as floats here; json.loads would keep them exact.
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => s.into_pyobject(py)?.into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(json_to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, json_to_py(py, v)?)?;
            }
            dict.into_any()
        }
    })
}

fn tool_call_to_py<'py>(py: Python<'py>, call: &ToolCall) -> PyResult<Bound<'py, PyDict>> {
    let function = PyDict::new(py);
    let arguments = match &call.arguments {
        Some(value) => json_to_py(py, value)?,
        None => call.arguments_text.clone().into_pyobject(py)?.into_any(),
    };
    if call.arguments_first {
        function.set_item("arguments", &arguments)?;
    }
    function.set_item("name", &call.name)?;
    if !call.arguments_first {
        function.set_item("arguments", arguments)?;
    }
    let dict = PyDict::new(py);
    dict.set_item("id", &call.id)?;
    dict.set_item("type", "function")?;
    dict.set_item("function", function)?;
    Ok(dict)
}

/// The text of a stop, or `"length"`.
fn stop_text(encoder: &Encoder, stop: Stop) -> (String, Option<u32>) {
    match stop {
        Stop::Token(id) => (encoder.decode(&[id]).unwrap_or_default(), Some(id)),
        Stop::Length => ("length".to_string(), None),
    }
}

/// `(message, stop, stop_id, tool_call_pending, remainder, after_stop, arguments_text,
/// problems)`, what
/// `chatids.ParsedCompletion` is built from.
pub(super) fn parsed_to_py<'py>(
    py: Python<'py>,
    encoder: &Encoder,
    parsed: &ParsedCompletion,
) -> PyResult<Bound<'py, PyDict>> {
    let message = PyDict::new(py);
    message.set_item("role", "assistant")?;
    if parsed.content_null {
        message.set_item("content", py.None())?;
    } else {
        message.set_item("content", &parsed.content)?;
    }
    if let Some(reasoning) = &parsed.reasoning {
        message.set_item(parsed.reasoning_key, reasoning)?;
    }
    if !parsed.tool_calls.is_empty() {
        let calls = PyList::empty(py);
        for call in &parsed.tool_calls {
            calls.append(tool_call_to_py(py, call)?)?;
        }
        message.set_item("tool_calls", calls)?;
    }
    let (stop, stop_id) = stop_text(encoder, parsed.stop);
    let out = PyDict::new(py);
    out.set_item("message", message)?;
    out.set_item("stop", stop)?;
    out.set_item("stop_id", stop_id)?;
    out.set_item("tool_call_pending", parsed.tool_call_pending)?;
    out.set_item("remainder", &parsed.remainder)?;
    out.set_item("after_stop", parsed.after_stop.clone())?;
    out.set_item(
        "arguments_text",
        parsed
            .tool_calls
            .iter()
            .map(|c| c.arguments_text.clone())
            .collect::<Vec<_>>(),
    )?;
    let problems = PyList::empty(py);
    for p in &parsed.problems {
        let d = PyDict::new(py);
        d.set_item("kind", p.kind.name())?;
        d.set_item("index", p.index)?;
        d.set_item("detail", &p.detail)?;
        problems.append(d)?;
    }
    out.set_item("problems", problems)?;
    Ok(out)
}

fn delta_to_py<'py>(py: Python<'py>, delta: &Delta) -> PyResult<Bound<'py, PyDict>> {
    use pyo3::intern;
    let d = PyDict::new(py);
    let kind = intern!(py, "type");
    match delta {
        Delta::Content(text) => {
            d.set_item(kind, intern!(py, "content"))?;
            d.set_item(intern!(py, "text"), text)?;
        }
        Delta::Reasoning(text) => {
            d.set_item(kind, intern!(py, "reasoning"))?;
            d.set_item(intern!(py, "text"), text)?;
        }
        Delta::ToolCallStart { index, id, name } => {
            d.set_item(kind, intern!(py, "tool_call"))?;
            d.set_item(intern!(py, "index"), index)?;
            d.set_item(intern!(py, "id"), id)?;
            d.set_item(intern!(py, "name"), name)?;
        }
        Delta::ToolCallArguments { index, text } => {
            d.set_item(kind, intern!(py, "arguments"))?;
            d.set_item(intern!(py, "index"), index)?;
            d.set_item(intern!(py, "text"), text)?;
        }
    }
    Ok(d)
}

/// A completion read as it is generated (:meth:`chatids.Encoder.stream_parser`).
///
/// Feed it the generated ids one at a time or a few at a time; each `feed` returns the
/// deltas those ids complete. The ``done`` delta comes when a stop token is fed, or from
/// `finish` when the ids ran out (``stop == "length"``). Whatever the chunking, the
/// ``completion`` of ``done`` is the one `Encoder.parse_completion` gives for the
/// same ids (the stream ends at its stop token: ids fed after it are not read, and its
/// ``after_stop`` is empty). For a turn the
/// grammar reads whole (``completion.complete``), the content deltas add up to its content and
/// each call's argument deltas to the text it was read from; a call that turns out malformed or
/// is cut by the length limit may have sent deltas before ``done`` moves it to ``remainder``.
/// Each id costs O(1): nothing is decoded twice.
#[pyclass(name = "CompletionStream", module = "chatids._core", frozen)]
pub(super) struct PyCompletionStream {
    encoder: Py<PyEncoder>,
    /// What builds the done delta's completion from its dict (`chatids.ParsedCompletion`).
    completion_type: Py<PyAny>,
    inner: Mutex<(StreamParser, usize, bool)>,
}

impl PyCompletionStream {
    pub(super) fn new(
        encoder: Py<PyEncoder>,
        completion_type: Py<PyAny>,
        parser: StreamParser,
    ) -> Self {
        PyCompletionStream {
            encoder,
            completion_type,
            inner: Mutex::new((parser, 0, false)),
        }
    }

    /// The deltas, then the `done` delta when the turn ended (`end`, or a stop token).
    fn deltas<'py>(&self, py: Python<'py>, end: bool) -> PyResult<Bound<'py, PyList>> {
        let encoder = &self.encoder.get().inner;
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (parser, _, done_sent) = &mut *guard;
        let finished = (end || parser.stopped()) && !*done_sent;
        // A stream ends at its stop token: what is fed after it is not read, whatever the
        // chunking (the done completion's after_stop is empty).
        let parsed = if finished {
            let mut parsed = guarded(|| Ok(parser.finish()))?;
            parsed.after_stop.clear();
            Some(parsed)
        } else {
            None
        };
        let out = PyList::empty(py);
        for delta in parser.take_deltas() {
            out.append(delta_to_py(py, &delta)?)?;
        }
        if let Some(parsed) = parsed {
            *done_sent = true;
            let d = PyDict::new(py);
            d.set_item("type", "done")?;
            let fields = parsed_to_py(py, encoder, &parsed)?;
            d.set_item("stop", fields.get_item("stop")?)?;
            d.set_item(
                "completion",
                self.completion_type.bind(py).call((), Some(&fields))?,
            )?;
            out.append(d)?;
        }
        Ok(out)
    }
}

#[pymethods]
impl PyCompletionStream {
    /// Read `ids` (the next generated id, or a list of them); the deltas they complete.
    fn feed<'py>(&self, py: Python<'py>, ids: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let ids: Vec<u32> = match ids.extract::<u32>() {
            Ok(id) => vec![id],
            Err(_) => ids.extract()?,
        };
        {
            let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            let (parser, fed, _) = &mut *guard;
            let start = *fed;
            let result = guarded(|| {
                parser.feed(&ids, start).map_err(|e| {
                    Error::Completion(format!(
                        "completion id {} at index {} is not in the vocabulary",
                        e.id, e.index
                    ))
                })
            });
            // The ids before a bad one were read; the bad one was not.
            *fed = match &result {
                Ok(()) => start + ids.len(),
                Err(_) => {
                    start
                        + ids
                            .iter()
                            .position(|&id| !parser.knows(id))
                            .unwrap_or(ids.len())
                }
            };
            result?;
        }
        self.deltas(py, false)
    }

    /// End the completion (the ids ran out): the remaining deltas and `done`.
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.deltas(py, true)
    }
}
