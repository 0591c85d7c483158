"""``chatids encode`` on files: JSONL or Parquet in, Parquet or ``.npy`` out, streamed in chunks.

Every expected value comes from ``Encoder.encode_batch`` called on one conversation at a time
(with that conversation's ``tools``), independently of the command's own grouping and chunking.
Every input record must come out either as a row of the output or as a line of the rejected
file, never both, never neither.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pytest

import support

import chatids
from chatids._cli import main

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

MODEL = "qwen2.5-7b-instruct"  # native format, no clock; its template renders the tool conversations
GENERIC = "qwen2.5-7b-instruct"  # forced onto the Jinja path (format="jinja"); its template renders tools
FILES = ["alpaca_gpt4_en_1k.jsonl", "sharegpt_gpt4_zh_1k.jsonl", "glaive_toolcall_en.jsonl", "hh_rlhf_harmless_base_test.jsonl"]
MALFORMED = '{"messages": [{"role": "user", "content": "cut off'
NOT_A_CONVERSATION = '{"prompt": "no messages key"}'


def corpus_records() -> list[dict]:
    files = support.corpus_files()
    support.require_corpus(files[0] if files else "<no corpus>")
    rows = []
    for name in FILES:
        if name in files:
            rows += support.corpus_rows(name)[:12]
    assert rows, "no corpus rows"
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> list[str]:
    """The corpus rows with a malformed line, a record without messages, a bare list of
    messages and a blank line mixed in; returns the non-blank lines as written."""
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    lines.insert(3, MALFORMED)
    lines.insert(7, NOT_A_CONVERSATION)
    lines.insert(9, json.dumps([{"role": "user", "content": "a bare list of messages"}]))
    text = "\n".join(lines[:5]) + "\n\n" + "\n".join(lines[5:]) + "\n"  # a blank line after the 5th record
    path.write_text(text, encoding="utf-8")
    return lines


def line_numbers(lines: list[str]) -> list[int]:
    """1-based line number of each record in write_jsonl's layout."""
    return [i + 1 if i < 5 else i + 2 for i in range(len(lines))]


def expected(enc: chatids.Encoder, record: Any, **options: Any) -> tuple[Optional[dict[str, list[int]]], Optional[str]]:
    """(columns, None) or (None, reason) for one record, one conversation per encode_batch call."""
    if isinstance(record, list):
        messages, tools = record, None
    elif isinstance(record, dict) and "messages" in record:
        messages, tools = record["messages"], record.get("tools") or None
    else:
        return None, "not a conversation"
    extra = {} if tools is None else {"tools": tools}
    batch = enc.encode_batch([messages], on_error="collect", **options, **extra)
    if batch.errors:
        return None, batch.errors[0]
    out = {"input_ids": batch[0].tolist()}
    if batch.labels is not None:
        out["labels"] = batch.labels.tolist()
        out["assistant_mask"] = batch.assistant_mask.tolist()
    return out, None


def rejected_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def run(*args: str) -> int:
    return main(["encode", *args, "--no-progress"])


@pytest.fixture(scope="module")
def enc() -> chatids.Encoder:
    return chatids.Encoder.from_pretrained(support.require_model_path(MODEL))


@pytest.fixture(scope="module")
def model_dir() -> str:
    return str(support.require_model_path(MODEL))


@pytest.fixture()
def jsonl(tmp_path: Path) -> tuple[Path, list[str]]:
    path = tmp_path / "chats.jsonl"
    return path, write_jsonl(path, corpus_records())


def check_outputs(
    enc: chatids.Encoder,
    lines: list[str],
    rows: dict[str, list],
    rejected: list[dict],
    with_lines: bool = True,
    **options: Any,
) -> None:
    """Accepted rows equal encode_batch; every record is in exactly one of the two outputs."""
    records: list[Any] = []
    for text in lines:
        try:
            records.append(json.loads(text))
        except ValueError:
            records.append(None)
    numbers = line_numbers(lines)
    by_index = {r["index"]: r for r in rejected}
    assert len(by_index) == len(rejected)
    assert not set(by_index) & set(rows["source_index"]), "a record is both written and rejected"
    assert set(by_index) | set(rows["source_index"]) == set(range(len(lines))), "a record vanished"
    assert rows["source_index"] == sorted(rows["source_index"]), "rows out of input order"
    for k, i in enumerate(rows["source_index"]):
        columns, reason = expected(enc, records[i], **options)
        assert reason is None, f"record {i} written although encode_batch refuses it: {reason}"
        for name, values in columns.items():
            assert rows[name][k] == values, f"record {i}: {name} differs"
        if with_lines:
            assert rows["source_line"][k] == numbers[i]
    for i, entry in by_index.items():
        if with_lines:
            assert entry["line"] == numbers[i]
        if records[i] is None:
            assert entry["reason"].startswith("malformed JSON"), entry
            assert entry["raw"] == lines[i]
            assert entry["record"] is None
            continue
        assert entry["record"] == records[i]
        columns, reason = expected(enc, records[i], **options)
        assert columns is None, f"record {i} rejected ({entry['reason']}) but encode_batch accepts it"
        if reason != "not a conversation":
            assert entry["reason"] == reason


def parquet_rows(path: Path) -> dict[str, list]:
    return pq.read_table(path).to_pydict()


def npy_rows(prefix: Path, masks: bool = False) -> dict[str, list]:
    ids = np.load(f"{prefix}.ids.npy")
    offsets = np.load(f"{prefix}.offsets.npy")
    assert ids.dtype == np.uint32 and offsets.dtype == np.int64 and offsets[0] == 0 and offsets[-1] == len(ids)
    out: dict[str, list] = {"input_ids": [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]}
    if masks:
        labels, mask = np.load(f"{prefix}.labels.npy"), np.load(f"{prefix}.assistant_mask.npy")
        assert labels.dtype == np.int64 and mask.dtype == np.uint8 and len(labels) == len(mask) == len(ids)
        out["labels"] = [labels[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
        out["assistant_mask"] = [mask[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
    out["source_index"] = np.load(f"{prefix}.source_index.npy").tolist()
    return out


def test_jsonl_to_parquet(enc, model_dir, jsonl, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, lines = jsonl
    out = tmp_path / "ids.parquet"
    assert run(str(path), "--model", model_dir, "--out", str(out)) == 0  # rejections do not fail the run
    table = pq.read_table(out)
    assert table.schema.field("input_ids").type == pa.list_(pa.uint32())
    assert table.schema.metadata[b"chatids.format"] == b"qwen2.5"
    rejected = rejected_lines(tmp_path / "ids.rejected.jsonl")
    check_outputs(enc, lines, table.to_pydict(), rejected)
    reasons = {r["reason"].split(":")[0] for r in rejected}
    assert "malformed JSON" in reasons and "not a conversation" in reasons
    def has_tools(text: str) -> bool:
        try:
            record = json.loads(text)
        except ValueError:
            return False
        return isinstance(record, dict) and bool(record.get("tools"))

    # Tool conversations are encoded (the checkpoint's template renders them), as check_outputs verified.
    with_tools = {i for i, text in enumerate(lines) if has_tools(text)}
    assert with_tools & set(table.column("source_index").to_pylist()), "no tool conversation was encoded"
    report = capsys.readouterr().out
    assert f"refused: {len(rejected)}" in report
    assert "refused, by reason:" in report and "malformed JSON" in report
    assert f"{table.num_rows} conversations -> {sum(map(len, table.column('input_ids').to_pylist()))} tokens" in report


def test_jsonl_to_npy_with_masks(enc, model_dir, jsonl, tmp_path: Path) -> None:
    path, lines = jsonl
    prefix = tmp_path / "out"
    assert run(str(path), "--model", model_dir, "--out", f"{prefix}.npy", "--masks", "--train-on", "last_assistant") == 0
    rejected = rejected_lines(tmp_path / "out.rejected.jsonl")
    rows = npy_rows(prefix, masks=True)
    check_outputs(enc, lines, rows, rejected, with_lines=False, return_assistant_mask=True, train_on="last_assistant")
    assert any(any(m) for m in rows["assistant_mask"]), "no trained token at all"


def test_parquet_masks_equal_encode_batch(enc, model_dir, jsonl, tmp_path: Path) -> None:
    path, lines = jsonl
    out = tmp_path / "m.parquet"
    assert run(str(path), "--model", model_dir, "--out", str(out), "--masks") == 0
    table = pq.read_table(out)
    assert table.schema.field("labels").type == pa.list_(pa.int64())
    assert table.schema.field("assistant_mask").type == pa.list_(pa.uint8())
    check_outputs(enc, lines, table.to_pydict(), rejected_lines(tmp_path / "m.rejected.jsonl"), return_assistant_mask=True)
    # The same columns as one encode_batch over the accepted conversations without tools
    # (encode_batch takes one tools list; check_outputs compared every row with its own).
    accepted = [json.loads(lines[i]) for i in table.column("source_index").to_pylist()]
    plain = [k for k, r in enumerate(accepted) if isinstance(r, list) or not r.get("tools")]
    convs = [accepted[k] if isinstance(accepted[k], list) else accepted[k]["messages"] for k in plain]
    batch = enc.encode_batch(convs, return_assistant_mask=True)
    offsets = batch.offsets.tolist()
    labels, masks = table.column("labels").to_pylist(), table.column("assistant_mask").to_pylist()
    assert [labels[k] for k in plain] == [batch.labels[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
    assert [masks[k] for k in plain] == [batch.assistant_mask[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]


def test_chunks_and_workers_do_not_change_the_output(model_dir, jsonl, tmp_path: Path) -> None:
    path, lines = jsonl
    outputs = {}
    for name, extra in {
        "one-chunk": ["--chunk-size", "100000", "--workers", "1"],
        "chunks-of-7": ["--chunk-size", "7", "--workers", "2"],
        "chunks-of-1": ["--chunk-size", "1"],
    }.items():
        out = tmp_path / f"{name}.parquet"
        assert run(str(path), "--model", model_dir, "--out", str(out), "--masks", *extra) == 0
        outputs[name] = (pq.read_table(out).to_pydict(), (tmp_path / f"{name}.rejected.jsonl").read_text())
        if name == "chunks-of-7":  # streamed: one row group per chunk
            assert pq.ParquetFile(out).num_row_groups > 1
    first = outputs["one-chunk"]
    for name, got in outputs.items():
        assert got == first, f"{name} differs from one chunk"


def test_npy_equals_parquet(model_dir, jsonl, tmp_path: Path) -> None:
    path, _ = jsonl
    assert run(str(path), "--model", model_dir, "--out", str(tmp_path / "a.parquet"), "--chunk-size", "5") == 0
    assert run(str(path), "--model", model_dir, "--out", str(tmp_path / "b.npy"), "--chunk-size", "5") == 0
    table = parquet_rows(tmp_path / "a.parquet")
    rows = npy_rows(tmp_path / "b")
    assert rows["input_ids"] == table["input_ids"] and rows["source_index"] == table["source_index"]
    assert (tmp_path / "a.rejected.jsonl").read_text() == (tmp_path / "b.rejected.jsonl").read_text()


def test_parquet_input(enc, model_dir, tmp_path: Path) -> None:
    rows = corpus_records()
    # Arrow unifies struct fields across rows (messages get None for keys other rows have, which
    # chatids reads as missing, as transformers does); tools are stored as JSON text.
    records = [{"messages": r["messages"], "tools": json.dumps(r["tools"]) if r.get("tools") else None} for r in rows]
    records.insert(2, {"messages": None, "tools": None})
    source = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(records), source, row_group_size=10)
    out = tmp_path / "out.parquet"
    assert run(str(source), "--model", model_dir, "--out", str(out), "--chunk-size", "8", "--masks") == 0
    table = pq.read_table(out)
    assert "source_line" not in table.column_names
    rejected = {r["index"]: r for r in rejected_lines(tmp_path / "out.rejected.jsonl")}
    assert "line" not in rejected[2] and rejected[2]["reason"].startswith("not a conversation")
    written = table.column("source_index").to_pylist()
    assert set(written) | set(rejected) == set(range(len(records))) and not set(written) & set(rejected)
    # What the command reads: the records as Arrow stored them (struct keys unified, None-filled).
    records = pq.read_table(source).to_pylist()
    for k, i in enumerate(written):
        tools = json.loads(records[i]["tools"]) if records[i]["tools"] else None
        columns, reason = expected(enc, {"messages": records[i]["messages"], "tools": tools}, return_assistant_mask=True)
        assert reason is None
        assert table.column("input_ids")[k].as_py() == columns["input_ids"]
        assert table.column("labels")[k].as_py() == columns["labels"]
    for i, entry in rejected.items():
        if i != 2:
            tools = json.loads(records[i]["tools"]) if records[i]["tools"] else None
            assert expected(enc, {"messages": records[i]["messages"], "tools": tools}, return_assistant_mask=True)[1] == entry["reason"]


def test_per_row_tools_on_the_generic_path(tmp_path: Path) -> None:
    generic = chatids.Encoder.from_pretrained(support.require_model_path(GENERIC), format="jinja")
    rows = support.corpus_rows("glaive_toolcall_en.jsonl")[:10] + support.corpus_rows("alpaca_gpt4_en_1k.jsonl")[:4]
    path = tmp_path / "tools.jsonl"
    lines = [json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "tools.parquet"
    assert run(str(path), "--model", str(support.require_model_path(GENERIC)), "--format", "jinja", "--out", str(out), "--chunk-size", "6") == 0
    table = pq.read_table(out).to_pydict()
    rejected = {r["index"]: r for r in rejected_lines(tmp_path / "tools.rejected.jsonl")}
    assert len(table["source_index"]) + len(rejected) == len(rows)
    assert sum(1 for i in table["source_index"] if rows[i].get("tools")) >= 3, "too few tools conversations encoded"
    for k, i in enumerate(table["source_index"]):
        extra = {"tools": rows[i]["tools"]} if rows[i].get("tools") else {}
        assert table["input_ids"][k] == generic.encode(rows[i]["messages"], **extra).tolist()


def test_max_length(enc, model_dir, jsonl, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, lines = jsonl
    out = tmp_path / "t.parquet"
    assert run(str(path), "--model", model_dir, "--out", str(out), "--max-length", "64", "--truncation", "right") == 0
    table = pq.read_table(out).to_pydict()
    assert max(map(len, table["input_ids"])) <= 64
    check_outputs(enc, lines, table, rejected_lines(tmp_path / "t.rejected.jsonl"), max_length=64, truncation="right")
    assert "truncated: " in capsys.readouterr().out
    # Without a truncation policy, a conversation that is too long is rejected, with the reason.
    out = tmp_path / "e.parquet"
    assert run(str(path), "--model", model_dir, "--out", str(out), "--max-length", "64") == 0
    table = pq.read_table(out).to_pydict()
    rejected = rejected_lines(tmp_path / "e.rejected.jsonl")
    check_outputs(enc, lines, table, rejected, max_length=64)
    assert len(rejected) > 5


def test_gzip_input_and_rejected_path(model_dir, jsonl, tmp_path: Path) -> None:
    path, _ = jsonl
    gz = tmp_path / "chats.jsonl.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert run(str(path), "--model", model_dir, "--out", str(tmp_path / "plain.parquet")) == 0
    assert run(str(gz), "--model", model_dir, "--out", str(tmp_path / "gz.parquet"), "--rejected", str(tmp_path / "r.jsonl")) == 0
    assert parquet_rows(tmp_path / "plain.parquet") == parquet_rows(tmp_path / "gz.parquet")
    assert (tmp_path / "r.jsonl").read_text() == (tmp_path / "plain.rejected.jsonl").read_text()


def test_usage_and_io_errors_exit_2(model_dir, jsonl, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = jsonl
    assert run(str(tmp_path / "missing.jsonl"), "--model", model_dir) == 2
    assert run(str(path), "--model", model_dir, "--out", str(tmp_path / "x.csv")) == 2
    assert run(str(path), "--model", model_dir, "--out", str(tmp_path / "no" / "dir" / "x.parquet")) == 2
    assert run(str(path), "--model", model_dir, "--truncation", "right") == 2
    assert run(str(path), "--model", str(tmp_path / "no-model")) == 2
    assert "error:" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.partial"))


def test_command_line_progress_and_summary(model_dir, jsonl, tmp_path: Path) -> None:
    path, _ = jsonl
    out = tmp_path / "p.parquet"
    result = subprocess.run(
        [sys.executable, "-m", "chatids", "encode", str(path), "--model", model_dir, "--out", str(out), "--workers", "2", "--progress"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "conv/s" in result.stderr and "tok/s" in result.stderr  # the bar, forced on although not a terminal
    assert "conversations/s" in result.stdout and "M tokens/s" in result.stdout
    assert f"wrote {out}" in result.stdout
    quiet = subprocess.run(
        [sys.executable, "-m", "chatids", "encode", str(path), "--model", model_dir, "--out", str(tmp_path / "q.parquet")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert quiet.returncode == 0 and "conv/s" not in quiet.stderr  # not a terminal: no bar by default
