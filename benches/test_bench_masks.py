"""Masked batch encoding, chatids vs transformers, side by side (one pytest-benchmark group per model).

* ``masks-<model>`` (Llama 3.1, Qwen2.5): ~2,000 corpus conversations with at least one
  assistant turn: ``Encoder.encode_batch(convs, return_assistant_mask=True)`` vs
  ``apply_chat_template(convs, chat_template=wrapped, tokenize=True, return_dict=True,
  return_assistant_tokens_mask=True)``, where ``wrapped`` is the checkpoint's own template with
  the assistant bodies in ``{% generation %}`` blocks (tests/mask_templates.py). Both outputs
  are checked equal (ids and masks) before timing.

``CHATIDS_BENCH_QUICK=1`` shrinks the batch to 50 conversations and one round. Not assertions:
``benches/report.py`` turns the medians into ratios.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

import chatids

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import mask_templates  # noqa: E402

QUICK = os.environ.get("CHATIDS_BENCH_QUICK", "") not in ("", "0")
MASK_MODELS = ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct"]
BATCH_N = 50 if QUICK else 2000
ROUNDS = 1 if QUICK else 7


class MaskBench:
    def __init__(self, name: str, convs: list[list[dict]]):
        from transformers import AutoTokenizer

        base = os.environ.get("CHATIDS_MODELS_DIR")
        if not base or not (Path(base) / name).is_dir():
            pytest.skip(f"model {name} not found (CHATIDS_MODELS_DIR)")
        path = Path(base) / name
        self.name = name
        self.enc = chatids.Encoder.from_pretrained(path)
        self.tok = AutoTokenizer.from_pretrained(str(path))
        self.wrapped = mask_templates.wrapped_template(name, self.tok.chat_template)
        self.kwargs = {"date_string": "26 Jul 2024"} if self.enc.format.startswith("llama-3.") else {}
        batch = []
        for c in convs:
            if not any(m["role"] == "assistant" for m in c):
                continue
            try:
                self.enc.encode(c, return_assistant_mask=True, **self.kwargs)
                self.tok.apply_chat_template(c, tokenize=False, **self.kwargs)
            except Exception:
                continue
            batch.append(c)
            if len(batch) == BATCH_N:
                break
        self.batch = batch
        # Same ids and masks on both sides (the tests check this on the corpus; here, the inputs timed).
        ours = self.chatids()
        theirs = self.transformers()
        assert np.array_equal(ours.ids, np.concatenate([np.asarray(x, dtype=np.uint32) for x in theirs["input_ids"]]))
        assert np.array_equal(ours.assistant_mask, np.concatenate([np.asarray(x, dtype=np.uint8) for x in theirs["assistant_masks"]]))
        self.tokens = len(ours.ids)
        self.trained = int(ours.assistant_mask.sum())

    def chatids(self) -> chatids.Batch:
        # sanitize_control_tokens=False: transformers refuses to combine it with the mask.
        return self.enc.encode_batch(self.batch, sanitize_control_tokens=False, return_assistant_mask=True, **self.kwargs)

    def transformers(self):
        return self.tok.apply_chat_template(
            self.batch,
            chat_template=self.wrapped,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
            **self.kwargs,
        )


_BENCHES: dict[str, MaskBench] = {}


@pytest.fixture(params=MASK_MODELS)
def mask_bench(request, corpus) -> MaskBench:
    if request.param not in _BENCHES:
        _BENCHES[request.param] = MaskBench(request.param, corpus)
    return _BENCHES[request.param]


def _info(benchmark, b: MaskBench) -> None:
    benchmark.group = f"masks-{b.name}"
    benchmark.extra_info.update(format=b.enc.format, conversations=len(b.batch), tokens=b.tokens, trained_tokens=b.trained)


def test_masked_batch_chatids(benchmark, mask_bench):
    _info(benchmark, mask_bench)
    benchmark.pedantic(mask_bench.chatids, rounds=ROUNDS, iterations=1, warmup_rounds=1)


def test_masked_batch_transformers(benchmark, mask_bench):
    _info(benchmark, mask_bench)
    benchmark.pedantic(mask_bench.transformers, rounds=ROUNDS, iterations=1, warmup_rounds=1)


def test_masked_batch_chatids_sanitized(benchmark, mask_bench):
    """chatids' default (sanitize_control_tokens=True), which transformers cannot combine with the mask."""
    _info(benchmark, mask_bench)
    enc, batch, kw = mask_bench.enc, mask_bench.batch, mask_bench.kwargs
    benchmark.pedantic(lambda: enc.encode_batch(batch, return_assistant_mask=True, **kw), rounds=ROUNDS, iterations=1, warmup_rounds=1)
