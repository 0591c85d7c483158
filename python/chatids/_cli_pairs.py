"""``chatids encode --pairs``: a file of preference or prompt–completion records to TRL's
pre-tokenized columns, streaming in chunks.

Records are TRL's conversational dataset rows, one JSON object per JSONL line or one Parquet row,
each with an optional ``tools`` list:

* preference: ``prompt``, ``chosen``, ``rejected``; or ``chosen`` and ``rejected`` alone (the
  implicit prompt: their longest common run of leading messages, as TRL's ``extract_prompt``);
* unpaired (KTO): ``prompt``, ``completion`` and an optional ``label``.

A completion is a message or a list of messages; a prompt is a list of messages (a JSON string
of them in Parquet is read too). The first valid record decides the kind of the file; a record of
another kind is rejected, like a malformed one, with its reason in the summary and in
``OUT.rejected.jsonl``. The output (``--out FILE.parquet`` or ``FILE.jsonl``) has TRL's columns
(``prompt_ids``, ``chosen_ids``, ``rejected_ids``; or ``prompt_ids``, ``completion_ids``,
``label``; ``--trl-style "trl<0.29"`` for the older DPO names), ``--masks`` adds each
completion's loss mask, and every row has ``prompt_cut``, ``source_index`` and (JSONL input)
``source_line``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import numpy as np

from . import Encoder, __version__
from ._files import _pyarrow_parquet, _Rejections, _UsageError
from ._integrations import list_array
from ._pairs import _dpo_names, _Rows

KINDS = {"preference": ("chosen", "rejected"), "unpaired": ("completion",)}


@dataclass
class _Row:
    index: int
    line: Optional[int]
    prompt: Any
    completions: list[Any]
    tools: Any
    label: Optional[bool]
    record: Any


@dataclass
class _PairChunk:
    rows: list[_Row] = field(default_factory=list)
    rejected: list[tuple[int, Optional[int], str, Any, Optional[str]]] = field(default_factory=list)


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def _implicit_prompt(chosen: Any, rejected: Any) -> tuple[list[Any], list[Any], list[Any]]:
    """TRL's ``extract_prompt`` on conversations: the leading messages both share are the prompt."""
    n = 0
    for a, b in zip(chosen, rejected):
        if a != b:
            break
        n += 1
    return chosen[:n], chosen[n:], rejected[n:]


def _parse(record: Any, kind: Optional[str]) -> tuple[Optional[str], Optional[tuple[Any, list[Any], Any, Optional[bool]]], Optional[str]]:
    """(kind, (prompt, completions, tools, label), None) or (kind, None, reason)."""
    if not isinstance(record, dict):
        return kind, None, f"not a record: a JSON {type(record).__name__} (expected an object with prompt/chosen/rejected or prompt/completion)"
    keys = set(record)
    found = "preference" if {"chosen", "rejected"} <= keys else "unpaired" if {"prompt", "completion"} <= keys else None
    if found is None:
        return kind, None, "neither a preference (prompt, chosen, rejected) nor a prompt–completion (prompt, completion) record"
    if kind is not None and found != kind:
        return kind, None, f"{'an' if found == 'unpaired' else 'a'} {found} record in a file of {kind} records"
    try:
        tools = _loads(record.get("tools")) or None
        if found == "preference":
            chosen, rejected = _loads(record["chosen"]), _loads(record["rejected"])
            if "prompt" in record and record["prompt"] is not None:
                prompt = _loads(record["prompt"])
            elif isinstance(chosen, list) and isinstance(rejected, list):
                prompt, chosen, rejected = _implicit_prompt(chosen, rejected)
            else:
                return found, None, "an implicit-prompt record needs chosen and rejected as lists of messages"
            return found, (prompt, [chosen, rejected], tools, None), None
        label = record.get("label")
        if label is not None and not isinstance(label, bool):
            return found, None, f"label must be true or false, not {label!r}"
        return found, (_loads(record["prompt"]), [_loads(record["completion"])], tools, label), None
    except ValueError as e:
        return found, None, f"malformed JSON: {e}"


def _jsonl_records(path: str) -> Iterator[tuple[int, Optional[int], Any, Optional[str], Optional[str], int]]:
    """(index, line, record, raw text if malformed, reason if malformed, bytes read)."""
    opener = gzip.open if path.endswith(".gz") else open
    index = 0
    with opener(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                yield index, line_no, json.loads(raw), None, None, len(raw)
            except (ValueError, UnicodeDecodeError) as e:
                yield index, line_no, None, raw.decode("utf-8", errors="replace").rstrip("\r\n"), f"malformed JSON: {e}", len(raw)
            index += 1


def _parquet_records(path: str) -> Iterator[tuple[int, Optional[int], Any, Optional[str], Optional[str], int]]:
    pq = _pyarrow_parquet()
    f = pq.ParquetFile(path)
    wanted = [c for c in ("prompt", "chosen", "rejected", "completion", "label", "tools") if c in f.schema_arrow.names]
    index = 0
    for rb in f.iter_batches(batch_size=1024, columns=wanted):
        for record in rb.to_pylist():
            yield index, None, record, None, None, 1
            index += 1


def _chunks(path: str, size: int) -> Iterator[tuple[_PairChunk, str, int]]:
    """Chunks of parsed rows, the file's kind, and progress units consumed."""
    records = _parquet_records(path) if path.endswith((".parquet", ".pq")) else _jsonl_records(path)
    kind: Optional[str] = None
    chunk, progress = _PairChunk(), 0
    for index, line, record, raw, problem, units in records:
        progress += units
        if problem is not None:
            chunk.rejected.append((index, line, problem, None, raw))
        else:
            kind, parsed, reason = _parse(record, kind)
            if parsed is None:
                chunk.rejected.append((index, line, reason or "", record, None))
            else:
                prompt, completions, tools, label = parsed
                chunk.rows.append(_Row(index, line, prompt, completions, tools, label, record))
        if len(chunk.rows) + len(chunk.rejected) >= size:
            yield chunk, kind or "preference", progress
            chunk, progress = _PairChunk(), 0
    if chunk.rows or chunk.rejected or progress:
        yield chunk, kind or "preference", progress


def _encode_chunk(enc: Encoder, kind: str, rows: list[_Row], options: dict[str, Any]) -> list[tuple[_Row, Any, Optional[str]]]:
    """Each row with its encoding (an EncodedPreference or EncodedPair) or the reason it was
    refused; one batch call per tool set, since tools are a template argument of the call."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        groups[json.dumps(row.tools, default=str)].append(i)
    out: list[Any] = [None] * len(rows)
    for members in groups.values():
        tools = rows[members[0]].tools
        extra = {} if tools is None else {"tools": tools}
        prompts = [rows[i].prompt for i in members]
        batch: _Rows
        if kind == "preference":
            batch = enc.encode_preferences(prompts, [rows[i].completions[0] for i in members], [rows[i].completions[1] for i in members], on_error="collect", **options, **extra)
        else:
            batch = enc.encode_pairs(prompts, [rows[i].completions[0] for i in members], on_error="collect", **options, **extra)
        for b, i in enumerate(members):
            out[i] = (rows[i], None, batch.errors[b]) if b in batch.errors else (rows[i], batch[b], None)
    return out


class _Writer:
    """Parquet (one row group per chunk) or JSONL; the columns of the kind and style."""

    def __init__(self, path: str, kind: str, style: str, masks: bool, lines: bool, metadata: dict[str, str]) -> None:
        self.path, self.kind, self.masks, self.lines = path, kind, masks, lines
        self.names = _dpo_names(style) if kind == "preference" else ("prompt_ids", "completion_ids")
        self.parquet = path.endswith((".parquet", ".pq"))
        self.rows = 0
        if self.parquet:
            import pyarrow as pa

            pq = _pyarrow_parquet()
            fields = [pa.field(n, pa.list_(pa.uint32())) for n in self.names]
            if kind == "unpaired":
                fields.append(pa.field("label", pa.bool_()))
            if masks:
                fields += [pa.field(m, pa.list_(pa.uint8())) for m in self._mask_names()]
            fields += [pa.field("prompt_cut", pa.int64()), pa.field("source_index", pa.int64())]
            if lines:
                fields.append(pa.field("source_line", pa.int64()))
            self.schema = pa.schema(fields, metadata={f"chatids.{k}": v for k, v in metadata.items()})
            self.writer = pq.ParquetWriter(path + ".partial", self.schema)
        else:
            self.file = open(path + ".partial", "w", encoding="utf-8")

    def _mask_names(self) -> tuple[str, ...]:
        return ("chosen_mask", "rejected_mask") if self.kind == "preference" else ("completion_mask",)

    def _columns(self, row: _Row, encoded: Any) -> dict[str, Any]:
        ids: tuple[np.ndarray, ...]
        masks: tuple[np.ndarray, ...]
        if self.kind == "preference":
            ids = (encoded.prompt_ids, encoded.chosen_ids, encoded.rejected_ids)
            masks = (encoded.chosen_mask, encoded.rejected_mask)
        else:
            ids = (encoded.prompt_ids, encoded.completion_ids)
            masks = (encoded.completion_mask,)
        out: dict[str, Any] = dict(zip(self.names, ids))
        if self.kind == "unpaired":
            out["label"] = row.label
        if self.masks:
            out.update(zip(self._mask_names(), masks))
        out["prompt_cut"] = encoded.prompt_cut
        out["source_index"] = row.index
        if self.lines:
            out["source_line"] = row.line
        return out

    def write(self, accepted: list[tuple[_Row, Any]]) -> None:
        if not accepted:
            return
        rows = [self._columns(row, encoded) for row, encoded in accepted]
        self.rows += len(rows)
        if not self.parquet:
            for r in rows:
                plain = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in r.items()}
                self.file.write(json.dumps(plain) + "\n")
            return
        import pyarrow as pa

        arrays = []
        for f in self.schema:
            values = [r[f.name] for r in rows]
            if pa.types.is_list(f.type):
                flat = np.concatenate(values) if values else np.zeros(0)
                offsets = np.zeros(len(values) + 1, dtype=np.int64)
                np.cumsum([len(v) for v in values], out=offsets[1:])
                arrays.append(list_array(flat.astype(f.type.value_type.to_pandas_dtype()), offsets))
            else:
                arrays.append(pa.array(values, type=f.type))
        self.writer.write_table(pa.Table.from_arrays(arrays, schema=self.schema))

    def close(self) -> str:
        if self.parquet:
            self.writer.close()
        else:
            self.file.close()
        os.replace(self.path + ".partial", self.path)
        return self.path

    def abort(self) -> None:
        try:
            self.writer.close() if self.parquet else self.file.close()
        except Exception:  # noqa: BLE001 - best effort before removing the partial file
            pass
        if os.path.exists(self.path + ".partial"):
            os.remove(self.path + ".partial")


def encode_pairs_file(args: argparse.Namespace, enc: Encoder, kwargs: dict[str, Any], reason_kind: Any) -> int:
    """The pairs mode of ``chatids encode``; ``reason_kind`` strips indices for the summary."""
    if args.out and not args.out.endswith((".parquet", ".pq", ".jsonl")):
        raise _UsageError(f"--out {args.out}: the pairs mode writes FILE.parquet or FILE.jsonl")
    unsupported = [flag for flag, on in (("--add-generation-prompt", args.add_generation_prompt), ("--train-on", args.train_on),
                                         ("--max-length", args.max_length is not None), ("--truncation", args.truncation is not None),
                                         ("--show", bool(args.show))) if on]
    if unsupported:
        raise _UsageError(f"--pairs does not take {', '.join(unsupported)} (the prompt always ends with the generation prompt; "
                          "trainers truncate pairs themselves)")
    options: dict[str, Any] = {"sanitize_control_tokens": not args.no_sanitize, "num_threads": args.workers}
    if args.system is not None:
        options["system"] = args.system
    if args.merge_consecutive:
        options["merge_consecutive"] = True
    parquet_in = args.input.endswith((".parquet", ".pq"))
    stem = os.path.splitext(args.out)[0] if args.out else None
    rejected_path = args.rejected or (stem + ".rejected.jsonl" if stem else None)
    rejections = _Rejections(rejected_path, "row", reason_kind)
    reject = rejections.add
    writer: Optional[_Writer] = None
    n_rows = n_tokens = n_cut = 0
    encode_time = 0.0
    kind = "preference"

    start = time.perf_counter()
    try:
        for chunk, kind, _ in _chunks(args.input, args.chunk_size):
            for rejection in chunk.rejected:
                reject(*rejection)
            t0 = time.perf_counter()
            results = _encode_chunk(enc, kind, chunk.rows, {**options, **kwargs})
            encode_time += time.perf_counter() - t0
            accepted = []
            for row, encoded, reason in results:
                if reason is not None:
                    reject(row.index, row.line, reason, row.record, None)
                    continue
                accepted.append((row, encoded))
                n_cut += encoded.prompt_cut > 0
                parts = (encoded.prompt_ids, encoded.chosen_ids, encoded.rejected_ids) if kind == "preference" else (encoded.prompt_ids, encoded.completion_ids)
                n_tokens += sum(len(p) for p in parts)
            n_rows += len(accepted)
            if args.out:
                if writer is None:
                    meta = {"format": enc.format, "reference": enc.reference, "version": __version__, "input": os.path.basename(args.input), "kind": kind}
                    writer = _Writer(args.out, kind, args.trl_style, args.masks, not parquet_in, meta)
                writer.write(accepted)
        written = writer.close() if writer is not None else None
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    finally:
        rejections.close()
    elapsed = time.perf_counter() - start
    n_rejected = rejections.count
    print(f"{n_rows} {kind} rows -> {n_tokens} tokens in {elapsed:.2f} s ({(n_rows + n_rejected) / max(elapsed, 1e-9):,.0f} rows/s; "
          f"encoding {encode_time:.2f} s); refused: {n_rejected}; prompt_cut > 0: {n_cut} rows")
    rejections.print_summary()
    if written:
        print(f"wrote {written} ({n_rows} rows; columns for TRL's {'DPO' if kind == 'preference' else 'KTO'} trainer)")
    if rejected_path:
        print(f"rejected rows: {rejected_path} ({n_rejected})")
    return 1 if n_rejected and args.strict else 0
