"""Run the pytest suite as parallel processes, each on whole test files (`make test-python`).

Most of the suite's time is the single-threaded transformers reference, so on a 2-core machine
two pytest processes side by side take about half the time of one. Each process runs whole
files, so every module's fixtures, counters and terminal summaries (the conformance table and
the counts of the other suites) stay in one process and are printed as usual.

Usage: python scripts/run_pytest.py --results DIR [--shards N] [--first FILE ...] [-- PYTEST_ARGS]

* ``--shards 1`` runs one pytest process over ``tests/`` (needed when ``PYTEST_ARGS`` selects
  tests of one process only, e.g. ``-k``: the other would collect none and fail).
* ``--shards 2`` (default): the first process runs the ``--first`` files, the second every other
  file under ``tests/`` (a new test file lands there without being listed). (``make
  conformance-full`` runs its files with ``scripts/run_files.py`` instead: a process per file,
  resumable.)

Each process writes its output to ``DIR/pytest-K.log`` (printed when all are done, one after the
other) and its JUnit report to ``DIR/pytest-K.xml``. The exit status is non-zero if any process
failed; ``scripts/check_no_skips.py`` then reads every report.

The processes share one compiled encoder cache (``CHATIDS_CACHE_DIR``), a new folder removed at
the end: a checkpoint's first load with given options builds its encoder and writes it, every
later one in either process (and in the subprocesses the tests start) reads it back. Uncached,
each load of a large vocabulary costs 1-3 s here, and the suite loads the same few checkpoints
hundreds of times. So the suite runs the build path once per checkpoint and options, and the
read path everywhere else, which ``tests/test_compiled_cache.py`` proves gives the same encoder.
A ``CHATIDS_CACHE_DIR`` already set is used as it is; set it empty to run without the cache.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def commands(results: Path, shards: int, first: list[str], pytest_args: list[str]) -> list[list[str]]:
    """One pytest command line per process."""
    base = [sys.executable, "-m", "pytest", "-q", "--durations=15", "-p", "no:cacheprovider"]
    if shards == 1:
        return [base + ["tests", f"--junitxml={results / 'pytest-1.xml'}"] + pytest_args]
    if shards != 2:
        raise SystemExit("run_pytest: --shards is 1 or 2")
    missing = [f for f in first if not (REPO / f).is_file()]
    if not first or missing:
        raise SystemExit(f"run_pytest: --first needs existing test files (missing: {missing})")
    rest = ["tests"] + [f"--ignore={f}" for f in first]
    return [
        base + first + [f"--junitxml={results / 'pytest-1.xml'}"] + pytest_args,
        base + rest + [f"--junitxml={results / 'pytest-2.xml'}"] + pytest_args,
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--first", nargs="*", default=[])
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    args.results.mkdir(parents=True, exist_ok=True)
    for old in args.results.glob("pytest-*.xml"):
        old.unlink()
    env = dict(os.environ)
    cache = None
    if "CHATIDS_CACHE_DIR" not in env:
        cache = tempfile.mkdtemp(prefix="chatids-test-cache-")
        env["CHATIDS_CACHE_DIR"] = cache
    print(f"run_pytest: compiled encoder cache: {env['CHATIDS_CACHE_DIR'] or 'off'}", flush=True)
    started = time.perf_counter()
    running = []
    for k, cmd in enumerate(commands(args.results, args.shards, args.first, args.pytest_args), start=1):
        log = args.results / f"pytest-{k}.log"
        print(f"run_pytest: process {k}: {' '.join(cmd[1:])} > {log}", flush=True)
        handle = log.open("w")
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT)
        running.append((k, log, handle, proc))
    finished: dict[int, float] = {}
    try:
        while len(finished) < len(running):
            for k, _, handle, proc in running:
                if k not in finished and proc.poll() is not None:
                    finished[k] = time.perf_counter() - started
                    handle.close()
            time.sleep(0.5)
    finally:  # interrupted: no pytest process outlives this one
        for _, _, _, proc in running:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if cache is not None:
            entries = list(Path(cache).glob("*.chatids"))
            size = sum(e.stat().st_size for e in entries) / 1e6
            print(f"run_pytest: the cache held {len(entries)} encoders ({size:.0f} MB); removed", flush=True)
            shutil.rmtree(cache, ignore_errors=True)
    status = 0
    for k, log, _, proc in running:
        print(f"\n===== pytest process {k}: exit {proc.returncode}, {finished[k]:.0f} s =====", flush=True)
        sys.stdout.write(log.read_text(encoding="utf-8", errors="replace"))
        sys.stdout.flush()
        status = status or proc.returncode
    print(f"run_pytest: {len(running)} process(es), {time.perf_counter() - started:.0f} s in all, exit {status}")
    return status


if __name__ == "__main__":
    sys.exit(main())
