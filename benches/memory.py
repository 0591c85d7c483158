"""Memory: peak RSS of encoding a 100,000-conversation file, and RSS across 1M calls (leaks).

``python benches/memory.py [--calls N] [--conversations N] [--json out.json]`` (``make
bench-memory``; defaults 1,000,000 calls and 100,000 conversations, about 3 minutes on 2 cores):

1. **Peak RSS.** The shared corpus tiled to ``--conversations`` lines of JSONL is encoded by
   ``chatids encode`` (streaming, Parquet out) and by a process that loads the whole file and
   calls ``encode_batch`` once; each runs as a child and reports its own peak RSS
   (``os.wait4``), beside the input size and the RSS of a child that only loads the file.
2. **Leaks.** One process makes ``--calls`` calls over a mix of entry points (native and
   generic ``encode``, ``encode_detailed``, ``render``, ``lint``, a small ``encode_batch``, a
   ``Session`` with appends, and calls that raise ``ChatTemplateError``), sampling RSS
   (``/proc/self/statm``). After a warm-up of the first 10% of the calls, RSS must stay flat
   within 5%: exit status 1 otherwise.

Needs ``CHATIDS_MODELS_DIR`` and ``CHATIDS_DATA_DIR``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = Path(os.environ.get("CHATIDS_MODELS_DIR", Path(__file__).resolve().parents[2] / "shared" / "models"))
DATA = Path(os.environ.get("CHATIDS_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
MODEL = MODELS / "llama-3.1-8b-instruct"
GENERIC_MODEL = MODELS / "gpt-oss-120b"
PAGE = os.sysconf("SC_PAGE_SIZE")


def corpus() -> list[dict]:
    """Every corpus row (messages and tools)."""
    rows = []
    for path in sorted(glob.glob(str(DATA / "conversations" / "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            rows += [json.loads(line) for line in f]
    if not rows:
        sys.exit(f"no conversations under {DATA}/conversations (set CHATIDS_DATA_DIR)")
    return rows


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def run_child(args: list[str]) -> tuple[float, int, str]:
    """(seconds, peak RSS bytes, stdout) of one child process."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        err = proc.stderr.read().decode() if proc.stderr else ""
        out.seek(0)
        stdout = out.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{args[:4]} failed:\n{err[-2000:]}")
    return time.perf_counter() - start, usage.ru_maxrss * 1024, stdout


_BATCH_CHILD = """
import json, sys, chatids
rows = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
if sys.argv[2] == "load-only":
    print(len(rows)); sys.exit(0)
enc = chatids.Encoder.from_pretrained(sys.argv[2])
batch = enc.encode_batch([r["messages"] for r in rows], on_error="collect")
print(len(rows), int(batch.lengths.sum()), len(batch.errors))
"""


def peak_rss(n: int) -> dict:
    rows = [r for r in corpus() if not r.get("tools")]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"conversations-{n}.jsonl"
        with open(path, "w", encoding="utf-8") as f:
            for i in range(n):
                f.write(json.dumps({"messages": rows[i % len(rows)]["messages"]}, ensure_ascii=False) + "\n")
        size = path.stat().st_size
        cli_s, cli_rss, cli_out = run_child([sys.executable, "-m", "chatids", "encode", str(path), "--model", str(MODEL),
                                             "--out", str(Path(d) / "out.parquet"), "--no-progress"])
        _, load_rss, _ = run_child([sys.executable, "-c", _BATCH_CHILD, str(path), "load-only"])
        batch_s, batch_rss, batch_out = run_child([sys.executable, "-c", _BATCH_CHILD, str(path), str(MODEL)])
    summary = next((line for line in cli_out.splitlines() if " tokens in " in line), cli_out.strip()[-200:])
    return {
        "conversations": n,
        "input_mb": size / 2**20,
        "cli_stream_peak_rss_mb": cli_rss / 2**20,
        "cli_seconds": cli_s,
        "cli_summary": summary,
        "python_load_only_peak_rss_mb": load_rss / 2**20,
        "encode_batch_peak_rss_mb": batch_rss / 2**20,
        "encode_batch_seconds": batch_s,
        "encode_batch_out": batch_out.strip(),
    }


def leak_check(calls: int) -> dict:
    import datetime as dt

    import chatids

    enc = chatids.Encoder.from_pretrained(MODEL)
    generic = chatids.Encoder.from_pretrained(GENERIC_MODEL)
    now = dt.datetime(2025, 1, 30)
    rows = corpus()
    plain = [r["messages"] for r in rows if not r.get("tools")][:200]
    tooled = [(r["messages"], r["tools"]) for r in rows if r.get("tools")][:50]
    tooled = [(m, t) for m, t in tooled if _encodes(generic, m, tools=t, now=now)][:20]
    bad = [[{"role": "user", "content": 5}], [{"content": "no role"}], "not a list", [{"role": "user", "content": "a\ud800"}]]

    def session(i: int) -> None:
        m = plain[i % len(plain)]
        s = enc.session(m[:1])
        s.append(m[1:])
        s.generation_prompt()

    def error(i: int) -> None:
        try:
            enc.encode(bad[i % len(bad)])
        except chatids.ChatTemplateError:
            return
        raise AssertionError("malformed input was accepted")

    ops = [
        lambda i: enc.encode(plain[i % len(plain)], True),
        lambda i: enc.encode(plain[i % len(plain)], True),
        lambda i: enc.encode(plain[i % len(plain)], False, False),
        lambda i: enc.encode_detailed(plain[i % len(plain)], True),
        lambda i: enc.encode(plain[i % len(plain)], return_assistant_mask=True),
        lambda i: enc.render(plain[i % len(plain)], True),
        lambda i: enc.lint(plain[i % len(plain)], True),
        lambda i: enc.encode_batch(plain[i % 192:i % 192 + 8], num_threads=1),
        session,
        error,
        lambda i: generic.encode(tooled[i % len(tooled)][0], tools=tooled[i % len(tooled)][1], now=now),
    ]
    warmup = calls // 10
    samples: list[tuple[int, int]] = []
    start = time.perf_counter()
    for i in range(calls):
        ops[i % len(ops)](i)
        if i % 10_000 == 0 or i == calls - 1:
            samples.append((i, rss()))
    elapsed = time.perf_counter() - start
    after_warmup = next(r for c, r in samples if c >= warmup)
    later = [r for c, r in samples if c >= warmup]
    growth = (max(later) - after_warmup) / after_warmup
    return {
        "calls": calls,
        "seconds": elapsed,
        "rss_start_mb": samples[0][1] / 2**20,
        "rss_after_warmup_mb": after_warmup / 2**20,
        "rss_max_after_warmup_mb": max(later) / 2**20,
        "rss_end_mb": samples[-1][1] / 2**20,
        "growth_after_warmup": growth,
        "flat_within_5_percent": growth <= 0.05,
    }


def _encodes(enc, messages, **kw) -> bool:
    import chatids

    try:
        enc.encode(messages, **kw)
        return True
    except chatids.ChatTemplateError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--conversations", type=int, default=100_000)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    result = {"peak_rss": peak_rss(args.conversations), "leak": leak_check(args.calls)}
    p, leak = result["peak_rss"], result["leak"]
    print(f"peak RSS, {p['conversations']:,} conversations ({p['input_mb']:.0f} MB of JSONL):")
    print(f"  chatids encode (streaming to Parquet): {p['cli_stream_peak_rss_mb']:.0f} MB peak, {p['cli_seconds']:.1f} s  [{p['cli_summary']}]")
    print(f"  json.loads of the file only:           {p['python_load_only_peak_rss_mb']:.0f} MB peak")
    print(f"  the same + one encode_batch:           {p['encode_batch_peak_rss_mb']:.0f} MB peak, {p['encode_batch_seconds']:.1f} s  [{p['encode_batch_out']}]")
    print(f"leak check, {leak['calls']:,} calls in {leak['seconds']:.0f} s: RSS {leak['rss_start_mb']:.1f} MB at start, "
          f"{leak['rss_after_warmup_mb']:.1f} MB after warm-up, at most {leak['rss_max_after_warmup_mb']:.1f} MB after, "
          f"{leak['rss_end_mb']:.1f} MB at the end: growth {100 * leak['growth_after_warmup']:+.2f}% "
          f"({'flat' if leak['flat_within_5_percent'] else 'NOT flat'} within 5%)")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0 if leak["flat_within_5_percent"] else 1


if __name__ == "__main__":
    sys.exit(main())
