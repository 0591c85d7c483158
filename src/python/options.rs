//! The options of one call, converted once: the dict every public method of
//! `chatids.Encoder` builds from its own arguments (`chatids._options.CallOptions`) into the
//! core's option structs.
//!
//! Keys are the Python parameter names; a missing key or `None` is the public default, and keys
//! that are not options (`self`, `messages`) are not read. Every rule about the values
//! (`system=`, `train_on=`, "truncation needs max_length", `on_error=`, `on_rewrite=`) is the
//! core's own parser.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyDict, PyString};

use super::convert::{clock, kwargs_from_py};
use super::to_py_err;
use crate::batch::BatchOptions;
use crate::encoder::EncodeOptions;
use crate::error::TemplateError;
use crate::lint::LintContext;
use crate::render::native::SystemPolicy;
use crate::session::OnRewrite;
use crate::training::TrainingOptions;

/// The options of one call, as the core takes them.
pub(super) struct CallOptions {
    /// What every render and encode takes.
    pub encode: EncodeOptions,
    /// Training columns, truncation, error handling and threads of a batch.
    pub batch: BatchOptions,
    /// How the caller will use a linted prompt.
    pub lint: LintContext,
    /// What a session does when an append would change its ids.
    pub on_rewrite: OnRewrite,
}

/// The value of `key` in `options`, or `default` when it is missing or `None`.
fn item<'py, T>(options: &Bound<'py, PyDict>, key: &Bound<'py, PyString>, default: T) -> PyResult<T>
where
    T: for<'a> FromPyObject<'a, 'py>,
{
    match options.get_item(key)? {
        Some(value) if !value.is_none() => value
            .extract::<T>()
            .map_err(|e| PyTypeError::new_err(format!("{key}: {}", Into::<PyErr>::into(e)))),
        _ => Ok(default),
    }
}

impl<'py> FromPyObject<'_, 'py> for CallOptions {
    type Error = PyErr;

    fn extract(obj: pyo3::Borrowed<'_, 'py, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        let o = obj.cast::<PyDict>()?;
        macro_rules! get {
            ($key:literal, $default:expr) => {
                item(&o, pyo3::intern!(py, $key), $default)?
            };
        }
        let kwargs: Option<Bound<'py, PyDict>> = get!("template_kwargs", None);
        let system: Option<PyBackedStr> = get!("system", None);
        let now: Option<(i32, u32, u32, u32, u32, u32)> = get!("now", None);
        let mask: bool = get!("return_assistant_mask", false);
        let train_on: Option<PyBackedStr> = get!("train_on", None);
        let max_length: Option<usize> = get!("max_length", None);
        let truncation: Option<PyBackedStr> = get!("truncation", None);
        let provenance: bool = get!("provenance", false);
        let on_error: Option<PyBackedStr> = get!("on_error", None);
        let on_rewrite: Option<PyBackedStr> = get!("on_rewrite", None);
        let add_generation_prompt: bool = get!("add_generation_prompt", false);
        let sanitize_control_tokens: bool = get!("sanitize_control_tokens", true);
        let merge_consecutive: bool = get!("merge_consecutive", false);
        let continue_final_message: bool = get!("continue_final_message", false);
        let num_threads: Option<usize> = get!("num_threads", None);
        let lint = LintContext {
            for_generation: get!("for_generation", false),
            add_special_tokens: get!("add_special_tokens", false),
        };
        let convert = || -> Result<CallOptions, TemplateError> {
            Ok(CallOptions {
                encode: EncodeOptions {
                    add_generation_prompt,
                    sanitize_control_tokens,
                    kwargs: kwargs_from_py(kwargs.as_ref())?,
                    system: SystemPolicy::parse(system.as_deref())?,
                    merge_consecutive,
                    now: now.map(clock),
                    continue_final_message,
                },
                batch: BatchOptions {
                    training: TrainingOptions::parse(
                        mask,
                        train_on.as_deref().unwrap_or("all_assistant"),
                        max_length,
                        truncation.as_deref(),
                        provenance,
                    )?,
                    on_error: on_error.as_deref().unwrap_or("raise").parse()?,
                    num_threads,
                },
                lint,
                on_rewrite: OnRewrite::parse(on_rewrite.as_deref().unwrap_or("error"))?,
            })
        };
        convert().map_err(|e| to_py_err(e.into()))
    }
}
