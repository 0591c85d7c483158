"""Command line: ``chatids`` (or ``python -m chatids``) ``render|encode|verify|explain|lint``.

Input is a JSONL file of conversations: one ``{"messages": [...], "tools": [...]}`` object per
line (``tools`` optional), or a bare list of messages.

* ``render`` prints each prompt exactly, special tokens and whitespace visible (``repr`` style);
  ``--color`` (terminal) and ``--html OUT.html`` draw the token stream instead, token by token
  (message, template/special, whitespace, loss mask), ``--compare-transformers`` marks the first
  id where transformers differs.
* ``encode`` turns the conversations of a JSONL or Parquet file into token ids, streaming in
  chunks (memory bounded by ``--chunk-size``, whatever the file size), and with ``--out`` writes
  Parquet (``FILE.parquet``), a set of ``.npy`` files (``PREFIX.npy``) or an ``.npz``. Conversations
  that cannot be encoded (malformed lines included) are counted by reason in the summary and
  written, with their line and the original record, to ``OUT.rejected.jsonl``; nothing is dropped
  silently.
  ``--pairs`` reads preference or prompt–completion records instead and writes TRL's
  pre-tokenized columns (``_cli_pairs.py``).
* ``verify`` compares chatids with transformers' ``apply_chat_template`` (render, and ids with
  ``sanitize_control_tokens`` off and on) on every conversation and prints a summary.
* ``explain`` says which path serves the checkpoint and why.
* ``lint`` reports the silent failures each conversation would meet.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from datetime import datetime
from typing import Any, Optional, Sequence

import numpy as np

from . import ChatTemplateError, CheckpointError, Encoder, __version__
from ._files import (
    _read_records,
    _read_conversations,
    _jsonl_chunks,
    _parquet_chunks,
    _Rejections,
    _UsageError,
    _pyarrow_parquet,
    _NpyWriter,
    _NpzWriter,
    _ParquetWriter,
    _output_kind,
    _keep_accepted,
)
from ._integrations import encode_collect


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


#: Conversations read, encoded and written at a time (``--chunk-size``): memory stays bounded by
#: one chunk, whatever the size of the input.
DEFAULT_CHUNK = 2048
#: Rejected conversations listed one by one in the summary (all of them go to the side file).
SHOWN_REJECTIONS = 20


# --- writers: every one takes chunks of accepted conversations, in input order --------------


_REASON_PREFIX = re.compile(r"^(conversation \d+: )?(row \d+ of the batch: )?(message \d+: )?")


def _reason_kind(reason: str) -> str:
    """The reason without the message index, for counting rejections by kind."""
    kind = _REASON_PREFIX.sub("", reason)
    if kind.startswith("malformed JSON"):
        return "malformed JSON"
    return kind if len(kind) <= 160 else kind[:157] + "..."


class _Progress:
    """tqdm on stderr with conversations/s and tokens/s, or nothing."""

    def __init__(self, enabled: bool, total: Optional[int], unit: str) -> None:
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:  # pragma: no cover - tqdm comes with huggingface_hub
                return
            self.bar = tqdm(total=total, unit=unit, unit_scale=unit == "B", file=sys.stderr, dynamic_ncols=True, desc="encode")

    def update(self, n: int, conversations: int, tokens: int, elapsed: float) -> None:
        if self.bar is not None:
            rate = max(elapsed, 1e-9)
            self.bar.set_postfix_str(f"{conversations / rate:,.0f} conv/s, {tokens / rate / 1e6:.2f} M tok/s", refresh=False)
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _encode_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = dict(
        add_generation_prompt=args.add_generation_prompt,
        sanitize_control_tokens=not args.no_sanitize,
        num_threads=args.workers,
    )
    if args.masks or args.train_on:
        options["return_assistant_mask"] = True
        if args.train_on:
            options["train_on"] = args.train_on
    if args.max_length is not None:
        options["max_length"] = args.max_length
    if args.truncation is not None:
        if args.max_length is None:
            raise _UsageError("--truncation needs --max-length")
        options["truncation"] = args.truncation
    if args.system is not None:
        options["system"] = args.system
    if args.merge_consecutive:
        options["merge_consecutive"] = True
    return options


def cmd_encode(args: argparse.Namespace) -> int:
    try:
        return _encode_file(args)
    except _UsageError as e:
        print(f"chatids encode: error: {e}", file=sys.stderr)
        return 2
    except (OSError, CheckpointError) as e:
        print(f"chatids encode: error: {e}", file=sys.stderr)
        return 2


def _encode_file(args: argparse.Namespace) -> int:
    if args.chunk_size < 1:
        raise _UsageError("--chunk-size must be at least 1")
    if not os.path.isfile(args.input):
        raise _UsageError(f"{args.input}: no such file")
    if args.pairs:
        from ._cli_pairs import encode_pairs_file

        enc = _load(args)
        kwargs = _template_kwargs(args)
        kwargs.setdefault("now", datetime.now())
        print(enc.explain())
        return encode_pairs_file(args, enc, kwargs, _reason_kind)
    parquet_in = args.input.endswith((".parquet", ".pq"))
    options = _encode_options(args)
    masks = bool(options.get("return_assistant_mask"))
    enc = _load(args)
    kwargs = _template_kwargs(args)
    kwargs.setdefault("now", datetime.now())  # one clock for every chunk (templates that print the date)
    print(enc.explain())

    writer: Any = None
    if args.out:
        kind, stem = _output_kind(args.out)
        out_dir = os.path.dirname(os.path.abspath(args.out))
        if not os.path.isdir(out_dir):
            raise _UsageError(f"--out {args.out}: directory {out_dir} does not exist")
        if kind == "parquet":
            meta = {"format": enc.format, "reference": enc.reference, "version": __version__, "input": os.path.basename(args.input)}
            writer = _ParquetWriter(args.out, masks, lines=not parquet_in, metadata=meta)
        elif kind == "npy":
            writer = _NpyWriter(stem, masks)
        else:
            writer = _NpzWriter(args.out, masks)
        rejected_path = args.rejected or stem + ".rejected.jsonl"
    else:
        rejected_path = args.rejected
    rejections = _Rejections(rejected_path, "conversation", _reason_kind, SHOWN_REJECTIONS)
    reject = rejections.add

    show = set(_indices(args.show))
    shown: dict[int, tuple[Any, Any, np.ndarray]] = {}
    n_accepted = n_tokens = 0
    n_truncated = dropped_tokens = 0
    encode_time = 0.0

    if parquet_in:
        total = _pyarrow_parquet().ParquetFile(args.input).metadata.num_rows
        chunks = _parquet_chunks(args.input, args.chunk_size, args.messages_column, args.tools_column)
        unit = "conv"
    else:
        total = None if args.input.endswith(".gz") else os.path.getsize(args.input)
        chunks = _jsonl_chunks(args.input, args.chunk_size, args.messages_column, args.tools_column)
        unit = "B"
    progress = _Progress(args.progress if args.progress is not None else sys.stderr.isatty(), total, unit)
    start = time.perf_counter()
    try:
        for chunk in chunks:
            for rejection in chunk.rejected:
                reject(*rejection)
            t0 = time.perf_counter()
            batch = encode_collect(enc, chunk.convs, chunk.tools, **options, **kwargs)
            encode_time += time.perf_counter() - t0
            for k, reason in sorted(batch.errors.items()):
                reject(chunk.index[k], chunk.line[k] if chunk.line else None, reason, chunk.rows[k], None)
            for t in batch.truncations.values():
                n_truncated += 1
                dropped_tokens += int(getattr(t, "dropped_tokens", 0))
            kept = _keep_accepted(batch, set(batch.errors))
            keep_rows = [k for k in range(len(chunk.convs)) if k not in batch.errors]
            index = np.array([chunk.index[k] for k in keep_rows], dtype=np.int64)
            line = None if parquet_in else np.array([chunk.line[k] for k in keep_rows], dtype=np.int64)
            if writer is not None and keep_rows:
                writer.write(kept, index, line)
            for j, k in enumerate(keep_rows):
                if chunk.index[k] in show:
                    shown[chunk.index[k]] = (chunk.convs[k], chunk.tools[k], kept[j].copy())
            n_accepted += len(keep_rows)
            n_tokens += int(kept.offsets[-1])
            progress.update(chunk.progress, n_accepted + rejections.count, n_tokens, time.perf_counter() - start)
        written = writer.close() if writer is not None else []
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    finally:
        progress.close()
        rejections.close()
    elapsed = time.perf_counter() - start

    n_rejected = rejections.count
    n = n_accepted + n_rejected
    print(
        f"{n_accepted} conversations -> {n_tokens} tokens in {elapsed:.2f} s "
        f"({n / max(elapsed, 1e-9):,.0f} conversations/s, {n_tokens / max(elapsed, 1e-9) / 1e6:.2f} M tokens/s; "
        f"encoding {encode_time:.2f} s); refused: {n_rejected}"
    )
    rejections.print_summary()
    if n_truncated:
        print(f"truncated: {n_truncated} conversations ({dropped_tokens} tokens dropped, policy {options.get('truncation')})")

    control = {i for _, i in enc.control_tokens}
    show_options = {k: v for k, v in options.items() if k in ("add_generation_prompt", "sanitize_control_tokens", "system", "merge_consecutive")}
    for shown_index in sorted(shown):
        conv, tools, ids = shown[shown_index]
        extra = {} if tools is None else {"tools": tools}
        detailed = enc.encode_detailed(conv, **show_options, **kwargs, **extra)
        from_content = sum(1 for t, c in zip(detailed.ids.tolist(), detailed.from_content.tolist()) if c and t in control)
        from_template = sum(1 for t in detailed.ids.tolist() if t in control) - from_content
        print(f"\n--- conversation {shown_index}: {len(ids)} tokens; control tokens: {from_template} written by the "
              f"template, {from_content} from content ---")
        render_options = {k: v for k, v in show_options.items() if k != "sanitize_control_tokens"}
        print(_visible(enc.render(conv, **render_options, **kwargs, **extra)))
        print(f"ids: {ids.tolist()}")
    if written:
        print(f"\nwrote {', '.join(written)} ({n_accepted} conversations)")
    if rejected_path:
        print(f"rejected conversations: {rejected_path} ({n_rejected})")
    return 1 if n_rejected and args.strict else 0


def cmd_render(args: argparse.Namespace) -> int:
    """``chatids render``: the prompts as ``repr`` lines (or ``--raw``), or, with ``--color``,
    ``--html`` or ``--compare-transformers``, the token stream (see :mod:`chatids._render_view`)."""
    if args.color or args.html or args.compare_transformers:
        return _render_tokens(args)
    enc = _load(args)
    show = set(_indices(args.show))
    for i, (conv, tools) in enumerate(_read_records(args.input)):
        if show and i not in show:
            continue
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


def _render_tokens(args: argparse.Namespace) -> int:
    """The token view of ``chatids render``: ``--color`` prints each conversation with rich,
    ``--html`` writes one page for all of them, ``--compare-transformers`` marks the first id
    where transformers' ``apply_chat_template(tokenize=True)`` differs (exit status 1 if any
    conversation differs; 2 for a usage error)."""
    from . import _render_view as rv

    console = None
    if args.color:
        try:
            console = rv.rich_console()
        except ImportError as e:
            print(f"chatids render: error: {e}", file=sys.stderr)
            return 2
    try:
        enc = _load(args)
        texts = rv.TokenTexts.from_encoder(enc)
    except (CheckpointError, ValueError) as e:
        print(f"chatids render: error: {e}", file=sys.stderr)
        return 2
    reference = None
    if args.compare_transformers:
        if enc.reference != "transformers":
            print(
                f"chatids render: error: --compare-transformers compares with transformers, but this encoder reproduces "
                f"{enc.reference}: load with --reference transformers",
                file=sys.stderr,
            )
            return 2
        from ._verify import _transformers_tokenizer

        try:
            reference = _transformers_tokenizer(args.model)
        except ImportError as e:
            print(f"chatids render: error: --compare-transformers needs transformers: {e}", file=sys.stderr)
            return 2
    if args.html and not os.path.isdir(os.path.dirname(os.path.abspath(args.html))):
        print(f"chatids render: error: --html {args.html}: its directory does not exist", file=sys.stderr)
        return 2
    now = datetime.now()  # one clock for chatids and transformers, for every conversation
    show = set(_indices(args.show))
    views = []
    for i, (conv, tools) in enumerate(_read_records(args.input)):
        if show and i not in show:
            continue
        view = rv.build_view(
            enc,
            conv,
            i,
            tools=tools,
            add_generation_prompt=args.add_generation_prompt,
            sanitize_control_tokens=not args.no_sanitize,
            train_on=args.train_on,
            template_kwargs=_template_kwargs(args),
            now=now,
            texts=texts,
            reference=reference,
            chat_template=args.chat_template,
        )
        views.append(view)
        if console is not None:
            console.print(rv.rich_renderable(view, console.width))
            console.print()
        elif not args.html:
            if view.error is not None:
                print(f"--- conversation {i}: refused: {view.error}")
            else:
                print(f"--- conversation {i} ---")
                kwargs = _template_kwargs(args)
                if tools is not None:
                    kwargs["tools"] = tools
                print(_repr_lines(enc.render(conv, add_generation_prompt=args.add_generation_prompt, now=now, **kwargs)))
                for note in (view.compare_error, view.comparison.summary() if view.comparison else None):
                    if note:
                        print(note)
    if args.html:
        subtitle = [
            f"model {args.model} · format {enc.format} · reference {enc.reference} · text encoder {enc.text_encoder} · chatids {__version__}",
            f"{args.input}: {len(views)} conversations, {sum(len(v.cells) for v in views)} tokens"
            + (" · compared with transformers' apply_chat_template(tokenize=True)" if reference is not None else ""),
        ]
        page = rv.html_page(views, title=f"chatids render: {os.path.basename(args.input)}", subtitle=subtitle)
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(page)
        print(f"wrote {args.html} ({len(views)} conversations, {sum(len(v.cells) for v in views)} tokens)")
    if reference is not None:
        differ = [v.index for v in views if (v.comparison is not None and not v.comparison.identical) or v.compare_error]
        compared = sum(1 for v in views if v.comparison is not None)
        print(f"compared with transformers: {compared} conversations, {len(differ)} differ" + (f" ({differ[:20]})" if differ else ""))
        return 1 if differ else 0
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
        ("render", "print the prompts exactly (repr style), or draw their tokens (--color, --html)"),
        ("encode", "encode conversations to token ids"),
        ("verify", "compare chatids with transformers' apply_chat_template"),
        ("explain", "which path serves the checkpoint, and why"),
        ("lint", "report the silent failures of each conversation"),
    )
    for name, help_text in commands:
        s = sub.add_parser(name, help=help_text)
        if name != "explain":
            s.add_argument("input", help="JSONL file, one conversation per line" + (" (or .jsonl.gz, or Parquet)" if name == "encode" else ""))
        s.add_argument("--model", required=True, help="checkpoint directory, GGUF file or Hugging Face repo id")
        s.add_argument("--format", help='force a native format, or "jinja" for the Jinja path')
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
    enc.add_argument(
        "--out",
        help="FILE.parquet (input_ids, labels, assistant_mask, source_index, source_line), PREFIX.npy "
        "(PREFIX.ids.npy, PREFIX.offsets.npy, ...) or FILE.npz; rejected conversations go to OUT.rejected.jsonl",
    )
    enc.add_argument("--rejected", metavar="FILE.jsonl", help="where rejected conversations go (default: OUT.rejected.jsonl)")
    enc.add_argument("--show", default="", metavar="I,J,...", help="print these conversations' prompts and ids")
    enc.add_argument(
        "--workers", "--threads", dest="workers", type=int, default=None, metavar="N",
        help="encoding threads (default: all cores, or RAYON_NUM_THREADS)",
    )
    enc.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK, metavar="N", help=f"conversations per chunk (default {DEFAULT_CHUNK})")
    enc.add_argument("--masks", action="store_true", help="also write labels (-100 where not trained) and assistant_mask")
    enc.add_argument("--train-on", choices=["all_assistant", "last_assistant", "all"], help="which turns are trained (implies --masks)")
    enc.add_argument("--max-length", type=int, metavar="N", help="at most N tokens per conversation")
    enc.add_argument(
        "--truncation", choices=["error", "drop_oldest_turns", "right"],
        help="what to do past --max-length (default: error, the conversation is rejected)",
    )
    enc.add_argument("--system", choices=["error", "fold"], help="system message policy (see docs/verifying.md)")
    enc.add_argument("--merge-consecutive", action="store_true", help="join consecutive same-role messages")
    enc.add_argument("--messages-column", default="messages", help="key/column of the messages (default: messages)")
    enc.add_argument("--tools-column", default="tools", help="key/column of the tools (default: tools)")
    progress = enc.add_mutually_exclusive_group()
    progress.add_argument("--progress", dest="progress", action="store_true", default=None, help="progress bar on stderr even when it is not a terminal")
    progress.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    enc.add_argument("--strict", action="store_true", help="exit 1 if any conversation is refused")
    enc.add_argument(
        "--pairs", action="store_true",
        help="preference (prompt, chosen, rejected) or prompt-completion (prompt, completion, label) records to TRL's "
        "columns (prompt_ids, chosen_ids, rejected_ids / completion_ids); --out FILE.parquet or FILE.jsonl",
    )
    enc.add_argument("--trl-style", choices=["trl", "trl<0.29"], default="trl", help="DPO column names of --pairs (default: TRL 0.29 and later)")
    render = sub.choices["render"]
    render.add_argument("--raw", action="store_true", help="print the prompt exactly, no quoting")
    render.add_argument(
        "--color", action="store_true",
        help="draw the token stream in colour: tokens boxed by message, template and special tokens, whitespace, "
        "the loss mask (needs rich: pip install 'chatids[cli]')",
    )
    render.add_argument("--html", metavar="OUT.html", help="write the same picture of every conversation into one self-contained HTML page")
    render.add_argument(
        "--compare-transformers", action="store_true",
        help="mark the first token where transformers' apply_chat_template(tokenize=True) differs (exit 1 if any does)",
    )
    render.add_argument("--no-sanitize", action="store_true", help="token view: parse control tokens in content (unsafe), as encode --no-sanitize")
    render.add_argument(
        "--train-on", choices=["all_assistant", "last_assistant", "all"], default="all_assistant",
        help="which turns the mask overlay shows as trained (default all_assistant)",
    )
    render.add_argument("--show", default="", metavar="I,J,...", help="only these conversations (0-based positions)")
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
