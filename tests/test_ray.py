"""Ray Data: ``ds.map_batches(chatids.RayEncode, ...)`` on a local two-CPU cluster.

The columns must equal ``Encoder.encode_batch`` on the same conversations, with actors (a
checkpoint path, loaded once per actor), with tasks (a ``RayEncode`` instance pickled with the
Encoder by value), and with ``"pyarrow"`` and ``"numpy"`` batches. Marked ``ray``: deselect with
``-m "not ray"``. Nothing leaves the machine (usage stats off, no dashboard).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

import support

import chatids

pytestmark = pytest.mark.ray

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
ray = pytest.importorskip("ray")
pa = pytest.importorskip("pyarrow")

MODEL = "llama-3.1-8b-instruct"
FILES = ["alpaca_gpt4_en_1k.jsonl", "hh_rlhf_harmless_base_test.jsonl", "glaive_toolcall_en.jsonl", "medical_sft_zh_1k.jsonl"]


def items() -> list[dict[str, Any]]:
    files = support.corpus_files()
    support.require_corpus(files[0] if files else "<no corpus>")
    out = []
    for name in FILES:
        for r in support.corpus_rows(name)[:12]:
            out.append({"id": len(out), "messages": support.arguments_as_text(r["messages"]), "tools": json.dumps(r["tools"]) if r.get("tools") else None})
    # Two conversations with nothing to train on: rejected when masks are asked for.
    out.append({"id": len(out), "messages": [{"role": "user", "content": "prompt only"}], "tools": None})
    out.append({"id": len(out), "messages": [{"role": "tool", "content": "a tool result with no call"}], "tools": None})
    return out


@pytest.fixture(scope="module")
def cluster():
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        ignore_reinit_error=True,
    )
    from ray.data import DataContext

    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return support.require_model_path(MODEL)


@pytest.fixture(scope="module")
def enc(model_dir: Path) -> chatids.Encoder:
    return chatids.Encoder.from_pretrained(model_dir)


def collect(ds: Any) -> dict[int, dict[str, Any]]:
    table = pa.concat_tables(ray.get(ds.to_arrow_refs()))
    rows = table.to_pylist()
    return {r["id"]: r for r in rows}


def check(enc: chatids.Encoder, data: list[dict[str, Any]], got: dict[int, dict[str, Any]], masks: bool) -> None:
    assert sorted(got) == [r["id"] for r in data], "rows vanished"
    # What the workers see: Ray stores the rows in Arrow, which gives every struct (a message,
    # tool-call arguments) the keys of all rows, None-filled (docs/training.md, "Hugging Face
    # datasets", says to store tools and arguments as JSON text for that reason).
    import pyarrow as pa

    data = pa.Table.from_pylist(data).to_pylist()
    rejected = 0
    for row in data:
        extra = {"tools": json.loads(row["tools"])} if row["tools"] else {}
        batch = enc.encode_batch([row["messages"]], return_assistant_mask=masks, on_error="collect", date_string="26 Jul 2024", **extra)
        out = got[row["id"]]
        assert out["error"] == batch.errors.get(0), row["id"]
        assert out["input_ids"] == batch[0].tolist(), row["id"]
        if masks:
            assert out["labels"] == batch.labels.tolist() and out["assistant_mask"] == batch.assistant_mask.tolist()
        else:
            assert "labels" not in out
        rejected += bool(batch.errors)
    assert rejected >= 2, "the test data should hold rejected rows"


def test_actors_with_a_checkpoint_path(cluster, enc: chatids.Encoder, model_dir: Path) -> None:
    data = items()
    ds = ray.data.from_items(data).map_batches(
        chatids.RayEncode,
        fn_constructor_kwargs={
            "model": str(model_dir),
            "tools_column": "tools",
            "num_threads": 1,
            "date_string": "26 Jul 2024",
        },
        batch_size=8,
        batch_format="pyarrow",
        concurrency=2,
        num_cpus=1,
    )
    got = collect(ds)
    assert set(next(iter(got.values()))) == {"id", "input_ids", "labels", "assistant_mask", "error"}
    check(enc, data, got, masks=True)
    # The same conversations in one encode_batch call.
    plain = [r for r in data if r["tools"] is None and got[r["id"]]["error"] is None]
    batch = enc.encode_batch([r["messages"] for r in plain], date_string="26 Jul 2024")
    assert [got[r["id"]]["input_ids"] for r in plain] == [b.tolist() for b in batch]


def test_tasks_with_the_encoder_by_value_and_numpy_batches(cluster, enc: chatids.Encoder) -> None:
    # Numpy batches also coerce numbers across rows (a tool call's integer argument becomes a
    # float next to a float one), which changes the JSON a template prints: store tool-call
    # arguments as JSON text with numpy batches. Here: the conversations without tool calls.
    data = [r for r in items() if not any(m.get("tool_calls") for m in r["messages"])]
    # Two conversations chatids refuses (a message without a role), to check collected errors.
    data += [{"id": len(items()) + k, "messages": [{"role": None, "content": "x"}], "tools": None} for k in range(2)]
    fn = chatids.RayEncode(enc, tools_column="tools", return_assistant_mask=False, num_threads=1, date_string="26 Jul 2024")
    ds = ray.data.from_items(data).map_batches(fn, batch_size=10, batch_format="numpy")
    got = collect(ds)
    assert "messages" not in next(iter(got.values()))
    check(enc, data, got, masks=False)
