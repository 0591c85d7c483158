"""Single-conversation ``encode`` for an instruction count: the 200 plain corpus conversations of
the benches (``conftest.corpus``'s filter and shuffle), encoded in 3 passes, to run under
callgrind, whose counts do not move with the machine's noise the way wall-clock medians do::

    valgrind --tool=callgrind --toggle-collect='*__pymethod_encode__*' \\
        --callgrind-out-file=cg.out python benches/encode_instructions.py llama-3.1-8b-instruct jinja
    callgrind_annotate --inclusive=yes cg.out | grep -E 'TOTALS|render_root_of|messages_from_py'

``--toggle-collect`` counts only what runs inside ``Encoder.encode`` (the binding, the
conversion of the dicts, the render and the text encoding), not the loading. The second
argument is the format to force (``jinja``); without it the checkpoint's own (native) format.
The text cache is off, as in ``benches/test_bench_encode.py``. Run with CHATIDS_MODELS_DIR and
CHATIDS_DATA_DIR set.
"""

from __future__ import annotations

import datetime as dt
import glob
import json
import os
import random
import sys
from pathlib import Path

os.environ.setdefault("CHATIDS_TEXT_CACHE_MB", "0")

import chatids  # noqa: E402


def plain(row: dict) -> bool:
    """The benches' filter (``conftest._plain``; not imported, so that nothing else is loaded
    into the process whose encode calls are counted)."""
    return not row.get("tools") and all(
        isinstance(m.get("content"), str) and not m.get("tool_calls") and m["role"] in ("system", "user", "assistant")
        for m in row["messages"]
    )


def corpus() -> list[list[dict]]:
    """The plain corpus conversations, shuffled as the benches' ``corpus`` fixture does."""
    rows = []
    for f in sorted(glob.glob(str(Path(os.environ["CHATIDS_DATA_DIR"]) / "conversations" / "*.jsonl"))):
        with open(f, encoding="utf-8") as handle:
            rows += [json.loads(line) for line in handle]
    conversations = [r["messages"] for r in rows if plain(r)]
    random.Random(2024).shuffle(conversations)
    return conversations


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python benches/encode_instructions.py MODEL [FORMAT]")
    model = sys.argv[1]
    fmt = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] else None
    enc = chatids.Encoder.from_pretrained(Path(os.environ["CHATIDS_MODELS_DIR"]) / model, format=fmt)
    kwargs: dict = {"date_string": "26 Jul 2024"} if enc.format.startswith("llama-3.") else {}
    if enc.reads_clock:
        kwargs["now"] = dt.datetime(2026, 12, 7)
    conversations = corpus()[:200]
    for _ in range(3):
        for messages in conversations:
            try:
                enc.encode(messages, **kwargs)
            except ValueError:
                pass  # a conversation the template refuses: refused the same way in every pass


if __name__ == "__main__":
    main()
