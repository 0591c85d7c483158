"""Turn a pytest-benchmark JSON file into the ratio tables of BENCHMARKS.md.

Usage: python benches/report.py bench.json [more.json ...] [--update BENCHMARKS.md]

Within each group, every benchmark's median is divided by chatids' median: "2.10x" means the
other side takes 2.10 times as long as chatids.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
from collections import defaultdict

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"

LABELS = {
    "test_single_chatids": "chatids `Encoder.encode`",
    "test_single_transformers": "`apply_chat_template(tokenize=True)`",
    "test_single_transformers_sanitized": "`apply_chat_template(tokenize=True, sanitize_control_tokens=True)`",
    "test_batch_chatids": "chatids `Encoder.encode_batch`",
    "test_batch_transformers": "`apply_chat_template(list, tokenize=True)`",
    "test_batch_tokenizers_encode_batch_fast": "`Tokenizer.encode_batch_fast` (pre-rendered strings)",
    "test_masked_batch_chatids": "chatids `encode_batch(return_assistant_mask=True)`",
    "test_masked_batch_chatids_sanitized": "chatids `encode_batch(return_assistant_mask=True)`, sanitize on (default)",
    "test_masked_batch_transformers": "`apply_chat_template(list, return_assistant_tokens_mask=True)`, `{% generation %}` template",
    "test_pack_chatids": "`chatids.pack` (first-fit decreasing, Rust)",
    "test_pack_numpy_ffd": "first-fit decreasing in numpy/Python (same output)",
    "test_to_padded_chatids": "`Batch.to_padded`",
    "test_to_padded_python_loop": "numpy, one row at a time",
    "test_cli_chatids": "`chatids encode FILE --out ...` (end to end, subprocess)",
}

#: extra_info keys shown under a group's table, with their labels.
NOTES = {
    "efficiency": "packing efficiency",
    "rows": "rows",
    "seq_len": "seq_len",
    "conversations_per_s": "conversations/s",
    "tokens_per_s": "tokens/s",
    "peak_rss_mb": "peak RSS (MiB)",
    "input_mb": "input (MiB)",
    "accepted": "conversations written",
}


def tables(data: dict) -> str:
    groups: dict[str, list[dict]] = defaultdict(list)
    for b in data["benchmarks"]:
        groups[b["group"]].append(b)
    lines = []
    machine = data.get("machine_info", {})
    lines.append(
        f"Run {data.get('datetime', '?')[:19]} on {machine.get('cpu', {}).get('count', '?')} cores, "
        f"Python {machine.get('python_version', platform.python_version())}; medians of "
        f"{min(b['stats']['rounds'] for b in data['benchmarks'])}+ rounds."
    )
    for group in sorted(groups):
        rows = groups[group]
        ours = next(b for b in rows if b["name"].split("[")[0].endswith("chatids"))
        base = ours["stats"]["median"]
        info = ours.get("extra_info", {})
        what = f"{info.get('conversations', '?')} conversations"
        if "tokens" in info:
            what += f", {info['tokens']:,} tokens"
        lines += ["", f"**{group}** ({what})", "", "| implementation | median | per conversation | chatids is faster by |", "|---|---|---|---|"]
        for b in sorted(rows, key=lambda b: b["stats"]["median"]):
            name = b["name"].split("[")[0]
            med = b["stats"]["median"]
            per = med / max(1, b.get("extra_info", {}).get("conversations", 1))
            ratio = "—" if b is ours else f"{med / base:.2f}x"
            tok_rate = ""
            if "tokens" in b.get("extra_info", {}):
                tok_rate = f" ({b['extra_info']['tokens'] / med / 1e6:.2f} M tokens/s)"
            lines.append(f"| {LABELS.get(name, name)} | {med * 1e3:.1f} ms{tok_rate} | {per * 1e6:.0f} µs | {ratio} |")
        notes = [f"{label} {info[key]:,}" for key, label in NOTES.items() if key in info]
        if notes:
            lines += ["", "chatids: " + ", ".join(notes) + "."]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("json_files", nargs="+", help="pytest-benchmark JSON files (their benchmarks are merged)")
    p.add_argument("--update", help="replace the block between the bench markers in this Markdown file")
    args = p.parse_args()
    data: dict = {}
    for path in args.json_files:
        with open(path) as f:
            part = json.load(f)
        if not data:
            data = part
        else:
            data["benchmarks"] += part["benchmarks"]
    text = tables(data)
    if args.update:
        with open(args.update) as f:
            doc = f.read()
        doc = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), BEGIN + "\n" + text + "\n" + END, doc, flags=re.S)
        with open(args.update, "w") as f:
            f.write(doc)
    print(text)


if __name__ == "__main__":
    main()
