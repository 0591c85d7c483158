"""Turn a pytest-benchmark JSON file into the ratio tables of BENCHMARKS.md.

Usage: python benches/report.py bench.json [more.json ...] [--update BENCHMARKS.md]

Within each group, every benchmark's median is divided by chatids' median: "2.10x" means the
other side takes 2.10 times as long as chatids.

The ``serving-*`` groups (benches/test_bench_serving.py) make their own section, written between
the serving markers: the agent loop per model (each way's median for the whole loop, against
the chatids session and against one full encode of the final conversation) and a latency table
(p50/p99 of single calls, from ``extra_info``). ``--update`` replaces only the blocks whose
benchmarks the JSON files hold, so ``make bench-serving`` leaves the other tables alone.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
from collections import defaultdict

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
SERVING_BEGIN, SERVING_END = "<!-- serving:begin -->", "<!-- serving:end -->"
SERVING = "serving-"

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
    "test_batch_chatids_tokenizers_crate": "chatids `Encoder.encode_batch` on the tokenizers crate (`CHATIDS_TEXT_ENCODER=tokenizers`)",
    "test_bpe_chatids": "chatids native BPE core (1 thread)",
    "test_bpe_tokenizers_crate": "tokenizers crate, same pipeline (1 thread)",
    "test_bpe_tiktoken": "tiktoken `encode_ordinary` per text (1 thread)",
    "test_bpe_cold_chatids": "chatids native BPE core, fresh encoder (1 thread)",
    "test_bpe_cold_tokenizers_crate": "tokenizers crate, fresh encoder (1 thread)",
    "test_bpe_long_chatids": "chatids native BPE core",
    "test_bpe_long_tokenizers_crate": "tokenizers crate",
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


def _run_line(data: dict, benchmarks: list[dict]) -> str:
    machine = data.get("machine_info", {})
    return (
        f"Run {data.get('datetime', '?')[:19]} on {machine.get('cpu', {}).get('count', '?')} cores, "
        f"Python {machine.get('python_version', platform.python_version())}; medians of "
        f"{min(b['stats']['rounds'] for b in benchmarks)}+ rounds."
    )


def tables(data: dict) -> str:
    return "\n".join([_run_line(data, [b for b in data["benchmarks"] if not b["group"].startswith(SERVING)])] + [
        "\n".join(lines) for _, lines in sorted(group_tables(data).items())
    ])


def group_tables(data: dict) -> dict[str, list[str]]:
    """Each group's table (its lines, starting with a blank line and the group's header)."""
    groups: dict[str, list[dict]] = defaultdict(list)
    benchmarks = [b for b in data["benchmarks"] if not b["group"].startswith(SERVING)]
    for b in benchmarks:
        groups[b["group"]].append(b)
    day = data.get("datetime", "?")[:10]
    out: dict[str, list[str]] = {}
    for group in sorted(groups):
        lines: list[str] = []
        rows = groups[group]
        ours = next(b for b in rows if b["name"].split("[")[0].endswith("chatids"))
        base = ours["stats"]["median"]
        info = ours.get("extra_info", {})
        unit = info.get("unit", "conversations")
        what = f"{info.get('conversations', '?')} {unit}"
        if "tokens" in info:
            what += f", {info['tokens']:,} tokens"
        lines += ["", f"**{group}** ({what}; run {day})", "", f"| implementation | median | per {unit.rstrip('s')} | chatids is faster by |", "|---|---|---|---|"]
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
        out[group] = lines
    return out


def merged_block(old_block: str, data: dict) -> str:
    """The bench block with the groups of ``data`` replaced or added and the others kept (so a
    partial run such as ``make bench-bpe`` updates only its own tables)."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in old_block.split("\n"):
        m = re.match(r"\*\*([^*]+)\*\* \(", line)
        if m:
            current = m.group(1)
            sections[current] = ["", line]
        elif current is not None:
            sections[current].append(line)
    for lines in sections.values():
        while lines and lines[-1] == "":
            lines.pop()
    sections.update(group_tables(data))
    head = "Ratios are of medians within one group (one run); each group's header gives the day of its run."
    return "\n".join([head] + ["\n".join(lines) for _, lines in sorted(sections.items())])


#: The agent-loop benchmarks, in table order: (test name, label).
LOOP = [
    ("test_loop_chatids_session", "(a) chatids session: `append` + `generation_prompt()` per step"),
    ("test_loop_chatids_session_completion", "(a') chatids session, assistant turns as ids: `append_completion` + `append` + `generation_prompt()`"),
    ("test_loop_chatids_reencode", "(b) chatids `encode(all messages, add_generation_prompt=True, tools=...)` per step (`tools` where the loop has them)"),
    ("test_loop_transformers", "(c) `apply_chat_template(all messages, tools=..., add_generation_prompt=True, tokenize=True)` per step (`tools` where the loop has them)"),
    ("test_loop_chatids_full_encode", "(d) yardstick: one chatids `encode` of the final conversation"),
]
#: The goal: the whole session loop within this factor of one full encode.
LOOP_GOAL = 1.5


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def serving(data: dict) -> str:
    """The "Serving" section: agent loop per model, then the latency table."""
    benchmarks = [b for b in data["benchmarks"] if b["group"].startswith(SERVING)]
    by_group: dict[str, dict[str, dict]] = defaultdict(dict)
    for b in benchmarks:
        by_group[b["group"]][b["name"].split("[")[0]] = b
    lines = [_run_line(data, [b for b in benchmarks if b["group"].startswith(SERVING + "loop-")] or benchmarks)]
    for group in sorted(g for g in by_group if g.startswith(SERVING + "loop-")):
        rows = by_group[group]
        model = group[len(SERVING + "loop-"):]
        any_info = next(iter(rows.values())).get("extra_info", {})
        session = rows.get("test_loop_chatids_session")
        full = rows.get("test_loop_chatids_full_encode")
        lines += [
            "",
            f"**Agent loop, {model}** ({any_info.get('format', '?')}; {any_info.get('steps', '?')} steps, "
            f"{any_info.get('prompts', '?')} prompts; final prompt {any_info.get('tokens', 0):,} tokens, "
            + (f"tool results {any_info.get('tool_result_chars', 0):,} characters)" if not model.endswith("-chat")
               else f"no tools, assistant answers {any_info.get('tool_result_chars', 0):,} characters)"),
            "",
            "| way | median, whole loop | per prompt | time / (d) | time / (a) |",
            "|---|---|---|---|---|",
        ]
        for name, label in LOOP:
            b = rows.get(name)
            if b is None:
                lines.append(f"| {label} | not measured (the benchmark failed or did not run) | | | |")
                continue
            med = b["stats"]["median"]
            prompts = max(1, b.get("extra_info", {}).get("prompts", 1))
            vs_full = f"{med / full['stats']['median']:.2f}x" if full else "?"
            vs_session = "—" if b is session else (f"{med / session['stats']['median']:.2f}x" if session else "?")
            lines.append(f"| {label} | {_ms(med)} | {med / prompts * 1e3:.2f} ms | {vs_full} | {vs_session} |")
        lines += ["", "Each way's median divided by (d)'s and by (a)'s."]
        if session and full:
            ratio = session["stats"]["median"] / full["stats"]["median"]
            paired = session.get("extra_info", {}).get("paired_ratio_to_full_encode")
            shown = paired if paired is not None else ratio
            verdict = "met" if shown <= LOOP_GOAL else "not met"
            how = f"paired {paired:.2f}x (back-to-back runs), ratio of medians {ratio:.2f}x" if paired is not None else f"{ratio:.2f}x"
            lines.append(f"Goal, (a) within {LOOP_GOAL}x of (d): {how}; {verdict}.")
        completion = rows.get("test_loop_chatids_session_completion", {}).get("extra_info", {})
        if "paired_ratio_to_session" in completion:
            lines.append(
                f"(a') / (a), paired: {completion['paired_ratio_to_session']:.2f}x "
                f"((a') / (d), paired: {completion.get('paired_ratio_to_full_encode', float('nan')):.2f}x)."
            )
    latency = sorted(g for g in by_group if g.startswith(SERVING + "latency-"))
    if latency:
        lines += [
            "",
            "**Latency of one prompt** (`add_generation_prompt=True`; each call timed on its own)",
            "",
            "| model | chat | tokens | calls | chatids p50 | chatids p99 | transformers p50 | transformers p99 | p50 ratio | p99 ratio |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for group in sorted(latency, key=lambda g: (g.rpartition("-")[0], g.endswith("-long"))):
            rows = by_group[group]
            model, _, size = group[len(SERVING + "latency-"):].rpartition("-")
            ours = rows.get("test_latency_chatids", {}).get("extra_info", {})
            ref = rows.get("test_latency_transformers", {}).get("extra_info", {})

            def us(info: dict, key: str) -> str:
                return f"{info[key]:,.0f} µs" if key in info else "?"

            def ratio(key: str) -> str:
                return f"{ref[key] / ours[key]:.2f}x" if key in ours and key in ref and ours[key] else "?"

            lines.append(
                f"| {model} | {size} | {ours.get('tokens', ref.get('tokens', '?')):,} | {ours.get('calls', '?')} | "
                f"{us(ours, 'p50_us')} | {us(ours, 'p99_us')} | {us(ref, 'p50_us')} | {us(ref, 'p99_us')} | "
                f"{ratio('p50_us')} | {ratio('p99_us')} |"
            )
        lines += ["", "Ratios: transformers' time divided by chatids' (above 1: chatids is faster)."]
    return "\n".join(lines)


def _replace(doc: str, begin: str, end: str, text: str) -> str:
    block = begin + "\n" + text + "\n" + end
    if begin in doc:
        return re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, doc, flags=re.S)
    return doc.rstrip("\n") + "\n\n" + block + "\n"


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
    has_serving = any(b["group"].startswith(SERVING) for b in data["benchmarks"])
    has_other = any(not b["group"].startswith(SERVING) for b in data["benchmarks"])
    text = tables(data) if has_other else ""
    serving_text = serving(data) if has_serving else ""
    if args.update:
        with open(args.update) as f:
            doc = f.read()
        if has_other:
            old = re.search(re.escape(BEGIN) + "(.*?)" + re.escape(END), doc, flags=re.S)
            doc = _replace(doc, BEGIN, END, merged_block(old.group(1) if old else "", data))
        if has_serving:
            doc = _replace(doc, SERVING_BEGIN, SERVING_END, serving_text)
        with open(args.update, "w") as f:
            f.write(doc)
    print("\n\n".join(t for t in (text, "## Serving\n\n" + serving_text if serving_text else "") if t))


if __name__ == "__main__":
    main()
