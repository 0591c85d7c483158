"""``chatids render --color / --html / --compare-transformers``: the picture of the prompt.

Every expectation comes from a reference at test time: ids, message indices and the mask from
``Encoder.encode``/``encode_detailed`` (themselves tested against transformers elsewhere), the
prompt text from ``Encoder.render`` and transformers' ``apply_chat_template(tokenize=False)``,
decoded text from transformers' tokenizer backend, and the first difference from transformers'
``apply_chat_template(tokenize=True)`` with a deliberately changed template.
"""

from __future__ import annotations

import datetime
import functools
import io
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Optional

import pytest

import support
import chatids
from chatids import _render_view as rv
from chatids._cli import main

LLAMA = "llama-3.1-8b-instruct"
DATE = {"date_string": support.FIXED_DATE}

#: A conversation with every thing the picture shows: three roles, line breaks, runs of spaces,
#: a tab, markup that must stay text, characters byte-level BPE splits, a typed control token.
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse.\nAnswer in one line."},
    {"role": "user", "content": "Is <script>window.pwned=1</script> safe? € 日本 🤖\tok <|eot_id|>"},
    {"role": "assistant", "content": "No.\n\nEscape it:  &lt;script&gt; 😀"},
]
#: Markup meant to break out of text and of attribute values (roles pass through Llama 3.1).
HOSTILE: list[dict[str, Any]] = [
    {"role": 'x"><img src=x onerror="window.pwned=4">', "content": "<script>window.pwned=1</script>"},
    {"role": "user", "content": '"><script>window.pwned=2</script><img src=x onerror=window.pwned=3>'},
    {"role": "assistant", "content": "</span></div><b onclick='window.pwned=5'>bold?</b>&amp;"},
]


@pytest.fixture(scope="module")
def llama() -> chatids.Encoder:
    return chatids.Encoder.from_pretrained(support.require_model_path(LLAMA))


@pytest.fixture(scope="module")
def llama_tok() -> Any:
    from transformers import AutoTokenizer

    support.freeze_transformers_clock()
    return AutoTokenizer.from_pretrained(str(support.require_model_path(LLAMA)))


@functools.lru_cache(maxsize=None)
def _encoder(name: str) -> chatids.Encoder:
    return chatids.Encoder.from_pretrained(support.require_model_path(name))


@functools.lru_cache(maxsize=None)
def _tokenizer(name: str) -> Any:
    from transformers import AutoTokenizer

    support.freeze_transformers_clock()
    return AutoTokenizer.from_pretrained(str(support.require_model_path(name)))


def _kwargs(name: str) -> dict[str, Any]:
    return support.template_kwargs(support.MODELS[name][0])


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text of each ``.tok .txt``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, Optional[str]]]] = []
        self.tokens: list[dict[str, Optional[str]]] = []
        self.texts: list[str] = []
        self._stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, Optional[str]]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        classes = (a.get("class") or "").split()
        if tag == "span" and "tok" in classes:
            self.tokens.append(a)
            self.texts.append("")
        if tag != "br":
            self._stack.append("txt" if "txt" in classes else tag)

    def handle_endtag(self, tag: str) -> None:
        if self._stack:
            self._stack.pop()

    def handle_data(self, data: str) -> None:
        if "txt" in self._stack and self.texts:
            self.texts[-1] += data


def _parse(page: str) -> _Tags:
    p = _Tags()
    p.feed(page)
    return p


def _classes(token: dict[str, Optional[str]]) -> set[str]:
    return set((token.get("class") or "").split())


# --- cells agree with the encoder ------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "mistral-small-24b-instruct-2501", "llama-2-7b-chat"],
)
def test_cells_agree_with_encode(name: str) -> None:
    enc = _encoder(name)
    kw = _kwargs(name)
    messages = [m for m in MESSAGES if m["role"] != "system"] if support.MODELS[name][0] in support.ALTERNATING else MESSAGES
    view = rv.build_view(enc, messages, template_kwargs=kw)
    assert view.error is None, view.error
    ids = enc.encode(messages, **kw).tolist()
    detailed = enc.encode_detailed(messages, return_assistant_mask=True, **kw)
    assert [c.id for c in view.cells] == ids
    assert [c.position for c in view.cells] == list(range(len(ids)))
    assert [c.message for c in view.cells] == detailed.message_indices.tolist()
    assert [c.from_content for c in view.cells] == detailed.from_content.astype(bool).tolist()
    assert [c.trained for c in view.cells] == detailed.assistant_mask.astype(bool).tolist()
    assert view.has_mask and f"{int(detailed.assistant_mask.sum())} of {len(ids)} tokens trained" in (view.mask_note or "")
    for c in view.cells:
        assert c.role == (messages[c.message]["role"] if c.message >= 0 else None)
    control = {i for _, i in enc.control_tokens}
    assert all(c.special for c in view.cells if c.id in control)
    # Sanitizing on: no special id comes out of content.
    assert not any(c.injected for c in view.cells)
    # The legend names every message and template text outside them.
    assert [i for i, _ in view.legend if i >= 0] == list(range(len(messages)))
    assert ((-1, "template") in view.legend) == any(c.message < 0 for c in view.cells)


@pytest.mark.parametrize(
    "name", ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "gemma-3-it", "mistral-small-24b-instruct-2501", "deepseek-v3"]
)
def test_pieces_are_the_prompt(name: str) -> None:
    """The tokens' bytes, joined, are the prompt transformers renders (byte-level BPE and
    Gemma's SentencePiece, which prepends nothing), and what the tokenizer decodes."""
    tok = _tokenizer(name)
    enc = _encoder(name)
    kw = _kwargs(name)
    messages = [m for m in MESSAGES if m["role"] != "system"] if support.MODELS[name][0] in support.ALTERNATING else MESSAGES
    view = rv.build_view(enc, messages, template_kwargs=kw, now=datetime.datetime(*support.FROZEN_NOW))
    joined = b"".join(c.raw for c in view.cells).decode("utf-8")
    assert joined == tok.apply_chat_template(messages, tokenize=False, **kw)
    assert joined == tok.backend_tokenizer.decode(view.ids, skip_special_tokens=False)
    # No replacement characters: split characters are shown as their bytes instead.
    assert "\ufffd" not in "".join(c.text for c in view.cells)
    for c in view.cells:
        rebuilt = b"".join(p.encode("utf-8") if isinstance(p, str) else bytes([p]) for p in c.parts)
        assert rebuilt == c.raw


def test_split_characters_show_bytes(llama: chatids.Encoder) -> None:
    """Llama 3's BPE splits 🤖 (F0 9F A4 96) over tokens: each shows its bytes, and the
    tokens holding them, decoded together, give the character back."""
    view = rv.build_view(llama, MESSAGES, template_kwargs=DATE)
    robot = [c for c in view.cells if c.split == "🤖"]
    assert len(robot) >= 2, [c.text for c in view.cells]
    assert "<0xF0>" in robot[0].text and "<0x96>" in robot[-1].text
    assert "🤖" in b"".join(c.raw for c in robot).decode("utf-8")
    assert all(isinstance(p, int) for c in robot[1:] for p in c.parts)
    # The pure splitter on its own: a character over three tokens, and invalid bytes.
    parts = rv.split_utf8([b"a\xe2", b"\x82", b"\xacb\xff"])
    assert parts == [(("a", 0xE2), "€"), ((0x82,), "€"), ((0xAC, "b", 0xFF), "€")]


def test_byte_fallback_and_sentencepiece_spaces() -> None:
    """Llama 2 (SentencePiece, byte fallback): ``<0xF0>`` pieces are bytes, ``▁`` a space;
    joined they are what the tokenizer decodes (which shows the ▁ the pre-tokenizer prepends)."""
    name = "llama-2-7b-chat"
    tok = _tokenizer(name)
    view = rv.build_view(_encoder(name), MESSAGES)
    assert view.error is None, view.error
    assert b"".join(c.raw for c in view.cells).decode("utf-8") == tok.backend_tokenizer.decode(view.ids, skip_special_tokens=False)
    assert [c.text for c in view.cells if c.split == "🤖"] == ["<0xF0>", "<0x9F>", "<0xA4>", "<0x96>"]


def test_corpus_sample_is_faithful(llama: chatids.Encoder) -> None:
    """On real conversations, the joined tokens are the rendered prompt (a fixed sample)."""
    files = support.corpus_files()
    support.require_corpus(files[0] if files else "<no corpus>")
    checked = 0
    texts = rv.TokenTexts.from_encoder(llama)
    for file_name in files[:4]:
        for row in support.corpus_rows(file_name)[:6]:
            messages, tools = row["messages"], row.get("tools")
            view = rv.build_view(llama, messages, tools=tools, template_kwargs=DATE, texts=texts)
            if view.error is not None:
                continue
            extra = {} if tools is None else {"tools": tools}
            assert b"".join(c.raw for c in view.cells).decode("utf-8") == llama.render(messages, **DATE, **extra)
            assert view.ids == llama.encode(messages, **DATE, **extra).tolist()
            checked += 1
    assert checked >= 10


# --- HTML ------------------------------------------------------------------------------------


def test_html_escapes_content_and_roles(llama: chatids.Encoder) -> None:
    view = rv.build_view(llama, HOSTILE, template_kwargs=DATE)
    assert view.error is None, view.error
    page = rv.html_page([view], title="<script>t</script>", subtitle=['<img src=x onerror="x">'])
    parsed = _parse(page)
    allowed = {"html", "head", "meta", "title", "style", "body", "input", "header", "h1", "p", "div", "span", "code", "label",
               "nav", "a", "main", "section", "h2", "ul", "li", "b", "br"}
    assert {tag for tag, _ in parsed.tags} <= allowed
    assert not [(t, a) for t, a in parsed.tags if t == "b" and a], "content made a tag"
    assert not any(k.startswith("on") for _, attrs in parsed.tags for k in attrs), "an event handler attribute got in"
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "<title>&lt;script&gt;t&lt;/script&gt;</title>" in page
    assert "<p>&lt;img src=x onerror=&quot;x&quot;&gt;</p>" in page
    # The role survives as text, in the legend and in data-role, exactly.
    roles = {a.get("data-role") for a in parsed.tokens}
    assert HOSTILE[0]["role"] in roles
    # Each token's visible text (markers aside) is its piece, one span per id.
    assert len(parsed.tokens) == len(view.cells)
    assert [int(a["data-id"] or -1) for a in parsed.tokens] == view.ids
    assert [int(a["data-message"] or 99) for a in parsed.tokens] == [c.message for c in view.cells]
    shown = "".join(parsed.texts)
    assert "<script>window.pwned=1</script>" in shown
    assert "</span></div><b·onclick='window.pwned=5'>bold?</b>&amp;" in shown


def test_whitespace_markers() -> None:
    assert rv.visible_runs("a b\tc\n\u00a0\u200b") == [("a", False), ("·", True), ("b", False), ("→", True), ("c", False), ("↵⍽<U+200B>", True)]
    cell = rv.TokenCell(0, 271, ("\n\n",), b"\n\n", 0, "system", False, False, token="ĊĊ")
    out = rv.html_cell(cell)
    assert '<span class="ws">↵↵</span>' in out and out.endswith("</span><br><br>")
    cell = rv.TokenCell(1, 220, ("  \t",), b"  \t", 1, "user", True, False)
    assert '<span class="ws">··→</span>' in rv.html_cell(cell)
    assert rv.rich_tokens(rv.ConversationView(0, [cell])).plain == "··→"


def test_html_whitespace_from_a_real_prompt(llama: chatids.Encoder) -> None:
    view = rv.build_view(llama, MESSAGES, template_kwargs=DATE)
    page = rv.html_conversation(view)
    parsed = _parse(page)
    # Every line break of the prompt is one ↵ and one <br>; every space one ·; the tab one →.
    prompt = llama.render(MESSAGES, **DATE)
    shown = "".join(parsed.texts)
    assert shown.count("↵") == prompt.count("\n") == page.count("<br>")
    assert shown.count("→") == prompt.count("\t") == 1
    assert shown.count("·") == prompt.count(" ")
    assert shown.replace("↵", "\n").replace("·", " ").replace("→", "\t") == "".join(c.text for c in view.cells)


def test_mask_classes_equal_the_assistant_mask(llama: chatids.Encoder) -> None:
    for train_on in ("all_assistant", "last_assistant", "all"):
        convo = MESSAGES + [{"role": "user", "content": "Again?"}, {"role": "assistant", "content": "Yes."}]
        view = rv.build_view(llama, convo, train_on=train_on, template_kwargs=DATE)
        mask = llama.encode_detailed(convo, return_assistant_mask=True, train_on=train_on, **DATE).assistant_mask.tolist()
        tokens = _parse(rv.html_conversation(view)).tokens
        assert [int("trained" in _classes(t)) for t in tokens] == mask
        assert [int("untrained" in _classes(t)) for t in tokens] == [1 - m for m in mask]


def test_no_mask_is_said(llama: chatids.Encoder) -> None:
    """A prompt-only conversation has nothing to train on: the page says so, no token claims
    to be trained or not."""
    view = rv.build_view(llama, MESSAGES[:2], add_generation_prompt=True, template_kwargs=DATE)
    assert view.error is None and not view.has_mask
    assert view.mask_note is not None and view.mask_note.startswith("no assistant mask")
    page = rv.html_conversation(view)
    assert 'class="note no-mask"' in page and "nothing to train on" in page
    assert not any({"trained", "untrained"} & _classes(t) for t in _parse(page).tokens)
    assert view.ids == llama.encode(MESSAGES[:2], add_generation_prompt=True, **DATE).tolist()


def test_control_token_from_content_is_flagged(llama: chatids.Encoder) -> None:
    """With sanitizing off, the <|eot_id|> the user typed is a real control id from content."""
    view = rv.build_view(llama, MESSAGES, sanitize_control_tokens=False, template_kwargs=DATE)
    detailed = llama.encode_detailed(MESSAGES, sanitize_control_tokens=False, **DATE)
    control = {i for _, i in llama.control_tokens}
    expected = [int(t) in control and bool(c) for t, c in zip(detailed.ids, detailed.from_content)]
    assert [c.injected for c in view.cells] == expected and any(expected)
    tokens = _parse(rv.html_conversation(view)).tokens
    assert [("injected" in _classes(t)) for t in tokens] == expected


# --- comparing with transformers -------------------------------------------------------------


def _tweaked(template: str) -> str:
    """Llama 3.1's template with one character of its default system header changed."""
    assert "December 2023" in template
    return template.replace("December 2023", "December 2024")


def test_compare_identical(llama: chatids.Encoder, llama_tok: Any) -> None:
    view = rv.build_view(llama, MESSAGES, template_kwargs=DATE, reference=llama_tok)
    ref = llama_tok.apply_chat_template(MESSAGES, tokenize=True, return_dict=False, sanitize_control_tokens=True, **DATE)
    assert view.comparison is not None and view.comparison.identical
    assert view.comparison.summary() == f"identical to transformers (apply_chat_template, {len(ref)} tokens)"
    assert not any(c.differs for c in view.cells)
    assert "first-diff" not in rv.html_conversation(view)


def test_compare_marks_exactly_the_first_difference(llama: chatids.Encoder, llama_tok: Any) -> None:
    template = _tweaked(llama_tok.chat_template)
    ref = rv.transformers_ids(llama_tok, MESSAGES, chat_template=template, template_kwargs=DATE)
    ours = llama.encode(MESSAGES, **DATE).tolist()
    expected = next(i for i, (a, b) in enumerate(zip(ours, ref)) if a != b)
    view = rv.build_view(llama, MESSAGES, template_kwargs=DATE, reference=llama_tok, chat_template=template)
    c = view.comparison
    assert c is not None and c.first_diff == expected
    assert (c.ours_id, c.reference_id) == (ours[expected], ref[expected])
    assert [cell.position for cell in view.cells if cell.differs] == [expected]
    page = rv.html_conversation(view)
    diffs = [t for t in _parse(page).tokens if "first-diff" in _classes(t)]
    assert [int(t["data-pos"] or -1) for t in diffs] == [expected]
    assert f"first difference at token {expected}" in page


def test_compare_reference_longer(llama: chatids.Encoder, llama_tok: Any) -> None:
    """transformers writes more tokens after chatids' last: the end is marked, no token is."""
    template = llama_tok.chat_template + "EXTRA"
    ref = rv.transformers_ids(llama_tok, MESSAGES, chat_template=template, template_kwargs=DATE)
    view = rv.build_view(llama, MESSAGES, template_kwargs=DATE, reference_ids=ref)
    assert ref[: len(view.cells)] == view.ids and len(ref) > len(view.cells)
    assert view.comparison is not None and view.comparison.first_diff == len(view.cells)
    assert not any(c.differs for c in view.cells)
    page = rv.html_conversation(view)
    assert 'class="first-diff missing"' in page
    assert rv.first_difference([1, 2], [1, 2]) is None and rv.first_difference([1, 2, 3], [1, 2]) == 2


# --- the command line ------------------------------------------------------------------------


@pytest.fixture()
def jsonl(tmp_path: Path) -> str:
    path = tmp_path / "chats.jsonl"
    rows = [{"messages": MESSAGES}, {"messages": HOSTILE}, {"messages": [{"role": None, "content": "x"}]}, {"messages": MESSAGES[:2]}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return str(path)


def _model() -> str:
    return str(support.require_model_path(LLAMA))


def test_cli_html_every_conversation(jsonl: str, tmp_path: Path, llama: chatids.Encoder, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "page.html"
    assert main(["render", jsonl, "--model", _model(), "--date-string", support.FIXED_DATE, "--html", str(out)]) == 0
    assert f"wrote {out} (4 conversations" in capsys.readouterr().out
    page = out.read_text(encoding="utf-8")
    for i in range(4):
        assert f'<section class="conversation" id="conv-{i}"' in page
        assert f"<h2>Conversation {i} " in page
    assert "chatids refuses this conversation" in page  # the message without a role
    sections = re.split(r'<section class="conversation"', page)[1:]
    for i, rows in ((0, MESSAGES), (1, HOSTILE), (3, MESSAGES[:2])):
        tokens = _parse(sections[i]).tokens
        assert [int(t["data-id"] or -1) for t in tokens] == llama.encode(rows, **DATE).tolist()
    assert "<script" not in page.lower()


def test_cli_compare_identical(jsonl: str, llama_tok: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", jsonl, "--model", _model(), "--date-string", support.FIXED_DATE, "--compare-transformers", "--show", "0,1"]) == 0
    out = capsys.readouterr().out
    for rows in (MESSAGES, HOSTILE):
        n = len(llama_tok.apply_chat_template(rows, tokenize=True, return_dict=False, sanitize_control_tokens=True, **DATE))
        assert f"identical to transformers (apply_chat_template, {n} tokens)" in out
    assert "compared with transformers: 2 conversations, 0 differ" in out
    assert "--- conversation 3" not in out  # --show


def test_cli_compare_differs(jsonl: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llama: chatids.Encoder) -> None:
    """transformers' tokenizer, with a changed template, as the reference: exit 1, and the
    page marks exactly the first differing id of each conversation."""
    from transformers import AutoTokenizer

    import chatids._verify

    tweaked = AutoTokenizer.from_pretrained(_model())
    tweaked.chat_template = _tweaked(tweaked.chat_template)
    monkeypatch.setattr(chatids._verify, "_transformers_tokenizer", lambda model: tweaked)
    out = tmp_path / "diff.html"
    argv = ["render", jsonl, "--model", _model(), "--date-string", support.FIXED_DATE, "--compare-transformers", "--html", str(out), "--show", "0"]
    assert main(argv) == 1
    ref = tweaked.apply_chat_template(MESSAGES, tokenize=True, return_dict=False, sanitize_control_tokens=True, **DATE)
    ours = llama.encode(MESSAGES, **DATE).tolist()
    expected = next(i for i, (a, b) in enumerate(zip(ours, ref)) if a != b)
    tokens = _parse(out.read_text(encoding="utf-8")).tokens
    assert [int(t["data-pos"] or -1) for t in tokens if "first-diff" in _classes(t)] == [expected]


def test_cli_color(jsonl: str, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("rich")
    assert main(["render", jsonl, "--model", _model(), "--date-string", support.FIXED_DATE, "--color", "--show", "0,3"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" in out  # colour even into a pipe
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert "conversation 0 · " in plain and "↵" in plain and "·" in plain and "→ok" in plain
    assert "<0xF0>" in plain
    assert "assistant mask: " in plain and "no assistant mask for this conversation" in plain


def test_rich_styles(llama: chatids.Encoder) -> None:
    """Underlined characters are exactly the trained tokens' pieces; no token is cut by a
    line break when a width is given."""
    pytest.importorskip("rich")
    view = rv.build_view(llama, MESSAGES, template_kwargs=DATE)
    text = rv.rich_tokens(view)
    underlined = [False] * len(text.plain)
    for span in text.spans:
        if "underline" in str(span.style):
            underlined[span.start : span.end] = [True] * (span.end - span.start)
    got = "".join(ch for ch, u in zip(text.plain, underlined) if u)
    marked = "".join(piece for c in view.cells if c.trained for piece, _ in rv.visible_runs(c.text))
    assert got == marked
    narrow = rv.rich_tokens(view, width=24).plain
    assert "<|start_header_id|>" in narrow.replace("↵\n", "")  # a token is never split
    from rich.console import Console

    sink = io.StringIO()
    console = Console(file=sink, width=60, force_terminal=True, color_system="truecolor")
    console.print(rv.rich_renderable(view, console.width))
    assert "identical" not in sink.getvalue()  # no comparison asked


def test_color_without_rich(jsonl: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "rich", None)
    assert main(["render", jsonl, "--model", _model(), "--color"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'chatids[cli]'" in err


def test_cli_plain_unchanged(jsonl: str, llama: chatids.Encoder, capsys: pytest.CaptureFixture[str]) -> None:
    """No new flag: the repr lines of every conversation, as before."""
    assert main(["render", jsonl, "--model", _model(), "--date-string", support.FIXED_DATE]) == 0
    out = capsys.readouterr().out
    text = llama.render(MESSAGES, **DATE)
    expected = "\n".join(repr(line) for line in text.splitlines(keepends=True))
    assert f"--- conversation 0 ---\n{expected}\n--- conversation 1 ---" in out
    assert "--- conversation 2: refused:" in out and "<span" not in out and "\x1b[" not in out
