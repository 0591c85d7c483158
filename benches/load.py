"""Loading: ``Encoder.from_pretrained``, the compiled cache, pickled size and unpickling, per
shared checkpoint, beside the ``tokenizers`` package loading the same ``tokenizer.json``.

Every load runs in a fresh interpreter (the page cache is warm after the first read, as for a
worker that starts next to others), ``--repeats`` times per checkpoint; the table gives medians in
seconds. Per checkpoint:

* ``tokenizers``: ``tokenizers.Tokenizer.from_file`` of its ``tokenizer.json``;
* ``from_pretrained``: without a cache;
* ``cache write``: the first ``from_pretrained(cache_dir=...)`` into an empty folder (loads the
  checkpoint and writes the compiled state);
* ``cache read``: the next ones (read the compiled state);
* ``pickle``: the size of ``pickle.dumps(encoder)`` and the time of ``pickle.loads`` of it
  (chatids pickles encoders by value: nothing is read from disk when unpickling).

``--baseline DIR`` runs the same script with another build first on ``sys.path`` (a checkout with
its built ``python/``) in alternation, and prints both side by side: before and after a change.
A build without the cache leaves its cache columns empty.

Run: ``make bench-load`` (``python benches/load.py``; CHATIDS_MODELS_DIR set).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

#: One process's measurements, printed as JSON (times in seconds, size in bytes).
ONE_RUN = """
import json, pickle, sys, time
path, cache, what = sys.argv[1], sys.argv[2], sys.argv[3]
out = {}
if what == "tokenizers":
    import tokenizers
    t = time.perf_counter(); tokenizers.Tokenizer.from_file(path + "/tokenizer.json")
    out["tokenizers"] = time.perf_counter() - t
else:
    import chatids
    if what == "load":
        t = time.perf_counter(); enc = chatids.Encoder.from_pretrained(path)
        out["load"] = time.perf_counter() - t
        state = pickle.dumps(enc); out["size"] = len(state)
        t = time.perf_counter(); pickle.loads(state); out["unpickle"] = time.perf_counter() - t
    else:
        try:
            t = time.perf_counter(); enc = chatids.Encoder.from_pretrained(path, cache_dir=cache)
            out[what] = time.perf_counter() - t
            out[what + "_use"] = enc.cache_use
        except TypeError:
            pass
print(json.dumps(out))
"""


def run(python_path: str, path: Path, cache: str, what: str) -> dict:
    """One measurement in a fresh interpreter with `python_path` first on sys.path."""
    env = {**os.environ, "PYTHONPATH": python_path}
    env.pop("CHATIDS_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", ONE_RUN, str(path), cache, what], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def measure(builds: list[str], path: Path, repeats: int) -> list[dict[str, float]]:
    """Medians of `repeats` runs of each measurement per build (the python/ folders in `builds`,
    alternating) for one checkpoint."""
    runs: list[dict[str, list[float]]] = [{} for _ in builds]
    for _ in range(repeats):
        for python_path, into in zip(builds, runs):
            with tempfile.TemporaryDirectory() as cache:
                results = [run(python_path, path, cache, w) for w in ("tokenizers", "load", "write", "read")]
            for r in results:
                for k, v in r.items():
                    if isinstance(v, (int, float)):
                        into.setdefault(k, []).append(float(v))
            used = results[3].get("read_use")
            if used is not None and not str(used).startswith("read from"):
                raise SystemExit(f"{path.name}: the second load did not read the cache: {used}")
    return [{k: statistics.median(v) for k, v in r.items()} for r in runs]


def cell(m: dict[str, float], key: str) -> str:
    if key not in m:
        return "—"
    return f"{m[key] / 2**20:.1f} MiB" if key == "size" else f"{m[key]:.3f} s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=None, help="default: every folder of CHATIDS_MODELS_DIR with a tokenizer.json")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline", metavar="DIR", help="the python/ folder of another build: print it beside this one")
    args = ap.parse_args()
    here = str(Path(__file__).resolve().parent.parent / "python")
    base = Path(os.environ["CHATIDS_MODELS_DIR"])
    names = args.models or sorted(p.name for p in base.iterdir() if (p / "tokenizer.json").is_file())
    print(f"each load in a fresh process, medians of {args.repeats}, {os.cpu_count()} cores\n")
    cols = [("tokenizers", "`tokenizers`"), ("load", "`from_pretrained`"), ("write", "cache write"),
            ("read", "cache read"), ("size", "pickled size"), ("unpickle", "`pickle.loads`")]
    if args.baseline:
        shown = [c for c in cols if c[0] != "tokenizers"]
        print("| checkpoint | " + " | ".join(f"{t} before | after" for _, t in shown) + " |")
        print("|---|" + "---|---|" * len(shown))
    else:
        print("| checkpoint | " + " | ".join(t for _, t in cols) + " |")
        print("|---|" + "---|" * len(cols))
    for name in names:
        if args.baseline:
            before, after = measure([args.baseline, here], base / name, args.repeats)
            row = [f"{cell(before, k)} | {cell(after, k)}" for k, _ in cols if k != "tokenizers"]
        else:
            [after] = measure([here], base / name, args.repeats)
            row = [cell(after, k) for k, _ in cols]
        print(f"| {name} | " + " | ".join(row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
