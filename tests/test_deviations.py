"""Where chatids deliberately differs from transformers, each case shown and pinned.

Every test here states transformers' behaviour (computed at test time) next to chatids', so a
change on either side is noticed.
"""

from __future__ import annotations

import datetime as dt

import pytest

import chatids
import support


def _load(name: str) -> support.Model:
    return support.load_model(name)


def test_sanitize_keeps_private_marker_characters():
    """transformers' sanitizer deletes U+F0000/U+F0001 from content (its private markers;
    Nerd Font icons live there). chatids keeps the text as given."""
    m = _load("meta-llama-3-8b-instruct")
    msgs = [{"role": "user", "content": "icon \U000f0001 here"}]
    ours = m.ids(msgs, sanitize=True)
    theirs = m.ref_ids(msgs, sanitize=True)
    stripped = m.ref_ids([{"role": "user", "content": "icon  here"}], sanitize=False)
    assert theirs == stripped, "transformers deletes the marker character"
    assert ours == m.ref_ids(msgs, sanitize=False), "chatids encodes the character as text"
    assert ours != theirs


def test_qwen3_inline_think_is_split_on_the_real_text():
    """Qwen3's template splits `<think>...</think>` out of assistant content and strips the
    newlines around it. transformers' sanitizer runs the template on marked text, so the split
    keeps marker characters that block the stripping: the prompt gets extra newlines. chatids
    renders the same text in both modes (the template's intended text)."""
    m = _load("qwen3-0.6b")
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>\nr\n</think>\n\nanswer"}]
    plain_text = m.ref_text(msgs)
    assert "<think>\nr\n</think>\n\nanswer" in plain_text
    theirs = m.tok.decode(m.ref_ids(msgs, sanitize=True))
    assert "<think>\n\nr\n\n</think>\n\n\n\nanswer" in theirs, theirs
    ours = m.ids(msgs, sanitize=True)
    assert ours == m.ref_ids(msgs, sanitize=False)
    assert m.tok.decode(ours) == plain_text


def test_qwen3_tool_response_user_message_is_recognised():
    """Qwen3 treats a user message wrapped in <tool_response> as a tool result when it looks for
    the last real query. Under transformers' sanitizer the markers hide the wrapping; chatids
    applies the template's test to the text itself, in both modes."""
    m = _load("qwen3-0.6b")
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "reasoning_content": "r"},
        {"role": "user", "content": "<tool_response>x</tool_response>"},
    ]
    theirs_plain = m.ref_ids(msgs, sanitize=False)
    theirs_sanitized = m.tok.decode(m.ref_ids(msgs, sanitize=True))
    assert "<think>\nr\n</think>" in m.tok.decode(theirs_plain)
    assert "<think>" not in theirs_sanitized  # the reasoning block disappears under markers
    ours = m.enc.encode(msgs, sanitize_control_tokens=True).tolist()
    assert "<think>\nr\n</think>" in m.tok.decode(ours)
    support.assert_no_control_from_content(m, msgs, False)


@pytest.mark.parametrize("name", ["meta-llama-3-8b-instruct", "llama-3.1-8b-instruct"])
def test_llama3_missing_content_is_rendered_as_the_template_renders_it(name):
    """Llama 3 templates render a missing content as an empty message. chatids no longer
    refuses it: the native format hands the message to the template, which renders it
    (nothing the caller gave is dropped)."""
    m = _load(name)
    msgs = [{"role": "user", "content": None}]
    assert "<|end_header_id|>\n\n<|eot_id|>" in m.ref_text(msgs)
    assert m.text(msgs) == m.ref_text(msgs)
    assert m.ids(msgs) == m.ref_ids(msgs)


def test_llama3_content_parts_are_rendered_as_the_template_renders_them():
    """Llama 3 templates render a list of parts as its Python repr. chatids renders exactly
    that (the template is the authority); lint can flag such a conversation."""
    m = _load("meta-llama-3-8b-instruct")
    msgs = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert "[{'type': 'text', 'text': 'hi'}]" in m.ref_text(msgs)
    assert m.text(msgs) == m.ref_text(msgs)
    assert m.ids(msgs) == m.ref_ids(msgs)


def test_qwen3_empty_think_block_newlines_are_one_token():
    """An assistant message whose content is just `</think>` (after the last query): Qwen3's
    template splits it into empty reasoning and empty content and writes `<think>\n\n</think>`.
    Under transformers' sanitizer the split leaves a lone marker between the two newlines, so
    transformers encodes them as two `\n` tokens where the plain prompt has one `\n\n` token:
    the same text, different ids. chatids encodes the text the template means, in both modes."""
    m = _load("qwen3-0.6b")
    msgs = [{"role": "user", "content": ""}, {"role": "assistant", "content": "</think>"}]
    theirs = m.ref_ids(msgs, sanitize=True)
    plain = m.ref_ids(msgs, sanitize=False)
    assert m.tok.decode(theirs) == m.tok.decode(plain)
    nl, nlnl = m.tok.convert_tokens_to_ids(["Ċ", "ĊĊ"])
    think = m.tok.convert_tokens_to_ids("<think>")
    at = theirs.index(think)
    assert theirs[at + 1 : at + 3] == [nl, nl], m.tok.convert_ids_to_tokens(theirs[at : at + 4])
    assert plain[at + 1] == nlnl
    ours = m.ids(msgs, sanitize=True)
    assert ours == plain != theirs
    assert support.known_deviation("qwen3", msgs, sanitize=True) is not None


@pytest.mark.parametrize("name", ["qwen2.5-7b-instruct", "qwen3-0.6b"])
def test_qwen_unknown_role_is_refused(name):
    """Qwen2.5/Qwen3 templates drop messages with other roles without a word."""
    m = _load(name)
    msgs = [{"role": "user", "content": "q"}, {"role": "narrator", "content": "dropped"}]
    assert "dropped" not in m.ref_text(msgs)
    with pytest.raises(chatids.ChatTemplateError, match=r'message 1: role "narrator" is not rendered'):
        m.ids(msgs)


@pytest.mark.parametrize("name", ["meta-llama-3-8b-instruct", "openhermes-2.5-mistral-7b", "qwen2-7b-instruct"])
def test_tool_calls_are_refused_where_the_template_drops_them(name):
    m = _load(name)
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {}}}]},
    ]
    assert '"name"' not in m.ref_text(msgs) and "f" not in m.ref_text(msgs).split("assistant")[-1]
    # Tool conversations are rendered by the template, which writes no call: refused, not dropped.
    with pytest.raises(chatids.ChatTemplateError, match=r"message 1: the checkpoint's template drops this message's tool call \"f\""):
        m.ids(msgs)


def test_unknown_template_argument_is_refused():
    """transformers passes unknown keyword arguments to the template, which ignores them."""
    m = _load("qwen3-0.6b")
    msgs = [{"role": "user", "content": "q"}]
    assert m.ref_text(msgs, enable_thinkng=False) == m.ref_text(msgs)  # the typo is ignored
    with pytest.raises(chatids.ChatTemplateError, match='does not read the template argument "enable_thinkng"'):
        m.enc.encode(msgs, enable_thinkng=False)


def test_llama32_default_date_is_today_read_outside_the_core(monkeypatch):
    """Llama 3.2's template writes today's date. chatids' Python layer reads the clock (the
    core never does); both sides agree under a frozen clock."""
    m = _load("llama-3.2-3b-instruct")

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2025, 3, 9, 12, 0, 0)

    import transformers.utils.chat_template_utils as ctu

    import chatids._options as chatids_options

    monkeypatch.setattr(ctu, "datetime", Frozen)
    monkeypatch.setattr(chatids_options, "datetime", Frozen)
    msgs = [{"role": "user", "content": "What day is it?"}]
    ref = list(m.tok.apply_chat_template(msgs, tokenize=True, return_dict=False))
    assert "Today Date: 09 Mar 2025" in m.tok.decode(ref)
    assert m.enc.encode(msgs).tolist() == ref
    with pytest.raises(chatids.ChatTemplateError):
        m.enc._core.encode(msgs, chatids_options.CallOptions())  # the core alone needs the date
