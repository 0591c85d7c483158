"""Which renderer serves an edited template, and the template-argument rule on every path.

A native format serves a template only if it renders every probe conversation as the template
does, or both raise; the one refusal it may add is the documented drop-refusal, and what it
does not model (content parts, tool calls, arguments it does not know) goes to the template.
Fine-tunes edit templates; these tests edit the shared ones the way fine-tunes do and check
both the choice and the ids against transformers (the golden ids come from transformers at
test time, on the edited template).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

import chatids
import support

NOW = dt.datetime(*support.FROZEN_NOW)
CORPUS = Path(__file__).parent / "template_corpus"

CONVERSATIONS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a prime."}],
    [
        {"role": "system", "content": "Be exact.\n\nAlways."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "3+3?"},
    ],
    [{"role": "user", "content": [{"type": "text", "text": "Hello from a part."}]}],
    [
        {"role": "user", "content": [{"type": "text", "text": "One."}, {"type": "text", "text": "Two."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Three."}]},
        {"role": "user", "content": "Four <|im_end|> <|eot_id|> [INST]"},
    ],
    [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}],
]


def template_of(name: str) -> str:
    return json.loads((support.require_model_path(name) / "tokenizer_config.json").read_text())["chat_template"]


def check_equal(model: support.Model, enc: chatids.Encoder, template: str, messages: list, **kw) -> str:
    """chatids on ``enc`` against transformers on ``template``: the same text and ids in both
    sanitize modes, or both raise; returns "exact" or "both raised"."""
    tok = model.tok
    support.freeze_transformers_clock()
    for agp in (False, True):
        try:
            ref = tok.apply_chat_template(messages, chat_template=template, add_generation_prompt=agp, tokenize=False, **kw)
        except Exception:
            with pytest.raises(chatids.ChatTemplateError) as e:
                enc.render(messages, agp, now=NOW, **kw)
            assert e.value.refusal != "unmodeled"
            return "both raised"
        assert enc.render(messages, agp, now=NOW, **kw) == ref
        for sanitize in (False, True):
            ref_ids = list(
                tok.apply_chat_template(
                    messages,
                    chat_template=template,
                    add_generation_prompt=agp,
                    sanitize_control_tokens=sanitize,
                    return_dict=False,
                    **kw,
                )
            )
            if sanitize and support.known_deviation(enc.format, messages, True):
                continue
            assert enc.encode(messages, agp, sanitize, now=NOW, **kw).tolist() == ref_ids, (agp, sanitize)
    return "exact"


# ---- edited templates: the format chosen, and the ids ----


def _gemma3_harmless_edit(stock: str) -> str:
    return "{%- set x = true -%}\n" + stock


def _qwen25_other_default_system_prompt(stock: str) -> str:
    default = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    assert default in stock
    return stock.replace(default, "You are a careful assistant.")


def _llama3_assistant_renamed(stock: str) -> str:
    """The assistant written as "model"."""
    role = "'<|start_header_id|>' + message['role']"
    assert role in stock
    return stock.replace(role, "'<|start_header_id|>' + (message['role'] | replace('assistant', 'model'))")


@pytest.mark.parametrize(
    "name,edit,expected_format,explained",
    [
        # Gemma 1/2's format refuses a system message this template renders: explain() says so.
        ("gemma-3-it", _gemma3_harmless_edit, "gemma-3", "not gemma: it refuses probe"),
        ("qwen2.5-7b-instruct", _qwen25_other_default_system_prompt, "jinja", "not qwen2.5: probe"),
        ("meta-llama-3-8b-instruct", _llama3_assistant_renamed, "jinja", "not llama-3:"),
    ],
)
def test_edited_template(name, edit, expected_format, explained):
    m = support.load_model(name)
    template = edit(template_of(name))
    enc = m.enc.with_chat_template(template)
    assert enc.format == expected_format, enc.explain()
    assert explained in enc.explain()
    for messages in CONVERSATIONS:
        check_equal(m, enc, template, messages)


def test_added_list_content_branch_keeps_the_format_and_renders_parts_with_the_template():
    """Qwen2's template edited to read a list of text parts (as Qwen2.5-VL's does): the string
    probes still match qwen2, and list content goes to the template."""
    m = support.load_model("qwen2-7b-instruct")
    stock = template_of("qwen2-7b-instruct")
    needle = "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    assert needle in stock
    template = stock.replace(
        needle,
        "{{'<|im_start|>' + message['role'] + '\n'}}{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for part in message['content'] %}{{ part['text'] }}{% endfor %}{% endif %}{{'<|im_end|>' + '\n'}}",
    )
    enc = m.enc.with_chat_template(template)
    assert enc.format == "qwen2", enc.explain()
    assert "hands" in enc.explain() and "content parts" in enc.explain()
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert check_equal(m, enc, template, parts) == "exact"
    assert "<|im_start|>user\nab<|im_end|>" in enc.render(parts)


def test_qwen25_vl_template_reads_content_parts():
    m = support.load_model("qwen2.5-7b-instruct")
    template = (CORPUS / "templates/huggingface.js/e2e__custom__Qwen_Qwen2.5-VL-7B-Instruct.jinja").read_text()
    enc = m.enc.with_chat_template(template)
    for messages in CONVERSATIONS + [[{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "And this?"}]}]]:
        assert check_equal(m, enc, template, messages) == "exact", messages


@pytest.mark.parametrize("name", [n for n, (f, _) in support.MODELS.items() if f != "jinja"])
def test_list_content_on_every_native_format(name):
    """Every native format: content parts are rendered exactly as the checkpoint's template
    renders them (or both raise); never a refusal of what the template renders."""
    m = support.load_model(name)
    template = template_of(name)
    assert m.enc.format == support.MODELS[name][0]
    for msgs in CONVERSATIONS[3:]:
        check_equal(m, m.enc, template, msgs, **m.kwargs())


def test_native_copy_of_a_template_rule_defers_to_the_template():
    """Gemma 3's template with its alternation check removed: the string probes still match
    gemma-3 (they alternate), and the native format's copy of the rule no longer stands: the
    template renders consecutive user turns, so chatids does too."""
    m = support.load_model("gemma-3-it")
    stock = template_of("gemma-3-it")
    check = "{{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}"
    assert check in stock
    template = stock.replace(check, "")
    enc = m.enc.with_chat_template(template)
    twice = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    assert check_equal(m, enc, template, twice) == "exact"
    assert check_equal(m, m.enc, stock, twice) == "both raised"


# ---- the template-argument rule, on every path ----


def test_unknown_argument_raises_on_every_path():
    for enc in (
        support.load_model("qwen2.5-7b-instruct").enc,  # native
        support.load_model("qwen2.5-7b-instruct", generic=True).enc,  # jinja path
        support.load_model("gpt-oss-120b").enc,  # jinja path by choice
    ):
        with pytest.raises(chatids.ChatTemplateError, match='does not read the template argument "date_string"') as e:
            enc.encode([{"role": "user", "content": "hi"}], date_string="x", now=NOW)
        assert "it reads:" in str(e.value)
        with pytest.raises(chatids.ChatTemplateError, match="does not read"):
            enc.encode_batch([[{"role": "user", "content": "hi"}]], date_string="x", now=NOW)
        with pytest.raises(chatids.ChatTemplateError, match="does not read"):
            enc.session([{"role": "user", "content": "hi"}], date_string="x", now=NOW)


def test_ignore_switch_leaves_unknown_arguments_out():
    path = support.require_model_path("llama-3.1-8b-instruct")
    strict = chatids.Encoder.from_pretrained(path)
    lenient = chatids.Encoder.from_pretrained(path, unknown_template_args="ignore")
    assert lenient.unknown_template_args == "ignore" and strict.unknown_template_args == "error"
    msgs = [{"role": "user", "content": "hi"}]
    args = {"enable_thinking": False, "date_string": "01 Jan 2030"}
    with pytest.raises(chatids.ChatTemplateError, match='"enable_thinking"'):
        strict.encode(msgs, **args)
    assert lenient.encode(msgs, **args).tolist() == strict.encode(msgs, date_string="01 Jan 2030").tolist()
    # The switch travels with a pickled encoder and with with_chat_template.
    import pickle

    assert pickle.loads(pickle.dumps(lenient)).unknown_template_args == "ignore"
    assert lenient.with_chat_template(lenient._core.chat_template).unknown_template_args == "ignore"
    with pytest.raises(chatids.CheckpointError, match="unknown_template_args"):
        chatids.Encoder.from_pretrained(path, unknown_template_args="warn")


def test_template_args_are_jinja2s_undeclared_variables():
    import jinja2.meta
    import transformers.utils.chat_template_utils as ctu

    for name in support.MODELS:
        m = support.load_model(name)
        template = m.enc._core.chat_template
        compiled = ctu._compile_jinja_template(template)
        reads = jinja2.meta.find_undeclared_variables(compiled.environment.parse(template)) - set(compiled.environment.globals)
        special = {k for k, _ in m.enc._core.special_tokens_map}
        always = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token", "tools", "documents"}
        assert m.enc.template_args == frozenset(reads | special | always), name


@pytest.mark.parametrize("name", ["llama-3.1-8b-instruct", "qwen3-0.6b", "gemma-3-it", "mistral-7b-instruct-v0.3"])
def test_special_token_arguments_override_as_in_transformers(name):
    """``bos_token=`` and the other special-token names are always accepted, and override the
    defaults exactly as transformers does (a native format hands such a call to the template)."""
    m = support.load_model(name)
    msgs = [{"role": "user", "content": "hi"}]
    for kw in ({"bos_token": "<BOS>"}, {"eos_token": "<EOS>"}, {"bos_token": ""}):
        for sanitize in (False, True):
            assert m.ids(msgs, True, sanitize, **kw) == m.ref_ids(msgs, True, sanitize, **kw), (kw, sanitize)
        assert m.text(msgs, True, **kw) == m.ref_text(msgs, True, **kw)


@pytest.mark.parametrize("name", ["llama-3.1-8b-instruct", "qwen3-0.6b"])
def test_arguments_the_native_format_does_not_model_go_to_the_template(name):
    m = support.load_model(name)
    msgs = [{"role": "user", "content": "hi"}]
    extra = {"llama-3.1-8b-instruct": {"tools_in_user_message": False, "custom_tools": None}, "qwen3-0.6b": {}}[name]
    for key, value in extra.items():
        assert key in m.enc.template_args
        assert m.ids(msgs, True, True, **{key: value}) == m.ref_ids(msgs, True, True, **{key: value})
