//! The arrays of `chatids.pack` and `Batch.to_padded`: numpy allocates them, the core fills
//! them in place with the GIL released.

use std::panic::{catch_unwind, AssertUnwindSafe};

use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// The arrays of `chatids.pack`: first-fit decreasing over `lengths` (tokens kept of each
/// conversation; 0 = not placed), then the rows, all flat: `(input_ids, labels, position_ids,
/// attention_mask, sequence_ids, conversation_index, cu_seqlens, row_offsets, members)`.
#[pyfunction]
#[pyo3(signature = (ids, offsets, lengths, seq_len, pad_id, labels=None))]
#[allow(clippy::type_complexity)]
pub(super) fn _pack<'py>(
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
pub(super) fn _pad<'py>(
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
