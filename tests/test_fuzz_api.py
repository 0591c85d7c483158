"""Fuzzing the Python API: arbitrary Python values through every public entry point.

Hypothesis builds conversations that are mostly well formed (roles, contents made of control
token strings, their halves, template words and arbitrary text, tool calls and tool results)
and sometimes not (any Python value where a message, a field or a conversation goes: None,
numbers, huge ints, NaN, bytes, lone surrogates, NUL, nested lists and dicts, tuples, sets),
with random options. Each input goes through ``encode``, ``encode_detailed``, ``render``,
``lint``, ``encode_batch`` (raise and collect), and a ``Session`` (``append``). What must hold:

- the only exceptions are :class:`chatids.ChatTemplateError` and ``TypeError`` (nothing else
  escapes, nothing aborts: a panic would surface as ``pyo3_runtime.PanicException``);
- ``encode``, ``encode_detailed`` and ``encode_batch`` agree on success or failure and on the
  ids; ``render`` works exactly when unsanitized ``encode`` does; ``on_error="collect"`` records exactly the
  conversations ``encode`` refuses and encodes the others as ``encode`` does;
- with the default policy no control-token id starts in caller text;
- a ``Session`` whose append fails is left exactly as it was, and one whose appends succeed
  holds what ``encode`` gives for the same messages.

CI runs 200 derandomized examples; ``fuzz/fuzz_api.py`` runs the same check with fresh seeds
for as long as asked (``make fuzz-api``, CONTRIBUTING.md, "Fuzzing").
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import chatids
import support

#: Examples per run: CI (``HYPOTHESIS_PROFILE=ci``, derandomized) and by hand; ``full`` for
#: ``make conformance-full``. fuzz/fuzz_api.py runs :func:`check_case` for as long as asked.
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
EXAMPLES = {"ci": 200, "full": 5000}.get(PROFILE, 300)

#: (checkpoint directory, format): one encoder per format family and route.
TARGETS = [
    ("llama-3.1-8b-instruct", None),
    ("qwen2.5-7b-instruct", None),
    ("qwen3-0.6b", None),
    ("llama-2-7b-chat", None),
    ("mistral-small-24b-instruct-2501", None),
    ("gemma-3-it", None),
    ("gpt-oss-120b", None),
    ("deepseek-v3", None),
    ("llama-3.1-8b-instruct", "jinja"),
    ("mistral-common", None),
]
ALLOWED = (chatids.ChatTemplateError, TypeError)
WORDS = ["user", "assistant", "system", "tool", "ipython", "model", "developer", "\n", "\n\n", " ", "<think>",
         "</think>", "[INST]", "[/INST]", "<<SYS>>", "<s>", "</s>", "<|", "|>", "\u200b", "\uff1c\uff5c", "\x00"]

_ENCODERS: dict[tuple[str, Any], chatids.Encoder] = {}


def encoder(name: str, fmt: Any) -> chatids.Encoder:
    if (name, fmt) not in _ENCODERS:
        if name == "mistral-common":
            mistral_common = pytest.importorskip("mistral_common")
            d = Path(os.environ.get("TMPDIR", "/tmp")) / f"chatids-fuzz-mc-{os.getpid()}"
            d.mkdir(exist_ok=True)
            link = d / "tokenizer.model.v7"
            if not link.exists():
                link.symlink_to(Path(mistral_common.__file__).parent / "data" / "mistral_instruct_tokenizer_241114.model.v7")
            enc = chatids.Encoder.from_pretrained(d)
            assert enc.reference == "mistral-common"
        else:
            path = support.require_model_path(name)
            enc = chatids.Encoder.from_pretrained(path, format=fmt) if fmt else chatids.Encoder.from_pretrained(path)
        _ENCODERS[(name, fmt)] = enc
    return _ENCODERS[(name, fmt)]


def _control_strings(enc: chatids.Encoder) -> list[str]:
    return [s for s, _ in enc.control_tokens] or ["<s>"]


def texts(controls: list[str]) -> st.SearchStrategy[str]:
    """Text made of control tokens, their halves, template words, arbitrary characters and
    lone surrogates."""
    token = st.sampled_from(controls)
    atom = st.one_of(
        token,
        st.tuples(token, st.integers(0, 30)).map(lambda t: t[0][: t[1]]),
        st.tuples(token, st.integers(0, 30)).map(lambda t: t[0][t[1]:]),
        st.sampled_from(WORDS),
        st.text(max_size=12),
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    )
    return st.lists(atom, max_size=6).map("".join)


#: Any Python value a caller might pass by mistake.
ODD_VALUES = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.integers(min_value=2**64), st.floats(allow_nan=True),
        st.just(math.inf), st.binary(max_size=8), st.text(max_size=8), st.just("\ud800"), st.just(("user", "hi")),
        st.just({1, 2}), st.just(object()),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.one_of(st.text(max_size=5), st.integers()), inner, max_size=3)),
    max_leaves=8,
)


def tool_calls(text: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    arguments = st.one_of(
        st.dictionaries(st.text(max_size=6), st.one_of(text, st.integers(), st.lists(text, max_size=2)), max_size=3),
        text,  # usually not JSON
        st.dictionaries(st.text(max_size=6), text, max_size=2).map(lambda d: __import__("json").dumps(d)),
        ODD_VALUES,
    )
    call = st.one_of(
        st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries({"name": text, "arguments": arguments})}),
        st.fixed_dictionaries({"id": st.just("call_0"), "type": st.just("function"),
                               "function": st.fixed_dictionaries({"name": st.just("get_weather"), "arguments": arguments})}),
        st.fixed_dictionaries({"name": text, "arguments": arguments}),
        ODD_VALUES,
    )
    return st.one_of(st.lists(call, min_size=1, max_size=2), ODD_VALUES)


def messages_for(controls: list[str]) -> st.SearchStrategy[Any]:
    text = texts(controls)
    role = st.one_of(st.sampled_from(["user", "assistant", "system", "tool"]), text, ODD_VALUES)
    content = st.one_of(
        text,
        st.lists(st.one_of(st.fixed_dictionaries({"type": st.just("text"), "text": text}),
                           st.just({"type": "image"}), ODD_VALUES), max_size=3),
        st.none(),
        ODD_VALUES,
    )
    extra = st.fixed_dictionaries({}, optional={
        "tool_calls": tool_calls(text),
        "tool_call_id": st.one_of(st.just("call_0"), text, ODD_VALUES),
        "name": text,
        "train": st.one_of(st.booleans(), ODD_VALUES),
        "reasoning_content": st.one_of(text, ODD_VALUES),
        "metadata": ODD_VALUES,
    })
    message = st.one_of(
        st.builds(lambda r, c, e: {"role": r, "content": c, **e}, role, content, extra),
        st.builds(lambda r, c: {"role": r, "content": c},
                  st.sampled_from(["user", "assistant", "system", "tool"]), text),
        ODD_VALUES,
    )
    plain_turns = st.lists(text, min_size=1, max_size=4).map(
        lambda ts: [{"role": ("user", "assistant")[i % 2], "content": t} for i, t in enumerate(ts)])
    return st.one_of(plain_turns, st.lists(message, max_size=5), st.tuples(message, message).map(list), ODD_VALUES)


OPTIONS = st.fixed_dictionaries({
    "add_generation_prompt": st.booleans(),
    "sanitize_control_tokens": st.sampled_from([True, True, True, False]),
    "system": st.sampled_from([None, None, "error", "fold", "drop"]),
    "merge_consecutive": st.booleans(),
    "continue_final_message": st.sampled_from([False, False, True]),
})


def outcome(call: Callable[[], Any], what: str) -> tuple[bool, Any]:
    """(True, result) or (False, exception); any exception outside ALLOWED fails the test."""
    try:
        return True, call()
    except ALLOWED as e:
        assert str(e), f"{what}: {type(e).__name__} without a message"
        return False, e
    except BaseException as e:  # noqa: BLE001 - anything else (PanicException included) is the bug
        raise AssertionError(f"{what} raised {type(e).__module__}.{type(e).__name__}: {e}") from e


@st.composite
def cases(draw) -> tuple[str, Any, Any, dict]:
    name, fmt = draw(st.sampled_from(TARGETS))
    enc = encoder(name, fmt)
    conversation = draw(messages_for(_control_strings(enc)))
    return name, fmt, conversation, draw(OPTIONS)


def _kwargs(enc: chatids.Encoder) -> dict[str, Any]:
    import datetime as dt

    return {"now": dt.datetime(*support.FROZEN_NOW)} if enc.reads_clock else {}


def check_case(case: tuple[str, Any, Any, dict]) -> None:
    """One drawn case through every entry point (the invariants in the module doc)."""
    name, fmt, conversation, options = case
    enc = encoder(name, fmt)
    kw = {**_kwargs(enc), "system": options["system"], "merge_consecutive": options["merge_consecutive"],
          "continue_final_message": options["continue_final_message"]}
    agp, sanitize = options["add_generation_prompt"], options["sanitize_control_tokens"]
    where = f"{name}{'/' + fmt if fmt else ''} {options}"

    ok, ids = outcome(lambda: enc.encode(conversation, agp, sanitize, **kw), f"{where}: encode")
    ok_d, detailed = outcome(lambda: enc.encode_detailed(conversation, agp, sanitize, **kw), f"{where}: encode_detailed")
    ok_b, batch = outcome(lambda: enc.encode_batch([conversation], agp, sanitize, **kw), f"{where}: encode_batch")
    ok_r, _ = outcome(lambda: enc.render(conversation, agp, **kw), f"{where}: render")
    outcome(lambda: enc.lint(conversation, agp, **kw), f"{where}: lint")
    assert ok == ok_d == ok_b, f"{where}: encode {ok}, encode_detailed {ok_d}, encode_batch {ok_b}: {ids!r} {detailed!r} {batch!r}"
    # render is the unsanitized prompt: it works exactly when unsanitized encoding does (sanitized
    # encoding may differ where a template acts on marked text: docs/security.md, "Where chatids differs from transformers on purpose").
    ok_u, _unsanitized = outcome(lambda: enc.encode(conversation, agp, False, **kw), f"{where}: encode unsanitized")
    assert ok_r == ok_u, f"{where}: render ok={ok_r}, unsanitized encode ok={ok_u}"
    if ok:
        assert detailed.ids.tolist() == ids.tolist() == batch[0].tolist()
        if sanitize:
            control = {i for _, i in enc.control_tokens}
            leaked = [int(t) for t, c in zip(detailed.ids, detailed.from_content) if c and int(t) in control]
            assert not leaked, f"{where}: control ids from caller text: {leaked}"

    good = [{"role": "user", "content": "hello"}]
    ok_c, collected = outcome(
        lambda: enc.encode_batch([conversation, good], agp, sanitize, on_error="collect", **kw), f"{where}: collect")
    if ok_c:
        assert (0 in collected.errors) == (not ok), f"{where}: collect errors {collected.errors} but encode ok={ok}"
        ok_g, good_ids = outcome(lambda: enc.encode(good, agp, sanitize, **kw), f"{where}: encode good")
        if ok_g:
            assert collected[1].tolist() == good_ids.tolist()
        if ok:
            assert collected[0].tolist() == ids.tolist()

    if enc.reference == "mistral-common" or options["continue_final_message"]:
        return
    skw = {k: v for k, v in kw.items() if k != "continue_final_message"}
    ok_s, session = outcome(lambda: enc.session(sanitize_control_tokens=sanitize, on_rewrite="reencode", **skw), f"{where}: session")
    if not ok_s:
        return
    for step in (good, conversation):
        before_ids, before_messages = session.ids.tolist(), session.messages
        appended, _ = outcome(lambda: session.append(step), f"{where}: append")
        if not appended:
            assert session.ids.tolist() == before_ids and session.messages == before_messages, f"{where}: a failed append changed the session"
            continue
        ok_e, expected = outcome(lambda: enc.encode(list(session.messages), False, sanitize, **skw), f"{where}: encode session messages")
        if ok_e:
            assert session.ids.tolist() == expected.tolist(), f"{where}: session ids differ from encode"


@settings(max_examples=EXAMPLES, derandomize=PROFILE == "ci", deadline=None, suppress_health_check=list(HealthCheck),
          print_blob=True)
@given(cases())
def test_every_entry_point_refuses_cleanly_or_agrees(case) -> None:
    check_case(case)
