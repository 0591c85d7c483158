"""Loading: ``Encoder.from_pretrained``, its pickled size and unpickling, per shared checkpoint,
beside the ``tokenizers`` package loading the same ``tokenizer.json``.

Each checkpoint is loaded ``--repeats`` times in this process (the page cache is warm after the
first read, as for a worker that starts next to others); the table gives medians in seconds.
``pickle`` is ``pickle.dumps(encoder)`` (chatids pickles encoders by value: nothing is read from
disk when unpickling), ``unpickle`` is ``pickle.loads`` of it.

``--baseline DIR`` compares ``from_pretrained`` with another build side by side instead: each load
runs in a fresh process, alternating between the package in ``DIR`` (a checkout with its built
``python/``) and this one, and the table gives both medians and their ratio.

Run: ``make bench-load`` (``python benches/load.py``; CHATIDS_MODELS_DIR set).
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import subprocess
import sys
import time
from pathlib import Path

ONE_LOAD = (
    "import time, chatids; t = time.perf_counter(); chatids.Encoder.from_pretrained({path!r}); "
    "print(time.perf_counter() - t)"
)


def load_in_process(path: Path, python_path: str) -> float:
    """One ``from_pretrained`` in a fresh interpreter with ``python_path`` first on sys.path."""
    env = {**os.environ, "PYTHONPATH": python_path}
    out = subprocess.run([sys.executable, "-c", ONE_LOAD.format(path=str(path))], env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def compare(names: list[str], base: Path, baseline: str, repeats: int) -> None:
    here = str(Path(__file__).resolve().parent.parent / "python")
    print(f"from_pretrained in fresh processes, alternating, medians of {repeats}\n")
    print("| checkpoint | baseline | this build | ratio |")
    print("|---|---|---|---|")
    for name in names:
        old, new = [], []
        for _ in range(repeats):
            old.append(load_in_process(base / name, baseline))
            new.append(load_in_process(base / name, here))
        a, b = statistics.median(old), statistics.median(new)
        print(f"| {name} | {a:.2f} s | {b:.2f} s | {a / b:.2f}x |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=None, help="default: every folder of CHATIDS_MODELS_DIR with a tokenizer.json")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline", metavar="DIR", help="the python/ folder of another build: compare from_pretrained with it")
    args = ap.parse_args()
    import tokenizers

    import chatids

    base = Path(os.environ["CHATIDS_MODELS_DIR"])
    names = args.models or sorted(p.name for p in base.iterdir() if (p / "tokenizer.json").is_file())
    if args.baseline:
        compare(names, base, args.baseline, args.repeats)
        return 0
    print(f"medians of {args.repeats} loads, {os.cpu_count()} cores\n")
    print("| checkpoint | `tokenizers` load | `from_pretrained` | pickled size | `pickle.loads` |")
    print("|---|---|---|---|---|")
    for name in names:
        path = base / name
        t_tok, t_load, t_unpickle = [], [], []
        size = 0
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
            t1 = time.perf_counter()
            enc = chatids.Encoder.from_pretrained(path)
            t2 = time.perf_counter()
            state = pickle.dumps(enc)
            size = len(state)
            t3 = time.perf_counter()
            pickle.loads(state)
            t4 = time.perf_counter()
            t_tok.append(t1 - t0)
            t_load.append(t2 - t1)
            t_unpickle.append(t4 - t3)
        med = statistics.median
        print(f"| {name} | {med(t_tok):.2f} s | {med(t_load):.2f} s | {size / 2**20:.1f} MiB | {med(t_unpickle):.2f} s |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
