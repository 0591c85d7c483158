"""Preference rows for DPO: TRL's tokenization against chatids' ``encode_preferences``, side by side.

TRL's ``DPOTrainer`` (0.29 and later) tokenizes a conversational preference row with three
``apply_chat_template`` calls (the prompt with the generation prompt, ``prompt + chosen``,
``prompt + rejected``) and splits them at their common prefix. This script times that, written
out as TRL writes it, against ``Encoder.encode_preference`` per row and ``encode_preferences`` on
all rows (``.to_trl()`` included, i.e. Python lists as TRL's ``map`` would store them). The
columns of both are compared first; any difference exits 1. Runs are interleaved and the table
gives medians of ``--repeats`` runs and the ratios.

Rows: shared-corpus conversations cut before their last assistant message (``chosen``), with the
last assistant message of the next row as ``rejected``; plain user/assistant/system text only.

Run: ``make bench-pairs`` (``python benches/pairs.py``; CHATIDS_MODELS_DIR and CHATIDS_DATA_DIR set).
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
from typing import Any

os.environ["TOKENIZERS_PARALLELISM"] = "true"
# Every round encodes the same conversations again; the native core's cache of whole texts would
# answer all of them from the second round on, which no training pass does. Off (its own
# measurement is benches/text_peers.py's warm pass).
os.environ.setdefault("CHATIDS_TEXT_CACHE_MB", "0")

MODELS = ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "llama-2-7b-chat", "gemma-3-it"]
FILES = ["dpo_en_chosen.jsonl", "hh_rlhf_harmless_base_test.jsonl", "kto_mix_en_300.jsonl"]


def rows(n: int) -> list[tuple[list[dict], dict, dict]]:
    base = Path(os.environ["CHATIDS_DATA_DIR"]) / "conversations"
    convs = []
    for f in sorted(glob.glob(str(base / "*.jsonl"))):
        if os.path.basename(f) in FILES:
            convs += [json.loads(line)["messages"] for line in open(f, encoding="utf-8")]
    plain = [
        m for m in convs
        if all(isinstance(x.get("content"), str) and x["role"] in ("user", "assistant") for x in m)
        and m[-1]["role"] == "assistant" and len(m) >= 2
    ]
    random.Random(2024).shuffle(plain)
    plain = plain[:n]
    return [(m[:-1], m[-1], plain[(i + 1) % len(plain)][-1]) for i, m in enumerate(plain)]


def trl_row(tok: Any, prompt: list[dict], chosen: dict, rejected: dict, kw: dict) -> dict[str, list[int]]:
    """TRL 1.16's ``DPOTrainer._prepare_dataset.tokenize_fn`` on a conversational row."""
    p = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True, **kw)["input_ids"]
    c = tok.apply_chat_template(prompt + [chosen], tokenize=True, return_dict=True, **kw)["input_ids"]
    r = tok.apply_chat_template(prompt + [rejected], tokenize=True, return_dict=True, **kw)["input_ids"]

    n = min(len(os.path.commonprefix([p, c])), len(os.path.commonprefix([p, r])))
    return {"prompt_ids": p[:n], "chosen_ids": c[n:], "rejected_ids": r[n:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--rows", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from transformers import AutoTokenizer

    import chatids

    data = rows(args.rows)
    prompts, chosen, rejected = [d[0] for d in data], [d[1] for d in data], [d[2] for d in data]
    print(f"{len(data)} preference rows, medians of {args.repeats} interleaved runs, {os.cpu_count()} cores\n")
    print("| checkpoint | TRL (3 apply_chat_template per row) | chatids per row | ratio | chatids batch | ratio |")
    print("|---|---|---|---|---|---|")
    for name in args.models:
        path = os.path.join(os.environ["CHATIDS_MODELS_DIR"], name)
        tok = AutoTokenizer.from_pretrained(path)
        enc = chatids.Encoder.from_pretrained(path)
        kw = {"date_string": "26 Jul 2024"} if name.startswith("llama-3") else {}
        usable = []
        for i, d in enumerate(data):  # rows the template renders (Gemma and Llama 2 refuse a system turn here or there)
            try:
                trl_row(tok, *d, kw)
                usable.append(i)
            except Exception:  # noqa: BLE001 - the template raises; TRL would too
                continue
        P, C, R = [prompts[i] for i in usable], [chosen[i] for i in usable], [rejected[i] for i in usable]
        want = [trl_row(tok, p, c, r, kw) for p, c, r in zip(P, C, R)]
        got = enc.encode_preferences(P, C, R, sanitize_control_tokens=False, **kw).to_trl()
        if [dict(zip(got, vals)) for vals in zip(*got.values())] != want:
            print(f"{name}: the columns differ from TRL's", file=sys.stderr)
            return 1

        def run_trl() -> None:
            for p, c, r in zip(P, C, R):
                trl_row(tok, p, c, r, kw)

        def run_single() -> None:
            for p, c, r in zip(P, C, R):
                enc.encode_preference(p, c, r, False, **kw).to_trl()

        def run_batch() -> None:
            enc.encode_preferences(P, C, R, False, **kw).to_trl()

        times: dict[str, list[float]] = {"trl": [], "single": [], "batch": []}
        for _ in range(args.repeats):
            for key, fn in (("trl", run_trl), ("single", run_single), ("batch", run_batch)):
                t0 = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - t0)
        m = {k: statistics.median(v) for k, v in times.items()}
        n = len(P)
        print(f"| {name} ({n} rows) | {1e3 * m['trl']:.0f} ms | {1e3 * m['single']:.0f} ms | {m['trl'] / m['single']:.1f}x "
              f"| {1e3 * m['batch']:.0f} ms | {m['trl'] / m['batch']:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
