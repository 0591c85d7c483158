"""Shared helpers of the test suite: where the models and data are, and the references.

Models are found through ``CHATIDS_MODELS_DIR`` (``.ci/run`` points it at ``../shared/models``)
or, outside this workplace, in the local Hugging Face cache. Conversations come from
``CHATIDS_DATA_DIR``. Every expected id comes from transformers at test time.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import chatids  # noqa: E402

#: Checkpoint directory -> (native format, Hugging Face repo id of the same tokenizer/template).
MODELS: dict[str, tuple[str, str]] = {
    "meta-llama-3-8b-instruct": ("llama-3", "meta-llama/Meta-Llama-3-8B-Instruct"),
    "llama-3.1-8b-instruct": ("llama-3.1", "meta-llama/Llama-3.1-8B-Instruct"),
    "llama-3.2-3b-instruct": ("llama-3.2", "meta-llama/Llama-3.2-3B-Instruct"),
    "openhermes-2.5-mistral-7b": ("chatml", "teknium/OpenHermes-2.5-Mistral-7B"),
    "qwen2-7b-instruct": ("qwen2", "Qwen/Qwen2-7B-Instruct"),
    "qwen2.5-7b-instruct": ("qwen2.5", "Qwen/Qwen2.5-7B-Instruct"),
    "qwen3-0.6b": ("qwen3", "Qwen/Qwen3-0.6B"),
    "llama-2-7b-chat": ("llama-2", "meta-llama/Llama-2-7b-chat-hf"),
    "mistral-7b-instruct-v0.1": ("mistral-v1", "mistralai/Mistral-7B-Instruct-v0.1"),
    "mistral-7b-instruct-v0.3": ("mistral-v3", "mistralai/Mistral-7B-Instruct-v0.3"),
    "mistral-nemo-instruct-2407": ("mistral-v3-tekken", "mistralai/Mistral-Nemo-Instruct-2407"),
    "mistral-large-instruct-2411": ("mistral-v7", "mistralai/Mistral-Large-Instruct-2411"),
    "mistral-small-24b-instruct-2501": ("mistral-v7-tekken", "mistralai/Mistral-Small-24B-Instruct-2501"),
    "gemma-2-it-on-gemma3-tokenizer": ("gemma", "google/gemma-2-2b-it"),
    "gemma-3-it": ("gemma-3", "google/gemma-3-4b-it"),
    # No native format reproduces these templates: the Jinja path serves them.
    "deepseek-v3": ("jinja", "deepseek-ai/DeepSeek-V3"),
    "gpt-oss-120b": ("jinja", "openai/gpt-oss-120b"),
}
MODEL_NAMES = list(MODELS)

#: The date the tests pass as ``date_string`` (Llama 3.1's own default).
FIXED_DATE = "26 Jul 2024"
#: The clock the tests freeze transformers at (``strftime_now``: Llama 3.2, Mistral Small 2501),
#: and pass to chatids as ``now=``.
FROZEN_NOW = (2025, 1, 30, 12, 0, 0)

#: Formats whose templates pass any role through unchanged.
#: A one-parameter function tool in the OpenAI form, shared by the tests that need some tool.
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}

PASS_THROUGH_ROLES = {"llama-3", "llama-3.1", "llama-3.2", "chatml", "qwen2"}
#: Formats whose templates ignore add_generation_prompt.
IGNORES_GENERATION_PROMPT = {"llama-2", "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7", "mistral-v7-tekken"}
#: Formats whose templates demand user/assistant alternation.
ALTERNATING = {"llama-2", "mistral-v1", "mistral-v3", "mistral-v3-tekken", "gemma", "gemma-3"}


def require_models() -> bool:
    """Whether a missing model must fail instead of skip (set by ``.ci/run``)."""
    return os.environ.get("CHATIDS_REQUIRE_MODELS", "") not in ("", "0")


def model_path(name: str) -> tuple[Optional[Path], str]:
    """The directory of checkpoint ``name``, or ``None`` and the reason it is missing."""
    base = os.environ.get("CHATIDS_MODELS_DIR")
    if base:
        path = Path(base) / name
        if (path / "tokenizer.json").is_file():
            return path, ""
        reason = f"{path} has no tokenizer.json"
    else:
        reason = "CHATIDS_MODELS_DIR is not set"
    try:
        from huggingface_hub import snapshot_download

        snapshot = snapshot_download(MODELS[name][1], local_files_only=True)
        if (Path(snapshot) / "tokenizer.json").is_file():
            return Path(snapshot), ""
    except Exception as e:  # not in the local cache
        reason += f"; {MODELS[name][1]} is not in the Hugging Face cache ({type(e).__name__})"
    return None, reason


def missing(message: str) -> None:
    """Skip with ``message`` locally; fail under ``.ci/run`` (``CHATIDS_REQUIRE_MODELS=1``)."""
    import pytest

    if require_models():
        pytest.fail(message)
    pytest.skip(message)


def require_model_path(name: str) -> Path:
    """The directory of checkpoint ``name``; skips (or fails in CI) when it is missing."""
    path, reason = model_path(name)
    if path is None:
        missing(f"model {name} not found: {reason}")
    assert path is not None
    return path


def require_corpus(corpus_file: str) -> None:
    """Skips (or fails in CI) when the conversation corpus is missing."""
    if corpus_file == "<no corpus>":
        missing(f"conversation corpus not found: {data_dir()[1]}")


def data_dir() -> tuple[Optional[Path], str]:
    base = os.environ.get("CHATIDS_DATA_DIR")
    if not base:
        return None, "CHATIDS_DATA_DIR is not set"
    path = Path(base) / "conversations"
    if not path.is_dir():
        return None, f"{path} does not exist"
    return path, ""


def corpus_files() -> list[str]:
    path, _ = data_dir()
    if path is None:
        return []
    return sorted(os.path.basename(f) for f in glob.glob(str(path / "*.jsonl")))


def full_conformance() -> bool:
    """``CHATIDS_CONFORMANCE=full`` compares every conversation; otherwise a fixed sample."""
    return os.environ.get("CHATIDS_CONFORMANCE", "sample") == "full"


#: Conversations per corpus file in sample mode.
SAMPLE_PER_FILE = 6


@functools.lru_cache(maxsize=None)
def corpus_rows(file_name: str) -> list[dict]:
    """The conversations of one corpus file: all of them, or a deterministic sample."""
    path, reason = data_dir()
    assert path is not None, reason
    rows = [json.loads(line) for line in open(path / file_name, encoding="utf-8")]
    if full_conformance():
        return rows
    picked = random.Random(f"chatids:{file_name}").sample(range(len(rows)), min(SAMPLE_PER_FILE, len(rows)))
    return [rows[i] for i in sorted(picked)]


def common_prefix(a: list[int], b: list[int]) -> int:
    """The number of leading ids ``a`` and ``b`` share (TRL's ``common_prefix_length``)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def preference_cases(corpus_file: str) -> list[tuple[list[dict], dict, dict, Optional[list]]]:
    """(prompt, chosen, rejected, tools) from the corpus sample of one file: each conversation
    with an assistant message after its first message, cut before its last assistant message
    (``chosen``); ``rejected`` is the last assistant message of the file's next such conversation."""
    rows = corpus_rows(corpus_file)
    last = [max((i for i, m in enumerate(r["messages"]) if m.get("role") == "assistant"), default=0) for r in rows]
    out = []
    for i, row in enumerate(rows):
        if last[i] == 0:
            continue
        j = next((j % len(rows) for j in range(i + 1, i + 1 + len(rows)) if last[j % len(rows)] > 0), i)
        msgs = row["messages"]
        out.append((msgs[: last[i]], msgs[last[i]], rows[j]["messages"][last[j]], row.get("tools") or None))
    return out


@dataclass
class Model:
    """A checkpoint with both encoders."""

    name: str
    format: str
    path: Path
    enc: chatids.Encoder
    tok: Any  # transformers tokenizer
    #: Extra arguments for chatids only (the frozen clock on the Jinja path).
    ours_extra: dict[str, Any] = field(default_factory=dict)

    def kwargs(self) -> dict[str, Any]:
        return template_kwargs(self.format)

    def ours_kwargs(self, **kw: Any) -> dict[str, Any]:
        return {**self.kwargs(), **self.ours_extra, **kw}

    def ref_ids(self, messages, add_generation_prompt=False, sanitize=True, **kw) -> list[int]:
        """transformers' ids: the golden expectation."""
        return list(
            self.tok.apply_chat_template(
                messages,
                tokenize=True,
                add_generation_prompt=add_generation_prompt,
                sanitize_control_tokens=sanitize,
                return_dict=False,
                **{**self.kwargs(), **kw},
            )
        )

    def ref_text(self, messages, add_generation_prompt=False, **kw) -> str:
        return self.tok.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **{**self.kwargs(), **kw}
        )

    def ids(self, messages, add_generation_prompt=False, sanitize=True, **kw) -> list[int]:
        return self.enc.encode(
            messages, add_generation_prompt=add_generation_prompt, sanitize_control_tokens=sanitize, **self.ours_kwargs(**kw)
        ).tolist()

    def text(self, messages, add_generation_prompt=False, **kw) -> str:
        return self.enc.render(messages, add_generation_prompt=add_generation_prompt, **self.ours_kwargs(**kw))


def template_kwargs(fmt: str) -> dict[str, Any]:
    if fmt in ("llama-3.1", "llama-3.2"):
        return {"date_string": FIXED_DATE}
    return {}


def freeze_transformers_clock() -> None:
    """Templates that call ``strftime_now`` (Mistral Small 2501) see FROZEN_NOW."""
    import datetime as dt

    import transformers.utils.chat_template_utils as ctu

    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(*FROZEN_NOW)

    ctu.datetime = Frozen


_FROZEN_ADDED = "_chatids_frozen_added_tokens"


def freeze_added_tokens(tok: Any) -> Any:
    """Build the added tokens of a shared reference tokenizer once, not on every read.

    transformers' ``TokenizersBackend`` rebuilds ``added_tokens_decoder`` (a dict of ``AddedToken``
    objects, from the Rust tokenizer) and ``added_tokens_encoder`` on every access, and
    ``apply_chat_template(..., sanitize_control_tokens=True)`` reads them several times per call:
    py-spy put them at 57% and 34% of ``make conformance-full``'s time (the render 1%). The
    tokenizers ``load_model`` shares are never given new tokens, so their two maps are built
    once here and handed out as copies; any other tokenizer (a test that adds tokens loads its
    own) reads the originals. transformers still computes every expected id.
    """
    try:
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:
        return tok
    if not isinstance(tok, TokenizersBackend):
        return tok
    cls = TokenizersBackend
    if not getattr(cls, "_chatids_reads_frozen_added_tokens", False):
        decoder, encoder = cls.added_tokens_decoder.fget, cls.added_tokens_encoder.fget

        def added_tokens_decoder(self: Any) -> dict:
            frozen = self.__dict__.get(_FROZEN_ADDED)
            return decoder(self) if frozen is None else dict(frozen[0])

        def added_tokens_encoder(self: Any) -> dict:
            frozen = self.__dict__.get(_FROZEN_ADDED)
            return encoder(self) if frozen is None else dict(frozen[1])

        cls.added_tokens_decoder = cls._added_tokens_decoder = property(added_tokens_decoder)
        cls.added_tokens_encoder = cls._added_tokens_encoder = property(added_tokens_encoder)
        cls._chatids_reads_frozen_added_tokens = True
    if _FROZEN_ADDED not in tok.__dict__:
        tok.__dict__[_FROZEN_ADDED] = (tok.added_tokens_decoder, tok.added_tokens_encoder)
    return tok


_LOADED: dict[tuple[str, bool], Model] = {}


def load_model(name: str, generic: bool = False) -> Model:
    """Load checkpoint ``name`` with chatids and transformers (cached per session).

    ``generic=True`` forces chatids' Jinja path with the frozen clock.
    """
    key = (name, generic)
    if key not in _LOADED:
        import pytest

        path = require_model_path(name)
        from transformers import AutoTokenizer

        import datetime as dt

        freeze_transformers_clock()
        tok = _TOKENIZERS.get(name) or freeze_added_tokens(AutoTokenizer.from_pretrained(str(path)))
        _TOKENIZERS[name] = tok
        _LOADED[key] = Model(
            name=f"{name} [jinja]" if generic else name,
            format="jinja" if generic else MODELS[name][0],
            path=path,
            enc=chatids.Encoder.from_pretrained(path, format="jinja") if generic else chatids.Encoder.from_pretrained(path),
            tok=tok,
            ours_extra={"now": dt.datetime(*FROZEN_NOW)},
        )
    return _LOADED[key]


_TOKENIZERS: dict[str, Any] = {}


# --- Where chatids deliberately differs from transformers (each pinned in test_deviations.py) ---

MARKERS = ("\U000f0000", "\U000f0001")


def known_deviation(fmt: str, messages: list[dict], sanitize: bool) -> Optional[str]:
    """The documented reason chatids' ids differ from transformers' for this input, if any.

    All three come from transformers' sanitize implementation, which wraps control tokens in
    content with private-use marker characters *before* the template runs:
    the markers stay in the text the template's string methods see, and characters equal to
    the markers are deleted from content.
    """
    if not sanitize:
        return None
    for m in messages:
        content = m.get("content")
        texts = [content] if isinstance(content, str) else []
        texts += [m[k] for k in ("reasoning_content", "thinking", "reasoning") if isinstance(m.get(k), str)]
        if any(marker in t for t in texts for marker in MARKERS):
            return "content holds transformers' private marker characters U+F0000/U+F0001, which it deletes"
    if fmt == "qwen3":
        for m in messages:
            content = m.get("content")
            if not isinstance(content, str):
                continue
            if m.get("role") == "assistant" and "</think>" in content and m.get("reasoning_content") is None:
                return "qwen3 splits <think>...</think> out of assistant content; transformers does it on marked text"
            if m.get("role") == "user" and content.startswith("<tool_response>") and content.endswith("</tool_response>"):
                return "qwen3 tests user content for <tool_response> wrapping; transformers tests marked text"
    return None


def control_ids(model: Model) -> set[int]:
    return {i for _, i in model.enc.control_tokens}


# --- Comparing one conversation with transformers ---

import re  # noqa: E402

#: The documented reasons chatids refuses a conversation that the template renders: in each,
#: the template would silently drop or mangle part of the input (see the format docs).
POLICY_PATTERNS = [
    re.compile(p)
    for p in (
        r"role .* is not rendered by the \S+ template \(it would drop the message silently\)",
        r"a system message needs a user message (after it|to be folded into)",
        r"the template writes the system message into the last user turn only when the conversation ends with it",
        r"the checkpoint's template drops this system message here",
        r"the checkpoint's template drops this message's tool call",
        r"content part \d+ has type .* which the gemma-3 template drops silently",
        r"the gemma-3 template keeps only the first part of a system message",
    )
]


@dataclass
class Outcome:
    """What happened to one (conversation, add_generation_prompt) case."""

    kind: str  # "compared" | "rejected_by_template" | "rejected_by_policy" | "deviation_documented"
    detail: str = ""
    expected: Optional[dict[bool, list[int]]] = None  # sanitize -> expected ids, for batch checks


def _first_difference(a: list[int], b: list[int]) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"first difference at token {i}: chatids {a[max(0, i - 3):i + 4]} vs transformers {b[max(0, i - 3):i + 4]}"
    return f"lengths differ: chatids {len(a)} vs transformers {len(b)}"


def compare(model: Model, messages: list[dict], add_generation_prompt: bool, tools: Optional[list] = None) -> Outcome:
    """Compare chatids with transformers on one case; raise AssertionError on any mismatch.

    Text (``render``) and ids in both sanitize modes must be equal to transformers', except in
    a documented deviation (:func:`known_deviation`), where the alternative property is checked.
    If the template raises, chatids must raise ``ChatTemplateError`` too. If only chatids
    refuses, the reason must be one of :data:`POLICY_PATTERNS`.
    """
    agp = add_generation_prompt
    kw: dict[str, Any] = {} if tools is None else {"tools": tools}
    try:
        ref_text = model.ref_text(messages, agp, **kw)
    except Exception as e:  # the template itself rejects the conversation
        try:
            model.text(messages, agp, **kw)
        except chatids.ChatTemplateError:
            return Outcome("rejected_by_template", f"{type(e).__name__}: {e}")
        raise AssertionError(f"transformers raised {type(e).__name__}: {e}, chatids rendered the conversation")
    try:
        text = model.text(messages, agp, **kw)
    except chatids.ChatTemplateError as e:
        reason = str(e)
        assert any(p.search(reason) for p in POLICY_PATTERNS), f"chatids refused with an undocumented reason: {reason}"
        # Every entry point refuses it the same way.
        for sanitize in (False, True):
            try:
                model.ids(messages, agp, sanitize, **kw)
            except chatids.ChatTemplateError:
                continue
            raise AssertionError("render refused the conversation but encode accepted it")
        return Outcome("rejected_by_policy", re.sub(r'tool call "[^"]*"', "tool call", re.sub(r"^message \d+: ", "", reason)))
    assert text == ref_text, f"render differs:\nchatids:      {text[:300]!r}\ntransformers: {ref_text[:300]!r}"
    expected: dict[bool, list[int]] = {}
    ref_plain = model.ref_ids(messages, agp, sanitize=False, **kw)
    ours_plain = model.ids(messages, agp, sanitize=False, **kw)
    assert ours_plain == ref_plain, "sanitize=False: " + _first_difference(ours_plain, ref_plain)
    expected[False] = ref_plain
    ours = model.ids(messages, agp, sanitize=True, **kw)
    deviation = known_deviation(model.format, messages, sanitize=True)
    if deviation is None:
        ref = model.ref_ids(messages, agp, sanitize=True, **kw)
        assert ours == ref, "sanitize=True: " + _first_difference(ours, ref)
        expected[True] = ref
        return Outcome("compared", expected=expected)
    # Documented deviation: no control id from content, and where nothing is left to
    # sanitize after the template's own string handling, the plain encoding.
    assert_no_control_from_content(model, messages, agp, **kw)
    detailed_plain = model.enc.encode_detailed(messages, agp, False, **model.ours_kwargs(**kw))
    ctrl = control_ids(model)
    if not any(int(i) in ctrl for i, c in zip(detailed_plain.ids, detailed_plain.from_content) if c):
        assert ours == ref_plain, "deviation case: " + _first_difference(ours, ref_plain)
    expected[True] = ours
    return Outcome("deviation_documented", deviation, expected=expected)


def assert_no_control_from_content(model: Model, messages: list[dict], agp: bool, **kw: Any) -> None:
    """With sanitizing on, no control-token id starts inside caller-supplied text."""
    detailed = model.enc.encode_detailed(messages, agp, True, **model.ours_kwargs(**kw))
    ctrl = control_ids(model)
    leaked = [(i, int(t)) for i, (t, c) in enumerate(zip(detailed.ids, detailed.from_content)) if c and int(t) in ctrl]
    assert not leaked, f"control token ids came out of content: {leaked[:5]}"


#: sha256 of OpenAI's o200k_base.tiktoken, the vocabulary openai-harmony loads (it checks it too).
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"


def harmony_encoding(cache_dir: Path) -> Any:
    """openai-harmony's gpt-oss encoding, offline.

    openai-harmony downloads ``o200k_base.tiktoken`` on first use. Nothing may download here, so
    the file is written from gpt-oss's own ``tokenizer.json`` (its 199,998 ranked byte strings,
    GPT-2 byte-to-unicode mapping undone) into ``cache_dir``, checked against the published
    sha256, and harmony is pointed at it with ``TIKTOKEN_ENCODINGS_BASE``."""
    import base64
    import hashlib

    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    path = cache_dir / "o200k_base.tiktoken"
    if not path.exists():
        model_dir = require_model_path("gpt-oss-120b")
        vocab = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
        # GPT-2's byte-to-unicode table: printable bytes stand for themselves, the others for
        # 256, 257, ... in byte order.
        printable = set(range(ord("!"), ord("~") + 1)) | set(range(ord("¡"), ord("¬") + 1)) | set(range(ord("®"), ord("ÿ") + 1))
        to_byte = {chr(b): b for b in printable}
        others = [b for b in range(256) if b not in printable]
        to_byte.update({chr(256 + k): b for k, b in enumerate(others)})
        lines = (base64.b64encode(bytes(to_byte[ch] for ch in token)).decode() + f" {rank}\n" for token, rank in sorted(vocab.items(), key=lambda kv: kv[1]))
        data = "".join(lines).encode()
        assert hashlib.sha256(data).hexdigest() == O200K_SHA256, "gpt-oss's vocabulary is not o200k_base"
        path.write_bytes(data)
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(cache_dir)
    return load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)


def arguments_as_text(messages: list[dict]) -> list[dict]:
    """``messages`` with each tool call's ``arguments`` as JSON text (OpenAI's own form). A
    dataset column (Arrow, in datasets and Ray Data) holding them as dicts becomes one struct type
    for every row: each row's arguments get the keys of all the others, filled with null, and the
    conversation is no longer the one written."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = [
                {**c, "function": {**c["function"], "arguments": c["function"]["arguments"] if isinstance(c["function"].get("arguments"), str) else json.dumps(c["function"].get("arguments"), ensure_ascii=False)}}
                if isinstance(c, dict) and isinstance(c.get("function"), dict)
                else c
                for c in m["tool_calls"]
            ]
            m = {**m, "tool_calls": calls}
        out.append(m)
    return out
