//! The options of one call, converted once: Python's `chatids._options.CallOptions` (a named
//! tuple built by every public method) into the core's option structs.
//!
//! The field names are the Python ones, read by attribute; every rule about their values
//! (`system=`, `train_on=`, "truncation needs max_length", `on_error=`, `on_rewrite=`) is the
//! core's own parser.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::convert::{clock, kwargs_from_py};
use super::to_py_err;
use crate::batch::BatchOptions;
use crate::encoder::EncodeOptions;
use crate::error::TemplateError;
use crate::lint::LintContext;
use crate::render::native::SystemPolicy;
use crate::session::OnRewrite;
use crate::training::TrainingOptions;

/// `CallOptions` as Python holds it: one attribute per field.
#[derive(FromPyObject)]
struct PyCallOptions<'py> {
    add_generation_prompt: bool,
    sanitize_control_tokens: bool,
    template_kwargs: Option<Bound<'py, PyDict>>,
    now: Option<(i32, u32, u32, u32, u32, u32)>,
    system: Option<String>,
    merge_consecutive: bool,
    continue_final_message: bool,
    return_assistant_mask: bool,
    train_on: String,
    max_length: Option<usize>,
    truncation: Option<String>,
    provenance: bool,
    num_threads: Option<usize>,
    on_error: String,
    for_generation: bool,
    add_special_tokens: bool,
    on_rewrite: String,
}

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

impl<'py> FromPyObject<'_, 'py> for CallOptions {
    type Error = PyErr;

    fn extract(obj: pyo3::Borrowed<'_, 'py, PyAny>) -> PyResult<Self> {
        let o: PyCallOptions<'py> = obj.extract()?;
        let convert = || -> Result<CallOptions, TemplateError> {
            Ok(CallOptions {
                encode: EncodeOptions {
                    add_generation_prompt: o.add_generation_prompt,
                    sanitize_control_tokens: o.sanitize_control_tokens,
                    kwargs: kwargs_from_py(o.template_kwargs.as_ref())?,
                    system: SystemPolicy::parse(o.system.as_deref())?,
                    merge_consecutive: o.merge_consecutive,
                    now: o.now.map(clock),
                    continue_final_message: o.continue_final_message,
                },
                batch: BatchOptions {
                    training: TrainingOptions::parse(
                        o.return_assistant_mask,
                        &o.train_on,
                        o.max_length,
                        o.truncation.as_deref(),
                        o.provenance,
                    )?,
                    on_error: o.on_error.parse()?,
                    num_threads: o.num_threads,
                },
                lint: LintContext {
                    for_generation: o.for_generation,
                    add_special_tokens: o.add_special_tokens,
                },
                on_rewrite: OnRewrite::parse(&o.on_rewrite)?,
            })
        };
        convert().map_err(|e| to_py_err(e.into()))
    }
}
