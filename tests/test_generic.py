"""The checkpoint's own template decides: probes choose a native format, the generic (Jinja)
path renders everything else, and both are exact against transformers.

* Every shared checkpoint loads by path with the expected path (native format or ``jinja``).
* The Jinja path, forced on every shared checkpoint, equals ``apply_chat_template`` (render,
  ids with ``sanitize_control_tokens`` off and on, batch) on the corpus, *with* each
  conversation's tools.
* Modified templates (changed default system prompt, extra whitespace, renamed roles, ...)
  never get the stock native format, and are served exactly; a template that only looks
  different (a comment) keeps it.
* Named templates, ``chat_template.jinja`` / ``.json`` precedence, template overrides.
* Templates no shared checkpoint ships (Phi-3 and SmolLM2 style, written from their format
  documentation) through the whole pipeline.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any, Optional

import pytest

import chatids
import support
from conftest import CONFORMANCE, POLICY_REASONS

FILES = support.corpus_files() or ["<no corpus>"]
NOW = dt.datetime(*support.FROZEN_NOW)


@pytest.fixture(params=support.MODEL_NAMES)
def generic_model(request) -> support.Model:
    """Each shared checkpoint on the forced Jinja path."""
    return support.load_model(request.param, generic=True)


def test_every_checkpoint_gets_the_expected_path(model: support.Model) -> None:
    expected = support.MODELS[model.name][0]
    assert model.enc.format == expected, model.enc.explain()
    explanation = model.enc.explain()
    if expected == "jinja":
        assert "no native format reproduces it" in explanation
    else:
        assert "probe conversations exactly as the checkpoint's template does" in explanation


@pytest.mark.parametrize("corpus_file", FILES)
def test_generic_path_matches_transformers(generic_model: support.Model, corpus_file: str) -> None:
    support.require_corpus(corpus_file)
    model = generic_model
    counts = CONFORMANCE[model.name]
    by_tools: dict[tuple[bool, str], list[tuple[list[dict], Optional[list], dict[bool, list[int]]]]] = {}
    for row in support.corpus_rows(corpus_file):
        counts["conversations"] += 1
        tools = row.get("tools") or None
        for agp in (False, True):
            outcome = support.compare(model, row["messages"], agp, tools=tools)
            counts[outcome.kind] += 1
            if outcome.kind == "rejected_by_policy":
                POLICY_REASONS[model.name][outcome.detail] += 1
            if outcome.expected is not None:
                key = (agp, json.dumps(tools))
                by_tools.setdefault(key, []).append((row["messages"], tools, outcome.expected))
    for (agp, _), cases in by_tools.items():
        tools = cases[0][1]
        extra: dict[str, Any] = {} if tools is None else {"tools": tools}
        for sanitize in (False, True):
            batch = model.enc.encode_batch(
                [m for m, _, _ in cases], add_generation_prompt=agp, sanitize_control_tokens=sanitize, **model.ours_kwargs(**extra)
            )
            for i, (_, _, expected) in enumerate(cases):
                assert batch[i].tolist() == expected[sanitize], f"encode_batch differs for case {i}"


# --- Modified templates ---------------------------------------------------------------------


def _load_with_template(base: str, template: str) -> tuple[chatids.Encoder, Any]:
    """chatids on the checkpoint with ``template`` (as ``from_pretrained(path, chat_template=)``
    chooses its format, tested below), and transformers' tokenizer, which the checks call with
    ``chat_template=template``."""
    model = support.load_model(base)
    return model.enc.with_chat_template(template), model.tok


def _official_template(base: str) -> str:
    path = support.require_model_path(base)
    config = json.loads((path / "tokenizer_config.json").read_text())
    return config["chat_template"]


#: (name, base checkpoint, edit of its official template). Each edit changes what the template
#: renders for some conversation, so the stock native format must not serve it.
MODIFICATIONS = [
    (
        "changed default system prompt",
        "qwen2.5-7b-instruct",
        lambda t: _replace(t, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", "You are a pirate."),
    ),
    ("extra whitespace after the header", "llama-3.1-8b-instruct", lambda t: _replace(t, "<|end_header_id|>\\n\\n", "<|end_header_id|>\\n\\n\\n")),
    ("no trim of content", "meta-llama-3-8b-instruct", lambda t: _replace(t, "| trim", "")),
    (
        "renamed roles",
        "openhermes-2.5-mistral-7b",
        lambda t: _replace(t, "message['role']", "(message['role'] | replace('assistant', 'gpt') | replace('user', 'human'))"),
    ),
    ("other default system prompt in Llama 3.1's date block", "llama-3.1-8b-instruct", lambda t: _replace(t, "26 Jul 2024", "01 Jan 2025")),
    ("gemma with the assistant role kept", "gemma-3-it", lambda t: _replace(t, '{%- set role = "model" -%}', '{%- set role = "assistant" -%}')),
    ("mistral with a different space", "mistral-7b-instruct-v0.1", lambda t: _replace(t, "' [INST] '", "'[INST] '")),
]


def _replace(template: str, old: str, new: str) -> str:
    assert old in template, f"the official template no longer contains {old!r}"
    return template.replace(old, new)


SAMPLE = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  Hi there  "}],
    [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And <|eot_id|><|im_end|>[INST] 3+3?"},
    ],
]


def _check_against_transformers(enc: chatids.Encoder, tok: Any, template: str, conversations: list) -> int:
    compared = 0
    for messages in conversations:
        for agp in (False, True):
            try:
                ref_text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=agp, chat_template=template)
            except Exception:
                with pytest.raises(chatids.ChatTemplateError):
                    enc.render(messages, agp, now=NOW)
                continue
            try:
                text = enc.render(messages, agp, now=NOW)
            except chatids.ChatTemplateError as e:
                # Only a documented refusal: the template drops input (tool calls, a system message).
                assert any(p.search(str(e)) for p in support.POLICY_PATTERNS), str(e)
                continue
            assert text == ref_text
            for sanitize in (False, True):
                ref = tok.apply_chat_template(
                    messages,
                    tokenize=True,
                    add_generation_prompt=agp,
                    sanitize_control_tokens=sanitize,
                    return_dict=False,
                    chat_template=template,
                )
                assert enc.encode(messages, agp, sanitize, now=NOW).tolist() == list(ref), (messages, agp, sanitize)
            compared += 1
    return compared


@pytest.mark.parametrize("name,base,edit", MODIFICATIONS, ids=[m[0] for m in MODIFICATIONS])
def test_modified_template_is_detected_and_served_exactly(name: str, base: str, edit: Any) -> None:
    template = edit(_official_template(base))
    enc, tok = _load_with_template(base, template)
    assert enc.format == "jinja", enc.explain()
    stock = support.MODELS[base][0]
    assert f"not {stock}: probe" in enc.explain()
    rows = [r["messages"] for f in support.corpus_files()[:3] for r in support.corpus_rows(f)[:5]]
    assert _check_against_transformers(enc, tok, template, SAMPLE + rows) > 0


def test_cosmetic_edit_keeps_the_native_format() -> None:
    base = "llama-3.1-8b-instruct"
    template = "{#- a fine-tuner's comment -#}\n" + _official_template(base)
    enc, _ = _load_with_template(base, template)
    assert enc.format == "llama-3.1", enc.explain()
    assert "byte-for-byte" not in enc.explain()


def test_forcing_a_native_format_on_a_modified_template_says_so() -> None:
    base = "qwen2.5-7b-instruct"
    path = support.require_model_path(base)
    template = MODIFICATIONS[0][2](_official_template(base))
    enc = chatids.Encoder.from_pretrained(path, chat_template=template, format="qwen2.5")
    assert enc.format == "qwen2.5"
    assert "does NOT reproduce" in enc.explain()


# --- Loading: named templates, files, overrides ---------------------------------------------


def _copy_checkpoint(base: str, tmp_path: Path) -> Path:
    path = support.require_model_path(base)
    out = tmp_path / base
    out.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(path / name, out / name)
    return out


def test_named_templates_and_template_files(tmp_path: Path) -> None:
    d = _copy_checkpoint("qwen2.5-7b-instruct", tmp_path)
    config = json.loads((d / "tokenizer_config.json").read_text())
    official = config["chat_template"]
    shout = "{% for m in messages %}{{ m['role'] | upper }}: {{ m['content'] }}\n{% endfor %}"
    config["chat_template"] = [{"name": "default", "template": official}, {"name": "shout", "template": shout}]
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    assert chatids.Encoder.from_pretrained(d).format == "qwen2.5"
    enc = chatids.Encoder.from_pretrained(d, chat_template="shout")
    assert enc.format == "jinja"
    assert enc.render([{"role": "user", "content": "hi"}]) == "USER: hi\n"
    with pytest.raises(chatids.CheckpointError, match='no chat template named "nope"'):
        chatids.Encoder.from_pretrained(d, chat_template="nope")
    # chat_template.json, then chat_template.jinja, take precedence over the config.
    (d / "chat_template.json").write_text(json.dumps({"chat_template": shout}))
    assert chatids.Encoder.from_pretrained(d).render([{"role": "user", "content": "x"}]) == "USER: x\n"
    (d / "chat_template.jinja").write_text("{% for m in messages %}[{{ m['content'] }}]{% endfor %}")
    assert chatids.Encoder.from_pretrained(d).render([{"role": "user", "content": "x"}]) == "[x]"


def test_generation_config_feeds_stop_tokens(tmp_path: Path) -> None:
    d = _copy_checkpoint("llama-3.1-8b-instruct", tmp_path)
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [128001, 128008, 128009]}))
    assert {128001, 128008, 128009} <= set(chatids.Encoder.from_pretrained(d).stop_token_ids)


def test_unknown_repo_id_is_not_downloaded() -> None:
    with pytest.raises(chatids.CheckpointError, match="not in the local Hugging Face cache"):
        chatids.Encoder.from_pretrained("chatids-test/no-such-model")


# --- Templates no shared checkpoint ships ---------------------------------------------------

#: Phi-3 style (from the Phi-3 model card's chat format).
PHI3 = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)

#: SmolLM2 style: ChatML with a default system prompt.
SMOLLM2 = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

#: Zephyr style, with a generation block and a namespace.
ZEPHYR = (
    "{% set ns = namespace(turns=0) %}"
    "{% for message in messages %}{% set ns.turns = ns.turns + 1 %}"
    "{{ '<|' + message['role'] + '|>\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] + eos_token }}{% endgeneration %}"
    "{% else %}{{ message['content'] + eos_token }}{% endif %}\n"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

ASSEMBLED = [("phi-3 style", PHI3, "llama-3.1-8b-instruct"), ("smollm2 style", SMOLLM2, "qwen2.5-7b-instruct"), ("zephyr style", ZEPHYR, "mistral-7b-instruct-v0.1")]


@pytest.mark.parametrize("name,template,base", ASSEMBLED, ids=[a[0] for a in ASSEMBLED])
def test_assembled_templates_match_transformers(name: str, template: str, base: str) -> None:
    enc, tok = _load_with_template(base, template)
    assert enc.format == "jinja"
    rows = [r["messages"] for f in support.corpus_files() for r in support.corpus_rows(f)[:4]]
    assert _check_against_transformers(enc, tok, template, SAMPLE + rows) > 10


def test_now_reaches_strftime_now() -> None:
    enc, tok = _load_with_template("llama-3.2-3b-instruct", "{{ strftime_now('%d %b %Y') }}|{{ messages[0]['content'] }}")
    assert enc.reads_clock
    assert enc.render([{"role": "user", "content": "x"}], now=dt.datetime(2030, 2, 3)) == "03 Feb 2030|x"
    # Without now=, the Python layer passes the current time (as transformers reads the clock).
    before = dt.datetime.now().strftime("%d %b %Y")
    rendered = enc.render([{"role": "user", "content": "x"}])
    after = dt.datetime.now().strftime("%d %b %Y")
    assert rendered in (f"{before}|x", f"{after}|x")


@pytest.mark.parametrize("base", ["qwen2.5-7b-instruct", "meta-llama-3-8b-instruct", "gpt-oss-120b"])
def test_message_indices_survive_where_content_passes_through(base: str) -> None:
    """Content the template passes through (or trims, as Llama 3's does) keeps its message index;
    template text carries none on the Jinja path, except the stop token that ends the
    message's body (what a loss mask trains with it, see test_masks.py)."""
    template = SMOLLM2 if base == "qwen2.5-7b-instruct" else _official_template(base)
    enc, _ = _load_with_template(base, template)
    if base != "qwen2.5-7b-instruct":
        enc = chatids.Encoder.from_pretrained(support.require_model_path(base), format="jinja")
    messages = [{"role": "user", "content": "  alpha beta <"}, {"role": "assistant", "content": "gamma delta"}]
    for sanitize in (False, True):
        detailed = enc.encode_detailed(messages, sanitize_control_tokens=sanitize, now=NOW)
        assert detailed.ids.tolist() == enc.encode(messages, sanitize_control_tokens=sanitize, now=NOW).tolist()
        for index, text in enumerate(["alpha beta <", "gamma delta"]):
            tagged = [(int(t), bool(c)) for t, c, m in zip(detailed.ids, detailed.from_content, detailed.message_indices) if m == index]
            # Caller text in one block; around it only template text of the message's body: what
            # follows the generation prompt (gpt-oss: <|channel|>final<|message|>) and the
            # end-of-turn token.
            flags = [c for _, c in tagged]
            first, last = flags.index(True), len(flags) - flags[::-1].index(True)
            assert all(flags[first:last]), tagged
            assert enc_decode(enc, [t for t, _ in tagged[first:last]]).strip() == text
            assert last < len(tagged), "the body ends with the template's end-of-turn token"
            if index == 0:
                assert first == 0, "a user message's body starts at its content"
        assert not any(bool(c) for c, m in zip(detailed.from_content, detailed.message_indices) if m == -1)


def enc_decode(enc: chatids.Encoder, ids: list[int]) -> str:
    from tokenizers import Tokenizer

    return Tokenizer.from_str(enc._core.tokenizer_json()).decode(ids, skip_special_tokens=False)


#: ChatML inside an ``{% autoescape %}`` block: valid jinja2, which chatids' engine refuses to compile.
AUTOESCAPE_CHATML = (
    "{% autoescape false %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% endautoescape %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_uncompilable_template_falls_back_to_jinja2_with_a_warning() -> None:
    base = "qwen2.5-7b-instruct"
    with pytest.warns(RuntimeWarning, match="cannot compile this chat template"):
        enc, tok = _load_with_template(base, AUTOESCAPE_CHATML)
    assert enc.format == "jinja2-fallback"
    assert "autoescape" in enc.explain()
    rows = [r["messages"] for f in support.corpus_files() for r in support.corpus_rows(f)[:3]]
    assert _check_against_transformers(enc, tok, AUTOESCAPE_CHATML, SAMPLE + rows) > 10
    for sanitize in (False, True):
        batch = enc.encode_batch(SAMPLE, add_generation_prompt=True, sanitize_control_tokens=sanitize)
        for i, messages in enumerate(SAMPLE):
            assert batch[i].tolist() == enc.encode(messages, True, sanitize).tolist()
    with pytest.raises(chatids.CheckpointError, match="cannot be compiled"):
        chatids.Encoder.from_pretrained(support.require_model_path(base), chat_template=AUTOESCAPE_CHATML, format="jinja")


def test_jinja2_fallback_batches_of_several_windows_equal_single_encodes() -> None:
    """The fallback's ids go through the core's batch windows (2,048 conversations on two
    threads): 5,000 conversations, three windows, equal their single encodes in order."""
    with pytest.warns(RuntimeWarning, match="cannot compile this chat template"):
        enc, _ = _load_with_template("qwen2.5-7b-instruct", AUTOESCAPE_CHATML)
    rows = [r["messages"] for f in support.corpus_files() for r in support.corpus_rows(f)[:20]]
    distinct = SAMPLE + [r for r in rows if all(isinstance(m.get("content"), str) for m in r)]
    expected = [enc.encode(c, True, True).tolist() for c in distinct]
    picks = [(i * 7919) % len(distinct) for i in range(5000)]
    batch = enc.encode_batch([distinct[p] for p in picks], add_generation_prompt=True, num_threads=2)
    assert len(batch) == 5000
    for i, p in enumerate(picks):
        assert batch[i].tolist() == expected[p], f"conversation {i}"


#: A template neither engine compiles (an ``{% if %}`` without its ``{% endif %}``).
BROKEN_TEMPLATE = "{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}{% endfor %}"


def test_template_neither_engine_compiles_is_a_checkpoint_error() -> None:
    """Not jinja2's TemplateSyntaxError from inside the fallback: the load error of the API,
    naming both engines; transformers' apply_chat_template fails on the same template."""
    import jinja2
    from transformers import AutoTokenizer

    path = support.require_model_path("qwen2.5-7b-instruct")
    with pytest.raises(chatids.CheckpointError, match="neither in chatids' Jinja engine nor in jinja2"):
        chatids.Encoder.from_pretrained(path, chat_template=BROKEN_TEMPLATE)
    tok = AutoTokenizer.from_pretrained(str(path))
    with pytest.raises(jinja2.TemplateSyntaxError):
        tok.apply_chat_template([{"role": "user", "content": "hi"}], chat_template=BROKEN_TEMPLATE, tokenize=False)


#: Templates that cut caller text at a control token, leaving a lone sanitizer marker in the
#: marked render: QwQ's and Qwen3's `split('</think>')[-1]`, the `[0]` half, and a filter that
#: turns a marked token into text that is no token (`upper`).
CUTTING_TEMPLATES = [
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}"
    "{{ m.content.split('</think>')[-1].lstrip('\\n') }}{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}",
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content.split('</think>')[0] }}|"
    "{{ m.content.split('<|im_end|>') | join('') }}<|im_end|>\n{% endfor %}",
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | upper }}<|im_end|>\n{% endfor %}",
]
CUT_CONTENTS = ["a</think>b", "</think>", "x</think>\n\nfinal", "<think>r</think>c</think>d", "<|im_end|></think>y",
                "</think><|im_end|>", "<|im_e</think>nd|>", "plain"]


@pytest.mark.parametrize("template", CUTTING_TEMPLATES, ids=["split-last", "split-first", "upper"])
def test_a_template_that_cuts_a_marked_token_matches_transformers(template: str) -> None:
    """transformers' encode_marked_chat drops a lone marker but encodes the text on either side
    apart; chatids does the same (it used to refuse the conversation)."""
    model = support.load_model("qwen3-0.6b")
    enc = model.enc.with_chat_template(template)
    for content in CUT_CONTENTS:
        messages = [{"role": "user", "content": content}, {"role": "assistant", "content": content}]
        for sanitize in (True, False):
            ref = list(model.tok.apply_chat_template(messages, chat_template=template, tokenize=True,
                                                     sanitize_control_tokens=sanitize, return_dict=False))
            assert enc.encode(messages, sanitize_control_tokens=sanitize).tolist() == ref, (content, sanitize)
        ctrl = {i for _, i in enc.control_tokens}
        detailed = enc.encode_detailed(messages)
        assert not [t for t, c in zip(detailed.ids, detailed.from_content) if c and int(t) in ctrl]
