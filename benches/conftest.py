"""Benchmark fixtures: the shared corpus and both encoders, loaded once.

Run: ``pytest benches --benchmark-json=bench-results/bench.json`` then
``python benches/report.py bench-results/bench.json``. ``CHATIDS_BENCH_QUICK=1`` (used by
``.ci/run`` together with ``--benchmark-disable``) shrinks the inputs so the suite only
proves it still runs.
"""

from __future__ import annotations

import glob
import json
import os
import random
from pathlib import Path

os.environ["TOKENIZERS_PARALLELISM"] = "true"  # encode_batch_fast uses every core, as chatids does
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Every round encodes the same conversations again; the native core's cache of whole texts would
# answer all of them from the second round on, which no training pass does. Off (its own
# measurement is benches/text_peers.py's warm pass).
os.environ.setdefault("CHATIDS_TEXT_CACHE_MB", "0")

import pytest

import chatids

BENCH_MODELS = [
    "llama-3.1-8b-instruct",
    "qwen2.5-7b-instruct",
    "llama-2-7b-chat",
    "mistral-nemo-instruct-2407",
    "gemma-3-it",
    # The Jinja path: a template no native format covers, and native checkpoints forced onto
    # it (the report sets each against its native group: issue 23's "Jinja path" target).
    "gpt-oss-120b",
    "qwen2.5-7b-instruct:jinja",
    "llama-3.1-8b-instruct:jinja",
    "llama-2-7b-chat:jinja",
    "gemma-3-it:jinja",
]
QUICK = os.environ.get("CHATIDS_BENCH_QUICK", "") not in ("", "0")
SINGLE_N = 20 if QUICK else 200
BATCH_N = 50 if QUICK else 2000


def _plain(row: dict) -> bool:
    return not row.get("tools") and all(
        isinstance(m.get("content"), str) and not m.get("tool_calls") and m["role"] in ("system", "user", "assistant")
        for m in row["messages"]
    )


@pytest.fixture(scope="session")
def corpus() -> list[list[dict]]:
    base = os.environ.get("CHATIDS_DATA_DIR")
    if not base:
        pytest.skip("CHATIDS_DATA_DIR is not set")
    rows = []
    for f in sorted(glob.glob(str(Path(base) / "conversations" / "*.jsonl"))):
        rows += [json.loads(line) for line in open(f, encoding="utf-8")]
    convs = [r["messages"] for r in rows if _plain(r)]
    random.Random(2024).shuffle(convs)
    return convs


class Bench:
    def __init__(self, name: str, convs: list[list[dict]]):
        import datetime as dt

        from transformers import AutoTokenizer

        directory, _, forced = name.partition(":")
        base = os.environ.get("CHATIDS_MODELS_DIR")
        if not base or not (Path(base) / directory).is_dir():
            pytest.skip(f"model {directory} not found (CHATIDS_MODELS_DIR)")
        path = Path(base) / directory
        self.name = name
        self.enc = chatids.Encoder.from_pretrained(path, format=forced or None)
        # The same encoder on the tokenizers crate instead of chatids' native BPE core.
        os.environ["CHATIDS_TEXT_ENCODER"] = "tokenizers"
        try:
            self.enc_crate = chatids.Encoder.from_pretrained(path, format=forced or None)
        finally:
            del os.environ["CHATIDS_TEXT_ENCODER"]
        self.tok = AutoTokenizer.from_pretrained(str(path))
        self.kwargs = {"date_string": "26 Jul 2024"} if self.enc.format.startswith("llama-3.") else {}
        if self.enc.reads_clock:  # same date on both sides (transformers reads the real clock here)
            self.kwargs["now"] = dt.datetime.now()
        accepted = []
        for c in convs:
            try:
                self.enc.encode(c, **self.kwargs)
                self.tok.apply_chat_template(c, tokenize=False, **self.kwargs)
            except Exception:
                continue
            accepted.append(c)
            if len(accepted) == max(SINGLE_N, BATCH_N):
                break
        self.single = accepted[:SINGLE_N]
        self.batch = accepted[:BATCH_N]
        self.rendered = [self.tok.apply_chat_template(c, tokenize=False, **self.kwargs) for c in self.batch]
        self.batch_tokens = sum(len(x) for x in self.enc.encode_batch(self.batch, **self.kwargs))


_BENCHES: dict[str, Bench] = {}


@pytest.fixture(params=BENCH_MODELS)
def bench_model(request, corpus) -> Bench:
    if request.param not in _BENCHES:
        _BENCHES[request.param] = Bench(request.param, corpus)
    return _BENCHES[request.param]
