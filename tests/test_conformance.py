"""Conformance with transformers' apply_chat_template on the shared conversation corpus.

For every model directory and corpus file: ``render`` equals ``apply_chat_template(tokenize=False)``,
``encode`` equals ``apply_chat_template(tokenize=True)`` with ``sanitize_control_tokens`` off and
on, and ``encode_batch`` equals the same references, for ``add_generation_prompt`` False and
True. ``CHATIDS_CONFORMANCE=full`` runs every conversation; the default is a fixed sample of
each file. Conversations with a ``tools`` list are compared with it (``apply_chat_template(...,
tools=...)``); native formats hand tool conversations to the checkpoint's template (Jinja path).
"""

from __future__ import annotations

import json
from typing import Any, Optional

import pytest

import support
from conftest import CONFORMANCE, POLICY_REASONS

FILES = support.corpus_files() or ["<no corpus>"]


@pytest.mark.parametrize("corpus_file", FILES)
def test_corpus_matches_transformers(model: support.Model, corpus_file: str) -> None:
    support.require_corpus(corpus_file)
    counts = CONFORMANCE[model.name]
    accepted: dict[tuple[bool, str], list[tuple[list[dict], Optional[list], dict[bool, list[int]]]]] = {}
    for row in support.corpus_rows(corpus_file):
        counts["conversations"] += 1
        messages = row["messages"]
        tools = row.get("tools") or None
        if tools:
            counts["with_tools"] += 1
        for agp in (False, True):
            outcome = support.compare(model, messages, agp, tools=tools)
            counts[outcome.kind] += 1
            if outcome.kind == "rejected_by_policy":
                POLICY_REASONS[model.name][outcome.detail] += 1
            if outcome.expected is not None:
                accepted.setdefault((agp, json.dumps(tools)), []).append((messages, tools, outcome.expected))
    counts["mismatches"] += 0  # any mismatch has failed the test above
    for (agp, _), cases in accepted.items():
        tools = cases[0][1]
        extra: dict[str, Any] = {} if tools is None else {"tools": tools}
        for sanitize in (False, True):
            batch = model.enc.encode_batch(
                [m for m, _, _ in cases], add_generation_prompt=agp, sanitize_control_tokens=sanitize, **model.ours_kwargs(**extra)
            )
            assert len(batch) == len(cases)
            for i, (_, _, expected) in enumerate(cases):
                assert batch[i].tolist() == expected[sanitize], f"encode_batch differs for case {i}"
