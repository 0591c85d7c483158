"""Files for the command line: reading conversations (JSONL, Parquet) in bounded chunks, and
writing encoded batches (Parquet, ``.npy`` sets, ``.npz``) chunk by chunk. ``_cli.py`` holds the
argument parser and the commands; ``_verify.py`` reads its records here too.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import tempfile
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import numpy as np

from ._training import Batch
from ._integrations import list_array


def _read_records(path: str) -> list[tuple[list[dict[str, Any]], Optional[list[Any]]]]:
    """(messages, tools) per line."""
    records = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{line_no}: not JSON: {e}")
            if isinstance(row, dict) and "messages" in row:
                records.append((row["messages"], row.get("tools") or None))
            else:
                records.append((row, None))
    return records


def _read_conversations(path: str) -> list[list[dict[str, Any]]]:
    return [messages for messages, _ in _read_records(path)]


@dataclass
class _Chunk:
    """Up to ``--chunk-size`` records of the input, parsed."""

    #: Position of each conversation in the input (0-based; blank JSONL lines do not count).
    index: list[int] = field(default_factory=list)
    #: 1-based line numbers (JSONL input), else empty.
    line: list[int] = field(default_factory=list)
    convs: list[Any] = field(default_factory=list)
    tools: list[Any] = field(default_factory=list)
    #: The records as read, for the side file of rejected conversations.
    rows: list[Any] = field(default_factory=list)
    #: Records rejected before encoding: (index, line or None, reason, record, raw text or None).
    rejected: list[tuple[int, Optional[int], str, Any, Optional[str]]] = field(default_factory=list)
    #: Progress units consumed (bytes of JSONL, rows of Parquet).
    progress: int = 0


def _split_record(row: Any, messages_key: str, tools_key: str) -> tuple[Optional[Any], Optional[Any], Optional[str]]:
    """(messages, tools, None), or (None, None, reason) for a record that is no conversation."""
    if isinstance(row, list):
        return row, None, None
    if isinstance(row, dict):
        if messages_key not in row:
            return None, None, f"not a conversation: the object has no {messages_key!r} key"
        tools = row.get(tools_key) or None
        return row[messages_key], tools, None
    return None, None, f"not a conversation: a JSON {type(row).__name__} (expected an object with {messages_key!r} or a list of messages)"


def _jsonl_chunks(path: str, size: int, messages_key: str, tools_key: str) -> Iterator[_Chunk]:
    """Stream a JSONL file (``.gz`` too) in chunks; a malformed line is a rejected record."""
    opener = gzip.open if path.endswith(".gz") else open
    chunk = _Chunk()
    index = 0
    with opener(path, "rb") as f:
        for line_no, raw in enumerate(f, 1):
            chunk.progress += len(raw)
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as e:
                text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                chunk.rejected.append((index, line_no, f"malformed JSON: {e}", None, text))
            else:
                messages, tools, problem = _split_record(row, messages_key, tools_key)
                if problem is not None:
                    chunk.rejected.append((index, line_no, problem, row, None))
                else:
                    chunk.index.append(index)
                    chunk.line.append(line_no)
                    chunk.convs.append(messages)
                    chunk.tools.append(tools)
                    chunk.rows.append(row)
            index += 1
            if len(chunk.convs) + len(chunk.rejected) >= size:
                yield chunk
                chunk = _Chunk()
    if chunk.convs or chunk.rejected or chunk.progress:
        yield chunk


def _parquet_chunks(path: str, size: int, messages_key: str, tools_key: str) -> Iterator[_Chunk]:
    """Stream a Parquet file by record batches (only the messages and tools columns are read)."""
    pq = _pyarrow_parquet()
    f = pq.ParquetFile(path)
    names = f.schema_arrow.names
    if messages_key not in names:
        raise _UsageError(f"{path}: no {messages_key!r} column (columns: {', '.join(names)}); see --messages-column")
    columns = [messages_key] + ([tools_key] if tools_key in names else [])
    index = 0
    for rb in f.iter_batches(batch_size=size, columns=columns):
        chunk = _Chunk(progress=rb.num_rows)
        messages = rb.column(0).to_pylist()
        tools = rb.column(1).to_pylist() if len(columns) > 1 else [None] * rb.num_rows
        for m, t in zip(messages, tools):
            record = {messages_key: m} if len(columns) == 1 else {messages_key: m, tools_key: t}
            try:
                m = json.loads(m) if isinstance(m, (str, bytes)) else m
                t = json.loads(t) if isinstance(t, (str, bytes)) else t
            except ValueError as e:
                chunk.rejected.append((index, None, f"malformed JSON: {e}", record, None))
            else:
                if m is None:
                    chunk.rejected.append((index, None, f"not a conversation: {messages_key!r} is null", record, None))
                else:
                    chunk.index.append(index)
                    chunk.convs.append(m)
                    chunk.tools.append(t or None)
                    chunk.rows.append(record)
            index += 1
        yield chunk


class _Rejections:
    """The records a command does not encode: counted by reason (``reason_kind`` strips the
    indices), the first ``shown`` listed in the summary, every one written to the side file
    (``path``, if any) as ``{"index", "line", "reason", "record"}`` (``"raw"`` text for a
    malformed line)."""

    def __init__(self, path: Optional[str], noun: str, reason_kind: Any, shown: int = 20) -> None:
        self.path, self.noun, self.reason_kind, self.shown = path, noun, reason_kind, shown
        self.file = open(path, "w", encoding="utf-8") if path else None
        self.count = 0
        self.reasons: Counter[str] = Counter()
        self.first: list[str] = []

    def add(self, index: int, line: Optional[int], reason: str, record: Any, raw: Optional[str]) -> None:
        self.count += 1
        self.reasons[self.reason_kind(reason)] += 1
        if len(self.first) < self.shown:
            where = f" (line {line})" if line is not None else ""
            self.first.append(f"  refused {self.noun} {index}{where}: {reason}")
        if self.file is not None:
            entry: dict[str, Any] = {"index": index}
            if line is not None:
                entry["line"] = line
            entry["reason"] = reason
            entry["record"] = record
            if raw is not None:
                entry["raw"] = raw
            self.file.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")

    def close(self) -> None:
        if self.file is not None:
            self.file.close()

    def print_summary(self) -> None:
        """The listed rejections, how many more, and the counts by reason."""
        for text in self.first:
            print(text)
        if self.count > len(self.first):
            where = f", all in {self.path}" if self.path else ""
            print(f"  ... {self.count - len(self.first)} more{where}")
        if self.reasons:
            print("refused, by reason:")
            for reason, count in self.reasons.most_common():
                print(f"  {count:8d}  {reason}")


class _UsageError(Exception):
    """A wrong argument or an unreadable/unwritable file: exit status 2."""


def _pyarrow_parquet() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as e:  # pragma: no cover - pyarrow is in requirements-dev.txt
        raise _UsageError("Parquet needs pyarrow: pip install 'chatids[cli]' (or pip install pyarrow)") from e
    return pq


class _NpyAppender:
    """A 1-D ``.npy`` file written incrementally: a fixed-size header, patched with the length at the end."""

    HEADER = 128  # bytes before the data: magic, version, header length, the dict padded with spaces

    def __init__(self, path: str, dtype: Any) -> None:
        self.path, self.dtype, self.count = path, np.dtype(dtype), 0
        self.f = open(path + ".partial", "wb")
        self.f.write(self._header(0))

    def _header(self, n: int) -> bytes:
        fields = "{'descr': %r, 'fortran_order': False, 'shape': (%d,), }" % (self.dtype.str, n)
        body = fields.ljust(self.HEADER - 10 - 1) + "\n"
        return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body.encode("latin1")

    def append(self, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values, dtype=self.dtype)
        self.f.write(values.data.cast("B"))
        self.count += len(values)

    def close(self) -> str:
        self.f.seek(0)
        self.f.write(self._header(self.count))
        self.f.close()
        os.replace(self.path + ".partial", self.path)
        return self.path

    def abort(self) -> None:
        self.f.close()
        with contextlib.suppress(OSError):
            os.remove(self.path + ".partial")


class _NpyWriter:
    """``PREFIX.ids.npy`` (uint32), ``PREFIX.offsets.npy`` (int64, n+1), ``PREFIX.source_index.npy``
    (int64), with masks ``PREFIX.labels.npy`` (int64) and ``PREFIX.assistant_mask.npy`` (uint8)."""

    def __init__(self, prefix: str, masks: bool, names: Optional[dict[str, str]] = None) -> None:
        columns = {"ids": np.uint32, "offsets": np.int64}
        if masks:
            columns.update(labels=np.int64, assistant_mask=np.uint8)
        columns["source_index"] = np.int64
        self.files = {key: _NpyAppender((names or {}).get(key, f"{prefix}.{key}.npy"), dtype) for key, dtype in columns.items()}
        self.files["offsets"].append(np.zeros(1, dtype=np.int64))
        self.tokens = 0
        self.rows = 0

    def write(self, batch: Batch, index: np.ndarray, line: Optional[np.ndarray]) -> None:
        self.files["ids"].append(batch.ids)
        self.files["offsets"].append(batch.offsets[1:] + self.tokens)
        if "labels" in self.files:
            assert batch.labels is not None and batch.assistant_mask is not None
            self.files["labels"].append(batch.labels)
            self.files["assistant_mask"].append(batch.assistant_mask)
        self.files["source_index"].append(index)
        self.tokens += int(batch.offsets[-1])
        self.rows += len(index)

    def close(self) -> list[str]:
        return [f.close() for f in self.files.values()]

    def abort(self) -> None:
        for f in self.files.values():
            f.abort()


class _NpzWriter:
    """The ``.npz`` of earlier versions (``ids``, ``offsets``, ``conversation_index``), built from
    streamed ``.npy`` files zipped at the end (stored, not compressed, as ``np.savez`` does)."""

    def __init__(self, path: str, masks: bool) -> None:
        self.path = path
        self.tmp = tempfile.mkdtemp(prefix=".chatids-", dir=os.path.dirname(os.path.abspath(path)))
        names = {"source_index": os.path.join(self.tmp, "conversation_index.npy")}
        names.update({k: os.path.join(self.tmp, f"{k}.npy") for k in ("ids", "offsets", "labels", "assistant_mask")})
        self.inner = _NpyWriter(os.path.join(self.tmp, "x"), masks, names)

    def write(self, batch: Batch, index: np.ndarray, line: Optional[np.ndarray]) -> None:
        self.inner.write(batch, index, line)

    @property
    def rows(self) -> int:
        return self.inner.rows

    def close(self) -> list[str]:
        files = self.inner.close()
        with zipfile.ZipFile(self.path + ".partial", "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            for f in files:
                z.write(f, os.path.basename(f))
        os.replace(self.path + ".partial", self.path)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return [self.path]

    def abort(self) -> None:
        self.inner.abort()
        shutil.rmtree(self.tmp, ignore_errors=True)


class _ParquetWriter:
    """One row group per chunk: ``input_ids`` list<uint32>, ``labels`` list<int64> and
    ``assistant_mask`` list<uint8> with masks, ``source_index`` int64, ``source_line`` int64 (JSONL)."""

    def __init__(self, path: str, masks: bool, lines: bool, metadata: dict[str, str]) -> None:
        import pyarrow as pa

        pq = _pyarrow_parquet()
        fields = [pa.field("input_ids", pa.list_(pa.uint32()))]
        if masks:
            fields += [pa.field("labels", pa.list_(pa.int64())), pa.field("assistant_mask", pa.list_(pa.uint8()))]
        fields.append(pa.field("source_index", pa.int64()))
        if lines:
            fields.append(pa.field("source_line", pa.int64()))
        self.schema = pa.schema(fields, metadata={f"chatids.{k}": v for k, v in metadata.items()})
        self.path = path
        self.writer = pq.ParquetWriter(path + ".partial", self.schema)
        self.masks, self.lines = masks, lines
        self.rows = 0

    def write(self, batch: Batch, index: np.ndarray, line: Optional[np.ndarray]) -> None:
        import pyarrow as pa

        columns = [list_array(batch.ids, batch.offsets)]
        if self.masks:
            assert batch.labels is not None and batch.assistant_mask is not None
            columns += [list_array(batch.labels, batch.offsets), list_array(batch.assistant_mask, batch.offsets)]
        columns.append(pa.array(index, type=pa.int64()))
        if self.lines:
            columns.append(pa.array(line, type=pa.int64()))
        self.writer.write_table(pa.Table.from_arrays(columns, schema=self.schema))
        self.rows += len(index)

    def close(self) -> list[str]:
        self.writer.close()
        os.replace(self.path + ".partial", self.path)
        return [self.path]

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()
        with contextlib.suppress(OSError):
            os.remove(self.path + ".partial")


def _output_kind(path: str) -> tuple[str, str]:
    """("parquet" | "npy" | "npz", stem for the side files)."""
    for suffix, kind in ((".parquet", "parquet"), (".pq", "parquet"), (".npy", "npy"), (".npz", "npz")):
        if path.endswith(suffix):
            return kind, path[: -len(suffix)]
    raise _UsageError(f"--out {path}: name it FILE.parquet, PREFIX.npy (writes PREFIX.ids.npy, PREFIX.offsets.npy, ...) or FILE.npz")


def _keep_accepted(batch: Batch, rejected: set[int]) -> Batch:
    """The accepted conversations of a chunk's batch, in order."""
    if not rejected:
        return batch
    keep = np.array([i for i in range(len(batch)) if i not in rejected], dtype=np.int64)
    lengths = np.diff(batch.offsets)
    offsets = np.zeros(len(keep) + 1, dtype=np.int64)
    np.cumsum(lengths[keep], out=offsets[1:])
    if not lengths[sorted(rejected)].any():  # rejected conversations have no tokens: nothing to cut out
        return Batch(batch.ids, offsets, assistant_mask=batch.assistant_mask, labels=batch.labels)
    tokens = np.repeat(np.isin(np.arange(len(batch)), keep), lengths)

    def pick(a: Optional[np.ndarray]) -> Optional[np.ndarray]:
        return None if a is None else a[tokens]

    return Batch(batch.ids[tokens], offsets, assistant_mask=pick(batch.assistant_mask), labels=pick(batch.labels))
