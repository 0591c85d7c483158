"""Generated edge cases against transformers, for every model directory.

Contents with tricky whitespace, Unicode, 100k characters, control tokens and partial control
tokens, in several conversation shapes, plus format-specific conversations; both
``add_generation_prompt`` values and both ``sanitize_control_tokens`` modes (see
``support.compare``).
"""

from __future__ import annotations

import zlib
from collections import Counter

import support
from edge_cases import PLAIN_TEXTS, control_texts, shapes, special_conversations


def _sample(model: support.Model, cases: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Every case in full runs; in sample runs a fixed half per checkpoint, a different half
    for each, so that every (text, shape) case runs on about half of the checkpoints."""
    if support.full_conformance():
        return cases
    return {k: v for k, v in cases.items() if zlib.crc32(f"{model.name}:{k}".encode()) % 2 == 0}


def _check_all(model: support.Model, cases: dict[str, list[dict]], kwargs_for=lambda name: {}) -> Counter:
    outcomes: Counter = Counter()
    failures = []
    for name, messages in cases.items():
        for agp in (False, True):
            kw = kwargs_for(name)
            try:
                if kw:
                    original = model.kwargs
                    model.kwargs = lambda kw=kw, original=original: {**original(), **kw}  # type: ignore[method-assign]
                    try:
                        outcome = support.compare(model, messages, agp)
                    finally:
                        model.kwargs = original  # type: ignore[method-assign]
                else:
                    outcome = support.compare(model, messages, agp)
                outcomes[outcome.kind] += 1
            except AssertionError as e:
                failures.append(f"{name} agp={agp}: {e}")
    assert not failures, f"{len(failures)} edge cases differ:\n" + "\n".join(failures[:10])
    return outcomes


def test_plain_edge_contents(model: support.Model) -> None:
    cases = {f"{text_name}/{shape}": msgs for text_name, text in PLAIN_TEXTS.items() for shape, msgs in shapes(text, model.format).items()}
    outcomes = _check_all(model, _sample(model, cases))
    assert outcomes["compared"] > 0


def test_control_token_contents(model: support.Model) -> None:
    tokens = [t for t, _ in model.enc.control_tokens]
    cases = _sample(model, {f"{text_name}/{shape}": msgs for text_name, text in control_texts(tokens).items() for shape, msgs in shapes(text, model.format).items()})
    outcomes = _check_all(model, cases)
    assert outcomes["compared"] > 0
    for messages in cases.values():
        for agp in (False, True):
            try:
                support.assert_no_control_from_content(model, messages, agp)
            except support.chatids.ChatTemplateError:
                pass


def test_format_specific_conversations(model: support.Model) -> None:
    specials = special_conversations(model.format)
    outcomes = _check_all(model, {k: v[0] for k, v in specials.items()}, kwargs_for=lambda name: specials[name][1])
    assert outcomes["compared"] > 0
