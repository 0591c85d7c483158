"""Training batches: ``chatids.pack`` and ``Batch.to_padded`` against straightforward numpy code.

* ``training-pack``: ~100,000 conversations (a corpus sample encoded once with the Llama 3.1
  tokenizer, tiled; with labels) packed into rows of 4,096 tokens: ``chatids.pack``
  (first-fit decreasing and the row arrays in Rust) vs a numpy/Python first-fit decreasing
  (a Python loop over conversations, a numpy scan of the rows' free space) building the same
  arrays with vectorized numpy. Both outputs are checked equal before timing.
  ``extra_info`` has the packing efficiency and rows.
* ``training-to_padded``: 2,000 conversations padded (right side, ``max_length=4096``,
  ``truncation="right"``): ``Batch.to_padded`` vs a per-row Python loop.

``CHATIDS_BENCH_QUICK=1`` shrinks the inputs to a few thousand conversations.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import chatids

QUICK = os.environ.get("CHATIDS_BENCH_QUICK", "") not in ("", "0")

MODEL = "llama-3.1-8b-instruct"
SEQ_LEN = 4096
PACK_N = 2_000 if QUICK else 100_000
PAD_N = 200 if QUICK else 2_000
SAMPLE_N = 200 if QUICK else 2_000
ROUNDS = 1 if QUICK else 5
ROUNDS_BASELINE = 1 if QUICK else 3


@pytest.fixture(scope="module")
def encoded(corpus) -> chatids.Batch:
    """A corpus sample encoded once (labels: every token but each conversation's first 16)."""
    base = os.environ.get("CHATIDS_MODELS_DIR")
    if not base or not (Path(base) / MODEL).is_dir():
        pytest.skip(f"model {MODEL} not found (CHATIDS_MODELS_DIR)")
    enc = chatids.Encoder.from_pretrained(Path(base) / MODEL)
    kwargs = {"date_string": "26 Jul 2024"}
    accepted = []
    for c in corpus:
        try:
            enc.encode(c, **kwargs)
        except (chatids.ChatTemplateError, ValueError, TypeError):
            continue
        accepted.append(c)
        if len(accepted) == SAMPLE_N:
            break
    batch = enc.encode_batch(accepted, **kwargs)
    labels = batch.ids.astype(np.int64)
    position = np.arange(len(labels)) - np.repeat(batch.offsets[:-1], batch.lengths)
    labels[position < 16] = -100
    return chatids.Batch(batch.ids, batch.offsets, labels=labels)


def tile(batch: chatids.Batch, n: int) -> chatids.Batch:
    """The first ``n`` conversations of ``batch`` repeated."""
    reps = -(-n // len(batch))
    lengths = np.tile(batch.lengths, reps)[:n]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    total = int(offsets[-1])
    return chatids.Batch(np.tile(batch.ids, reps)[:total], offsets, labels=np.tile(batch.labels, reps)[:total])


@pytest.fixture(scope="module")
def large(encoded) -> chatids.Batch:
    return tile(encoded, PACK_N)


# --- the baseline: first-fit decreasing in Python/numpy --------------------------------------


def numpy_pack(batch: chatids.Batch, seq_len: int, pad_id: int) -> dict:
    """Straightforward first-fit decreasing: the same arrays as ``chatids.pack``."""
    offsets = batch.offsets
    lengths = np.minimum(np.diff(offsets), seq_len)
    n = len(lengths)
    order = np.lexsort((np.arange(n), -lengths))
    order = order[lengths[order] > 0]
    free = np.full(len(order) + 1, seq_len, dtype=np.int64)
    row_of = np.empty(len(order), dtype=np.int64)
    n_rows = 0
    for k, i in enumerate(order.tolist()):
        need = lengths[i]
        r = int(np.argmax(free[: n_rows + 1] >= need))  # the first row with room (row n_rows is empty)
        free[r] -= need
        row_of[k] = r
        n_rows = max(n_rows, r + 1)

    # Rows in order, conversations in placement order within each row.
    by_row = np.argsort(row_of, kind="stable")
    members = order[by_row]
    member_row = row_of[by_row]
    lens = lengths[members]
    starts = np.cumsum(lens) - lens
    row_counts = np.bincount(member_row, minlength=n_rows)
    row_first = np.cumsum(row_counts) - row_counts
    col = starts - starts[row_first][member_row]
    total = int(lens.sum())
    within = np.arange(total) - np.repeat(starts, lens)
    dest = np.repeat(member_row * seq_len + col, lens) + within
    src = np.repeat(offsets[:-1][members], lens) + within
    size = n_rows * seq_len

    input_ids = np.full(size, pad_id, dtype=np.int64)
    input_ids[dest] = batch.ids[src]
    labels = np.full(size, -100, dtype=np.int64)
    labels[dest] = batch.labels[src]
    labels[member_row * seq_len + col] = -100
    used = np.bincount(member_row, weights=lens, minlength=n_rows).astype(np.int64)
    position_ids = (np.arange(size) % seq_len) - np.repeat(used, seq_len)  # padding counts from 0
    position_ids[dest] = within
    attention_mask = np.zeros(size, dtype=np.int64)
    attention_mask[dest] = 1
    conversation_index = np.full(size, -1, dtype=np.int64)
    conversation_index[dest] = np.repeat(members, lens)
    # Segments: every conversation, then each row's padding.
    has_pad = used < seq_len
    segment_of_member = np.arange(len(members)) + np.concatenate([[0], np.cumsum(has_pad)])[member_row]
    sequence_ids = np.full(size, -1, dtype=np.int32)
    sequence_ids[dest] = np.repeat(segment_of_member, lens)
    ends = np.concatenate([member_row * seq_len + col + lens, (np.flatnonzero(has_pad) + 1) * seq_len])
    cu_seqlens = np.concatenate([[0], np.sort(ends)]).astype(np.int32)
    bounds = np.concatenate([[0], np.cumsum(row_counts)]).tolist()
    member_list = members.tolist()
    shape = (n_rows, seq_len)
    return {
        "input_ids": input_ids.reshape(shape),
        "labels": labels.reshape(shape),
        "position_ids": position_ids.reshape(shape),
        "attention_mask": attention_mask.reshape(shape),
        "sequence_ids": sequence_ids.reshape(shape),
        "conversation_index": conversation_index.reshape(shape),
        "cu_seqlens": cu_seqlens,
        "rows": [member_list[a:b] for a, b in zip(bounds, bounds[1:])],
        "efficiency": total / size,
    }


def _run(benchmark, fn, rounds):
    return benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=0 if QUICK else 1)


def _info(benchmark, batch: chatids.Batch, packed_rows: int, efficiency: float) -> None:
    benchmark.extra_info.update(
        conversations=len(batch),
        tokens=int(np.minimum(batch.lengths, SEQ_LEN).sum()),
        seq_len=SEQ_LEN,
        rows=packed_rows,
        efficiency=round(efficiency, 5),
    )


def test_pack_chatids(benchmark, large):
    benchmark.group = "training-pack"
    packed = _run(benchmark, lambda: chatids.pack(large, SEQ_LEN, pad_id=0, truncation="right"), ROUNDS)
    _info(benchmark, large, len(packed.rows), packed.efficiency)


def test_pack_numpy_ffd(benchmark, large):
    benchmark.group = "training-pack"
    ours = chatids.pack(large, SEQ_LEN, pad_id=0, truncation="right")
    out = _run(benchmark, lambda: numpy_pack(large, SEQ_LEN, pad_id=0), ROUNDS_BASELINE)
    assert out["rows"] == ours.rows
    for name in ("input_ids", "labels", "position_ids", "attention_mask", "sequence_ids", "conversation_index", "cu_seqlens"):
        np.testing.assert_array_equal(out[name], getattr(ours, name), err_msg=name)
    _info(benchmark, large, len(out["rows"]), out["efficiency"])


def python_pad(batch: chatids.Batch, pad_id: int, max_length: int) -> dict:
    """Per-row padding in a Python loop (right side, truncating at max_length)."""
    n = len(batch)
    input_ids = np.full((n, max_length), pad_id, dtype=np.int64)
    attention_mask = np.zeros((n, max_length), dtype=np.int64)
    labels = np.full((n, max_length), -100, dtype=np.int64)
    for i in range(n):
        a, b = int(batch.offsets[i]), int(batch.offsets[i + 1])
        k = min(b - a, max_length)
        input_ids[i, :k] = batch.ids[a : a + k]
        attention_mask[i, :k] = 1
        labels[i, :k] = batch.labels[a : a + k]
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


@pytest.fixture(scope="module")
def minibatch(encoded) -> chatids.Batch:
    return tile(encoded, PAD_N)


def test_to_padded_chatids(benchmark, minibatch):
    benchmark.group = "training-to_padded"
    benchmark.extra_info.update(conversations=len(minibatch), tokens=int(np.minimum(minibatch.lengths, SEQ_LEN).sum()))
    _run(benchmark, lambda: minibatch.to_padded(0, max_length=SEQ_LEN, truncation="right"), ROUNDS)


def test_to_padded_python_loop(benchmark, minibatch):
    benchmark.group = "training-to_padded"
    benchmark.extra_info.update(conversations=len(minibatch), tokens=int(np.minimum(minibatch.lengths, SEQ_LEN).sum()))
    ours = minibatch.to_padded(0, max_length=SEQ_LEN, truncation="right")
    out = _run(benchmark, lambda: python_pad(minibatch, 0, SEQ_LEN), ROUNDS)
    for name in ("input_ids", "attention_mask", "labels"):
        np.testing.assert_array_equal(out[name], ours[name], err_msg=name)
