//! Packing whole conversations into fixed-length training rows (`chatids.pack`).
//!
//! Two steps, both pure Rust:
//!
//! 1. [`first_fit_decreasing`] assigns sequences to rows of `capacity` tokens: longest first
//!    (ties by index), each into the first row with room. A max-tree over the rows' free
//!    space finds that row in `O(log n)`, so packing `n` sequences is `O(n log n)`. The
//!    result is deterministic and uses at most `11/9 OPT + 6/9` rows (Dósa, 2007).
//! 2. [`fill`] builds the row-major arrays a trainer reads (ids, labels, positions, attention
//!    mask, sequence ids, conversation index) and `cu_seqlens` for varlen attention, rows in
//!    parallel.
//!
//! The layout of a row: its sequences back to back in placement order, then padding. Every
//! sequence's positions restart at 0; so do the padding's, which is its own segment in
//! `cu_seqlens` (so the flattened `position_ids` alone give the same boundaries, which is how
//! transformers' flash-attention path finds them). The first token of every sequence has label
//! [`IGNORE_INDEX`]: nothing of its own sequence precedes it, and with the causal shift it
//! would otherwise be predicted from the previous sequence of the row.

use std::cmp::Reverse;
use std::fmt;

use rayon::prelude::*;

/// The label of tokens that are not trained (PyTorch's `ignore_index`).
pub const IGNORE_INDEX: i64 = -100;

/// Why sequences cannot be packed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackError {
    /// `capacity` (the row length) is 0.
    ZeroCapacity,
    /// Sequence `index` has more tokens than a row holds.
    TooLong {
        index: usize,
        length: usize,
        capacity: usize,
    },
    /// The flat arrays do not describe the sequences (lengths, offsets, labels disagree).
    Invalid(String),
}

impl fmt::Display for PackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PackError::ZeroCapacity => write!(f, "seq_len must be at least 1"),
            PackError::TooLong {
                index,
                length,
                capacity,
            } => write!(
                f,
                "conversation {index} has {length} tokens, more than seq_len={capacity}"
            ),
            PackError::Invalid(msg) => write!(f, "{msg}"),
        }
    }
}

impl std::error::Error for PackError {}

/// An assignment of sequences to rows: row `r` holds the sequences
/// `members[row_offsets[r]..row_offsets[r + 1]]`, in placement order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packing {
    /// Tokens per row.
    pub capacity: usize,
    /// `rows + 1` offsets into [`members`](Self::members).
    pub row_offsets: Vec<usize>,
    /// Sequence indices, row after row. Sequences of length 0 are not placed.
    pub members: Vec<usize>,
}

impl Packing {
    /// Number of rows.
    pub fn num_rows(&self) -> usize {
        self.row_offsets.len() - 1
    }

    /// The sequences of row `r`, in placement order.
    pub fn row(&self, r: usize) -> &[usize] {
        &self.members[self.row_offsets[r]..self.row_offsets[r + 1]]
    }
}

/// A max-tree over the free space of `n` rows (unopened rows are empty: `capacity` free).
struct FreeTree {
    size: usize,
    max: Vec<usize>,
}

impl FreeTree {
    fn new(n: usize, capacity: usize) -> Self {
        let size = n.max(1).next_power_of_two();
        let mut max = vec![0; 2 * size];
        max[size..size + n].fill(capacity);
        for i in (1..size).rev() {
            max[i] = max[2 * i].max(max[2 * i + 1]);
        }
        FreeTree { size, max }
    }

    /// The first row with at least `need` tokens free.
    fn first_with(&self, need: usize) -> Option<usize> {
        if self.max[1] < need {
            return None;
        }
        let mut node = 1;
        while node < self.size {
            node = if self.max[2 * node] >= need {
                2 * node
            } else {
                2 * node + 1
            };
        }
        Some(node - self.size)
    }

    fn take(&mut self, row: usize, amount: usize) {
        let mut i = self.size + row;
        self.max[i] -= amount;
        while i > 1 {
            i /= 2;
            self.max[i] = self.max[2 * i].max(self.max[2 * i + 1]);
        }
    }
}

/// First-fit decreasing: sequences by decreasing length (ties: lower index first), each into
/// the first row it fits in. Sequences of length 0 are not placed; a sequence longer than
/// `capacity` is an error (truncate first).
pub fn first_fit_decreasing(lengths: &[usize], capacity: usize) -> Result<Packing, PackError> {
    if capacity == 0 {
        return Err(PackError::ZeroCapacity);
    }
    if let Some((index, &length)) = lengths.iter().enumerate().find(|(_, &l)| l > capacity) {
        return Err(PackError::TooLong {
            index,
            length,
            capacity,
        });
    }
    let mut order: Vec<usize> = (0..lengths.len()).filter(|&i| lengths[i] > 0).collect();
    order.sort_unstable_by_key(|&i| (Reverse(lengths[i]), i));

    let mut tree = FreeTree::new(order.len(), capacity);
    let mut row_of = Vec::with_capacity(order.len());
    let mut rows = 0;
    for &i in &order {
        let r = tree
            .first_with(lengths[i])
            .expect("an unopened row always has room");
        tree.take(r, lengths[i]);
        rows = rows.max(r + 1);
        row_of.push(r);
    }

    // Group by row, keeping placement order within each row (a counting sort).
    let mut row_offsets = vec![0usize; rows + 1];
    for &r in &row_of {
        row_offsets[r + 1] += 1;
    }
    for r in 0..rows {
        row_offsets[r + 1] += row_offsets[r];
    }
    let mut cursor = row_offsets[..rows].to_vec();
    let mut members = vec![0; order.len()];
    for (&i, &r) in order.iter().zip(&row_of) {
        members[cursor[r]] = i;
        cursor[r] += 1;
    }
    Ok(Packing {
        capacity,
        row_offsets,
        members,
    })
}

/// The arrays of packed rows, each row-major `[rows, seq_len]` except `cu_seqlens`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackedRows {
    /// Tokens per row.
    pub seq_len: usize,
    /// Token ids; `pad_id` on padding.
    pub input_ids: Vec<i64>,
    /// The sequence's labels (its ids when it has none); [`IGNORE_INDEX`] on padding and on
    /// the first token of every sequence.
    pub labels: Vec<i64>,
    /// Position within the sequence (from 0); padding counts from 0 as its own segment.
    pub position_ids: Vec<i64>,
    /// 1 on tokens, 0 on padding.
    pub attention_mask: Vec<i64>,
    /// The segment's index in `cu_seqlens` (numbered over all rows); -1 on padding.
    pub sequence_ids: Vec<i32>,
    /// The index of the sequence in the input; -1 on padding.
    pub conversation_index: Vec<i64>,
    /// Segment boundaries over the flattened rows (`0`, ..., `rows * seq_len`): each sequence
    /// is a segment, and so is the padding at the end of a row.
    pub cu_seqlens: Vec<i32>,
}

impl PackedRows {
    /// Number of rows.
    pub fn num_rows(&self) -> usize {
        self.input_ids.len().checked_div(self.seq_len).unwrap_or(0)
    }
}

/// Caller-allocated output of [`fill_into`]: the 2-D fields of [`PackedRows`], each exactly
/// `rows * seq_len` long (their contents are overwritten).
pub struct PackedRowsMut<'a> {
    pub input_ids: &'a mut [i64],
    pub labels: &'a mut [i64],
    pub position_ids: &'a mut [i64],
    pub attention_mask: &'a mut [i64],
    pub sequence_ids: &'a mut [i32],
    pub conversation_index: &'a mut [i64],
}

/// Flat sequences: sequence `i` is `ids[offsets[i]..offsets[i + 1]]`, with `labels` aligned
/// with `ids` when given.
fn check_sequences(
    ids: &[u32],
    offsets: &[i64],
    columns: &[(&str, Option<usize>)],
    lengths: &[usize],
    width: usize,
) -> Result<(), PackError> {
    let invalid = |msg: String| Err(PackError::Invalid(msg));
    if offsets.len() != lengths.len() + 1 {
        return invalid(format!(
            "{} offsets for {} sequences (need one more)",
            offsets.len(),
            lengths.len()
        ));
    }
    for &(name, len) in columns {
        if let Some(len) = len.filter(|&len| len != ids.len()) {
            return invalid(format!(
                "{len} {name} for {} ids (they must line up)",
                ids.len()
            ));
        }
    }
    for (i, &len) in lengths.iter().enumerate() {
        let (start, end) = (offsets[i], offsets[i + 1]);
        if start < 0 || end < start || end as u64 > ids.len() as u64 {
            return invalid(format!(
                "offsets of conversation {i} ({start}..{end}) are outside the {} ids",
                ids.len()
            ));
        }
        if len as u64 > (end - start) as u64 || len > width {
            return invalid(format!(
                "conversation {i}: {len} tokens asked, it has {} and rows have {width}",
                end - start
            ));
        }
    }
    Ok(())
}

/// `cu_seqlens` of `packing` and, per row, the index of its first segment.
fn segments(packing: &Packing, lengths: &[usize]) -> Result<(Vec<i32>, Vec<i32>), PackError> {
    let (seq_len, rows) = (packing.capacity, packing.num_rows());
    for r in 0..rows {
        let row = packing.row(r);
        if let Some(&i) = row.iter().find(|&&i| i >= lengths.len()) {
            return Err(PackError::Invalid(format!(
                "row {r} holds sequence {i}, which does not exist"
            )));
        }
        let used: usize = row.iter().map(|&i| lengths[i]).sum();
        if used > seq_len {
            return Err(PackError::Invalid(format!(
                "row {r} holds {used} tokens, more than {seq_len}"
            )));
        }
    }
    let total = rows * seq_len;
    if total > i32::MAX as usize {
        return Err(PackError::Invalid(format!(
            "{total} tokens in the packed rows: cu_seqlens (int32) cannot address them; pack fewer conversations at a time"
        )));
    }
    let mut cu_seqlens = Vec::with_capacity(packing.members.len() + rows + 1);
    cu_seqlens.push(0i32);
    let mut first_segment = Vec::with_capacity(rows);
    let mut at = 0usize;
    for r in 0..rows {
        first_segment.push(cu_seqlens.len() as i32 - 1);
        let row_end = at + seq_len;
        for &i in packing.row(r) {
            at += lengths[i];
            cu_seqlens.push(at as i32);
        }
        if at < row_end {
            cu_seqlens.push(row_end as i32);
        }
        at = row_end;
    }
    Ok((cu_seqlens, first_segment))
}

/// Builds the rows of `packing` from flat sequences: sequence `i` is
/// `ids[offsets[i]..offsets[i] + lengths[i]]` (its first `lengths[i]` tokens, which may be
/// fewer than `offsets[i + 1] - offsets[i]`), with `labels` aligned with `ids` when given.
pub fn fill(
    ids: &[u32],
    offsets: &[i64],
    labels: Option<&[i64]>,
    lengths: &[usize],
    packing: &Packing,
    pad_id: i64,
) -> Result<PackedRows, PackError> {
    let total = packing.num_rows() * packing.capacity;
    let mut out = PackedRows {
        seq_len: packing.capacity,
        input_ids: vec![0; total],
        labels: vec![0; total],
        position_ids: vec![0; total],
        attention_mask: vec![0; total],
        sequence_ids: vec![0; total],
        conversation_index: vec![0; total],
        cu_seqlens: Vec::new(),
    };
    out.cu_seqlens = fill_into(
        ids,
        offsets,
        labels,
        lengths,
        packing,
        pad_id,
        PackedRowsMut {
            input_ids: &mut out.input_ids,
            labels: &mut out.labels,
            position_ids: &mut out.position_ids,
            attention_mask: &mut out.attention_mask,
            sequence_ids: &mut out.sequence_ids,
            conversation_index: &mut out.conversation_index,
        },
    )?;
    Ok(out)
}

/// [`fill`] into caller-allocated arrays (every element is written); returns `cu_seqlens`.
pub fn fill_into(
    ids: &[u32],
    offsets: &[i64],
    labels: Option<&[i64]>,
    lengths: &[usize],
    packing: &Packing,
    pad_id: i64,
    out: PackedRowsMut<'_>,
) -> Result<Vec<i32>, PackError> {
    let seq_len = packing.capacity;
    check_sequences(
        ids,
        offsets,
        &[("labels", labels.map(<[i64]>::len))],
        lengths,
        seq_len,
    )?;
    let (cu_seqlens, first_segment) = segments(packing, lengths)?;
    let total = packing.num_rows() * seq_len;
    let sizes = [
        out.input_ids.len(),
        out.labels.len(),
        out.position_ids.len(),
        out.attention_mask.len(),
        out.sequence_ids.len(),
        out.conversation_index.len(),
    ];
    if sizes.iter().any(|&len| len != total) {
        return Err(PackError::Invalid(format!(
            "output arrays of {sizes:?} elements for {total}"
        )));
    }
    if total == 0 {
        return Ok(cu_seqlens);
    }
    // On chatids' own per-process pool, never rayon's global one (fork safety, see
    // crate::batch::install).
    crate::batch::install(None, || {
        out.input_ids
            .par_chunks_mut(seq_len)
            .zip(out.labels.par_chunks_mut(seq_len))
            .zip(out.position_ids.par_chunks_mut(seq_len))
            .zip(out.attention_mask.par_chunks_mut(seq_len))
            .zip(out.sequence_ids.par_chunks_mut(seq_len))
            .zip(out.conversation_index.par_chunks_mut(seq_len))
            .enumerate()
            .for_each(
                |(r, (((((row_ids, row_labels), row_pos), row_att), row_seq), row_conv))| {
                    let mut at = 0;
                    for (segment, &i) in (first_segment[r]..).zip(packing.row(r)) {
                        let len = lengths[i];
                        let start = offsets[i] as usize;
                        let span = at..at + len;
                        for (dst, &src) in row_ids[span.clone()]
                            .iter_mut()
                            .zip(&ids[start..start + len])
                        {
                            *dst = i64::from(src);
                        }
                        match labels {
                            Some(labels) => row_labels[span.clone()]
                                .copy_from_slice(&labels[start..start + len]),
                            None => {
                                row_labels[span.clone()].copy_from_slice(&row_ids[span.clone()])
                            }
                        }
                        row_labels[at] = IGNORE_INDEX;
                        for (p, dst) in row_pos[span.clone()].iter_mut().enumerate() {
                            *dst = p as i64;
                        }
                        row_att[span.clone()].fill(1);
                        row_seq[span.clone()].fill(segment);
                        row_conv[span].fill(i as i64);
                        at += len;
                    }
                    row_ids[at..].fill(pad_id);
                    row_labels[at..].fill(IGNORE_INDEX);
                    for (p, dst) in row_pos[at..].iter_mut().enumerate() {
                        *dst = p as i64;
                    }
                    row_att[at..].fill(0);
                    row_seq[at..].fill(-1);
                    row_conv[at..].fill(-1);
                },
            );
    })
    .map_err(|e| PackError::Invalid(e.to_string()))?;
    Ok(cu_seqlens)
}

/// The arrays of padded rows (`Batch.to_padded`), each row-major `[sequences, width]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PaddedRows {
    /// Columns per row.
    pub width: usize,
    /// Token ids; `pad_id` on padding.
    pub input_ids: Vec<i64>,
    /// 1 on tokens, 0 on padding.
    pub attention_mask: Vec<i64>,
    /// The labels, [`IGNORE_INDEX`] on padding (when labels were given).
    pub labels: Option<Vec<i64>>,
    /// The assistant mask, 0 on padding (when one was given).
    pub assistant_mask: Option<Vec<i64>>,
}

/// Caller-allocated output of [`fill_padded_into`], each exactly `sequences * width` long;
/// `labels`/`assistant_mask` are filled when given, and must be given when the input is.
pub struct PaddedRowsMut<'a> {
    pub input_ids: &'a mut [i64],
    pub attention_mask: &'a mut [i64],
    pub labels: Option<&'a mut [i64]>,
    pub assistant_mask: Option<&'a mut [i64]>,
}

/// One row per sequence: sequence `i` is the first `lengths[i]` tokens of
/// `ids[offsets[i]..offsets[i + 1]]`, padded to `width` on the right (or on the left with
/// `left`). `labels` and `assistant_mask` line up with `ids` when given.
#[allow(clippy::too_many_arguments)]
pub fn fill_padded(
    ids: &[u32],
    offsets: &[i64],
    labels: Option<&[i64]>,
    assistant_mask: Option<&[u8]>,
    lengths: &[usize],
    width: usize,
    pad_id: i64,
    left: bool,
) -> Result<PaddedRows, PackError> {
    let total = lengths.len() * width;
    let mut out = PaddedRows {
        width,
        input_ids: vec![0; total],
        attention_mask: vec![0; total],
        labels: labels.map(|_| vec![0; total]),
        assistant_mask: assistant_mask.map(|_| vec![0; total]),
    };
    fill_padded_into(
        ids,
        offsets,
        labels,
        assistant_mask,
        lengths,
        width,
        pad_id,
        left,
        PaddedRowsMut {
            input_ids: &mut out.input_ids,
            attention_mask: &mut out.attention_mask,
            labels: out.labels.as_deref_mut(),
            assistant_mask: out.assistant_mask.as_deref_mut(),
        },
    )?;
    Ok(out)
}

/// [`fill_padded`] into caller-allocated arrays (every element is written, rows in parallel).
#[allow(clippy::too_many_arguments)]
pub fn fill_padded_into(
    ids: &[u32],
    offsets: &[i64],
    labels: Option<&[i64]>,
    assistant_mask: Option<&[u8]>,
    lengths: &[usize],
    width: usize,
    pad_id: i64,
    left: bool,
    out: PaddedRowsMut<'_>,
) -> Result<(), PackError> {
    check_sequences(
        ids,
        offsets,
        &[
            ("labels", labels.map(<[i64]>::len)),
            ("assistant_mask", assistant_mask.map(<[u8]>::len)),
        ],
        lengths,
        width,
    )?;
    let total = lengths.len() * width;
    let outputs_match = out.input_ids.len() == total
        && out.attention_mask.len() == total
        && out.labels.as_ref().map(|o| o.len()) == labels.map(|_| total)
        && out.assistant_mask.as_ref().map(|o| o.len()) == assistant_mask.map(|_| total);
    if !outputs_match {
        return Err(PackError::Invalid(format!(
            "output arrays do not match {} rows of {width} (or the columns given)",
            lengths.len()
        )));
    }
    if total == 0 {
        return Ok(());
    }
    let rows = |out: &mut [i64], values: &(dyn Fn(usize, &mut [i64]) + Sync), padding: i64| {
        // chatids' own pool, never rayon's global one (fork safety).
        crate::batch::install(None, || {
            out.par_chunks_mut(width).enumerate().for_each(|(i, row)| {
                let n = lengths[i];
                let (tokens, pad) = if left {
                    let (pad, tokens) = row.split_at_mut(width - n);
                    (tokens, pad)
                } else {
                    row.split_at_mut(n)
                };
                values(i, tokens);
                pad.fill(padding);
            });
        })
        .map_err(|e| PackError::Invalid(e.to_string()))
    };
    fn copy<T: Copy + Into<i64>>(src: &[T], offsets: &[i64], i: usize, dst: &mut [i64]) {
        let start = offsets[i] as usize;
        let n = dst.len();
        for (d, &s) in dst.iter_mut().zip(&src[start..start + n]) {
            *d = s.into();
        }
    }
    rows(out.input_ids, &|i, dst| copy(ids, offsets, i, dst), pad_id)?;
    rows(out.attention_mask, &|_, dst| dst.fill(1), 0)?;
    if let (Some(out), Some(labels)) = (out.labels, labels) {
        rows(out, &|i, dst| copy(labels, offsets, i, dst), IGNORE_INDEX)?;
    }
    if let (Some(out), Some(mask)) = (out.assistant_mask, assistant_mask) {
        rows(out, &|i, dst| copy(mask, offsets, i, dst), 0)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift64*), so the tests need no crate.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
        }
    }

    /// First-fit decreasing by a linear scan of the rows: the reference for the tree.
    fn naive_ffd(lengths: &[usize], capacity: usize) -> Vec<Vec<usize>> {
        let mut order: Vec<usize> = (0..lengths.len()).filter(|&i| lengths[i] > 0).collect();
        order.sort_by_key(|&i| (Reverse(lengths[i]), i));
        let mut rows: Vec<(usize, Vec<usize>)> = Vec::new();
        for i in order {
            match rows.iter_mut().find(|(free, _)| *free >= lengths[i]) {
                Some((free, members)) => {
                    *free -= lengths[i];
                    members.push(i);
                }
                None => rows.push((capacity - lengths[i], vec![i])),
            }
        }
        rows.into_iter().map(|(_, m)| m).collect()
    }

    fn rows_of(p: &Packing) -> Vec<Vec<usize>> {
        (0..p.num_rows()).map(|r| p.row(r).to_vec()).collect()
    }

    #[test]
    fn packs_longest_first_into_the_first_row_with_room() {
        let p = first_fit_decreasing(&[3, 7, 5, 2, 5, 0, 1], 10).unwrap();
        // 7 -> row 0 (3 left); 5 -> row 1; 5 (index 4) -> row 1; 3 -> row 0; 2 -> row 2; 1 -> row 2.
        assert_eq!(
            rows_of(&p),
            vec![vec![1, 0], vec![2, 4], vec![3, 6]],
            "index 5 (empty) is not placed"
        );
        assert_eq!(p.capacity, 10);
    }

    #[test]
    fn matches_a_linear_scan_first_fit_decreasing() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..300 {
            let capacity = 1 + rng.below(64);
            let n = rng.below(80);
            let lengths: Vec<usize> = (0..n).map(|_| rng.below(capacity + 1)).collect();
            let p = first_fit_decreasing(&lengths, capacity).unwrap();
            assert_eq!(rows_of(&p), naive_ffd(&lengths, capacity), "round {round}");
        }
    }

    #[test]
    fn every_row_fits_and_every_sequence_is_placed_once() {
        let mut rng = Rng(42);
        let lengths: Vec<usize> = (0..5000).map(|_| rng.below(2049)).collect();
        let p = first_fit_decreasing(&lengths, 2048).unwrap();
        let mut seen = vec![0; lengths.len()];
        for r in 0..p.num_rows() {
            assert!(p.row(r).iter().map(|&i| lengths[i]).sum::<usize>() <= 2048);
            for &i in p.row(r) {
                seen[i] += 1;
            }
        }
        for (i, &l) in lengths.iter().enumerate() {
            assert_eq!(seen[i], usize::from(l > 0), "sequence {i}");
        }
        let total: usize = lengths.iter().sum();
        assert!(p.num_rows() >= total.div_ceil(2048));
    }

    #[test]
    fn refuses_too_long_sequences_and_zero_capacity() {
        assert_eq!(
            first_fit_decreasing(&[3, 11, 12], 10),
            Err(PackError::TooLong {
                index: 1,
                length: 11,
                capacity: 10
            })
        );
        assert_eq!(first_fit_decreasing(&[1], 0), Err(PackError::ZeroCapacity));
        let empty = first_fit_decreasing(&[0, 0], 4).unwrap();
        assert_eq!(empty.num_rows(), 0);
        assert!(empty.members.is_empty());
    }

    #[test]
    fn fills_rows_with_restarting_positions_and_padding_segments() {
        // Three sequences: [10, 11, 12], [20, 21] (labels -100, 21) and [30] (cut to 0 tokens).
        let ids = [10, 11, 12, 20, 21, 30];
        let offsets = [0, 3, 5, 6];
        let labels = [-100, 11, 12, -100, 21, 30];
        let lengths = [3, 2, 0];
        let packing = first_fit_decreasing(&lengths, 4).unwrap();
        assert_eq!(rows_of(&packing), vec![vec![0], vec![1]]);
        let out = fill(&ids, &offsets, Some(&labels), &lengths, &packing, 7).unwrap();
        assert_eq!(out.num_rows(), 2);
        assert_eq!(out.input_ids, [10, 11, 12, 7, 20, 21, 7, 7]);
        assert_eq!(out.labels, [-100, 11, 12, -100, -100, 21, -100, -100]);
        assert_eq!(out.position_ids, [0, 1, 2, 0, 0, 1, 0, 1]);
        assert_eq!(out.attention_mask, [1, 1, 1, 0, 1, 1, 0, 0]);
        assert_eq!(out.sequence_ids, [0, 0, 0, -1, 2, 2, -1, -1]);
        assert_eq!(out.conversation_index, [0, 0, 0, -1, 1, 1, -1, -1]);
        assert_eq!(out.cu_seqlens, [0, 3, 4, 6, 8]);

        // Without labels: the ids, with the first token of each sequence ignored.
        let full = first_fit_decreasing(&[3, 1], 4).unwrap();
        let out = fill(&ids[..4], &[0, 3, 4], None, &[3, 1], &full, 0).unwrap();
        assert_eq!(out.input_ids, [10, 11, 12, 20]);
        assert_eq!(out.labels, [-100, 11, 12, -100]);
        assert_eq!(out.position_ids, [0, 1, 2, 0]);
        assert_eq!(out.sequence_ids, [0, 0, 0, 1]);
        assert_eq!(
            out.cu_seqlens,
            [0, 3, 4],
            "a full row has no padding segment"
        );
    }

    #[test]
    fn fill_reconstructs_every_sequence() {
        let mut rng = Rng(7);
        let n = 400;
        let capacity = 97;
        let full: Vec<usize> = (0..n).map(|_| rng.below(140)).collect();
        let kept: Vec<usize> = full.iter().map(|&l| l.min(capacity)).collect();
        let mut offsets = vec![0i64];
        for &l in &full {
            offsets.push(offsets.last().unwrap() + l as i64);
        }
        let ids: Vec<u32> = (0..*offsets.last().unwrap() as u32).collect();
        let packing = first_fit_decreasing(&kept, capacity).unwrap();
        let out = fill(&ids, &offsets, None, &kept, &packing, -1).unwrap();
        let mut got: Vec<Vec<i64>> = vec![Vec::new(); n];
        for (t, &c) in out.conversation_index.iter().enumerate() {
            if c >= 0 {
                got[c as usize].push(out.input_ids[t]);
            }
        }
        for i in 0..n {
            let start = offsets[i];
            let want: Vec<i64> = (start..start + kept[i] as i64).collect();
            assert_eq!(got[i], want, "sequence {i}");
        }
        // Segments of cu_seqlens are exactly the runs of sequence_ids.
        for k in 0..out.cu_seqlens.len() - 1 {
            let span = out.cu_seqlens[k] as usize..out.cu_seqlens[k + 1] as usize;
            let seg = &out.sequence_ids[span.clone()];
            assert!(seg.iter().all(|&s| s == k as i32) || seg.iter().all(|&s| s == -1));
            assert_eq!(out.position_ids[span.start], 0);
        }
        assert_eq!(
            *out.cu_seqlens.last().unwrap() as usize,
            packing.num_rows() * capacity
        );
    }

    #[test]
    fn pads_right_and_left_with_truncated_rows() {
        let ids = [1, 2, 3, 4, 5, 6];
        let offsets = [0, 3, 3, 6];
        let labels = [-100, 2, 3, -100, 5, 6];
        let mask = [0u8, 1, 1, 0, 1, 1];
        // Row 2 keeps 2 of its 3 tokens; row 1 is empty.
        let right = fill_padded(
            &ids,
            &offsets,
            Some(&labels),
            Some(&mask),
            &[3, 0, 2],
            3,
            9,
            false,
        )
        .unwrap();
        assert_eq!(right.input_ids, [1, 2, 3, 9, 9, 9, 4, 5, 9]);
        assert_eq!(right.attention_mask, [1, 1, 1, 0, 0, 0, 1, 1, 0]);
        assert_eq!(
            right.labels.unwrap(),
            [-100, 2, 3, -100, -100, -100, -100, 5, -100]
        );
        assert_eq!(right.assistant_mask.unwrap(), [0, 1, 1, 0, 0, 0, 0, 1, 0]);
        let left = fill_padded(&ids, &offsets, None, None, &[3, 0, 2], 4, 0, true).unwrap();
        assert_eq!(left.input_ids, [0, 1, 2, 3, 0, 0, 0, 0, 0, 0, 4, 5]);
        assert_eq!(left.attention_mask, [0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1]);
        assert_eq!(left.labels, None);
        let empty = fill_padded(&ids, &offsets, None, None, &[0, 0, 0], 0, 0, false).unwrap();
        assert!(empty.input_ids.is_empty());
        assert!(fill_padded(&ids, &offsets, None, None, &[3, 0, 3], 2, 0, false).is_err());
        assert!(fill_padded(
            &ids,
            &offsets,
            Some(&labels[1..]),
            None,
            &[3, 0, 3],
            3,
            0,
            false
        )
        .is_err());
    }

    #[test]
    fn fill_rejects_inconsistent_arrays() {
        let packing = first_fit_decreasing(&[2], 4).unwrap();
        assert!(fill(&[1, 2], &[0, 2], Some(&[1]), &[2], &packing, 0).is_err());
        assert!(fill(&[1, 2], &[0, 3], None, &[2], &packing, 0).is_err());
        assert!(fill(&[1, 2], &[0, 1], None, &[2], &packing, 0).is_err());
        assert!(fill(&[1, 2], &[0], None, &[2], &packing, 0).is_err());
        let other = first_fit_decreasing(&[1, 1], 4).unwrap();
        assert!(fill(&[1, 2], &[0, 2], None, &[2], &other, 0).is_err());
    }
}
