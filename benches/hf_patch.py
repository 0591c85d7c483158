"""Patched against unpatched ``apply_chat_template`` (``chatids.hf.patch``), side by side.

For each checkpoint: two tokenizers from its folder, one patched; the same shared-corpus
conversations through both, one call per conversation ("single") and one call for all of them
("batched"), with ``add_generation_prompt=True, return_dict=False``. Runs are interleaved (patched,
unpatched, patched, ...) and the table gives medians of ``--repeats`` runs and their ratio. The ids
of both are compared first; any difference exits 1.

Run: ``make bench-hf`` (``python benches/hf_patch.py``; CHATIDS_MODELS_DIR and CHATIDS_DATA_DIR set).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

os.environ["TOKENIZERS_PARALLELISM"] = "true"
# Every round encodes the same conversations again; the native core's cache of whole texts would
# answer all of them from the second round on, which no training pass does. Off (its own
# measurement is benches/text_peers.py's warm pass).
os.environ.setdefault("CHATIDS_TEXT_CACHE_MB", "0")

MODELS = ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "llama-2-7b-chat", "gemma-3-it", "mistral-nemo-instruct-2407", "gpt-oss-120b"]


def conversations(n: int) -> list[list[dict]]:
    base = Path(os.environ["CHATIDS_DATA_DIR"]) / "conversations"
    rows = []
    for f in sorted(glob.glob(str(base / "*.jsonl"))):
        rows += [json.loads(line) for line in open(f, encoding="utf-8")]
    plain = [
        r["messages"] for r in rows
        if not r.get("tools") and all(isinstance(m.get("content"), str) and m["role"] in ("user", "assistant") for m in r["messages"])
        and r["messages"][-1]["role"] == "user"
    ]
    random.Random(2024).shuffle(plain)
    return plain[:n]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--conversations", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from transformers import AutoTokenizer

    import chatids.hf

    convs = conversations(args.conversations)
    kw = dict(add_generation_prompt=True, return_dict=False)
    print(f"{len(convs)} conversations (user/assistant, ending with a user turn), medians of {args.repeats} interleaved runs\n")
    print("| checkpoint | single: unpatched | single: patched | ratio | batched: unpatched | batched: patched | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models:
        path = os.path.join(os.environ["CHATIDS_MODELS_DIR"], name)
        ref = AutoTokenizer.from_pretrained(path)
        tok = chatids.hf.patch(AutoTokenizer.from_pretrained(path))
        extra = {"date_string": "26 Jul 2024"} if "llama-3" in name else {}
        chatids.hf.reset_stats()
        want = [ref.apply_chat_template(c, **kw, **extra) for c in convs]
        got = [tok.apply_chat_template(c, **kw, **extra) for c in convs]
        if got != want or tok.apply_chat_template(convs, **kw, **extra) != want:
            print(f"{name}: the patched ids differ", file=sys.stderr)
            return 1
        stats = chatids.hf.stats()
        times: dict[str, list[float]] = {k: [] for k in ("s_ref", "s_tok", "b_ref", "b_tok")}
        for _ in range(args.repeats):
            for key, t in (("s_tok", tok), ("s_ref", ref)):
                start = time.perf_counter()
                for c in convs:
                    t.apply_chat_template(c, **kw, **extra)
                times[key].append(time.perf_counter() - start)
            for key, t in (("b_tok", tok), ("b_ref", ref)):
                start = time.perf_counter()
                t.apply_chat_template(convs, **kw, **extra)
                times[key].append(time.perf_counter() - start)
        m = {k: statistics.median(v) for k, v in times.items()}
        per = 1e6 / len(convs)
        print(
            f"| {name} | {m['s_ref'] * per:.0f} µs | {m['s_tok'] * per:.0f} µs | {m['s_ref'] / m['s_tok']:.1f}x "
            f"| {m['b_ref'] * 1e3:.0f} ms | {m['b_tok'] * 1e3:.0f} ms | {m['b_ref'] / m['b_tok']:.1f}x |"
        )
        if stats["fallback"]:
            print(f"  ({name}: {stats['fallback']} of {stats['served'] + stats['fallback']} calls fell back: {stats['fallback_reasons']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
