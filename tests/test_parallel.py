"""encode_batch's parallelism: results independent of the thread count, the thread count as
asked (``num_threads``, else ``RAYON_NUM_THREADS``, else the cores), and fork safety.

chatids runs batches on its own thread pools (threads named ``chatids-N``), one set per
process, never on rayon's global pool: after ``fork()`` a child has none of the parent's
threads, and a parallel call on a pool built before the fork would wait for them forever. So a
forked child (``os.fork``, a ``multiprocessing`` fork pool, a data loader's workers) encodes
batches after the parent has.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
import warnings
from typing import Any

import pytest

import support

import chatids

MODEL = "llama-3.1-8b-instruct"
#: How long a forked child may take before it counts as hung.
TIMEOUT = 120


def load() -> tuple[chatids.Encoder, dict[str, Any], list[list[dict]]]:
    enc = chatids.Encoder.from_pretrained(support.require_model_path(MODEL))
    kwargs = support.template_kwargs(support.MODELS[MODEL][0])
    rows = [r["messages"] for f in support.corpus_files() for r in support.corpus_rows(f)[:6]]
    convs = [[{"role": "user", "content": f"question {i} " * (i % 7 + 1)}, {"role": "assistant", "content": f"answer {i}"}] for i in range(100)]
    for messages in rows:
        try:
            enc.encode(messages, True, **kwargs)
        except chatids.ChatTemplateError:
            continue
        convs.append(messages)
    return enc, kwargs, convs


def rows(batch) -> list[list[int]]:
    return [row.tolist() for row in batch]


def test_thread_counts_give_the_same_ids() -> None:
    enc, kwargs, convs = load()
    single = [enc.encode(c, True, **kwargs).tolist() for c in convs]
    for num_threads in (1, 2, None):
        for sanitize in (True, False):
            batch = enc.encode_batch(convs, add_generation_prompt=True, sanitize_control_tokens=sanitize, num_threads=num_threads, **kwargs)
            if sanitize:
                assert rows(batch) == single, num_threads
            else:
                assert rows(batch) == rows(enc.encode_batch(convs, add_generation_prompt=True, sanitize_control_tokens=False, num_threads=1, **kwargs))
    with pytest.raises(chatids.CheckpointError, match="num_threads must be at least 1"):
        enc.encode_batch(convs, num_threads=0, **kwargs)


#: Run in a subprocess: encode batches, and print how many threads each added (the pool's
#: threads exist once it is built; their names are set when they first run, so the names are
#: polled for).
_COUNT_THREADS = textwrap.dedent(
    """
    import glob, json, sys, time
    import chatids
    enc = chatids.Encoder.from_pretrained(sys.argv[1])
    convs = [[{"role": "user", "content": f"q {i}"}] for i in range(200)]
    def tasks():
        return len(glob.glob("/proc/self/task/*"))
    def named():
        names = []
        for f in glob.glob("/proc/self/task/*/comm"):
            try:
                names.append(open(f).read().strip())
            except OSError:
                pass
        return sum(n.startswith("chatids-") for n in names)
    start = tasks()
    enc.encode_batch(convs, add_generation_prompt=True)
    default = tasks() - start
    enc.encode_batch(convs, add_generation_prompt=True)
    again = tasks() - start
    enc.encode_batch(convs, add_generation_prompt=True, num_threads=2)
    explicit = tasks() - start
    deadline = time.monotonic() + 10
    while named() != explicit and time.monotonic() < deadline:
        time.sleep(0.05)
    print(json.dumps({"default": default, "again": again, "explicit": explicit, "named": named()}))
    """
)


def count_threads(env_threads: str | None) -> dict[str, int]:
    env = {k: v for k, v in os.environ.items() if k != "RAYON_NUM_THREADS"}
    if env_threads is not None:
        env["RAYON_NUM_THREADS"] = env_threads
    out = subprocess.run(
        [sys.executable, "-c", _COUNT_THREADS, str(support.require_model_path(MODEL))],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    import json

    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc/self/task (Linux)")
def test_rayon_num_threads_is_respected() -> None:
    counts = count_threads("1")
    # One pool of RAYON_NUM_THREADS threads, built once and reused; num_threads=2 adds its own.
    assert counts == {"default": 1, "again": 1, "explicit": 3, "named": 3}
    counts = count_threads("3")
    assert counts == {"default": 3, "again": 3, "explicit": 5, "named": 5}
    # Unset: one thread per available core.
    counts = count_threads(None)
    assert 1 <= counts["default"] == counts["again"] <= (os.cpu_count() or 1)
    # Pools are per size: num_threads=2 shares the default pool on a two-core machine.
    assert counts["named"] == counts["explicit"] == counts["default"] + (0 if counts["default"] == 2 else 2)


def _wait(pid: int) -> int:
    """The exit status of child `pid`; kills it and fails the test if it hangs."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child hung for {TIMEOUT}s (killed)")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_encodes_after_the_parent() -> None:
    enc, kwargs, convs = load()
    expected = [enc.encode(c, True, **kwargs).tolist() for c in convs]
    # The parent builds its pools (default size, two threads, and the rendered-text path).
    assert rows(enc.encode_batch(convs, add_generation_prompt=True, **kwargs)) == expected
    assert rows(enc.encode_batch(convs, add_generation_prompt=True, num_threads=2, **kwargs)) == expected
    texts = [enc.render(c, True, **kwargs) for c in convs[:20]]
    rendered_ids, _ = enc._core.encode_rendered_batch(texts, False)
    state = enc._core.to_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() of a multi-threaded process
        pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            ok = rows(enc.encode_batch(convs, add_generation_prompt=True, **kwargs)) == expected
            ok &= rows(enc.encode_batch(convs, add_generation_prompt=True, num_threads=2, **kwargs)) == expected
            ok &= rows(enc.encode_batch(convs, add_generation_prompt=True, num_threads=3, **kwargs)) == expected
            ok &= enc.encode(convs[0], True, **kwargs).tolist() == expected[0]
            ok &= enc._core.encode_rendered_batch(texts, False)[0].tolist() == rendered_ids.tolist()
            again = chatids._encoder._encoder_from_state(state)  # loading in the child, too
            ok &= rows(again.encode_batch(convs, add_generation_prompt=True, **kwargs)) == expected
            code = 0 if ok else 2
        finally:
            os._exit(code)
    assert _wait(pid) == 0, "the forked child's ids differ"
    # The parent's pools still work.
    assert rows(enc.encode_batch(convs, add_generation_prompt=True, **kwargs)) == expected


#: The encoder a fork pool's workers inherit (as a data loader's dataset holds it).
_INHERITED: dict[str, Any] = {}


def _encode_inherited(indices: list[int]) -> list[list[int]]:
    enc, kwargs, convs = _INHERITED["enc"], _INHERITED["kwargs"], _INHERITED["convs"]
    return rows(enc.encode_batch([convs[i] for i in indices], add_generation_prompt=True, **kwargs))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_pool_after_first_use() -> None:
    enc, kwargs, convs = load()
    expected = rows(enc.encode_batch(convs, add_generation_prompt=True, **kwargs))
    _INHERITED.update(enc=enc, kwargs=kwargs, convs=convs)
    try:
        shards = [list(range(i, len(convs), 4)) for i in range(4)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            with multiprocessing.get_context("fork").Pool(2) as pool:
                try:
                    results = pool.map_async(_encode_inherited, shards).get(timeout=TIMEOUT)
                except multiprocessing.TimeoutError:
                    pool.terminate()
                    pytest.fail(f"fork pool workers hung for {TIMEOUT}s")
    finally:
        _INHERITED.clear()
    for shard, got in zip(shards, results):
        assert got == [expected[i] for i in shard]
