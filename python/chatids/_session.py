"""Append-only encoding for serving and agent loops: :class:`Session`."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np

from . import _core
from ._completion import ParsedCompletion


class Session:
    """A conversation encoded incrementally: each append encodes only what is new.

    Create one with :meth:`chatids.Encoder.session`. ``ids`` always equal
    ``enc.encode(messages)`` of the messages so far (same options), except that ids passed to
    :meth:`append_completion` are kept exactly as the model sampled them.

    Where the template is not prefix-preserving (``enc.append_rewrites`` lists the cases), an
    append that would change ids the session already holds raises :class:`ChatTemplateError`
    (``on_rewrite="error"``, the default: a KV cache holds those ids), or re-encodes
    (``on_rewrite="reencode"``) and sets :attr:`start` below the previous length.
    """

    def __init__(self, core: _core.Session, parse: Optional[Callable[[list[int]], ParsedCompletion]] = None) -> None:
        self._core = core
        self._parse = parse
        self._messages: list[Mapping[str, Any]] = []
        self._start = 0

    def append(self, messages: Union[Mapping[str, Any], Sequence[Mapping[str, Any]]]) -> np.ndarray:
        """Append one message (a dict) or several; return the ids that were added, i.e.
        ``ids[start:]`` (a pure append: ``start`` is the previous length). Append all the
        tool results of one step in one call (some templates group them in one turn)."""
        batch = [messages] if isinstance(messages, Mapping) else list(messages)
        start, added = self._core.append(batch)
        self._messages.extend(batch)
        self._start = start
        return added

    def append_completion(
        self, ids: Union[Sequence[int], np.ndarray], message: Optional[Mapping[str, Any]] = None
    ) -> np.ndarray:
        """Append the model's turn: ``ids`` exactly as sampled after :meth:`generation_prompt`
        (with or without the final stop token; a missing one is added as the template writes
        it), and ``message``, its parsed form (``content``, ``tool_calls``...), which later
        turns render with. Without ``message``, the ids are read back by the format's grammar
        (:meth:`chatids.Encoder.parse_completion`); a completion with text the grammar cannot
        place (``remainder``) raises :class:`ChatTemplateError` rather than losing it. Returns
        ``ids[start:]``: the generation prompt, the completion, and whatever the template
        writes after the turn."""
        index = len(self._messages)
        completion = []
        for k, i in enumerate(ids):
            try:
                value = int(i)
            except (TypeError, ValueError):
                raise TypeError(f"message {index}: completion ids must be ints, not {type(i).__name__} (position {k})") from None
            if not 0 <= value < 2**32:
                raise _core.ChatTemplateError(f"message {index}: completion id {value} (position {k}) is not a token id")
            completion.append(value)
        if message is None:
            if self._parse is None:
                raise TypeError("append_completion() needs message= on a session made without an encoder")
            parsed = self._parse(completion)
            if parsed.remainder:
                raise _core.ChatTemplateError(
                    f"message {index}: the completion has text the format's grammar does not read "
                    f"({parsed.remainder[:200]!r}); pass message= to append it as you read it"
                )
            message = parsed.message
        start, added = self._core.append_completion(completion, message)
        self._messages.append(message)
        self._start = start
        return added

    def generation_prompt(self) -> np.ndarray:
        """The ids so far followed by the assistant header: the prompt for the next turn."""
        return self._core.generation_prompt()

    @property
    def ids(self) -> np.ndarray:
        """The ids of the conversation so far (uint32, a copy)."""
        return self._core.ids

    @property
    def start(self) -> int:
        """Index of the first id the last append added or changed."""
        return self._start

    @property
    def messages(self) -> tuple[Mapping[str, Any], ...]:
        """The messages so far, as passed in."""
        return tuple(self._messages)

    def __len__(self) -> int:
        return len(self._core.ids)

    def __repr__(self) -> str:
        return f"chatids.Session(messages={len(self._messages)}, ids={len(self)})"
