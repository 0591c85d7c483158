"""The public Python API: :class:`Encoder` and :class:`EncodedChat` (:class:`Batch` lives in
``_training``, with the padded and packed rows built from it)."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from . import _core
from ._jinja2_fallback import Jinja2Renderer, Jinja2Route
from ._completion import ParsedCompletion, _parsed
from ._options import CallOptions, call_options
from ._training import Batch, Packed, Padded, Truncation, _labels, pack, to_padded

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # _session and _pairs import this module
    from ._pairs import EncodedPair, EncodedPreference, PairBatch, PreferenceBatch
    from ._session import Session

FORMATS: tuple[str, ...] = tuple(_core.FORMATS)
"""The native formats of the transformers route, by name."""
MISTRAL_COMMON_FORMATS: tuple[str, ...] = tuple(_core.MISTRAL_COMMON_FORMATS)
"""The mistral-common route's formats (chosen by the checkpoint's mistral-common file)."""

Message = Mapping[str, Any]
Conversation = Sequence[Message]


@dataclass(frozen=True)
class Finding:
    """One problem :meth:`Encoder.lint` found."""

    code: str
    """A stable code, e.g. ``"system-unsupported"`` (see docs/verifying.md, the lint table)."""
    message: Optional[int]
    """The message it is about, if one."""
    explanation: str
    """What happens, in one line."""

    def __str__(self) -> str:
        where = f"message {self.message}: " if self.message is not None else ""
        return f"[{self.code}] {where}{self.explanation}"


@dataclass(frozen=True)
class EncodedChat:
    """The ids of one conversation with per-token provenance (and training columns when asked)."""

    ids: np.ndarray
    """Token ids (uint32)."""
    message_indices: np.ndarray
    """Per token, the index of the message it belongs to; -1 for template text outside any
    message (a default system prompt, the generation prompt).
    """
    from_content: np.ndarray
    """Per token, whether it starts inside caller-supplied text (content, role, template
    argument) rather than template text or a template token.
    """
    assistant_mask: Optional[np.ndarray] = None
    """Per token, 1 where the loss is computed (see ``train_on=``), uint8; None unless
    ``return_assistant_mask=True``.
    """
    labels: Optional[np.ndarray] = None
    """``ids`` as int64 with -100 where ``assistant_mask`` is 0; None unless asked."""
    truncation: Optional[Truncation] = None
    """What ``truncation=`` cut, or None."""


def _tool_names(tools: Optional[Sequence[Any]]) -> Optional[list[str]]:
    """The function names of ``tools`` (OpenAI ``{"type": "function", "function": {"name"}}``
    dicts, flat ``{"name"}`` dicts, or names), for checking a completion's calls."""
    if tools is None:
        return None
    names = []
    for i, tool in enumerate(tools):
        if isinstance(tool, str):
            names.append(tool)
            continue
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str):
            raise ValueError(f"tools[{i}]: expected a tool dict with a function name, or a name; got {tool!r:.100}")
        names.append(name)
    return names

class Encoder:
    """Encodes conversations for one checkpoint, exactly as its chat template does.

    Build it with :meth:`from_pretrained`. Every method takes ``messages`` as a list of dicts
    with ``role`` and ``content`` (a string, or a list of ``{"type": "text", "text": ...}``
    parts where the format accepts that), and the template's keyword arguments (for example
    ``date_string`` for Llama 3.1, ``enable_thinking`` for Qwen3) as extra keyword arguments.

    Two input policies are explicit opt-ins:

    * ``system``: ``None`` (default) does what the template does with a leading system
      message; ``"error"`` raises where the format has no system turn of its own (instead of
      the template folding it into a user turn); ``"fold"`` folds it into the first user
      message where the template would raise (Gemma 1/2: ``system + "\\n\\n" + user``).
    * ``merge_consecutive=True`` joins consecutive messages of the same role with a blank
      line before rendering, where a template would raise on broken alternation.
    """

    def __init__(self, core: _core.Encoder) -> None:
        self._core = core
        # What every method delegates to: the compiled encoder, or, for a template only
        # jinja2 compiles, the jinja2 route with the same methods.
        self._route: Union[_core.Encoder, Jinja2Route] = core
        if core.needs_external_renderer:
            import jinja2

            try:
                renderer = Jinja2Renderer(
                    core.chat_template or "",
                    core.special_tokens_map,
                    [text for text, _ in core.control_tokens],
                    core.unknown_template_args,
                )
            except (jinja2.TemplateError, SyntaxError) as e:
                # jinja2 compiles templates to Python: `{% break %}` outside a loop is Python's
                # SyntaxError, which transformers raises too.
                line = getattr(e, "lineno", None)
                where = f" (line {line})" if line else ""
                raise _core.CheckpointError(
                    f"the chat template compiles neither in chatids' Jinja engine nor in jinja2{where}: {e}; "
                    "apply_chat_template fails on it too. Pass chat_template=... with a template that "
                    "compiles, or format=... to force a native format"
                ) from e
            self._route = Jinja2Route(core, renderer)
            warnings.warn(
                "chatids' Jinja engine cannot compile this chat template; rendering it with Python's jinja2 "
                "(slower, GIL-bound; ids are still exact). See Encoder.explain().",
                RuntimeWarning,
                stacklevel=3,
            )

    @classmethod
    def from_pretrained(
        cls,
        path_or_repo_id: Union[str, "os.PathLike[str]"],
        *,
        format: Optional[str] = None,
        reference: Optional[str] = None,
        chat_template: Optional[str] = None,
        revision: Optional[str] = None,
        allow_download: bool = False,
        unknown_template_args: str = "error",
        cache_dir: Union[str, "os.PathLike[str]", bool, None] = None,
    ) -> "Encoder":
        """Load a checkpoint: a local directory, a GGUF file, or a Hugging Face repo id.

        A repo id resolves through the local Hugging Face cache (``huggingface_hub``); nothing
        is downloaded unless ``allow_download=True``.

        Two routes, each exact against its own reference:

        * ``reference="transformers"``: ``tokenizer.json`` + ``tokenizer_config.json`` (or the
          GGUF file's tokenizer metadata) and the checkpoint's own chat template, equal to
          transformers' ``apply_chat_template``. A native format renders it when it reproduces
          the template on every probe conversation; otherwise chatids' Jinja engine renders the
          template itself (``format == "jinja"``). :meth:`explain` says which and why.
          ``format=`` forces a native format, or ``"jinja"`` the Jinja path;
          ``chat_template=`` picks one of the checkpoint's named templates or replaces the
          template with the given text.
        * ``reference="mistral-common"``: the directory's ``tekken.json`` or
          ``tokenizer.model.v1/v2/v3/v7``, encoded exactly as Mistral's own library
          ``mistral-common`` (``encode_chat_completion``) does.

        The default is the mistral-common route when the directory holds such a file (as
        Mistral's repositories do) and no ``format``/``chat_template`` is given, the
        transformers route otherwise.

        Template arguments (the extra keyword arguments of :meth:`encode` and the other
        methods) follow one rule on every route and path: an argument the checkpoint's template
        does not read raises :class:`ChatTemplateError` naming it and listing the ones it reads
        (:attr:`template_args`), where transformers would ignore it silently.
        ``unknown_template_args="ignore"`` leaves such arguments out instead, for pipelines
        that pass one set of arguments to many models. The special tokens (``bos_token``, ...),
        ``tools`` and ``documents`` are always accepted; passed, they override the defaults as
        in transformers.

        ``cache_dir`` keeps a compiled copy of the encoder in that folder (the first load writes
        it, the next ones read it: tens of milliseconds instead of seconds for a large
        vocabulary, in every worker process). The file is named by a hash of the checkpoint's
        tokenizer files, its path, these options and the chatids version, so a changed file or
        another chatids version is never served a stale copy; a damaged file is rebuilt. Without
        ``cache_dir``, the environment variable ``CHATIDS_CACHE_DIR`` names the folder if set;
        ``cache_dir=False`` turns the cache off. :attr:`cache_use` says what happened.
        Checkpoint directories only (GGUF files are loaded as usual).
        """
        path = _resolve_checkpoint(path_or_repo_id, revision=revision, allow_download=allow_download)
        if cache_dir is None:
            cache_dir = os.environ.get("CHATIDS_CACHE_DIR") or None
        elif cache_dir is True:
            raise ValueError("cache_dir must be a folder, None (CHATIDS_CACHE_DIR) or False (no cache)")
        folder = None if cache_dir is None or cache_dir is False else os.fspath(cache_dir)
        return cls(
            _core.Encoder.from_pretrained(path, format, reference, chat_template, True, unknown_template_args, folder)
        )

    @property
    def cache_use(self) -> Optional[str]:
        """What :meth:`from_pretrained` did with the compiled cache: ``"read from …"``,
        ``"built, and written to …"``, ``"built again, and … replaced (why)"``, ``"built; …
        could not be written (why)"`` or ``"not cached (why)"``; ``None`` without a cache."""
        return self._core.cache_use

    def with_chat_template(self, chat_template: str, *, format: Optional[str] = None) -> "Encoder":
        """The same tokenizer with another chat template: a fine-tune's edited template, or one
        of the checkpoint's named templates. The format is chosen for that template as
        :meth:`from_pretrained` chooses it (``format=`` forces one). The tokenizer and its
        encoders are shared, so this costs only the template's compilation and probes, not a
        load. Transformers route only."""
        return type(self)(self._core.with_chat_template(chat_template, format))

    @property
    def reference(self) -> str:
        """``"transformers"`` or ``"mistral-common"``: what this encoder is exact against."""
        return self._core.reference

    @property
    def format(self) -> str:
        """The native format in use, e.g. ``"llama-3.1"``."""
        return self._core.format

    @property
    def stop_token_ids(self) -> list[int]:
        """Ids that end an assistant turn: the format's end-of-turn tokens, the config's
        ``eos_token`` and ``generation_config.json``'s ``eos_token_id``."""
        return self._core.stop_token_ids

    @property
    def stop_token_ids_for_tool_calls(self) -> list[int]:
        """The stop ids that mean "the model called a tool and waits for its result" (a subset
        of :attr:`stop_token_ids`): Llama 3.1+ ``<|eom_id|>`` (after a built-in ``<|python_tag|>``
        call), gpt-oss ``<|call|>``. Empty where a tool call ends like any answer (ChatML/Qwen
        ``</tool_call><|im_end|>``, Mistral ``[TOOL_CALLS]...</s>``): parse the completion."""
        return self._core.stop_token_ids_for_tool_calls

    @property
    def control_tokens(self) -> list[tuple[str, int]]:
        """The tokens content may never produce with ``sanitize_control_tokens=True``: the
        special tokens plus the added tokens in the template's literal text."""
        return self._core.control_tokens

    def explain(self) -> str:
        """Why this format was chosen, what was adjusted to match transformers, and which text
        encoder runs."""
        return self._core.explain()

    @property
    def text_encoder(self) -> Optional[str]:
        """The text encoder that runs: ``"native"`` (chatids' own BPE core, chosen whenever it
        supports the checkpoint's tokenizer.json), ``"tokenizers"`` (the tokenizers crate), or
        ``None`` on the mistral-common route (which has its own encoders)."""
        return self._core.text_encoder

    @property
    def reads_clock(self) -> bool:
        """Whether the template calls ``strftime_now()``; ``now=`` fixes what it returns
        (the current time otherwise)."""
        return self._core.reads_clock

    @property
    def template_args(self) -> Optional[frozenset[str]]:
        """The template arguments the checkpoint's template reads (its undeclared variables,
        as ``jinja2.meta.find_undeclared_variables`` gives them), plus the names every template
        is given (the special tokens, ``tools``, ``documents``); ``None`` on the mistral-common
        route, whose only argument is ``tools``."""
        names = self._route.template_args
        return None if names is None else frozenset(names)

    @property
    def unknown_template_args(self) -> str:
        """``"error"`` or ``"ignore"``: what happens to an argument the template does not read
        (see :meth:`from_pretrained`)."""
        return self._core.unknown_template_args

    def encode(
        self,
        messages: Conversation,
        add_generation_prompt: bool = False,
        sanitize_control_tokens: bool = True,
        *,
        system: Optional[str] = None,
        merge_consecutive: bool = False,
        continue_final_message: bool = False,
        return_assistant_mask: bool = False,
        train_on: str = "all_assistant",
        max_length: Optional[int] = None,
        truncation: Optional[str] = None,
        **template_kwargs: Any,
    ) -> Any:
        """Token ids (1-D uint32) of the conversation.

        Equal to ``apply_chat_template(messages, tokenize=True, add_generation_prompt=...,
        sanitize_control_tokens=...)``. With ``sanitize_control_tokens=True`` (the default),
        control tokens typed inside content are encoded as plain text; ``False`` parses them
        as transformers' plain ``apply_chat_template`` does, so content can forge turns.

        Training (see docs/training.md): ``return_assistant_mask=True`` returns an
        :class:`EncodedChat` with ``assistant_mask`` and ``labels`` too, selected by
        ``train_on`` (``"all_assistant"``, ``"last_assistant"`` or ``"all"``; a message's
        ``train: bool`` key overrides it); a conversation with nothing to train on raises.
        ``max_length`` with ``truncation`` (``"error"``, the default; ``"drop_oldest_turns"``;
        ``"right"``) bounds the length; :meth:`encode_detailed` reports what was cut.
        """
        if not return_assistant_mask and max_length is None and truncation is None and train_on == "all_assistant":
            if (
                system is None
                and not merge_consecutive
                and not continue_final_message
                and "now" not in template_kwargs
                and not self._core.reads_clock
            ):
                # The serving hot path: every other option has its default, so the options
                # dict holds only what differs (a missing key is the default; see CallOptions).
                # Building it from locals() costs more than the rest of a short prompt's
                # Python. tests/test_options.py checks that every parameter still reaches
                # the core.
                return self._route.encode(
                    messages,
                    {
                        "add_generation_prompt": add_generation_prompt,
                        "sanitize_control_tokens": sanitize_control_tokens,
                        "template_kwargs": template_kwargs,
                    },
                )
            return self._route.encode(messages, call_options(locals(), self._core.reads_clock))
        options = call_options(locals(), self._core.reads_clock)
        options["provenance"] = True
        chat = self._encoded_chat(messages, options)
        return chat if return_assistant_mask else chat.ids

    def encode_detailed(
        self,
        messages: Conversation,
        add_generation_prompt: bool = False,
        sanitize_control_tokens: bool = True,
        *,
        system: Optional[str] = None,
        merge_consecutive: bool = False,
        continue_final_message: bool = False,
        return_assistant_mask: bool = False,
        train_on: str = "all_assistant",
        max_length: Optional[int] = None,
        truncation: Optional[str] = None,
        **template_kwargs: Any,
    ) -> EncodedChat:
        """Like :meth:`encode`, with each token's message index and origin, the loss mask and
        labels when asked, and what truncation cut."""
        options = call_options(locals(), self._core.reads_clock)
        options["provenance"] = True
        return self._encoded_chat(messages, options)

    def _encoded_chat(self, messages: Conversation, options: CallOptions) -> EncodedChat:
        ids, mask, cut, message_indices, from_content = self._route.encode_training(messages, options)
        assert message_indices is not None and from_content is not None  # provenance=True
        return EncodedChat(
            ids,
            message_indices,
            from_content,
            assistant_mask=mask,
            labels=None if mask is None else _labels(ids, mask),
            truncation=None if cut is None else _truncation(cut),
        )

    def render(
        self,
        messages: Conversation,
        add_generation_prompt: bool = False,
        *,
        system: Optional[str] = None,
        merge_consecutive: bool = False,
        continue_final_message: bool = False,
        **template_kwargs: Any,
    ) -> str:
        """The prompt as text, equal to ``apply_chat_template(..., tokenize=False)``."""
        return self._route.render(messages, call_options(locals(), self._core.reads_clock))

    def encode_batch(
        self,
        conversations: Sequence[Conversation],
        add_generation_prompt: bool = False,
        sanitize_control_tokens: bool = True,
        num_threads: Optional[int] = None,
        *,
        system: Optional[str] = None,
        merge_consecutive: bool = False,
        continue_final_message: bool = False,
        return_assistant_mask: bool = False,
        train_on: str = "all_assistant",
        max_length: Optional[int] = None,
        truncation: Optional[str] = None,
        on_error: str = "raise",
        **template_kwargs: Any,
    ) -> Batch:
        """Encode many conversations in parallel with the GIL released.

        ``num_threads=None`` uses ``RAYON_NUM_THREADS`` if set, else every core. Training
        options as in :meth:`encode`: with ``return_assistant_mask=True`` the batch has flat
        ``assistant_mask`` and ``labels``; truncations are in ``batch.truncations``.
        ``on_error="raise"`` (default) raises :class:`ChatTemplateError` for the first invalid
        conversation, naming its index; ``"collect"`` gives it no tokens and records the
        reason in ``batch.errors`` (nothing is dropped silently).
        """
        options = call_options(locals(), self._core.reads_clock)
        ids, offsets, mask, cuts, errors = self._route.encode_batch(conversations, options)
        return Batch(
            ids,
            offsets,
            assistant_mask=mask,
            labels=None if mask is None else _labels(ids, mask),
            errors=dict(errors),
            truncations={i: _truncation(t) for i, t in cuts},
        )

    def encode_pair(
        self,
        prompt: Conversation,
        completion: Union[Message, Conversation],
        sanitize_control_tokens: bool = True,
        *,
        system: Optional[str] = None,
        merge_consecutive: bool = False,
        **template_kwargs: Any,
    ) -> "EncodedPair":
        """A prompt and one completion for training (SFT on a reply, KTO): the prompt's ids
        with the generation prompt, and the ids ``encode(prompt + completion)`` adds after them,
        with the completion's loss mask. ``completion`` is an assistant message or a list of
        messages (a tool call, its result, the answer). See docs/training.md, "Pairs and
        preferences"."""
        from ._pairs import PairBatch, _rows_from_core

        options = call_options(locals(), self._core.reads_clock)
        out = self._route.encode_pairs([prompt], [[completion]], [""], options, True)
        pair: EncodedPair = _rows_from_core(PairBatch, out)[0]
        return pair

    def encode_preference(
        self,
        prompt: Conversation,
        chosen: Union[Message, Conversation],
        rejected: Union[Message, Conversation],
        sanitize_control_tokens: bool = True,
        *,
        system: Optional[str] = None,
        merge_consecutive: bool = False,
        **template_kwargs: Any,
    ) -> "EncodedPreference":
        """A prompt with a chosen and a rejected completion (DPO, ORPO, reward models): the
        shared prompt ids, and for each completion the ids ``encode(prompt + completion)`` adds
        after them, with its loss mask. See :meth:`encode_pair`."""
        from ._pairs import PreferenceBatch, _rows_from_core

        options = call_options(locals(), self._core.reads_clock)
        out = self._route.encode_pairs([prompt], [[chosen, rejected]], ["chosen", "rejected"], options, True)
        preference: EncodedPreference = _rows_from_core(PreferenceBatch, out)[0]
        return preference

    def encode_pairs(
        self,
        prompts: Sequence[Conversation],
        completions: Sequence[Union[Message, Conversation]],
        sanitize_control_tokens: bool = True,
        num_threads: Optional[int] = None,
        *,
        system: Optional[str] = None,
        merge_consecutive: bool = False,
        on_error: str = "raise",
        **template_kwargs: Any,
    ) -> "PairBatch":
        """:meth:`encode_pair` of many rows in parallel with the GIL released, columnar;
        ``PairBatch.to_trl(label=...)`` gives TRL's KTO columns. ``num_threads`` and
        ``on_error`` as in :meth:`encode_batch`."""
        from ._pairs import PairBatch, _rows_from_core

        options = call_options(locals(), self._core.reads_clock)
        rows = [[c] for c in completions]
        return _rows_from_core(PairBatch, self._route.encode_pairs(prompts, rows, [""], options, False))  # type: ignore[no-any-return]

    def encode_preferences(
        self,
        prompts: Sequence[Conversation],
        chosen: Sequence[Union[Message, Conversation]],
        rejected: Sequence[Union[Message, Conversation]],
        sanitize_control_tokens: bool = True,
        num_threads: Optional[int] = None,
        *,
        system: Optional[str] = None,
        merge_consecutive: bool = False,
        on_error: str = "raise",
        **template_kwargs: Any,
    ) -> "PreferenceBatch":
        """:meth:`encode_preference` of many rows in parallel with the GIL released, columnar;
        ``PreferenceBatch.to_trl()`` gives TRL's DPO columns. ``num_threads`` and ``on_error``
        as in :meth:`encode_batch`."""
        if len(chosen) != len(rejected):
            raise ValueError(f"{len(chosen)} chosen but {len(rejected)} rejected completions")
        from ._pairs import PreferenceBatch, _rows_from_core

        options = call_options(locals(), self._core.reads_clock)
        rows = [[c, r] for c, r in zip(chosen, rejected)]
        names = ["chosen", "rejected"]
        return _rows_from_core(PreferenceBatch, self._route.encode_pairs(prompts, rows, names, options, False))  # type: ignore[no-any-return]

    def parse_completion(self, ids: Any, *, tools: Optional[Sequence[Any]] = None) -> ParsedCompletion:
        """Read the ids a model generated after the generation prompt back into an assistant
        message, by the format's grammar (see docs/parsing.md).

        ``ids`` is a list or 1-D array of ints: everything generated, the stop token included
        when one came. The message has the shape :meth:`encode` takes, with ``content``, the
        reasoning and ``tool_calls``; ``stop`` says what ended the turn (``"length"``: no stop
        token). Text the grammar cannot place is kept in ``remainder``, never dropped. An id
        outside the vocabulary raises ``ValueError`` naming its index. On the Jinja path the
        grammar is derived from the template on first use (gpt-oss harmony, DeepSeek V3,
        Hermes, plain); where no family reads the template's probe turns back, it raises
        :class:`ChatTemplateError` saying why. On the mistral-common route turns are read as
        mistral-common's own reader reads them.

        What the model got wrong is data, not an exception: ``problems`` names each thing
        (an unclosed call, a malformed one, text after the calls, an unexpected control token,
        ...) and the id index where it starts. With ``tools`` (the list given to
        :meth:`encode`, or names), a call to a function not among them is an ``unknown_tool``
        problem.
        """
        return _parsed(self._core.parse_completion(_id_list(ids), _tool_names(tools)))

    def stream_parser(self, *, tools: Optional[Sequence[Any]] = None) -> _core.CompletionStream:
        """A :class:`CompletionStream` for one completion: feed it ids as they are generated,
        get content, reasoning and tool-call deltas, then ``done`` with the same
        :class:`ParsedCompletion` as :meth:`parse_completion` (``tools`` as there)."""
        return self._core.stream_parser(ParsedCompletion, _tool_names(tools))

    def decode(self, ids: Any) -> str:
        """The text of ``ids`` as the tokenizer decodes them (``tokenizer.decode(ids)``, special
        tokens included; on the mistral-common route mistral-common's ``decode``, special tokens
        written as their text)."""
        return self._core.decode(_id_list(ids))

    def session(
        self,
        messages: Conversation = (),
        *,
        sanitize_control_tokens: bool = True,
        system: Optional[str] = None,
        merge_consecutive: bool = False,
        on_rewrite: str = "error",
        **template_kwargs: Any,
    ) -> "Session":
        """An append-only :class:`~chatids.Session` starting with ``messages``, rendered with
        these options for its whole life (``tools=``, ``date_string``, ``now``... are fixed when
        the session starts). See docs/serving.md."""
        from ._session import Session

        session = Session(self._route.session(call_options(locals(), self._core.reads_clock)), self.parse_completion)
        if len(messages):
            session.append(list(messages))
        return session

    @property
    def append_rewrites(self) -> Optional[list[str]]:
        """Where appending messages can change tokens already encoded (the template is not
        prefix-preserving there), one line per case; ``[]``: prefix-preserving; ``None``: not
        known (the Jinja path; sessions detect rewrites as they happen)."""
        return self._core.append_rewrites

    def lint(
        self,
        messages: Conversation,
        add_generation_prompt: bool = False,
        *,
        for_generation: bool = False,
        add_special_tokens: bool = False,
        system: Optional[str] = None,
        merge_consecutive: bool = False,
        continue_final_message: bool = False,
        **template_kwargs: Any,
    ) -> list[Finding]:
        """Report, without raising, the silent failures this conversation would meet.

        ``for_generation=True`` says the prompt is for a serving call (it should end with the
        assistant header); ``add_special_tokens=True`` says the caller will tokenize the
        rendered text with special tokens (double-BOS check). Malformed messages still raise.
        """
        raw = self._route.lint(messages, call_options(locals(), self._core.reads_clock))
        return [Finding(code, message, explanation) for code, message, explanation in raw]

    def __repr__(self) -> str:
        return f"chatids.Encoder(format={self.format!r})"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle by value: the tokenizer and the template travel with the encoder, so
        unpickling (in a ``multiprocessing`` worker, a ``datasets.map(num_proc=...)`` process,
        a Ray task) reads no checkpoint file and downloads nothing."""
        return (_encoder_from_state, (self._core.to_bytes(), type(self)))

def _truncation(cut: tuple[str, int, int, list[int]]) -> Truncation:
    policy, original_length, dropped_tokens, dropped_messages = cut
    return Truncation(policy, original_length, dropped_tokens, tuple(dropped_messages))


def _encoder_from_state(state: bytes, cls: "type[Encoder]" = Encoder) -> Encoder:
    """Unpickle an :class:`Encoder` (see ``Encoder.__reduce__``)."""
    core = _core.Encoder.from_bytes(state)
    with warnings.catch_warnings():
        # The jinja2 fallback warning was given where the encoder was loaded.
        warnings.filterwarnings("ignore", message="chatids' Jinja engine cannot compile", category=RuntimeWarning)
        return cls(core)


_CHECKPOINT_FILES = [
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "chat_template.json",
    "additional_chat_templates/*.jinja",
    "generation_config.json",
    "special_tokens_map.json",
    "tekken.json",
    "tokenizer.model.v*",
]
"""The files chatids reads from a Hugging Face repo (everything else is left in the Hub)."""


def _resolve_checkpoint(
    path_or_repo_id: Union[str, "os.PathLike[str]"], *, revision: Optional[str], allow_download: bool
) -> str:
    """A local path for a directory, GGUF file or Hugging Face repo id (cache first)."""
    path = os.fspath(path_or_repo_id)
    if os.path.exists(path):
        return path
    looks_like_repo = path.count("/") == 1 and not path.startswith((".", "/", "~"))
    if not looks_like_repo:
        raise _core.CheckpointError(f"{path}: no such file or directory (and not a Hugging Face repo id)")
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:  # pragma: no cover - huggingface_hub is a dependency of the tests
        raise _core.CheckpointError(
            f"{path} is not a local path; resolving repo ids needs huggingface_hub (pip install huggingface_hub)"
        ) from e
    try:
        folder: str = snapshot_download(
            path,
            revision=revision,
            allow_patterns=_CHECKPOINT_FILES,
            local_files_only=not allow_download,
        )
        return folder
    except Exception as e:  # huggingface_hub raises several types for "not in the cache"
        hint = "" if allow_download else " (it is not in the local Hugging Face cache; pass allow_download=True to fetch it)"
        raise _core.CheckpointError(f"{path}: cannot resolve the repo id{hint}: {e}") from e


def _id_list(ids: Any) -> list[int]:
    """Ids as a list of ints (lists pass through; arrays and tensors via ``tolist``)."""
    if isinstance(ids, list):
        return ids
    tolist = getattr(ids, "tolist", None)
    out = tolist() if tolist is not None else list(ids)
    if not isinstance(out, list):
        raise TypeError(f"ids must be a sequence of ints, not {type(ids).__name__}")
    return out
