//! Test hooks of the lower layers, called by the test suite against the built wheel: the
//! SentencePiece and tekken text encoders on their own files, the Jinja engine on a bare
//! template, and the tokenizer rebuilt from a GGUF file.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::convert::clock;
use super::{guarded, to_py_err};

/// Encode texts with a SentencePiece `.model` file (a test hook for the Rust encoder).
#[pyfunction]
pub(super) fn _sentencepiece_encode(
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
pub(super) fn _tekken_encode(
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
pub(super) fn _jinja_render(
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
pub(super) fn _gguf_tokenizer_json(
    py: Python<'_>,
    path: std::path::PathBuf,
) -> PyResult<(String, String)> {
    py.detach(|| {
        guarded(|| {
            let checkpoint = crate::checkpoint::gguf::load(&path)?;
            let json = checkpoint.tokenizer.to_json()?;
            Ok((json, checkpoint.chat_template))
        })
    })
}
