"""Prompt–completion pairs and preference triples for training (DPO, KTO, ORPO, reward models):
what :meth:`Encoder.encode_pair`, :meth:`Encoder.encode_preference` and their batch forms
return, and their columns for TRL.

The ids come from the core (``src/pairs.rs``): the prompt encoded with the generation prompt,
each ``prompt + completion`` encoded whole, the prompt's ids shared and each completion's ids
the rest, so ``prompt_ids + completion_ids == encode(prompt + completion)`` always. That is the
split TRL's ``DPOTrainer`` and ``KTOTrainer`` make (0.29 and later), and their columns are
``prompt_ids``, ``chosen_ids``, ``rejected_ids`` (DPO) and ``prompt_ids``, ``completion_ids``,
``label`` (KTO); TRL before 0.29 named the DPO columns ``prompt_input_ids``,
``chosen_input_ids``, ``rejected_input_ids`` (``style="trl<0.29"``). ``prompt_cut`` counts the
prompt ids that are not shared (0 unless the template renders the prompt alone differently from
the prompt followed by a reply): nothing is cut without saying so.

The masks are chatids' loss masks: the body of each assistant message of the completion (what
the model generates after the generation prompt, through the end-of-turn token; see
docs/training.md). TRL builds its own completion mask over every completion id, which also
covers the separator some templates write after the end-of-turn token (ChatML's ``"\\n"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from ._training import Batch, _labels

DPO_STYLES = ("trl", "trl<0.29")
"""The column names :meth:`PreferenceBatch.to_trl` writes: TRL 0.29 and later, or before."""


def _same(a: Any, b: Any) -> bool:
    """Field-wise equality of two result dataclasses of one type (arrays by value and dtype)."""
    if type(a) is not type(b):
        return False
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            if not (x.dtype == y.dtype and np.array_equal(x, y)):
                return False
        elif x != y:
            return False
    return True


def _rows(flat: np.ndarray, offsets: np.ndarray) -> list[list[int]]:
    values: list[int] = flat.tolist()
    ends: list[int] = offsets.tolist()
    return [values[a:b] for a, b in zip(ends, ends[1:])]


@dataclass(frozen=True, eq=False)
class EncodedPair:
    """One prompt with one completion (:meth:`Encoder.encode_pair`)."""

    prompt_ids: np.ndarray
    """The prompt's ids, with the generation prompt (uint32)."""
    completion_ids: np.ndarray
    """The ids after the prompt: ``encode(prompt + completion)[len(prompt_ids):]`` (uint32)."""
    completion_mask: np.ndarray
    """Per completion id, 1 where the loss is computed (uint8): the assistant bodies."""
    prompt_cut: int
    """Ids of the prompt's own encoding that are not in ``prompt_ids`` (see the module doc)."""

    def __eq__(self, other: object) -> bool:
        return _same(self, other)

    __hash__ = None  # type: ignore[assignment]

    @property
    def input_ids(self) -> np.ndarray:
        """``prompt_ids + completion_ids``: exactly ``encode(prompt + completion)``."""
        return np.concatenate([self.prompt_ids, self.completion_ids])

    @property
    def assistant_mask(self) -> np.ndarray:
        """The loss mask over :attr:`input_ids` (0 on the prompt)."""
        return np.concatenate([np.zeros(len(self.prompt_ids), dtype=np.uint8), self.completion_mask])

    @property
    def labels(self) -> np.ndarray:
        """:attr:`input_ids` as int64, -100 where :attr:`assistant_mask` is 0."""
        return _labels(self.input_ids, self.assistant_mask)


@dataclass(frozen=True, eq=False)
class EncodedPreference:
    """One prompt with a chosen and a rejected completion (:meth:`Encoder.encode_preference`)."""

    prompt_ids: np.ndarray
    """The shared prompt ids (uint32)."""
    chosen_ids: np.ndarray
    """``encode(prompt + chosen)[len(prompt_ids):]`` (uint32)."""
    rejected_ids: np.ndarray
    """``encode(prompt + rejected)[len(prompt_ids):]`` (uint32)."""
    chosen_mask: np.ndarray
    """Per chosen id, 1 where the loss is computed (uint8)."""
    rejected_mask: np.ndarray
    """Per rejected id, 1 where the loss is computed (uint8)."""
    prompt_cut: int
    """Ids of the prompt's own encoding that are not shared (see the module doc)."""

    def __eq__(self, other: object) -> bool:
        return _same(self, other)

    __hash__ = None  # type: ignore[assignment]

    @property
    def chosen(self) -> EncodedPair:
        """The prompt and the chosen completion."""
        return EncodedPair(self.prompt_ids, self.chosen_ids, self.chosen_mask, self.prompt_cut)

    @property
    def rejected(self) -> EncodedPair:
        """The prompt and the rejected completion."""
        return EncodedPair(self.prompt_ids, self.rejected_ids, self.rejected_mask, self.prompt_cut)

    def to_trl(self, style: str = "trl") -> dict[str, list[int]]:
        """The row as TRL's DPO trainer reads it pre-tokenized (see :data:`DPO_STYLES`)."""
        names = _dpo_names(style)
        return {
            names[0]: self.prompt_ids.tolist(),
            names[1]: self.chosen_ids.tolist(),
            names[2]: self.rejected_ids.tolist(),
        }


def _dpo_names(style: str) -> tuple[str, str, str]:
    if style == "trl":
        return ("prompt_ids", "chosen_ids", "rejected_ids")
    if style == "trl<0.29":
        return ("prompt_input_ids", "chosen_input_ids", "rejected_input_ids")
    raise ValueError(f"style must be one of {DPO_STYLES}, not {style!r}")


def _join(prompt: Batch, completion: Batch) -> Batch:
    """Row ``i`` of the result is ``prompt[i] + completion[i]``, with the completion's mask
    (0 on the prompt) and labels."""
    lp, lc = prompt.lengths, completion.lengths
    offsets = np.zeros(len(lp) + 1, dtype=np.int64)
    np.cumsum(lp + lc, out=offsets[1:])
    ids = np.empty(int(offsets[-1]), dtype=np.uint32)
    mask = np.zeros(len(ids), dtype=np.uint8)
    starts = offsets[:-1]
    into_p = np.arange(len(prompt.ids)) - np.repeat(prompt.offsets[:-1] - starts, lp)
    into_c = np.arange(len(completion.ids)) - np.repeat(completion.offsets[:-1] - starts - lp, lc)
    ids[into_p] = prompt.ids
    ids[into_c] = completion.ids
    assert completion.assistant_mask is not None
    mask[into_c] = completion.assistant_mask
    return Batch(ids, offsets, assistant_mask=mask, labels=_labels(ids, mask), errors=dict(completion.errors))


class _Rows:
    """Rows of one shared prompt and named completion slots, columnar."""

    _slots: tuple[str, ...] = ()

    def __init__(self, prompt: Batch, completions: dict[str, Batch], prompt_cut: np.ndarray, errors: dict[int, str]) -> None:
        self.prompt = prompt
        """The shared prompts: a :class:`Batch` (ids and offsets, no mask)."""
        self._completions = completions
        self.prompt_cut = prompt_cut
        """Per row, the prompt ids not shared (uint32; see the module doc)."""
        self.errors = errors
        """Row index -> why it was rejected (``on_error="collect"``); rejected rows have no ids."""

    def __len__(self) -> int:
        return len(self.prompt)

    def joined(self, slot: str) -> Batch:
        """``prompt + <slot>`` per row as a :class:`Batch` with ``assistant_mask`` and ``labels``
        (for :meth:`Batch.to_padded` and :meth:`Batch.pack`); equal to ``encode_batch`` of the
        joined conversations with ``return_assistant_mask=True, train_on`` their completions."""
        if slot not in self._completions:
            raise KeyError(f"slot must be one of {tuple(self._completions)}, not {slot!r}")
        return _join(self.prompt, self._completions[slot])

    def _columns(self, names: Sequence[str], skip_errors: bool) -> tuple[dict[str, list[list[int]]], list[int]]:
        if self.errors and not skip_errors:
            first = min(self.errors)
            raise ValueError(
                f"{len(self.errors)} rows were rejected (row {first}: {self.errors[first]}); "
                "pass skip_errors=True to leave them out (batch.errors names them)"
            )
        keep = [i for i in range(len(self)) if i not in self.errors]
        parts = [self.prompt] + [self._completions[s] for s in self._slots]
        columns = {}
        for name, part in zip(names, parts):
            rows = _rows(part.ids, part.offsets)
            columns[name] = rows if not self.errors else [rows[i] for i in keep]
        return columns, keep

    def __repr__(self) -> str:
        cut = int(np.count_nonzero(self.prompt_cut))
        extra = f", {len(self.errors)} rejected" if self.errors else ""
        extra += f", {cut} with prompt_cut" if cut else ""
        return f"{type(self).__name__}({len(self)} rows{extra})"


class PairBatch(_Rows):
    """Prompt–completion rows (:meth:`Encoder.encode_pairs`): :attr:`prompt`,
    :attr:`completion` (a :class:`Batch` whose ``assistant_mask`` and ``labels`` cover the
    completion ids), :attr:`prompt_cut`, :attr:`errors`."""

    _slots = ("completion",)

    @property
    def completion(self) -> Batch:
        """The completion ids of every row, with their masks and labels."""
        return self._completions["completion"]

    def __getitem__(self, i: int) -> EncodedPair:
        c = self.completion
        n = len(self)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"row {i} out of range for {n} rows")
        assert c.assistant_mask is not None
        return EncodedPair(
            self.prompt[j], c[j], c.assistant_mask[c.offsets[j] : c.offsets[j + 1]], int(self.prompt_cut[j])
        )

    def to_trl(self, label: Optional[Sequence[bool]] = None, *, skip_errors: bool = False) -> dict[str, list[Any]]:
        """Columns TRL's KTO trainer reads pre-tokenized: ``prompt_ids``, ``completion_ids``, and
        ``label`` (whether each completion is desirable) when given. Rejected rows raise unless
        ``skip_errors=True`` leaves them out (and their labels with them)."""
        if label is not None and len(label) != len(self):
            raise ValueError(f"label has {len(label)} values for {len(self)} rows")
        columns, keep = self._columns(("prompt_ids", "completion_ids"), skip_errors)
        out: dict[str, list[Any]] = dict(columns)
        if label is not None:
            out["label"] = [bool(label[i]) for i in keep]
        return out


class PreferenceBatch(_Rows):
    """Preference rows (:meth:`Encoder.encode_preferences`): :attr:`prompt`, :attr:`chosen`,
    :attr:`rejected` (each a :class:`Batch` whose ``assistant_mask`` and ``labels`` cover the
    completion ids), :attr:`prompt_cut`, :attr:`errors`."""

    _slots = ("chosen", "rejected")

    @property
    def chosen(self) -> Batch:
        """The chosen completion ids of every row, with their masks and labels."""
        return self._completions["chosen"]

    @property
    def rejected(self) -> Batch:
        """The rejected completion ids of every row, with their masks and labels."""
        return self._completions["rejected"]

    def __getitem__(self, i: int) -> EncodedPreference:
        n = len(self)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"row {i} out of range for {n} rows")
        c, r = self.chosen, self.rejected
        assert c.assistant_mask is not None and r.assistant_mask is not None
        return EncodedPreference(
            self.prompt[j],
            c[j],
            r[j],
            c.assistant_mask[c.offsets[j] : c.offsets[j + 1]],
            r.assistant_mask[r.offsets[j] : r.offsets[j + 1]],
            int(self.prompt_cut[j]),
        )

    def to_trl(self, style: str = "trl", *, skip_errors: bool = False) -> dict[str, list[list[int]]]:
        """Columns TRL's DPO trainer reads pre-tokenized (see :data:`DPO_STYLES`): ``prompt_ids``,
        ``chosen_ids``, ``rejected_ids``. Rejected rows raise unless ``skip_errors=True``."""
        columns, _ = self._columns(_dpo_names(style), skip_errors)
        return columns


def _rows_from_core(
    cls: "type[_Rows]", out: tuple[Any, ...]
) -> Any:
    """The result class of the core's ``encode_pairs`` tuple."""
    prompt_ids, prompt_offsets, slots, prompt_cut, errors = out
    errors = dict(errors)
    completions = {
        name: Batch(ids, offsets, assistant_mask=mask, labels=_labels(ids, mask), errors=errors)
        for name, (ids, offsets, mask) in zip(cls._slots, slots)
    }
    return cls(Batch(prompt_ids, prompt_offsets, errors=errors), completions, prompt_cut, errors)
