"""Two builds of chatids side by side: the native core's cold pass over the corpus contents.

A change to the text encoder is measured against the build before it, in one run: each round
starts one process per build, in alternating order (A then B, then B then A), and each process
takes, per checkpoint, the best of ``--passes`` cold passes (``_encode_texts`` over every message
content of the shared corpus, on an encoder freshly loaded for the pass, one thread, CPU time).
The best of a few passes drops a pass slowed by the rest of the machine; the alternation spreads
a slow stretch over both builds. The report gives each build's median over the rounds and their
ratio, in M tokens per CPU second.

The builds are package folders: a copy of ``python/chatids`` (with its compiled ``_core``) made
before the change, and, by default, the installed package. For example::

    cp -r python/chatids /tmp/before/          # before the change
    # ... change, then `maturin develop --release`
    python benches/text_ab.py --before /tmp/before --rounds 8 --models llama-2-7b-chat gemma-3-it

CHATIDS_MODELS_DIR and CHATIDS_DATA_DIR must be set.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

BENCHES = Path(__file__).resolve().parent
MODELS = ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "llama-2-7b-chat", "gemma-3-it"]

CHILD = r"""
import os, sys, time
from pathlib import Path
sys.path.insert(0, {benches!r})
from text_peers import corpus_texts
import chatids
texts = corpus_texts()
for model in {models!r}:
    best = 0.0
    for _ in range({passes}):
        core = chatids.Encoder.from_pretrained(Path(os.environ["CHATIDS_MODELS_DIR"]) / model)._core
        core._encode_texts(["warm up"], "native")
        start = time.process_time()
        n = core._encode_texts(texts, "native")
        best = max(best, n / (time.process_time() - start) / 1e6)
    print(model, best, chatids.__file__)
"""


def run(package: str | None, models: list[str], passes: int) -> dict[str, float]:
    """One process of a build: the best cold pass per checkpoint, in M tokens per CPU second."""
    env = dict(os.environ)
    if package is not None:
        env["PYTHONPATH"] = package
    child = CHILD.format(benches=str(BENCHES), models=models, passes=passes)
    out = subprocess.run(
        [sys.executable, "-c", child], env=env, capture_output=True, text=True, check=True
    ).stdout
    speeds = {}
    for line in out.splitlines():
        model, speed, where = line.split()
        if package is not None and not where.startswith(str(Path(package).resolve())):
            raise SystemExit(f"the build in {package} was not the one imported ({where})")
        speeds[model] = float(speed)
    return speeds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="folder holding the build before (chatids/)")
    ap.add_argument("--after", default=None, help="folder holding the build after (default: installed)")
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for r in range(args.rounds):
        order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
        for build in order:
            package = args.before if build == "before" else args.after
            runs[build].append(run(package, args.models, args.passes))
    print(f"cold pass, M tokens per CPU second: medians of {args.rounds} rounds "
          f"(best of {args.passes} passes each)\n")
    print("| checkpoint | before | after | after / before |")
    print("|---|---|---|---|")
    for m in args.models:
        before = statistics.median(r[m] for r in runs["before"])
        after = statistics.median(r[m] for r in runs["after"])
        print(f"| {m} | {before:.2f} | {after:.2f} | {after / before:.3f} |")
    for build, rows in runs.items():
        print(f"\n{build}: " + "; ".join(
            f"{m} " + ", ".join(f"{r[m]:.2f}" for r in rows) for m in args.models))


if __name__ == "__main__":
    main()
