"""The return path in Python: :class:`ParsedCompletion` and :class:`CompletionStream`.

The compiled core reads the ids (``src/completion/``) and hands back plain dicts; this module
gives them their public types. See docs/parsing.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Union

from . import _core


@dataclass(frozen=True)
class ParsedCompletion:
    """A completion read back into an assistant message (:meth:`chatids.Encoder.parse_completion`).

    ``message`` has the shape :meth:`chatids.Encoder.encode` takes: ``role``, ``content``, the
    reasoning under the key the template reads (``reasoning_content``) when the turn has a
    reasoning block, and ``tool_calls`` as ``[{"id", "type": "function", "function": {"name",
    "arguments"}}]`` when it has calls, ``arguments`` being the JSON value when the model wrote
    valid JSON and the text otherwise (``arguments_text`` keeps every call's text as written).
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


class CompletionStream:
    """A completion read as it is generated (:meth:`chatids.Encoder.stream_parser`).

    Feed it the generated ids one at a time or a few at a time; each :meth:`feed` returns the
    deltas those ids complete. The ``done`` delta comes when a stop token is fed, or from
    :meth:`finish` when the ids ran out (``stop == "length"``). Whatever the chunking, the
    ``completion`` of ``done`` is the one :meth:`chatids.Encoder.parse_completion` gives for the
    same ids (the stream ends at its stop token: ids fed after it are not read, and its
    ``after_stop`` is empty). For a turn the
    grammar reads whole (``completion.complete``), the content deltas add up to its content and
    each call's argument deltas to the text it was read from; a call that turns out malformed or
    is cut by the length limit may have sent deltas before ``done`` moves it to ``remainder``.
    Each id costs O(1): nothing is decoded twice.
    """

    __slots__ = ("_core",)

    def __init__(self, core: _core.CompletionStream) -> None:
        self._core = core

    def feed(self, ids: Union[int, Iterable[int]]) -> list[Delta]:
        """Read the next generated id (an int) or ids (a list); the deltas they complete."""
        deltas = self._core.feed(ids if isinstance(ids, (int, list)) else list(ids))
        if deltas and deltas[-1]["type"] == "done":
            _typed_done(deltas[-1])
        return deltas

    def finish(self) -> list[Delta]:
        """End the completion: the remaining deltas, then ``done`` (if not sent yet)."""
        deltas = self._core.finish()
        if deltas and deltas[-1]["type"] == "done":
            _typed_done(deltas[-1])
        return deltas


def _typed_done(done: Delta) -> None:
    done["completion"] = _parsed(done["completion"])
