"""Property tests: random conversations and random text against transformers.

Contents mix arbitrary Unicode, whitespace runs and pieces of the model's control tokens;
roles are drawn from the format's roles (and free-form names where the template passes roles
through). Every generated case goes through ``support.compare`` (text, both sanitize modes).
``HYPOTHESIS_PROFILE=ci`` is deterministic; ``full`` runs many more examples.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import support

settings.register_profile(
    "ci", max_examples=40, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck), print_blob=True
)
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
settings.register_profile("full", max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

WHITESPACE = st.sampled_from([" ", "  ", "\n", "\n\n", "\t", "\r\n", "\u00a0", "\u3000", "\x1c", " \n "])
UNICODE = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
SCRIPTS = st.sampled_from(["hello", "world", "你好", "世界", "こんにちは", "Привет", "🙂", "👩‍💻", "e\u0301", "\u212b", "123", "3.14", "don't", "```py", "    "])


def contents(control_tokens: list[str]):
    fragments = st.sampled_from(control_tokens)
    partial = fragments.flatmap(lambda t: st.integers(1, max(1, len(t) - 1)).map(lambda k: t[:k]))
    tails = fragments.flatmap(lambda t: st.integers(1, max(1, len(t) - 1)).map(lambda k: t[k:]))
    piece = st.one_of(UNICODE, WHITESPACE, SCRIPTS, fragments, partial, tails)
    return st.lists(piece, max_size=8).map("".join)


def conversations(fmt: str, control_tokens: list[str]):
    roles = st.sampled_from(["user", "assistant", "system"])
    if fmt in support.PASS_THROUGH_ROLES:
        roles = st.one_of(roles, st.sampled_from(["tool", "narrator", "User", "function"]))
    message = st.fixed_dictionaries({"role": roles, "content": contents(control_tokens)})
    return st.lists(message, min_size=1, max_size=5)


@pytest.mark.parametrize("name", support.MODEL_NAMES)
def test_random_conversations_match_transformers(name):
    model = support.load_model(name)
    tokens = [t for t, _ in model.enc.control_tokens]

    @given(conversations(model.format, tokens), st.booleans())
    def check(messages, agp):
        support.compare(model, messages, agp)

    check()


@pytest.mark.parametrize("name", support.MODEL_NAMES)
def test_sanitized_content_never_yields_control_ids(name):
    model = support.load_model(name)
    tokens = [t for t, _ in model.enc.control_tokens]

    @given(conversations(model.format, tokens), st.booleans())
    def check(messages, agp):
        try:
            support.assert_no_control_from_content(model, messages, agp)
        except support.chatids.ChatTemplateError:
            pass  # refused conversations produce nothing

    check()
