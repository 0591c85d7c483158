"""Scaling: ``encode_batch`` on 1 and 2 threads, and the memory a batch takes per token.

For each checkpoint, the shared corpus (every conversation of every file whose messages are plain
text) is encoded by ``Encoder.encode_batch`` with ``num_threads=1`` and ``num_threads=2``,
alternating, ``--repeats`` times; the table gives the median throughput (M tokens per wall
second), the speed-up of 2 threads over 1 and its efficiency (speed-up / 2).

Memory: a child process loads the encoder (from a compiled cache, so that loading leaves no
peak above the batch's) and the conversations, reads its RSS, calls ``encode_batch`` (2
threads), and reads its peak RSS (``VmHWM``); then it drops the batch, resets the peak
(``/proc/self/clear_refs``) and does it again. The growth divided by the batch's tokens is the
batch's peak memory per token; the ids themselves take 4 B per token (``uint32``), the rest is
what chatids needs on top. The first batch of a process also pays for what each thread builds
once and keeps (its word caches, up to about 12 MB per thread, and the allocator's arenas);
the second is what every later batch costs.

Run: ``make bench-scaling`` (``python benches/scaling.py``; CHATIDS_MODELS_DIR and
CHATIDS_DATA_DIR set).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODELS = ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "gemma-3-it", "llama-2-7b-chat"]

# Every run encodes the same conversations again; the native core's cache of whole texts would
# answer them from the second run on, and its memory is not the batch's. Off.
os.environ.setdefault("CHATIDS_TEXT_CACHE_MB", "0")

CHILD = """
import json, sys
sys.path.insert(0, {benches!r})
from scaling import conversations, status_kib
import chatids
enc = chatids.Encoder.from_pretrained({path!r}, cache_dir={cache!r})
convs = conversations()
growth = []
for _ in range(2):
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM
    before = status_kib("VmRSS")
    batch = enc.encode_batch(convs, num_threads=2, on_error="collect")
    growth.append(status_kib("VmHWM") - before)
    tokens = int(len(batch.ids))
    del batch
print(json.dumps({{"tokens": tokens, "growth_kib": growth, "cache": enc.cache_use}}))
"""


def status_kib(field: str) -> int:
    """A memory figure of this process from /proc/self/status, in KiB: ``VmRSS`` (now) or
    ``VmHWM`` (the peak; unlike ``getrusage``, it is not inherited from the parent across exec)."""
    for line in open("/proc/self/status", encoding="ascii"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def conversations() -> list[list[dict]]:
    """The corpus conversations whose messages all have plain-text content (a conversation the
    template raises on is collected as an error and has no tokens)."""
    out = []
    base = Path(os.environ["CHATIDS_DATA_DIR"]) / "conversations"
    for f in sorted(glob.glob(str(base / "*.jsonl"))):
        for line in open(f, encoding="utf-8"):
            messages = json.loads(line)["messages"]
            if all(isinstance(m.get("content"), str) and set(m) <= {"role", "content"} for m in messages):
                out.append(messages)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    import tempfile

    import chatids

    print(f"encode_batch of the corpus, medians of {args.repeats} alternating runs, {os.cpu_count()} cores\n")
    print("| checkpoint | conversations | tokens | 1 thread | 2 threads | speed-up | efficiency "
          "| peak memory per token (ids: 4 B), first batch | later batches |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models:
        path = Path(os.environ["CHATIDS_MODELS_DIR"]) / name
        cache = tempfile.mkdtemp()
        # Written here; the child reads it, so its load leaves no peak above the batch's.
        enc = chatids.Encoder.from_pretrained(path, cache_dir=cache)
        convs = conversations()
        tokens = len(enc.encode_batch(convs, on_error="collect").ids)
        times: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(args.repeats):
            for n in (1, 2):
                t = time.perf_counter()
                enc.encode_batch(convs, num_threads=n, on_error="collect")
                times[n].append(time.perf_counter() - t)
        one, two = (tokens / statistics.median(times[n]) / 1e6 for n in (1, 2))
        child = CHILD.format(benches=str(Path(__file__).resolve().parent), path=str(path), cache=cache)
        mem = json.loads(subprocess.run([sys.executable, "-c", child], check=True, capture_output=True,
                                        text=True).stdout.strip().splitlines()[-1])
        if not str(mem["cache"]).startswith("read from"):
            raise SystemExit(f"{name}: the child did not read the compiled cache: {mem['cache']}")
        first, later = (kib * 1024 / mem["tokens"] for kib in mem["growth_kib"])
        print(f"| {name} | {len(convs):,} | {tokens:,} | {one:.1f} M/s | {two:.1f} M/s | {two / one:.2f}x | "
              f"{two / one / 2:.0%} | {first:.1f} B ({first - 4:.1f} B beyond the ids) "
              f"| {later:.1f} B ({later - 4:.1f} B beyond) |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
