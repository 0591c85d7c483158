"""Type stubs for the compiled core ``chatids._core``."""

from typing import Any, Optional, Sequence, final

import numpy as np
from typing_extensions import TypeAlias

from ._options import CallOptions

__all__ = [
    "Encoder",
    "Session",
    "CompletionStream",
    "_sentencepiece_encode",
    "_tekken_encode",
    "_jinja_render",
    "_gguf_tokenizer_json",
    "_pack",
    "_pad",
    "ChatTemplateError",
    "CheckpointError",
    "__version__",
    "FORMATS",
    "MISTRAL_COMMON_FORMATS",
]

__version__: str
FORMATS: list[str]
MISTRAL_COMMON_FORMATS: list[str]

class ChatTemplateError(ValueError):
    """A conversation breaks a rule of the chat format; names the message index and rule."""

    refusal: str
    """``"input"`` (malformed input or a chosen policy), ``"template"`` (the template raises),
    ``"dropped"`` (the template would drop the message silently), ``"unmodeled"``."""
    message_index: Optional[int]
    """The message it is about, if one."""
    conversation_index: Optional[int]
    """The conversation of a batch it is about, if any."""

class CheckpointError(ValueError):
    """A checkpoint or its chat format cannot be loaded."""

def _sentencepiece_encode(model_path: str, texts: list[str]) -> list[list[int]]: ...
def _tekken_encode(model_path: str, texts: list[str]) -> list[list[int]]: ...
def _jinja_render(template: str, context_json: str, now: Optional[tuple[int, int, int, int, int, int]] = None) -> str: ...
def _gguf_tokenizer_json(path: str) -> tuple[str, str]: ...
def _pack(
    ids: np.ndarray,
    offsets: np.ndarray,
    lengths: np.ndarray,
    seq_len: int,
    pad_id: int,
    labels: Optional[np.ndarray] = None,
) -> tuple[
    np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray
]:
    """First-fit decreasing packing of ``lengths`` (uint32 ``ids``, int64 ``offsets``/``lengths``/``labels``)
    into rows of ``seq_len``: flat ``(input_ids, labels, position_ids, attention_mask, sequence_ids,
    conversation_index, cu_seqlens, row_offsets, members)``."""
def _pad(
    ids: np.ndarray,
    offsets: np.ndarray,
    lengths: np.ndarray,
    width: int,
    pad_id: int,
    left: bool,
    labels: Optional[np.ndarray] = None,
    assistant_mask: Optional[np.ndarray] = None,
) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray], Optional[np.ndarray]]:
    """One row of ``width`` per conversation (its first ``lengths[i]`` tokens, padded on the right,
    or on the left with ``left``), flat int64: ``(input_ids, attention_mask, labels, assistant_mask)``."""

#: (policy, original_length, dropped_tokens, dropped_messages) (stub-only alias).
_TruncationTuple: TypeAlias = tuple[str, int, int, list[int]]

@final
class Session:
    def append(self, messages: Any) -> tuple[int, np.ndarray]: ...
    def append_completion(self, ids: list[int], message: Any) -> tuple[int, np.ndarray]: ...
    def generation_prompt(self) -> np.ndarray: ...
    @property
    def ids(self) -> np.ndarray: ...
    @property
    def message_count(self) -> int: ...

@final
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
    def feed(self, ids: int | list[int]) -> list[dict[str, Any]]:
        """Read the next generated id (an int) or ids (a list); the deltas they complete."""
    def finish(self) -> list[dict[str, Any]]:
        """End the completion: the remaining deltas, then ``done`` (if not sent yet)."""

@final
class Encoder:
    @staticmethod
    def from_pretrained(
        path: str,
        format: Optional[str] = None,
        reference: Optional[str] = None,
        chat_template: Optional[str] = None,
        allow_external: bool = False,
        unknown_template_args: str = "error",
        cache_dir: Optional[str] = None,
    ) -> Encoder: ...
    @property
    def cache_use(self) -> Optional[str]: ...
    def with_chat_template(self, template: str, format: Optional[str] = None) -> Encoder: ...
    def to_bytes(self) -> bytes:
        """The encoder's state (tokenizer and template included), for pickling."""
        ...
    @staticmethod
    def from_bytes(state: bytes) -> Encoder:
        """Rebuild an encoder from ``to_bytes()``; reads no file. Raises ``CheckpointError``."""
        ...
    @property
    def needs_external_renderer(self) -> bool: ...
    @property
    def chat_template(self) -> Optional[str]: ...
    @property
    def special_tokens_map(self) -> list[tuple[str, str]]: ...
    def encode_rendered_batch(self, texts: list[str], marked: bool) -> tuple[np.ndarray, np.ndarray]: ...
    @property
    def reads_clock(self) -> bool: ...
    @property
    def reference(self) -> str: ...
    @property
    def format(self) -> str: ...
    @property
    def stop_token_ids(self) -> list[int]: ...
    @property
    def stop_token_ids_for_tool_calls(self) -> list[int]: ...
    @property
    def append_rewrites(self) -> Optional[list[str]]: ...
    def session(self, options: CallOptions) -> Session: ...
    def parse_completion(self, ids: list[int], tools: Optional[list[str]] = None) -> dict[str, Any]: ...
    def stream_parser(self, completion_type: Any, tools: Optional[list[str]] = None) -> CompletionStream: ...
    def decode(self, ids: list[int]) -> str: ...
    @property
    def template_args(self) -> Optional[list[str]]: ...
    @property
    def unknown_template_args(self) -> str: ...
    @property
    def control_tokens(self) -> list[tuple[str, int]]: ...
    @property
    def text_encoder(self) -> Optional[str]:
        """``"native"`` or ``"tokenizers"``; ``None`` on the mistral-common route."""
        ...
    def explain(self) -> str: ...
    def tokenizer_json(self) -> str: ...
    def encode(self, messages: Sequence[Any], options: CallOptions) -> np.ndarray: ...
    def render(self, messages: Sequence[Any], options: CallOptions) -> str: ...
    def lint(self, messages: Sequence[Any], options: CallOptions) -> list[tuple[str, Optional[int], str]]: ...
    def encode_training(
        self, messages: Sequence[Any], options: CallOptions
    ) -> tuple[np.ndarray, Optional[np.ndarray], Optional[_TruncationTuple], Optional[np.ndarray], Optional[np.ndarray]]: ...
    def encode_batch(
        self, conversations: Sequence[Sequence[Any]], options: CallOptions
    ) -> tuple[np.ndarray, np.ndarray, Optional[np.ndarray], list[tuple[int, _TruncationTuple]], list[tuple[int, str]]]: ...
    def encode_pairs(
        self, prompts: Sequence[Any], completions: Sequence[Sequence[Any]], names: list[str], options: CallOptions, single: bool
    ) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray, np.ndarray]], np.ndarray, list[tuple[int, str]]]: ...
