"""``chatids encode --pairs``: preference and prompt–completion records to TRL's columns.

Every expected row comes from ``Encoder.encode_preference`` / ``encode_pair`` called on one
record at a time (with its ``tools``), independently of the command's chunking and grouping by
tools; every input record comes out either as a row of the output or as a line of the rejected
file, never both, never neither. The ids themselves are checked against transformers in
tests/test_pairs.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import chatids
import support
from chatids._cli import main

pq = pytest.importorskip("pyarrow.parquet")
pa = pytest.importorskip("pyarrow")

MODEL = "qwen2.5-7b-instruct"
FILES = ["dpo_en_chosen.jsonl", "glaive_toolcall_en.jsonl", "hh_rlhf_harmless_base_test.jsonl"]


def preference_records() -> list[dict]:
    files = support.corpus_files()
    support.require_corpus(files[0] if files else "<no corpus>")
    convs = [r for name in FILES if name in files for r in support.corpus_rows(name)[:6]]
    out = []
    for i, row in enumerate(convs):
        m = row["messages"]
        k = max(j for j, x in enumerate(m) if x["role"] == "assistant")
        other = convs[(i + 1) % len(convs)]["messages"]
        rejected = [next(x for x in reversed(other) if x["role"] == "assistant")]
        rec: dict[str, Any] = {"prompt": m[:k], "chosen": [m[k]], "rejected": rejected}
        if row.get("tools"):
            rec["tools"] = row["tools"]
        out.append(rec)
    return out


def expected_row(enc: chatids.Encoder, record: dict) -> tuple[Any, Any]:
    extra = {"tools": record["tools"]} if record.get("tools") else {}
    try:
        if "completion" in record:
            return enc.encode_pair(record["prompt"], record["completion"], **extra), None
        prompt = record.get("prompt")
        chosen, rejected = record["chosen"], record["rejected"]
        if prompt is None:  # the implicit prompt: the shared leading messages
            n = next(i for i, (a, b) in enumerate(zip(chosen, rejected)) if a != b)
            prompt, chosen, rejected = chosen[:n], chosen[n:], rejected[n:]
        return enc.encode_preference(prompt, chosen, rejected, **extra), None
    except chatids.ChatTemplateError as e:
        return None, str(e)


def run(*args: str) -> int:
    return main(["encode", *args, "--no-progress", "--pairs"])


@pytest.fixture(scope="module")
def model_dir() -> str:
    return str(support.require_model_path(MODEL))


@pytest.fixture(scope="module")
def enc(model_dir: str) -> chatids.Encoder:
    return chatids.Encoder.from_pretrained(model_dir)


def test_preferences_to_parquet_and_jsonl(tmp_path: Path, model_dir: str, enc: chatids.Encoder) -> None:
    records: list[Any] = preference_records()
    implicit = {"chosen": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
                "rejected": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Go away."}]}
    records.insert(2, implicit)
    records.insert(4, {"prompt": [{"role": "user", "content": "x"}], "completion": {"role": "assistant", "content": "y"}})
    records.insert(6, {"prompt": [{"role": "user", "content": "x"}], "chosen": {"role": "user", "content": "not a reply"},
                       "rejected": {"role": "assistant", "content": "z"}})
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    lines.insert(5, '{"prompt": [cut off')
    src = tmp_path / "prefs.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.parquet"
    assert run(str(src), "--model", model_dir, "--out", str(out), "--masks", "--chunk-size", "4") == 0
    table = pq.read_table(out).to_pylist()
    assert pq.read_schema(out).metadata[b"chatids.kind"] == b"preference"
    rejected = {r["index"]: r for r in map(json.loads, (tmp_path / "out.rejected.jsonl").read_text().splitlines())}
    by_index = {row["source_index"]: row for row in table}
    assert set(by_index) | set(rejected) == set(range(len(lines))) and not set(by_index) & set(rejected)
    assert rejected[5]["reason"].startswith("malformed JSON")
    assert rejected[4]["reason"] == "an unpaired record in a file of preference records"
    for index, line in enumerate(lines):
        if index == 5:
            continue
        record = json.loads(line)
        if "completion" in record:
            continue
        want, reason = expected_row(enc, record)
        if want is None:
            assert rejected[index]["reason"] == reason and rejected[index]["record"] == record
            continue
        row = by_index[index]
        assert row["source_line"] == index + 1
        assert {k: row[k] for k in ("prompt_ids", "chosen_ids", "rejected_ids")} == want.to_trl()
        assert row["chosen_mask"] == want.chosen_mask.tolist() and row["rejected_mask"] == want.rejected_mask.tolist()
        assert row["prompt_cut"] == want.prompt_cut
    assert rejected[7]["reason"].startswith("message 1: (chosen) the completion has no assistant message")
    # JSONL out, TRL's older names; the same ids.
    out_jsonl = tmp_path / "out.jsonl"
    assert run(str(src), "--model", model_dir, "--out", str(out_jsonl), "--trl-style", "trl<0.29") == 0
    rows = [json.loads(x) for x in out_jsonl.read_text().splitlines()]
    assert [r["prompt_input_ids"] for r in rows] == [r["prompt_ids"] for r in table]
    assert "chosen_mask" not in rows[0]
    assert run(str(src), "--model", model_dir, "--out", str(out_jsonl), "--strict") == 1


def test_unpaired_records_from_parquet_with_labels(tmp_path: Path, model_dir: str, enc: chatids.Encoder) -> None:
    prefs = preference_records()
    records = [{"prompt": r["prompt"], "completion": r["chosen"], "label": i % 2 == 0, "tools": json.dumps(r.get("tools"))}
               for i, r in enumerate(prefs)]
    src = tmp_path / "kto.parquet"
    pq.write_table(pa.Table.from_pylist([{**r, "prompt": json.dumps(r["prompt"]), "completion": json.dumps(r["completion"])}
                                         for r in records]), src)
    out = tmp_path / "kto.parquet.out.parquet"
    assert run(str(src), "--model", model_dir, "--out", str(out)) == 0
    table = pq.read_table(out)
    assert table.column_names == ["prompt_ids", "completion_ids", "label", "prompt_cut", "source_index"]
    by_index = {r["source_index"]: r for r in table.to_pylist()}
    for i, r in enumerate(records):
        want, reason = expected_row(enc, {**r, "tools": json.loads(r["tools"])})
        if want is None:
            assert i not in by_index
            continue
        row = by_index[i]
        assert row["prompt_ids"] == want.prompt_ids.tolist() and row["completion_ids"] == want.completion_ids.tolist()
        assert row["label"] == r["label"]


def test_usage_errors(tmp_path: Path, model_dir: str, capsys: Any) -> None:
    src = tmp_path / "p.jsonl"
    src.write_text(json.dumps({"prompt": [], "completion": []}) + "\n")
    assert run(str(src), "--model", model_dir, "--out", str(tmp_path / "x.npz")) == 2
    assert "the pairs mode writes FILE.parquet or FILE.jsonl" in capsys.readouterr().err
    assert run(str(src), "--model", model_dir, "--max-length", "10") == 2
    assert "--pairs does not take --max-length" in capsys.readouterr().err
