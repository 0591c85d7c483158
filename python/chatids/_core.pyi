"""Type stubs for the compiled core ``chatids._core``."""

from typing import Any, Optional, Sequence

import numpy as np

__version__: str
FORMATS: list[str]
MISTRAL_COMMON_FORMATS: list[str]

class ChatTemplateError(ValueError):
    """A conversation breaks a rule of the chat format; names the message index and rule."""

class CheckpointError(ValueError):
    """A checkpoint or its chat format cannot be loaded."""

def _sentencepiece_encode(model_path: str, texts: list[str]) -> list[list[int]]: ...
def _tekken_encode(model_path: str, texts: list[str]) -> list[list[int]]: ...

class Encoder:
    @staticmethod
    def from_pretrained(path: str, format: Optional[str] = None, reference: Optional[str] = None) -> Encoder: ...
    @property
    def reference(self) -> str: ...
    @property
    def format(self) -> str: ...
    @property
    def stop_token_ids(self) -> list[int]: ...
    @property
    def clock_defaults(self) -> list[tuple[str, str]]: ...
    @property
    def control_tokens(self) -> list[tuple[str, int]]: ...
    def explain(self) -> str: ...
    def tokenizer_json(self) -> str: ...
    def encode(
        self,
        messages: Sequence[Any],
        add_generation_prompt: bool = False,
        sanitize_control_tokens: bool = True,
        kwargs: Optional[dict[str, Any]] = None,
        system: Optional[str] = None,
        merge_consecutive: bool = False,
    ) -> np.ndarray: ...
    def encode_detailed(
        self,
        messages: Sequence[Any],
        add_generation_prompt: bool = False,
        sanitize_control_tokens: bool = True,
        kwargs: Optional[dict[str, Any]] = None,
        system: Optional[str] = None,
        merge_consecutive: bool = False,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...
    def render(
        self,
        messages: Sequence[Any],
        add_generation_prompt: bool = False,
        kwargs: Optional[dict[str, Any]] = None,
        system: Optional[str] = None,
        merge_consecutive: bool = False,
    ) -> str: ...
    def lint(
        self,
        messages: Sequence[Any],
        add_generation_prompt: bool = False,
        kwargs: Optional[dict[str, Any]] = None,
        system: Optional[str] = None,
        merge_consecutive: bool = False,
        for_generation: bool = False,
        add_special_tokens: bool = False,
    ) -> list[tuple[str, Optional[int], str]]: ...
    def encode_batch(
        self,
        conversations: Sequence[Sequence[Any]],
        add_generation_prompt: bool = False,
        sanitize_control_tokens: bool = True,
        kwargs: Optional[dict[str, Any]] = None,
        num_threads: Optional[int] = None,
        system: Optional[str] = None,
        merge_consecutive: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]: ...
