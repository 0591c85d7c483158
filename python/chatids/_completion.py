"""The return path in Python: :class:`ParsedCompletion` and :class:`CompletionStream`.

The compiled core reads the ids (``src/completion/``) and hands back plain dicts; this module
gives them their public types. See docs/parsing.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from . import _core


@dataclass(frozen=True)
class ParsedCompletion:
    """A completion read back into an assistant message (:meth:`chatids.Encoder.parse_completion`).

    ``message`` has the shape :meth:`chatids.Encoder.encode` takes: ``role``, ``content``, the
    reasoning under the key the template reads (``reasoning_content``; gpt-oss: ``thinking``)
    when the turn has a reasoning block, and ``tool_calls`` as ``[{"id", "type": "function",
    "function": {"name", "arguments"}}]`` when it has calls, ``arguments`` being the JSON value
    when the model wrote valid JSON and the text otherwise (``arguments_text`` keeps every
    call's text as written; DeepSeek V3, whose template concatenates them, always gets the
    text). ``content`` is ``None`` only where the template writes calls for a null content
    alone (DeepSeek V3).
    """

    message: dict[str, Any]
    stop: str
    """The stop token's text (``"<|eot_id|>"``), or ``"length"`` when no stop token came."""
    stop_id: Optional[int]
    tool_call_pending: bool
    """The turn ends in calls waiting for their results (or in Llama's ``<|eom_id|>``)."""
    remainder: str = ""
    """Text the format's grammar does not read, verbatim, from the first thing it could not
    place (an unexpected control token, a malformed or unfinished call, text after the calls)."""
    after_stop: list[int] = field(default_factory=list)
    """Ids after the stop token, not read."""
    arguments_text: list[str] = field(default_factory=list)
    """Each call's arguments exactly as the model wrote them."""
    problems: list[dict[str, Any]] = field(default_factory=list)
    """What the completion got wrong, in order: ``{"kind", "index", "detail"}`` with ``index`` the
    position of the id where it starts among the ids parsed, and ``kind`` one of
    ``"unexpected_token"`` (a control token the format does not place there),
    ``"malformed_call"``, ``"unclosed_call"`` (the ids ended, or a stop token came, inside a
    call), ``"unclosed_reasoning"``, ``"text_after_calls"``, ``"unread_message"`` (gpt-oss: a
    preamble, a built-in tool, a second analysis), ``"invalid_arguments"`` (kept as text), and
    ``"unknown_tool"`` (a call to a name not among the ``tools`` given to
    :meth:`chatids.Encoder.parse_completion`). Empty for a well-formed turn; the text of each
    is kept in the message or in :attr:`remainder`."""

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The message's tool calls (empty when it has none)."""
        calls: list[dict[str, Any]] = self.message.get("tool_calls", [])
        return calls

    @property
    def complete(self) -> bool:
        """A stop token ended the turn and the grammar read all of it."""
        return self.stop_id is not None and not self.remainder


def _parsed(raw: dict[str, Any]) -> ParsedCompletion:
    return ParsedCompletion(**raw)


Delta = dict[str, Any]
"""One event of :class:`CompletionStream`: ``{"type": "content", "text"}``, ``{"type":
"reasoning", "text"}``, ``{"type": "tool_call", "index", "id", "name"}`` (``id`` is None where the
format writes it after the arguments: Mistral), ``{"type": "arguments", "index", "text"}``, and
last ``{"type": "done", "stop", "completion": ParsedCompletion}``."""


CompletionStream = _core.CompletionStream
"""A completion read as it is generated (:meth:`chatids.Encoder.stream_parser`); the compiled
core's class, documented in ``_core.pyi``."""
