//! The PyO3 bindings (`chatids._core`): type conversion only.
//!
//! Python objects are converted to [`crate::message::Message`]s (with errors that name the
//! message and the field) and the options of a call to the core's option structs, once; the
//! core runs with the GIL released, and ids come back as numpy arrays. Rust panics are caught
//! and raised as `RuntimeError`, never as an abort.
//!
//! One file per job: this one registers the module and maps errors; `convert` turns messages
//! and template arguments into the core's types; `options` converts a call's options;
//! `encoder` and `session` are the two classes; `arrays` fills the padding and packing arrays
//! in place; `hooks` are the test hooks of the lower layers (the test suite runs them against
//! the wheel, so they ship in it); `allocator` is the module's memory allocator.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::error::Error;

mod allocator;
mod arrays;
mod completion;
mod convert;
mod encoder;
mod hooks;
mod options;
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
        Error::Completion(msg) => pyo3::exceptions::PyValueError::new_err(msg),
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

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    allocator::configure();
    m.add_class::<encoder::PyEncoder>()?;
    m.add_class::<session::PySession>()?;
    m.add_class::<completion::PyCompletionStream>()?;
    m.add_function(wrap_pyfunction!(hooks::_sentencepiece_encode, m)?)?;
    m.add_function(wrap_pyfunction!(hooks::_tekken_encode, m)?)?;
    m.add_function(wrap_pyfunction!(hooks::_jinja_render, m)?)?;
    m.add_function(wrap_pyfunction!(hooks::_gguf_tokenizer_json, m)?)?;
    m.add_function(wrap_pyfunction!(arrays::_pack, m)?)?;
    m.add_function(wrap_pyfunction!(arrays::_pad, m)?)?;
    let template_error = m.py().get_type::<ChatTemplateError>();
    // What every ChatTemplateError carries (errors raised in Python keep these defaults).
    template_error.setattr("refusal", "input")?;
    template_error.setattr("message_index", None::<usize>)?;
    template_error.setattr("conversation_index", None::<usize>)?;
    m.add("ChatTemplateError", template_error)?;
    m.add("CheckpointError", m.py().get_type::<CheckpointError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("FORMATS", crate::render::native::FORMAT_NAMES.to_vec())?;
    m.add(
        "MISTRAL_COMMON_FORMATS",
        crate::mistral_common::FORMAT_NAMES.to_vec(),
    )?;
    Ok(())
}
