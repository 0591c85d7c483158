"""Prefill: ``continue_final_message=True`` against transformers 5.24 on every shared checkpoint.

transformers appends a tag to the final message's text (the last text part of a content list),
renders, and cuts the prompt at the tag (``rstrip``-ing it when the template trimmed the text);
it raises when the conversation is empty, the final message has no content, the text does not
survive the template, or ``add_generation_prompt=True`` is given too. For every checkpoint and
every case below, chatids' ``render`` equals ``apply_chat_template(..., continue_final_message=True,
tokenize=False)`` and ``encode`` equals its ids with ``sanitize_control_tokens`` off and on; where
transformers raises, chatids raises ``ChatTemplateError``. Cases: final assistant text with
trailing spaces, leading spaces, newlines, nothing left after stripping, control tokens typed into
it; a final user message; content as a list of parts; Qwen3 with ``reasoning_content``; a tool
conversation (tools=, tool calls and results: the template path); ``encode_batch`` equals
per-conversation ``encode``. Expected ids always come from transformers at test time.
"""

from __future__ import annotations

from typing import Any

import pytest

import chatids
import support

WEATHER = support.WEATHER_TOOL
#: Checkpoints whose template renders tools (tests/test_tools.py checks the list).
TOOL_MODELS = {
    "llama-3.1-8b-instruct", "llama-3.2-3b-instruct", "qwen2.5-7b-instruct", "qwen3-0.6b",
    "mistral-7b-instruct-v0.3", "mistral-nemo-instruct-2407", "deepseek-v3", "gpt-oss-120b",
}


def head(system: bool = False) -> list[dict]:
    msgs = [{"role": "system", "content": "You are terse."}] if system else []
    return msgs + [
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "Seven."},
        {"role": "user", "content": "Write a haiku about rain."},
    ]


def assistant(content: Any, **extra: Any) -> dict:
    return {"role": "assistant", "content": content, **extra}


def cases(model: support.Model) -> dict[str, tuple[list[dict], dict[str, Any]]]:
    """name -> (messages, template arguments)."""
    ctrl = " ".join(t for t, _ in model.enc.control_tokens[:6])
    out: dict[str, tuple[list[dict], dict[str, Any]]] = {
        "plain": (head() + [assistant("Soft rain on")], {}),
        "trailing_spaces": (head() + [assistant("Soft rain on   ")], {}),
        "leading_spaces": (head() + [assistant("   Soft rain on")], {}),
        "newlines": (head() + [assistant("Soft rain\non the roof\n\n")], {}),
        "leading_newline": (head() + [assistant("\nSoft rain")], {}),
        "only_spaces": (head() + [assistant("   ")], {}),
        "only_newlines": (head() + [assistant("\n\n")], {}),
        "empty": (head() + [assistant("")], {}),
        "with_system": (head(system=True) + [assistant("Soft rain on")], {}),
        "first_turn": (head()[2:] + [assistant("Here is")], {}),
        "control_tokens": (head() + [assistant(f"Soft {ctrl} rain")], {}),
        "control_tokens_at_end": (head() + [assistant(f"Soft rain {ctrl}")], {}),
        "final_user": (head(), {}),
        "final_user_trailing_space": (head()[:2] + [{"role": "user", "content": "Write a haiku about "}], {}),
        "parts": (head() + [assistant([{"type": "text", "text": "Soft rain "}])], {}),
        "parts_two": (head() + [assistant([{"type": "text", "text": "Soft "}, {"type": "text", "text": "rain on"}])], {}),
        "unicode": (head() + [assistant("Ünïcödé 日本語 🙂 ")], {}),
    }
    if model.name == "qwen3-0.6b":
        out["reasoning"] = (head() + [assistant("Soft rain on", reasoning_content="A haiku has 5-7-5.")], {})
        out["reasoning_trailing_space"] = (head() + [assistant("Soft ", reasoning_content="Think. ")], {})
        out["reasoning_no_thinking"] = (head() + [assistant("Soft rain")], {"enable_thinking": False})
    if model.name in TOOL_MODELS:
        # Content "" on the call (transformers drops None-valued keys; Qwen3/DeepSeek need the key).
        calls = [{"id": "abcDEF123", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]
        tool_conv = [
            {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": "", "tool_calls": calls},
            {"role": "tool", "tool_call_id": "abcDEF123", "name": "get_weather", "content": "4 C, snow"},
            assistant("In Oslo it is "),
        ]
        out["tools"] = (tool_conv, {"tools": [WEATHER]})
        out["tools_messages_only"] = (tool_conv, {})
        out["tools_argument_only"] = (head() + [assistant("Soft rain on ")], {"tools": [WEATHER]})
    return out


def ref_text(model: support.Model, messages: list[dict], **kw: Any) -> str:
    return model.ref_text(messages, False, continue_final_message=True, **kw)


def check(model: support.Model, messages: list[dict], kw: dict[str, Any]) -> str:
    """chatids equals transformers with continue_final_message=True, or both raise.
    Returns "compared" or "raised"."""
    try:
        expected_text = ref_text(model, messages, **kw)
    except Exception as e:
        for sanitize in (False, True):
            with pytest.raises(chatids.ChatTemplateError):
                model.ids(messages, False, sanitize, continue_final_message=True, **kw)
        with pytest.raises(chatids.ChatTemplateError):
            model.text(messages, continue_final_message=True, **kw)
        with pytest.raises(chatids.ChatTemplateError):
            model.enc.encode_detailed(messages, False, True, **model.ours_kwargs(continue_final_message=True, **kw))
        return "raised: " + type(e).__name__
    try:
        text = model.text(messages, continue_final_message=True, **kw)
    except chatids.ChatTemplateError as e:
        # Only for a documented reason (the template would drop or mangle part of the input),
        # and every entry point refuses it.
        assert any(p.search(str(e)) for p in support.POLICY_PATTERNS), str(e)
        for sanitize in (False, True):
            with pytest.raises(chatids.ChatTemplateError):
                model.ids(messages, False, sanitize, continue_final_message=True, **kw)
        return "rejected_by_policy"
    assert text == expected_text
    for sanitize in (False, True):
        ref = model.ref_ids(messages, False, sanitize, continue_final_message=True, **kw)
        ours = model.ids(messages, False, sanitize, continue_final_message=True, **kw)
        assert ours == ref, (sanitize, support._first_difference(ours, ref))
    detailed = model.enc.encode_detailed(messages, False, True, **model.ours_kwargs(continue_final_message=True, **kw))
    assert detailed.ids.tolist() == ours
    support.assert_no_control_from_content(model, messages, False, continue_final_message=True, **kw)
    return "compared"


def test_prefill_matches_transformers(model: support.Model) -> None:
    results = {name: check(model, messages, kw) for name, (messages, kw) in cases(model).items()}
    compared = [n for n, r in results.items() if r == "compared"]
    # The basic cases are continued by every template (each one renders the final text).
    for name in ("plain", "trailing_spaces", "leading_spaces", "newlines", "unicode", "final_user"):
        assert results[name] == "compared", (name, results[name], results)
    for name in ("control_tokens", "control_tokens_at_end"):
        if model.name == "qwen3-0.6b":
            # Its first control tokens are </think> and <think>: the template splits the final
            # answer at </think>, the text does not survive, and transformers raises.
            assert results[name].startswith("raised"), results
        else:
            assert results[name] == "compared", results
    if model.format in ("mistral-v3", "mistral-v3-tekken"):
        # The system message would go into the last user turn, which is not the final message: dropped.
        assert results["with_system"] == "rejected_by_policy", results
    elif model.format == "gemma":
        assert results["with_system"].startswith("raised"), results  # "System role not supported"
    else:
        assert results["with_system"] == "compared", results
    if model.format == "gemma-3":  # the one template that reads content parts
        assert results["parts"] == results["parts_two"] == "compared", results
    assert len(compared) >= 10, results
    # A prefill prompt is the full conversation's prompt cut inside the final message: it is a
    # prefix of the text without prefill whenever the template keeps the text as is.
    messages = cases(model)["plain"][0]
    full = model.text(messages)
    assert full.startswith(model.text(messages, continue_final_message=True))
    assert model.text(messages, continue_final_message=True).endswith("Soft rain on")


def test_prefill_reasoning_qwen3() -> None:
    """Qwen3: the final assistant message's thinking block is written, the answer continued."""
    model = support.load_model("qwen3-0.6b")
    messages, kw = cases(model)["reasoning"]
    assert check(model, messages, kw) == "compared"
    text = model.text(messages, continue_final_message=True)
    assert "<think>\nA haiku has 5-7-5.\n</think>" in text and text.endswith("Soft rain on")


def test_prefill_trimming_templates() -> None:
    """Llama 3 (``| trim``) and Mistral v0.3 (``| trim`` on answers) cut trailing spaces from the
    final text: transformers then rstrips the prompt at the tag, and chatids does the same."""
    for name in ("meta-llama-3-8b-instruct", "llama-3.1-8b-instruct", "mistral-7b-instruct-v0.3"):
        model = support.load_model(name)
        all_cases = cases(model)
        for case in ("trailing_spaces", "leading_spaces", "newlines", "only_spaces"):
            messages, kw = all_cases[case]
            assert check(model, messages, kw) == "compared", (name, case)
        text = model.text(all_cases["trailing_spaces"][0], continue_final_message=True)
        assert text.endswith("Soft rain on") and not text.endswith(" ")


def test_prefill_with_tools() -> None:
    for name in sorted(TOOL_MODELS):
        model = support.load_model(name)
        all_cases = cases(model)
        for case in ("tools", "tools_messages_only", "tools_argument_only"):
            messages, kw = all_cases[case]
            result = check(model, messages, kw)
            if name != "deepseek-v3":  # its template wants content None on the call, see test_tools.py
                assert result == "compared", (name, case, result)


def test_prefill_errors(model: support.Model) -> None:
    """add_generation_prompt=True, an empty conversation, a final message without content: both raise."""
    messages = cases(model)["plain"][0]
    with pytest.raises(ValueError):
        model.ref_text(messages, True, continue_final_message=True)
    for fn in (model.text, model.ids):
        with pytest.raises(chatids.ChatTemplateError):
            fn(messages, True, continue_final_message=True)
    with pytest.raises(chatids.ChatTemplateError):
        model.enc.encode_batch([messages], add_generation_prompt=True, **model.ours_kwargs(continue_final_message=True))
    for bad in ([], head() + [{"role": "assistant"}], head() + [{"role": "assistant", "content": None}]):
        with pytest.raises(ValueError):
            ref_text(model, bad)
        for fn in (model.text, model.ids):
            with pytest.raises(chatids.ChatTemplateError):
                fn(bad, continue_final_message=True)


def test_prefill_batch_equals_encode(model: support.Model) -> None:
    convs = []
    for name, (messages, kw) in cases(model).items():
        if kw:
            continue
        try:
            ref_text(model, messages)
            model.text(messages, continue_final_message=True)
        except Exception:  # transformers raises ValueError, TypeError, ...; chatids ChatTemplateError
            continue
        convs.append(messages)
    assert len(convs) >= 8
    for sanitize in (False, True):
        batch = model.enc.encode_batch(
            convs, sanitize_control_tokens=sanitize, **model.ours_kwargs(continue_final_message=True)
        )
        assert len(batch) == len(convs)
        for i, messages in enumerate(convs):
            assert batch[i].tolist() == model.ids(messages, False, sanitize, continue_final_message=True)
            assert batch[i].tolist() == model.ref_ids(messages, False, sanitize, continue_final_message=True)
    # on_error="collect": a conversation that cannot be continued is recorded, the others encoded.
    bad = head() + [{"role": "assistant", "content": None}]
    batch = model.enc.encode_batch(
        [convs[0], bad, convs[1]], on_error="collect", **model.ours_kwargs(continue_final_message=True)
    )
    assert set(batch.errors) == {1}
    assert batch[0].tolist() == model.ref_ids(convs[0], continue_final_message=True)
    assert batch[2].tolist() == model.ref_ids(convs[1], continue_final_message=True)


def test_prefill_takes_only_a_bool() -> None:
    """transformers also takes a field name (``continue_final_message="reasoning_content"``);
    chatids takes only the bool and refuses anything else rather than guess."""
    model = support.load_model("qwen3-0.6b")
    messages = head() + [assistant("Soft", reasoning_content="Think")]
    for value in ("content", "reasoning_content", 1):
        with pytest.raises(TypeError):
            model.text(messages, continue_final_message=value)
        with pytest.raises(TypeError):
            model.ids(messages, continue_final_message=value)
