"""chatids: chat conversations straight to token ids for open-weight LLMs.

Token-for-token identical to ``transformers``' ``apply_chat_template`` with the checkpoint's own
template, and safe against special-token injection by default::

    import chatids
    enc = chatids.Encoder.from_pretrained("path/to/Llama-3.1-8B-Instruct")
    ids = enc.encode([{"role": "user", "content": "Hello!"}], add_generation_prompt=True)
"""

from ._core import ChatTemplateError, CheckpointError, __version__
from ._completion import CompletionStream, ParsedCompletion
from ._encoder import FORMATS, MISTRAL_COMMON_FORMATS, EncodedChat, Encoder, Finding
from ._training import Batch
from ._training import Truncation
from ._integrations import RayEncode, hf_map
from ._session import Session
from ._pairs import EncodedPair, EncodedPreference, PairBatch, PreferenceBatch
from ._training import Packed, Padded, pack

__all__ = [
    "FORMATS",
    "MISTRAL_COMMON_FORMATS",
    "Batch",
    "ChatTemplateError",
    "CheckpointError",
    "CompletionStream",
    "EncodedChat",
    "EncodedPair",
    "EncodedPreference",
    "Encoder",
    "Finding",
    "RayEncode",
    "Session",
    "Packed",
    "PairBatch",
    "PreferenceBatch",
    "ParsedCompletion",
    "Padded",
    "Truncation",
    "__version__",
    "hf_map",
    "pack",
]
