"""Turn a pytest-benchmark JSON file into the ratio tables of BENCHMARKS.md.

Usage: python benches/report.py bench.json [more.json ...] [--update BENCHMARKS.md]
                                [--chart PATH | --no-chart]

Within each group, every benchmark's median is divided by chatids' median: "2.10x" means the
other side takes 2.10 times as long as chatids.

The ``serving-*`` groups (benches/test_bench_serving.py) make their own section, written between
the serving markers: the agent loop per model (each way's median for the whole loop, against
the chatids session and against one full encode of the final conversation) and a latency table
(p50/p99 of single calls, from ``extra_info``). ``--update`` replaces only the blocks whose
benchmarks the JSON files hold, so ``make bench-serving`` leaves the other tables alone.

The report also draws the throughput chart (:func:`chart`, matplotlib with the Agg backend): one
panel per kind of group (``batch-``, ``single-``, ``masks-``, ``bpe-``, ``bpe-cold-``), a row per
checkpoint (and its format), a bar per implementation, in tokens/s where the group records its
token count and conversations (or texts)/s otherwise. It goes to ``--chart PATH``, by default
``throughput.png`` beside the first JSON file (``target/results/throughput.png`` for
``make bench``); ``--no-chart`` skips it. Without matplotlib the default chart is skipped with a
note on stderr; an explicit ``--chart`` then fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
from collections import defaultdict
from typing import Optional, Sequence

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
    "test_parse_chatids": "chatids `parse_completion` (decode and read)",
    "test_parse_chatids_stream": "chatids `stream_parser`, one `feed` per id from Python",
    "test_parse_transformers_decode": "`tokenizer.decode(ids)` alone (no parsing)",
    "test_parse_harmony_chatids": "chatids `parse_completion` (decode and read)",
    "test_parse_harmony_chatids_stream": "chatids `stream_parser`, one `feed` per id from Python",
    "test_parse_harmony_reference": "openai-harmony `parse_messages_from_completion_tokens`",
    "test_parse_harmony_reference_stream": "openai-harmony `StreamableParser`, one `process` per id",
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
    jinja = jinja_path(groups, day)
    if jinja:
        out["jinja-path"] = jinja
    return out


#: Issue 23's target: the Jinja path at least this fraction of the native path's speed.
JINJA_GOAL = 0.8


def jinja_path(groups: dict[str, list[dict]], day: str) -> list[str]:
    """The Jinja path against the native one on the same checkpoint: each ``<kind>-<model>:jinja``
    group whose ``<kind>-<model>`` group ran too, chatids' median on each."""
    rows = []
    for group in sorted(groups):
        if not group.endswith(":jinja") or group[: -len(":jinja")] not in groups:
            continue

        def ours(g: str) -> float:
            return next(b for b in groups[g] if b["name"].split("[")[0].endswith("chatids"))["stats"]["median"]

        native, jinja = ours(group[: -len(":jinja")]), ours(group)
        speed = native / jinja
        verdict = "met" if speed >= JINJA_GOAL else "not met"
        rows.append(f"| {group[: -len(':jinja')]} | {native * 1e3:.1f} ms | {jinja * 1e3:.1f} ms | {speed:.2f}x ({verdict}) |")
    if not rows:
        return []
    return [
        "",
        f"**jinja-path** (chatids on the checkpoint's template forced onto the Jinja path against its native format, same run; run {day})",
        "",
        f"| group | native | Jinja path | Jinja speed / native (goal ≥ {JINJA_GOAL}x) |",
        "|---|---|---|---|",
        *rows,
    ]


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
    ("test_loop_chatids_session_parsed", "(a'') the whole agent step: `append_completion(ids)` parsing the model's ids + `append` + `generation_prompt()`"),
    ("test_loop_chatids_reencode", "(b) chatids `encode(all messages, add_generation_prompt=True, tools=...)` per step (`tools` where the loop has them)"),
    ("test_loop_transformers", "(c) `apply_chat_template(all messages, tools=..., add_generation_prompt=True, tokenize=True)` per step (`tools` where the loop has them)"),
    ("test_loop_chatids_full_encode", "(d) yardstick: one chatids `encode` of the final conversation"),
]
#: The goal (issue 23): the whole session loop within this factor of one full encode.
LOOP_GOAL = 1.2


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


# --- the throughput chart -------------------------------------------------------------------

#: Kinds of groups the chart draws, in panel order: (group prefix, panel title). A group belongs
#: to the longest prefix that matches; ``bpe-long-`` (a few pathological inputs, no rate worth
#: plotting), ``cli-``, ``training-`` and ``serving-`` groups are not drawn.
CHART_FAMILIES = [
    ("batch-", "encode_batch: conversations encoded as one batch"),
    ("single-", "encode: one conversation per call"),
    ("masks-", "encode_batch with loss masks"),
    ("bpe-", "text encoding alone, warm caches (1 thread)"),
    ("bpe-cold-", "text encoding alone, fresh encoder (1 thread)"),
]
_NOT_CHARTED = ("bpe-long-", "cli-", "training-", SERVING)

#: Short legend labels (the tables' labels are Markdown and long).
CHART_LABELS = {
    "test_single_chatids": "chatids Encoder.encode",
    "test_single_transformers": "transformers apply_chat_template",
    "test_single_transformers_sanitized": "transformers apply_chat_template, sanitize_control_tokens=True",
    "test_batch_chatids": "chatids Encoder.encode_batch",
    "test_batch_chatids_tokenizers_crate": "chatids on the tokenizers crate (CHATIDS_TEXT_ENCODER=tokenizers)",
    "test_batch_tokenizers_encode_batch_fast": "tokenizers encode_batch_fast (pre-rendered strings)",
    "test_batch_transformers": "transformers apply_chat_template(list)",
    "test_masked_batch_chatids": "chatids, masks, sanitize off",
    "test_masked_batch_chatids_sanitized": "chatids, masks, sanitize on (default)",
    "test_masked_batch_transformers": "transformers return_assistant_tokens_mask ({% generation %} template)",
    "test_bpe_chatids": "chatids native BPE core",
    "test_bpe_tokenizers_crate": "tokenizers crate",
    "test_bpe_tiktoken": "tiktoken encode_ordinary",
    "test_bpe_cold_chatids": "chatids native BPE core",
    "test_bpe_cold_tokenizers_crate": "tokenizers crate",
}

def _family(group: str) -> Optional[str]:
    """The chart panel of a group (its prefix), or None if the chart leaves it out."""
    if group.startswith(_NOT_CHARTED):
        return None
    matches = [prefix for prefix, _ in CHART_FAMILIES if group.startswith(prefix)]
    return max(matches, key=len) if matches else None


def _model_label(model: str, family: str, fmt: Optional[str]) -> str:
    """A row's label: the checkpoint directory and the format that served it (the benchmark's
    ``extra_info["format"]``); a ``:jinja`` suffix in the group name is a forced format."""
    directory, _, forced = model.partition(":")
    if family.startswith("bpe"):
        return directory  # the text encoder alone: no chat format involved
    if forced:
        return f"{directory}\n({fmt or forced}, forced)"
    return f"{directory}\n({fmt})" if fmt else directory


def formats(data: dict) -> dict[str, str]:
    """Per checkpoint (group suffix), the format the benchmarks recorded in ``extra_info``."""
    out: dict[str, str] = {}
    for b in data["benchmarks"]:
        family, fmt = _family(b["group"]), b.get("extra_info", {}).get("format")
        if family is not None and fmt:
            out[b["group"][len(family):]] = fmt
    return out


def throughput(data: dict) -> dict[str, dict[str, dict[str, tuple[float, str]]]]:
    """Per chart panel, per checkpoint (group suffix), per implementation (test name): the rate
    and its unit, from the medians. ``tokens`` in a benchmark's ``extra_info`` gives tokens/s,
    otherwise its ``conversations`` (or ``unit``) count gives items/s."""
    out: dict[str, dict[str, dict[str, tuple[float, str]]]] = defaultdict(lambda: defaultdict(dict))
    for b in data["benchmarks"]:
        family = _family(b["group"])
        median = b["stats"]["median"]
        if family is None or not median:
            continue
        info = b.get("extra_info", {})
        if "tokens" in info:
            rate, unit = info["tokens"] / median, "tokens/s"
        elif "conversations" in info:
            rate, unit = info["conversations"] / median, f"{info.get('unit', 'conversations')}/s"
        else:
            continue
        out[family][b["group"][len(family):]][b["name"].split("[")[0]] = (rate, unit)
    return out


def _chart_label(name: str) -> str:
    return CHART_LABELS.get(name) or LABELS.get(name, name).replace("`", "")


def _fmt_rate(rate: float, unit: str) -> str:
    if unit == "tokens/s":
        return f"{rate / 1e6:.2f} M"
    return f"{rate:,.0f}"


def _colour_index(name: str) -> int:
    """tab10 colour of an implementation: chatids blue (a chatids variant orange), the tokenizers
    crate green, transformers red (sanitizing purple), tiktoken brown."""
    if name.endswith("_chatids"):
        return 0
    if "chatids" in name:
        return 1
    if "sanitized" in name:
        return 4
    if "transformers" in name:
        return 3
    if "tokenizers" in name or "crate" in name:
        return 2
    return 5 if "tiktoken" in name else 7


def chart(data: dict, path: str, families: Optional[Sequence[str]] = None) -> str:
    """Draw the throughput chart of ``data`` (pytest-benchmark JSON) into the PNG ``path``.

    One panel per kind of group (``families``: prefixes of :data:`CHART_FAMILIES`; default:
    every kind the data holds), one row per checkpoint, one bar per implementation (higher is
    faster), the rate written at the end of each bar. A panel whose rates span more than 50x
    uses a log scale. Raises ``ValueError`` when ``data`` holds no group the chart can draw.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = throughput(data)
    format_of = formats(data)
    # What each panel measured ("2000 conversations"), shown in its title when uniform.
    counts_of: dict[str, set[str]] = defaultdict(set)
    for b in data["benchmarks"]:
        family, info = _family(b["group"]), b.get("extra_info", {})
        if family is not None and "conversations" in info:
            counts_of[family].add(f"{info['conversations']:,} {info.get('unit', 'conversations')} per round")
    wanted = [prefix for prefix, _ in CHART_FAMILIES if prefix in rates and (families is None or prefix in families)]
    if not wanted:
        raise ValueError("no benchmark group to chart (batch-, single-, masks-, bpe- or bpe-cold- groups with medians)")
    titles = dict(CHART_FAMILIES)
    # chatids first, then the references; one colour per kind of implementation in every panel.
    names = sorted(
        {name for prefix in wanted for rows in rates[prefix].values() for name in rows},
        key=lambda n: (not n.endswith("_chatids"), "chatids" not in n, n),
    )
    palette = plt.get_cmap("tab10")
    colours = {name: palette(_colour_index(name)) for name in names}

    heights = []
    for prefix in wanted:
        models = rates[prefix]
        bars = sum(len(rows) for rows in models.values())
        heights.append(1.0 + 0.22 * bars + 0.12 * len(models))
    fig, axes = plt.subplots(len(wanted), 1, figsize=(11, sum(heights) + 0.8), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, prefix in zip(axes[:, 0], wanted):
        models = rates[prefix]
        order = sorted(models)
        unit = next(iter(next(iter(models.values())).values()))[1]
        impls = [n for n in names if any(n in models[m] for m in order)]
        slot = 0.8 / max(1, len(impls))
        all_rates = [r for m in order for r, _ in models[m].values()]
        log = max(all_rates) / max(min(all_rates), 1e-12) > 50
        for k, name in enumerate(impls):
            ys, xs = [], []
            for i, m in enumerate(order):
                if name in models[m]:
                    ys.append(i - 0.4 + slot * (k + 0.5))
                    xs.append(models[m][name][0])
            scaled = [x / 1e6 for x in xs] if unit == "tokens/s" else xs
            ax.barh(ys, scaled, height=slot * 0.9, color=colours[name], label=_chart_label(name))
            for y, x, raw in zip(ys, scaled, xs):
                ax.text(x, y, " " + _fmt_rate(raw, unit), va="center", ha="left", fontsize=7)
        ax.set_yticks(range(len(order)))
        ax.set_yticklabels([_model_label(m, prefix, format_of.get(m)) for m in order], fontsize=8)
        ax.invert_yaxis()
        if log:
            ax.set_xscale("log")
        ax.set_xlabel(("M tokens/s" if unit == "tokens/s" else unit) + (" (log scale)" if log else "") + ", higher is faster")
        counts = set(counts_of.get(prefix, ()))
        title = titles[prefix] + (f" ({counts.pop()})" if len(counts) == 1 else "")
        ax.set_title(title, fontsize=10, loc="left")
        ax.grid(axis="x", alpha=0.3)
        ax.margins(x=0.18)
        ax.legend(fontsize=7, loc="lower right", framealpha=0.9)
    machine = data.get("machine_info", {})
    fig.suptitle(
        f"chatids throughput (medians); run {data.get('datetime', '?')[:10]} on "
        f"{machine.get('cpu', {}).get('count', '?')} cores, Python {machine.get('python_version', '?')}",
        fontsize=11,
    )
    fig.tight_layout()
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("json_files", nargs="+", help="pytest-benchmark JSON files (their benchmarks are merged)")
    p.add_argument("--update", help="replace the block between the bench markers in this Markdown file")
    p.add_argument("--chart", metavar="PATH", help="the throughput chart (PNG); default: throughput.png beside the first JSON file")
    p.add_argument("--no-chart", action="store_true", help="do not draw the throughput chart")
    p.add_argument("--chart-groups", metavar="PREFIXES",
                   help="comma-separated group kinds to draw, e.g. batch-,single- (default: all that the data holds)")
    args = p.parse_args(argv)
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
    if not args.no_chart:
        _write_chart(data, args)


def _write_chart(data: dict, args: argparse.Namespace) -> None:
    path = args.chart or os.path.join(os.path.dirname(os.path.abspath(args.json_files[0])), "throughput.png")
    families = None if not args.chart_groups else [g.strip() for g in args.chart_groups.split(",") if g.strip()]
    if families is not None:
        families = [g if g.endswith("-") else g + "-" for g in families]
    if not any(_family(b["group"]) for b in data["benchmarks"]):
        if args.chart:
            sys.exit("report.py: --chart: the JSON files hold no group the chart draws (batch-, single-, masks-, bpe-)")
        return  # e.g. make bench-serving: nothing to draw
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if args.chart:
            sys.exit("report.py: --chart needs matplotlib (pip install matplotlib)")
        print("report.py: matplotlib is not installed; no throughput chart (pip install matplotlib)", file=sys.stderr)
        return
    try:
        chart(data, path, families)
    except ValueError as e:
        sys.exit(f"report.py: --chart: {e}")
    print(f"report.py: wrote the throughput chart {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
