"""The chatids Jinja engine (``src/template``) against transformers' own renderer.

(a) every chat template of the checkpoints and of ``$CHATIDS_DATA_DIR/templates`` on a sample of
    the corpus (every conversation with ``CHATIDS_CONFORMANCE=full``);
(b) templates written here from public format docs, on the same sample;
(c) a table of snippets covering the Jinja features chat templates use.

Both sides must give the same string, or both must raise. Where jinja2 would print a memory
address (``<built-in method ... at 0x...>``), chatids must raise instead.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any, Optional

import pytest

from support import FROZEN_NOW, corpus_files, corpus_rows, data_dir, full_conformance, require_models

import chatids._core as core  # noqa: E402
import transformers.utils.chat_template_utils as ctu  # noqa: E402


class _Frozen(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return cls(*FROZEN_NOW)


@pytest.fixture(autouse=True)
def _frozen_clock(monkeypatch):
    """transformers' strftime_now reads ``datetime.now()``; both sides see FROZEN_NOW."""
    monkeypatch.setattr(ctu, "datetime", _Frozen)


# ---- the two renderers ----


def reference(template: str, chat: Optional[list], **context: Any) -> tuple[str, str]:
    """transformers: ("ok", text) or ("err", message). Without ``chat``, the bare template."""
    try:
        if chat is None:
            return "ok", ctu._compile_jinja_template(template).render(**context)
        rendered, _ = ctu.render_jinja_template(conversations=[chat], chat_template=template, **context)
        return "ok", rendered[0]
    except Exception as e:  # the template raised
        return "err", f"{type(e).__name__}: {e}"


def ours(template: str, context: dict) -> tuple[str, str]:
    try:
        return "ok", core._jinja_render(template, json.dumps(context), FROZEN_NOW)
    except ValueError as e:
        return "err", str(e)


def chat_context(messages: list, tools: Optional[list], add_generation_prompt: bool, special: dict) -> dict:
    """What ``render_jinja_template`` hands the template, built with transformers' own helpers."""
    chat = ctu._alias_reasoning_fields(ctu._plain_template_data(messages))
    return {
        "messages": chat,
        "tools": tools,
        "documents": None,
        "add_generation_prompt": add_generation_prompt,
        **special,
    }


def differs(ref: tuple[str, str], got: tuple[str, str]) -> Optional[str]:
    """Why the two outcomes disagree, or None."""
    if ref[0] == "err" and got[0] == "err":
        # raise_exception() must come through as RenderError::Raised with its message
        raised_ref = ref[1][len("TemplateError: "):] if ref[1].startswith("TemplateError: ") else None
        raised_got = got[1][len("raised: "):] if got[1].startswith("raised: ") else None
        if raised_ref != raised_got:
            return f"raise_exception differs:\n  jinja2:  {ref[1][:300]!r}\n  chatids: {got[1][:300]!r}"
        return None
    if ref[0] == "ok" and got[0] == "ok":
        if ref[1] == got[1]:
            return None
        i = next((i for i, (a, b) in enumerate(zip(ref[1], got[1])) if a != b), min(len(ref[1]), len(got[1])))
        return f"first difference at char {i}:\n  jinja2:  {ref[1][max(0, i - 60):i + 60]!r}\n  chatids: {got[1][max(0, i - 60):i + 60]!r}"
    if ref[0] == "ok" and " at 0x" in ref[1] and got[0] == "err":
        return None  # jinja2 printed a memory address; chatids refuses
    return f"jinja2 {ref[0]}: {ref[1][:300]!r}\n  chatids {got[0]}: {got[1][:300]!r}"


# ---- (a) the real templates ----


def _special_tokens(config: dict) -> dict:
    out = {}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        tok = config.get(key)
        if isinstance(tok, dict):
            tok = tok.get("content")
        if tok is not None:
            out[key] = str(tok)
    return out


def real_templates() -> list[tuple[str, str, dict]]:
    """(name, template, special tokens) of every checkpoint and data template, deduplicated."""
    found: dict[str, tuple[str, str, dict]] = {}
    models = os.environ.get("CHATIDS_MODELS_DIR")
    if models:
        for cfg in sorted(Path(models).glob("*/tokenizer_config.json")):
            config = json.loads(cfg.read_text(encoding="utf-8"))
            templates = config.get("chat_template")
            if isinstance(templates, str):
                templates = [{"name": "default", "template": templates}]
            for t in templates or []:
                name = cfg.parent.name + ("" if t["name"] == "default" else f":{t['name']}")
                found.setdefault(t["template"], (name, t["template"], _special_tokens(config)))
    data = os.environ.get("CHATIDS_DATA_DIR")
    if data:
        for f in sorted((Path(data) / "templates").glob("*.jinja")):
            src = f.read_text(encoding="utf-8")
            found.setdefault(src, (f.stem, src, {"bos_token": "<s>", "eos_token": "</s>"}))
    return sorted(found.values())


def conversations() -> list[tuple[list, Optional[list]]]:
    out = []
    for name in corpus_files():
        for row in corpus_rows(name):
            out.append((row["messages"], row.get("tools")))
    return out


TOTALS: Counter = Counter()


def run_template(name: str, template: str, special: dict) -> Counter:
    counts: Counter = Counter()
    failures = []
    for messages, tools in conversations():
        for agp in (False, True):
            chat = ctu._normalize_chat_messages(messages)
            ref = reference(template, chat, tools=tools, add_generation_prompt=agp, **special)
            got = ours(template, chat_context(chat, tools, agp, special))
            why = differs(ref, got)
            if why is None:
                counts["both raised" if ref[0] == "err" else "compared"] += 1
            else:
                counts["mismatches"] += 1
                failures.append(why)
    TOTALS.update(counts)
    print(f"{name}: {dict(counts)}")
    assert not failures, f"{name}: {len(failures)} mismatches, first:\n{failures[0]}"
    return counts


def _require_data():
    path, reason = data_dir()
    if path is None:
        if require_models():
            pytest.fail(reason)
        pytest.skip(reason)


REAL = real_templates()


def test_real_templates_found():
    if not REAL:
        reason = "CHATIDS_MODELS_DIR/CHATIDS_DATA_DIR hold no chat templates"
        if require_models():
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.mark.parametrize("name,template,special", REAL, ids=[r[0] for r in REAL])
def test_real_templates(name, template, special):
    _require_data()
    counts = run_template(name, template, special)
    assert counts["compared"] > 0, f"{name}: every conversation raised"


# ---- (b) templates written from public format docs ----

PHI3 = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"
)

SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

ZEPHYR = """{% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>\\n' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>\\n' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>\\n'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %}"""

GENERATION = """{%- for message in messages -%}
  {%- if message.role == 'assistant' -%}
    <|assistant|>
{% generation -%}
{{ message.content | trim }}{{ eos_token }}
{%- endgeneration %}

  {%- else -%}
<|{{ message.role }}|>
{{ message.content }}
  {% endif -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|assistant|>
{% endif %}"""

KITCHEN_SINK = """{#- Exercises what real templates do: namespace, macros, loop helpers, filters, tests. -#}
{%- macro render_args(args, indent=2) -%}
    {%- if args is mapping -%}{{ args | tojson(indent=indent) }}
    {%- elif args is string -%}{{ args }}
    {%- else -%}{{ args | tojson }}{%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(system='', turns=0, last_role=none, tool_names=[]) -%}
{%- set systems = messages | selectattr('role', 'equalto', 'system') | list -%}
{%- if systems -%}{%- set ns.system = systems | map(attribute='content') | join('\\n\\n') -%}{%- endif -%}
{{- bos_token }}[SYSTEM {{ systems | length }}] {{ ns.system | trim | default('none', true) }}
{%- if tools %}
[TOOLS {{ tools | length }}]
{%- for tool in tools %}
{%- set f = tool.function if tool.function is defined else tool %}
- {{ f.name | upper }}: {{ (f.description or '') | truncate(60) }}
  params: {{ f.parameters.properties | default({}) | dictsort | map('first') | join(', ') }}
  required: {{ (f.parameters.required or []) | sort | join(',') }}
  schema: {{ f.parameters | tojson(sort_keys=true) }}
{%- set ns.tool_names = ns.tool_names + [f.name] %}
{%- endfor %}
{%- endif %}
{%- for m in messages if m.role != 'system' %}
{%- set ns.turns = ns.turns + 1 %}
{%- set content = m.content if m.content is string else m.content | tojson %}
{{ '\\n' ~ loop.index ~ '/' ~ loop.length ~ ' ' }}{{ loop.cycle('odd', 'even') }} {{ m.role | title }}
{%- if loop.previtem is defined and loop.previtem.role == m.role %} (again){% endif %}
{%- if loop.nextitem is defined %} -> {{ loop.nextitem.role }}{% else %} (last){% endif %}: 
{%- if content.startswith('{') or content.startswith('[') %} json:{{ content[:40] }}
{%- else %} {{ content.strip().split('\\n')[0][:80] | replace('  ', ' ') }}{% endif %}
{%- if m.reasoning_content %} <think>{{ m.reasoning_content.split()[:5] | join(' ') }}</think>{% endif %}
{%- for call in m.tool_calls | default([]) %}
 call {{ loop.index0 }} {{ call.function.name }}({{ render_args(call.function.arguments, indent=1) }}) known={{ call.function.name in ns.tool_names }}
{%- endfor %}
{%- if m.role == 'tool' %} for={{ m.tool_call_id | default('?') }} name={{ m.name | default('?') }}{% endif %}
{%- set ns.last_role = m.role %}
{%- endfor %}
{{ '\\n' }}turns={{ ns.turns }} last={{ ns.last_role }} words={{ messages | map(attribute='content') | select('string') | join(' ') | wordcount }}
roles={{ messages | map(attribute='role') | unique | list }} first={{ (messages | first).role }} last={{ (messages | last).role }}
{%- if add_generation_prompt %}
<assistant>{% endif %}"""

WRITTEN = [
    ("phi-3", PHI3, {"bos_token": "<s>", "eos_token": "<|endoftext|>"}),
    ("smollm2", SMOLLM2, {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}),
    ("zephyr", ZEPHYR, {"bos_token": "<s>", "eos_token": "</s>"}),
    ("generation", GENERATION, {"bos_token": "<s>", "eos_token": "</s>"}),
    ("kitchen-sink", KITCHEN_SINK, {"bos_token": "<s>", "eos_token": "</s>"}),
]



def shipped_templates() -> list[tuple[str, str, dict]]:
    """Templates that ship inside installed packages: transformers' Llama 4 and SmolVLM processor
    defaults, and every chat template mistral-common's generator builds (a third of them in
    sample mode)."""
    out = []
    try:
        from transformers.models.llama4 import processing_llama4
        from transformers.models.smolvlm import processing_smolvlm

        out.append(("llama-4", processing_llama4.chat_template, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot|>"}))
        out.append(("smolvlm", processing_smolvlm.DEFAULT_CHAT_TEMPLATE, {"bos_token": "<|im_start|>", "eos_token": "<end_of_utterance>"}))
    except (ImportError, AttributeError):
        pass
    try:
        import itertools

        from mistral_common.integrations.chat_templates.template_generator import TemplateConfig, build_chat_template
        from mistral_common.tokens.tokenizers.base import TokenizerVersion
    except ImportError:
        return out
    seen: set[str] = set()
    flags = ("spm", "image_support", "audio_support", "thinking_support", "plain_thinking_support", "use_special_token_variables")
    for version in TokenizerVersion:
        for values in itertools.product([False, True], repeat=len(flags)):
            kw = dict(zip(flags, values))
            for extra in ({}, {"reasoning_effort_values": ("none", "high"), "reasoning_effort_default": "none"}):
                try:
                    template = build_chat_template(TemplateConfig(version=version, **kw, **extra))
                    break
                except Exception:  # an invalid combination
                    template = None
            if template is None or template in seen:
                continue
            seen.add(template)
            short = {"use_special_token_variables": "vars", "plain_thinking_support": "plain"}
            name = f"mistral-common-{version.value}" + "".join(f"-{short.get(k, k.split('_')[0])}" for k, v in kw.items() if v)
            out.append((name, template, {"bos_token": "<s>", "eos_token": "</s>"}))
    return [t for i, t in enumerate(out) if full_conformance() or i < 2 or i % 3 == 0]


WRITTEN += shipped_templates()


@pytest.mark.parametrize("name,template,special", WRITTEN, ids=[w[0] for w in WRITTEN])
def test_written_templates(name, template, special):
    _require_data()
    counts = run_template(name, template, special)
    assert counts["compared"] > 0, f"{name}: every conversation raised"


def test_print_totals():
    """The totals of (a) and (b) (run with ``-s`` to see them)."""
    mode = "full" if full_conformance() else "sample"
    print(f"jinja conformance ({mode}): {dict(TOTALS)}")


# ---- (c) the feature table ----

CTX = {
    "s": "  Hello, World  ",
    "ws": "\x1c\x1d\x1e\x1f \t\n\x0b\x0c\r\x85\xa0\u3000x y\u2028z\u3000\x85",
    "q": "it's \"quoted\" \\ back\nslash\t\x7f\x00é\u200b😀",
    "n": None,
    "t": True,
    "f": False,
    "i": 42,
    "neg": -7,
    "fl": 1.0,
    "floats": [0.1, 1e16, 1e-5, 123456789012345678.0, -0.0, 2.5, 1e15, 3.14159, 1e22],
    "lst": [3, 1, 2],
    "words": ["b", "A", "c", "a", "B"],
    "nested": {"a": [1, None, True, "x"], "b": {"c": 1.5, "d": "it's"}, "e": []},
    "msgs": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo", "extra": 1},
        {"role": "user", "content": "bye"},
    ],
    "d": {"b": 2, "a": 1, "C": 3},
    "uni": "ǆungla ΣΑΣ straße İx",
    "empty": "",
    "zero": 0,
    "schema": {"type": "array", "properties": {"x": {"type": "string"}}},
}

SNIPPETS = [
    # `+` chains (one call for the whole chain in chatids): literal and non-literal steps,
    # numbers, lists, tuples, Markup, errors at a literal step and at a Python step, a
    # chain longer than one call takes, and right-nested and parenthesized operands
    "{{ '<' + s + '>' + q + '|' + uni }}|{{ s + q + uni }}|{{ i + 1 + 2 }}|{{ fl + i + 1 }}|{{ lst + [4] + lst }}|{{ (1, 2) + (3,) + (4,) }}|{{ ('a' + 'b') + s + ('c' + q) }}|{{ s + empty + '' + empty }}",
    "{{ 'x' + s + i + 'y' }}",
    "{{ s + q + i }}",
    "{{ s + missing + 'x' }}",
    "{{ 'x' + n + s }}",
    "{{ ('<b>' | safe) + '<i>' + s + ('<u>' | e) + q }}|{{ s + ('<b>' | safe) + '<' }}",
    "{{ nested | tojson + ', ' + s + (d | tojson) }}",
    "{{ '<'  + s + '<'  + s + '<'  + s + '<'  + s + '<'  + s + '<'  + s + '<'  + s + '<'  + s + '<'  + s + '<'  + s + '<'  + s + '<'  + s + '<'  + s + '<'  + s + '<'  + s + '<'  + s + '<'  + s + '<'  + s + '<'  + s + '<'  + s }}",
    # trim and strip with nothing to remove return the same string
    "{{ s | trim }}|{{ 'abc' | trim }}|{{ ('<b> ' | safe) | trim }}|{{ ('<b>' | safe) | trim }}|{{ 'x'.strip() }}|{{ ' x'.strip() }}|{{ 'x '.rstrip() }}|{{ 'xyx'.strip('y') }}|{{ 'xyx'.strip('x') }}|{{ i | trim }}",
    # calls with *args / **kwargs, macros taking varargs / kwargs, macros held in values
    "{% macro m(a, b) %}{{ a }}-{{ b }}{% endmacro %}{% set args = [1, 2] %}{{ m(*args) }}{{ m(**{'a': 3, 'b': 4}) }}{{ m(5, *[6]) }}{{ m(*[7], b=8) }}",
    "{% macro m(a, b=a ~ '!') %}{{ a }}-{{ b }}{% endmacro %}{{ m(*['x']) }}{% set ms = [m] %}{{ ms[0]('y') }}{{ ms[0](none) }}{{ ms[0]('z', b=none) }}",
    "{{ 'a,b'.split(*[',']) }}|{{ '{}-{}'.format(*[1, 2]) }}|{{ dict(**{'a': 1}) }}|{{ range(*[1, 4]) | list }}|{{ d.get(*['b']) }}|{{ msgs[0].get(**{'key': 'role'}) }}",
    "{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, a=3) }}{{ m() }}{{ m(*lst, **d) }}",
    "{% macro m(x) %}{{ x }}{{ varargs }}{% endmacro %}{{ m(1, 2, 3) }}{{ m(1, a=2) }}",
    "{% macro m(x) %}{{ x }}{{ kwargs }}{% endmacro %}{{ m(1, x=2) }}",
    "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(*5) }}",
    "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(**{1: 2}) }}",
    "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(1, **{'x': 2}) }}",
    "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(1, 2) }}",
    "{% macro outer() %}{% macro inner() %}{{ varargs }}{% endmacro %}{{ inner(1) }}{% endmacro %}{{ outer(2) }}",
    # a macro or call block in a loop reading a name the loop sets (a fresh value each iteration)
    "{% set i = 1 %}{% for j in [3, 4] %}{% macro q() %}[{{ i }}]{% endmacro %}{{ q() }}{% set i = j %}{{ q() }}{% endfor %}",
    "{% for j in [3, 4] %}{% macro q() %}[{{ i }}]{% endmacro %}{{ q() }}{% set i = j %}{{ q() }}{% endfor %}",
    "{% for j in [3, 4] %}{% if j == 3 %}{% set i = j %}{% endif %}{% macro q() %}[{{ i }}]{% endmacro %}{{ q() }}{% endfor %}",
    "{% for j in [3, 4] %}{% if j == 3 %}{% set s = j %}{% endif %}{% macro q() %}[{{ s }}]{% endmacro %}{{ q() }}{% endfor %}",
    "{% for j in [3, 4] %}{% macro q() %}[{{ i }}]{% endmacro %}{{ q() }}{% set i = 5 %}{% endfor %}",
    "{% macro f() %}<{{ caller() }}>{% endmacro %}{% for m in msgs %}{% set r = m.role %}{% call f() %}{{ r }}{{ m.content }}{% endcall %}{% endfor %}",
    "{% macro f() %}<{{ caller() }}>{% endmacro %}{% for m in msgs %}{% call f() %}{{ r }}{% endcall %}{% set r = m.role %}{% endfor %}",
    # jinja2's other globals
    "{% set j = joiner(', ') %}{% for x in [1, 2, 3] %}{{ j() }}{{ x }}{% endfor %}{% set k = joiner() %}{{ k() }}{{ k() }}{% set z = joiner(sep=0) %}{{ z() }}{{ z() }}",
    "{% set c = cycler('a', 'b') %}{% for x in [1, 2, 3] %}{{ c.next() }}{% endfor %}{{ c.current }}{{ c.reset() }}{{ c.current }}{{ c.items }}",
    "{{ cycler() }}",
    "{% macro m() %}{{ caller(1, 2, k=3) }}{{ caller(4) }}{% endmacro %}{% call(x) m() %}{{ x }}{{ varargs }}{{ kwargs }}{% endcall %}",
    "{% macro m() %}{{ caller(1, 2) }}{% endmacro %}{% call(x) m() %}{{ x }}{% endcall %}",
    "{% macro m() %}{{ caller(1, 2) }}{% endmacro %}{% call m() %}{{ varargs }}{% endcall %}",
    "{{ self.b() }}{% block b %}x{% endblock %}{{ self.b() }}",
    "{{ self }}|{{ self is defined }}|{{ lipsum is defined }}|{{ joiner is defined }}|{{ cycler is defined }}|{{ debug is defined }}|{{ loop is defined }}|{{ caller is defined }}",
    # output formatting (Python str())
    "{{ n }}|{{ t }}|{{ f }}|{{ i }}|{{ fl }}|{{ neg }}",
    "{{ floats }}",
    "{% for x in floats %}{{ x }} {% endfor %}",
    "{{ nested }}|{{ nested.a }}|{{ nested.b }}|{{ nested.e }}",
    "{{ q }}|{{ [q] }}|{{ {'k': q} }}",
    "{{ [\"it's\"] }}{{ ['\"'] }}{{ ['a\\'b\"c'] }}{{ ['\\\\'] }}",
    "{{ ('a',) }}{{ (1, 2) }}{{ () }}{{ [] }}{{ {} }}",
    "{{ 1, 'a' }}",
    "{{ x }}|{{ x is defined }}|{{ x is undefined }}|{{ [x] }}",
    "{{ 10 / 4 }} {{ 10 // 4 }} {{ -7 // 2 }} {{ 7 // -2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 7.5 % 2 }} {{ -7.5 // 2 }}",
    "{{ 1 / 0 }}",
    "{{ 1 // 0 }}",
    "{{ 5 % 0 }}",
    "{{ 3 * 'ab' }}{{ 'ab' * 2 }}{{ [1] * 2 }}{{ [1, 2] + [3] }}",
    "{{ 'a' + 1 }}",
    "{{ 'a' ~ 1 ~ none ~ true ~ 1.0 ~ [1] ~ x }}",
    "{{ 1 + 2.5 }} {{ true + 1 }} {{ 10 - 0.5 }} {{ 0.1 + 0.2 }} {{ 1e300 * 1e10 }}",
    "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ true == 1 }}",
    "{{ 1 < 'a' }}",
    "{{ 'a' in 'cat' }} {{ 1 in [1, 2] }} {{ 'a' in {'a': 1} }} {{ 3 not in lst }} {{ 'x' in x }}",
    "{{ 1 in 'abc' }}",
    "{{ 'a' in none }}",
    "{{ -i }} {{ +i }} {{ not i }} {{ i and 'y' }} {{ zero or 'z' }} {{ none or false }}",
    "{{ 'yes' if t else 'no' }} {{ 'yes' if f }}|{{ ('a' if f) is defined }}",
    # whitespace control and literals
    "a\n  {% if t %}\n  b\n  {% endif %}\n  c\n",
    "a  {%- if t -%}  b  {%- endif -%}  c",
    "x\n    {%+ if t %}y{% endif %}\n{# comment #}\n  {#- c -#}  z\n",
    "{% raw %}{{ not rendered }}{% endraw %}\n{%- raw -%}  {% x %}  {%- endraw %}",
    "line1\r\nline2\rline3\n",
    "{{ '\\x41\\u00e9\\U0001F600\\101\\n\\t\\\\ \\d' }}",
    "{{ 'a' 'b' \"c\" }} {{ 1_000 }} {{ 0x1f }} {{ 1e3 }} {{ 1.5e-7 }} {{ 0o17 }}",
    "{{ true }}{{ True }}{{ none }}{{ None }}{{ false }}",
    "  {{- ' x ' -}}  ",
    "{% set x = 1 %}\n{{ x }}\n",
    # strings: methods with Python semantics
    "[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ s.strip(' H') }}][{{ ws.strip() }}][{{ ws.lstrip() }}]",
    "{{ ws.split() }} {{ '  a  b  '.split(none, 1) }} {{ '  a  b  '.rsplit(none, 1) }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}",
    "{{ ''.split() }} {{ ''.split(',') }} {{ 'a'.split('') }}",
    "{{ 'x\\ny\\r\\nz\\x1cw\\x85v\\u2028'.splitlines() }} {{ 'a\\nb\\n'.splitlines(true) }}",
    "{{ s.startswith('  H') }} {{ s.endswith(('x', '  ')) }} {{ 'abc'.startswith('b', 1) }} {{ 'abc'.startswith(['a']) }}",
    "{{ 'aaa'.replace('a', 'b', 2) }} {{ 'abc'.replace('', '-') }} {{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ 'hELLO wORLD'.capitalize() }}",
    "{{ uni.upper() }}|{{ uni.lower() }}|{{ uni.title() }}|{{ uni.capitalize() }}|{{ uni.swapcase() }}",
    "{{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('zz') }} {{ s.index('W') }} {{ s.count('l') }} {{ 'aaa'.count('') }} {{ 'héllo'.find('l') }}",
    "{{ s.index('zz') }}",
    "{{ ', '.join(['a', 'b']) }} {{ ''.join('abc') }}",
    "{{ ', '.join([1, 2]) }}",
    "{{ 'Straße ΣΑΣ ﬁ'.casefold() }} {{ '12'.isdigit() }} {{ '²'.isdigit() }} {{ 'ab'.isalpha() }} {{ 'a1'.isalnum() }} {{ ' \\x1c'.isspace() }} {{ ''.isspace() }} {{ 'AB'.isupper() }} {{ 'ab1'.islower() }} {{ 'Ab Cd'.istitle() }}",
    "{{ '42'.zfill(5) }} {{ '-42'.zfill(5) }} {{ 'ab'.center(7, '*') }} {{ 'ab'.ljust(4, '.') }}|{{ 'ab'.rjust(4) }}",
    "{{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'abc'.partition('x') }} {{ 'prefix_x'.removeprefix('prefix_') }}",
    "{{ '{} and {name}'.format(1, name='x') }} {{ '{0}{0}{{}}'.format('a') }}",
    # str.format's format-spec mini-language, as templates align tables and number tools.
    "{{ '{:>5}|{:<5}|{:^7}|{:*^9}|{:.2}|{:5}|{:05}|{:>3}'.format('ab', 'cd', 'ef', 'gh', 'xyz', 'q', 'ab', 'long') }}",
    "{{ '{:5}|{:05}|{:+d}|{: d}|{:x}|{:#x}|{:#o}|{:#b}|{:X}|{:,}|{:_}|{:_b}|{:08,}|{:-^9}|{:=+6}|{:c}'.format(42, -42, 42, 42, 255, 255, 8, 5, 255, 1234567, -1234567, 255, 1234, 7, 3, 97) }}",
    "{{ '{:.2f}|{:8.3f}|{:08.2f}|{:+.1f}|{:e}|{:.2E}|{:.1%}|{:,.2f}|{:F}|{:f}|{:.0f}|{:.3e}'.format(3.14159, 2.5, -1.5, 2.0, 12345.678, 0.00012, 0.256, 1234567.891, 1e400, -1e400, 2.5, 0) }}",
    "{{ '{:,}|{:_}|{:010,.1f}|{:5}|{:<8}|{:=+8}|{:%}|{:08}|{:>6}|{:3}|{:d}'.format(1234.5, 1e16, -1234.5, 1.5, 2.25, 3.5, 1, -2.5, true, false, true) }}",
    "{{ '{!r}|{!s:>6}|{!r:^9}|{x!r}|{:}'.format('a', 'b', 'c', 4, x=[1, 'y']) }}",
    "{{ '{:>6}'.format(none) }}",
    "{{ '{:d}'.format(1.5) }}",
    "{{ '{:s}'.format(1) }}",
    "{{ '{:+}'.format('a') }}",
    "{{ '{:.2}'.format(3) }}",
    "{{ '{0}{}'.format(1, 2) }}",
    "{{ '{}{0}'.format(1, 2) }}",
    "{{ '{!x}'.format(1) }}",
    "{{ '%s is %d' % ('x', 3) }} {{ '%s' % none }} {{ '%(a)s-%(b)r' % {'a': 1, 'b': 'q'} }} {{ '100%%' % () }}",
    "{{ '%5.2f' % 3.14159 }}",
    "{{ s[2:7] }}|{{ s[::-1] }}|{{ s[-3:] }}|{{ lst[::2] }}|{{ lst[-1] }}|{{ lst[5] }}|{{ s[1] }}|{{ lst[1:-1] }}|{{ 'abcdef'[4:1:-2] }}|{{ lst[::-1] }}",
    "{{ lst[::0] }}",
    "{{ n[1:] }}|{{ i[0] }}|{{ d[1:] }}",
    "{{ s.upper }}",
    "{{ s.nope }}|{{ d.nope }}|{{ lst.nope }}|{{ n.nope }}",
    "{{ x.y }}",
    "{{ x.y is defined }}",
    "{{ x['y'] }}",
    "{{ x.strip() }}",
    # dicts and lists
    "{{ d.items() }} {{ d.keys() }} {{ d.values() }} {{ d.items() | list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 0) }}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {% for k in d %}{{ k }}{% endfor %} {{ d | length }} {{ d.keys() | length }}",
    "{{ d.items()[0] }}",
    "{{ d['items'] }}{{ schema['items'] is defined }}{{ schema.items is defined }}{% if schema['items'] %}truthy{% endif %}",
    "{{ schema['items']['type'] }}|{{ schema.type }}|{{ d.copy() }}",
    "{{ d.update({'z': 1}) }}",
    "{{ lst.append(4) }}",
    "{{ lst.pop() }}",
    "{{ lst.append }}|{{ d.pop }}",
    "{{ lst.count(1) }} {{ lst.index(2) }} {{ (1, 2, 1).count(1) }}",
    "{{ lst.index(9) }}",
    "{{ dict(a=1, b=[2]) }} {{ dict([('x', 1)]) }} {{ dict(d, z=0) }} {{ dict() }} {{ dict.fromkeys(['a', 'b'], 0) }}",
    "{{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ [1, 2] == [1, 2] }} {{ (1, 2) == [1, 2] }}",
    # loops
    "{% for x in lst %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.cycle('a', 'b') }} {% endfor %}",
    "{% for x in lst %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.previtem is defined }}]{% endfor %}",
    "{% for x in lst if x > 1 %}{{ x }}{{ loop.index }}{% else %}none{% endfor %}|{% for x in [] %}{% else %}empty{% endfor %}",
    "{% for x in lst %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}{% for a, b in d | dictsort %}{{ a }}{{ b }}{% endfor %}",
    "{% for c in 'abc' %}{{ c }}{% endfor %}{% for x in x %}{{ x }}{% endfor %}",
    "{% for x in n %}{{ x }}{% endfor %}",
    "{% for x in i %}{{ x }}{% endfor %}",
    "{% for m in msgs %}{% for x in [1] %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}",
    "{% for x in range(3) %}{{ x }}{% endfor %}{{ range(2, 10, 3) | list }}{{ range(5) }}{{ range(1, 3) | length }}",
    "{% set ns = namespace(a=1, b=[]) %}{% for x in lst %}{% set ns.a = ns.a + x %}{% set ns.b = ns.b + [x] %}{% endfor %}{{ ns.a }} {{ ns.b }} {{ ns.missing }}",
    "{% set c = 0 %}{% for x in lst %}{% set c = c + x %}{% endfor %}{{ c }}",
    "{% set ns = namespace(_x=1) %}",
    "{% set ns = namespace() %}{% set ns._x = 1 %}",
    # macros, set blocks, call blocks, filter blocks
    "{% macro m(a, b='B', c=none) %}[{{ a }}|{{ b }}|{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}{{ m() }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
    "{% macro m() %}{{ caller() }}!{% endmacro %}{% call m() %}inside{% endcall %}",
    "{% macro m(x) %}{{ caller(x * 2) }}{% endmacro %}{% call(v) m(2) %}got {{ v }}{% endcall %}",
    "{% set b %}  block {{ i }}  {% endset %}[{{ b }}]{% set u | upper %}abc{% endset %}{{ u }}",
    "{% filter upper %}abc {{ s }}{% endfilter %}",
    "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}",
    "{% if t %}A{% elif f %}B{% else %}C{% endif %}{% if f %}A{% elif t %}B{% endif %}",
    "{%- generation -%} gen {{ i }} {%- endgeneration -%}|{% generation %}{% set z = 1 %}{% endgeneration %}{{ z }}",
    "{% print i, 'x' %}",
    "{% include 'other.jinja' %}",
    "{% do lst.append(1) %}",
    "{% unknowntag %}",
    "{{ i | nofilter }}",
    "{% if f %}{{ i | nofilter }}{% endif %}",
    "{{ i is notatest }}",
    "{{ raise_exception('nope ' ~ i) }}",
    "{% macro m() %}{{ raise_exception('deep') }}{% endmacro %}{% for x in lst %}{{ m() }}{% endfor %}",
    "{{ strftime_now('%Y-%m-%d %H:%M:%S %a %A %b %B %j %p %I %y %e %-d %%') }}",
    "{{ (x ~ '') | length }}{{ x | length }}{{ x | list }}{{ x | first }}{{ x | default('dflt') }}{{ x | string }}{{ x | upper }}",
    "{{ x + 1 }}",
    "{{ x | tojson }}",
    "{{ n.x }}|{{ n['x'] }}",
    # filters
    "{{ s | trim }}|{{ ws | trim }}|{{ 'xxaxx' | trim('x') }}|{{ s | length }}|{{ s | count }}|{{ lst | length }}",
    "{{ lst | first }} {{ lst | last }} {{ 'abc' | first }} {{ 'abc' | last }} {{ [] | first }}|{{ d | first }} {{ d | last }}",
    "{{ lst | select('odd') | last }}",
    "{{ lst | join }} {{ lst | join(', ') }} {{ msgs | join(', ', attribute='role') }} {{ [1, none, [2]] | join('|') }}",
    "{{ msgs | map(attribute='role') | list }} {{ msgs | map(attribute='missing', default='?') | list }} {{ words | map('upper') | join }} {{ lst | map('string') | list }}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ msgs | rejectattr('role', 'eq', 'user') | list | length }} {{ msgs | selectattr('extra') | list | length }}",
    "{{ lst | select('odd') | list }} {{ lst | reject('even') | list }} {{ lst | select('gt', 1) | list }} {{ [0, 1, '', 'a', none] | select | list }} {{ lst | select('in', [1, 2]) | list }}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | length }}",
    "{{ lst | select('odd') }}",
    "{% set g = lst | select('odd') %}{{ g | list }}{{ g | list }}{% if g %}truthy{% endif %}",
    "{% set g = lst | map('string') %}{{ g | first }}|{{ g | list }}|{{ g | first }}",
    "{{ n | map('upper') | list }} {{ n | select | list }}",
    "{{ lst | map('nofilter') | list }}",
    "{{ lst | list }} {{ 'ab' | list }} {{ d | list }} {{ lst | reverse | list }} {{ 'abc' | reverse }} {{ d | reverse | list }}",
    "{{ lst | reverse }}",
    "{{ lst | sort }} {{ words | sort }} {{ words | sort(case_sensitive=true) }} {{ words | sort(reverse=true) }} {{ msgs | sort(attribute='role') | map(attribute='content') | list }}",
    "{{ [1, 'a'] | sort }}",
    "{{ words | unique | list }} {{ words | unique(case_sensitive=true) | list }} {{ lst | min }} {{ lst | max }} {{ words | max }} {{ [] | max }}|{{ lst | sum }} {{ msgs | sum(attribute='extra') }} {{ [[1], [2]] | sum(start=[]) }}",
    "{{ d | dictsort }} {{ d | dictsort(true) }} {{ d | dictsort(by='value', reverse=true) }} {{ d | items | list }} {{ x | items | list }}",
    "{{ d | items }}",
    "{{ lst | items }}",
    "{{ x | default('u') }} {{ n | default('u') }} {{ '' | default('e') }} {{ '' | default('e', true) }} {{ 0 | d('z', boolean=true) }} {{ n | d('nn', true) }}",
    "{{ i | string }} {{ n | string }} {{ lst | string }} {{ fl | string }} {{ t | string | upper }}",
    "{{ s | lower }} {{ s | upper }} {{ s | title }} {{ 'hello-world foo(bar) [x]y' | title }} {{ \"it's o'neil\" | title }} {{ s | capitalize }} {{ uni | title }}",
    "{{ s | replace('l', 'L') }} {{ s | replace('l', 'L', 1) }} {{ i | replace('4', 'x') }}",
    "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb\\n\\nc' | indent(2, true) }}|{{ 'a\\nb\\n\\nc' | indent(2, blank=true) }}|{{ 'a\\nb' | indent('> ', first=true) }}|{{ '' | indent(first=true) }}|{{ 'a\\x1cb\\r\\nc' | indent(1) }}",
    "{{ i | indent }}",
    "{{ nested | tojson }}|{{ nested | tojson(indent=2) }}|{{ nested | tojson(indent='\\t') }}|{{ nested | tojson(separators=(',', ':')) }}|{{ d | tojson(sort_keys=true) }}",
    "{{ q | tojson }}|{{ q | tojson(ensure_ascii=true) }}|{{ uni | tojson(true) }}|{{ floats | tojson }}|{{ [n, t, f] | tojson }}|{{ {} | tojson(indent=2) }}|{{ [] | tojson(indent=0) }}|{{ [1, [2]] | tojson(indent=0) }}",
    "{{ {1: 'a', none: 'b', true: 'c', 1.5: 'd'} | tojson }}",
    "{{ (1, 2) | tojson }} {{ 'a' | tojson }} {{ 1.0 | tojson }} {{ 1e16 | tojson }}",
    "{{ d.items() | tojson }}",
    "{{ {(1, 2): 'a'} | tojson }}",
    "{{ s | safe }} {{ '<b>' | e }} {{ '<b>&\\'\"' | escape }} {{ ('<b>' | e) ~ '<i>' }} {{ ('<b>' | safe) + '<i>' }} {{ '<i>' + ('<b>' | safe) }} {{ ('<b>' | e) | length }} {{ ('a' | safe) == 'a' }}",
    "{{ i | int }} {{ '12' | int }} {{ '3.7' | int }} {{ 'x' | int }} {{ 'x' | int(5) }} {{ '0x1f' | int(base=16) }} {{ 2.9 | int }} {{ ' 7 ' | int }} {{ '1_0' | int }} {{ n | int }}",
    "{{ i | float }} {{ '1.5' | float }} {{ 'x' | float }} {{ '1e3' | float }} {{ 'inf' | float }} {{ n | float }} {{ ' 2 ' | float }}",
    "{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 0.125 | round(2) }} {{ 7 | round }} {{ 2.1 | round(method='ceil') }} {{ 2.9 | round(0, 'floor') }} {{ -2.5 | round }}",
    "{{ -3 | abs }} {{ -2.5 | abs }} {{ (-3) | abs }} {{ 'a' | center(7) }}|{{ 'ab' | center(7) }}|{{ 'abc' | center(2) }}",
    "{{ 'a b c d e f g h' | truncate(9) }}|{{ 'a b c d e f g h' | truncate(9, true) }}|{{ 'abcdefghijklmnop' | truncate(9, leeway=0) }}|{{ 'abcdefghijk' | truncate(9, true, '..', 0) }}|{{ 'short' | truncate(9) }}",
    "{{ 'one two, three-four_five 6' | wordcount }} {{ 'héllo wörld' | wordcount }}",
    "{{ lst | batch(2) | list }} {{ lst | batch(2, 'x') | list }} {{ [1, 2, 3, 4, 5] | slice(2) | list }} {{ [1, 2, 3, 4, 5] | slice(3, 0) | list }}",
    "{{ d | attr('items') is callable }} {{ d | attr('a') }} {{ 'x' | attr('upper') is defined }}",
    "{{ '%s-%s' | format(1, 'a') }} {{ '%(x)s' | format(x=2) }}",
    "{{ msgs | groupby('role') }}",
    # tests
    "{{ n is none }} {{ i is number }} {{ t is number }} {{ fl is integer }} {{ fl is float }} {{ i is integer }} {{ t is integer }} {{ t is boolean }} {{ i is boolean }}",
    "{{ s is string }} {{ d is mapping }} {{ lst is mapping }} {{ lst is iterable }} {{ s is iterable }} {{ i is iterable }} {{ x is iterable }} {{ n is iterable }}",
    "{{ lst is sequence }} {{ s is sequence }} {{ d is sequence }} {{ x is sequence }} {{ i is sequence }} {{ (lst | select) is sequence }} {{ (lst | select) is iterable }}",
    "{{ t is true }} {{ 1 is true }} {{ f is false }} {{ 0 is false }} {{ i is odd }} {{ i is even }} {{ 3.0 is odd }} {{ i is divisibleby 7 }} {{ i is divisibleby(5) }}",
    "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aBc' is lower }} {{ i is lower }} {{ 'a' is in 'cat' }} {{ 1 is in lst }} {{ i is eq 42 }} {{ i is equalto 41 }} {{ i is ne 1 }} {{ i is gt 1 }} {{ i is lt 1 }} {{ i is ge 42 }} {{ i is le 41 }} {{ i is greaterthan 3 }} {{ i is lessthan 3 }}",
    "{{ n is sameas none }} {{ t is sameas true }} {{ 1 is sameas 1 }} {{ f is sameas 0 }}",
    "{{ x is callable }} {{ namespace is callable }} {{ raise_exception is callable }} {{ d is callable }} {{ s.upper is callable }} {{ lst is callable }}",
    "{% macro m() %}{% endmacro %}{{ m is callable }} {{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} {{ s | e is escaped }} {{ s is escaped }}",
    "{{ i is not none }} {{ not i is none }} {{ x is not defined }} {{ n is defined }}",
    "{{ 'a' < 1 }}",
    "{{ lst | select('nosuchtest') | list }}",
    # undefined behaviour
    "{{ x }}|{% if x %}T{% else %}F{% endif %}|{% for a in x %}{{ a }}{% endfor %}|{{ x | length }}|{{ x == x }}|{{ x == none }}",
    "{{ x() }}",
    "{{ x.y.z }}",
    "{{ x[0] }}",
    "{{ x[1:] }}",
    "{{ -x }}",
    "{{ x < 1 }}",
    "{{ 'a' in x }}",
    "{{ x | join }}|{{ x | list }}|{{ x | reverse | list }}|{{ x | last }}|{{ x | trim }}|{{ x | lower }}",
    "{{ x | int }} {{ x | float }} {{ x | d(1) }} {{ x is mapping }} {{ x is string }} {{ x is number }}",
    "{{ x | abs }}",
    "{{ x | indent }}",
    "{{ msgs[0].nope }}|{{ msgs[9] }}|{{ msgs[0]['nope'] }}|{{ msgs[0].role.nope }}",
    "{{ msgs[9].role }}",
    # regressions found by fuzzing against jinja2
    "{{ -t }} {{ -f }} {{ -(1 > 2) }} {{ +t }} {{ -fl }} {{ -neg }}",
    "{{ 0 and 1 }} {{ none and 0.1 }} {{ [] and 1 }} {{ [1] or 0 }} {{ 'x' and [] }}",
    "{{ (1, 'b') * 2 }} {{ 2 * [1] }} {{ 'ab' * t }} {{ [1] * -1 }}",
    "{{ (1, 'b') + [] }}",
    "{{ 3.0 * 'x' }}",
    "{{ 10 ** -1 }} {{ 2 ** 0.5 }} {{ (-8) ** 2 }} {{ 2 ** 3 ** 2 }} {{ -3 ** 2 }} {{ 0 ** 0 }}",
    "{{ 0 ** -1 }}",
    "{{ 12345678901234567890 }} {{ 2 ** 100 }}",
    "{{ '%-5s|%5s|%05d|%+d|% d|%x|%#x|%o|%.2f|%10.3f|%-8.2f|%e|%.3E|%c|%c|%5.1s|%%|%r' % ('ab', 'cd', 42, 5, 7, 255, 255, 8, 3.14159, 2.5, -1.005, 12345.678, 0.000123, 65, 'z', 'xyz', 'q') }}",
    "{{ '%d' % 3.99 }} {{ '%s %s' % [1, 2] }} {{ 'abc' % [] }} {{ '%(a)s' % {'a': 1} }} {{ '%s' % x }}",
    "{{ '%d' % 'x' }}",
    "{{ 'abc' % 5 }}",
    "{{ '%s %s' % ('a',) }}",
    "{{ ('<b>' | safe).join([1, none, '<i>']) }} {{ ('<b>' | e).join(['<', 2]) }} {{ ('<b>' | safe).split('b') }} {{ ('<b>' | safe).replace('b', '<i>') }}",
    "{{ {1: 'a', true: 'b', 1.0: 'c', 'k': 'd'} }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c, d = [3, 4] %}{{ c }}{{ d }}{% for k, v in [('x', 1)] %}{{ k }}{{ v }}{% endfor %}",
    "{% macro m(a, b=a ~ '!', c=b ~ '?') %}{{ a }}|{{ b }}|{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, 2) }} {{ m(1, c=3) }} {{ m(1, x) }}",
    "{% macro m(a='d') %}[{{ a }}]{% endmacro %}{{ m(x) }}{{ m() }}{{ m(a=x) }}{{ m(none) }}{% set f = m %}{{ f() }}",
    "{% set x = 'X' %}{% macro m(a=x) %}{{ a }}{% endmacro %}{% set x = 'Y' %}{{ m() }}",
    "{% macro m(a, b=a) %}{{ caller(b) }}{% endmacro %}{% call(v, w=v ~ '+') m(5) %}{{ v }}{{ w }}{% endcall %}",
    "{% macro m(a, b=1) %}{{ a }}{{ b }}{% endmacro %}{{ m(1, c=2) }}",
    "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(20) }}",
    "{% for x in [1, 1, 2] %}{% if loop.changed(x) %}{{ x }}{% endif %}{{ loop.depth }}{% endfor %}",
    "{% for item in [{'n': 1, 'c': [{'n': 2, 'c': []}]}] recursive %}{{ item.n }}{{ loop.depth }}({{ loop(item.c) }}){% endfor %}",
    "{% set a = 1 %}{% block b %}{{ a }}{% set c = 2 %}{% endblock %}{{ c }}",
    "x {{ 'a' }}\u3000{%- if\u3000true\xa0-%}\x85 y{% endif %}{#",
    "a{% raw %}",
    "{{ 'a' ~ 1e16 ~ 1e-7 ~ 0.1 ~ [1.0] }}{{ 1e16 | string }}{{ [1e16] | join }}{{ '{}'.format(1e16) }}",
    "{% set k = 'items' %}{{ d[k] is defined }} {% for i in range(3) %}{{ lst[i] }}{{ s[i] }}{{ lst[-i] }}{% endfor %} {{ d['a'] }} {{ lst[t] }} {{ lst[1.0] }} {{ d[k2] }}",
    "{% for g in msgs | groupby('role') %}{{ g.grouper }}:{{ g.list | length }} {{ g['grouper'] }} {{ g[0] }} {{ g }};{% endfor %}",
    "{% for role, items in msgs | groupby('role') %}{{ role }}={{ items | map(attribute='content') | join(',') }};{% endfor %}",
    "{% for x in [1, 2] %}{% generation %}{{ loop.index }}{{ x }}{% endgeneration %}{% endfor %}",
    "{% for x in [1, 2, 3] %}{% generation %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endgeneration %}{% endfor %}",
    "{% set ns = namespace(a=0) %}{% for x in [1, 2] %}{% generation %}{% set ns.a = ns.a + x %}{% set local = 1 %}{% endgeneration %}{{ local }}{% endfor %}{{ ns.a }}",
    "{%- generation %}\n  a\n{% endgeneration -%}\nb{% macro m() %}{% generation %}in macro{% endgeneration %}{% endmacro %}{{ m() }}",
    "{% break %}",
    "{% macro m() %}{% continue %}{% endmacro %}",
    "{% for x in [1] %}{% else %}{% break %}{% endfor %}",
    "{% for x in [1, 2] %}{% for y in [1, 2] %}{% if y == 2 %}{% break %}{% endif %}{{ x }}{{ y }}{% endfor %}{% if x == 1 %}{% continue %}{% endif %}!{% endfor %}",
    # jinja2's scoping (found by fuzzing statements)
    "{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% set i = 1 %}{{ m() }}|{{ s }}{% set s = 2 %}{{ s }}",
    "{% for x in [1] %}{{ i }}{% endfor %}{% set i = 1 %}|{% if false %}{% set t = 0 %}{% endif %}{% for x in [1] %}{{ t }}{% endfor %}",
    "{% set c %}{{ i }}{% endset %}[{{ c }}]{% set i = 1 %}{% filter upper %}{% set z = 1 %}{% endfilter %}{{ z }}{% set b %}{% set y = 2 %}{% endset %}{{ y }}",
    "{% for x in [1, 2] %}{% for j in [1] %}{{ i }}{% endfor %}{% set i = x %}{% endfor %}|{% macro m(x) %}{% set x = x ~ 1 %}{% set y = 2 %}{{ x }}{{ y }}{% endmacro %}{{ m(0) }}",
    "{% for x in 'xy' %}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{% endfor %}",
    "{% for x in [1] %}{% continue %}{% else %}E{% endfor %}{% for x in [1] %}{% break %}{% else %}F{% endfor %}{% for x in [1, 2] %}{% if x == 1 %}{% continue %}{% endif %}{% else %}G{% endfor %}",
    # errors raised by the template
    "{% if msgs[0].role != 'user' %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}",
    "{{ lst | batch(0) | list }}",
    "{% for %}",
    "{{ 'unterminated }}",
    "{% if t %}no end",
    "{{ ) }}",
]


#: Idioms of real templates (Hermes-2-Pro's type macro, Qwen3's reversed loop, SmolLM3, DeepSeek-R1), each with its context.
IDIOMS = [
    ('{%- macro json_to_python_type(json_spec) %}\n{%- set basic_type_map = {\n    "string": "str",\n    "number": "float",\n    "integer": "int",\n    "boolean": "bool"\n} %}\n\n{%- if basic_type_map[json_spec.type] is defined %}\n    {{- basic_type_map[json_spec.type] }}\n{%- elif json_spec.type == "array" %}\n    {{- "list[" +  json_to_python_type(json_spec|items) + "]"}}\n{%- elif json_spec.type == "object" %}\n    {%- if json_spec.additionalProperties is defined %}\n        {{- "dict[str, " + json_to_python_type(json_spec.additionalProperties) + \']\'}}\n    {%- else %}\n        {{- "dict" }}\n    {%- endif %}\n{%- elif json_spec.type is iterable %}\n    {{- "Union[" }}\n    {%- for t in json_spec.type %}\n        {{- json_to_python_type({"type": t}) }}\n        {%- if not loop.last %}\n            {{- "," }}\n        {%- endif %}\n    {%- endfor %}\n    {{- "]" }}\n{%- else %}\n    {{- "Any" }}\n{%- endif %}\n{%- endmacro %}\n{%- for name, spec in params.items() %}{{ name }}: {{ json_to_python_type(spec) }}\n{% endfor %}',
     {'params': {'a': {'type': 'string'}, 'b': {'type': 'array', 'items': {'type': 'integer'}}, 'c': {'type': 'object', 'additionalProperties': {'type': 'number'}}, 'd': {'type': ['string', 'null']}, 'e': {}, 'f': {'type': 'object'}}}),
    ('{%- for message in messages|reverse %}{{ loop.index }}{{ message.role }}{% if loop.last %}.{% endif %}{% endfor %}|{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}{{ index }}{% endfor %}',
     {'messages': [{'role': 'a'}, {'role': 'b'}, {'role': 'c'}]}),
    ("{{ tool_call.arguments if tool_call.arguments is string else tool_call.arguments | tojson }}|{{ '\\n' + c | trim + '\\n' }}|{{ xml_tools | string }}|{% for tool in xml_tools[:] %}{{ tool | string }}{% endfor %}",
     {'tool_call': {'arguments': {'a': 1, 'b': 'é'}}, 'c': '  x  ', 'xml_tools': [{'name': 'f', 'parameters': {'x': True, 'y': None}}]}),
    ("{% if message.get('reasoning_content') %}{{ message.get('reasoning_content') }}{% endif %}{{ message.get('missing', 'dflt') }}{% for k, v in message.items() %}{{ k }}={{ v }};{% endfor %}",
     {'message': {'role': 'assistant', 'reasoning_content': 'hmm', 'content': ''}}),
    ("{{ content.split('</think>')[-1].lstrip('\\n') }}|{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}{{ content }}",
     {'content': '<think>x</think>\n\nAnswer'}),
]


@pytest.mark.parametrize("template,context", IDIOMS, ids=[f"idiom{i}" for i in range(len(IDIOMS))])
def test_idioms(template, context):
    why = differs(reference(template, None, **context), ours(template, context))
    assert why is None, f"{template!r}\n  {why}"


#: What jinja2 renders and chatids refuses, on purpose (an error, never a different string).
REFUSED = {
    "{{ namespace(a=1) }}": "a namespace's repr (the engine keeps its attributes sorted, not in insertion order)",
    "{{ lst | random }}": "random output",
    "{{ '%g|%.3g' % (0.5, 1234.5) }}": "%g formatting",
    "{{ ns }}": "a namespace's repr",
    "{{ lipsum() }}": "random text",
    "{% set c = cycler(1) %}{{ c }}": "the repr of a cycler (a memory address)",
    "{{ ''.encode() }}": "bytes",
    "{% for x in [1] %}{{ loop }}{% endfor %}": "the repr of a loop object",
    "{% macro m() %}{% endmacro %}{{ m }}": "the repr of a macro",
    "{% for v in [1] %}{% block b %}{{ v }}{% endblock %}{% endfor %}": "blocks inside loops",
    "{% for x in [1, 2] %}{% with %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endwith %}{% endfor %}": "break inside a with block",
    "{{ 1234.5 | round(-2) }}": "round with a negative precision",
    "{{ '{:g}|{:.3}'.format(0.5, 1234.5) }}": "str.format's general float format",
    "{{ '{0:{1}}'.format(1, 5) }}": "str.format's nested fields",
    "{{ '{0[a]}'.format({'a': 1}) }}": "str.format's index lookups",
}


@pytest.mark.parametrize("template", SNIPPETS, ids=[f"{i:03d}" for i in range(len(SNIPPETS))])
def test_snippets(template):
    ref = reference(template, None, **CTX)
    got = ours(template, CTX)
    why = differs(ref, got)
    assert why is None, f"{template!r}\n  {why}"


@pytest.mark.parametrize("template", list(REFUSED), ids=list(REFUSED.values()))
def test_refused(template):
    ctx = {**CTX, "ns": None}
    assert reference(template.replace("{{ ns }}", "{% set ns = namespace(a=1) %}{{ ns }}"), None, **ctx)[0] == "ok"
    got = ours(template.replace("{{ ns }}", "{% set ns = namespace(a=1) %}{{ ns }}"), ctx)
    assert got[0] == "err", f"chatids rendered {got[1]!r}"
