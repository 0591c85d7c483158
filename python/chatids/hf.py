"""``apply_chat_template`` served by chatids: a drop-in for code that already calls transformers.

Code that builds prompts through ``tokenizer.apply_chat_template`` (TRL's data utilities,
evaluation harnesses, training scripts) gets chatids' speed without changing a call site::

    import chatids.hf
    chatids.hf.patch(tokenizer)          # this tokenizer
    chatids.hf.patch_all()               # every tokenizer, also those loaded later
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    chatids.hf.stats()                   # {'served': 1, 'fallback': 0, 'fallback_reasons': {}}

The contract: a patched ``apply_chat_template`` returns what the original returns, the same values
of the same types, for every argument of its signature and with transformers' own defaults. A
call is served by chatids only when chatids produces that result exactly; every other call goes to
the original method, unchanged, and :func:`stats` counts it with its reason. What is served:

* a ``tokenizers``-backed tokenizer (``PreTrainedTokenizerFast``), one conversation or a batch,
  messages as dicts or message objects (normalized by transformers' own helper);
* ``tokenize=False`` (the text) or ``True`` (ids, ``return_dict``, ``return_tensors``, ``padding``,
  ``truncation`` with ``max_length``), ``add_generation_prompt``, ``continue_final_message=True``,
  ``tools``, ``documents``, ``chat_template=`` (a name or a template's text), extra template
  arguments, ``sanitize_control_tokens``.

What falls back: ``return_assistant_tokens_mask`` (transformers' mask comes from the template's
``{% generation %}`` blocks), ``tokenizer_kwargs``, ``continue_final_message="<field>"``, a
truncation without ``max_length``, a template argument named ``now``, slow (Python or
SentencePiece) tokenizers, and any conversation chatids refuses (its documented refusals: the
original then renders it, or raises its own error). One difference is left: a served
``BatchEncoding`` has no ``encodings`` (the ``tokenizers`` objects behind ``word_ids()`` and
``char_to_token()``); ask for offsets through ``tokenizer_kwargs`` and the call falls back.

``patch(tokenizer, sanitize_control_tokens=True)`` (or ``patch_all(...)``) makes every call that
does not pass ``sanitize_control_tokens`` injection-safe: control tokens typed in content are
encoded as text, as transformers' own ``sanitize_control_tokens=True`` encodes them. A call that
falls back then passes ``sanitize_control_tokens=True`` to the original too.

chatids builds the encoder of a tokenizer once, from what ``save_pretrained`` writes (so added
tokens and an edited template are seen), and again when tokens are added to it or its special
tokens change; each other template it is asked for (``chat_template=``) is compiled once.
"""

from __future__ import annotations

import inspect
import json
import os
import pathlib
import re
import shutil
import tempfile
import threading
import warnings
import weakref
from collections import Counter
from typing import Any, Callable, Optional

from ._core import ChatTemplateError, CheckpointError
from ._encoder import Encoder

__all__ = ["patch", "patch_all", "unpatch", "is_patched", "stats", "reset_stats"]

_lock = threading.Lock()
_served = 0
_fallback: Counter[str] = Counter()
_examples: dict[str, str] = {}
_original: Optional[Callable[..., Any]] = None
"""``PreTrainedTokenizerBase.apply_chat_template`` before :func:`patch_all` (None: not patched)."""
_all_sanitize = False
_states: "weakref.WeakKeyDictionary[Any, _State]" = weakref.WeakKeyDictionary()


class _Fallback(Exception):
    """The call goes to the original method; ``args[0]`` is the reason, ``args[1]`` a detail."""


def stats() -> dict[str, Any]:
    """How many calls chatids served and how many went to the original method, by reason.

    ``{"served": int, "fallback": int, "fallback_reasons": {reason: count},
    "fallback_examples": {reason: the first call's detail}}``; counts since the process started
    or :func:`reset_stats`."""
    with _lock:
        return {
            "served": _served,
            "fallback": sum(_fallback.values()),
            "fallback_reasons": dict(_fallback),
            "fallback_examples": dict(_examples),
        }


def reset_stats() -> None:
    """Set the counts of :func:`stats` to zero."""
    global _served
    with _lock:
        _served = 0
        _fallback.clear()
        _examples.clear()


def _count(reason: Optional[str], detail: str = "") -> None:
    global _served
    with _lock:
        if reason is None:
            _served += 1
        else:
            _fallback[reason] += 1
            _examples.setdefault(reason, detail)


def _base_class() -> Any:
    try:
        from transformers import PreTrainedTokenizerBase
    except ImportError as e:  # pragma: no cover - the module is about transformers
        raise ImportError("chatids.hf patches transformers tokenizers: pip install transformers") from e
    return PreTrainedTokenizerBase


def _original_method(tokenizer: Any) -> Callable[..., Any]:
    """The unpatched ``apply_chat_template`` of this tokenizer's class, as a plain function."""
    fn = type(tokenizer).apply_chat_template
    if fn is _patched_all and _original is not None:
        return _original
    return fn  # type: ignore[no-any-return]


class _PatchedMethod:
    """What :func:`patch` puts on one tokenizer as its ``apply_chat_template``. It keeps the
    tokenizer and the option, not its encoders: pickling or copying a patched tokenizer carries
    the patch, and the copy builds its own encoder when it is first called."""

    def __init__(self, tokenizer: Any, sanitize_control_tokens: bool) -> None:
        self.tokenizer = tokenizer
        self.sanitize_control_tokens = sanitize_control_tokens

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _apply(self.tokenizer, self.sanitize_control_tokens, args, kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(_original_method(self.tokenizer).__get__(self.tokenizer))

    @property
    def __doc__(self) -> Optional[str]:  # type: ignore[override]
        return _original_method(self.tokenizer).__doc__


def patch(tokenizer: Any, *, sanitize_control_tokens: bool = False) -> Any:
    """Serve ``tokenizer.apply_chat_template`` by chatids where it is exact (see the module).
    Returns the tokenizer. ``sanitize_control_tokens=True`` becomes the default of its calls."""
    base = _base_class()
    if not isinstance(tokenizer, base):
        raise TypeError(f"chatids.hf.patch takes a transformers tokenizer, not {type(tokenizer).__name__}")
    _count_added_tokens()
    tokenizer.__dict__["apply_chat_template"] = _PatchedMethod(tokenizer, bool(sanitize_control_tokens))
    return tokenizer


def patch_all(*, sanitize_control_tokens: bool = False) -> None:
    """Serve ``apply_chat_template`` of every transformers tokenizer by chatids, those already
    loaded and those loaded later (it patches ``PreTrainedTokenizerBase``; a class that defines
    its own method, such as ``MistralCommonBackend``, keeps it). Calling it again changes the
    default of ``sanitize_control_tokens``."""
    global _original, _all_sanitize
    base = _base_class()
    _count_added_tokens()
    with _lock:
        if _original is None:
            _original = base.apply_chat_template
            base.apply_chat_template = _patched_all
        _all_sanitize = bool(sanitize_control_tokens)


def unpatch(tokenizer: Any = None) -> None:
    """Restore the original method: on ``tokenizer``, or, without one, undo :func:`patch_all`."""
    global _original
    if tokenizer is not None:
        tokenizer.__dict__.pop("apply_chat_template", None)
        _states.pop(tokenizer, None)
        return
    base = _base_class()
    with _lock:
        if _original is not None:
            base.apply_chat_template = _original
            _original = None


def is_patched(tokenizer: Any = None) -> bool:
    """Whether ``tokenizer`` (or, without one, every tokenizer) is served by chatids."""
    if tokenizer is None:
        return _original is not None
    return isinstance(tokenizer.__dict__.get("apply_chat_template"), _PatchedMethod) or (
        _original is not None and type(tokenizer).apply_chat_template is _patched_all
    )


def _patched_all(self: Any, *args: Any, **kwargs: Any) -> Any:
    return _apply(self, _all_sanitize, args, kwargs)


_patched_all.__doc__ = "apply_chat_template, served by chatids where it is exact (chatids.hf.patch_all)."

# --- serving one call ---


class _State:
    """One tokenizer's encoders: the tokenizer's own, rebuilt when tokens are added or its special
    tokens change, and one per template text it was asked for."""

    def __init__(self) -> None:
        self.fingerprint: Any = None
        self.base: Optional[Encoder] = None
        self.failed: Optional[str] = None
        self.by_template: dict[str, Encoder] = {}
        self.lock = threading.Lock()


def _fingerprint(tokenizer: Any) -> Any:
    """What invalidates a tokenizer's encoders: tokens added since it was patched (counted by
    :func:`_count_added_tokens`; ``len(tokenizer)`` would cost up to 0.8 ms a call) and its
    special tokens."""
    return (tokenizer.__dict__.get("_chatids_added_tokens", 0), tuple(map(str, tokenizer.special_tokens_map.items())))


_counting = False


def _count_added_tokens() -> None:
    """Make ``add_tokens`` and ``add_special_tokens`` (every tokenizer class inherits them from
    ``PreTrainedTokenizerBase``) count their calls on the tokenizer. Installed once, by the first
    :func:`patch` or :func:`patch_all`; the counting is all they do more."""
    global _counting
    with _lock:
        if _counting:
            return
        base = _base_class()
        for name in ("add_tokens", "add_special_tokens"):
            method = getattr(base, name)

            def counted(self: Any, *args: Any, __method: Callable[..., Any] = method, **kwargs: Any) -> Any:
                try:
                    return __method(self, *args, **kwargs)
                finally:
                    self.__dict__["_chatids_added_tokens"] = self.__dict__.get("_chatids_added_tokens", 0) + 1

            counted.__name__, counted.__doc__, counted.__wrapped__ = name, method.__doc__, method  # type: ignore[attr-defined]
            setattr(base, name, counted)
        _counting = True


def _encoder(tokenizer: Any, template: str) -> Encoder:
    state = _states.get(tokenizer)
    if state is None:
        with _lock:
            state = _states.setdefault(tokenizer, _State())
    fingerprint = _fingerprint(tokenizer)
    if state.fingerprint == fingerprint:
        found = state.by_template.get(template)
        if found is not None:
            return found
        if state.failed is not None:
            raise _Fallback("chatids cannot load this tokenizer", state.failed)
    with state.lock:
        if state.fingerprint != fingerprint:
            state.fingerprint, state.base, state.failed, state.by_template = fingerprint, None, None, {}
            try:
                state.base = _load(tokenizer, template)
            except (CheckpointError, ChatTemplateError, OSError, ValueError) as e:
                state.failed = f"{type(e).__name__}: {e}"
                raise _Fallback("chatids cannot load this tokenizer", state.failed) from e
            state.by_template[template] = state.base
        if state.base is None:
            raise _Fallback("chatids cannot load this tokenizer", state.failed or "")
        found = state.by_template.get(template)
        if found is None:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    found = state.base.with_chat_template(template)
            except (CheckpointError, ChatTemplateError) as e:
                raise _Fallback("chatids cannot compile the template", f"{type(e).__name__}: {e}") from e
            state.by_template[template] = found
        return found


def _load(tokenizer: Any, template: str) -> Encoder:
    """The tokenizer's encoder, proven on a probe: the checkpoint folder it was loaded from (or
    its Hugging Face cache entry), else what its ``save_pretrained`` writes (which sees added
    tokens), whichever encodes the probe exactly as the original method does."""
    tried: list[str] = []
    source = _source_folder(tokenizer)
    if source is not None:
        try:
            enc = _from_folder(source, template)
        except (CheckpointError, ChatTemplateError, OSError) as e:
            tried.append(f"{source}: {type(e).__name__}: {e}")
        else:
            why = _probe(tokenizer, enc, template)
            if why is None:
                return enc
            tried.append(f"{source}: {why}")
    with tempfile.TemporaryDirectory(prefix="chatids-hf-") as folder:
        tokenizer.save_pretrained(folder)
        # The template of this call is the checkpoint's template (named ones are resolved by
        # transformers' get_chat_template before chatids sees them).
        root = pathlib.Path(folder)
        shutil.rmtree(root / "additional_chat_templates", ignore_errors=True)
        (root / "chat_template.json").unlink(missing_ok=True)
        config_path = root / "tokenizer_config.json"
        if config_path.is_file():
            config = json.loads(config_path.read_text(encoding="utf-8"))
            if config.pop("chat_template", None) is not None:
                config_path.write_text(json.dumps(config), encoding="utf-8")
        (root / "chat_template.jinja").write_text(template, encoding="utf-8")
        enc = _from_folder(folder, None)
    why = _probe(tokenizer, enc, template)
    if why is None:
        return enc
    tried.append(f"save_pretrained: {why}")
    raise CheckpointError("no encoder matches the tokenizer on the probe: " + "; ".join(tried))


def _from_folder(folder: str, template: Optional[str]) -> Encoder:
    with warnings.catch_warnings():
        # The jinja2 route's warning: the patched method stays as quiet as the original.
        warnings.simplefilter("ignore", RuntimeWarning)
        enc = Encoder.from_pretrained(folder, reference="transformers", unknown_template_args="ignore")
        if template is not None and enc._core.chat_template != template:
            enc = enc.with_chat_template(template)
    return enc


def _source_folder(tokenizer: Any) -> Optional[str]:
    """The folder the tokenizer was loaded from: a local directory, or a repo id's snapshot in
    the local Hugging Face cache (nothing is downloaded)."""
    name = getattr(tokenizer, "name_or_path", None)
    if not name:
        return None
    try:
        from ._encoder import _resolve_checkpoint

        path = _resolve_checkpoint(name, revision=None, allow_download=False)
    except CheckpointError:
        return None
    return path if os.path.isfile(os.path.join(path, "tokenizer.json")) else None


def _probe(tokenizer: Any, enc: Encoder, template: str) -> Optional[str]:
    """None when ``enc`` gives the original method's ids on a probe conversation holding every
    added token, spaces, newlines and non-ASCII text; otherwise what differs."""
    added = sorted(tokenizer.get_added_vocab())
    text = "Probe:  two  spaces\n\n\tx ünïcödé 数字 123 " + " ".join(added) + " end "
    original = _original_method(tokenizer)
    for probe in ([{"role": "user", "content": text}],
                  [{"role": "system", "content": "S"}, {"role": "user", "content": text}]):
        try:
            want = original(tokenizer, probe, chat_template=template, return_dict=False)
        except Exception:  # noqa: BLE001 - the template rejects this probe shape; try the next
            continue
        try:
            got = enc.encode(probe, sanitize_control_tokens=False, **_clock(enc)).tolist()
        except ChatTemplateError as e:
            return f"chatids refuses the probe: {e}"
        return None if got == list(want) else "the probe's ids differ"
    return "the template renders no probe conversation"


def _clock(enc: Encoder) -> dict[str, Any]:
    """``now=`` as transformers' ``strftime_now`` reads it (its module's ``datetime.now()``)."""
    if not enc.reads_clock:
        return {}
    from transformers.utils import chat_template_utils

    return {"now": chat_template_utils.datetime.now()}


class _Signature:
    """The original method's named parameters (after ``self``), in order, with their defaults."""

    def __init__(self, original: Callable[..., Any]) -> None:
        self.named = [
            (q.name, q.default)
            for q in list(inspect.signature(original).parameters.values())[1:]
            if q.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        ]
        self.names = frozenset(n for n, _ in self.named)
        self.position = {n: i for i, (n, _) in enumerate(self.named)}

    def given(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], default: Any) -> Any:
        """The value the call passes for ``name`` (by keyword or position), else ``default``."""
        if name in kwargs:
            return kwargs[name]
        i = self.position.get(name)
        return args[i] if i is not None and i < len(args) else default

    def passed(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        i = self.position.get(name)
        return name in kwargs or (i is not None and i < len(args))


_SIGNATURES: dict[Any, _Signature] = {}


def _signature(original: Callable[..., Any]) -> _Signature:
    found = _SIGNATURES.get(original)
    if found is None:
        found = _SIGNATURES[original] = _Signature(original)
    return found


def _bind(tokenizer: Any, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by name, defaults filled in, the rest under ``"kwargs"``: what
    ``inspect.Signature.bind`` gives, in a tenth of its time. TypeError where it raises."""
    sig = _signature(original)
    named, names = sig.named, sig.names
    if len(args) > len(named):
        raise TypeError(f"apply_chat_template takes {len(named)} positional arguments, {len(args)} given")
    bound = dict(named)
    for (name, _), value in zip(named, args):
        bound[name] = value
    extra = {}
    for key, value in kwargs.items():
        if key in names:
            if sig.position[key] < len(args):
                raise TypeError(f"apply_chat_template got multiple values for {key}")
            bound[key] = value
        else:
            extra[key] = value
    if any(v is inspect.Parameter.empty for v in bound.values()):
        raise TypeError("apply_chat_template is missing a required argument")
    bound["kwargs"] = extra
    return bound


def _apply(tokenizer: Any, sanitize_default: bool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    original = _original_method(tokenizer)
    if sanitize_default:
        # The patch's default applies where the call leaves ``sanitize_control_tokens`` unset and
        # transformers would accept it (it raises on it without ``tokenize`` or with the mask).
        sig = _signature(original)
        if (
            "sanitize_control_tokens" in sig.names
            and not sig.passed("sanitize_control_tokens", args, kwargs)
            and sig.given("tokenize", args, kwargs, True)
            and not sig.given("return_assistant_tokens_mask", args, kwargs, False)
        ):
            kwargs = {**kwargs, "sanitize_control_tokens": True}
    try:
        out, sanitized = _serve(tokenizer, original, args, kwargs)
    except _Fallback as e:
        reason, detail = e.args[0], (e.args[1] if len(e.args) > 1 else "")
        if reason != _REFUSED:
            _count(reason, detail)
            return original(tokenizer, *args, **kwargs)
        try:
            out = original(tokenizer, *args, **kwargs)
        except Exception:
            _count(_RAISES, detail)  # chatids raised because the template raises: not a refusal
            raise
        _count(reason, detail)
        return out
    _count(None)
    if _is_batch_encoding(out) and not sanitized:
        # What the tokenizer's call would have attached: its ``tokenizers`` encodings (behind
        # ``char_to_token()``, ``word_ids()``...), computed by the original method when first used.
        # (transformers' sanitizing encodes piece by piece and attaches none.)
        out._encodings = _LazyEncodings(lambda: original(tokenizer, *args, **kwargs).encodings)
        out._n_sequences = 1
    return out


_BATCH_ENCODING: list[type] = []


def _is_batch_encoding(out: Any) -> bool:
    if not _BATCH_ENCODING:
        from transformers import BatchEncoding

        _BATCH_ENCODING.append(BatchEncoding)
    return isinstance(out, _BATCH_ENCODING[0])


class _LazyEncodings(list):  # type: ignore[type-arg]
    """A served ``BatchEncoding``'s ``encodings``: the list the original call returns, computed
    by calling it on first use (the arguments are the caller's, as they are then)."""

    def __init__(self, compute: Callable[[], Any]) -> None:
        super().__init__()
        self._compute: Optional[Callable[[], Any]] = compute

    def _fill(self) -> None:
        if self._compute is not None:
            compute, self._compute = self._compute, None
            super().extend(compute() or [])

    def __bool__(self) -> bool:
        return True

    def __len__(self) -> int:
        self._fill()
        return super().__len__()

    def __getitem__(self, i: Any) -> Any:
        self._fill()
        return super().__getitem__(i)

    def __iter__(self) -> Any:
        self._fill()
        return super().__iter__()

    def __eq__(self, other: object) -> bool:
        self._fill()
        return super().__eq__(other)

    __hash__ = None

    def __repr__(self) -> str:
        self._fill()
        return super().__repr__()

    def __reduce__(self) -> Any:
        self._fill()
        return (list, (list(super().__iter__()),))


_FAST: Optional[type] = None
_REFUSED = "chatids refused the conversation"
_RAISES = "the template raises (the original raises too)"


def _serve(tokenizer: Any, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, bool]:
    """(the result, whether it was sanitized), or :class:`_Fallback`."""
    global _FAST
    if _FAST is None:
        from transformers import PreTrainedTokenizerFast

        _FAST = PreTrainedTokenizerFast
    if not isinstance(tokenizer, _FAST):
        raise _Fallback(f"not a tokenizers-backed tokenizer ({type(tokenizer).__name__})")
    try:
        p = _bind(tokenizer, original, args, kwargs)
    except TypeError as e:
        raise _Fallback("arguments the original does not take", str(e)) from e
    extra: dict[str, Any] = p.get("kwargs") or {}
    tokenize = p["tokenize"]
    if p["return_assistant_tokens_mask"]:
        raise _Fallback("return_assistant_tokens_mask")
    if p["tokenizer_kwargs"]:
        raise _Fallback("tokenizer_kwargs")
    cfm = p["continue_final_message"]
    if not isinstance(cfm, bool):
        raise _Fallback("continue_final_message names a field")
    if cfm and p["add_generation_prompt"]:
        raise _Fallback("continue_final_message with add_generation_prompt (the original raises)")
    sanitize = bool(p["sanitize_control_tokens"])
    if sanitize and not tokenize:
        raise _Fallback("sanitize_control_tokens without tokenize (the original raises)")
    if "now" in extra:
        raise _Fallback("a template argument named now")
    truncation, max_length = p["truncation"], p["max_length"]
    if truncation not in (False, None, "do_not_truncate"):
        if truncation not in (True, "longest_first", "only_first") or max_length is None:
            raise _Fallback("truncation without max_length, or a pair strategy")
    conversation = p["conversation"]
    if not isinstance(conversation, (list, tuple)) or len(conversation) == 0:
        raise _Fallback("not a non-empty list (the original decides)")
    from transformers.utils.chat_template_utils import _normalize_chat_messages, get_json_schema

    try:
        template = tokenizer.get_chat_template(p["chat_template"], p["tools"])
    except (ValueError, KeyError, TypeError) as e:
        raise _Fallback("no chat template (the original raises)", str(e)) from e
    batched = isinstance(conversation[0], (list, tuple)) or hasattr(conversation[0], "messages")
    try:
        conversations = [
            c if _plain(c) else _normalize_chat_messages(c) for c in (conversation if batched else [conversation])
        ]
    except TypeError as e:
        raise _Fallback("messages that are not dicts (the original raises)", str(e)) from e
    template_kwargs = dict(extra)
    tools = p["tools"]
    if tools is not None:
        if not isinstance(tools, (list, tuple)):
            raise _Fallback("tools is not a list")
        template_kwargs["tools"] = [t if isinstance(t, dict) else _schema(t, get_json_schema) for t in tools]
    if p["documents"] is not None:
        template_kwargs["documents"] = p["documents"]
    enc = _encoder(tokenizer, template)
    if sanitize and _holds_control_text(enc, (conversations, template_kwargs)):
        # transformers sanitizes by wrapping control tokens in marker characters before the
        # template runs, which templates that test content (Qwen3's ``</think>`` split) see;
        # chatids' ids differ there (docs/deviations.md), so the original serves these calls.
        raise _Fallback("sanitize_control_tokens with control-token text in the input")
    agp = bool(p["add_generation_prompt"])
    template_kwargs.update(_clock(enc))
    try:
        if not tokenize:
            texts = [enc.render(c, agp, continue_final_message=cfm, **template_kwargs) for c in conversations]
            return (texts if batched else texts[0]), False
        if batched:
            batch = enc.encode_batch(conversations, agp, sanitize, continue_final_message=cfm, **template_kwargs)
            flat, offsets = batch.ids.tolist(), batch.offsets.tolist()
            ids = [flat[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]
        else:
            ids = enc.encode(conversations[0], agp, sanitize, continue_final_message=cfm, **template_kwargs).tolist()
    except ChatTemplateError as e:
        raise _Fallback(_REFUSED, str(e)) from e
    return _finish(tokenizer, ids, batched, p, truncation, max_length), sanitize


_MARKERS = ("\U000f0000", "\U000f0001")
"""transformers' private marker characters of ``sanitize_control_tokens``."""
_CONTROL_RE: "weakref.WeakKeyDictionary[Encoder, re.Pattern[str]]" = weakref.WeakKeyDictionary()


def _holds_control_text(enc: Encoder, value: Any) -> bool:
    """Whether any string in ``value`` (dicts and lists walked) holds a control token's text
    or a marker character."""
    pattern = _CONTROL_RE.get(enc)
    if pattern is None:
        texts = sorted({t for t, _ in enc.control_tokens} | set(_MARKERS), key=len, reverse=True)
        pattern = _CONTROL_RE[enc] = re.compile("|".join(re.escape(t) for t in texts))
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if pattern.search(v):
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return False


def _plain(conversation: Any) -> bool:
    """A list of dicts of strings: what transformers' normalization (message objects to dicts,
    ``None`` values dropped) leaves as it is. Checking costs a tenth of normalizing."""
    return type(conversation) is list and all(
        type(m) is dict and all(type(v) is str for v in m.values()) for m in conversation
    )


def _schema(tool: Any, get_json_schema: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    if inspect.isfunction(tool) or inspect.ismethod(tool):
        return get_json_schema(tool)
    raise _Fallback("a tool that is neither a dict nor a function (the original raises)")


def _finish(tokenizer: Any, ids: Any, batched: bool, p: dict[str, Any], truncation: Any, max_length: Any) -> Any:
    """What ``tokenizer(rendered, add_special_tokens=False, padding=..., truncation=...,
    max_length=..., return_tensors=...)`` returns for these ids, then ``return_dict``."""
    if truncation not in (False, None, "do_not_truncate"):
        left = tokenizer.truncation_side == "left"

        def cut(x: list[int]) -> list[int]:
            if len(x) <= max_length:
                return x
            return x[len(x) - max_length :] if left else x[:max_length]

        ids = [cut(x) for x in ids] if batched else cut(ids)
    names = tokenizer.model_input_names
    if any(n not in ("input_ids", "attention_mask") for n in names):
        raise _Fallback("model inputs other than input_ids and attention_mask", str(names))
    if not p["padding"] and p["return_tensors"] is None:
        # The common case, without tokenizer.pad's work (the same lists it returns).
        if not p["return_dict"]:
            return ids
        from transformers import BatchEncoding

        data: dict[str, Any] = {"input_ids": ids}
        if "attention_mask" in names:
            data["attention_mask"] = [[1] * len(x) for x in ids] if batched else [1] * len(ids)
        return BatchEncoding(data)
    if not batched and p["return_tensors"] is not None:
        ids = [ids]  # a single text with tensors gets a batch axis of one
    try:
        out = tokenizer.pad(
            {"input_ids": ids},
            padding=p["padding"],
            max_length=max_length,
            return_tensors=p["return_tensors"],
            return_attention_mask="attention_mask" in names,
        )
    except (ValueError, TypeError) as e:
        raise _Fallback("padding or tensors the original decides", str(e)) from e
    if p["return_dict"]:
        return out
    return out["input_ids"]
