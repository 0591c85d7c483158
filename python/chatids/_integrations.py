"""Batch encoding for pipelines: Hugging Face ``datasets``, Ray Data, and the ``encode`` command.

* :func:`encode_collect` encodes a list of conversations (each with its own ``tools``, or none)
  into one :class:`~chatids.Batch` in input order, and never raises for a bad conversation: it
  gets no tokens and its reason goes to ``batch.errors[i]``. The command line streams files
  through it.
* :func:`hf_map` returns a picklable callable for ``datasets.Dataset.map(fn, batched=True)``.
* :class:`RayEncode` is a callable class for Ray Data's ``Dataset.map_batches``.

Rejected conversations never vanish: both integrations add an ``error`` column (``None``, or the
reason) and give the row empty ``input_ids``; ``on_error="raise"`` raises instead.

The encoder travels to worker processes either by value (when :class:`~chatids.Encoder` can be
pickled) or, when a checkpoint path is passed instead of an encoder, as that path: each worker
loads the checkpoint once (the right choice on a multi-node cluster with shared storage).
"""

from __future__ import annotations

import json
import os
import pickle
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from ._core import ChatTemplateError
from ._encoder import Encoder
from ._training import Batch

__all__ = ["encode_collect", "hf_map", "HFMap", "RayEncode"]

def _empty(dtype: Any) -> np.ndarray:
    return np.zeros(0, dtype=dtype)


def _assemble(n: int, parts: list[tuple[Sequence[int], Batch]], masks: bool) -> Batch:
    """One batch in original order from batches over disjoint index sets."""
    if len(parts) == 1 and list(parts[0][0]) == list(range(n)):
        return parts[0][1]
    lengths = np.zeros(n, dtype=np.int64)
    for positions, b in parts:
        if len(positions):
            lengths[np.asarray(positions, dtype=np.int64)] = np.diff(b.offsets)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    ids = np.empty(total, dtype=np.uint32)
    mask = np.empty(total, dtype=np.uint8) if masks else None
    labels = np.empty(total, dtype=np.int64) if masks else None
    errors: dict[int, str] = {}
    truncations: dict[int, Any] = {}
    for positions, b in parts:
        for k, i in enumerate(positions):
            lo, hi = int(offsets[i]), int(offsets[i + 1])
            blo, bhi = int(b.offsets[k]), int(b.offsets[k + 1])
            ids[lo:hi] = b.ids[blo:bhi]
            if masks:
                assert mask is not None and labels is not None
                assert b.assistant_mask is not None and b.labels is not None
                mask[lo:hi] = b.assistant_mask[blo:bhi]
                labels[lo:hi] = b.labels[blo:bhi]
        for k, reason in b.errors.items():
            errors[positions[k]] = reason
        for k, t in b.truncations.items():
            truncations[positions[k]] = t
    return Batch(ids, offsets, assistant_mask=mask, labels=labels, errors=errors, truncations=truncations)


def _empty_batch(n: int, masks: bool) -> Batch:
    return Batch(
        _empty(np.uint32),
        np.zeros(n + 1, dtype=np.int64),
        assistant_mask=_empty(np.uint8) if masks else None,
        labels=_empty(np.int64) if masks else None,
    )


def _encode_group(enc: Encoder, convs: Sequence[Any], num_threads: Optional[int], kw: dict[str, Any], masks: bool) -> Batch:
    if not convs:
        return _empty_batch(0, masks)
    return enc.encode_batch(convs, num_threads=num_threads, on_error="collect", **kw)


def encode_collect(
    enc: Encoder,
    conversations: Sequence[Any],
    tools: Optional[Sequence[Optional[Any]]] = None,
    *,
    num_threads: Optional[int] = None,
    add_generation_prompt: bool = False,
    sanitize_control_tokens: bool = True,
    return_assistant_mask: bool = False,
    train_on: Optional[str] = None,
    max_length: Optional[int] = None,
    truncation: Optional[str] = None,
    **template_kwargs: Any,
) -> Batch:
    """``enc.encode_batch`` that collects errors instead of raising, with per-conversation tools.

    ``tools[i]`` (``None`` for none) is passed as the ``tools`` template argument of conversation
    ``i``; conversations with the same tools share one ``encode_batch`` call. A conversation that
    cannot be encoded gets 0 tokens and ``batch.errors[i]`` says why.
    """
    kw: dict[str, Any] = dict(template_kwargs)
    kw["add_generation_prompt"] = add_generation_prompt
    kw["sanitize_control_tokens"] = sanitize_control_tokens
    asked = {
        "return_assistant_mask": return_assistant_mask or None,
        "train_on": train_on,
        "max_length": max_length,
        "truncation": truncation,
    }
    kw.update({name: value for name, value in asked.items() if value is not None})
    masks = bool(return_assistant_mask)
    n = len(conversations)
    if tools is None or all(t is None for t in tools):
        return _encode_group(enc, conversations, num_threads, kw, masks)
    groups: dict[str, list[int]] = {}
    for i, t in enumerate(tools):
        key = "" if t is None else json.dumps(t, default=str)
        groups.setdefault(key, []).append(i)
    parts: list[tuple[Sequence[int], Batch]] = []
    for members in groups.values():
        t = tools[members[0]]
        extra = {} if t is None else {"tools": t}
        parts.append((members, _encode_group(enc, [conversations[i] for i in members], num_threads, {**kw, **extra}, masks)))
    return _assemble(n, parts, masks)


# --- columns ------------------------------------------------------------------------------


def list_array(flat: np.ndarray, offsets: np.ndarray) -> Any:
    """A pyarrow ``list<...>`` array over ``flat`` (zero copy), ``large_list`` past 2**31 values."""
    import pyarrow as pa

    offsets = np.asarray(offsets, dtype=np.int64)
    if len(offsets) and offsets[-1] >= 2**31 - 1:
        return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat))
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(flat))


def _plain(x: Any) -> Any:
    """numpy containers (Ray's "numpy" batches) back to lists, dicts and Python scalars."""
    if isinstance(x, np.ndarray):
        return [_plain(v) for v in x.tolist()] if x.dtype != object else [_plain(v) for v in x]
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


def _missing(x: Any) -> bool:
    """None, or the NaN that numpy/pandas batches put in place of a null."""
    return x is None or (isinstance(x, float) and x != x)


def _json_or_value(x: Any) -> Any:
    """A column may hold JSON text (the safe way to store tools and tool calls in Arrow)."""
    return json.loads(x) if isinstance(x, (str, bytes)) else x


def _restore(cls: "type[_ColumnEncoder]", config: dict[str, Any], payload: Optional[bytes]) -> "_ColumnEncoder":
    obj = cls.__new__(cls)
    obj.__dict__.update(config)
    obj._enc = None if payload is None else pickle.loads(payload)
    return obj


class _ColumnEncoder:
    """Configuration, encoder loading and pickling shared by :class:`HFMap` and :class:`RayEncode`."""

    def __init__(
        self,
        encoder: Union[Encoder, str, os.PathLike[str]],
        *,
        messages_column: str = "messages",
        tools_column: Optional[str] = None,
        return_assistant_mask: bool = True,
        train_on: Optional[str] = "all_assistant",
        max_length: Optional[int] = None,
        truncation: Optional[str] = None,
        add_generation_prompt: bool = False,
        sanitize_control_tokens: bool = True,
        on_error: str = "column",
        num_threads: Optional[int] = None,
        encoder_kwargs: Optional[Mapping[str, Any]] = None,
        **template_kwargs: Any,
    ) -> None:
        if on_error not in ("column", "raise"):
            raise ValueError(f'on_error must be "column" or "raise", not {on_error!r}')
        self._enc: Optional[Encoder] = None
        self.model: Optional[str] = None
        if isinstance(encoder, Encoder):
            self._enc = encoder
        elif isinstance(encoder, (str, os.PathLike)):
            self.model = os.fspath(encoder)
        else:
            raise TypeError(f"expected a chatids.Encoder or a checkpoint path, not {type(encoder).__name__}")
        self.encoder_kwargs = dict(encoder_kwargs or {})
        self.messages_column = messages_column
        self.tools_column = tools_column
        self.return_assistant_mask = return_assistant_mask
        self.on_error = on_error
        self.options: dict[str, Any] = dict(
            return_assistant_mask=return_assistant_mask,
            train_on=train_on if return_assistant_mask else None,
            max_length=max_length,
            truncation=truncation,
            add_generation_prompt=add_generation_prompt,
            sanitize_control_tokens=sanitize_control_tokens,
            num_threads=num_threads,
            **template_kwargs,
        )

    @property
    def encoder(self) -> Encoder:
        """The encoder (loaded from :attr:`model` on first use in this process)."""
        if self._enc is None:
            assert self.model is not None
            self._enc = Encoder.from_pretrained(self.model, **self.encoder_kwargs)
        return self._enc

    def __reduce__(self) -> Any:
        # The encoder travels by value (chatids.Encoder pickles its tokenizer and template); a
        # checkpoint path travels as the path and each worker loads it once.
        config = {k: v for k, v in self.__dict__.items() if k != "_enc"}
        payload = None if self.model is not None else pickle.dumps(self._enc, protocol=pickle.HIGHEST_PROTOCOL)
        return (_restore, (type(self), config, payload))

    def encode_columns(self, conversations: Sequence[Any], tools: Optional[Sequence[Any]]) -> Batch:
        """Encode one batch of rows; raises on a rejected row when ``on_error="raise"``."""
        convs = [_json_or_value(c) for c in conversations]
        tools_list = None if tools is None else [None if _missing(t) else _json_or_value(t) for t in tools]
        batch = encode_collect(self.encoder, convs, tools_list, **self.options)
        if batch.errors and self.on_error == "raise":
            i = min(batch.errors)
            raise ChatTemplateError(f"row {i} of the batch: {batch.errors[i]}")
        return batch


class HFMap(_ColumnEncoder):
    """``datasets.Dataset.map(fn, batched=True)`` function; see :func:`hf_map`."""

    def __call__(self, examples: Mapping[str, Any]) -> dict[str, list[Any]]:
        convs = list(examples[self.messages_column])
        tools = list(examples[self.tools_column]) if self.tools_column else None
        batch = self.encode_columns(convs, tools)
        off = batch.offsets.tolist()
        n = len(convs)

        def split(flat: np.ndarray) -> list[list[int]]:
            values = flat.tolist()
            return [values[off[i] : off[i + 1]] for i in range(n)]

        out: dict[str, list[Any]] = {"input_ids": split(batch.ids)}
        out["attention_mask"] = [[1] * (off[i + 1] - off[i]) for i in range(n)]
        if self.return_assistant_mask:
            assert batch.labels is not None and batch.assistant_mask is not None
            out["labels"] = split(batch.labels)
            out["assistant_mask"] = split(batch.assistant_mask)
        if self.on_error == "column":
            out["error"] = [batch.errors.get(i) for i in range(n)]
        return out


def hf_map(
    encoder: Union[Encoder, str, os.PathLike[str]],
    *,
    messages_column: str = "messages",
    tools_column: Optional[str] = None,
    return_assistant_mask: bool = True,
    train_on: Optional[str] = "all_assistant",
    max_length: Optional[int] = None,
    truncation: Optional[str] = None,
    add_generation_prompt: bool = False,
    sanitize_control_tokens: bool = True,
    on_error: str = "column",
    num_threads: Optional[int] = None,
    encoder_kwargs: Optional[Mapping[str, Any]] = None,
    **template_kwargs: Any,
) -> HFMap:
    """A function for ``ds.map(fn, batched=True, remove_columns=ds.column_names)``.

    It returns ``input_ids`` and ``attention_mask``, plus ``labels`` (-100 where not trained) and
    ``assistant_mask`` when ``return_assistant_mask=True`` (the default), as lists of ints, and
    an ``error`` column: ``None``, or why the row's conversation was rejected (its other columns
    are then empty). Keep the good rows with ``ds.filter(lambda r: r["error"] is None)``;
    ``on_error="raise"`` raises :class:`~chatids.ChatTemplateError` at the first rejected row
    instead (and adds no ``error`` column).

    ``encoder`` is a :class:`~chatids.Encoder` or a checkpoint path (loaded once per worker
    process, with ``encoder_kwargs`` passed to :meth:`Encoder.from_pretrained`). The function
    pickles, so ``num_proc=`` works (give it ``num_threads=cores // num_proc``: each call of
    ``encode_batch`` otherwise uses every core). ``tools_column`` names a per-row ``tools`` list; tools and
    messages may also be stored as JSON strings (Arrow's struct columns add ``None`` for keys
    other rows have, which would change a JSON schema the template prints).
    """
    return HFMap(
        encoder,
        messages_column=messages_column,
        tools_column=tools_column,
        return_assistant_mask=return_assistant_mask,
        train_on=train_on,
        max_length=max_length,
        truncation=truncation,
        add_generation_prompt=add_generation_prompt,
        sanitize_control_tokens=sanitize_control_tokens,
        on_error=on_error,
        num_threads=num_threads,
        encoder_kwargs=encoder_kwargs,
        **template_kwargs,
    )


class RayEncode(_ColumnEncoder):
    """A callable class for Ray Data: ``ds.map_batches(chatids.RayEncode, fn_constructor_kwargs=...)``.

    Takes the same arguments as :func:`hf_map` (``model`` is a checkpoint path, loaded once per
    actor, or an :class:`~chatids.Encoder`, sent by value). Accepts ``"pyarrow"``,
    ``"numpy"`` and ``"pandas"`` batches and returns a ``pyarrow.Table``: the input's other
    columns, then ``input_ids`` (``list<uint32>``), ``labels`` (``list<int64>``) and
    ``assistant_mask`` (``list<uint8>``) when asked, and ``error`` (null, or the reason; that
    row's lists are empty) unless ``on_error="raise"``. ``drop_input=False`` keeps the messages
    and tools columns too.
    """

    def __init__(
        self,
        model: Union[Encoder, str, os.PathLike[str]],
        *,
        drop_input: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, **kwargs)
        self.drop_input = drop_input
        self.encoder  # noqa: B018 - load in the actor's constructor, not in the first batch

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        if isinstance(batch, pa.Table):
            table = batch
            convs = table.column(self.messages_column).to_pylist()
            tools = table.column(self.tools_column).to_pylist() if self.tools_column else None
            keep = {name: table.column(name) for name in table.column_names}
        else:
            if not isinstance(batch, dict):  # pandas.DataFrame
                batch = {name: batch[name].to_numpy() for name in batch.columns}
            convs = _plain(batch[self.messages_column])
            tools = _plain(batch[self.tools_column]) if self.tools_column else None
            keep = {name: _column_to_arrow(values) for name, values in batch.items()}
        if self.drop_input:
            for name in (self.messages_column, self.tools_column):
                if name is not None:
                    keep.pop(name, None)
        encoded = self.encode_columns(convs, tools)
        columns = dict(keep)
        columns["input_ids"] = list_array(encoded.ids, encoded.offsets)
        if self.return_assistant_mask:
            assert encoded.labels is not None and encoded.assistant_mask is not None
            columns["labels"] = list_array(encoded.labels, encoded.offsets)
            columns["assistant_mask"] = list_array(encoded.assistant_mask, encoded.offsets)
        if self.on_error == "column":
            columns["error"] = pa.array([encoded.errors.get(i) for i in range(len(convs))], type=pa.string())
        return pa.table(columns)


def _column_to_arrow(values: Any) -> Any:
    import pyarrow as pa

    if isinstance(values, np.ndarray) and values.dtype != object and values.ndim == 1:
        return pa.array(values)
    return pa.array(_plain(values))

