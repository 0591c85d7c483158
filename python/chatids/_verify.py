"""``chatids verify``: compare chatids with transformers' ``apply_chat_template`` on a file.

Each conversation is compared with and without the generation prompt: the rendered text, and
the ids with ``sanitize_control_tokens`` off and on. Both sides see the same fixed clock. A
conversation the template rejects must be rejected by chatids too; one only chatids refuses is
counted with its reason (chatids' documented refusals, e.g. tool calls a native format does
not render).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterator, Optional

from ._core import ChatTemplateError
from ._encoder import Encoder

#: The clock both sides see (templates that call ``strftime_now``).
FIXED_NOW = datetime(2025, 3, 14, 9, 26, 53)


@dataclass
class Summary:
    """Counts of one verification run."""

    compared: int = 0
    rejected_by_both: int = 0
    refused_by_chatids: dict[str, int] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)

    def report(self) -> str:
        lines = [
            f"compared: {self.compared}",
            f"rejected by the template (chatids too): {self.rejected_by_both}",
            f"refused by chatids only: {sum(self.refused_by_chatids.values())}",
        ]
        for reason, count in sorted(self.refused_by_chatids.items(), key=lambda kv: -kv[1])[:10]:
            lines.append(f"  {count}x {reason}")
        lines.append(f"mismatches: {len(self.mismatches)}")
        lines.extend(f"  {m}" for m in self.mismatches[:20])
        return "\n".join(lines)


def _transformers_tokenizer(model: str) -> Any:
    from transformers import AutoTokenizer

    if os.path.isfile(model) and model.lower().endswith(".gguf"):
        try:
            return AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(model)), gguf_file=os.path.basename(model))
        except ImportError as e:
            raise SystemExit(f"transformers reads GGUF files only with torch and gguf installed ({e})") from e
    if os.path.exists(model):
        return AutoTokenizer.from_pretrained(model)
    return AutoTokenizer.from_pretrained(model, local_files_only=True)


@contextlib.contextmanager
def frozen_transformers_clock(now: datetime = FIXED_NOW) -> Iterator[None]:
    """transformers' ``strftime_now`` sees ``now`` inside the block (the clock chatids gets as
    ``now=``), so templates that print today's date render the same on both sides."""
    import transformers.utils.chat_template_utils as ctu

    class _Frozen(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> "_Frozen":
            return cls(now.year, now.month, now.day, now.hour, now.minute, now.second)

    saved = ctu.datetime
    ctu.datetime = _Frozen
    try:
        yield
    finally:
        ctu.datetime = saved


def _first_difference(ours: list[int], ref: list[int]) -> str:
    for i, (a, b) in enumerate(zip(ours, ref)):
        if a != b:
            return f"token {i}: chatids {ours[max(0, i - 3):i + 4]} vs transformers {ref[max(0, i - 3):i + 4]}"
    return f"lengths {len(ours)} vs {len(ref)}"


def verify_file(
    enc: Encoder,
    model: str,
    path: str,
    *,
    chat_template: Optional[str] = None,
    template_kwargs: Optional[dict[str, Any]] = None,
    limit: Optional[int] = None,
) -> Summary:
    """Compare ``enc`` with transformers on every conversation of the JSONL file ``path``."""
    from ._files import _read_records

    if enc.reference != "transformers":
        raise SystemExit("verify compares with transformers: load with --reference transformers")
    tok = _transformers_tokenizer(model)
    summary = Summary()
    records = _read_records(path)[:limit]
    with frozen_transformers_clock():
        for index, (messages, tools) in enumerate(records):
            _verify_one(enc, tok, summary, index, messages, tools, chat_template, template_kwargs)
    return summary


def _verify_one(
    enc: Encoder,
    tok: Any,
    summary: Summary,
    index: int,
    messages: list[dict[str, Any]],
    tools: Optional[list[dict[str, Any]]],
    chat_template: Optional[str],
    template_kwargs: Optional[dict[str, Any]],
) -> None:
    """Compare one conversation, with and without the generation prompt, into ``summary``."""
    for agp in (False, True):
        where = f"conversation {index}{' (generation prompt)' if agp else ''}"
        ref_kwargs: dict[str, Any] = dict(template_kwargs or {})
        if chat_template is not None:
            ref_kwargs["chat_template"] = chat_template
        ours_kwargs: dict[str, Any] = dict(template_kwargs or {}, now=FIXED_NOW)
        if tools is not None:
            ref_kwargs["tools"] = tools
            ours_kwargs["tools"] = tools
        try:
            ref_text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=agp, **ref_kwargs)
        except Exception as e:
            try:
                enc.render(messages, agp, **ours_kwargs)
            except ChatTemplateError:
                summary.rejected_by_both += 1
                continue
            summary.mismatches.append(f"{where}: transformers raised {type(e).__name__}: {e}; chatids rendered it")
            continue
        try:
            text = enc.render(messages, agp, **ours_kwargs)
        except ChatTemplateError as e:
            reason = str(e).split(": ", 1)[-1][:120]
            summary.refused_by_chatids[reason] = summary.refused_by_chatids.get(reason, 0) + 1
            continue
        if text != ref_text:
            summary.mismatches.append(f"{where}: render differs")
            continue
        ok = True
        for sanitize in (False, True):
            ref = list(
                tok.apply_chat_template(
                    messages,
                    tokenize=True,
                    add_generation_prompt=agp,
                    sanitize_control_tokens=sanitize,
                    return_dict=False,
                    **ref_kwargs,
                )
            )
            ours = enc.encode(messages, agp, sanitize, **ours_kwargs).tolist()
            if ours != ref:
                summary.mismatches.append(f"{where}, sanitize={sanitize}: {_first_difference(ours, ref)}")
                ok = False
                break
        summary.compared += ok
