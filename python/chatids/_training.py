"""Training batches: :class:`~chatids.Batch` (many encoded conversations, columnar), and the
padded rows and packed rows built from it.

* :func:`to_padded` (``Batch.to_padded``): one row per conversation, padded to the longest
  conversation or to ``max_length``.
* :func:`pack` (``Batch.pack``): whole conversations packed into rows of exactly ``seq_len``
  tokens (first-fit decreasing), positions restarting at every conversation, and
  ``cu_seqlens`` for varlen (flash-attention) kernels.

The arrays are built in Rust (``src/packing.rs``), rows in parallel with the GIL released,
into numpy-allocated buffers. Arrays are numpy; ``return_tensors="pt"`` converts them to torch tensors (sharing memory).
torch is imported only then and is never a dependency.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Optional

import numpy as np

from . import _core


@dataclass(frozen=True)
class Truncation:
    """What a truncation policy cut from one conversation (see ``max_length=``/``truncation=``)."""

    policy: str
    """``"drop_oldest_turns"`` (whole turns after the system message) or ``"right"`` (tokens at the end)."""
    original_length: int
    """Tokens before truncation."""
    dropped_tokens: int
    """Tokens removed."""
    dropped_messages: tuple[int, ...] = ()
    """Indices (into the caller's messages) of the messages removed by ``"drop_oldest_turns"``."""

IGNORE_INDEX = -100
"""The label of positions that are not trained (PyTorch's ``ignore_index``)."""

_SIDES = ("right", "left")
_TRUNCATIONS = ("error", "right")
_TENSORS = ("np", "pt")


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise ImportError(
            "return_tensors='pt' needs PyTorch, which is not installed: pip install torch "
            "(or use return_tensors='np' for numpy arrays)"
        ) from e
    return torch


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}, not {value!r}")


def _check_int(name: str, value: Any, minimum: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value}")
    return int(value)


def _columns(batch: "Batch") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``ids`` (uint32), ``offsets`` (int64) and the lengths, checked to describe the batch."""
    ids = np.ascontiguousarray(batch.ids, dtype=np.uint32)
    offsets = np.ascontiguousarray(batch.offsets, dtype=np.int64)
    if offsets.ndim != 1 or len(offsets) == 0:
        raise ValueError("batch.offsets must be a 1-D array of len(batch) + 1 offsets")
    lengths = np.diff(offsets)
    if (lengths < 0).any() or offsets[0] < 0 or offsets[-1] > len(ids):
        raise ValueError(f"batch.offsets must be non-decreasing offsets into the {len(ids)} ids")
    for name in ("labels", "assistant_mask"):
        column = getattr(batch, name)
        if column is not None and len(column) != len(ids):
            raise ValueError(f"batch.{name} has {len(column)} entries for {len(ids)} ids (they must line up)")
    return ids, offsets, lengths


def _too_long(lengths: np.ndarray, limit: int, limit_name: str) -> ValueError:
    over = np.flatnonzero(lengths > limit)
    i = int(over[0])
    more = f" ({len(over) - 1} more conversations are longer too)" if len(over) > 1 else ""
    return ValueError(
        f"conversation {i} has {int(lengths[i])} tokens, more than {limit_name}={limit}{more}; "
        f"pass truncation='right' to cut tokens at the end, or encode with "
        f"encode_batch(..., max_length={limit}, truncation='drop_oldest_turns') to drop whole turns"
    )


def _right_truncations(lengths: np.ndarray, limit: int) -> dict[int, Truncation]:
    return {
        int(i): Truncation("right", int(lengths[i]), int(lengths[i]) - limit) for i in np.flatnonzero(lengths > limit)
    }


# --- Padded rows -------------------------------------------------------------------------


class Padded(dict[str, Any]):
    """What :meth:`Batch.to_padded` returns: a dict of 2-D arrays, one row per conversation.

    Keys: ``input_ids`` (int64, ``pad_id`` on padding), ``attention_mask`` (int64, 1 on tokens,
    0 on padding), ``labels`` (int64, the batch's labels, -100 on padding; only when the batch
    has labels) and ``assistant_mask`` (int64, 0 on padding; only when the batch has one).
    The dict holds arrays only, so it can be handed to a collator or model as is; what
    ``truncation="right"`` cut is in the :attr:`truncations` attribute.
    """

    truncations: dict[int, Truncation]
    """Conversation index -> what ``truncation="right"`` cut from it (empty if nothing)."""

    def __init__(self, arrays: dict[str, Any], truncations: dict[int, Truncation]) -> None:
        super().__init__(arrays)
        self.truncations = truncations

    def __repr__(self) -> str:
        shape = tuple(self["input_ids"].shape)
        cut = f", {len(self.truncations)} truncated" if self.truncations else ""
        return f"Padded({', '.join(self)}; shape {shape}{cut})"


def to_padded(
    batch: "Batch",
    pad_id: int,
    side: str = "right",
    max_length: Optional[int] = None,
    truncation: str = "error",
    return_tensors: str = "np",
) -> Padded:
    """One row per conversation (row ``i`` is conversation ``i``), padded with ``pad_id``.

    ``side="right"`` pads after the tokens (training); ``"left"`` before them (generation,
    so every prompt ends at the last column). ``max_length=None`` pads to the longest
    conversation; with ``max_length`` every row has exactly ``max_length`` columns and a longer
    conversation raises ``ValueError`` (naming it and its length), unless
    ``truncation="right"``, which keeps its first ``max_length`` tokens and records a
    :class:`Truncation` in the result's ``truncations``. Rejected conversations (in
    ``batch.errors``) have no tokens: their rows are all padding (attention mask 0).
    ``labels`` is only returned when the batch has labels (``return_assistant_mask=True``).
    """
    pad_id = _check_int("pad_id", pad_id)
    _check_choice("side", side, _SIDES)
    _check_choice("truncation", truncation, _TRUNCATIONS)
    _check_choice("return_tensors", return_tensors, _TENSORS)
    torch = _torch() if return_tensors == "pt" else None
    ids, offsets, lengths = _columns(batch)
    n = len(lengths)

    truncations: dict[int, Truncation] = {}
    if max_length is None:
        width = int(lengths.max()) if n else 0
        kept = lengths
    else:
        width = _check_int("max_length", max_length, 1)
        if n and int(lengths.max()) > width:
            if truncation == "error":
                raise _too_long(lengths, width, "max_length")
            truncations = _right_truncations(lengths, width)
        kept = np.minimum(lengths, width)

    labels = None if batch.labels is None else np.ascontiguousarray(batch.labels, dtype=np.int64)
    mask = None if batch.assistant_mask is None else np.ascontiguousarray(batch.assistant_mask, dtype=np.uint8)
    input_ids, attention_mask, labels, mask = _core._pad(ids, offsets, kept, width, pad_id, side == "left", labels, mask)
    arrays: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels, "assistant_mask": mask}
    arrays = {k: v.reshape(n, width) for k, v in arrays.items() if v is not None}
    if torch is not None:
        arrays = {k: torch.from_numpy(v) for k, v in arrays.items()}
    return Padded(arrays, truncations)


# --- Packed rows -------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Packed:
    """Whole conversations packed into rows of exactly ``seq_len`` tokens (:func:`pack`).

    A row holds its conversations back to back in placement order (``rows[r]``), then padding.
    The 2-D fields are ``[len(rows), seq_len]`` numpy arrays (torch tensors with
    ``return_tensors="pt"``); flattened, they are the ``[total_tokens]`` inputs of
    ``flash_attn_varlen_func`` with :attr:`cu_seqlens` and :attr:`max_seqlen`.
    """

    input_ids: Any
    """Token ids (int64); ``pad_id`` on padding."""
    labels: Any
    """Labels (int64, not shifted: the model shifts them): the batch's labels, or its ids when
    the batch has none. -100 on padding, wherever the batch's labels are -100, and on the
    first token of every conversation (it has no token of its own conversation before it;
    with the causal shift it would be predicted from the previous conversation of the row).
    So the loss over the rows is the sum of the conversations' own losses.
    """
    position_ids: Any
    """Position of each token in its conversation, restarting at 0 for every conversation
    (int64). The padding at the end of a row is numbered 0, 1, ... as a segment of its own,
    so the flattened ``position_ids`` restart exactly at the boundaries of :attr:`cu_seqlens`
    (transformers' flash-attention path derives ``cu_seqlens`` from these restarts).
    """
    attention_mask: Any
    """1 on tokens, 0 on padding (int64). Not a block-diagonal mask: use ``position_ids``,
    ``cu_seqlens`` or ``sequence_ids`` to keep conversations from attending to each other.
    """
    sequence_ids: Any
    """Per token, the index of its segment in :attr:`cu_seqlens` (int32, numbered over all
    rows); -1 on padding. Document ids for block-diagonal masks (e.g. flex attention).
    """
    conversation_index: Any
    """Per token, the index of its conversation in the batch (int64); -1 on padding."""
    cu_seqlens: Any
    """Segment boundaries over the flattened rows (int32, starts at 0, ends at
    ``len(rows) * seq_len``): every conversation is a segment, and so is the padding at the
    end of a row (a row without padding has none). Tokens of segment ``k`` are
    ``flat[cu_seqlens[k]:cu_seqlens[k + 1]]``.
    """
    max_seqlen: int
    """The longest segment of :attr:`cu_seqlens` (for ``flash_attn_varlen_func``); 0 if no rows."""
    rows: list[list[int]]
    """Conversation indices of each row, in placement order (longest first)."""
    efficiency: float
    """Real tokens / (``len(rows) * seq_len``); 0.0 when there are no rows."""
    truncations: dict[int, Truncation]
    """Conversation index -> what ``truncation="right"`` cut from it here (the batch's own
    truncations stay in ``batch.truncations``).
    """
    skipped: tuple[int, ...]
    """Conversations not placed because they have no tokens (rejected ones, see
    ``batch.errors``), in index order.
    """
    seq_len: int
    """Tokens per row."""

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        extra = f", {len(self.truncations)} truncated" if self.truncations else ""
        if self.skipped:
            extra += f", {len(self.skipped)} skipped"
        placed = sum(len(r) for r in self.rows)
        return (
            f"Packed({placed} conversations in {len(self.rows)} rows of {self.seq_len}, "
            f"efficiency {self.efficiency:.3f}{extra})"
        )


def pack(
    batch: "Batch",
    seq_len: int,
    *,
    pad_id: int,
    truncation: str = "error",
    return_tensors: str = "np",
) -> Packed:
    """Pack the batch's conversations, whole, into rows of exactly ``seq_len`` tokens.

    First-fit decreasing: conversations from longest to shortest (ties by index), each into
    the first row with room; deterministic, and at most ``11/9 * optimum + 6/9`` rows. Runs
    in Rust in ``O(n log n)``.

    A conversation longer than ``seq_len`` raises ``ValueError`` naming it and its length
    (``truncation="error"``), or keeps its first ``seq_len`` tokens (``truncation="right"``,
    recorded in :attr:`Packed.truncations`). Conversations with no tokens (rejected by
    ``encode_batch(..., on_error="collect")``) are not placed and are listed in
    :attr:`Packed.skipped`. See :class:`Packed` for what each field holds.
    """
    seq_len = _check_int("seq_len", seq_len, 1)
    pad_id = _check_int("pad_id", pad_id)
    _check_choice("truncation", truncation, _TRUNCATIONS)
    _check_choice("return_tensors", return_tensors, _TENSORS)
    torch = _torch() if return_tensors == "pt" else None
    ids, offsets, lengths = _columns(batch)

    truncations: dict[int, Truncation] = {}
    if len(lengths) and int(lengths.max()) > seq_len:
        if truncation == "error":
            raise _too_long(lengths, seq_len, "seq_len")
        truncations = _right_truncations(lengths, seq_len)
    kept = np.minimum(lengths, seq_len)
    labels = None if batch.labels is None else np.ascontiguousarray(batch.labels, dtype=np.int64)

    out = _core._pack(ids, offsets, kept, seq_len, pad_id, labels)
    input_ids, out_labels, position_ids, attention_mask, sequence_ids, conversation_index = out[:6]
    cu_seqlens, row_offsets, members = out[6:]
    n_rows = len(row_offsets) - 1
    members_list = members.tolist()
    bounds = row_offsets.tolist()
    rows = [members_list[a:b] for a, b in zip(bounds, bounds[1:])]
    arrays = {
        "input_ids": input_ids,
        "labels": out_labels,
        "position_ids": position_ids,
        "attention_mask": attention_mask,
        "sequence_ids": sequence_ids,
        "conversation_index": conversation_index,
    }
    arrays = {k: v.reshape(n_rows, seq_len) for k, v in arrays.items()}
    arrays["cu_seqlens"] = cu_seqlens
    if torch is not None:
        arrays = {k: torch.from_numpy(v) for k, v in arrays.items()}
    return Packed(
        **arrays,
        max_seqlen=int(np.diff(cu_seqlens).max()) if n_rows else 0,
        rows=rows,
        efficiency=float(kept.sum()) / (n_rows * seq_len) if n_rows else 0.0,
        truncations=truncations,
        skipped=tuple(int(i) for i in np.flatnonzero(lengths == 0)),
        seq_len=seq_len,
    )


def _labels(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``ids`` as int64 with -100 (the ignore index of PyTorch's cross entropy) where not trained."""
    labels = ids.astype(np.int64)
    labels[mask == 0] = -100
    return labels


class Batch:
    """Token ids of many conversations in one flat, columnar batch.

    Conversation ``i`` is ``ids[offsets[i]:offsets[i + 1]]``; ``batch[i]`` returns that view.
    With ``return_assistant_mask=True`` the flat ``assistant_mask`` (uint8) and ``labels``
    (int64, -100 where not trained) line up with ``ids``. With ``on_error="collect"``, a
    conversation that cannot be encoded has no tokens and its reason is in :attr:`errors`.
    """

    __slots__ = ("ids", "offsets", "assistant_mask", "labels", "errors", "truncations")

    def __init__(
        self,
        ids: np.ndarray,
        offsets: np.ndarray,
        assistant_mask: Optional[np.ndarray] = None,
        labels: Optional[np.ndarray] = None,
        errors: Optional[dict[int, str]] = None,
        truncations: Optional[dict[int, Truncation]] = None,
    ) -> None:
        self.ids = ids
        """All token ids (uint32), conversation after conversation."""
        self.offsets = offsets
        """``len(self) + 1`` int64 offsets into :attr:`ids`."""
        self.assistant_mask = assistant_mask
        """Flat uint8 loss mask aligned with :attr:`ids`, or None."""
        self.labels = labels
        """Flat int64 labels aligned with :attr:`ids` (-100 where not trained), or None."""
        self.errors: dict[int, str] = errors or {}
        """Conversation index -> why it was rejected (``on_error="collect"``); rejected rows are empty."""
        self.truncations: dict[int, Truncation] = truncations or {}
        """Conversation index -> what the truncation policy cut."""

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"batch index {i} out of range for {n} conversations")
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self[i]

    @property
    def lengths(self) -> np.ndarray:
        """Number of tokens of each conversation."""
        return np.diff(self.offsets)

    def to_padded(
        self,
        pad_id: int,
        side: str = "right",
        max_length: Optional[int] = None,
        truncation: str = "error",
        return_tensors: str = "np",
    ) -> "Padded":
        """One row per conversation, padded: ``input_ids``, ``attention_mask``, ``labels``
        (only when the batch has labels), ``assistant_mask``; see :func:`chatids._training.to_padded`."""

        return to_padded(self, pad_id, side, max_length, truncation, return_tensors)

    def pack(self, seq_len: int, *, pad_id: int, truncation: str = "error", return_tensors: str = "np") -> "Packed":
        """Whole conversations packed into rows of ``seq_len`` tokens: :func:`chatids.pack`."""

        return pack(self, seq_len, pad_id=pad_id, truncation=truncation, return_tensors=return_tensors)

    def __repr__(self) -> str:
        extra = ", with labels" if self.labels is not None else ""
        if self.errors:
            extra += f", {len(self.errors)} rejected"
        return f"Batch({len(self)} conversations, {len(self.ids)} tokens{extra})"
