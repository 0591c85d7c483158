//! `chatids._core.Encoder`: the compiled encoder. Each call converts its messages and its one
//! options object, runs the core with the GIL released, and returns numpy arrays.

use std::sync::Arc;

use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use super::convert::{messages_from_py, pair_row_from_py, sequence_items};
use super::options::CallOptions;
use super::{completion, guarded, session, to_py_err};
use crate::encoder::{Encoder, LoadOptions, Route};
use crate::error::TemplateError;
use crate::message::Message;
use crate::training::Truncated;

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

/// The compiled core of a chatids encoder. Use `chatids.Encoder`, which wraps it.
#[pyclass(name = "Encoder", module = "chatids._core", frozen)]
pub(super) struct PyEncoder {
    pub(super) inner: Arc<Encoder>,
    /// What loading did with the compiled cache (`from_pretrained(cache_dir=...)`).
    cache_use: Option<String>,
}

impl From<Encoder> for PyEncoder {
    fn from(encoder: Encoder) -> Self {
        PyEncoder {
            inner: Arc::new(encoder),
            cache_use: None,
        }
    }
}

impl PyEncoder {
    /// The transformers route's text encoders, or an error on the mistral-common route.
    fn transformers_text(&self) -> PyResult<&crate::text::Selected> {
        self.inner.text_encoder().ok_or_else(|| {
            PyValueError::new_err("the mistral-common route does not use tokenizer.json")
        })
    }

    /// A conversation's message dicts, whole for the Jinja path (it renders from them).
    fn messages(&self, messages: &Bound<'_, PyAny>) -> PyResult<Vec<Message>> {
        messages_from_py(messages, self.inner.is_jinja()).map_err(|e| to_py_err(e.into()))
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
    #[pyo3(signature = (path, format=None, reference=None, chat_template=None, allow_external=false, unknown_template_args="error", cache_dir=None))]
    #[allow(clippy::too_many_arguments)]
    fn from_pretrained(
        py: Python<'_>,
        path: std::path::PathBuf,
        format: Option<String>,
        reference: Option<String>,
        chat_template: Option<String>,
        allow_external: bool,
        unknown_template_args: &str,
        cache_dir: Option<std::path::PathBuf>,
    ) -> PyResult<Self> {
        let unknown_template_args = unknown_template_args.parse().map_err(to_py_err)?;
        let (encoder, cache_use) = py.detach(|| {
            guarded(|| {
                let reference = reference.as_deref().map(Route::parse).transpose()?;
                let options = LoadOptions {
                    format: format.as_deref(),
                    reference,
                    chat_template: chat_template.as_deref(),
                    allow_external,
                    unknown_template_args,
                };
                match &cache_dir {
                    Some(dir) => Encoder::load_cached(&path, &options, dir)
                        .map(|(e, used)| (e, Some(used.to_string()))),
                    None => Encoder::load_with(&path, &options).map(|e| (e, None)),
                }
            })
        })?;
        Ok(PyEncoder {
            inner: Arc::new(encoder),
            cache_use,
        })
    }

    /// What loading did with the compiled cache, in a few words (`None` without a cache).
    #[getter]
    fn cache_use(&self) -> Option<String> {
        self.cache_use.clone()
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
        Ok(PyEncoder::from(encoder))
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

    /// `ids` (generated after the generation prompt) read back into an assistant message:
    /// the dict `chatids.ParsedCompletion` is built from.
    /// `tools`: the names of the tools offered (`None`: not checked).
    #[pyo3(signature = (ids, tools=None))]
    fn parse_completion<'py>(
        &self,
        py: Python<'py>,
        ids: Vec<u32>,
        tools: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let tools = tools.map(std::sync::Arc::new);
        let parsed = py.detach(|| guarded(|| self.inner.parse_completion_for(&ids, tools)))?;
        completion::parsed_to_py(py, &self.inner, &parsed)
    }

    /// A parser fed the ids of one completion as they are generated.
    /// `completion_type` builds the done delta's completion from its fields (keyword arguments).
    #[pyo3(signature = (completion_type, tools=None))]
    fn stream_parser(
        slf: &Bound<'_, Self>,
        completion_type: Py<PyAny>,
        tools: Option<Vec<String>>,
    ) -> PyResult<completion::PyCompletionStream> {
        let tools = tools.map(std::sync::Arc::new);
        let parser = guarded(|| slf.get().inner.stream_parser_for(tools))?;
        Ok(completion::PyCompletionStream::new(
            slf.clone().unbind(),
            completion_type,
            parser,
        ))
    }

    /// The text of `ids`, as the tokenizer decodes them (special tokens included).
    fn decode(&self, py: Python<'_>, ids: Vec<u32>) -> PyResult<String> {
        py.detach(|| guarded(|| self.inner.decode(&ids)))
    }

    /// An empty append-only session with these render options.
    fn session(slf: &Bound<'_, Self>, options: CallOptions) -> session::PySession {
        session::PySession::new(
            slf.clone().unbind(),
            crate::session::Session::new(options.encode, options.on_rewrite),
        )
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
        text.lazy_tokenizer()
            .to_json()
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
        let batch = py.detach(|| guarded(|| self.inner.encode_rendered_batch(&texts, marked)))?;
        Ok((batch.ids.into_pyarray(py), batch.offsets.into_pyarray(py)))
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

    fn encode<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
        options: CallOptions,
    ) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let messages = self.messages(messages)?;
        let ids = py.detach(|| guarded(|| self.inner.encode(&messages, &options.encode)))?;
        Ok(ids.into_pyarray(py))
    }

    fn render(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        options: CallOptions,
    ) -> PyResult<String> {
        let messages = self.messages(messages)?;
        py.detach(|| guarded(|| self.inner.render(&messages, &options.encode)))
    }

    /// One conversation for training: `(ids, mask or None, truncation or None,
    /// message_indices or None, from_content or None)`; a truncation is `(policy,
    /// original_length, dropped_tokens, dropped_messages)`.
    #[allow(clippy::type_complexity)]
    fn encode_training<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
        options: CallOptions,
    ) -> PyResult<(
        Bound<'py, PyArray1<u32>>,
        Option<Bound<'py, PyArray1<u8>>>,
        Option<TruncationTuple>,
        Option<Bound<'py, PyArray1<i32>>>,
        Option<Bound<'py, PyArray1<bool>>>,
    )> {
        let messages = self.messages(messages)?;
        let training = &options.batch.training;
        let chat = py.detach(|| {
            guarded(|| {
                crate::training::encode_for_training(
                    &self.inner,
                    &messages,
                    &options.encode,
                    training,
                )
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
            training.mask.then(|| chat.mask.into_pyarray(py)),
            chat.truncation.map(truncation_tuple),
            indices,
            origins,
        ))
    }

    /// Many conversations in parallel: `(ids, offsets, mask or None, truncations, errors)`,
    /// truncations as `(index, policy, original_length, dropped_tokens, dropped_messages)`,
    /// errors (with `on_error="collect"`) as `(index, message)`.
    #[allow(clippy::type_complexity)]
    fn encode_batch<'py>(
        &self,
        py: Python<'py>,
        conversations: &Bound<'py, PyAny>,
        options: CallOptions,
    ) -> PyResult<(
        Bound<'py, PyArray1<u32>>,
        Bound<'py, PyArray1<i64>>,
        Option<Bound<'py, PyArray1<u8>>>,
        Vec<(usize, TruncationTuple)>,
        Vec<(usize, String)>,
    )> {
        let items = sequence_items(
            conversations,
            "conversations must be a list of conversations (lists of message dicts)",
        )
        .map_err(|e| to_py_err(e.into()))?;
        let jinja = self.inner.is_jinja();
        let items: Vec<Py<PyAny>> = items.into_iter().map(Bound::unbind).collect();
        // Converted a window at a time, as the batch asks (it holds two: the one being encoded
        // and the next, converted meanwhile).
        let convert = |range: std::ops::Range<usize>| {
            Python::attach(|py| {
                items[range]
                    .iter()
                    .map(|conv| messages_from_py(conv.bind(py), jinja))
                    .collect::<Vec<Result<Vec<Message>, TemplateError>>>()
            })
        };
        let batch = py.detach(|| {
            guarded(|| {
                self.inner
                    .encode_batch_from(items.len(), convert, &options.encode, &options.batch)
            })
        })?;
        Ok((
            batch.ids.into_pyarray(py),
            batch.offsets.into_pyarray(py),
            options
                .batch
                .training
                .mask
                .then(|| batch.mask.into_pyarray(py)),
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

    /// Rows of a prompt and `len(names)` completions each, in parallel: `(prompt ids, prompt
    /// offsets, [(ids, offsets, mask)] per completion, prompt_cut, errors)`, errors (with
    /// `on_error="collect"`) as `(index, message)`; `single`: one row, errors without its
    /// index. See [`crate::pairs`].
    #[allow(clippy::type_complexity)]
    fn encode_pairs<'py>(
        &self,
        py: Python<'py>,
        prompts: &Bound<'py, PyAny>,
        completions: &Bound<'py, PyAny>,
        names: Vec<String>,
        options: CallOptions,
        single: bool,
    ) -> PyResult<(
        Bound<'py, PyArray1<u32>>,
        Bound<'py, PyArray1<i64>>,
        Vec<(
            Bound<'py, PyArray1<u32>>,
            Bound<'py, PyArray1<i64>>,
            Bound<'py, PyArray1<u8>>,
        )>,
        Bound<'py, PyArray1<u32>>,
        Vec<(usize, String)>,
    )> {
        let bad = |e: TemplateError| to_py_err(e.into());
        let prompts = sequence_items(
            prompts,
            "prompts must be a list of prompts (lists of message dicts)",
        )
        .map_err(bad)?;
        let rows = sequence_items(
            completions,
            "completions must be a list, one entry per prompt",
        )
        .map_err(bad)?;
        if prompts.len() != rows.len() {
            return Err(PyValueError::new_err(format!(
                "{} prompts but {} completion rows",
                prompts.len(),
                rows.len()
            )));
        }
        let slots = names.len();
        let jinja = self.inner.is_jinja();
        let converted: Vec<crate::pairs::PairRow> = prompts
            .iter()
            .zip(&rows)
            .map(|(prompt, row)| {
                let items = sequence_items(row, "each row of completions must be a list")?;
                if items.len() != slots {
                    return Err(TemplateError::whole(format!(
                        "expected {slots} completion(s), got {}",
                        items.len()
                    )));
                }
                pair_row_from_py(prompt, &items, jinja)
            })
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let batch = py.detach(|| {
            guarded(|| {
                crate::pairs::encode_pair_batch(
                    &self.inner,
                    &converted,
                    slots,
                    &names,
                    &options.encode,
                    crate::pairs::PairBatchOptions {
                        on_error: options.batch.on_error,
                        num_threads: options.batch.num_threads,
                        single,
                    },
                )
            })
        })?;
        Ok((
            batch.prompts.ids.into_pyarray(py),
            batch.prompts.offsets.into_pyarray(py),
            batch
                .completions
                .into_iter()
                .map(|c| {
                    (
                        c.ids.into_pyarray(py),
                        c.offsets.into_pyarray(py),
                        c.mask.into_pyarray(py),
                    )
                })
                .collect(),
            batch.prompt_cut.into_pyarray(py),
            batch
                .errors
                .into_iter()
                .map(|(i, e)| (i, e.to_string()))
                .collect(),
        ))
    }

    /// Findings as `(code, message index or None, explanation)` tuples.
    fn lint(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        options: CallOptions,
    ) -> PyResult<Vec<(&'static str, Option<usize>, String)>> {
        let messages = self.messages(messages)?;
        let findings = py
            .detach(|| guarded(|| Ok(self.inner.lint(&messages, &options.encode, options.lint))))?;
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
        Ok(PyEncoder::from(encoder))
    }
}
