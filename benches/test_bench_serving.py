"""Serving: an agent loop with tools, and the latency of one prompt (Llama 3.1, Qwen2.5).

* ``serving-loop-<model>``: a 20-step agent loop. The conversation starts with a system
  message, a user message and 6 tools from the glaive tool-call corpus; each step appends an
  assistant tool call (OpenAI-style ``tool_calls``, arguments as a dict) and a tool result of
  1,000-4,000 characters (JSON built from corpus text with a seeded RNG). The loop builds 21
  prompts (``add_generation_prompt=True``): one after the user message, one after each tool
  result. Timed as a whole, four ways, plus a yardstick:

  - ``session``: ``Encoder.session(...)``, then per step ``append([call, result])`` and
    ``generation_prompt()``;
  - ``session_completion``: the same, but the assistant turn goes in as the model's ids through
    ``append_completion(ids, message)`` (ids taken from chatids' encode of that message, as a
    model would sample them), then ``append([result])``;
  - ``session_parsed``: the whole agent step: the assistant turn goes in as the model's ids
    through ``append_completion(ids)`` *without* a message, so chatids parses it (content and
    tool calls) and keeps the ids, then ``append([result])`` and ``generation_prompt()``;
  - ``reencode``: ``Encoder.encode(all messages so far, add_generation_prompt=True, tools=...)``
    per step;
  - ``transformers``: ``apply_chat_template(all messages so far, tools=...,
    add_generation_prompt=True, tokenize=True)`` per step;
  - ``full_encode`` (yardstick): one ``Encoder.encode`` of the final 20-step conversation.
    The goal is the whole session loop within 1.2x of it. The session benchmarks also record
    a paired ratio (median of back-to-back session-loop / full-encode runs), which a noisy
    neighbour disturbs less than the ratio of two separately measured medians.

  Before timing, each way's 21 prompts are checked equal to ``encode`` of the same messages
  (and ``encode`` equal to transformers'): a benchmark of wrong output is worthless.

* ``serving-latency-<model>-<short|long>``: one ``encode(..., add_generation_prompt=True)`` of a
  short chat (~100 tokens) and of a long one (~8k tokens of corpus text), chatids against
  ``apply_chat_template(tokenize=True)``; 2,000 (short) / 200 (long) calls, each timed with
  ``time.perf_counter_ns``; p50 / p99 / mean in ``extra_info`` (the benchmark's own "round" is
  the whole series).

``CHATIDS_BENCH_QUICK=1`` runs one round of each with 200 / 20 latency calls.
``benches/report.py`` prints these groups as the "Serving" section of BENCHMARKS.md.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pytest

import chatids

QUICK = os.environ.get("CHATIDS_BENCH_QUICK", "") not in ("", "0")
SERVING_MODELS = ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct"]
STEPS = 20
N_TOOLS = 6
ROUNDS_LOOP = 1 if QUICK else 15
ROUNDS_FULL = 1 if QUICK else 50
#: Back-to-back pairs for the paired ratios of the session loops (see _paired_ratio).
PAIRS = 1 if QUICK else 15
LATENCY_CALLS = {"short": 200 if QUICK else 2000, "long": 20 if QUICK else 200}
LATENCY_WARMUP = {"short": 20, "long": 5}
LATENCY_TARGET_TOKENS = {"short": 100, "long": 8000}


def _missing(message: str) -> None:
    if os.environ.get("CHATIDS_REQUIRE_MODELS", "") not in ("", "0"):
        pytest.fail(message)
    pytest.skip(message)


def _tools() -> list[dict]:
    """The first N_TOOLS distinct tools of the glaive tool-call corpus."""
    path = Path(os.environ.get("CHATIDS_DATA_DIR", "")) / "conversations" / "glaive_toolcall_en.jsonl"
    if not path.is_file():
        _missing(f"{path} not found (CHATIDS_DATA_DIR)")
    tools: dict[str, dict] = {}
    for line in open(path, encoding="utf-8"):
        for tool in json.loads(line).get("tools") or []:
            tools.setdefault(tool["function"]["name"], tool)
        if len(tools) >= N_TOOLS:
            break
    return list(tools.values())[:N_TOOLS]


def _arguments(tool: dict, rng: random.Random, words: list[str]) -> dict[str, Any]:
    """Arguments matching the tool's parameter schema."""
    out: dict[str, Any] = {}
    for name, spec in tool["function"]["parameters"].get("properties", {}).items():
        kind = spec.get("type")
        if kind == "number":
            out[name] = round(rng.uniform(1, 500), 2)
        elif kind == "integer":
            out[name] = rng.randint(1, 100)
        elif kind == "boolean":
            out[name] = rng.random() < 0.5
        elif kind == "array":
            item = spec.get("items", {}).get("type")
            out[name] = [round(rng.uniform(1, 50), 1) for _ in range(3)] if item == "number" else rng.sample(words, 3)
        else:
            out[name] = " ".join(rng.sample(words, rng.randint(1, 4)))
    return out


def _tool_result(rng: random.Random, texts: list[str]) -> str:
    """A JSON tool result of 1,000-4,000 characters made of corpus text."""
    target = rng.randint(1000, 4000)
    results: list[dict] = []
    doc = {"status": "ok", "results": results}
    size = len(json.dumps(doc, ensure_ascii=False))
    while size < target - 60:
        text = rng.choice(texts)
        start = rng.randrange(max(1, len(text) - 200))
        item = {"id": rng.randrange(10**6), "score": round(rng.random(), 3), "snippet": text[start:start + rng.randint(120, 600)]}
        overhead = len(json.dumps(item, ensure_ascii=False)) - len(item["snippet"]) + 8
        item["snippet"] = item["snippet"][: target - size - overhead]  # the last one is cut to land near target
        results.append(item)
        size = len(json.dumps(doc, ensure_ascii=False))
    return json.dumps(doc, ensure_ascii=False)


def agent_conversation(corpus: list[list[dict]], tools: list[dict]) -> list[dict]:
    """system + user, then STEPS x (assistant tool call, tool result); deterministic."""
    rng = random.Random("chatids:serving")
    texts = [m["content"] for c in corpus[:400] for m in c if len(m["content"]) > 300]
    words = sorted({w for t in texts[:50] for w in t.split() if w.isalpha() and len(w) > 3})
    messages: list[dict] = [
        {"role": "system", "content": "You are an agent. Call the tools you are given; answer only when you have what you need."},
        {"role": "user", "content": corpus[0][0]["content"][:400]},
    ]
    for step in range(STEPS):
        tool = rng.choice(tools)
        call_id = f"call_{step:02d}{rng.randrange(16**6):06x}"
        name = tool["function"]["name"]
        messages.append({
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": _arguments(tool, rng, words)}}],
        })
        messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": _tool_result(rng, texts)})
    return messages


def chat_conversation(corpus: list[list[dict]]) -> list[dict]:
    """The same shape without tools: system + user, then STEPS x (an assistant answer of
    1,000-4,000 characters of corpus text, a short user follow-up); deterministic."""
    rng = random.Random("chatids:serving-chat")
    texts = [m["content"] for c in corpus[:400] for m in c if len(m["content"]) > 300]
    messages: list[dict] = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": corpus[0][0]["content"][:400]},
    ]
    for _ in range(STEPS):
        answer = ""
        target = rng.randint(1000, 4000)
        while len(answer) < target:
            answer += rng.choice(texts) + "\n\n"
        messages.append({"role": "assistant", "content": answer[:target].strip()})
        messages.append({"role": "user", "content": rng.choice(texts)[:200]})
    return messages


#: Index of the last message of the prompt each step builds: the user message, then each tool result.
PROMPT_ENDS = [2 + 2 * step for step in range(STEPS + 1)]


class Serving:
    def __init__(self, name: str, corpus: list[list[dict]], with_tools: bool = True):
        from transformers import AutoTokenizer

        base = os.environ.get("CHATIDS_MODELS_DIR")
        if not base or not (Path(base) / name).is_dir():
            _missing(f"model {name} not found (CHATIDS_MODELS_DIR)")
        path = Path(base) / name
        self.name = name
        #: The benchmark group's suffix: the model, and "-chat" for the loop without tools.
        self.label = name if with_tools else f"{name}-chat"
        self.enc = chatids.Encoder.from_pretrained(path)
        self.tok = AutoTokenizer.from_pretrained(str(path))
        self.kwargs: dict[str, Any] = {"date_string": "26 Jul 2024"} if self.enc.format.startswith("llama-3.") else {}
        self.tools: Optional[list[dict]] = _tools() if with_tools else None
        self.messages = agent_conversation(corpus, self.tools) if self.tools else chat_conversation(corpus)
        enc, kw = self.enc, self.kwargs
        # The 21 prompts, from chatids' encode, checked once against transformers.
        self.expected = [enc.encode(self.messages[:n], add_generation_prompt=True, tools=self.tools, **kw) for n in PROMPT_ENDS]
        for n, ids in zip(PROMPT_ENDS, self.expected):
            ref = self.reference(self.messages[:n])
            assert ids.tolist() == ref, f"{name}: encode differs from apply_chat_template at the prompt after {n} messages"
        self.tokens = len(self.expected[-1])
        # Characters of what each step adds: the tool results, or the answers without tools.
        self.chars = sum(len(m["content"]) for m in self.messages[2:] if m["role"] in ("tool", "assistant"))
        # The model's ids for each assistant turn: what follows the generation prompt in the
        # encoding of the conversation through that turn, up to its stop token.
        stops = set(enc.stop_token_ids)
        self.completions: list[np.ndarray] = []
        for step, n in enumerate(PROMPT_ENDS[:-1]):
            through = enc.encode(self.messages[: n + 1], tools=self.tools, **kw)
            prompt = self.expected[step]
            assert np.array_equal(through[: len(prompt)], prompt), f"{name}: the assistant turn rewrites its prompt"
            ids = through[len(prompt):]
            ends = [i for i, t in enumerate(ids.tolist()) if t in stops]
            assert ends, f"{name}: no stop token in the assistant turn"
            self.completions.append(ids[: ends[0] + 1])

    def reference(self, messages: list[dict]) -> list[int]:
        out = self.tok.apply_chat_template(messages, tools=self.tools, add_generation_prompt=True, tokenize=True, **self.kwargs)
        return list(out["input_ids"] if hasattr(out, "keys") else out)

    # --- the loops; each returns the prompts it built when ``out`` is a list ---

    def loop_session(self, out: Optional[list] = None) -> None:
        msgs = self.messages
        s = self.enc.session(msgs[:2], tools=self.tools, **self.kwargs)
        prompt = s.generation_prompt()
        if out is not None:
            out.append(prompt)
        for step in range(STEPS):
            s.append(msgs[2 + 2 * step: 4 + 2 * step])
            prompt = s.generation_prompt()
            if out is not None:
                out.append(prompt)

    def loop_session_completion(self, out: Optional[list] = None, parse: bool = False) -> None:
        msgs, completions = self.messages, self.completions
        s = self.enc.session(msgs[:2], tools=self.tools, **self.kwargs)
        prompt = s.generation_prompt()
        if out is not None:
            out.append(prompt)
        for step in range(STEPS):
            if parse:
                s.append_completion(completions[step])
            else:
                s.append_completion(completions[step], msgs[2 + 2 * step])
            s.append(msgs[3 + 2 * step])
            prompt = s.generation_prompt()
            if out is not None:
                out.append(prompt)

    def loop_session_parsed(self, out: Optional[list] = None) -> None:
        self.loop_session_completion(out, parse=True)

    def loop_reencode(self, out: Optional[list] = None) -> None:
        enc, msgs, tools, kw = self.enc, self.messages, self.tools, self.kwargs
        for n in PROMPT_ENDS:
            prompt = enc.encode(msgs[:n], add_generation_prompt=True, tools=tools, **kw)
            if out is not None:
                out.append(prompt)

    def loop_transformers(self, out: Optional[list] = None) -> None:
        tok, msgs, tools, kw = self.tok, self.messages, self.tools, self.kwargs
        for n in PROMPT_ENDS:
            prompt = tok.apply_chat_template(msgs[:n], tools=tools, add_generation_prompt=True, tokenize=True, **kw)
            if out is not None:
                out.append(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)

    def full_encode(self, out: Optional[list] = None) -> None:
        prompt = self.enc.encode(self.messages, add_generation_prompt=True, tools=self.tools, **self.kwargs)
        if out is not None:
            out.append(prompt)


_SERVING: dict[tuple[str, bool], Serving] = {}
#: The agent loops: each serving model with tools (rendered by its template), and Llama 3.1
#: without tools (its native format).
LOOP_CASES = [(name, True) for name in SERVING_MODELS] + [("llama-3.1-8b-instruct", False)]


def _serving(corpus, name: str, with_tools: bool) -> Serving:
    if (name, with_tools) not in _SERVING:
        _SERVING[(name, with_tools)] = Serving(name, corpus, with_tools)
    return _SERVING[(name, with_tools)]


@pytest.fixture(params=LOOP_CASES, ids=[n if t else f"{n}-chat" for n, t in LOOP_CASES])
def serving(request, corpus) -> Serving:
    return _serving(corpus, *request.param)


@pytest.fixture(params=SERVING_MODELS)
def serving_model(request, corpus) -> Serving:
    return _serving(corpus, request.param, True)


def _loop_bench(benchmark, serving: Serving, fn: Callable[[Optional[list]], None], rounds: int) -> None:
    benchmark.group = f"serving-loop-{serving.label}"
    out: list = []
    fn(out)  # checked once, outside the timing
    expected = serving.expected[-1:] if fn.__name__ == "full_encode" else serving.expected
    assert len(out) == len(expected)
    for i, (got, want) in enumerate(zip(out, expected)):
        assert np.array_equal(np.asarray(got, dtype=np.int64), want.astype(np.int64)), f"{serving.name}: {fn.__name__} prompt {i} differs from encode"
    benchmark.extra_info.update(
        steps=STEPS, prompts=len(expected), tokens=serving.tokens, tool_result_chars=serving.chars, format=serving.enc.format
    )
    benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)


def _paired_ratio(fn: Callable[[], None], yardstick: Callable[[], None], pairs: int) -> float:
    """Median over ``pairs`` back-to-back runs of fn's time / yardstick's time: on a shared
    machine a neighbour's load hits both runs of a pair alike, unlike two separate series."""
    ratios = []
    for _ in range(pairs):
        t0 = time.perf_counter_ns()
        fn()
        t1 = time.perf_counter_ns()
        yardstick()
        ratios.append((t1 - t0) / max(1, time.perf_counter_ns() - t1))
    return float(np.median(ratios))


def test_loop_chatids_session(benchmark, serving):
    _loop_bench(benchmark, serving, serving.loop_session, ROUNDS_LOOP)
    benchmark.extra_info["paired_ratio_to_full_encode"] = round(_paired_ratio(serving.loop_session, serving.full_encode, PAIRS), 3)


def test_loop_chatids_session_completion(benchmark, serving):
    _loop_bench(benchmark, serving, serving.loop_session_completion, ROUNDS_LOOP)
    benchmark.extra_info["paired_ratio_to_session"] = round(
        _paired_ratio(serving.loop_session_completion, serving.loop_session, PAIRS), 3
    )
    benchmark.extra_info["paired_ratio_to_full_encode"] = round(
        _paired_ratio(serving.loop_session_completion, serving.full_encode, PAIRS), 3
    )


def test_loop_chatids_session_parsed(benchmark, serving):
    _loop_bench(benchmark, serving, serving.loop_session_parsed, ROUNDS_LOOP)
    benchmark.extra_info["paired_ratio_to_full_encode"] = round(
        _paired_ratio(serving.loop_session_parsed, serving.full_encode, PAIRS), 3
    )


def test_loop_chatids_reencode(benchmark, serving):
    _loop_bench(benchmark, serving, serving.loop_reencode, ROUNDS_LOOP)


def test_loop_transformers(benchmark, serving):
    _loop_bench(benchmark, serving, serving.loop_transformers, ROUNDS_LOOP)


def test_loop_chatids_full_encode(benchmark, serving):
    _loop_bench(benchmark, serving, serving.full_encode, ROUNDS_FULL)


# --- latency of one prompt ---


def _alternating(conv: list[dict]) -> bool:
    roles = [m["role"] for m in conv]
    return len(roles) >= 2 and roles == ["user", "assistant"] * (len(roles) // 2)


def latency_chat(enc: chatids.Encoder, kw: dict, corpus: list[list[dict]], size: str) -> list[dict]:
    """A chat ending with a user message: the first corpus conversation of ~100 tokens
    (short), or corpus conversations joined to ~8,000 tokens (long)."""
    pairs = [c for c in corpus if _alternating(c)]
    if size == "short":
        for c in pairs:
            chat = c[:-1]
            if 80 <= len(enc.encode(chat, add_generation_prompt=True, **kw)) <= 130:
                return chat
        raise AssertionError("no corpus conversation of ~100 tokens")
    chat: list[dict] = []
    for c in pairs:
        chat += c
        if len(enc.encode(chat[:-1], add_generation_prompt=True, **kw)) >= LATENCY_TARGET_TOKENS["long"]:
            return chat[:-1]
    raise AssertionError("the corpus has fewer than 8,000 tokens of alternating chats")


@pytest.fixture(params=["short", "long"])
def latency_size(request) -> str:
    return request.param


def _latency(benchmark, serving: Serving, corpus, size: str, side: str) -> None:
    enc, tok, kw = serving.enc, serving.tok, serving.kwargs
    chat = latency_chat(enc, kw, corpus, size)
    ids = enc.encode(chat, add_generation_prompt=True, **kw)
    ref = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, **kw)
    assert ids.tolist() == list(ref["input_ids"] if hasattr(ref, "keys") else ref), f"{serving.name}: {size} chat differs"
    if side == "chatids":
        def call() -> Any:
            return enc.encode(chat, add_generation_prompt=True, **kw)
    else:
        def call() -> Any:
            return tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, **kw)
    n = LATENCY_CALLS[size]
    times = np.empty(n, dtype=np.int64)

    def series() -> None:
        clock = time.perf_counter_ns
        for i in range(n):
            t0 = clock()
            call()
            times[i] = clock() - t0

    for _ in range(LATENCY_WARMUP[size]):
        call()
    benchmark.group = f"serving-latency-{serving.name}-{size}"
    benchmark.pedantic(series, rounds=1, iterations=1)
    p50, p99 = np.percentile(times, [50, 99])
    benchmark.extra_info.update(
        calls=n, tokens=len(ids), messages=len(chat), p50_us=round(p50 / 1e3, 1), p99_us=round(p99 / 1e3, 1),
        mean_us=round(times.mean() / 1e3, 1), max_us=round(times.max() / 1e3, 1), format=enc.format,
    )


def test_latency_chatids(benchmark, serving_model, corpus, latency_size):
    _latency(benchmark, serving_model, corpus, latency_size, "chatids")


def test_latency_transformers(benchmark, serving_model, corpus, latency_size):
    _latency(benchmark, serving_model, corpus, latency_size, "transformers")
