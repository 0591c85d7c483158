"""``chatids.hf_map`` with Hugging Face ``datasets``: ``Dataset.map(fn, batched=True, num_proc=2)``.

The columns must equal ``Encoder.encode_batch`` on the same conversations (read from the shared
corpus, not from the Arrow round trip, so the ``None`` that Arrow adds for missing keys is
covered too); a rejected conversation keeps its row, with empty lists and the reason in
``error``. The function pickles (``num_proc`` sends it to forked workers) and hashes the same
way every time, so ``datasets``' cache finds earlier results.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

import support

import chatids

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
datasets = pytest.importorskip("datasets")

MODEL = "qwen2.5-7b-instruct"  # native format without a clock; its template renders the tool conversations
FILES = ["alpaca_gpt4_en_1k.jsonl", "sharegpt_gpt4_zh_1k.jsonl", "glaive_toolcall_en.jsonl", "dpo_en_chosen.jsonl"]


def rows() -> list[dict[str, Any]]:
    """Corpus conversations (tools as JSON text: see hf_map's docs), plus two rejected ones."""
    files = support.corpus_files()
    support.require_corpus(files[0] if files else "<no corpus>")
    out = []
    for name in FILES:
        for r in support.corpus_rows(name)[:16]:
            out.append({"messages": support.arguments_as_text(r["messages"]), "tools": json.dumps(r["tools"]) if r.get("tools") else None})
    out.insert(5, {"messages": [{"role": "tool", "content": "a tool result with no call"}], "tools": None})
    out.insert(9, {"messages": [{"role": "user", "content": "only a prompt"}], "tools": None})
    return out


def expected(enc: chatids.Encoder, row: dict[str, Any], **options: Any) -> dict[str, Any]:
    extra = {"tools": json.loads(row["tools"])} if row["tools"] else {}
    batch = enc.encode_batch([row["messages"]], on_error="collect", **options, **extra)
    if batch.errors:
        return {"input_ids": [], "labels": [], "assistant_mask": [], "attention_mask": [], "error": batch.errors[0]}
    ids = batch[0].tolist()
    return {
        "input_ids": ids,
        "labels": batch.labels.tolist(),
        "assistant_mask": batch.assistant_mask.tolist(),
        "attention_mask": [1] * len(ids),
        "error": None,
    }


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return support.require_model_path(MODEL)


@pytest.fixture(scope="module")
def enc(model_dir: Path) -> chatids.Encoder:
    return chatids.Encoder.from_pretrained(model_dir)


def check(enc: chatids.Encoder, data: list[dict[str, Any]], out: Any, **options: Any) -> None:
    assert len(out) == len(data), "rows vanished"
    columns = out.to_dict()
    errors = 0
    for i, row in enumerate(data):
        want = expected(enc, row, return_assistant_mask=True, **options)
        got = {name: columns[name][i] for name in want}
        assert got == want, f"row {i} differs"
        errors += want["error"] is not None
    assert errors >= 2, "the test data should hold rejected rows (the two inserted ones at least)"


def test_map_num_proc_2_equals_encode_batch(enc: chatids.Encoder) -> None:
    data = rows()
    ds = datasets.Dataset.from_list(data)
    fn = chatids.hf_map(enc, tools_column="tools")
    out = ds.map(fn, batched=True, batch_size=16, num_proc=2, remove_columns=ds.column_names)
    assert set(out.column_names) == {"input_ids", "attention_mask", "labels", "assistant_mask", "error"}
    check(enc, data, out)
    # The same conversations in one encode_batch call.
    good = [i for i, e in enumerate(out["error"]) if e is None]
    plain = [i for i in good if data[i]["tools"] is None]
    batch = enc.encode_batch([data[i]["messages"] for i in plain], return_assistant_mask=True)
    assert [out[i]["input_ids"] for i in plain] == [b.tolist() for b in batch]


def test_from_json_with_a_checkpoint_path(enc: chatids.Encoder, model_dir: Path, tmp_path: Path) -> None:
    """A path instead of an Encoder: each worker loads the checkpoint itself."""
    data = rows()
    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in data), encoding="utf-8")
    ds = datasets.Dataset.from_json(str(path), cache_dir=str(tmp_path / "cache"))
    fn = chatids.hf_map(str(model_dir), tools_column="tools", train_on="last_assistant")
    assert fn._enc is None  # nothing loaded in the parent until it is called
    out = ds.map(fn, batched=True, batch_size=10, num_proc=2, remove_columns=ds.column_names)
    check(enc, data, out, train_on="last_assistant")


def test_pickles_and_hashes_deterministically(enc: chatids.Encoder, model_dir: Path) -> None:
    from datasets.fingerprint import Hasher

    batch = {"messages": [r["messages"] for r in rows()[:8]]}
    for make in (lambda: chatids.hf_map(enc, max_length=64, truncation="right"), lambda: chatids.hf_map(str(model_dir), max_length=64, truncation="right")):
        fn = make()
        clone = pickle.loads(pickle.dumps(fn))
        assert clone(batch) == fn(batch)
        assert max(map(len, fn(batch)["input_ids"])) <= 64
        assert Hasher.hash(make()) == Hasher.hash(make()), "datasets' fingerprint would change on every run"
    assert Hasher.hash(chatids.hf_map(enc)) != Hasher.hash(chatids.hf_map(enc, train_on="last_assistant"))


def test_on_error_raise_and_no_masks(enc: chatids.Encoder) -> None:
    data = rows()
    ds = datasets.Dataset.from_list(data)
    with pytest.raises(chatids.ChatTemplateError, match="row 5 of the batch"):
        ds.map(chatids.hf_map(enc, on_error="raise"), batched=True, batch_size=8, remove_columns=ds.column_names)
    plain = datasets.Dataset.from_list([r for r in data[:4] if r["tools"] is None])
    out = plain.map(chatids.hf_map(enc, return_assistant_mask=False, on_error="raise"), batched=True, remove_columns=plain.column_names)
    assert out.column_names == ["input_ids", "attention_mask"]
    assert list(out["input_ids"]) == [b.tolist() for b in enc.encode_batch(list(plain["messages"]))]
