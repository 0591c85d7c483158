"""Run test files as separate pytest processes, a few at a time from a queue, and resume a run
that was cut off (`make conformance-full`).

`make conformance-full` takes several hours on a 2-core machine, more than one sitting may
leave it. Here each file is one pytest process; `--jobs` of them run side by side, each taking
the next file of the queue when one ends (so the cores stay busy to the end, where two fixed
halves of the list finish far apart). A finished file leaves, in ``--results``:

* ``<stem>.log``: its pytest output; ``<stem>.xml``: its JUnit report;
* ``<stem>.conformance.json`` and ``<stem>.corpus.json``: the reports of
  ``CHATIDS_CONFORMANCE_REPORT`` and ``CHATIDS_CORPUS_REPORT``, where the file writes them;
* ``<stem>.run.json``: the record of the run: exit status, seconds, tests, failures, errors,
  skips, and the identity of what ran.

With ``--resume``, a file whose record shows it passed without a skip, under the same identity,
is not run again. The identity is the git tree of every path the tests exercise (``src``,
``python``, ``tests``, ``fuzz``, ``third_party``, ``examples``, the build and requirement files)
plus the mode (the ``CHATIDS_CONFORMANCE`` and ``HYPOTHESIS_PROFILE`` settings and the pytest
arguments). A commit that changes only documentation keeps it; any change to the code or the
tests makes every file run again. A tree with uncommitted changes in those paths has no
identity, and its records are never resumed from. (The extension itself is built from the tree
by `make develop`, which `make conformance-full` runs first.) A file cut off mid-run leaves no
record, so it runs again.

Usage: python scripts/run_files.py --results DIR [--jobs N] [--resume] FILE [FILE ...]
[-- PYTEST_ARGS]

Files are taken in the order given: list the longest first. The exit status is non-zero if any
file failed; `scripts/check_no_skips.py DIR/*.xml` then reads every report. The processes share
one compiled encoder cache (``CHATIDS_CACHE_DIR``), as in `scripts/run_pytest.py`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parent.parent

# What the tests exercise: a change here changes the identity of a run.
CODE_PATHS = [
    "src",
    "python",
    "tests",
    "fuzz",
    "third_party",
    "examples",
    "build.rs",
    "Cargo.toml",
    "Cargo.lock",
    "pyproject.toml",
    "requirements-dev.txt",
    "requirements-bench.txt",
]
MODE_VARS = ["CHATIDS_CONFORMANCE", "HYPOTHESIS_PROFILE"]


def identity(root: Path, pytest_args: list[str]) -> str | None:
    """The identity of a run in `root` (see the module's text); None with uncommitted changes."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout

    paths = [p for p in CODE_PATHS if (root / p).exists()]
    if git("status", "--porcelain", "--", *paths).strip():
        return None
    trees = git("rev-parse", *[f"HEAD:{p}" for p in paths]).split()
    mode = {v: os.environ.get(v, "") for v in MODE_VARS}
    text = json.dumps({"trees": dict(zip(paths, trees)), "mode": mode, "pytest_args": pytest_args}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def junit_counts(path: Path) -> dict[str, int]:
    """Tests, failures, errors and skips in a JUnit report (all zero if it is missing or torn)."""
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    try:
        cases = list(ET.parse(path).getroot().iter("testcase"))
    except (OSError, ET.ParseError):
        return counts
    counts["tests"] = len(cases)
    for case in cases:
        for kind, key in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
            counts[key] += len(case.findall(kind))
    return counts


def passed(record: dict[str, Any]) -> bool:
    """A record of a file that passed in full: exit 0, tests run, none failed or skipped."""
    return (
        record.get("exit") == 0
        and record.get("tests", 0) > 0
        and not record.get("failures")
        and not record.get("errors")
        and not record.get("skipped")
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--root", type=Path, default=REPO, help="the repository (default: this one)")
    parser.add_argument("files", nargs="+")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    pytest_args = argv[cut + 1 :]
    root = args.root.resolve()
    results = args.results.resolve()
    results.mkdir(parents=True, exist_ok=True)
    missing = [f for f in args.files if not (root / f).is_file()]
    if missing or args.jobs < 1:
        raise SystemExit(f"run_files: needs existing test files and --jobs >= 1 (missing: {missing})")
    ident = identity(root, pytest_args)
    print(f"run_files: identity {ident or 'none (uncommitted changes: nothing is resumed)'}", flush=True)

    queue: list[str] = []
    summary: dict[str, str] = {}
    for f in args.files:
        stem = Path(f).stem
        record_path = results / f"{stem}.run.json"
        record = json.loads(record_path.read_text()) if record_path.is_file() else {}
        if args.resume and ident is not None and record.get("identity") == ident and passed(record):
            summary[f] = f"resumed: passed {record['tests']} tests in {record['seconds']:.0f} s on {record['finished']}"
            continue
        record_path.unlink(missing_ok=True)
        queue.append(f)

    env = dict(os.environ)
    cache = None
    if "CHATIDS_CACHE_DIR" not in env:
        cache = tempfile.mkdtemp(prefix="chatids-test-cache-")
        env["CHATIDS_CACHE_DIR"] = cache
    base = [sys.executable, "-m", "pytest", "-q", "--durations=15", "-p", "no:cacheprovider"]
    # Stopped by a signal (`kill`, `timeout`) as by Ctrl-C: the `finally` below stops the files
    # still running, which leave no record.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    running: dict[str, tuple[subprocess.Popen[bytes], IO[str], float]] = {}
    status = 0
    started = time.perf_counter()
    try:
        while queue or running:
            while queue and len(running) < args.jobs:
                f = queue.pop(0)
                stem = Path(f).stem
                file_env = dict(env)
                file_env["CHATIDS_CONFORMANCE_REPORT"] = str(results / f"{stem}.conformance.json")
                file_env["CHATIDS_CORPUS_REPORT"] = str(results / f"{stem}.corpus.json")
                handle = (results / f"{stem}.log").open("w")
                cmd = base + [f, f"--junitxml={results / f'{stem}.xml'}"] + pytest_args
                print(f"run_files: {time.strftime('%H:%M:%S')} start {f}", flush=True)
                proc = subprocess.Popen(cmd, cwd=root, env=file_env, stdout=handle, stderr=subprocess.STDOUT)
                running[f] = (proc, handle, time.perf_counter())
            for f, (proc, handle, t0) in list(running.items()):
                if proc.poll() is None:
                    continue
                handle.close()
                del running[f]
                stem = Path(f).stem
                record = {
                    "file": f,
                    "identity": ident,
                    "exit": proc.returncode,
                    "seconds": time.perf_counter() - t0,
                    "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
                    **junit_counts(results / f"{stem}.xml"),
                }
                (results / f"{stem}.run.json").write_text(json.dumps(record, indent=1))
                word = "passed" if passed(record) else f"exit {proc.returncode}"
                summary[f] = (
                    f"{word}: {record['tests']} tests, {record['failures']} failed, {record['errors']} errors, "
                    f"{record['skipped']} skipped, in {record['seconds']:.0f} s"
                )
                print(f"run_files: {time.strftime('%H:%M:%S')} {f}: {summary[f]}", flush=True)
                status = status or proc.returncode
            time.sleep(0.5)
    finally:  # interrupted: no pytest process outlives this one, and none leaves a record
        for proc, _, _ in running.values():
            proc.kill()
            proc.wait()
        if cache is not None:
            shutil.rmtree(cache, ignore_errors=True)
    print(f"\nrun_files: {len(args.files)} files, {time.perf_counter() - started:.0f} s, exit {status}")
    for f in args.files:
        print(f"  {f}: {summary.get(f, 'not run')}")
    return status


if __name__ == "__main__":
    sys.exit(main())
