"""Command line: ``chatids`` (or ``python -m chatids``) ``render|encode|verify|explain|lint``.

Input is a JSONL file of conversations: one ``{"messages": [...], "tools": [...]}`` object per
line (``tools`` optional), or a bare list of messages.

* ``render`` prints each prompt exactly, special tokens and whitespace visible (``repr`` style).
* ``encode`` turns the conversations into token ids, prints a summary and, with ``--out``, writes
  ids and offsets to an ``.npz`` file. Conversations the format refuses are counted and listed
  with their reason; nothing is dropped silently.
* ``verify`` compares chatids with transformers' ``apply_chat_template`` (render, and ids with
  ``sanitize_control_tokens`` off and on) on every conversation and prints a summary.
* ``explain`` says which path serves the checkpoint and why.
* ``lint`` reports the silent failures each conversation would meet.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Optional, Sequence

import numpy as np

from . import Batch, ChatTemplateError, Encoder


def _read_records(path: str) -> list[tuple[list[dict[str, Any]], Optional[list[Any]]]]:
    """(messages, tools) per line."""
    records = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{line_no}: not JSON: {e}")
            if isinstance(row, dict) and "messages" in row:
                records.append((row["messages"], row.get("tools") or None))
            else:
                records.append((row, None))
    return records


def _read_conversations(path: str) -> list[list[dict[str, Any]]]:
    return [messages for messages, _ in _read_records(path)]


def _load(args: argparse.Namespace) -> Encoder:
    return Encoder.from_pretrained(
        args.model,
        format=args.format,
        reference=args.reference,
        chat_template=args.chat_template,
        allow_download=args.allow_download,
    )


def _repr_lines(text: str) -> str:
    """The prompt as ``repr`` strings, one per line of the prompt, so every character shows."""
    lines = text.splitlines(keepends=True) or [""]
    return "\n".join(repr(line) for line in lines)


def _visible(text: str) -> str:
    """The prompt with whitespace made visible, one line per source line."""
    return text.replace("\t", "→").replace(" \n", "·\n").replace("\n", "↵\n")


def _template_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if args.date_string is not None:
        kwargs["date_string"] = args.date_string
    for item in args.template_arg or []:
        key, _, value = item.partition("=")
        kwargs[key] = {"true": True, "false": False}.get(value.lower(), value)
    return kwargs


def _indices(spec: str) -> list[int]:
    return [int(x) for x in spec.split(",") if x.strip()] if spec else []


def _encode_grouped(enc: Encoder, convs: list, tools: list, accepted: list[int], threads: Optional[int], options: dict, kwargs: dict) -> Batch:
    """encode_batch over the accepted conversations, one call per distinct tools list, in order."""
    groups: dict[str, list[int]] = {}
    for i in accepted:
        groups.setdefault(json.dumps(tools[i]), []).append(i)
    per_conversation: dict[int, np.ndarray] = {}
    for key, members in groups.items():
        extra = {} if tools[members[0]] is None else {"tools": tools[members[0]]}
        batch = enc.encode_batch([convs[i] for i in members], num_threads=threads, **options, **kwargs, **extra)
        per_conversation.update({i: batch[k] for k, i in enumerate(members)})
    parts = [per_conversation[i] for i in accepted]
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(p) for p in parts])
    ids = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)
    return Batch(ids.astype(np.uint32), offsets)


def cmd_encode(args: argparse.Namespace) -> int:
    enc = _load(args)
    records = _read_records(args.input)
    convs = [messages for messages, _ in records]
    tools = [t for _, t in records]
    kwargs = _template_kwargs(args)
    options = dict(add_generation_prompt=args.add_generation_prompt, sanitize_control_tokens=not args.no_sanitize)
    print(enc.explain())
    accepted, refused = [], []
    for i, conv in enumerate(convs):
        extra = {} if tools[i] is None else {"tools": tools[i]}
        try:
            enc.render(conv, add_generation_prompt=args.add_generation_prompt, **kwargs, **extra)
            accepted.append(i)
        except ChatTemplateError as e:
            refused.append((i, str(e)))
    start = time.perf_counter()
    batch = _encode_grouped(enc, convs, tools, accepted, args.threads, options, kwargs)
    elapsed = time.perf_counter() - start
    n_tokens = len(batch.ids)
    print(
        f"{len(accepted)} conversations -> {n_tokens} tokens in {elapsed * 1e3:.1f} ms "
        f"({n_tokens / max(elapsed, 1e-9) / 1e6:.2f} M tokens/s); refused: {len(refused)}"
    )
    for i, reason in refused:
        print(f"  refused conversation {i}: {reason}")
    control = {i for _, i in enc.control_tokens}
    for index in _indices(args.show):
        if index not in accepted:
            continue
        k = accepted.index(index)
        conv = convs[index]
        extra = {} if tools[index] is None else {"tools": tools[index]}
        detailed = enc.encode_detailed(conv, **options, **kwargs, **extra)
        from_content = sum(1 for t, c in zip(detailed.ids.tolist(), detailed.from_content.tolist()) if c and t in control)
        from_template = sum(1 for t in detailed.ids.tolist() if t in control) - from_content
        print(f"\n--- conversation {index}: {len(batch[k])} tokens; control tokens: {from_template} written by the "
              f"template, {from_content} from content ---")
        print(_visible(enc.render(conv, add_generation_prompt=args.add_generation_prompt, **kwargs, **extra)))
        print(f"ids: {batch[k].tolist()}")
    if args.out:
        np.savez(args.out, ids=batch.ids, offsets=batch.offsets, conversation_index=np.array(accepted, dtype=np.int64))
        print(f"\nwrote {args.out} (ids, offsets, conversation_index)")
    return 1 if refused and args.strict else 0


def cmd_render(args: argparse.Namespace) -> int:
    enc = _load(args)
    for i, (conv, tools) in enumerate(_read_records(args.input)):
        kwargs = _template_kwargs(args)
        if tools is not None:
            kwargs["tools"] = tools
        try:
            text = enc.render(conv, add_generation_prompt=args.add_generation_prompt, **kwargs)
        except ChatTemplateError as e:
            print(f"--- conversation {i}: refused: {e}")
            continue
        print(f"--- conversation {i} ---")
        print(text if args.raw else _repr_lines(text))
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    enc = _load(args)
    print(enc.explain())
    print(f"stop token ids: {enc.stop_token_ids}")
    return 0


def cmd_lint(args: argparse.Namespace) -> int:
    enc = _load(args)
    found = 0
    for i, conv in enumerate(_read_conversations(args.input)):
        try:
            findings = enc.lint(
                conv, args.add_generation_prompt, for_generation=args.for_generation, **_template_kwargs(args)
            )
        except ChatTemplateError as e:
            print(f"conversation {i}: invalid: {e}")
            found += 1
            continue
        for finding in findings:
            print(f"conversation {i}: {finding}")
        found += len(findings)
    print(f"{found} findings")
    return 1 if found and args.strict else 0


def cmd_verify(args: argparse.Namespace) -> int:
    from ._verify import verify_file

    enc = _load(args)
    print(enc.explain())
    summary = verify_file(
        enc,
        args.model,
        args.input,
        chat_template=args.chat_template,
        template_kwargs=_template_kwargs(args),
        limit=args.limit,
    )
    print(summary.report())
    return 1 if summary.mismatches else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="chatids", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    commands = (
        ("render", "print the prompts exactly (repr style)"),
        ("encode", "encode conversations to token ids"),
        ("verify", "compare chatids with transformers' apply_chat_template"),
        ("explain", "which path serves the checkpoint, and why"),
        ("lint", "report the silent failures of each conversation"),
    )
    for name, help_text in commands:
        s = sub.add_parser(name, help=help_text)
        if name != "explain":
            s.add_argument("input", help="JSONL file, one conversation per line")
        s.add_argument("--model", required=True, help="checkpoint directory, GGUF file or Hugging Face repo id")
        s.add_argument("--format", help='force a native format, or "jinja" for the generic path')
        s.add_argument("--chat-template", help="a named template of the checkpoint, or template text")
        s.add_argument(
            "--reference",
            choices=["transformers", "mistral-common"],
            help="which reference to reproduce (default: mistral-common where the checkpoint ships its files)",
        )
        s.add_argument("--allow-download", action="store_true", help="let a repo id download (default: cache only)")
        if name == "explain":
            continue
        s.add_argument("--add-generation-prompt", action="store_true")
        s.add_argument("--date-string", help="date_string for Llama 3.1/3.2")
        s.add_argument("--template-arg", action="append", metavar="KEY=VALUE", help="other template argument")
    enc = sub.choices["encode"]
    enc.add_argument("--no-sanitize", action="store_true", help="parse control tokens in content (unsafe)")
    enc.add_argument("--out", help="write ids and offsets to this .npz file")
    enc.add_argument("--show", default="", metavar="I,J,...", help="print these conversations' prompts and ids")
    enc.add_argument("--threads", type=int, default=None, help="worker threads (default: all cores)")
    enc.add_argument("--strict", action="store_true", help="exit 1 if any conversation is refused")
    sub.choices["render"].add_argument("--raw", action="store_true", help="print the prompt exactly, no quoting")
    sub.choices["verify"].add_argument("--limit", type=int, default=None, help="only the first N conversations")
    lint = sub.choices["lint"]
    lint.add_argument("--for-generation", action="store_true", help="the prompts are for serving calls")
    lint.add_argument("--strict", action="store_true", help="exit 1 if anything is found")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {
        "encode": cmd_encode,
        "render": cmd_render,
        "verify": cmd_verify,
        "explain": cmd_explain,
        "lint": cmd_lint,
    }
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
