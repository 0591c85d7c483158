"""Rendering with Python's jinja2, for templates chatids' Rust engine cannot compile.

The environment is the one transformers builds (``ImmutableSandboxedEnvironment`` with
``trim_blocks``/``lstrip_blocks``, loop controls, a transparent ``{% generation %}`` tag,
``raise_exception``, ``strftime_now``, ``dict``, a namespace that rejects underscore names and
``tojson`` as ``json.dumps``), and the inputs are prepared as transformers prepares them
(``None`` values dropped, reasoning aliases, special tokens as variables). With sanitizing, the
control tokens in caller strings are wrapped in the same private-use markers the Rust Jinja
path uses, and the Rust core encodes the rendered text (``encode_rendered_batch``).

:class:`Jinja2Route` has the methods of the compiled encoder that :class:`chatids.Encoder`
calls, with the same arguments (the messages and one :class:`~chatids._options.CallOptions`)
and the same results, so the encoder delegates to either without asking which.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any, Optional, Sequence

import numpy as np

from . import _core
from ._core import ChatTemplateError
from ._options import CallOptions

MARK_START = "\U000f0000"
MARK_END = "\U000f0001"
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _environment(now: list[datetime]) -> Any:
    try:
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as e:  # pragma: no cover - jinja2 is installed with the test extras
        raise ImportError("this chat template needs Python's jinja2 (pip install jinja2)") from e

    class GenerationTag(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}`` renders its body unchanged."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            TemplateNamespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"underscore-prefixed namespace attribute {name!r}")

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return now[0].strftime(fmt)

    class TemplateDict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict.fromkeys(*args, **kwargs)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=TemplateDict(), namespace=TemplateNamespace)
    return env


class Jinja2Renderer:
    """One checkpoint's template on jinja2."""

    def __init__(
        self,
        template: str,
        special_tokens: Sequence[tuple[str, str]],
        control_tokens: Sequence[str],
        unknown_template_args: str = "error",
    ) -> None:
        import jinja2.meta

        self._now = [datetime.now()]
        env = _environment(self._now)
        self._template = env.from_string(template)
        self._special = dict(special_tokens)
        # The template-argument rule of the Rust core, from jinja2's own analysis.
        reads = jinja2.meta.find_undeclared_variables(env.parse(template)) - set(env.globals)
        always = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token", "tools", "documents"}
        self.template_args = frozenset(reads | set(self._special) | always)
        self._ignore_unknown = unknown_template_args == "ignore"
        longest_first = sorted(control_tokens, key=len, reverse=True)
        self._control = re.compile("|".join(map(re.escape, longest_first)) or "(?!)")

    def _mark_str(self, text: str) -> str:
        def wrap_markers(s: str) -> str:
            return s.replace(MARK_START, MARK_START + MARK_START + MARK_END).replace(
                MARK_END, MARK_START + MARK_END + MARK_END
            ) if (MARK_START in s or MARK_END in s) else s

        out, cursor = [], 0
        for m in self._control.finditer(text):
            out.append(wrap_markers(text[cursor : m.start()]))
            out.append(MARK_START + m.group(0) + MARK_END)
            cursor = m.end()
        out.append(wrap_markers(text[cursor:]))
        return "".join(out)

    def _mark(self, obj: Any) -> Any:
        if isinstance(obj, str):
            return self._mark_str(obj)
        if isinstance(obj, dict):
            return {k: self._mark(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self._mark(v) for v in obj]
        return obj

    def render(
        self,
        messages: Sequence[Any],
        add_generation_prompt: bool,
        template_kwargs: dict[str, Any],
        now: Optional[datetime],
        marked: bool,
    ) -> str:
        """The prompt; with ``marked``, caller control tokens wrapped in the markers."""
        chat = []
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                raise ChatTemplateError(f"message {i}: a message must be a dict, not {type(message).__name__}")
            message = {k: v for k, v in message.items() if v is not None}
            reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
            if reasoning is not None:
                message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
            chat.append(message)
        kwargs = dict(template_kwargs)
        unknown = [name for name in kwargs if name not in self.template_args]
        if unknown and self._ignore_unknown:
            kwargs = {k: v for k, v in kwargs.items() if k in self.template_args}
        elif unknown:
            standard = {"messages", "add_generation_prompt", "tools", "documents", *self._special}
            reads = ", ".join(sorted(self.template_args - standard)) or "none besides messages, tools, documents and the special tokens"
            raise ChatTemplateError(
                f"the chat template does not read the template argument {unknown[0]!r} (it reads: {reads}); "
                'transformers would ignore it silently. Load with unknown_template_args="ignore" to leave such '
                "arguments out"
            )
        tools = kwargs.pop("tools", None)
        documents = kwargs.pop("documents", None)
        mark = self._mark if marked else (lambda x: x)
        self._now[0] = now or datetime.now()
        try:
            rendered: str = self._template.render(
                messages=mark(chat),
                tools=mark(tools),
                documents=mark(documents),
                add_generation_prompt=add_generation_prompt,
                **{**self._special, **mark(kwargs)},
            )
            return rendered
        except Exception as e:  # the template raised (raise_exception) or failed
            raise ChatTemplateError(f"the chat template raised: {e}") from e


class Jinja2Route:
    """The route of a template only jinja2 compiles: render in Python, encode in the core.

    What needs chatids' own template engine (the input policies, ``continue_final_message``,
    loss masks, truncation, sessions, lint beyond "the template raises") raises
    :class:`ChatTemplateError` saying so; nothing is left out silently. Message provenance is
    not known here: every token has message index -1 and no content origin.
    """

    def __init__(self, core: _core.Encoder, renderer: Jinja2Renderer) -> None:
        self._core = core
        self._renderer = renderer

    @property
    def template_args(self) -> frozenset[str]:
        return self._renderer.template_args

    @staticmethod
    def _refuse_unsupported(options: CallOptions) -> None:
        if (
            options.get("system") is not None
            or options.get("merge_consecutive")
            or options.get("continue_final_message")
        ):
            raise ChatTemplateError(
                "system=, merge_consecutive= and continue_final_message= need chatids' own template engine "
                "(not the jinja2 fallback)"
            )
        if (
            options.get("return_assistant_mask")
            or options.get("max_length") is not None
            or options.get("truncation") is not None
        ):
            raise ChatTemplateError(
                "return_assistant_mask= and max_length= need chatids' own template engine (not the jinja2 fallback)"
            )

    def _render(self, messages: Sequence[Any], options: CallOptions, marked: bool) -> str:
        now = options.get("now")
        clock = None if now is None else datetime(*now)
        return self._renderer.render(
            messages,
            bool(options.get("add_generation_prompt")),
            options.get("template_kwargs") or {},
            clock,
            marked=marked,
        )

    def render(self, messages: Sequence[Any], options: CallOptions) -> str:
        self._refuse_unsupported(options)
        return self._render(messages, options, marked=False)

    def encode(self, messages: Sequence[Any], options: CallOptions) -> np.ndarray:
        ids: np.ndarray = self.encode_batch([messages], options)[0]
        return ids

    def encode_training(
        self, messages: Sequence[Any], options: CallOptions
    ) -> tuple[np.ndarray, None, None, np.ndarray, np.ndarray]:
        ids = self.encode(messages, options)
        return ids, None, None, np.full(len(ids), -1, dtype=np.int32), np.zeros(len(ids), dtype=bool)

    def encode_batch(
        self, conversations: Sequence[Sequence[Any]], options: CallOptions
    ) -> tuple[np.ndarray, np.ndarray, None, list[Any], list[tuple[int, str]]]:
        self._refuse_unsupported(options)
        on_error = options.get("on_error") or "raise"
        if on_error not in ("raise", "collect"):
            raise ChatTemplateError(f'on_error must be "raise" or "collect", not {on_error!r}')
        sanitize = options.get("sanitize_control_tokens", True)
        texts = []
        errors: list[tuple[int, str]] = []
        for c, conversation in enumerate(conversations):
            try:
                texts.append(self._render(conversation, options, marked=sanitize))
            except ChatTemplateError as e:
                if on_error == "raise":
                    raise ChatTemplateError(f"conversation {c}: {e}") from e
                errors.append((c, str(e)))
                texts.append("")
        ids, offsets = self._core.encode_rendered_batch(texts, sanitize)
        return ids, offsets, None, [], errors

    def encode_pairs(
        self, prompts: Sequence[Any], rows: Sequence[Any], names: list[str], options: CallOptions, single: bool
    ) -> Any:
        raise ChatTemplateError(
            "pairs and preferences carry loss masks, which need chatids' own template engine (not the jinja2 fallback)"
        )

    def lint(self, messages: Sequence[Any], options: CallOptions) -> list[tuple[str, Optional[int], str]]:
        try:
            self._render(messages, options, marked=False)
        except ChatTemplateError as e:
            return [("template-raises", None, str(e))]
        return []

    def session(self, options: CallOptions) -> _core.Session:
        raise ChatTemplateError("sessions need chatids' own template engine (not the jinja2 fallback)")
