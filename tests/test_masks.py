"""Loss masks against transformers' ``return_assistant_tokens_mask=True`` (issue 5).

The reference is each checkpoint's own chat template with every assistant *body* wrapped in
``{% generation %}...{% endgeneration %}`` (tests/mask_templates.py builds the copies from
``tok.chat_template`` at test time). transformers marks every token overlapping a generation
span; chatids' ``assistant_mask`` (``return_assistant_mask=True``) must be the same, token for
token, after the ids are equal (the wrapped template renders the same text).

* Native formats, on a deterministic corpus sample (``CHATIDS_CONFORMANCE=full``: every
  conversation): ``train_on="all_assistant"`` against ``assistant_masks``;
  ``train_on="last_assistant"`` against the last generation span alone; ``train: False`` on an
  assistant message against the spans without that message's; and all of it again with
  ``sanitize_control_tokens=True``. transformers refuses ``sanitize_control_tokens`` together
  with ``return_assistant_tokens_mask`` (``ValueError``), so that reference is rebuilt here
  from transformers' own pieces (:func:`reference`): its input marking, its renderer with the
  generation tracker, its marked-chat encoding with offsets; the ids are checked against
  ``apply_chat_template(sanitize_control_tokens=True)`` first.
* The generated edge cases (whitespace, Unicode, control tokens in content) on every format.
* ``encode_batch`` gives the same masks, flat, and ``labels`` follow them.
* The Jinja path, forced on every native checkpoint (and DeepSeek V3, gpt-oss): its
  bodies are derived heuristically (src/render/jinja.rs ``message_bodies``); agreement with the
  wrapped templates is counted, every difference must have a pinned reason
  (:func:`explain_generic_difference`); three chatids bugs it found are regression tests.
* The mistral-common route: ids equal ``encode_chat_completion``; the mask selects exactly each
  assistant message's tokens (content + ``</s>``), checked by decoding them (mistral-common has
  no mask API).

Counts per model (compared, rejected, mismatches, ...) are printed at the end of the session;
``CHATIDS_MASKS_REPORT=path.json`` writes them to a file.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pytest

import chatids
import mask_templates
import support
from edge_cases import PLAIN_TEXTS, control_texts, shapes

#: Native-format checkpoints: the ones a wrapped template exists for by the brief.
NATIVE = [name for name, (fmt, _) in support.MODELS.items() if fmt != "jinja"]
#: Checkpoints compared on the forced Jinja path: the natives, plus the generic-only ones
#: that tests/mask_templates.py wraps (DeepSeek V3).
GENERIC = NATIVE + [name for name, (fmt, _) in support.MODELS.items() if fmt == "jinja" and name in mask_templates.WRAPS]
#: Conversations per corpus file in sample mode (15 files: ~100 per model).
MASK_SAMPLE_PER_FILE = 7

#: Per model key: outcome -> count. Printed at the end of the session.
COUNTS: dict[str, Counter] = defaultdict(Counter)
#: Per model key: reason -> count (why conversations were rejected, which differences were documented).
REASONS: dict[str, Counter] = defaultdict(Counter)


# --- the session summary (conftest.py is shared, so this module registers its own reporter) ---


class _MaskReport:
    GROUPS = (
        ("native formats vs the wrapped templates", ""),
        ("edge cases, native formats", " (edge cases)"),
        ("Jinja path vs the wrapped templates", " [jinja]"),
        ("mistral-common route (masked runs vs encode_assistant_message)", " (mistral-common route)"),
    )

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config):
        if not COUNTS:
            return
        mode = "full" if support.full_conformance() else f"sample ({MASK_SAMPLE_PER_FILE}/file)"
        tr = terminalreporter
        tr.section(f"chatids loss masks vs transformers' {{% generation %}} masks ({mode})")
        suffixes = [suffix for _, suffix in self.GROUPS if suffix]
        for title, suffix in self.GROUPS:
            names = sorted(
                n for n in COUNTS
                if (n.endswith(suffix) if suffix else not any(n.endswith(x) for x in suffixes))
            )
            if not names:
                continue
            cols = sorted({c for n in names for c in COUNTS[n]} | {"mismatches"}, key=_column_order)
            widths = [max(len(c), 6) for c in cols]
            tr.write_line(f"-- {title}")
            tr.write_line(f"{'model':46s} " + " ".join(f"{c:>{w}s}" for c, w in zip(cols, widths)))
            for name in names:
                counts = COUNTS[name]
                tr.write_line(f"{name:46s} " + " ".join(f"{counts.get(c, 0):>{w}d}" for c, w in zip(cols, widths)))
            for name in names:
                counts = COUNTS[name]
                if counts.get("compared") and "mask_agrees" in counts:
                    rate = counts["mask_agrees"] / counts["compared"]
                    tr.write_line(f"  {name}: masks agree on {counts['mask_agrees']}/{counts['compared']} ({rate:.1%})")
        for name, reasons in sorted(REASONS.items()):
            for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:8]:
                tr.write_line(f"  {name}: {n}x {reason}")
        out = os.environ.get("CHATIDS_MASKS_REPORT")
        if out:
            with open(out, "w") as f:
                json.dump({"mode": mode, "counts": COUNTS, "reasons": REASONS}, f, indent=2)


_ORDER = ["conversations", "compared", "mask_agrees", "sanitized_marked", "last_assistant", "train_false",
          "rejected_by_template", "rejected_by_reference", "rejected_by_chatids", "no_assistant",
          "documented_difference", "provenance_lost", "sanitize_deviation_documented", "mismatches"]


def _column_order(c: str) -> tuple[int, str]:
    return (_ORDER.index(c) if c in _ORDER else len(_ORDER), c)


@pytest.fixture(scope="module", autouse=True)
def _mask_report(request):
    plugin = request.config.pluginmanager.get_plugin("chatids-mask-report")
    if plugin is None:
        request.config.pluginmanager.register(_MaskReport(), "chatids-mask-report")
    yield


# --- the corpus sample ---


@functools.lru_cache(maxsize=None)
def _file_rows(file_name: str) -> list[dict]:
    path, reason = support.data_dir()
    assert path is not None, reason
    return [json.loads(line) for line in open(path / file_name, encoding="utf-8")]


@functools.lru_cache(maxsize=None)
def mask_rows() -> list[tuple[str, list[dict]]]:
    """(label, messages) of the sample: MASK_SAMPLE_PER_FILE per corpus file, or every conversation."""
    out = []
    for file_name in support.corpus_files():
        rows = _file_rows(file_name)
        if support.full_conformance():
            picked = range(len(rows))
        else:
            rng = random.Random(f"chatids-masks:{file_name}")
            picked = sorted(rng.sample(range(len(rows)), min(MASK_SAMPLE_PER_FILE, len(rows))))
        out += [(f"{file_name}:{i}", rows[i]["messages"]) for i in picked]
    return out


def require_corpus() -> None:
    if not support.corpus_files():
        support.missing(f"conversation corpus not found: {support.data_dir()[1]}")


# --- the reference: transformers with the wrapped template ---


@functools.lru_cache(maxsize=None)
def wrapped(name: str) -> str:
    """The wrapped copy of checkpoint ``name``'s template (``name`` without a `` [jinja]`` suffix)."""
    return mask_templates.wrapped_template(name, support.load_model(name).tok.chat_template)


@dataclass
class Reference:
    """transformers' ids, the assistant mask, and one token mask per generation span."""

    ids: list[int]
    mask: list[int]
    spans: list[list[int]] = field(default_factory=list)
    #: The rendered text of each generation span.
    span_texts: list[str] = field(default_factory=list)


def _overlap_mask(offsets: list[tuple[int, int]], spans: list[tuple[int, int]]) -> list[int]:
    """transformers' rule, verbatim: every token overlapping a span (tokenization_utils_base)."""
    mask = [0] * len(offsets)
    span_idx = 0
    for i, (start, end) in enumerate(offsets):
        while span_idx < len(spans) and start >= spans[span_idx][1]:
            span_idx += 1
        if span_idx == len(spans):
            break
        if end > spans[span_idx][0]:
            mask[i] = 1
    return mask


def _encode_with_offsets(tok, text: str, marked: bool) -> tuple[list[int], list[tuple[int, int]]]:
    """The ids and character offsets transformers gets for a rendered chat.

    Plain: ``tok(text, add_special_tokens=False)``, as ``apply_chat_template`` calls it.
    Marked (``sanitize_control_tokens=True``): transformers' ``encode_marked_chat`` step by step
    (split at the markers; marked tokens as plain text; each later piece encoded after a "\\n"
    that is removed again), keeping each piece's offsets.
    """
    if not marked:
        out = tok(text, add_special_tokens=False)
        return list(out["input_ids"]), list(out.encodings[0].offsets)
    from transformers.utils.chat_template_utils import _get_control_token_patterns

    backend = tok.backend_tokenizer
    _, markers_re = _get_control_token_patterns(tuple(tok.added_tokens_encoder))
    newline_ids = tok.encode("\n", add_special_tokens=False)

    def encode(piece: str, as_text: bool) -> tuple[list[int], list[tuple[int, int]]]:
        if as_text:  # a marked control token, all of it caller text: every token spans the piece
            piece_ids = tok._encode_without_added_tokens(piece)
            return piece_ids, [(0, len(piece))] * len(piece_ids)
        enc = backend.encode(piece, add_special_tokens=False)
        return enc.ids, enc.offsets

    ids: list[int] = []
    offsets: list[tuple[int, int]] = []

    def add(piece: str, at: int, as_text: bool, first: bool) -> None:
        if not piece:
            return
        piece_ids, piece_offsets, shift = [], [], at
        if not first:  # after a "\n" that is removed again (transformers' _encode_chat_piece)
            piece_ids, piece_offsets = encode("\n" + piece, as_text)
            shift = at - 1
        if first or piece_ids[: len(newline_ids)] != newline_ids:
            piece_ids, piece_offsets = encode(piece, as_text)
            shift = at
        else:
            piece_ids, piece_offsets = piece_ids[len(newline_ids):], piece_offsets[len(newline_ids):]
        ids.extend(piece_ids)
        offsets.extend((max(s + shift, at), e + shift) for s, e in piece_offsets)

    pos, first = 0, True
    for match in markers_re.finditer(text):
        add(text[pos:match.start()], pos, False, first)
        first = False
        if match.group(1) is not None:
            add(match.group(1), match.start(1), True, False)
        pos = match.end()
    add(text[pos:], pos, False, first)
    return ids, offsets


def reference(model: support.Model, template: str, messages: list[dict], sanitize: bool) -> Reference:
    """transformers' masks with ``template`` (the wrapped copy), with one mask per generation span.

    ``sanitize=True`` marks the inputs as ``apply_chat_template(sanitize_control_tokens=True)``
    does (with the checkpoint's own template, which decides the control tokens).
    """
    from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template

    tok = model.tok
    kwargs = model.kwargs()
    conversations = [_normalize_chat_messages(messages)]
    tools = documents = None
    if sanitize:
        conversations, tools, documents, kwargs = tok._mark_chat_inputs(
            tok.chat_template, conversations, None, None, kwargs, True, False
        )
    rendered, indices = render_jinja_template(
        conversations=conversations,
        tools=tools,
        documents=documents,
        chat_template=template,
        return_assistant_tokens_mask=True,
        add_generation_prompt=False,
        **{**tok.special_tokens_map, **kwargs},
    )
    ids, offsets = _encode_with_offsets(tok, rendered[0], marked=sanitize)
    spans = indices[0]
    return Reference(
        ids,
        _overlap_mask(offsets, spans),
        [_overlap_mask(offsets, [s]) for s in spans],
        [rendered[0][a:b] for a, b in spans],
    )


def official_masks(model: support.Model, template: str, messages: list[dict], **kw: Any) -> dict:
    """``apply_chat_template(..., return_assistant_tokens_mask=True)`` itself."""
    return model.tok.apply_chat_template(
        messages,
        chat_template=template,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
        **model.kwargs(),
        **kw,
    )


# --- comparing ---


def _describe(model: support.Model, label: str, ids: list[int], ours: list[int], theirs: list[int], what: str) -> str:
    diffs = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    lines = [f"{model.name}: {what} differs for {label} at {len(diffs)} token(s):"]
    for i in diffs[:6]:
        tok = model.tok.convert_ids_to_tokens(ids[i])
        context = model.tok.decode(ids[max(0, i - 4):i + 3])
        lines.append(
            f"  token {i} id {ids[i]} {tok!r} (context {context!r}): chatids {ours[i]}, transformers {theirs[i]}"
        )
    return "\n".join(lines)


def _assistant_indices(messages: list[dict]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant"]


def _union(masks: list[list[int]], n: int) -> list[int]:
    out = [0] * n
    for m in masks:
        out = [a | b for a, b in zip(out, m)]
    return out


def _chatids(model: support.Model, messages: list[dict], sanitize: bool, train_on: str = "all_assistant"):
    return model.enc.encode(
        messages,
        sanitize_control_tokens=sanitize,
        return_assistant_mask=True,
        train_on=train_on,
        **model.ours_kwargs(),
    )


def documented_difference(model: support.Model, messages: list[dict], ids: list[int], ours: list[int], theirs: list[int]) -> Optional[str]:
    """The documented reason chatids' mask differs from the wrapped template's here, if any.

    None of the native formats has one on the corpus or the edge cases: the body rule and the
    straddling rule reproduce transformers' generation-span masks exactly (see the pinned
    cases in this module). Kept as the single place to add one, with a pinning test.
    """
    return None


def compare_conversation(
    model: support.Model, template: str, label: str, messages: list[dict], key: str, accepted: Optional[list] = None
) -> str:
    """Compare chatids' masks with the wrapped template's on one conversation; returns the outcome.

    Raises AssertionError on any difference that :func:`documented_difference` does not explain.
    Compared conversations are appended to ``accepted`` as (messages, ids, mask), for a batch check.
    """
    counts = COUNTS[key]
    try:
        official = official_masks(model, template, messages)
    except Exception as e:  # the template rejects the conversation (tested elsewhere that chatids does too)
        REASONS[key][f"template: {type(e).__name__}: {str(e)[:80]}"] += 1
        try:  # ... and so does the original: the wrapped copy must not be stricter
            model.tok.apply_chat_template(messages, tokenize=False, **model.kwargs())
        except Exception:
            return "rejected_by_template"
        raise AssertionError(f"{label}: the wrapped copy raises ({e}), the original template renders") from e
    try:
        plain = _chatids(model, messages, sanitize=False)
    except chatids.ChatTemplateError as e:
        reason = re.sub(r"^message \d+: ", "", str(e))
        if reason.startswith("nothing to train on"):
            assert not any(official["assistant_masks"]), f"{label}: chatids found nothing to train on, the wrapped template did"
            return "no_assistant"
        REASONS[key][f"chatids: {reason[:100]}"] += 1
        # The wrapped copy must not accept what the original rejects (or the count above lies).
        try:
            model.tok.apply_chat_template(messages, tokenize=False, **model.kwargs())
        except Exception as e:
            raise AssertionError(f"{label}: the original template raises ({e}), the wrapped copy renders") from e
        return "rejected_by_chatids"
    ids = list(official["input_ids"])
    ours_ids = plain.ids.tolist()
    if ours_ids != ids:
        same_text = model.tok.apply_chat_template(messages, tokenize=False, **model.kwargs()) == model.tok.apply_chat_template(
            messages, tokenize=False, chat_template=template, **model.kwargs()
        )
        raise AssertionError(
            f"{model.name}: ids differ for {label} ({'the wrapped template renders the same text' if same_text else 'THE WRAPPED TEMPLATE RENDERS DIFFERENT TEXT'}): "
            + support._first_difference(ours_ids, ids)
        )
    theirs = list(official["assistant_masks"])
    ours = plain.assistant_mask.tolist()
    outcome = "compared"
    if ours != theirs:
        reason = documented_difference(model, messages, ids, ours, theirs)
        if reason is None:
            counts["mismatches"] += 1
            raise AssertionError(_describe(model, label, ids, ours, theirs, "assistant_mask (train_on='all_assistant')"))
        REASONS[key][reason] += 1
        outcome = "documented_difference"

    # The same spans, one by one, from transformers' own pieces: their union is the official mask.
    ref = reference(model, template, messages, sanitize=False)
    assert ref.ids == ids and ref.mask == theirs, f"{label}: the rebuilt reference differs from apply_chat_template"
    assistants = _assistant_indices(messages)
    assert len(ref.spans) == len(assistants), (
        f"{label}: {len(ref.spans)} generation spans for {len(assistants)} assistant messages"
    )
    if outcome == "compared":
        _check_policies(model, label, messages, ids, ref, assistants, sanitize=False, key=key)
        if accepted is not None:
            accepted.append((messages, ids, theirs))

    # sanitize_control_tokens=True on both sides.
    if support.known_deviation(model.format, messages, sanitize=True) is not None:
        counts["sanitize_deviation_documented"] += 1
        return outcome
    from transformers.utils.chat_template_utils import _get_control_token_patterns, mark_control_tokens

    control_re, _ = _get_control_token_patterns(model.tok._get_control_tokens(model.tok.chat_template))
    if mark_control_tokens(messages, control_re) != messages:
        counts["sanitized_marked"] += 1
        sref = reference(model, template, messages, sanitize=True)
        expected = model.ref_ids(messages, sanitize=True)
        assert sref.ids == expected, f"{label}: the rebuilt sanitized reference differs from apply_chat_template"
    else:
        sref = ref
    sanitized = _chatids(model, messages, sanitize=True)
    s_ids = sanitized.ids.tolist()
    assert s_ids == sref.ids, f"{model.name}: sanitized ids differ for {label}: " + support._first_difference(s_ids, sref.ids)
    s_ours = sanitized.assistant_mask.tolist()
    if s_ours != sref.mask and documented_difference(model, messages, sref.ids, s_ours, sref.mask) is None:
        counts["mismatches"] += 1
        raise AssertionError(_describe(model, label, sref.ids, s_ours, sref.mask, "assistant_mask with sanitize_control_tokens=True"))
    if outcome == "compared":
        _check_policies(model, label, messages, sref.ids, sref, assistants, sanitize=True, key=key)
    return outcome


def _check_policies(model, label, messages, ids, ref: Reference, assistants: list[int], sanitize: bool, key: str) -> None:
    """``train_on="last_assistant"`` and a ``train: False`` key against the spans, one by one."""
    n = len(ids)
    last = _chatids(model, messages, sanitize, train_on="last_assistant")
    assert last.ids.tolist() == ids
    if last.assistant_mask.tolist() != ref.spans[-1]:
        raise AssertionError(_describe(model, label, ids, last.assistant_mask.tolist(), ref.spans[-1], f"train_on='last_assistant' mask (sanitize={sanitize})"))
    if not sanitize:
        COUNTS[key]["last_assistant"] += 1
    if len(assistants) < 2:
        return
    # train=False on the first assistant message: its span drops out of the mask.
    changed = [dict(m) for m in messages]
    changed[assistants[0]]["train"] = False
    dropped = _chatids(model, changed, sanitize)
    assert dropped.ids.tolist() == ids, f"{label}: a train key changed the ids"
    expected = _union(ref.spans[1:], n)
    if dropped.assistant_mask.tolist() != expected:
        raise AssertionError(_describe(model, label, ids, dropped.assistant_mask.tolist(), expected, f"mask with train=False on message {assistants[0]} (sanitize={sanitize})"))
    if not sanitize:
        COUNTS[key]["train_false"] += 1


# --- the tests ---


def test_wrapped_templates_fail_loudly_when_a_template_changes():
    template = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(mask_templates.TemplateChanged, match="occurs 0 times, expected 1"):
        mask_templates.wrapped_template("llama-2-7b-chat", template)
    with pytest.raises(mask_templates.TemplateChanged, match="occurs 2 times, expected 1"):
        twice = "{{ ' '  + content.strip() + ' ' + eos_token }}" * 2
        mask_templates.wrapped_template("llama-2-7b-chat", twice)
    with pytest.raises(KeyError):
        mask_templates.wrapped_template("no-such-checkpoint", template)


@pytest.mark.parametrize("name", list(mask_templates.WRAPS))
def test_wrapped_template_renders_the_original_text(name):
    """The wrapped copy only adds generation spans: same text on a probe with every role."""
    m = support.load_model(name)
    template = wrapped(name)
    assert template != m.tok.chat_template and re.search(r"\{%-?\s*generation\s*-?%\}", template)
    messages = _probe(m.format)
    original = m.tok.apply_chat_template(messages, tokenize=False, **m.kwargs())
    assert m.tok.apply_chat_template(messages, tokenize=False, chat_template=template, **m.kwargs()) == original
    out = official_masks(m, template, messages)
    n_assistant = sum(1 for x in messages if x["role"] == "assistant")
    runs = _runs(out["assistant_masks"])
    assert len(runs) == n_assistant, f"{name}: {len(runs)} masked runs for {n_assistant} assistant messages"


def _probe(fmt: str) -> list[dict]:
    messages = [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Name a prime."},
        {"role": "assistant", "content": "Seven."},
        {"role": "user", "content": "Another?"},
        {"role": "assistant", "content": " Thirteen. "},
    ]
    return messages[1:] if fmt == "gemma" else messages  # Gemma 1/2 raise on a system message


def _runs(mask) -> list[tuple[int, int]]:
    runs, start = [], None
    for i, bit in enumerate(list(mask) + [0]):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            runs.append((start, i))
            start = None
    return runs


@pytest.mark.parametrize("name", NATIVE)
def test_corpus_masks_match_wrapped_template(name):
    require_corpus()
    m = support.load_model(name)
    template = wrapped(name)
    counts = COUNTS[name]
    accepted: list = []
    for label, messages in mask_rows():
        counts["conversations"] += 1
        if any(msg.get("tool_calls") or msg.get("role") in ("tool", "ipython") for msg in messages):
            # Tool conversations are rendered by the checkpoint's template (the Jinja path);
            # their masks are compared in test_generic_path_masks_against_wrapped_template.
            counts["tool_conversation"] += 1
            continue
        counts[compare_conversation(m, template, label, messages, name, accepted)] += 1
    counts["mismatches"] += 0
    # encode_batch: the same masks, flat, with labels = ids where trained, else -100.
    if accepted:
        batch = m.enc.encode_batch(
            [c for c, _, _ in accepted], sanitize_control_tokens=False, return_assistant_mask=True, **m.ours_kwargs()
        )
        assert np.array_equal(batch.ids, np.concatenate([np.asarray(i, dtype=np.uint32) for _, i, _ in accepted]))
        assert np.array_equal(batch.assistant_mask, np.concatenate([np.asarray(x, dtype=np.uint8) for _, _, x in accepted]))
        assert np.array_equal(batch.labels, np.where(batch.assistant_mask == 1, batch.ids.astype(np.int64), -100))


@pytest.mark.parametrize("name", NATIVE)
def test_edge_case_masks_match_wrapped_template(name):
    """Whitespace, Unicode, long and control-token contents in the assistant turn, both sanitize modes."""
    m = support.load_model(name)
    template = wrapped(name)
    key = f"{name} (edge cases)"
    counts = COUNTS[key]
    contents = {**PLAIN_TEXTS, **control_texts([t for t, _ in m.enc.control_tokens])}
    for content_name, content in contents.items():
        for shape in ("user_assistant", "multi"):
            messages = shapes(content, m.format)[shape]
            if shape == "multi":  # an assistant turn in the middle, and one at the end
                messages = messages + [{"role": "assistant", "content": content}]
            counts["conversations"] += 1
            counts[compare_conversation(m, template, f"{content_name}/{shape}", messages, key)] += 1
    counts["mismatches"] += 0


# --- pinned: where the masks are principled, in cases a reader may doubt ---


def _masked_tokens(m, chat) -> list[str]:
    return [t for t, bit in zip(m.tok.convert_ids_to_tokens(chat.ids.tolist()), chat.assistant_mask.tolist()) if bit]


def test_pinned_straddling_token_counts_on_both_sides():
    """ChatML: the header's "\\n" and a content that starts with "\\n" merge into one token "ĊĊ",
    which straddles the body start. transformers counts it (it overlaps the generation span),
    and so does chatids (documented in src/training.rs)."""
    m = support.load_model("qwen2.5-7b-instruct")
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "\nhello"}]
    ours = _chatids(m, messages, sanitize=True)
    official = official_masks(m, wrapped("qwen2.5-7b-instruct"), messages)
    assert ours.ids.tolist() == list(official["input_ids"])
    assert ours.assistant_mask.tolist() == list(official["assistant_masks"])
    assert _masked_tokens(m, ours) == ["ĊĊ", "hello", "<|im_end|>"]


def test_pinned_trimming_templates_train_the_trimmed_text():
    """Templates that trim (Llama 3, Gemma) write ``content | trim``: the body is the trimmed text,
    so whitespace the caller put around the answer is neither written nor trained."""
    for name, end in (("llama-3.1-8b-instruct", "<|eot_id|>"), ("gemma-3-it", "<end_of_turn>")):
        m = support.load_model(name)
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "  \n hello \n "}]
        ours = _chatids(m, messages, sanitize=True)
        official = official_masks(m, wrapped(name), messages)
        assert ours.assistant_mask.tolist() == list(official["assistant_masks"])
        assert m.tok.decode([i for i, b in zip(ours.ids.tolist(), ours.assistant_mask.tolist()) if b]) == "hello" + end


def test_pinned_llama2_and_mistral_bodies_start_with_the_space_after_inst():
    """Llama 2 and Mistral v1/v7 write ``' ' + content`` after ``[/INST]``: the space is part of the
    body (the model generates it), and SentencePiece joins it to the first word ("▁Seven")."""
    for name in ("llama-2-7b-chat", "mistral-7b-instruct-v0.1", "mistral-large-instruct-2411"):
        m = support.load_model(name)
        messages = [{"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "Seven."}]
        ours = _chatids(m, messages, sanitize=True)
        official = official_masks(m, wrapped(name), messages)
        assert ours.assistant_mask.tolist() == list(official["assistant_masks"])
        assert _masked_tokens(m, ours)[0] == "▁Seven", name
        assert _masked_tokens(m, ours)[-1] == "</s>", name


def test_pinned_qwen3_think_block_is_in_the_body():
    """Qwen3 writes ``<think>\\n...\\n</think>\\n\\n`` for assistant turns after the last user query:
    the model generates it, so it is trained; earlier turns have no think block."""
    m = support.load_model("qwen3-0.6b")
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2", "reasoning_content": "r2"},
    ]
    ours = _chatids(m, messages, sanitize=True)
    official = official_masks(m, wrapped("qwen3-0.6b"), messages)
    assert ours.ids.tolist() == list(official["input_ids"])
    assert ours.assistant_mask.tolist() == list(official["assistant_masks"])
    runs = [m.tok.decode(ours.ids[a:b].tolist()) for a, b in _runs(ours.assistant_mask)]
    assert runs == ["a1<|im_end|>", "<think>\nr2\n</think>\n\na2<|im_end|>"]


def test_transformers_refuses_sanitize_with_assistant_mask():
    """Why the sanitized reference is rebuilt from transformers' pieces: this version refuses the
    combination. If a later transformers accepts it, compare with it directly."""
    m = support.load_model("llama-3.1-8b-instruct")
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<|eot_id|> x"}]
    with pytest.raises(ValueError, match="not compatible with `return_assistant_tokens_mask=True`"):
        m.tok.apply_chat_template(
            messages,
            chat_template=wrapped("llama-3.1-8b-instruct"),
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
            sanitize_control_tokens=True,
            **m.kwargs(),
        )
    # The rebuilt reference: the control token in the answer is plain text, and trained.
    ref = reference(m, wrapped("llama-3.1-8b-instruct"), messages, sanitize=True)
    assert ref.ids == m.ref_ids(messages, sanitize=True)
    ours = _chatids(m, messages, sanitize=True)
    assert ours.ids.tolist() == ref.ids and ours.assistant_mask.tolist() == ref.mask
    assert m.tok.decode([i for i, b in zip(ref.ids, ref.mask) if b]) == "<|eot_id|> x<|eot_id|>"


# --- the Jinja path: heuristic bodies against the wrapped templates ---

def _has_text(message: dict) -> bool:
    return any(isinstance(message.get(k), str) and message[k] for k in ("content", "reasoning_content", "thinking", "reasoning"))


def explain_generic_difference(model: support.Model, messages: list[dict], ref: Reference, ours: list[int]) -> list[str]:
    """Why the Jinja path's mask differs from the wrapped template's, per generation span.

    The Jinja path derives each body from the rendered text (src/render/jinja.rs
    ``message_bodies``): from the end of the generation prompt before the message's located
    text (else from the text), through the first stop token after it, else a special token
    right after the text, else the text's end. What follows, each pinned in a test below:

    * ``no located text``: an assistant message whose content is empty (or that has only tool
      calls) has no text to locate, so no body: its end-of-turn token is not trained (the
      wrapped template trains it).
    * ``end of turn not found``: the span's last token is neither a stop token nor a special token
      right after the text (kept for directories without the end-of-turn token in their stop
      tokens; none of the shared ones since the special-token rule).
    * ``tool-call turn``: chatids trains a tool-call turn that the wrapped template leaves out
      (the wraps cover the tool-call turns of Qwen2.5, Qwen3 and gpt-oss only:
      ``mask_templates.WRAPS_CALLS``; for those a difference there fails).

    Raises AssertionError for anything else.
    """
    ids = ref.ids
    detailed = model.enc.encode_detailed(messages, sanitize_control_tokens=False, **model.ours_kwargs())
    located = detailed.message_indices.tolist()
    assert detailed.ids.tolist() == ids
    reasons = []
    inside = _union(ref.spans, len(ids))
    stray = [i for i, (a, b) in enumerate(zip(ours, inside)) if a and not b]
    for i in stray:
        message = messages[located[i]] if located[i] >= 0 else {}
        if not message.get("tool_calls") or model.name in mask_templates.WRAPS_CALLS:
            raise AssertionError(
                f"{model.name}: the Jinja path trains token {i} {model.tok.convert_ids_to_tokens(ids[i])!r} "
                f"outside every generation span (message {located[i]})"
            )
    if stray:
        reasons.append("tool-call turn: trained by the Jinja path, not wrapped in the reference")
    for span, text in zip(ref.spans, ref.span_texts):
        positions = [i for i, bit in enumerate(span) if bit]
        missed = [i for i in positions if not ours[i]]
        if not missed:
            continue
        owners = {located[i] for i in positions if located[i] >= 0}
        if len(missed) == len(positions) and not any(_has_text(messages[o]) and messages[o].get("role") == "assistant" for o in owners):
            reasons.append("no located text (empty content or tool calls only): no body")
            continue
        explained = set()
        first, last = positions[0], positions[-1]
        if last in missed and ids[last] not in model.enc.stop_token_ids:
            explained.add(last)
            reasons.append(f"end of turn not found: {model.tok.convert_ids_to_tokens(ids[last])}")
        unexplained = [i for i in missed if i not in explained]
        if unexplained:
            i = unexplained[0]
            raise AssertionError(
                f"{model.name}: the Jinja path misses token {i} {model.tok.convert_ids_to_tokens(ids[i])!r} "
                f"of the generation span {text[:80]!r} for no documented reason"
            )
    return reasons


def provenance_lost(model: support.Model, messages: list[dict]) -> bool:
    """Whether the Jinja path located no message text at all (every token has message index
    -1) although some message has text: then it has no bodies, and the mask is empty."""
    detailed = model.enc.encode_detailed(messages, sanitize_control_tokens=False, **model.ours_kwargs())
    has_text = any(isinstance(x.get("content"), str) and x["content"].strip() for x in messages)
    return has_text and not (detailed.message_indices >= 0).any()


@pytest.mark.parametrize("name", GENERIC)
def test_generic_path_masks_against_wrapped_template(name):
    """Every generic-path mask equals the wrapped template's, or differs for a pinned reason only;
    the agreement rate is in the session summary."""
    require_corpus()
    m = support.load_model(name, generic=True)
    template = wrapped(name)
    key = f"{name} [jinja]"
    counts = COUNTS[key]
    for label, messages in mask_rows():
        counts["conversations"] += 1
        try:
            official = official_masks(m, template, messages)
        except Exception:
            counts["rejected_by_template"] += 1
            continue
        try:
            ours = _chatids(m, messages, sanitize=False)
            ours_ids, mask = ours.ids.tolist(), ours.assistant_mask.tolist()
        except chatids.ChatTemplateError as e:
            if "nothing to train on" not in str(e):
                counts["rejected_by_chatids"] += 1
                REASONS[key][f"chatids: {re.sub(r'^message [0-9]+: ', '', str(e))[:100]}"] += 1
                continue
            if not any(official["assistant_masks"]):
                counts["no_assistant"] += 1
                continue
            # chatids finds nothing to train, the wrapped template does: explained below, or fails.
            ours_ids = m.enc.encode(messages, sanitize_control_tokens=False, **m.ours_kwargs()).tolist()
            mask = [0] * len(ours_ids)
        ids = list(official["input_ids"])
        assert ours_ids == ids, f"{label}: " + support._first_difference(ours_ids, ids)
        counts["compared"] += 1
        if mask == list(official["assistant_masks"]):
            counts["mask_agrees"] += 1
            continue
        if provenance_lost(m, messages):
            # No message text was located (the template rewrote every one): counted, never compared.
            counts["provenance_lost"] += 1
            continue
        ref = reference(m, template, messages, sanitize=False)
        assert ref.ids == ids and ref.mask == list(official["assistant_masks"])
        reasons = explain_generic_difference(m, messages, ref, mask)
        assert reasons, f"{label}: masks differ, nothing explained"
        counts["documented_difference"] += 1
        for reason in reasons:
            REASONS[key][reason] += 1
    counts["mismatches"] += 0


def _generic_and_wrapped(name: str, messages: list[dict]) -> tuple[support.Model, list[int], list[int]]:
    m = support.load_model(name, generic=True)
    ours = _chatids(m, messages, sanitize=True)
    official = official_masks(m, wrapped(name), messages)
    assert ours.ids.tolist() == list(official["input_ids"])
    return m, ours.assistant_mask.tolist(), list(official["assistant_masks"])


def test_pinned_generic_path_refuses_a_mask_it_cannot_locate():
    """Generic path: an empty assistant message (a tool-call-only turn, say) has no text to
    locate, so no body: a mask would silently not train it, so chatids raises, naming the
    message. With ``train: False`` on it, the mask is the wrapped template's except its
    end-of-turn token; the native format (and the wrapped template) train that token."""
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "ok"},
    ]
    m = support.load_model("qwen2.5-7b-instruct", generic=True)
    with pytest.raises(chatids.ChatTemplateError, match=r"^message 1: .*cannot be located"):
        _chatids(m, messages, sanitize=True)
    untrained = [dict(messages[1], train=False) if i == 1 else msg for i, msg in enumerate(messages)]
    ours = _chatids(m, untrained, sanitize=True).assistant_mask.tolist()
    theirs = list(official_masks(m, wrapped("qwen2.5-7b-instruct"), messages)["assistant_masks"])
    ids = m.enc.encode(messages, sanitize_control_tokens=True, **m.ours_kwargs()).tolist()
    first_end = ids.index(151645, ids.index(77091))  # the <|im_end|> after the first "assistant" header
    assert [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b] == [first_end]
    native = _chatids(support.load_model("qwen2.5-7b-instruct"), messages, sanitize=True)
    assert native.assistant_mask.tolist() == theirs


def test_generic_path_trains_the_space_after_inst():
    """Generic path, Llama 2 / Mistral: no generation prompt, so an answer's body starts at the
    whitespace the template writes before its text (`[/INST] ` + content): trained whether
    SentencePiece joins the space to the first word or makes it a token of its own ("▁" before
    CJK text). Was a difference before the whitespace rule."""
    for content in ("Seven.", "一个人"):
        messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": content}]
        m, ours, theirs = _generic_and_wrapped("llama-2-7b-chat", messages)
        assert ours == theirs, content


def test_pinned_generic_path_special_token_after_the_text_ends_the_body():
    """Generic path, the shared Gemma 2 directory: <end_of_turn> is not among its stop tokens (eos
    <eos>, no generation_config.json), but it is a special token right after the content, so the
    body ends with it, as in the wrapped template. gpt-oss closes earlier turns with <|end|>
    (not a stop token) the same way, and its last training turn with <|return|> (its eos)."""
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    m, ours, theirs = _generic_and_wrapped("gemma-2-it-on-gemma3-tokenizer", messages)
    assert m.tok.convert_tokens_to_ids("<end_of_turn>") not in m.enc.stop_token_ids
    assert ours == theirs
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "b", "thinking": "t"},
    ]
    m, ours, theirs = _generic_and_wrapped("gpt-oss-120b", messages)
    assert m.tok.convert_tokens_to_ids("<|end|>") not in m.enc.stop_token_ids
    assert ours == theirs
    ids = m.enc.encode(messages, **m.ours_kwargs()).tolist()
    runs = [m.tok.decode(ids[a:b]) for a, b in _runs(ours)]
    assert runs == [
        "<|channel|>final<|message|>a<|end|>",
        "<|channel|>analysis<|message|>t<|end|><|start|>assistant<|channel|>final<|message|>b<|return|>",
    ]


# --- the mistral-common route: ids from encode_chat_completion, masks checked by decoding ---

MC_ROUTES = [
    "mistral-common-v1",
    "mistral-common-v2",
    "mistral-common-v3",
    "mistral-common-v7",
    "mistral-common-v3-tekken",
    "mistral-common-v7-tekken",
]


@pytest.fixture(scope="module")
def mc_dirs(tmp_path_factory) -> dict[str, Any]:
    """Checkpoint directories with mistral-common's packaged tokenizer files (built as
    test_mistral_common.py builds them, in a temporary directory)."""
    pytest.importorskip("mistral_common")
    import test_mistral_common as tmc

    assert sorted(tmc.ROUTES) == sorted(MC_ROUTES)
    base = tmp_path_factory.mktemp("mask_mistral_common")
    dirs = {}
    for name, (source, target, patch) in tmc.ROUTES.items():
        d = base / name
        d.mkdir()
        if patch:
            data = json.loads((tmc.MC_DATA / source).read_text())
            data["config"].update(patch)
            (d / target).write_text(json.dumps(data))
        else:
            os.symlink(tmc.MC_DATA / source, d / target)
        dirs[name] = tmc.Route(name, d)
    return dirs


def _consecutive_assistants(messages: list[dict]) -> bool:
    roles = [m.get("role") for m in messages]
    return any(a == b == "assistant" for a, b in zip(roles, roles[1:]))


@pytest.mark.parametrize("route_name", MC_ROUTES)
def test_mistral_common_route_masks_select_assistant_content_and_eos(mc_dirs, route_name):
    """Each masked run is one assistant message: exactly mistral-common's tokens for it
    (``encode_assistant_message``: content, then ``</s>``), and it decodes to the content."""
    require_corpus()
    from mistral_common.protocol.instruct.messages import AssistantMessage
    from mistral_common.protocol.instruct.validator import ValidationMode

    route = mc_dirs[route_name]
    assert route.enc.reference == "mistral-common"
    instruct = route.refs[ValidationMode.finetuning].instruct_tokenizer
    eos = instruct.tokenizer.eos_id
    key = f"{route_name} (mistral-common route)"
    counts = COUNTS[key]
    for label, messages in mask_rows():
        counts["conversations"] += 1
        try:
            ref = route.ref(messages)
        except Exception:
            counts["rejected_by_reference"] += 1
            continue
        try:
            ours = route.enc.encode(messages, return_assistant_mask=True)
        except chatids.ChatTemplateError as e:
            counts["no_assistant" if "nothing to train on" in str(e) else "rejected_by_chatids"] += 1
            continue
        ids = ours.ids.tolist()
        assert ids == ref, f"{label}: " + support._first_difference(ids, ref)
        if _consecutive_assistants(messages):  # mistral-common joins them into one message
            counts["skipped_consecutive_assistants"] += 1
            continue
        assistants = [i for i, x in enumerate(messages) if x.get("role") == "assistant"]
        if route_name == "mistral-common-v2":
            # v2 drops the tool calls (and results) before the last user message, as mistral-common does.
            last_user = max((i for i, x in enumerate(messages) if x.get("role") == "user"), default=-1)
            assistants = [i for i in assistants if not (messages[i].get("tool_calls") and i < last_user)]
        runs = _runs(ours.assistant_mask)
        assert len(runs) == len(assistants), f"{label}: {len(runs)} masked runs for {len(assistants)} assistant messages"
        for (a, b), index in zip(runs, assistants):
            message = messages[index]
            content = message["content"]
            if message.get("tool_calls"):  # [TOOL_CALLS] + the calls' JSON + </s>
                reply = AssistantMessage.from_openai({**message, "content": content or None})
            else:
                reply = AssistantMessage(content=content)
            expected = instruct.encode_assistant_message(reply, False)
            got = ids[a:b]
            assert got == expected, f"{label}: message {index}: the masked tokens are not its content + </s>"
            assert got[-1] == eos
            if not message.get("tool_calls"):
                decoded = instruct.tokenizer.decode(got[:-1])
                assert decoded.strip() == content.strip(), f"{label}: message {index} decodes to {decoded[:80]!r}"
        # train_on="last_assistant" keeps the last run; train=False drops a message's run.
        last = route.enc.encode(messages, return_assistant_mask=True, train_on="last_assistant")
        assert _runs(last.assistant_mask) == runs[-1:]
        if len(assistants) > 1:
            changed = [dict(x) for x in messages]
            changed[assistants[0]]["train"] = False
            assert _runs(route.enc.encode(changed, return_assistant_mask=True).assistant_mask) == runs[1:]
            counts["train_false"] += 1
        counts["compared"] += 1
    counts["mismatches"] += 0


# --- regressions: chatids bugs the generic-path comparison found (now fixed) ---


def test_generic_path_locates_content_that_the_template_strips_before_its_own_space():
    # Llama 2: ' ' + content.strip() + ' ' + eos_token; the content's trailing " " is stripped,
    # and the template writes " " right after it.
    m = support.load_model("llama-2-7b-chat", generic=True)
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a "}]
    assert not provenance_lost(m, messages)  # it was: every token had message index -1
    _, ours, theirs = _generic_and_wrapped("llama-2-7b-chat", messages)
    assert ours == theirs


def test_generic_path_locates_texts_when_an_empty_content_is_tested_for_truth():
    # Qwen2.5: an assistant turn with tool calls writes '\n' + content only `if message.content`.
    m = support.load_model("qwen2.5-7b-instruct", generic=True)
    messages = [
        {"role": "user", "content": "Track 123."},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "track", "arguments": {"n": "123"}}}]},
        {"role": "tool", "content": "in transit"},
        {"role": "assistant", "content": "It is in transit."},
    ]
    assert not provenance_lost(m, messages)
    # The tool-call turn has no text, but it is located by its calls (the generation prompt
    # before it, its function name, the stop token after it): the mask is the wrapped
    # template's, which puts the turn in a generation block.
    _, ours, theirs = _generic_and_wrapped("qwen2.5-7b-instruct", messages)
    assert ours == theirs
    trained = m.tok.decode([i for i, b in zip(m.enc.encode(messages, **m.ours_kwargs()).tolist(), ours) if b])
    assert trained == '<tool_call>\n{"name": "track", "arguments": {"n": "123"}}\n</tool_call><|im_end|>It is in transit.<|im_end|>'
    # train=False on it leaves exactly the turn out.
    untrained = [dict(messages[1], train=False) if i == 1 else msg for i, msg in enumerate(messages)]
    ours = _chatids(m, untrained, sanitize=True)
    assert m.tok.decode([i for i, b in zip(ours.ids.tolist(), ours.assistant_mask.tolist()) if b]) == "It is in transit.<|im_end|>"


def test_gpt_oss_call_turns_are_trained_as_the_wrapped_template():
    """gpt-oss (Jinja path): a call turn, with or without its analysis, is trained from after
    "<|start|>assistant" through <|call|>, as the wrapped template's generation block says; a
    turn that writes two calls in one gap (ambiguous) is not located and the mask refuses."""
    tools = [{"type": "function", "function": {"name": "track", "description": "Track a parcel.", "parameters": {"type": "object", "properties": {"n": {"type": "string"}}}}}]
    call = {"id": "a1B2c3D4e", "type": "function", "function": {"name": "track", "arguments": {"n": "123"}}}
    for assistant in ({"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "assistant", "content": "", "thinking": "Look it up.", "tool_calls": [call]}):
        messages = [
            {"role": "user", "content": "Where is parcel 123?"},
            assistant,
            {"role": "tool", "content": "in transit"},
            {"role": "assistant", "content": "It is in transit."},
        ]
        for conv in (messages, messages[:2]):
            m = support.load_model("gpt-oss-120b")
            ours = m.enc.encode(conv, tools=tools, return_assistant_mask=True, sanitize_control_tokens=True, **m.ours_kwargs())
            official = official_masks(m, wrapped("gpt-oss-120b"), conv, tools=tools)
            assert ours.ids.tolist() == list(official["input_ids"])
            assert ours.assistant_mask.tolist() == list(official["assistant_masks"]), conv


def test_generic_path_user_body_does_not_take_an_empty_assistant_end_of_turn():
    # train_on="all" with train=False on the user message: the user's body (its content and
    # <|eot_id|>) drops out, the <|eot_id|> that closes the empty assistant turn before it stays.
    # (On the Jinja path the user's header is template text without a message index, so it
    # stays trained; the native format drops it too: documented in docs/training.md, "What is trained".)
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "x", "train": False},
        {"role": "assistant", "content": "ok"},
    ]
    native = support.load_model("meta-llama-3-8b-instruct")
    generic = support.load_model("meta-llama-3-8b-instruct", generic=True)
    ours = generic.enc.encode(messages, return_assistant_mask=True, train_on="all", **generic.ours_kwargs())
    theirs = native.enc.encode(messages, return_assistant_mask=True, train_on="all", **native.ours_kwargs())
    assert ours.ids.tolist() == theirs.ids.tolist()
    ids = ours.ids.tolist()
    eot = generic.tok.convert_tokens_to_ids("<|eot_id|>")
    eots = [i for i, t in enumerate(ids) if t == eot]  # user hi, empty assistant, user x, assistant ok
    assert len(eots) == 4
    assert ours.assistant_mask[eots[1]] == theirs.assistant_mask[eots[1]] == 1
    assert ours.assistant_mask[eots[2]] == theirs.assistant_mask[eots[2]] == 0
    x_body = range(eots[2] - 1, eots[2] + 1)  # "x" and its <|eot_id|>
    assert all(ours.assistant_mask[i] == 0 for i in x_body)
