"""Copies of the checkpoints' own chat templates with each assistant *body* in ``{% generation %}``.

transformers' ``apply_chat_template(..., return_assistant_tokens_mask=True)`` marks every token
that overlaps a ``{% generation %}...{% endgeneration %}`` span. None of the shared templates
has such spans, so the mask tests build them here, at test time, from the template text the
loaded tokenizer holds (``tok.chat_template``), by string replacement. Each replacement states
how many times its text must occur; a template that changed fails loudly
(:class:`TemplateChanged`) instead of silently giving an unwrapped copy. Nothing is written to
disk.

What is wrapped is chatids' documented body (``src/training.rs``): what follows the role header
of an assistant message, through the token that ends its turn, without the separator the
template writes after that token. Per template:

* Llama 3 / 3.1 / 3.2: ``content | trim + '<|eot_id|>'``; Llama 3.1 / 3.2 tool-call turns: the
  call (JSON or ``<|python_tag|>`` built-in) through ``<|eom_id|>`` / ``<|eot_id|>``.
* ChatML (OpenHermes), Qwen2, Qwen2.5: ``content + '<|im_end|>'`` (the ``"\\n"`` after it stays
  outside).
* Qwen3: the ``<think>\\n...\\n</think>\\n\\n`` block where the template writes one, then the
  content, then ``<|im_end|>``.
* Gemma 1/2, Gemma 3: ``content | trim + '<end_of_turn>'`` (Gemma 3: every content part).
* Llama 2: ``' ' + content.strip() + ' ' + eos_token``.
* Mistral v1, v3, v7 (Large 2411): ``' ' + content (| trim) + eos_token``; Nemo (v3 tekken) and
  Small 2501 (v7 tekken): ``content + eos_token``: everything after ``[/INST]``.

For the Jinja path only (no native format covers these templates), the same idea:

* DeepSeek V3: ``content + '<｜end▁of▁sentence｜>'`` after ``<｜Assistant｜>`` (and after
  ``<｜tool▁outputs▁end｜>``, where the template writes no ``<｜Assistant｜>``).
* gpt-oss: everything after the generation prompt ``<|start|>assistant``: the final channel
  through ``<|end|>``; in the last turn of a training conversation the analysis block
  (``thinking``) too, then the final channel through ``<|return|>``.

Assistant turns with ``tool_calls`` (the Jinja path renders them on every checkpoint) are wrapped
for Llama 3.1 / 3.2, Qwen2.5 (after ``<|im_start|>assistant\n``: the content, every
``<tool_call>`` block, ``<|im_end|>``), Qwen3 (inside the same turn as the content) and gpt-oss (after
``<|start|>assistant``: the analysis if written, then the call through ``<|call|>``); chatids
locates a turn with calls only by the same rule (``call_turns`` in src/render/jinja.rs). The other
templates' call turns are not wrapped (:data:`WRAPS_CALLS`).
"""

from __future__ import annotations

from typing import Optional


#: The wrapped templates whose tool-call turns are inside generation blocks.
WRAPS_CALLS = frozenset({"qwen2.5-7b-instruct", "qwen3-0.6b", "gpt-oss-120b", "llama-3.1-8b-instruct", "llama-3.2-3b-instruct"})


class TemplateChanged(AssertionError):
    """A replacement did not match the expected number of times."""


#: (old, new, expected count). Python strings: "\n" is a real newline in the template text,
#: "\\n" is the two characters of a Jinja string escape.
Replacement = tuple[str, str, int]


def _wrap_any_role(header: str, body: str, sep: str, role: str, assistant: str, dash: str = "-") -> str:
    """Output ``header``, then ``body`` (in a generation block when ``role == assistant``), then ``sep``."""
    d = dash
    out = f"{{{{{d} {header} }}}}{{%{d} if {role} == '{assistant}' %}}{{% generation %}}{{{{{d} {body} }}}}{{% endgeneration %}}"
    out += f"{{%{d} else %}}{{{{{d} {body} }}}}{{%{d} endif %}}"
    if sep:
        out += f"{{{{{d} {sep} }}}}"
    return out


_CHATML_LITERAL_NL = [
    (
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}",
        _wrap_any_role("'<|im_start|>' + message['role'] + '\n'", "message['content'] + '<|im_end|>'", "'\n'", "message['role']", "assistant", dash=""),
        1,
    )
]

_LLAMA31 = [
    (
        "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}",
        _wrap_any_role(
            "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'",
            "message['content'] | trim + '<|eot_id|>'",
            "",
            "message['role']",
            "assistant",
        ),
        1,
    ),
    # A tool-call turn: after its header, the call (JSON, or a built-in's `<|python_tag|>`
    # call) through <|eom_id|> or <|eot_id|>. The header both branches write moves before them.
    (
        "        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}\n"
        "            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}",
        "        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- generation %}"
        "{%- if builtin_tools is defined and tool_call.name in builtin_tools %}",
        1,
    ),
    (
        "        {%- else  %}\n            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}",
        "        {%- else  %}",
        1,
    ),
    (
        '            {{- "<|eot_id|>" }}\n        {%- endif %}\n    {%- elif message.role == "tool" or message.role == "ipython" %}',
        '            {{- "<|eot_id|>" }}\n        {%- endif %}{%- endgeneration %}\n    {%- elif message.role == "tool" or message.role == "ipython" %}',
        1,
    ),
]

_GEMMA3_CONTENT = (
    "{%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    '        {{ raise_exception("Invalid content type") }}\n'
    "    {%- endif -%}"
)

#: Checkpoint directory (tests/support.py MODELS) -> replacements.
WRAPS: dict[str, list[Replacement]] = {
    "meta-llama-3-8b-instruct": [
        (
            "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}",
            "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' %}"
            "{% set body = message['content'] | trim + '<|eot_id|>' %}",
            1,
        ),
        (
            "{{ content }}",
            "{{ content }}{% if message['role'] == 'assistant' %}{% generation %}{{ body }}{% endgeneration %}"
            "{% else %}{{ body }}{% endif %}",
            1,
        ),
    ],
    "llama-3.1-8b-instruct": _LLAMA31,
    "llama-3.2-3b-instruct": _LLAMA31[:1]
    + [
        # A tool-call turn (JSON only in 3.2): after its header, through <|eot_id|>.
        (
            "        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n        {{- '{\"name\": \"' + tool_call.name + '\", ' }}",
            "        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- generation %}\n        {{- '{\"name\": \"' + tool_call.name + '\", ' }}",
            1,
        ),
        (
            '        {{- "<|eot_id|>" }}\n    {%- elif message.role == "tool" or message.role == "ipython" %}',
            '        {{- "<|eot_id|>" }}{%- endgeneration %}\n    {%- elif message.role == "tool" or message.role == "ipython" %}',
            1,
        ),
    ],
    "openhermes-2.5-mistral-7b": _CHATML_LITERAL_NL,
    "qwen2-7b-instruct": _CHATML_LITERAL_NL,
    "qwen2.5-7b-instruct": [
        (
            "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}",
            _wrap_any_role("'<|im_start|>' + message.role + '\\n'", "message.content + '<|im_end|>'", "'\\n'", "message.role", "assistant"),
            1,
        ),
        # An assistant turn with tool calls: after "<|im_start|>assistant\n", the content (if
        # any) and every call through <|im_end|>. The "\n" the template writes before the content
        # or the first call moves into the header; the text rendered is the same.
        (
            "        {{- '<|im_start|>' + message.role }}\n        {%- if message.content %}\n            {{- '\\n' + message.content }}\n        {%- endif %}",
            "        {{- '<|im_start|>' + message.role + '\\n' }}{%- generation %}\n        {%- if message.content %}\n            {{- message.content }}\n        {%- endif %}",
            1,
        ),
        (
            "            {{- '\\n<tool_call>\\n{\"name\": \"' }}",
            "            {{- ('\\n' if (message.content or not loop.first) else '') + '<tool_call>\\n{\"name\": \"' }}",
            1,
        ),
        (
            "        {%- endfor %}\n        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}",
            "        {%- endfor %}\n        {{- '<|im_end|>' }}{%- endgeneration %}{{- '\\n' }}\n    {%- elif message.role == \"tool\" %}",
            1,
        ),
    ],
    "qwen3-0.6b": [
        # Open the body after the header, before the branches that write the think block ...
        (
            "        {%- if loop.index0 > ns.last_query_index %}",
            "        {{- '<|im_start|>' + message.role + '\\n' }}{%- generation %}{%- if loop.index0 > ns.last_query_index %}",
            1,
        ),
        # ... which then no longer write the header ...
        (
            "{{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content",
            "{{- '<think>\\n' + reasoning_content",
            1,
        ),
        # ('' + content keeps the template's error for a missing content: Undefined + str raises)
        ("{{- '<|im_start|>' + message.role + '\\n' + content }}", "{{- '' + content }}", 2),
        # ... and close it after the assistant's <|im_end|>, before its "\n".
        (
            "        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}",
            "        {{- '<|im_end|>' }}{%- endgeneration %}{{- '\\n' }}\n    {%- elif message.role == \"tool\" %}",
            1,
        ),
    ],
    "llama-2-7b-chat": [
        (
            "{{ ' '  + content.strip() + ' ' + eos_token }}",
            "{% generation %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endgeneration %}",
            1,
        )
    ],
    "mistral-7b-instruct-v0.1": [
        (
            "{{- ' ' + message['content'] + eos_token}}",
            "{%- generation %}{{- ' ' + message['content'] + eos_token}}{%- endgeneration %}",
            1,
        )
    ],
    "mistral-7b-instruct-v0.3": [
        (
            '{{- " " + message["content"]|trim + eos_token}}',
            '{%- generation %}{{- " " + message["content"]|trim + eos_token}}{%- endgeneration %}',
            1,
        )
    ],
    "mistral-nemo-instruct-2407": [
        (
            '{{- message["content"] + eos_token}}',
            '{%- generation %}{{- message["content"] + eos_token}}{%- endgeneration %}',
            1,
        )
    ],
    "mistral-large-instruct-2411": [
        (
            "{{ ' ' + message['content'] + eos_token }}",
            "{% generation %}{{ ' ' + message['content'] + eos_token }}{% endgeneration %}",
            1,
        )
    ],
    "mistral-small-24b-instruct-2501": [
        (
            "{{- message['content'] + eos_token }}",
            "{%- generation %}{{- message['content'] + eos_token }}{%- endgeneration %}",
            1,
        )
    ],
    "gemma-2-it-on-gemma3-tokenizer": [
        (
            "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}",
            _wrap_any_role("'<start_of_turn>' + role + '\n'", "message['content'] | trim + '<end_of_turn>'", "'\n'", "role", "model", dash=""),
            1,
        )
    ],
    "gemma-3-it": [
        (
            "    " + _GEMMA3_CONTENT + "\n    {{ '<end_of_turn>\n' }}",
            "    {%- if role == 'model' -%}{%- generation -%}"
            + _GEMMA3_CONTENT
            + "{{ '<end_of_turn>' }}{%- endgeneration -%}{%- else -%}"
            + _GEMMA3_CONTENT
            + "{{ '<end_of_turn>' }}{%- endif -%}{{ '\n' }}",
            1,
        )
    ],
    # --- Jinja path only ---
    "deepseek-v3": [
        (
            "{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}",
            "{{'<｜Assistant｜>'}}{% generation %}{{message['content'] + '<｜end▁of▁sentence｜>'}}{% endgeneration %}",
            1,
        ),
        (
            "{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}",
            "{{'<｜tool▁outputs▁end｜>'}}{% generation %}{{message['content'] + '<｜end▁of▁sentence｜>'}}{% endgeneration %}",
            1,
        ),
    ],
    "gpt-oss-120b": [
        # The last turn of a training conversation: the analysis block (if any) and the final
        # message, after the first "<|start|>assistant" (the generation prompt) ...
        (
            '            {%- if "thinking" in message %}\n'
            '                {{- "<|start|>assistant<|channel|>analysis<|message|>" + message.thinking + "<|end|>" }}\n'
            "            {%- endif %}",
            '            {{- "<|start|>assistant" }}{%- generation %}{%- if "thinking" in message %}\n'
            '                {{- "<|channel|>analysis<|message|>" + message.thinking + "<|end|><|start|>assistant" }}\n'
            "            {%- endif %}",
            1,
        ),
        (
            '{{- "<|start|>assistant<|channel|>final<|message|>" + message.content + "<|return|>" }}',
            '{{- "<|channel|>final<|message|>" + message.content + "<|return|>" }}{%- endgeneration %}',
            1,
        ),
        # A call turn: after "<|start|>assistant", its analysis (if written) and the call through
        # <|call|>. The "<|start|>assistant" that opens the call moves to the end of the analysis;
        # the text rendered is the same.
        (
            "            {%- if message.content and message.thinking %}",
            '            {{- "<|start|>assistant" }}{%- generation %}{%- if message.content and message.thinking %}',
            1,
        ),
        (
            '{{- "<|start|>assistant<|channel|>analysis<|message|>" + message.content + "<|end|>" }}',
            '{{- "<|channel|>analysis<|message|>" + message.content + "<|end|><|start|>assistant" }}',
            1,
        ),
        (
            '            {%- elif message.thinking and not future_final_message.found %}\n'
            '                {{- "<|start|>assistant<|channel|>analysis<|message|>" + message.thinking + "<|end|>" }}',
            '            {%- elif message.thinking and not future_final_message.found %}\n'
            '                {{- "<|channel|>analysis<|message|>" + message.thinking + "<|end|><|start|>assistant" }}',
            1,
        ),
        ('            {{- "<|start|>assistant to=" }}', '            {{- " to=" }}', 1),
        ('            {{- "<|call|>" }}', '            {{- "<|call|>" }}{%- endgeneration %}', 1),
        # ... and earlier turns: the final message through <|end|>.
        (
            '{{- "<|start|>assistant<|channel|>final<|message|>" + message.content + "<|end|>" }}',
            '{{- "<|start|>assistant" }}{%- generation %}{{- "<|channel|>final<|message|>" + message.content + "<|end|>" }}{%- endgeneration %}',
            1,
        ),
    ],
}


def apply_replacements(name: str, template: str, replacements: list[Replacement]) -> str:
    """``template`` with each replacement applied; raises :class:`TemplateChanged` on a count mismatch."""
    out = template
    for old, new, expected in replacements:
        found = out.count(old)
        if found != expected:
            raise TemplateChanged(
                f"{name}: the chat template changed: {old!r} occurs {found} times, expected {expected}; "
                "update tests/mask_templates.py"
            )
        out = out.replace(old, new)
    if "generation" not in out:  # pragma: no cover - guarded by the counts above
        raise TemplateChanged(f"{name}: no generation block was inserted")
    return out


def wrapped_template(name: str, template: Optional[str]) -> str:
    """The chat template of checkpoint ``name`` with its assistant bodies in generation blocks."""
    if name not in WRAPS:
        raise KeyError(f"no wrapped template for {name}; add its replacements to tests/mask_templates.py")
    if not isinstance(template, str):
        raise TemplateChanged(f"{name}: expected one chat template string, got {type(template).__name__}")
    return apply_replacements(name, template, WRAPS[name])
