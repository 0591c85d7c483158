"""Malformed and extreme inputs, the error each must get, and a runner over every entry point.

Each :class:`Case` is a conversation (or template arguments) a caller might pass by mistake and
the error it must get: :class:`chatids.ChatTemplateError` (or ``TypeError``) whose text matches
``error``, which names the message index and the field. :func:`check` sends it through every
public entry point of one encoder (``encode``, ``encode_detailed``, training ``encode`` with a
mask, ``render``, ``lint``, ``encode_batch`` raising and collecting, and ``Session.append``;
:data:`BAD_COMPLETIONS` go through ``Session.append_completion``),
and checks that each refuses it with that error and returns nothing partial: the batch raises
naming the conversation, ``on_error="collect"`` records it and encodes the other conversation
exactly, and the session is unchanged after the failed append.

:data:`EXTREMES` are valid inputs at the edges (NUL characters, 100,000 messages, 100 MB of
content, nesting just under the limit) that must encode.

``python tests/malformed_corpus.py`` runs everything on every shared checkpoint route in this
process and exits 0 only if every case holds; tests/test_malformed.py runs it in a subprocess
(so a crash or abort shows as an exit status) and runs the cases in-process for readable
failures. Needs ``CHATIDS_MODELS_DIR``.
"""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import chatids

U = {"role": "user", "content": "Hi"}
A = {"role": "assistant", "content": "Hello."}
GOOD = [U]


def _deep(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"k": value}
    return value


def _call(arguments: Any, name: Any = "get_weather") -> dict:
    call = {"id": "call00001", "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "tool_calls": [call]}


@dataclass
class Case:
    """A malformed input and the error every entry point must give for it."""

    name: str
    messages: Any
    #: Regex the error text must match (``re.search``).
    error: str
    #: Template arguments passed with it.
    kwargs: dict = field(default_factory=dict)
    #: Only for encoders whose route/format name matches this regex (None: all).
    only: Optional[str] = None
    #: Not for encoders whose route/format name matches this regex (the input is valid there).
    skip: Optional[str] = None


CASES: list[Case] = [
    # The conversation and message shapes.
    Case("conversation is a str", "hello", r"^messages must be a list of dicts, not str"),
    Case("conversation is None", None, r"^messages must be a list of dicts, not NoneType"),
    Case("conversation is a dict", {"role": "user", "content": "x"}, r"^messages must be a list of dicts, not dict"),
    Case("message is a str", [U, "hi"], r"^message 1: a message must be a dict with 'role' and 'content', not str"),
    Case("message is None", [U, None], r"^message 1: a message must be a dict .*, not NoneType"),
    Case("message is a list", [U, [["user", "hi"]]], r"^message 1: a message must be a dict .*, not list"),
    Case("missing role", [U, {"content": "x"}], r"^message 1: the message has no 'role'"),
    Case("role None", [{"role": None, "content": "x"}], r"^message 0: the message has no 'role'"),
    Case("role int", [{"role": 3, "content": "x"}], r"^message 0: 'role' must be a str, not int"),
    Case("role bytes", [{"role": b"user", "content": "x"}], r"^message 0: .*role.* bytes"),
    Case("role list", [{"role": ["user"], "content": "x"}], r"^message 0: 'role' must be a str, not list"),
    Case("content int", [{"role": "user", "content": 5}], r"^message 0: 'content' must be a str or a list .*, not int"),
    Case("content float NaN", [{"role": "user", "content": math.nan}], r"^message 0: .*content.*(float|NaN)"),
    Case("content bytes", [{"role": "user", "content": b"x"}], r"^message 0: .*content.*bytes"),
    Case("content dict", [{"role": "user", "content": {"text": "x"}}], r"^message 0: 'content' must be a str or a list .*, not dict"),
    Case("content nested lists", [{"role": "user", "content": [["a"]]}], r"^message 0: content part 0 must be a dict, not list"),
    Case("content part without type", [{"role": "user", "content": [{"text": "x"}]}], r"^message 0: content part 0 has no 'type'"),
    Case("content text part without text", [{"role": "user", "content": [{"type": "text"}]}],
         r"^message 0: content part 0 of type 'text' has no 'text'"),
    Case("content text part int", [{"role": "user", "content": [{"type": "text", "text": 3}]}],
         r"^message 0: 'content\[0\]\.text' must be a str, not int"),
    Case("lone surrogate in content", [{"role": "user", "content": "a\ud800b"}], r"^message 0: .*content.* not valid text.*surrogates"),
    Case("lone surrogate in role", [{"role": "us\udc00er", "content": "x"}], r"^message 0: .*role.* not valid text.*surrogates"),
    Case("lone surrogate in a part", [{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}],
         r"^message 0: .*content.* not valid text.*surrogates"),
    Case("train not a bool", [{"role": "user", "content": "x", "train": "yes"}], r"^message 0: 'train' must be a bool, not str"),
    # Tool calls.
    Case("tool_calls a str", [U, {"role": "assistant", "tool_calls": "get_weather()"}],
         r"^message 1: 'tool_calls' must be a list of calls, not str"),
    Case("tool call a list", [U, {"role": "assistant", "tool_calls": [["get_weather"]]}], r"^message 1: tool_calls\[0\] must be a dict"),
    Case("tool call function a str", [U, {"role": "assistant", "tool_calls": [{"function": "get_weather"}]}],
         r"^message 1: tool_calls\[0\]\.function must be a dict, not str"),
    Case("tool call without name", [U, {"role": "assistant", "tool_calls": [{"type": "function", "function": {"arguments": {}}}]}],
         r"^message 1: tool_calls\[0\]\.function has no 'name'"),
    Case("tool call name int", [U, _call({}, name=7)], r"^message 1: tool_calls\[0\]\.function\.name must be a str, not int"),
    Case("tool call name empty", [U, _call({}, name="")], r"^message 1: tool_calls\[0\]\.function\.name is empty"),
    # mistral-common keeps an arguments string that is not JSON verbatim (tests/test_mistral_common.py
    # compares it), so only the template routes refuse it.
    Case("invalid JSON arguments", [U, _call('{"city": "Paris"')], r"^message 1: tool_calls\[0\]\.function\.arguments is not valid JSON",
         skip="mistral-common"),
    Case("arguments a list", [U, _call([1, 2])],
         r"^message 1: (tool_calls\[0\]\.function\.arguments must be a dict or a JSON string, not list"
         r"|tool call 0: 'function\.arguments' must be a dict or a JSON string \(mistral-common's ToolCall\))"),
    Case("arguments nested 100,000 deep", [U, _call(_deep(100_000))],
         r"^message 1: tool_calls\[0\]\.function\.arguments\.k\.k.*nest deeper than 128 levels"),
    Case("JSON string arguments nested 10,000 deep", [U, _call('{"k":' * 10_000 + "1" + "}" * 10_000)],
         r"^message 1: (tool_calls\[0\]\.function\.arguments is not valid JSON \(recursion limit"
         r"|chatids cannot reproduce Python's json.loads here: JSON nested too deeply)"),
    Case("arguments with bytes", [U, _call({"city": b"Paris"})], r"^message 1: .*bytes", only="jinja|mistral-common"),
    Case("arguments with a surrogate", [U, _call({"city": "\ud800"})], r"^message 1: .*not valid text", only="jinja|mistral-common"),
    # A tool result without a call, where the format requires one.
    Case("tool result without a call", [U, {"role": "tool", "content": "42", "tool_call_id": "call_1"}],
         r"(Unexpected role 'tool' after role 'user'|no previous assistant message with a tool call)",
         only="mistral-common|gpt-oss"),
    # Template arguments.
    Case("tools with bytes", [U], r"^tools.*bytes", kwargs={"tools": [{"type": "function", "function": {"name": b"f"}}]},
         only="jinja|mistral-common"),
    Case("tools nested 100,000 deep", [U], r"nest deeper than 128 levels", kwargs={"tools": [_deep(100_000)]}, only="jinja"),
    Case("template argument a surrogate", [U], r"^template argument date_string: .*surrogates not allowed", kwargs={"date_string": "\ud800"}, only="jinja"),
]


@dataclass
class Extreme:
    """A valid input at the edges: it must encode, and ``check`` holds on the result."""

    name: str
    make: Callable[[], Any]
    check: Callable[[Any], bool]
    #: Run only in the subprocess corpus (seconds of work, hundreds of MB).
    heavy: bool = False
    #: Only for encoders whose label matches this regex (None: all).
    only: Optional[str] = None


def _many(n: int) -> list[dict]:
    return [{"role": ("user", "assistant")[i % 2], "content": f"turn {i}"} for i in range(n)]


#: The encoders the heavy extremes run on: a native format per tokenizer kind (byte-level BPE,
#: SentencePiece), the Jinja path, and the mistral-common route.
HEAVY = "^(llama-3.1-8b-instruct/transformers/llama|llama-2|gpt-oss|mistral-v7/)"

EXTREMES: list[Extreme] = [
    Extreme("NUL characters in content", lambda: [{"role": "user", "content": "a\x00b\x00"}], lambda ids: len(ids) > 0),
    Extreme("arguments nested 100 deep", lambda: [U, _call(_deep(100)), {"role": "tool", "tool_call_id": "call00001", "content": "ok"}],
            lambda ids: len(ids) > 200, only="llama-3.1|qwen|gpt-oss|mistral-common"),
    Extreme("100,000 messages", lambda: _many(100_000), lambda ids: len(ids) > 300_000, heavy=True, only=HEAVY),
    Extreme("100 MB content", lambda: [{"role": "user", "content": ("The quick brown fox jumps over the lazy dog. " * 2_330_000)[:100_000_000]}],
            lambda ids: len(ids) > 10_000_000, heavy=True, only=HEAVY),
    Extreme("10 MB of one word", lambda: [{"role": "user", "content": "a" * 10_000_000}], lambda ids: len(ids) > 1000, heavy=True,
            only=HEAVY),
]

ALLOWED = (chatids.ChatTemplateError, TypeError)


def _refused(what: str, call: Callable[[], Any], pattern: str, prefix: str = "") -> str:
    try:
        result = call()
    except ALLOWED as e:
        text = str(e)
        if prefix and not text.startswith(prefix):
            raise AssertionError(f"{what}: error {text[:200]!r} does not start with {prefix!r}")
        if not re.search(pattern, text[len(prefix):]):
            raise AssertionError(f"{what}: error {text[:300]!r} does not match {pattern!r}")
        return text
    raise AssertionError(f"{what}: no error, returned {type(result).__name__} {str(result)[:100]}")


def _lint_refuses(what: str, enc: chatids.Encoder, m: Any, kw: dict, pattern: str) -> None:
    """``lint`` raises for input it cannot read at all, and reports what the encoder refuses as a
    ``refused`` finding naming the message."""
    try:
        findings = enc.lint(m, True, **kw)
    except ALLOWED as e:
        if not re.search(pattern, str(e)):
            raise AssertionError(f"{what}: error {str(e)[:300]!r} does not match {pattern!r}") from e
        return
    refused = [f for f in findings if f.code == "refused"]
    assert refused, f"{what}: no error and no 'refused' finding: {findings}"
    f = refused[0]
    text = f.explanation if f.message is None else f"message {f.message}: {f.explanation}"
    assert re.search(pattern, text), f"{what}: finding {text[:300]!r} does not match {pattern!r}"


def label(enc: chatids.Encoder, name: str) -> str:
    return f"{name}/{enc.reference}/{enc.format}"


def applies(case: Case, enc_label: str) -> bool:
    if case.skip is not None and re.search(case.skip, enc_label):
        return False
    return case.only is None or re.search(case.only, enc_label) is not None


def check(enc: chatids.Encoder, enc_label: str, case: Case, clock: Optional[dict] = None) -> str:
    """Every entry point refuses ``case`` with its error and returns nothing partial; returns
    the error text. ``clock``: ``now=`` for templates that read the clock."""
    m, kw, pat = case.messages, {**case.kwargs, **(clock or {})}, case.error
    what = f"{enc_label}: {case.name}"
    text = _refused(f"{what}: encode", lambda: enc.encode(m, True, **kw), pat)
    _refused(f"{what}: encode sanitize=False", lambda: enc.encode(m, True, False, **kw), pat)
    _refused(f"{what}: encode_detailed", lambda: enc.encode_detailed(m, True, **kw), pat)
    if not re.search("mistral-common", enc_label):
        _refused(f"{what}: encode with a mask", lambda: enc.encode(m, False, return_assistant_mask=True, **kw),
                 pat + "|nothing to train on")
    _refused(f"{what}: render", lambda: enc.render(m, True, **kw), pat)
    _lint_refuses(f"{what}: lint", enc, m, kw, pat)
    if case.kwargs:  # template arguments are shared by the whole batch: no conversation to name
        _refused(f"{what}: encode_batch", lambda: enc.encode_batch([GOOD, m], True, **kw), pat)
    else:
        batch_error = _refused(f"{what}: encode_batch", lambda: enc.encode_batch([GOOD, m], True), r".", prefix="conversation 1")
        rest = re.sub(r"^conversation 1(, |: )", "", batch_error)
        assert re.search(pat, rest), f"{what}: encode_batch error {batch_error[:300]!r} does not match {pat!r}"
    if not case.kwargs:
        good_ids = enc.encode(GOOD, True, **kw)
        batch = enc.encode_batch([GOOD, m, GOOD], True, on_error="collect", **kw)
        assert set(batch.errors) == {1}, f"{what}: collect recorded {batch.errors}"
        assert re.search(pat, batch.errors[1]), f"{what}: collected {batch.errors[1]!r}"
        assert batch[0].tolist() == good_ids.tolist() == batch[2].tolist() and len(batch[1]) == 0, f"{what}: collect output"
        if enc.reference != "mistral-common" and isinstance(m, list) and len(m) > 0:
            session = enc.session([GOOD[0]], **kw)
            before = session.ids.tolist()
            _refused(f"{what}: Session.append", lambda: session.append(m[1:] if m[0] == U else m), r".")
            assert session.ids.tolist() == before and len(session.messages) == 1, f"{what}: the failed append changed the session"
            assert session.generation_prompt().tolist() == good_ids.tolist()
    return text


#: Completion ids that are not tokens of the vocabulary, and the error ``append_completion`` gives.
BAD_COMPLETIONS: list[tuple[str, list[Any], str]] = [
    ("negative id", [-1], r"^message 1: completion id -1 \(position 0\) is not a token id"),
    ("id beyond 32 bits", [5, 2**40], r"^message 1: completion id 1099511627776 \(position 1\) is not a token id"),
    ("id outside the vocabulary", [5, 10**7], r"^message 1: completion id 10000000 \(position 1\) is not in the vocabulary of \d+ ids"),
    ("id a str", ["a"], r"^message 1: completion ids must be ints, not str \(position 0\)"),
    ("id None", [None], r"^message 1: completion ids must be ints, not NoneType \(position 0\)"),
]


def check_completions(enc: chatids.Encoder, enc_label: str, clock: dict) -> int:
    """``Session.append_completion`` refuses ids that are not tokens and keeps the session as it was."""
    for name, ids, pattern in BAD_COMPLETIONS:
        session = enc.session([U], **clock)
        before = session.ids.tolist()
        _refused(f"{enc_label}: append_completion, {name}", lambda: session.append_completion(ids, {"role": "assistant", "content": "x"}),
                 pattern)
        assert session.ids.tolist() == before and len(session.messages) == 1, f"{enc_label}: {name}: the session changed"
    return len(BAD_COMPLETIONS)


def encoders() -> list[tuple[str, chatids.Encoder]]:
    """One encoder per format family and route present under ``CHATIDS_MODELS_DIR``."""
    base = Path(os.environ.get("CHATIDS_MODELS_DIR", Path(__file__).resolve().parents[2] / "shared" / "models"))
    out = []
    for name, fmt in [("llama-3.1-8b-instruct", None), ("qwen2.5-7b-instruct", None), ("llama-2-7b-chat", None),
                      ("mistral-small-24b-instruct-2501", None), ("gemma-3-it", None), ("gpt-oss-120b", None),
                      ("deepseek-v3", None), ("llama-3.1-8b-instruct", "jinja")]:
        path = base / name
        if (path / "tokenizer.json").is_file():
            enc = chatids.Encoder.from_pretrained(path, format=fmt) if fmt else chatids.Encoder.from_pretrained(path)
            out.append((label(enc, name), enc))
    try:
        import mistral_common
    except ImportError:
        return out
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="chatids-malformed-"))
    (d / "tokenizer.model.v7").symlink_to(Path(mistral_common.__file__).parent / "data" / "mistral_instruct_tokenizer_241114.model.v7")
    enc = chatids.Encoder.from_pretrained(d)
    out.append((label(enc, "mistral-v7"), enc))
    return out


def run(heavy: bool = True) -> tuple[int, list[str]]:
    """Every case on every encoder; returns (cases checked, failures)."""
    checked, failures = 0, []
    import datetime as dt

    for enc_label, enc in encoders():
        clock = {"now": dt.datetime(2025, 1, 30)} if enc.reads_clock else {}
        for case in CASES:
            if not applies(case, enc_label):
                continue
            try:
                check(enc, enc_label, case, clock)
            except AssertionError as e:
                failures.append(str(e))
            checked += 1
        if enc.reference != "mistral-common":
            try:
                checked += check_completions(enc, enc_label, clock)
            except AssertionError as e:
                failures.append(str(e))
        for extreme in EXTREMES:
            if (extreme.heavy and not heavy) or (extreme.only and not re.search(extreme.only, enc_label)):
                continue
            messages = extreme.make()
            try:
                ids = enc.encode(messages, **clock)
                if not extreme.check(ids):
                    failures.append(f"{enc_label}: {extreme.name}: {len(ids)} ids")
                batch = enc.encode_batch([messages], **clock)
                if batch[0].tolist() != ids.tolist():
                    failures.append(f"{enc_label}: {extreme.name}: encode_batch differs")
            except ALLOWED as e:
                failures.append(f"{enc_label}: {extreme.name}: refused: {str(e)[:200]}")
            checked += 1
    return checked, failures


if __name__ == "__main__":
    sys.setrecursionlimit(10_000)
    n, failed = run(heavy="--light" not in sys.argv)
    for f in failed:
        print("FAIL", f)
    print(f"malformed corpus: {n} cases, {len(failed)} failures")
    sys.exit(1 if failed else 0)
