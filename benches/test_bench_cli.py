"""``chatids encode`` end to end, as a user runs it: a subprocess reading a 100,000-conversation
JSONL file (the shared corpus tiled, written to a temporary directory) and writing Parquet, a set
of ``.npy`` files, or Parquet with ``--masks`` (labels and assistant_mask too).

Each run records in ``extra_info``: conversations, tokens, conversations/s, tokens/s and the
child's peak RSS (``os.wait4``'s ``ru_maxrss``), with the input's size beside it: the command
streams in chunks of 2,048 conversations, so the peak must stay far below the input size.
``CHATIDS_BENCH_QUICK=1`` uses 2,000 conversations.

Run: ``make bench-cli`` (or ``pytest benches/test_bench_cli.py -s``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import QUICK

MODEL = "llama-3.1-8b-instruct"
N = 2_000 if QUICK else 100_000
ROUNDS = 1 if QUICK else 3
OUTPUTS = {
    "parquet": ("out.parquet", []),
    "npy": ("out.npy", []),
    "parquet-masks": ("masks.parquet", ["--masks"]),
}


@pytest.fixture(scope="session")
def big_jsonl(corpus, tmp_path_factory) -> tuple[Path, int]:
    """N conversations: the corpus tiled (each copy is one more line, never kept in the repo)."""
    path = tmp_path_factory.mktemp("cli") / f"conversations-{N}.jsonl"
    lines = [json.dumps({"messages": c}, ensure_ascii=False) for c in corpus]
    with open(path, "w", encoding="utf-8") as f:
        for i in range(N):
            f.write(lines[i % len(lines)] + "\n")
    return path, N


@pytest.fixture(scope="session")
def model_dir() -> str:
    base = os.environ.get("CHATIDS_MODELS_DIR")
    if not base or not (Path(base) / MODEL).is_dir():
        pytest.skip(f"model {MODEL} not found (CHATIDS_MODELS_DIR)")
    return str(Path(base) / MODEL)


def run_measured(args: list[str], logs: Path) -> tuple[float, int, str]:
    """(wall seconds, peak RSS in bytes, stdout) of one ``python -m chatids`` run; the RSS is
    this child's own (``wait4`` on its pid)."""
    start = time.perf_counter()
    with open(logs / "stdout", "wb") as out, open(logs / "stderr", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "chatids", *args], stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, (logs / "stderr").read_text()[-2000:]
    return elapsed, usage.ru_maxrss * 1024, (logs / "stdout").read_text()


@pytest.mark.parametrize("output", list(OUTPUTS))
def test_cli_chatids(benchmark, big_jsonl, model_dir, tmp_path: Path, output: str) -> None:
    path, n = big_jsonl
    name, extra = OUTPUTS[output]
    args = ["encode", str(path), "--model", model_dir, "--out", str(tmp_path / name), "--no-progress", *extra]
    runs: list[tuple[float, int, str]] = []
    benchmark.group = f"cli-{output}"
    benchmark.pedantic(lambda: runs.append(run_measured(args, tmp_path)), rounds=ROUNDS, iterations=1, warmup_rounds=0)
    best = min(runs, key=lambda r: r[0])
    summary = next(line for line in best[2].splitlines() if " tokens in " in line)
    accepted, tokens = int(summary.split()[0]), int(summary.split()[3])
    assert accepted >= 0.9 * n, summary
    peak = max(r[1] for r in runs)
    benchmark.extra_info.update(
        conversations=n,
        accepted=accepted,
        tokens=tokens,
        conversations_per_s=round(n / best[0]),
        tokens_per_s=round(tokens / best[0]),
        peak_rss_mb=round(peak / 2**20, 1),
        input_mb=round(path.stat().st_size / 2**20, 1),
        seconds=round(best[0], 2),
    )
    print(
        f"\n{output}: {n} conversations, {tokens} tokens in {best[0]:.2f} s: {n / best[0]:,.0f} conversations/s, "
        f"{tokens / best[0] / 1e6:.2f} M tokens/s, peak RSS {peak / 2**20:.0f} MiB (input {path.stat().st_size / 2**20:.0f} MiB)"
    )
