"""Append-only sessions (``Encoder.session``): appending equals a full encode.

* Property, on every shared checkpoint and corpus file (tool conversations with their tools):
  a conversation split at random points and appended chunk by chunk gives exactly
  ``enc.encode`` of the whole conversation (``on_rewrite="reencode"``); with the default
  ``on_rewrite="error"`` an append either gives the same ids or raises because the template
  rewrote earlier ids, and never raises for a format that ``append_rewrites`` declares
  prefix-preserving. ``generation_prompt()`` equals ``encode(..., add_generation_prompt=True)``.
* Hypothesis: random conversations (roles, whitespace, control-token text) and split points.
* ``append_completion``: the model's ids are kept verbatim; when they are the template's own
  tokens of the turn the session equals a full encode; a missing stop token is added.
* The non-prefix-preserving cases each format declares really rewrite (Qwen3 reasoning,
  Mistral v3 system prompt), and ``on_rewrite`` handles them.
* Errors name the message index in the whole conversation; a failed append leaves the
  session unchanged; the mistral-common route works by re-encoding.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chatids
import support

FILES = support.corpus_files() or ["<no corpus>"]


def _kwargs(model: support.Model, row: dict) -> dict[str, Any]:
    tools = row.get("tools") or None
    return model.ours_kwargs(**({} if tools is None else {"tools": tools}))


def _chunks(messages: list[dict], rng: random.Random) -> list[list[dict]]:
    """Split ``messages`` into 1..4 consecutive non-empty chunks at random points."""
    n = len(messages)
    cuts = sorted(rng.sample(range(1, n), min(n - 1, rng.randint(0, 3)))) if n > 1 else []
    bounds = [0, *cuts, n]
    return [messages[a:b] for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("corpus_file", FILES)
def test_appending_equals_a_full_encode(model: support.Model, corpus_file: str) -> None:
    support.require_corpus(corpus_file)
    rng = random.Random(f"{model.name}/{corpus_file}")
    enc = model.enc
    declared = enc.append_rewrites
    compared = raised = refused = 0
    rows = support.corpus_rows(corpus_file)
    for row in rows:
        kw = _kwargs(model, row)
        messages = row["messages"]
        try:
            full = enc.encode(messages, **kw).tolist()
            prompt = enc.encode(messages, add_generation_prompt=True, **kw).tolist()
        except chatids.ChatTemplateError:
            refused += 1
            continue
        chunks = _chunks(messages, rng)
        # Re-encoding policy: always equal to the full encode, at every step.
        session = enc.session(**kw, on_rewrite="reencode")
        pending: list[dict] = []
        for k, chunk in enumerate(chunks):
            before = session.ids.tolist()
            try:
                added = session.append(pending + chunk)
            except chatids.ChatTemplateError as e:
                # The template refuses this prefix on its own (e.g. tools before the first
                # user message): the session is unchanged and the chunk waits for the next.
                assert "not prefix-preserving" not in str(e)
                assert session.ids.tolist() == before
                pending += chunk
                continue
            pending = []
            assert session.ids[session.start :].tolist() == added.tolist()
            assert session.ids[: session.start].tolist() == before[: session.start]
            # The generation prompt after each append (planned by the append's own render
            # where the template splits): equal to a full encode of the messages so far.
            so_far = messages[: sum(len(c) for c in chunks[: k + 1])]
            try:
                expected = enc.encode(so_far, add_generation_prompt=True, **kw).tolist()
            except chatids.ChatTemplateError:
                with pytest.raises(chatids.ChatTemplateError):
                    session.generation_prompt()
            else:
                assert session.generation_prompt().tolist() == expected
        assert not pending
        assert session.ids.tolist() == full
        assert session.generation_prompt().tolist() == prompt
        compared += 1
        # Default policy: equal, or a rewrite error; never an error where none is declared.
        session = enc.session(**kw)
        try:
            for chunk in chunks:
                session.append(chunk)
        except chatids.ChatTemplateError as e:
            if "not prefix-preserving" not in str(e):
                continue  # the template refuses this prefix on its own (checked above)
            assert declared != [], f"{enc.format} declares no rewrites, but: {e}"
            raised += 1
            continue
        assert session.ids.tolist() == full
    assert compared > 0 or refused == len(rows), "nothing compared"
    print(f"{model.name} {corpus_file}: {compared} compared, {raised} rewrites raised")


def _assistant_turn_ids(enc: chatids.Encoder, messages: list[dict], kw: dict[str, Any]) -> list[int]:
    """The ids of the last message's body (what the model generates), from the template."""
    chat = enc.encode(messages, return_assistant_mask=True, train_on="last_assistant", **kw)
    ids, mask = chat.ids, chat.assistant_mask
    return ids[mask == 1].tolist()


@pytest.mark.parametrize("corpus_file", ["glaive_toolcall_en.jsonl", "hh_rlhf_harmless_base_test.jsonl"])
def test_completion_ids_are_kept_and_match_the_template(model: support.Model, corpus_file: str) -> None:
    support.require_corpus(corpus_file)
    enc = model.enc
    if enc.reference == "mistral-common":
        pytest.fail("the model fixture is the transformers route")
    stops = set(enc.stop_token_ids)
    checked = exact_checked = 0
    for row in support.corpus_rows(corpus_file)[:12]:
        kw = _kwargs(model, row)
        messages = row["messages"]
        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant" and i > 0]
        if not turns:
            continue
        k = turns[-1]
        history, reply = messages[:k], messages[k]
        try:
            session = enc.session(history, **kw)
            prompt = session.generation_prompt().tolist()
            full = enc.encode(messages[: k + 1], **kw).tolist()
            completion = _assistant_turn_ids(enc, messages[: k + 1], kw)
        except chatids.ChatTemplateError:
            continue
        if full[: len(prompt)] == prompt and completion:
            # The template's own tokens of the turn: the session equals a full encode.
            exact = enc.session(history, **kw)
            exact.append_completion(completion, reply)
            assert exact.ids.tolist() == full, f"{model.name}: completion session differs from the full encode"
            # Without the stop token (engines often drop it): the template's token is added.
            if completion[-1] in stops:
                cut = enc.session(history, **kw)
                cut.append_completion(completion[:-1], reply)
                assert cut.ids.tolist() == full
            exact_checked += 1
        # (Qwen3 and gpt-oss write the last assistant turn unlike their generation prompt:
        # the model's ids are still kept, below.)
        # Ids the template would never produce are kept verbatim, and appending continues.
        odd = [int(i) for i in enc.encode([{"role": "user", "content": "x y z"}], **kw)[-3:]]
        raw = enc.session(history, **kw)
        stop = completion[-1:] if completion and completion[-1] in stops else []
        raw.append_completion(odd + stop, reply)
        got = raw.ids.tolist()
        assert got[len(prompt) : len(prompt) + len(odd)] == odd
        checked += 1
        nxt = {"role": "user", "content": "Thanks, and next?"}
        try:
            added = raw.append(nxt).tolist()
        except chatids.ChatTemplateError as e:
            assert "not prefix-preserving" in str(e)
            continue
        tail = enc.encode(messages[: k + 1] + [nxt], **kw).tolist()[len(full) :]
        assert added[-len(tail) :] == tail if tail else True
    assert checked > 0, "no completion was checked"
    print(f"{model.name} {corpus_file}: {checked} completions kept verbatim, {exact_checked} equal to a full encode")


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_random_conversations_append_like_a_full_encode(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(support.MODEL_NAMES))
    model = support.load_model(name)
    enc = model.enc
    controls = [t for t, _ in enc.control_tokens][:6] or ["<s>"]
    text = st.lists(
        st.one_of(st.sampled_from(controls + [" ", "\n", "  ", "\t", "ok", "é", "你好", "🙂"]), st.text(max_size=6)),
        max_size=6,
    ).map("".join)
    n = data.draw(st.integers(min_value=1, max_value=8))
    system = data.draw(st.booleans())
    messages = [{"role": "system", "content": data.draw(text)}] if system else []
    messages += [{"role": ("user", "assistant")[i % 2], "content": data.draw(text)} for i in range(n)]
    try:
        full = enc.encode(messages, **model.ours_kwargs()).tolist()
    except chatids.ChatTemplateError:
        return
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    session = enc.session(**model.ours_kwargs(), on_rewrite="reencode")
    pending: list[dict] = []
    for chunk in _chunks(messages, rng):
        try:
            session.append(pending + chunk)
            pending = []
        except chatids.ChatTemplateError:
            pending += chunk
    assert not pending
    assert session.ids.tolist() == full


def test_declared_rewrites_happen_and_on_rewrite_handles_them() -> None:
    qwen3 = support.load_model("qwen3-0.6b").enc
    assert qwen3.append_rewrites and "reasoning" in qwen3.append_rewrites[0]
    history = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "Two plus two is four."},
    ]
    follow = {"role": "user", "content": "And 3+3?"}
    session = qwen3.session(history)
    before = session.ids.copy()
    with pytest.raises(chatids.ChatTemplateError, match="not prefix-preserving"):
        session.append(follow)
    assert session.ids.tolist() == before.tolist() and len(session.messages) == 2, "a failed append changes nothing"
    session = qwen3.session(history, on_rewrite="reencode")
    added = session.append(follow)
    assert session.start < len(before)
    assert session.ids.tolist() == qwen3.encode(history + [follow]).tolist()
    assert added.tolist() == session.ids[session.start :].tolist()

    mistral = support.load_model("mistral-7b-instruct-v0.3").enc
    assert mistral.append_rewrites
    conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    session = mistral.session(conv)
    with pytest.raises(chatids.ChatTemplateError):
        # The template drops the system prompt once the conversation ends with the assistant.
        session.append({"role": "assistant", "content": "Hello"})
    for fmt_model in ("meta-llama-3-8b-instruct", "openhermes-2.5-mistral-7b", "gemma-3-it", "llama-2-7b-chat"):
        assert support.load_model(fmt_model).enc.append_rewrites == []
    assert support.load_model("gpt-oss-120b").enc.append_rewrites is None


def test_errors_name_the_message_in_the_whole_conversation() -> None:
    enc = support.load_model("llama-3.1-8b-instruct").enc
    session = enc.session([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    n = len(session)
    with pytest.raises(chatids.ChatTemplateError, match=r"message 3\b"):
        session.append([{"role": "user", "content": "c"}, {"role": "user", "content": 5}])
    assert len(session) == n and len(session.messages) == 2
    with pytest.raises(chatids.ChatTemplateError, match="on_rewrite"):
        enc.session(on_rewrite="ignore")
    empty = enc.session()
    with pytest.raises(chatids.ChatTemplateError):
        empty.generation_prompt()


@pytest.mark.parametrize("model_name", ["qwen2.5-7b-instruct", "llama-3.1-8b-instruct"])
def test_malformed_tool_calls_appended_later_are_refused(model_name: str) -> None:
    """A session checks the tool calls of the messages it has not seen (those it has were
    checked when appended, and its render memo recognizes them): a malformed call appended
    after well-formed ones is refused naming its index, the session unchanged, and a
    well-formed append still works after it."""
    enc = support.load_model(model_name).enc
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]

    def call(arguments: Any) -> dict[str, Any]:
        return {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": arguments}}]}

    kw = {"date_string": "26 Jul 2024"} if enc.format.startswith("llama-3.") else {}
    session = enc.session([{"role": "user", "content": "weather?"}], tools=tools, **kw)
    session.append([call({"city": "Paris"}), {"role": "tool", "content": "18 C"}])
    session.generation_prompt()
    n, count = len(session), len(session.messages)
    for arguments, problem in [("{not json", "is not valid JSON"), (5, "must be a dict or a JSON string")]:
        with pytest.raises(chatids.ChatTemplateError, match=rf"^message {count + 1}: tool_calls\[0\]\.function\.arguments {problem}"):
            session.append([{"role": "user", "content": "and London?"}, call(arguments)])
        assert len(session) == n and len(session.messages) == count
    good = [{"role": "user", "content": "and London?"}, call('{"city": "London"}'), {"role": "tool", "content": "12 C"}]
    session.append(good)
    messages = session.messages
    expected = enc.encode(messages, add_generation_prompt=True, tools=tools, **kw)
    assert session.generation_prompt().tolist() == expected.tolist()


def test_generation_prompt_does_not_change_the_session() -> None:
    model = support.load_model("qwen2.5-7b-instruct")
    enc = model.enc
    msgs = [{"role": "user", "content": "Hi"}]
    session = enc.session(msgs)
    ids = session.ids.copy()
    prompt = session.generation_prompt()
    assert prompt.tolist() == enc.encode(msgs, add_generation_prompt=True).tolist()
    assert session.ids.tolist() == ids.tolist()
    assert prompt.tolist() == model.ref_ids(msgs, True, sanitize=True)


def test_mistral_common_route_sessions_re_encode(tmp_path) -> None:
    mistral_common = pytest.importorskip("mistral_common")
    from pathlib import Path

    data = Path(mistral_common.__file__).parent / "data"
    src = next(iter(sorted(data.glob("mistral_instruct_tokenizer_*.model.v3"))), None)
    assert src is not None, "mistral-common ships its v3 tokenizer"
    (tmp_path / "tokenizer.model.v3").write_bytes(src.read_bytes())
    enc = chatids.Encoder.from_pretrained(tmp_path)
    assert enc.reference == "mistral-common"
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}]
    session = enc.session(msgs[:2])
    session.append(msgs[2:])
    assert session.ids.tolist() == enc.encode(msgs).tolist()
    # Completion ids are kept when they are mistral-common's encoding of the message; other
    # ids are a declared rewrite (the route re-encodes whole conversations).
    with pytest.raises(chatids.ChatTemplateError, match="differs from mistral-common's encoding"):
        session.append_completion([1, 2], {"role": "assistant", "content": "x"})
    assert session.ids.tolist() == enc.encode(msgs).tolist()
    prompt = session.generation_prompt().tolist()
    turn = enc.encode(msgs + [{"role": "assistant", "content": "See you."}]).tolist()[len(prompt):]
    session.append_completion(turn)
    assert session.messages[-1] == {"role": "assistant", "content": "See you."}
    assert session.ids.tolist() == prompt + turn
    assert isinstance(session.ids, np.ndarray)
