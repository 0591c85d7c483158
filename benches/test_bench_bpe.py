"""Text encoding alone: chatids' native BPE core against the tokenizers crate, side by side.

* ``bpe-<model>``: every message content of the shared corpus (about 45,000 texts), ids only, on
  one thread: the native core (``Encoder._encode_texts(texts, "native")``) against the
  ``tokenizers`` crate pipeline chatids ran before (``"tokenizers"``), both in one Rust loop
  with the GIL released, both with their word caches warm (the warm-up round). For Llama 3.1
  also tiktoken (``encode_ordinary`` per text) on the Llama 3 vocabulary that llama-models ships,
  the fastest widely used encoder.
* ``bpe-cold-<model>``: the same texts, each round on freshly loaded encoders (empty caches).
* ``bpe-long-<model>``: pathological inputs of 1 MiB each (one character repeated, characters
  without merges), where a quadratic merge loop or a backtracking regex would show.

Not assertions: ``benches/report.py`` turns the medians into the ratios of BENCHMARKS.md.
"""

from __future__ import annotations

import glob
import json
import os
import random
from pathlib import Path

import pytest

import chatids

from conftest import QUICK

BPE_MODELS = [
    "llama-3.1-8b-instruct",
    "qwen2.5-7b-instruct",
    "mistral-nemo-instruct-2407",
    "gpt-oss-120b",
    "deepseek-v3",
    "llama-2-7b-chat",
    "mistral-7b-instruct-v0.3",
    "gemma-3-it",
]
ROUNDS = 3 if QUICK else 5


def _texts() -> list[str]:
    base = os.environ.get("CHATIDS_DATA_DIR")
    if not base:
        pytest.skip("CHATIDS_DATA_DIR is not set")
    texts = []
    for f in sorted(glob.glob(str(Path(base) / "conversations" / "*.jsonl"))):
        for line in open(f, encoding="utf-8"):
            for m in json.loads(line)["messages"]:
                if isinstance(m.get("content"), str) and m["content"]:
                    texts.append(m["content"])
    random.Random(7).shuffle(texts)
    return texts[:300] if QUICK else texts


_TEXTS: list[str] = []


@pytest.fixture(scope="module")
def texts() -> list[str]:
    if not _TEXTS:
        _TEXTS.extend(_texts())
    return _TEXTS


def _load(name: str) -> chatids.Encoder:
    base = os.environ.get("CHATIDS_MODELS_DIR")
    if not base or not (Path(base) / name).is_dir():
        pytest.skip(f"model {name} not found (CHATIDS_MODELS_DIR)")
    return chatids.Encoder.from_pretrained(str(Path(base) / name), reference="transformers")


_ENCODERS: dict[str, chatids.Encoder] = {}


@pytest.fixture(params=BPE_MODELS)
def model(request) -> tuple[str, chatids.Encoder]:
    if request.param not in _ENCODERS:
        _ENCODERS[request.param] = _load(request.param)
    enc = _ENCODERS[request.param]
    assert enc.text_encoder == "native", enc.explain()
    return request.param, enc


def _info(benchmark, enc: chatids.Encoder, texts: list[str]) -> None:
    tokens = enc._core._encode_texts(texts, "native")
    benchmark.extra_info.update(conversations=len(texts), tokens=tokens, unit="texts")


def test_bpe_chatids(benchmark, model, texts):
    name, enc = model
    benchmark.group = f"bpe-{name}"
    _info(benchmark, enc, texts)
    benchmark.pedantic(lambda: enc._core._encode_texts(texts, "native"), rounds=ROUNDS, iterations=1, warmup_rounds=1)


def test_bpe_tokenizers_crate(benchmark, model, texts):
    name, enc = model
    benchmark.group = f"bpe-{name}"
    _info(benchmark, enc, texts)
    benchmark.pedantic(lambda: enc._core._encode_texts(texts, "tokenizers"), rounds=ROUNDS, iterations=1, warmup_rounds=1)


def test_bpe_tiktoken(benchmark, model, texts):
    name, enc = model
    if name != "llama-3.1-8b-instruct":
        pytest.skip("tiktoken has the Llama 3 vocabulary only (llama-models ships it)")
    from llama_models.llama3.tokenizer import Tokenizer

    tik = Tokenizer.get_instance().model
    benchmark.group = f"bpe-{name}"
    _info(benchmark, enc, texts)
    # Same ids as the native core on this corpus (the Llama 3 pattern and merges are tiktoken's).
    sample = texts[:200]
    assert [tik.encode_ordinary(t) for t in sample] == [enc._core._encode_text(t, "native", False)[0] for t in sample]
    benchmark.pedantic(lambda: [tik.encode_ordinary(t) for t in texts], rounds=ROUNDS, iterations=1, warmup_rounds=1)


def _cold(benchmark, name: str, texts: list[str], which: str) -> None:
    """Each round on a freshly loaded encoder: no word of the texts is cached yet."""
    if QUICK:
        pytest.skip("full runs only")
    benchmark.group = f"bpe-cold-{name}"
    fresh: list[chatids.Encoder] = []

    def setup():
        fresh[:] = [_load(name)]

    _info(benchmark, _ENCODERS[name], texts)
    benchmark.pedantic(lambda: fresh[0]._core._encode_texts(texts, which), setup=setup, rounds=3, iterations=1)


def test_bpe_cold_chatids(benchmark, model, texts):
    _cold(benchmark, model[0], texts, "native")


def test_bpe_cold_tokenizers_crate(benchmark, model, texts):
    _cold(benchmark, model[0], texts, "tokenizers")


def _long_inputs() -> list[str]:
    size = 1 << 16 if QUICK else 1 << 20
    rng = random.Random(3)
    return [
        "a" * size,
        " " * size,
        "\n" * size,
        "1" * size,
        "!" * size,
        "ab" * (size // 2),
        "日" * (size // 3),
        "".join(chr(rng.randrange(0xE000, 0xF8FF)) for _ in range(size // 3)),
    ]


def _long(benchmark, name: str, enc: chatids.Encoder, which: str) -> None:
    inputs = _long_inputs()
    benchmark.group = f"bpe-long-{name}"
    benchmark.extra_info.update(conversations=len(inputs), unit="inputs")
    benchmark.pedantic(lambda: enc._core._encode_texts(inputs, which), rounds=1 if QUICK else 3, iterations=1)


def test_bpe_long_chatids(benchmark, model):
    _long(benchmark, model[0], model[1], "native")


def test_bpe_long_tokenizers_crate(benchmark, model):
    _long(benchmark, model[0], model[1], "tokenizers")
