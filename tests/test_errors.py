"""Bad input raises a clear exception naming the message and the problem; nothing panics."""

from __future__ import annotations

import json
import shutil

import pytest

import chatids
import support


@pytest.fixture(scope="module")
def enc() -> chatids.Encoder:
    return support.load_model("qwen2.5-7b-instruct").enc


@pytest.fixture(scope="module")
def llama31() -> chatids.Encoder:
    return support.load_model("llama-3.1-8b-instruct").enc


def test_error_class_is_a_value_error():
    assert issubclass(chatids.ChatTemplateError, ValueError)
    assert issubclass(chatids.CheckpointError, ValueError)


@pytest.mark.parametrize(
    "messages, pattern",
    [
        ([], r"^the conversation is empty"),
        ({"role": "user", "content": "x"}, r"^messages must be a list of dicts, not dict"),
        ("hello", r"^messages must be a list of dicts, not str"),
        ([{"role": "user", "content": "x"}, "oops"], r"^message 1: a message must be a dict .*not str"),
        ([{"content": "x"}], r"^message 0: the message has no 'role'"),
        ([{"role": None, "content": "x"}], r"^message 0: the message has no 'role'"),
        ([{"role": 3, "content": "x"}], r"^message 0: 'role' must be a str, not int"),
        ([{"role": "user", "content": 5}], r"^message 0: 'content' must be a str or a list"),
        ([{"role": "user", "content": {"text": "x"}}], r"^message 0: 'content' must be a str or a list"),
        ([{"role": "user", "content": ["x"]}], r"^message 0: content part 0 must be a dict, not str"),
        ([{"role": "user", "content": [{"text": "x"}]}], r"^message 0: content part 0 has no 'type'"),
        ([{"role": "user", "content": [{"type": "text"}]}], r"^message 0: content part 0 of type 'text' has no 'text'"),
        ([{"role": "user", "content": [{"type": "text", "text": 1}]}], r"^message 0: 'content\[0\].text' must be a str"),
        ([{"role": "assistant", "content": "a", "reasoning_content": 3}], r"^message 0: 'reasoning_content' must be a str"),
        ([{"role": "user", "content": "bad \ud800 surrogate"}], r"^message 0: 'content' is not valid text"),
    ],
)
def test_bad_messages(enc, messages, pattern):
    for call in (
        lambda: enc.encode(messages),
        lambda: enc.render(messages),
        lambda: enc.encode_detailed(messages),
    ):
        with pytest.raises(chatids.ChatTemplateError, match=pattern):
            call()


def test_batch_errors_name_the_conversation(enc):
    good = [{"role": "user", "content": "x"}]
    with pytest.raises(chatids.ChatTemplateError, match=r"^conversation 2, message 0: 'role' must be a str"):
        enc.encode_batch([good, good, [{"role": 1, "content": "x"}]])
    with pytest.raises(chatids.ChatTemplateError, match=r"^conversation 1: the conversation is empty"):
        enc.encode_batch([good, []])
    many = [good] * 40 + [[{"role": "narrator", "content": "x"}]]
    with pytest.raises(chatids.ChatTemplateError, match=r"^conversation 40, message 0: role \"narrator\""):
        enc.encode_batch(many)
    with pytest.raises(chatids.ChatTemplateError, match=r"^conversations must be a list"):
        enc.encode_batch("nope")


def test_bad_template_arguments(enc, llama31):
    msgs = [{"role": "user", "content": "x"}]
    # An argument of a type the native format does not model goes to the template, which
    # decides: Llama 3.1's `"Today Date: " + date_string` fails on an int, as in transformers.
    tok = support.load_model("llama-3.1-8b-instruct").tok
    for bad in (5, ["26 Jul 2024"]):
        with pytest.raises(Exception):
            tok.apply_chat_template(msgs, tokenize=False, date_string=bad)
        with pytest.raises(chatids.ChatTemplateError, match="the chat template failed to render"):
            llama31.encode(msgs, date_string=bad)
    # tools=None is apply_chat_template's default: accepted, the same as no tools.
    assert llama31.encode(msgs, tools=None).tolist() == llama31.encode(msgs).tolist()
    with pytest.raises(chatids.ChatTemplateError, match=r"does not read the template argument \"foo\""):
        enc.encode(msgs, foo=[1])
    with pytest.raises(chatids.ChatTemplateError, match="cannot be passed to a template"):
        llama31.encode(msgs, date_string=object())
    # Where the template renders it, chatids renders it: Qwen3 tests enable_thinking for falsiness.
    qwen3 = support.load_model("qwen3-0.6b")
    assert qwen3.ids(msgs, True, enable_thinking="no") == qwen3.ref_ids(msgs, True, enable_thinking="no")


def test_num_threads_must_be_positive(enc):
    with pytest.raises(chatids.CheckpointError, match="num_threads must be at least 1"):
        enc.encode_batch([[{"role": "user", "content": "x"}]], num_threads=0)


def test_loading_errors(tmp_path):
    with pytest.raises(chatids.CheckpointError, match="no such file or directory"):
        chatids.Encoder.from_pretrained(tmp_path / "missing")
    with pytest.raises(chatids.CheckpointError, match="cannot read .*tokenizer_config.json"):
        chatids.Encoder.from_pretrained(tmp_path)
    with pytest.raises(chatids.CheckpointError, match='unknown format "llama-9"'):
        chatids.Encoder.from_pretrained(support.load_model("qwen3-0.6b").path, format="llama-9")


def _copy_with_template(src, dst, template):
    dst.mkdir()
    shutil.copy(src / "tokenizer.json", dst / "tokenizer.json")
    config = json.loads((src / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (dst / "tokenizer_config.json").write_text(json.dumps(config))


def test_a_modified_template_is_not_given_the_stock_format(tmp_path):
    """A fine-tune with a changed default system prompt must not get the stock format."""
    m = support.load_model("qwen2.5-7b-instruct")
    template = m.tok.chat_template.replace("You are Qwen, created by Alibaba Cloud.", "You are Bob.")
    _copy_with_template(m.path, tmp_path / "ft", template)
    served = chatids.Encoder.from_pretrained(tmp_path / "ft")
    assert served.format == "jinja"
    assert 'not qwen2.5: probe "one user turn" differs' in served.explain()
    forced = chatids.Encoder.from_pretrained(tmp_path / "ft", format="qwen2.5")
    assert "does NOT reproduce the checkpoint's template" in forced.explain()


def test_a_template_file_overrides_the_config(tmp_path):
    m = support.load_model("qwen2-7b-instruct")
    _copy_with_template(m.path, tmp_path / "ck", "{{ 'not the real one' }}")
    (tmp_path / "ck" / "chat_template.jinja").write_text(m.tok.chat_template)
    assert chatids.Encoder.from_pretrained(tmp_path / "ck").format == "qwen2"


def test_missing_template_tokens_fail_at_load(tmp_path):
    """Forcing a format onto a tokenizer without its control tokens fails clearly."""
    m = support.load_model("openhermes-2.5-mistral-7b")
    with pytest.raises(chatids.CheckpointError, match=r'format llama-3 needs the added token "<\|start_header_id\|>"'):
        chatids.Encoder.from_pretrained(m.path, format="llama-3")
