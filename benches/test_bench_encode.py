"""chatids vs transformers, side by side in one run (pytest-benchmark groups), for the
Llama 3.1, Qwen2.5, Llama 2, Mistral Nemo (tekken) and Gemma 3 tokenizers.

* ``single-<model>``: encode 200 conversations one call at a time: ``Encoder.encode`` vs
  ``apply_chat_template(tokenize=True)`` (its default call, and with
  ``sanitize_control_tokens=True``, which is chatids' default).
* ``batch-<model>``: 2,000 conversations: ``Encoder.encode_batch`` vs the same encoder on the
  tokenizers crate instead of chatids' native BPE core (``CHATIDS_TEXT_ENCODER=tokenizers``) vs
  ``apply_chat_template`` on the list vs ``tokenizers.Tokenizer.encode_batch_fast`` of the
  already rendered strings (rendering not counted).

Not assertions: ``benches/report.py`` turns the medians into the ratios of BENCHMARKS.md.
"""

from __future__ import annotations

ROUNDS_SINGLE = 7
ROUNDS_BATCH = 7


def _describe(benchmark, kind: str, bench_model, **info) -> None:
    """The group (``kind-model``) and what a round measures; ``format`` labels the checkpoint
    in report.py's chart."""
    benchmark.group = f"{kind}-{bench_model.name}"
    benchmark.extra_info.update(format=bench_model.enc.format, **info)


def _run(benchmark, fn, rounds):
    benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)


def test_single_chatids(benchmark, bench_model):
    _describe(benchmark, "single", bench_model, conversations=len(bench_model.single))
    enc, kw = bench_model.enc, bench_model.kwargs
    _run(benchmark, lambda: [enc.encode(c, **kw) for c in bench_model.single], ROUNDS_SINGLE)


def test_single_transformers(benchmark, bench_model):
    _describe(benchmark, "single", bench_model, conversations=len(bench_model.single))
    tok, kw = bench_model.tok, bench_model.kwargs
    _run(benchmark, lambda: [tok.apply_chat_template(c, tokenize=True, **kw) for c in bench_model.single], ROUNDS_SINGLE)


def test_single_transformers_sanitized(benchmark, bench_model):
    _describe(benchmark, "single", bench_model, conversations=len(bench_model.single))
    tok, kw = bench_model.tok, bench_model.kwargs
    _run(
        benchmark,
        lambda: [tok.apply_chat_template(c, tokenize=True, sanitize_control_tokens=True, **kw) for c in bench_model.single],
        ROUNDS_SINGLE,
    )


def test_batch_chatids(benchmark, bench_model):
    _describe(benchmark, "batch", bench_model, conversations=len(bench_model.batch), tokens=bench_model.batch_tokens)
    _run(benchmark, lambda: bench_model.enc.encode_batch(bench_model.batch, **bench_model.kwargs), ROUNDS_BATCH)


def test_batch_chatids_tokenizers_crate(benchmark, bench_model):
    _describe(benchmark, "batch", bench_model, conversations=len(bench_model.batch), tokens=bench_model.batch_tokens)
    enc = bench_model.enc_crate
    assert enc.text_encoder == "tokenizers"
    _run(benchmark, lambda: enc.encode_batch(bench_model.batch, **bench_model.kwargs), ROUNDS_BATCH)


def test_batch_transformers(benchmark, bench_model):
    _describe(benchmark, "batch", bench_model, conversations=len(bench_model.batch), tokens=bench_model.batch_tokens)
    _run(
        benchmark,
        lambda: bench_model.tok.apply_chat_template(bench_model.batch, tokenize=True, **bench_model.kwargs),
        ROUNDS_BATCH,
    )


def test_batch_tokenizers_encode_batch_fast(benchmark, bench_model):
    _describe(benchmark, "batch", bench_model, conversations=len(bench_model.batch), tokens=bench_model.batch_tokens)
    backend = bench_model.tok.backend_tokenizer
    _run(benchmark, lambda: backend.encode_batch_fast(bench_model.rendered, add_special_tokens=False), ROUNDS_BATCH)
