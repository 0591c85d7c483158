"""A picture of the prompt: the token stream of a conversation, token by token.

``chatids render --color`` (a terminal, through the optional ``rich`` package) and ``chatids
render --html OUT.html`` (one self-contained page, inline CSS, no script, no external asset)
draw the same thing:

* every token boxed, with its text piece and its id, coloured by the message it belongs to
  (a legend gives each message's index, role and token count; ``-1`` is template text outside
  any message: a default system prompt, the generation prompt);
* template tokens (text the template wrote, not caller content) and special/control ids drawn
  distinctly, and a control id that came *out of content* (possible only with
  ``sanitize_control_tokens=False``) flagged as an injection;
* whitespace visible: ``·`` for a space, ``→`` for a tab, ``↵`` plus a real line break for
  ``\\n``; bytes of a UTF-8 character that byte-level BPE split across tokens as ``<0xE2>``;
* the loss mask (``encode_detailed(..., return_assistant_mask=True)``) as an underline, or a
  line saying why there is none;
* with a reference (transformers' ``apply_chat_template(..., tokenize=True)``), the first
  position where the two id lists differ, or "identical (N tokens)".

The module is split in two: :func:`build_cells` / :func:`build_view` turn one conversation into
a :class:`ConversationView` (a list of :class:`TokenCell` plus notes), and the renderers
(:func:`rich_renderable`, :func:`html_page`) only draw views. Nothing here reads the network.
"""

from __future__ import annotations

import html
import json
import unicodedata
import weakref
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, Union

from ._verify import frozen_transformers_clock

if TYPE_CHECKING:
    from ._encoder import Encoder

#: A run of a token's text: ``str`` for characters the token holds whole, ``int`` for one byte
#: of a UTF-8 character split across tokens (or of invalid UTF-8), drawn as ``<0xNN>``.
Part = Union[str, int]

#: Message colours, cycled by message index: (background, alternate background, strong colour).
#: Neighbouring tokens of one message alternate the two backgrounds in the terminal.
PALETTE: tuple[tuple[str, str, str], ...] = (
    ("#dbeafe", "#bfdbfe", "#1d4ed8"),  # blue
    ("#dcfce7", "#bbf7d0", "#15803d"),  # green
    ("#fef3c7", "#fde68a", "#b45309"),  # amber
    ("#fce7f3", "#fbcfe8", "#be185d"),  # pink
    ("#ede9fe", "#ddd6fe", "#6d28d9"),  # violet
    ("#ccfbf1", "#99f6e4", "#0f766e"),  # teal
    ("#ffedd5", "#fed7aa", "#c2410c"),  # orange
    ("#e0e7ff", "#c7d2fe", "#4338ca"),  # indigo
    ("#fae8ff", "#f5d0fe", "#a21caf"),  # fuchsia
    ("#ecfccb", "#d9f99d", "#4d7c0f"),  # lime
)
#: Colours of template text outside any message (message index -1).
OUTSIDE: tuple[str, str, str] = ("#f3f4f6", "#d1d5db", "#4b5563")

#: Visible stand-ins for whitespace; a newline is also followed by a real line break.
WHITESPACE_MARKS: dict[str, str] = {" ": "·", "\t": "→", "\n": "↵", "\r": "␍", "\u00a0": "⍽"}

RICH_MISSING = "chatids render --color needs the rich package: pip install 'chatids[cli]' (or pip install rich)"


def colors(message: int) -> tuple[str, str, str]:
    """(background, alternate background, strong colour) of message index ``message``."""
    return OUTSIDE if message < 0 else PALETTE[message % len(PALETTE)]


# --- token texts -----------------------------------------------------------------------------


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet reversed: the character a byte-level BPE vocabulary uses for
    each byte, mapped back to the byte (``"Ġ"`` -> 0x20)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def _decoder_types(decoder: Any) -> list[Mapping[str, Any]]:
    """The decoders of a ``tokenizer.json`` ``decoder`` entry, ``Sequence`` flattened."""
    if not isinstance(decoder, Mapping):
        return []
    if decoder.get("type") == "Sequence":
        return [d for sub in decoder.get("decoders", []) for d in _decoder_types(sub)]
    return [decoder]


class TokenTexts:
    """The bytes each token id stands for, read from a ``tokenizer.json`` (the one the encoder
    uses: :meth:`from_encoder`).

    Byte-level BPE vocabularies (Llama 3, Qwen, tekken, gpt-oss, DeepSeek) map each character
    back to its byte; SentencePiece-style ones (Llama 2, Mistral v1-v7, Gemma) turn ``▁`` into a
    space and ``<0xNN>`` (byte fallback) into the byte. Added tokens stand for their content.
    The concatenation of the bytes of a conversation's ids is the text the tokenizer read
    (with SentencePiece, plus the ``▁`` its pre-tokenizer prepends).
    """

    def __init__(self, tokenizer_json: str) -> None:
        spec = json.loads(tokenizer_json)
        model = spec.get("model") or {}
        vocab = model.get("vocab") or {}
        self._tokens: dict[int, str] = {}
        if isinstance(vocab, Mapping):
            self._tokens.update({int(i): str(t) for t, i in vocab.items()})
        elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
            self._tokens.update({i: str(entry[0]) for i, entry in enumerate(vocab)})
        self._added: dict[int, str] = {}
        #: Ids of added tokens flagged ``special`` in tokenizer.json.
        self.special_ids: set[int] = set()
        for token in spec.get("added_tokens") or []:
            self._added[int(token["id"])] = str(token["content"])
            if token.get("special"):
                self.special_ids.add(int(token["id"]))
        decoders = _decoder_types(spec.get("decoder"))
        kinds = {d.get("type") for d in decoders}
        pre = json.dumps(spec.get("pre_tokenizer"))
        #: ``"byte-level"``, ``"sentencepiece"`` or ``"plain"`` (vocabulary strings as text).
        self.kind = (
            "byte-level"
            if "ByteLevel" in kinds or '"ByteLevel"' in pre
            else "sentencepiece"
            if "Metaspace" in kinds or any(d.get("type") == "Replace" and "\u2581" in json.dumps(d.get("pattern"), ensure_ascii=False) for d in decoders)
            else "plain"
        )
        self._byte_fallback = bool(model.get("byte_fallback")) or "ByteFallback" in kinds
        self._bytes_of_char = _byte_decoder() if self.kind == "byte-level" else {}
        self._cache: dict[int, bytes] = {}

    @classmethod
    def from_encoder(cls, enc: "Encoder") -> "TokenTexts":
        """The token texts of the tokenizer ``enc`` encodes with, read once per encoder (raises
        ``ValueError`` where the encoder has no ``tokenizer.json``, as on some mistral-common
        checkpoints)."""
        cached = _TEXTS.get(enc)
        if cached is not None:
            return cached
        try:
            texts = cls(enc._core.tokenizer_json())
        except Exception as e:  # the core raises CheckpointError without a tokenizer.json
            raise ValueError(f"the encoder exposes no tokenizer.json to decode tokens with: {e}") from e
        _TEXTS[enc] = texts
        return texts

    def token_string(self, token_id: int) -> Optional[str]:
        """The vocabulary's string for ``token_id`` (``"Ġhello"``, ``"▁the"``, ``"<|eot_id|>"``)."""
        return self._added.get(token_id, self._tokens.get(token_id))

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes of text ``token_id`` stands for (empty for an id outside the vocabulary)."""
        cached = self._cache.get(token_id)
        if cached is not None:
            return cached
        if token_id in self._added:
            content = self._added[token_id]
            raw = (content.replace("\u2581", " ") if self.kind == "sentencepiece" else content).encode("utf-8")
        else:
            token = self._tokens.get(token_id)
            if token is None:
                raw = b""
            elif self.kind == "byte-level":
                table = self._bytes_of_char
                # As the tokenizers crate's ByteLevel decoder: a token with a character outside
                # the byte alphabet stands for its own UTF-8.
                raw = bytes(table[c] for c in token) if all(c in table for c in token) else token.encode("utf-8")
            elif self._byte_fallback and len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
                try:
                    raw = bytes([int(token[3:5], 16)])
                except ValueError:
                    raw = token.encode("utf-8")
            elif self.kind == "sentencepiece":
                raw = token.replace("\u2581", " ").encode("utf-8")
            else:
                raw = token.encode("utf-8")
        self._cache[token_id] = raw
        return raw


#: TokenTexts per live encoder (parsing a vocabulary takes a fraction of a second).
_TEXTS: "weakref.WeakKeyDictionary[Encoder, TokenTexts]" = weakref.WeakKeyDictionary()


def _utf8_length(lead: int) -> int:
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0  # a continuation byte or an invalid lead


def split_utf8(raws: Sequence[bytes]) -> list[tuple[tuple[Part, ...], Optional[str]]]:
    """Each token's text as parts, decoding the whole stream so characters split across tokens
    stay faithful: ``(parts, split_character)`` per token.

    A character whose UTF-8 bytes all lie in one token is text; the bytes of a character that
    spans several tokens become ``int`` parts in each of them (``split_character`` names the
    character, for a tooltip), and so does every byte of invalid UTF-8. Joining, per token, the
    text parts encoded as UTF-8 and the byte parts as bytes gives back ``raws`` exactly.
    """
    data = b"".join(raws)
    owner: list[int] = []
    for t, raw in enumerate(raws):
        owner.extend([t] * len(raw))
    parts: list[list[Part]] = [[] for _ in raws]
    split: list[Optional[str]] = [None] * len(raws)
    p, n = 0, len(data)
    while p < n:
        length = _utf8_length(data[p])
        char: Optional[str] = None
        if length and p + length <= n:
            try:
                char = data[p : p + length].decode("utf-8")
            except UnicodeDecodeError:
                char = None
        if char is None:  # invalid UTF-8: one byte, shown as a byte
            parts[owner[p]].append(data[p])
            p += 1
            continue
        first, last = owner[p], owner[p + length - 1]
        if first == last:
            row = parts[first]
            if row and isinstance(row[-1], str):
                row[-1] += char
            else:
                row.append(char)
        else:
            for q in range(p, p + length):
                parts[owner[q]].append(data[q])
                split[owner[q]] = split[owner[q]] or char
        p += length
    return [(tuple(row), s) for row, s in zip(parts, split)]


# --- cells and views -------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenCell:
    """One token of the prompt, as the pictures draw it."""

    #: Position in the id list (0-based).
    position: int
    id: int
    #: The token's text: characters (``str``) and split/invalid bytes (``int``), see :data:`Part`.
    parts: tuple[Part, ...]
    #: The bytes the token stands for.
    raw: bytes
    #: Index of the message it belongs to; -1 for template text outside any message.
    message: int
    #: That message's role (``None`` for -1).
    role: Optional[str]
    #: Whether it starts inside caller-supplied text (content, role, template argument).
    from_content: bool
    #: Whether the id is a special/control token.
    special: bool
    #: Whether the loss is computed on it; ``None`` when no mask is available.
    trained: Optional[bool] = None
    #: Whether this is the first position where the reference differs.
    differs: bool = False
    #: The character whose bytes this token splits with its neighbours, if any.
    split: Optional[str] = None
    #: The vocabulary's string for the id.
    token: Optional[str] = None

    @property
    def text(self) -> str:
        """The piece as shown, partial bytes as ``<0xNN>``, whitespace as is."""
        return "".join(p if isinstance(p, str) else f"<0x{p:02X}>" for p in self.parts)

    @property
    def template(self) -> bool:
        """Written by the template, not taken from caller content."""
        return not self.from_content

    @property
    def injected(self) -> bool:
        """A special id that came out of content (only with ``sanitize_control_tokens=False``)."""
        return self.special and self.from_content


@dataclass(frozen=True)
class Comparison:
    """chatids' ids against a reference's (transformers' ``apply_chat_template``)."""

    #: Length of chatids' ids and of the reference's.
    length: int
    reference_length: int
    #: The first differing position, ``None`` when identical.
    first_diff: Optional[int]
    #: The ids at ``first_diff`` (``None`` where that list has already ended).
    ours_id: Optional[int] = None
    reference_id: Optional[int] = None
    #: The reference's ids from ``first_diff`` on (a few), and their text.
    reference_context: tuple[int, ...] = ()
    reference_context_text: str = ""
    #: Who the reference is, for the report.
    name: str = "transformers"

    @property
    def identical(self) -> bool:
        return self.first_diff is None

    def summary(self) -> str:
        """One line: "identical to transformers (N tokens)" or where and how they differ."""
        if self.first_diff is None:
            return f"identical to {self.name} (apply_chat_template, {self.length} tokens)"
        ours = "nothing (chatids ends)" if self.ours_id is None else f"id {self.ours_id}"
        ref = f"nothing ({self.name} ends)" if self.reference_id is None else f"id {self.reference_id}"
        return (
            f"differs from {self.name}: first difference at token {self.first_diff}: chatids {ours}, {self.name} {ref} "
            f"(lengths {self.length} vs {self.reference_length}); {self.name} from there: "
            f"{list(self.reference_context)} {self.reference_context_text!r}"
        )


@dataclass
class ConversationView:
    """One conversation, ready to draw."""

    #: The conversation's 0-based position in its input.
    index: int
    cells: list[TokenCell] = field(default_factory=list)
    #: (message index, role) of every message, and (-1, "template") when template text lies outside them.
    legend: list[tuple[int, str]] = field(default_factory=list)
    #: "N of M tokens trained (train_on=...)", or why there is no mask.
    mask_note: Optional[str] = None
    #: Whether a mask is drawn.
    has_mask: bool = False
    comparison: Optional[Comparison] = None
    #: Why the reference could not be compared (it raised), if so.
    compare_error: Optional[str] = None
    #: Why chatids refused the conversation (no cells then).
    error: Optional[str] = None
    #: The options it was encoded with, for the report.
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def ids(self) -> list[int]:
        return [c.id for c in self.cells]

    def tokens_of(self, message: int) -> int:
        """Number of tokens of message index ``message``."""
        return sum(1 for c in self.cells if c.message == message)


def first_difference(ours: Sequence[int], reference: Sequence[int]) -> Optional[int]:
    """The first position where the two id lists differ (the shorter length when one is a
    prefix of the other), or ``None`` when they are equal."""
    for i, (a, b) in enumerate(zip(ours, reference)):
        if int(a) != int(b):
            return i
    return None if len(ours) == len(reference) else min(len(ours), len(reference))


def compare_ids(ours: Sequence[int], reference: Sequence[int], texts: Optional[TokenTexts] = None, name: str = "transformers") -> Comparison:
    """A :class:`Comparison` of two id lists (``texts`` decodes the reference's side)."""
    i = first_difference(ours, reference)
    if i is None:
        return Comparison(len(ours), len(reference), None, name=name)
    context = tuple(int(x) for x in reference[i : i + 6])
    context_text = b"".join(texts.token_bytes(x) for x in context).decode("utf-8", "replace") if texts else ""
    return Comparison(
        len(ours),
        len(reference),
        i,
        int(ours[i]) if i < len(ours) else None,
        int(reference[i]) if i < len(reference) else None,
        context,
        context_text,
        name,
    )


def role_of(messages: Sequence[Mapping[str, Any]], index: int) -> Optional[str]:
    """The role of message ``index`` as a string, ``None`` outside the messages."""
    if 0 <= index < len(messages) and isinstance(messages[index], Mapping):
        role = messages[index].get("role")
        return None if role is None else str(role)
    return None


def build_cells(
    ids: Sequence[int],
    message_indices: Sequence[int],
    from_content: Sequence[bool],
    texts: TokenTexts,
    *,
    roles: Sequence[Optional[str]] = (),
    special_ids: Optional[set[int]] = None,
    mask: Optional[Sequence[int]] = None,
    first_diff: Optional[int] = None,
) -> list[TokenCell]:
    """The cells of one encoded conversation (pure: everything comes in as arguments).

    ``roles[i]`` is the role of message ``i``; ``special_ids`` defaults to the tokenizer's
    special added tokens; ``mask`` is the assistant mask (1 = trained) or ``None``;
    ``first_diff`` marks that position as the first difference.
    """
    if not len(ids) == len(message_indices) == len(from_content):
        raise ValueError("ids, message_indices and from_content must have the same length")
    if mask is not None and len(mask) != len(ids):
        raise ValueError("the mask must have one entry per id")
    special = texts.special_ids if special_ids is None else special_ids
    token_ids = [int(i) for i in ids]
    raws = [texts.token_bytes(i) for i in token_ids]
    pieces = split_utf8(raws)
    cells = []
    for pos, (tid, raw, (parts, split)) in enumerate(zip(token_ids, raws, pieces)):
        m = int(message_indices[pos])
        cells.append(
            TokenCell(
                position=pos,
                id=tid,
                parts=parts,
                raw=raw,
                message=m,
                role=roles[m] if 0 <= m < len(roles) else None,
                from_content=bool(from_content[pos]),
                special=tid in special,
                trained=None if mask is None else bool(mask[pos]),
                differs=pos == first_diff,
                split=split,
                token=texts.token_string(tid),
            )
        )
    return cells


def transformers_ids(
    tok: Any,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = False,
    sanitize_control_tokens: bool = True,
    tools: Optional[list[Any]] = None,
    chat_template: Optional[str] = None,
    template_kwargs: Optional[Mapping[str, Any]] = None,
    now: Optional[datetime] = None,
) -> list[int]:
    """transformers' ``apply_chat_template(..., tokenize=True)`` ids for one conversation, with
    the clock frozen at ``now`` (templates that call ``strftime_now``)."""
    kwargs: dict[str, Any] = dict(template_kwargs or {})
    if tools is not None:
        kwargs["tools"] = tools
    if chat_template is not None:
        kwargs["chat_template"] = chat_template
    with frozen_transformers_clock(now or datetime.now()):
        out = tok.apply_chat_template(
            list(messages),
            tokenize=True,
            add_generation_prompt=add_generation_prompt,
            sanitize_control_tokens=sanitize_control_tokens,
            return_dict=False,
            **kwargs,
        )
    return [int(x) for x in out]


def build_view(
    enc: "Encoder",
    messages: Sequence[Mapping[str, Any]],
    index: int = 0,
    *,
    tools: Optional[list[Any]] = None,
    add_generation_prompt: bool = False,
    sanitize_control_tokens: bool = True,
    train_on: str = "all_assistant",
    template_kwargs: Optional[Mapping[str, Any]] = None,
    now: Optional[datetime] = None,
    texts: Optional[TokenTexts] = None,
    reference: Any = None,
    reference_ids: Optional[Sequence[int]] = None,
    chat_template: Optional[str] = None,
) -> ConversationView:
    """Encode one conversation with provenance and the mask, and make its view.

    ``reference`` is a transformers tokenizer to compare with (its ``apply_chat_template`` ids
    with the same options and clock), or pass its ids directly as ``reference_ids``.
    ``chat_template`` is handed to the reference as transformers' argument of that name.
    A conversation chatids refuses gives a view with :attr:`ConversationView.error`.
    """
    from ._core import ChatTemplateError

    now = now or datetime.now()
    texts = texts or TokenTexts.from_encoder(enc)
    kwargs: dict[str, Any] = dict(template_kwargs or {})
    if tools is not None:
        kwargs["tools"] = tools
    options: dict[str, Any] = {"add_generation_prompt": add_generation_prompt, "sanitize_control_tokens": sanitize_control_tokens}
    view = ConversationView(index=index, options=options)
    roles = [role_of(messages, i) for i in range(len(messages))]
    view.legend = [(i, r if r is not None else "?") for i, r in enumerate(roles)]
    common: dict[str, Any] = dict(add_generation_prompt=add_generation_prompt, sanitize_control_tokens=sanitize_control_tokens)
    try:
        detailed = enc.encode_detailed(messages, **common, return_assistant_mask=True, train_on=train_on, now=now, **kwargs)
        mask = detailed.assistant_mask
    except ChatTemplateError as mask_error:
        try:
            detailed = enc.encode_detailed(messages, **common, now=now, **kwargs)
        except ChatTemplateError as e:
            view.error = str(e)
            return view
        mask = None
        view.mask_note = f"no assistant mask for this conversation: {mask_error}"
    ids = detailed.ids.tolist()
    if mask is not None:
        view.has_mask = True
        view.mask_note = f"assistant mask: {int(mask.sum())} of {len(ids)} tokens trained (train_on={train_on!r})"
    if reference is not None and reference_ids is None:
        try:
            reference_ids = transformers_ids(
                reference,
                messages,
                add_generation_prompt=add_generation_prompt,
                sanitize_control_tokens=sanitize_control_tokens,
                tools=tools,
                chat_template=chat_template,
                template_kwargs=template_kwargs,
                now=now,
            )
        except Exception as e:  # the template raises in transformers
            view.compare_error = f"transformers raised {type(e).__name__}: {e}"
    if reference_ids is not None:
        view.comparison = compare_ids(ids, reference_ids, texts)
    control = {i for _, i in enc.control_tokens} | texts.special_ids
    view.cells = build_cells(
        ids,
        detailed.message_indices.tolist(),
        detailed.from_content.tolist(),
        texts,
        roles=roles,
        special_ids=control,
        mask=None if mask is None else mask.tolist(),
        first_diff=None if view.comparison is None else view.comparison.first_diff,
    )
    if any(c.message < 0 for c in view.cells):
        view.legend.insert(0, (-1, "template"))
    return view


# --- shared drawing helpers ------------------------------------------------------------------


def visible_runs(text: str) -> list[tuple[str, bool]]:
    """``text`` as (run, is_marker) pairs: whitespace and invisible characters replaced by
    their markers (:data:`WHITESPACE_MARKS`, ``<U+XXXX>`` for other invisibles)."""
    runs: list[tuple[str, bool]] = []
    for ch in text:
        mark = WHITESPACE_MARKS.get(ch)
        if mark is None and (ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Co", "Cn")):
            mark = f"<U+{ord(ch):04X}>"
        if mark is None:
            if runs and not runs[-1][1]:
                runs[-1] = (runs[-1][0] + ch, False)
            else:
                runs.append((ch, False))
        else:
            if runs and runs[-1][1]:
                runs[-1] = (runs[-1][0] + mark, True)
            else:
                runs.append((mark, True))
    return runs


def newlines(cell: TokenCell) -> int:
    """How many line breaks follow the cell's box (one per ``\\n`` in its text)."""
    return sum(p.count("\n") for p in cell.parts if isinstance(p, str))


def describe(cell: TokenCell) -> str:
    """A one-line description of the cell (tooltip)."""
    kind = "special token" if cell.special else "token"
    where = "template text outside any message" if cell.message < 0 else f"message {cell.message} ({cell.role})"
    origin = "from content" if cell.from_content else "written by the template"
    bits = [f"#{cell.position}: {kind} id {cell.id} {cell.token!r}", where, origin]
    if cell.injected:
        bits.append("a control token from content!")
    if cell.trained is not None:
        bits.append("trained" if cell.trained else "not trained")
    if cell.split is not None:
        bits.append(f"holds part of {cell.split!r} (U+{ord(cell.split):04X}, split across tokens)")
    if cell.differs:
        bits.append("first difference from the reference")
    return " · ".join(bits)


# --- the terminal (rich) ---------------------------------------------------------------------


def require_rich() -> Any:
    """The ``rich`` module, or ``ImportError`` with :data:`RICH_MISSING`."""
    try:
        import rich
        import rich.console  # noqa: F401
        import rich.text  # noqa: F401
    except ImportError as e:
        raise ImportError(RICH_MISSING) from e
    return rich


def _rich_cell_style(cell: TokenCell, alternate: bool) -> str:
    bg, bg2, strong = colors(cell.message)
    if cell.differs:
        style = "bold #fef08a on #b91c1c"
    elif cell.injected:
        style = "bold #ffffff on #ea580c"
    elif cell.special:
        style = f"bold #ffffff on {strong}"
    elif cell.template:
        style = f"italic #4b5563 on {bg2 if alternate else bg}"
    else:
        style = f"#111827 on {bg2 if alternate else bg}"
    return style + (" underline" if cell.trained else "")


def rich_tokens(view: ConversationView, width: Optional[int] = None) -> Any:
    """The token stream as a ``rich.text.Text``: one styled span per token, alternating
    shades within a message, markers dimmed, a real line break after each ``↵``. With
    ``width`` (the console's), lines break between tokens, never inside one that fits."""
    from rich.cells import cell_len
    from rich.text import Text

    text = Text(overflow="fold")
    previous = None
    alternate = False
    column = 0
    for cell in view.cells:
        alternate = (not alternate) if cell.message == previous else False
        previous = cell.message
        style = _rich_cell_style(cell, alternate)
        dim = "#fde68a" if cell.special or cell.differs or cell.injected else "#6b7280"
        piece = Text()
        for part in cell.parts:
            if isinstance(part, int):
                piece.append(f"<0x{part:02X}>", style=style if cell.special else f"{style} #b45309")
                continue
            for run, marker in visible_runs(part):
                piece.append(run, style=f"{style} {dim}" if marker else style)
        if not piece.plain:  # an empty piece still gets a visible box
            piece.append("∅", style=f"{style} {dim}")
        size = cell_len(piece.plain)
        if width is not None and column and column + size > width:
            text.append("\n")
            column = 0
        text.append_text(piece)
        column += size
        breaks = newlines(cell)
        if breaks:
            text.append("\n" * breaks)
            column = 0
    return text


def rich_legend(view: ConversationView) -> Any:
    """The legend: a swatch, index, role and token count per message, then the styles."""
    from rich.text import Text

    legend = Text()
    for i, role in view.legend:
        bg, _, strong = colors(i)
        legend.append("  ", style=f"on {strong}")
        legend.append(f" {i} {role} ({view.tokens_of(i)})  ", style="bold" if i >= 0 else "")
    key = Text("key: ")
    key.append(" content ", style="#111827 on #dbeafe")
    key.append(" ")
    key.append(" template text ", style="italic #4b5563 on #dbeafe")
    key.append(" ")
    key.append(" special ", style="bold #ffffff on #1d4ed8")
    key.append(" ")
    key.append(" control token from content ", style="bold #ffffff on #ea580c")
    key.append(" ")
    key.append(" trained ", style="underline #111827 on #dbeafe")
    key.append(" ")
    key.append(" first difference ", style="bold #fef08a on #b91c1c")
    key.append("   · space  → tab  ↵ newline  <0xNN> part of a split character", style="#6b7280")
    return Text("\n").join([legend, key])


def rich_renderable(view: ConversationView, width: Optional[int] = None) -> Any:
    """Everything about one conversation for ``Console.print``: a rule, the legend, the notes
    (mask, comparison) and the token stream (broken between tokens at ``width`` columns)."""
    from rich.console import Group
    from rich.rule import Rule
    from rich.text import Text

    title = f"conversation {view.index}"
    if view.error is not None:
        return Group(Rule(title + ": refused", style="red"), Text(view.error, style="red"))
    items: list[Any] = [Rule(f"{title} · {len(view.cells)} tokens", style="#6b7280"), rich_legend(view)]
    if view.mask_note:
        items.append(Text(view.mask_note, style="#15803d" if view.has_mask else "bold #b45309"))
    if view.compare_error:
        items.append(Text(view.compare_error, style="bold #b45309"))
    if view.comparison is not None:
        items.append(Text(view.comparison.summary(), style="bold #15803d" if view.comparison.identical else "bold #b91c1c"))
    items.append(Text(""))
    tokens = rich_tokens(view, width)
    if view.comparison is not None and view.comparison.first_diff is not None and view.comparison.first_diff >= len(view.cells):
        tokens.append(f" ≠ chatids ends here; {view.comparison.name} continues with {list(view.comparison.reference_context)} ", style="bold #fef08a on #b91c1c")
    items.append(tokens)
    return Group(*items)


def rich_console(**kwargs: Any) -> Any:
    """A ``rich`` console that writes colour even into a pipe (``less -R``); 24-bit colour
    where ``COLORTERM`` says so, else 256 colours."""
    import os

    require_rich()
    from rich.console import Console

    truecolor = os.environ.get("COLORTERM", "").lower() in ("truecolor", "24bit")
    kwargs.setdefault("force_terminal", True)
    kwargs.setdefault("color_system", "truecolor" if truecolor else "256")
    return Console(**kwargs)


# --- HTML ------------------------------------------------------------------------------------


def _e(value: Any) -> str:
    """HTML-escape any value, quotes included (safe in text and in attribute values)."""
    return html.escape(str(value), quote=True)


def _message_class(message: int) -> str:
    return "mt" if message < 0 else f"m{message % len(PALETTE)}"


def html_cell(cell: TokenCell, conversation: int = 0) -> str:
    """One token of conversation ``conversation`` as ``<span class="tok ...">`` with ``data-id``, ``data-message``, ``data-pos``,
    its piece (whitespace markers, split bytes) and its id, followed by its line breaks."""
    classes = ["tok", _message_class(cell.message), "template" if cell.template else "content"]
    if cell.special:
        classes.append("special")
    if cell.injected:
        classes.append("injected")
    if cell.trained is not None:
        classes.append("trained" if cell.trained else "untrained")
    if cell.split is not None or any(isinstance(p, int) for p in cell.parts):
        classes.append("partial")
    if cell.differs:
        classes.append("first-diff")
    inner: list[str] = []
    for part in cell.parts:
        if isinstance(part, int):
            inner.append(f'<span class="byte">&lt;0x{part:02X}&gt;</span>')
            continue
        for run, marker in visible_runs(part):
            inner.append(f'<span class="ws">{_e(run)}</span>' if marker else _e(run))
    if not inner:
        inner.append('<span class="ws">∅</span>')
    anchor = f' id="conv-{conversation}-first-diff"' if cell.differs else ""
    role = "" if cell.role is None else f' data-role="{_e(cell.role)}"'
    return (
        f'<span class="{" ".join(classes)}" data-id="{cell.id}" data-message="{cell.message}" data-pos="{cell.position}"'
        f'{role}{anchor} title="{_e(describe(cell))}"><span class="txt">{"".join(inner)}</span>'
        f'<span class="tid">{cell.id}</span></span>' + "<br>" * newlines(cell)
    )


def html_conversation(view: ConversationView, heading: Optional[str] = None) -> str:
    """One ``<section class="conversation">``: heading, legend, notes and the tokens."""
    title = heading or f"Conversation {view.index}"
    out = [f'<section class="conversation" id="conv-{view.index}" data-conversation="{view.index}" data-tokens="{len(view.cells)}">']
    if view.error is not None:
        out.append(f'<h2>{_e(title)} <span class="meta">refused</span></h2>')
        out.append(f'<p class="note refused">chatids refuses this conversation: {_e(view.error)}</p></section>')
        return "\n".join(out)
    opts = ", ".join(f"{k}={v}" for k, v in view.options.items())
    out.append(f'<h2>{_e(title)} <span class="meta">{len(view.cells)} tokens · {_e(opts)}</span></h2>')
    out.append('<ul class="legend">')
    for i, role in view.legend:
        out.append(
            f'<li class="{_message_class(i)}" data-message="{i}"><span class="swatch"></span>'
            f'<b>{i}</b> {_e(role)} <span class="count">{view.tokens_of(i)} tokens</span></li>'
        )
    out.append("</ul>")
    if view.mask_note:
        out.append(f'<p class="note {"mask" if view.has_mask else "no-mask"}">{_e(view.mask_note)}</p>')
    if view.compare_error:
        out.append(f'<p class="note compare-error">{_e(view.compare_error)}</p>')
    if view.comparison is not None:
        c = view.comparison
        if c.identical:
            out.append(f'<p class="note compare identical">✓ {_e(c.summary())}</p>')
        else:
            link = f' <a href="#conv-{view.index}-first-diff">go to it</a>' if c.first_diff is not None and c.first_diff < len(view.cells) else ""
            out.append(f'<p class="note compare differs">≠ {_e(c.summary())}{link}</p>')
    out.append('<div class="tokens">')
    out.append("".join(html_cell(cell, view.index) for cell in view.cells))
    end = view.comparison
    if end is not None and end.first_diff is not None and end.first_diff >= len(view.cells):
        out.append(
            f'<span class="first-diff missing" id="conv-{view.index}-first-diff">≠ chatids ends here; {_e(end.name)} continues with '
            f"{_e(list(end.reference_context))} {_e(repr(end.reference_context_text))}</span>"
        )
    out.append("</div></section>")
    return "\n".join(out)


CSS = """
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#111827;background:#f8fafc}
header{padding:18px 28px 10px;background:#fff;border-bottom:1px solid #e5e7eb}
header h1{margin:0 0 4px;font-size:20px}
header p{margin:2px 0;color:#4b5563}
main{padding:8px 28px 40px}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
.key{display:flex;flex-wrap:wrap;gap:10px;align-items:center;margin:10px 0 4px;font-size:12.5px;color:#374151}
.key .key-tok{cursor:default}
.toggle{display:inline-block;font-size:12px;color:#374151;border:1px solid #d1d5db;border-radius:5px;padding:1px 8px;margin:4px 0;cursor:pointer;user-select:none;background:#f9fafb}
nav{margin:10px 0 0;font-size:13px}
nav a{margin-right:10px}
.conversation{margin:22px 0;background:#fff;border:1px solid #e5e7eb;border-radius:10px;padding:14px 18px 18px;box-shadow:0 1px 2px rgba(0,0,0,.04)}
.conversation h2{margin:0 0 8px;font-size:16px}
.meta{font-weight:400;color:#6b7280;font-size:13px}
.legend{list-style:none;padding:0;margin:0 0 8px;display:flex;flex-wrap:wrap;gap:6px 16px;font-size:13px}
.legend li{display:flex;align-items:center;gap:5px}
.legend .swatch{display:inline-block;width:14px;height:14px;border-radius:3px;background:var(--bg);border:2px solid var(--s)}
.legend .count{color:#6b7280}
.note{margin:4px 0;font-size:13px}
.note.mask{color:#15803d}
.note.no-mask,.note.compare-error{color:#b45309;font-weight:600}
.note.compare.identical{color:#15803d;font-weight:600}
.note.compare.differs{color:#b91c1c;font-weight:600}
.note.refused{color:#b91c1c}
.tokens{margin-top:10px;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:13px;line-height:1;padding:10px 4px 6px;border-top:1px solid #f1f5f9}
:is(.tok,.key-tok){display:inline-flex;flex-direction:column;align-items:center;vertical-align:top;margin:0 2px 9px 0;padding:2px 3px 1px;min-width:12px;
  background:var(--bg);border:1px solid var(--b);border-radius:4px;white-space:pre;color:#111827;position:relative}
:is(.tok,.key-tok) .txt{line-height:1.35}
:is(.tok,.key-tok) .tid{font-size:9px;line-height:1.1;color:#6b7280;margin-top:1px}
#ids-toggle:not(:checked) ~ main :is(.tok,.key-tok) .tid{display:none}
:is(.tok,.key-tok).template{border-style:dashed;color:#4b5563;font-style:italic}
:is(.tok,.key-tok).special{background:var(--s);border:1px solid var(--s);color:#fff;font-weight:700;font-style:normal}
:is(.tok,.key-tok).special .tid{color:#e5e7eb}
:is(.tok,.key-tok).injected{background:repeating-linear-gradient(135deg,#fed7aa 0 5px,#fdba74 5px 10px);color:#7c2d12;border:2px solid #ea580c}
:is(.tok,.key-tok).injected .tid{color:#7c2d12}
:is(.tok,.key-tok).trained{box-shadow:0 3px 0 0 #16a34a}
:is(.tok,.key-tok).first-diff{outline:3px solid #dc2626;outline-offset:2px;z-index:1}
:is(.tok,.key-tok).first-diff::before{content:"≠";position:absolute;top:-11px;left:-7px;background:#dc2626;color:#fff;font:700 10px/14px system-ui,sans-serif;
  padding:0 4px;border-radius:7px}
.first-diff.missing{display:inline-block;color:#fff;background:#dc2626;padding:2px 6px;border-radius:4px;font-weight:700}
.ws{color:#7b8494;font-style:normal}
:is(.tok,.key-tok).special .ws{color:#cbd5e1}
.byte{color:#b45309;font-size:.82em}
:is(.tok,.key-tok).special .byte{color:#fde68a}
.mt{--bg:%s;--b:%s;--s:%s}
""" % (OUTSIDE[0], "#9ca3af", OUTSIDE[2]) + "".join(
    f".m{i}{{--bg:{bg};--b:{strong}88;--s:{strong}}}\n" for i, (bg, _, strong) in enumerate(PALETTE)
)


def _key_html() -> str:
    return (
        '<div class="key"><span>key:</span>'
        '<span class="key-tok m0 content"><span class="txt">content</span></span>'
        '<span class="key-tok m0 template"><span class="txt">template text</span></span>'
        '<span class="key-tok m0 special template"><span class="txt">special token</span></span>'
        '<span class="key-tok m0 special injected"><span class="txt">control token from content</span></span>'
        '<span class="key-tok m0 content trained"><span class="txt">trained (loss)</span></span>'
        '<span class="key-tok m0 content first-diff" style="margin-left:6px"><span class="txt">first difference</span></span>'
        '<span><code>·</code> space <code>→</code> tab <code>↵</code> newline <code>&lt;0xE2&gt;</code> byte of a split character</span>'
        "</div>"
    )


def html_page(
    views: Sequence[ConversationView],
    *,
    title: str = "chatids: a picture of the prompt",
    subtitle: Sequence[str] = (),
    headings: Optional[Sequence[str]] = None,
) -> str:
    """A self-contained HTML page (inline CSS, no script, no external asset) drawing every view,
    one section with a heading per conversation; ``subtitle`` lines go under the title."""
    sections = [html_conversation(v, None if headings is None else headings[k]) for k, v in enumerate(views)]
    nav = ""
    if len(views) > 1:
        nav = "<nav>conversations: " + "".join(f'<a href="#conv-{v.index}">{v.index}</a>' for v in views) + "</nav>"
    lines = "".join(f"<p>{_e(line)}</p>" for line in subtitle)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head>\n<body>\n"
        f'<input type="checkbox" id="ids-toggle" checked hidden>'
        f"<header><h1>{_e(title)}</h1>{lines}{_key_html()}"
        '<label class="toggle" for="ids-toggle">show / hide ids</label>'
        f"{nav}</header>\n<main>\n" + "\n".join(sections) + "\n</main>\n</body></html>\n"
    )
