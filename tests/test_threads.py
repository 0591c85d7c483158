"""One ``Encoder`` shared by many Python threads at once.

A serving process keeps one encoder and calls it from a thread pool. Sixteen threads start
together (a ``threading.Barrier``) and each works on different corpus conversations (plain and
with tools) through ``encode``, ``encode_detailed``, ``render`` and one ``Session`` of its
own; every result must equal the same call made serially before. A second test runs
``encode_batch`` (which releases the GIL and runs on chatids' own pool) in one thread while the
fifteen others call ``encode`` (forking after ``encode_batch``: tests/test_parallel.py). Llama 3.1 and Qwen2.5 (native formats, and the Jinja path for
their tool conversations) and gpt-oss-120b (the Jinja path).
"""

from __future__ import annotations

import datetime as dt
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import pytest

import support

import chatids

THREADS = 16
#: Each thread runs its work this many times, so the threads overlap for a while.
REPEATS = 3
THREAD_MODELS = ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "gpt-oss-120b"]
#: Seconds a barrier or a worker may take before the test counts it as hung.
TIMEOUT = 60


class Work:
    """An encoder, its template arguments, and the corpus conversations it accepts."""

    def __init__(self, name: str) -> None:
        self.enc = chatids.Encoder.from_pretrained(support.require_model_path(name))
        fmt = support.MODELS[name][0]
        self.kwargs: dict[str, Any] = {**support.template_kwargs(fmt), "now": dt.datetime(*support.FROZEN_NOW)}
        files = support.corpus_files()
        if not files:
            support.require_corpus("<no corpus>")
        self.plain: list[list[dict]] = []
        self.with_tools: list[tuple[list[dict], list[dict]]] = []
        for f in files:
            for row in support.corpus_rows(f):
                tools = row.get("tools") or None
                try:
                    self.enc.encode(row["messages"], True, **self.tools_kw(tools))
                except chatids.ChatTemplateError:
                    continue
                if tools:
                    self.with_tools.append((row["messages"], tools))
                else:
                    self.plain.append(row["messages"])
        assert len(self.plain) >= 4 * THREADS, f"{name}: only {len(self.plain)} plain corpus conversations encode"
        assert len(self.with_tools) >= THREADS, f"{name}: only {len(self.with_tools)} tool conversations encode"

    def tools_kw(self, tools) -> dict[str, Any]:
        return {**self.kwargs, "tools": tools} if tools else self.kwargs

    def calls(self, worker: int) -> list[tuple[str, Callable[[], Any]]]:
        """Worker ``worker``'s calls: its share of the conversations, each through encode,
        encode_detailed and render, and one session."""
        enc = self.enc
        out: list[tuple[str, Callable[[], Any]]] = []
        mine: list[tuple[list[dict], Any]] = [(c, None) for c in self.plain[worker::THREADS]]
        mine += list(self.with_tools[worker::THREADS])
        for i, (messages, tools) in enumerate(mine):
            kw = self.tools_kw(tools)
            agp = i % 2 == 0
            out.append((f"encode {i}", lambda m=messages, kw=kw, agp=agp: enc.encode(m, agp, **kw).tolist()))
            out.append((f"encode sanitize off {i}", lambda m=messages, kw=kw: enc.encode(m, True, False, **kw).tolist()))
            out.append((f"encode_detailed {i}", lambda m=messages, kw=kw, agp=agp: detailed(enc.encode_detailed(m, agp, **kw))))
            out.append((f"render {i}", lambda m=messages, kw=kw, agp=agp: enc.render(m, agp, **kw)))
        # One session per worker: a tool conversation for even workers, a plain one for odd.
        messages, tools = self.with_tools[worker] if worker % 2 == 0 else (self.plain[worker], None)
        out.append(("session", lambda: run_session(enc, messages, self.tools_kw(tools))))
        return out


def detailed(chat: chatids.EncodedChat) -> tuple[list, list, list]:
    return chat.ids.tolist(), chat.message_indices.tolist(), chat.from_content.tolist()


def steps(messages: list[dict]) -> list[list[dict]]:
    """The messages after the first user message, cut before each message that is not a tool
    result (the results of one step are appended in one call, as the Session docs ask)."""
    out: list[list[dict]] = []
    for m in messages:
        if out and m["role"] == "tool":
            out[-1].append(m)
        else:
            out.append([m])
    return out


def run_session(enc: chatids.Encoder, messages: list[dict], kw: dict[str, Any]) -> dict[str, Any]:
    """Build the conversation in a session step by step; record every append and prompt."""
    first_user = next(i for i, m in enumerate(messages) if m["role"] == "user")
    s = enc.session(messages[: first_user + 1], on_rewrite="reencode", **kw)
    record: dict[str, Any] = {"prompts": [s.generation_prompt().tolist()], "added": [], "starts": []}
    for chunk in steps(messages[first_user + 1:]):
        record["added"].append(s.append(chunk).tolist())
        record["starts"].append(s.start)
        record["prompts"].append(s.generation_prompt().tolist())
    record["ids"] = s.ids.tolist()
    return record


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    """The call's result, or its exception as (type, message): errors must agree too."""
    try:
        return ("ok", fn())
    except Exception as e:  # compared with the serial run's outcome
        return (type(e).__name__, str(e))


_WORK: dict[str, Work] = {}


@pytest.fixture(params=THREAD_MODELS, scope="module")
def work(request) -> Work:
    if request.param not in _WORK:
        _WORK[request.param] = Work(request.param)
    return _WORK[request.param]


def test_threads_share_one_encoder(work: Work) -> None:
    per_worker = [work.calls(w) for w in range(THREADS)]
    serial = [[outcome(fn) for _, fn in calls] for calls in per_worker]
    # The serial run itself is right: sessions equal full encodes.
    for w, calls in enumerate(per_worker):
        for (label, _), (status, value) in zip(calls, serial[w]):
            assert status == "ok", f"worker {w}, {label}: {status}: {value}"
    for w in range(THREADS):
        session = serial[w][-1][1]
        messages, tools = work.with_tools[w] if w % 2 == 0 else (work.plain[w], None)
        kw = work.tools_kw(tools)
        assert session["ids"] == work.enc.encode(messages, **kw).tolist(), f"worker {w}: session ids differ from encode"
        assert session["prompts"][-1] == work.enc.encode(messages, True, **kw).tolist(), f"worker {w}: session prompt differs"

    barrier = threading.Barrier(THREADS, timeout=TIMEOUT)
    started: list[float] = []

    def run(w: int) -> list[list[tuple[str, Any]]]:
        barrier.wait()
        started.append(threading.get_ident())
        return [[outcome(fn) for _, fn in per_worker[w]] for _ in range(REPEATS)]

    with ThreadPoolExecutor(THREADS) as pool:
        futures = [pool.submit(run, w) for w in range(THREADS)]
        results = [f.result(timeout=TIMEOUT) for f in futures]
    assert len(set(started)) == THREADS, f"the workers did not run on {THREADS} distinct threads"
    for w, repeats in enumerate(results):
        for r, got in enumerate(repeats):
            for (label, _), want, have in zip(per_worker[w], serial[w], got):
                assert have == want, f"worker {w}, repeat {r}, {label}: threaded result differs from the serial one"


def test_encode_batch_while_other_threads_encode(work: Work) -> None:
    convs = work.plain
    kw = work.kwargs
    expected = [work.enc.encode(c, True, **kw).tolist() for c in convs]
    barrier = threading.Barrier(THREADS, timeout=TIMEOUT)

    def batch() -> list[list[list[int]]]:
        barrier.wait()
        return [[row.tolist() for row in work.enc.encode_batch(convs, add_generation_prompt=True, **kw)] for _ in range(REPEATS)]

    def single(w: int) -> list[tuple[int, list[int]]]:
        barrier.wait()
        return [(i, work.enc.encode(convs[i], True, **kw).tolist()) for _ in range(REPEATS) for i in range(w, len(convs), THREADS - 1)]

    with ThreadPoolExecutor(THREADS) as pool:
        batch_future = pool.submit(batch)
        singles = [pool.submit(single, w) for w in range(THREADS - 1)]
        batches = batch_future.result(timeout=TIMEOUT)
        pairs = [p for f in singles for p in f.result(timeout=TIMEOUT)]
    for r, rows in enumerate(batches):
        assert rows == expected, f"encode_batch, repeat {r}: differs from serial encode"
    assert len(pairs) == REPEATS * len(convs)
    for i, ids in pairs:
        assert ids == expected[i], f"conversation {i}: encode in a thread differs from serial encode"
