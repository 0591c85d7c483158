"""Command line: ``python -m chatids encode|render``.

``encode`` turns a JSONL file of conversations (one ``{"messages": [...]}`` per line, or a bare
list of messages) into token ids, prints a summary and, with ``--out``, writes the ids and
offsets to an ``.npz`` file. Conversations the format refuses are counted and listed with their
reason; nothing is dropped silently.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Optional, Sequence

import numpy as np

from . import ChatTemplateError, Encoder


def _read_conversations(path: str) -> list[list[dict[str, Any]]]:
    convs = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{line_no}: not JSON: {e}")
            convs.append(row["messages"] if isinstance(row, dict) and "messages" in row else row)
    return convs


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


def cmd_encode(args: argparse.Namespace) -> int:
    enc = Encoder.from_pretrained(args.model, format=args.format, reference=args.reference)
    convs = _read_conversations(args.input)
    kwargs = _template_kwargs(args)
    options = dict(add_generation_prompt=args.add_generation_prompt, sanitize_control_tokens=not args.no_sanitize)
    print(enc.explain())
    accepted, refused = [], []
    for i, conv in enumerate(convs):
        try:
            enc.render(conv, add_generation_prompt=args.add_generation_prompt, **kwargs)
            accepted.append(i)
        except ChatTemplateError as e:
            refused.append((i, str(e)))
    start = time.perf_counter()
    batch = enc.encode_batch([convs[i] for i in accepted], num_threads=args.threads, **options, **kwargs)
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
        detailed = enc.encode_detailed(conv, **options, **kwargs)
        from_content = sum(1 for t, c in zip(detailed.ids.tolist(), detailed.from_content.tolist()) if c and t in control)
        from_template = sum(1 for t in detailed.ids.tolist() if t in control) - from_content
        print(f"\n--- conversation {index}: {len(batch[k])} tokens; control tokens: {from_template} written by the "
              f"template, {from_content} from content ---")
        print(_visible(enc.render(conv, add_generation_prompt=args.add_generation_prompt, **kwargs)))
        print(f"ids: {batch[k].tolist()}")
    if args.out:
        np.savez(args.out, ids=batch.ids, offsets=batch.offsets, conversation_index=np.array(accepted, dtype=np.int64))
        print(f"\nwrote {args.out} (ids, offsets, conversation_index)")
    return 1 if refused and args.strict else 0


def cmd_render(args: argparse.Namespace) -> int:
    enc = Encoder.from_pretrained(args.model, format=args.format, reference=args.reference)
    for i, conv in enumerate(_read_conversations(args.input)):
        try:
            text = enc.render(conv, add_generation_prompt=args.add_generation_prompt, **_template_kwargs(args))
        except ChatTemplateError as e:
            print(f"--- conversation {i}: refused: {e}")
            continue
        print(f"--- conversation {i} ---")
        print(text if args.raw else _visible(text))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m chatids", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name, help_text in (("encode", "encode conversations to token ids"), ("render", "print the prompts")):
        s = sub.add_parser(name, help=help_text)
        s.add_argument("input", help="JSONL file, one conversation per line")
        s.add_argument("--model", required=True, help="checkpoint directory (tokenizer.json + tokenizer_config.json)")
        s.add_argument("--format", help="force a native format instead of recognising the template")
        s.add_argument(
            "--reference",
            choices=["transformers", "mistral-common"],
            help="which reference to reproduce (default: mistral-common where the checkpoint ships its files)",
        )
        s.add_argument("--add-generation-prompt", action="store_true")
        s.add_argument("--date-string", help="date_string for Llama 3.1/3.2")
        s.add_argument("--template-arg", action="append", metavar="KEY=VALUE", help="other template argument")
    enc = sub.choices["encode"]
    enc.add_argument("--no-sanitize", action="store_true", help="parse control tokens in content (unsafe)")
    enc.add_argument("--out", help="write ids and offsets to this .npz file")
    enc.add_argument("--show", default="", metavar="I,J,...", help="print these conversations' prompts and ids")
    enc.add_argument("--threads", type=int, default=None, help="worker threads (default: all cores)")
    enc.add_argument("--strict", action="store_true", help="exit 1 if any conversation is refused")
    sub.choices["render"].add_argument("--raw", action="store_true", help="print the prompt exactly, no markers")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return {"encode": cmd_encode, "render": cmd_render}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
