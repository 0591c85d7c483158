//! Bindings of [`crate::session::Session`]: `chatids._core.Session`.

use std::sync::Mutex;

use numpy::{IntoPyArray, PyArray1};
use pyo3::prelude::*;

use super::convert::{message_from_py, messages_from_py};
use super::encoder::PyEncoder;
use super::{guarded, to_py_err};
use crate::error::TemplateError;
use crate::message::Message;
use crate::session::{Appended, Session};

/// An append-only conversation over one encoder. Use `chatids.Encoder.session`.
#[pyclass(name = "Session", module = "chatids._core", frozen)]
pub(super) struct PySession {
    encoder: Py<PyEncoder>,
    inner: Mutex<Session>,
}

impl PySession {
    pub(super) fn new(encoder: Py<PyEncoder>, session: Session) -> Self {
        PySession {
            encoder,
            inner: Mutex::new(session),
        }
    }

    /// Run `f` on the session with the GIL released.
    fn run<'py, T: Send>(
        &self,
        py: Python<'py>,
        f: impl FnOnce(&mut Session, &crate::Encoder) -> Result<T, crate::Error> + Send,
    ) -> PyResult<T> {
        let encoder = &self.encoder.get().inner;
        py.detach(|| {
            guarded(|| {
                let mut session = self.inner.lock().unwrap_or_else(|e| e.into_inner());
                f(&mut session, encoder)
            })
        })
    }

    /// `(start, ids[start:])` after a change.
    fn changed<'py>(
        &self,
        py: Python<'py>,
        appended: Appended,
    ) -> (usize, Bound<'py, PyArray1<u32>>) {
        let session = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (
            appended.start,
            session.ids()[appended.start..].to_vec().into_pyarray(py),
        )
    }

    /// Parse appended messages, numbering them after the session's messages in errors.
    fn parse(&self, messages: &Bound<'_, PyAny>) -> PyResult<Vec<Message>> {
        let (offset, raw) = {
            let session = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            (
                session.messages().len(),
                session.keeps_dicts(&self.encoder.get().inner),
            )
        };
        messages_from_py(messages, raw).map_err(|e| to_py_err(renumber(e, offset).into()))
    }
}

fn renumber(mut e: TemplateError, offset: usize) -> TemplateError {
    if let Some(m) = e.message.as_mut() {
        *m += offset;
    }
    e
}

#[pymethods]
impl PySession {
    /// Append messages; `(start, ids[start:])`: `start` is the old length unless the template
    /// rewrote earlier ids (`on_rewrite="reencode"`).
    fn append<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
    ) -> PyResult<(usize, Bound<'py, PyArray1<u32>>)> {
        let messages = self.parse(messages)?;
        let appended = self.run(py, move |s, enc| s.append(enc, messages))?;
        Ok(self.changed(py, appended))
    }

    /// Append the model's sampled ids and its parsed turn; `(start, ids[start:])`.
    fn append_completion<'py>(
        &self,
        py: Python<'py>,
        ids: Vec<u32>,
        message: &Bound<'py, PyAny>,
    ) -> PyResult<(usize, Bound<'py, PyArray1<u32>>)> {
        let (index, raw) = {
            let session = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            (
                session.messages().len(),
                session.keeps_dicts(&self.encoder.get().inner),
            )
        };
        let parse = |raw| message_from_py(message, index, raw).map_err(|e| to_py_err(e.into()));
        let mut parsed = parse(raw)?;
        if parsed.raw.is_none() && crate::message::is_tool_message(&parsed) {
            parsed = parse(true)?;
        }
        let message = parsed;
        let appended = self.run(py, move |s, enc| s.append_completion(enc, &ids, message))?;
        Ok(self.changed(py, appended))
    }

    /// The ids so far followed by the generation prompt.
    fn generation_prompt<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let ids = self.run(py, |s, enc| s.generation_prompt(enc))?;
        Ok(ids.into_pyarray(py))
    }

    /// The ids so far.
    #[getter]
    fn ids<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u32>> {
        let session = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        session.ids().to_vec().into_pyarray(py)
    }

    /// How many messages the session holds.
    #[getter]
    fn message_count(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .messages()
            .len()
    }
}
