"""Public chat templates (``tests/template_corpus``) through chatids and transformers.

The corpus holds the chat templates that llama.cpp, huggingface.js, minja, vLLM and
chujiezheng/chat_templates collect, with provenance and licenses (see its README). Each
distinct template is put on the shared tokenizer that fits it (the one whose control tokens
it writes; otherwise one of three, by the template's hash) and compared with transformers'
``apply_chat_template(chat_template=...)`` on the sources' own fixed conversations and
contexts and on a sample of the shared corpus (``CHATIDS_CONFORMANCE=full``: many more),
with the generation prompt on and off: ``render``, and the ids with ``sanitize_control_tokens``
off and on.

Each case ends as one of:

* ``exact``: the same text and ids;
* ``both_raised``: transformers and chatids both raise;
* ``refused``: only chatids raises, and only as its documented drop-refusal (a message the
  template would leave out of the prompt without a word; ``ChatTemplateError.refusal ==
  "dropped"``), listed by reason;
* ``deviation``: a documented deviation of a native format under sanitizing
  (:func:`support.known_deviation`), where the alternative property is checked instead.

Anything else fails: a different text or id, transformers rendering what chatids refuses for
another reason, or chatids rendering what transformers refuses. A template that chatids' Rust
engine cannot compile while jinja2 can (the jinja2 fallback) fails too. Where a source gives
an expected output, transformers' agreement with it is reported (a difference there belongs to
the source). ``CHATIDS_CORPUS_REPORT=path.json`` writes the counts per source.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import os
import random
import re
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Optional

import pytest

import support

import chatids

CORPUS = Path(__file__).parent / "template_corpus"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text(encoding="utf-8"))
CONVERSATIONS = {
    k: v for k, v in json.loads((CORPUS / "conversations.json").read_text(encoding="utf-8")).items() if k != "_provenance"
}
CHAT = [t for t in MANIFEST["templates"] if t["kind"] == "chat" and not t["duplicate_of"]]
#: Every entry (duplicates too) by the file it points at, for the sources' own contexts.
ENTRIES_BY_FILE: dict[str, list[dict]] = defaultdict(list)
for _t in MANIFEST["templates"]:
    if _t["kind"] == "chat":
        ENTRIES_BY_FILE[_t["file"]].append(_t)

#: Shared tokenizers for templates that write none of the control tokens below.
DEFAULT_MODELS = ["llama-3.1-8b-instruct", "mistral-7b-instruct-v0.3", "qwen2.5-7b-instruct"]
#: Conversations per template from the shared corpus: CI, and CHATIDS_CONFORMANCE=full.
SAMPLE = 4
SAMPLE_FULL = 45

COUNTS: dict[str, Counter] = defaultdict(Counter)
REFUSALS: dict[str, Counter] = defaultdict(Counter)
EXPECTED: dict[str, Counter] = defaultdict(Counter)


def model_for(text: str, sha: str) -> str:
    """The shared tokenizer whose control tokens the template writes."""
    if "<|channel|>" in text or ("<|start|>" in text and "<|message|>" in text):
        return "gpt-oss-120b"
    if "<｜User｜>" in text or "<｜Assistant｜>" in text:
        return "deepseek-v3"
    if "<start_of_turn>" in text:
        return "gemma-3-it"
    if "<|start_header_id|>" in text:
        return "llama-3.1-8b-instruct"
    if "<|im_start|>" in text:
        return "qwen3-0.6b" if "<think>" in text else "qwen2.5-7b-instruct"
    if "[SYSTEM_PROMPT]" in text:
        return "mistral-small-24b-instruct-2501"
    if "[INST]" in text:
        return "mistral-7b-instruct-v0.3"
    return DEFAULT_MODELS[int(sha[:8], 16) % len(DEFAULT_MODELS)]


_BASE: dict[str, chatids.Encoder] = {}


def base_encoder(name: str) -> chatids.Encoder:
    if name not in _BASE:
        _BASE[name] = chatids.Encoder.from_pretrained(support.require_model_path(name))
    return _BASE[name]


def tokenizer(name: str) -> Any:
    support.freeze_transformers_clock()
    if name not in support._TOKENIZERS:
        from transformers import AutoTokenizer

        support._TOKENIZERS[name] = AutoTokenizer.from_pretrained(str(support.require_model_path(name)))
    return support._TOKENIZERS[name]


def corpus_sample(template_index: int) -> list[tuple[str, dict]]:
    """Shared-corpus conversations for one template, rotating over the files so that every
    file and many rows are covered across the templates."""
    files = support.corpus_files()
    count = SAMPLE_FULL if support.full_conformance() else SAMPLE
    rng = random.Random(f"chatids-corpus:{template_index}")
    out = []
    for k in range(count if files else 0):
        name = files[(template_index * count + k) % len(files)]
        rows = _rows(name)
        i = rng.randrange(len(rows))
        out.append((f"{name}#{i}", rows[i]))
    return out


@functools.lru_cache(maxsize=None)
def _rows(name: str) -> list[dict]:
    path, _ = support.data_dir()
    assert path is not None
    return [json.loads(line) for line in open(path / name, encoding="utf-8")]


def cases_for(entry: dict, index: int) -> list[tuple[str, list[dict], dict[str, Any], list[bool]]]:
    """(name, messages, template arguments, generation-prompt flags) to compare."""
    out = []
    for e in ENTRIES_BY_FILE[entry["file"]]:
        ctx = dict(e.get("context") or {})
        messages = ctx.pop("messages", None)
        if messages is None and e.get("conversation"):
            messages = CONVERSATIONS[e["conversation"]]
        if messages is None:
            continue
        flags = [False, True]
        agp = ctx.pop("add_generation_prompt", None)
        for key in ("bos_token", "eos_token"):
            if e.get(key) is not None:
                ctx.setdefault(key, e[key])
        out.append((f"{e['id']} (source context)", messages, ctx, flags if agp is None else sorted({bool(agp), *flags})))
    for name, messages in CONVERSATIONS.items():
        out.append((f"fixed conversation {name}", messages, {}, [False, True]))
    for name, row in corpus_sample(index):
        kwargs = {"tools": row["tools"]} if row.get("tools") else {}
        out.append((name, row["messages"], kwargs, [False, True]))
    return out


def _ref(tok: Any, template: str, messages: list, agp: bool, tokenize: bool, sanitize: bool, kwargs: dict) -> Any:
    return tok.apply_chat_template(
        messages,
        chat_template=template,
        add_generation_prompt=agp,
        tokenize=tokenize,
        sanitize_control_tokens=sanitize,
        return_dict=False,
        **kwargs,
    )


NOW = dt.datetime(*support.FROZEN_NOW)


def compare_case(enc: chatids.Encoder, tok: Any, template: str, messages: list, agp: bool, kwargs: dict) -> tuple[str, str]:
    """One (conversation, flag) case: (outcome, detail); a mismatch raises AssertionError."""
    try:
        ref_text = _ref(tok, template, messages, agp, False, False, kwargs)
    except Exception as e:
        try:
            enc.render(messages, agp, now=NOW, **kwargs)
        except chatids.ChatTemplateError:
            return "both_raised", ""
        raise AssertionError(f"transformers raised {type(e).__name__}: {e}; chatids rendered it")
    try:
        text = enc.render(messages, agp, now=NOW, **kwargs)
    except chatids.ChatTemplateError as e:
        assert e.refusal == "dropped", f"chatids refused what transformers renders ({e.refusal}): {e}"
        for sanitize in (False, True):
            with pytest.raises(chatids.ChatTemplateError):
                enc.encode(messages, agp, sanitize, now=NOW, **kwargs)
        return "refused", re.sub(r"^message \d+: ", "", str(e))
    assert text == ref_text, f"render differs:\nchatids:      {text[:400]!r}\ntransformers: {ref_text[:400]!r}"
    ids = enc.encode(messages, agp, False, now=NOW, **kwargs).tolist()
    ref = list(_ref(tok, template, messages, agp, True, False, kwargs))
    assert ids == ref, "sanitize=False: " + support._first_difference(ids, ref)
    ours = enc.encode(messages, agp, True, now=NOW, **kwargs).tolist()
    deviation = support.known_deviation(enc.format, messages, sanitize=True)
    if deviation is not None:
        detailed = enc.encode_detailed(messages, agp, True, now=NOW, **kwargs)
        ctrl = {i for _, i in enc.control_tokens}
        assert not [t for t, c in zip(detailed.ids, detailed.from_content) if c and int(t) in ctrl]
        return "deviation", deviation
    ref = list(_ref(tok, template, messages, agp, True, True, kwargs))
    assert ours == ref, "sanitize=True: " + support._first_difference(ours, ref)
    return "exact", ""


def _entry_id(entry: dict) -> str:
    return entry["id"]


@pytest.mark.parametrize("index,entry", list(enumerate(CHAT)), ids=[_entry_id(e) for e in CHAT])
def test_public_template(index: int, entry: dict) -> None:
    text = (CORPUS / entry["file"]).read_bytes().decode("utf-8")  # as stored: CRLF stays
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == entry["sha256"]
    name = model_for(text, entry["sha256"])
    base = base_encoder(name)
    tok = tokenizer(name)
    source = entry["source"]
    counts = COUNTS[source]
    counts["templates"] += 1
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            enc = base.with_chat_template(text)
    except chatids.CheckpointError as e:
        # Neither chatids' engine nor jinja2 compiles it: transformers must fail too.
        with pytest.raises(Exception):
            _ref(tok, text, [{"role": "user", "content": "hi"}], False, False, False, {})
        counts["templates_not_compiling"] += 1
        return
    assert not [w for w in caught if "jinja2" in str(w.message)], "the jinja2 fallback served this template"
    assert enc.format != "jinja2-fallback"
    counts[f"format {enc.format}"] += 1
    for case, messages, kwargs, flags in cases_for(entry, index):
        for agp in flags:
            try:
                outcome, detail = compare_case(enc, tok, text, messages, agp, kwargs)
            except AssertionError as e:
                raise AssertionError(f"{entry['id']} on {name} ({enc.format}), case {case}, agp={agp}: {e}") from None
            counts[outcome] += 1
            counts["comparisons"] += 1
            if outcome == "refused":
                REFUSALS[source][detail] += 1
    # The source's expected output, against transformers (a difference belongs to the source).
    for e in ENTRIES_BY_FILE[entry["file"]]:
        if e.get("expected") is None or not (e.get("context") or e.get("conversation")):
            continue
        ctx = dict(e.get("context") or {})
        messages = ctx.pop("messages", None) or CONVERSATIONS[e["conversation"]]
        agp = bool(ctx.pop("add_generation_prompt", source == "llama.cpp"))
        for key in ("bos_token", "eos_token"):
            if e.get(key) is not None:
                ctx.setdefault(key, e[key])
        try:
            got = _ref(tok, text, messages, agp, False, False, ctx)
        except Exception:
            EXPECTED[e["source"]]["transformers raises"] += 1
            continue
        EXPECTED[e["source"]]["agrees" if got == e["expected"] else "differs"] += 1


def test_corpus_totals() -> None:
    """Print (and with CHATIDS_CORPUS_REPORT, write) the counts per source; runs last in its file."""
    if not COUNTS:
        pytest.skip("no corpus template ran in this process")
    lines = []
    for source in sorted(COUNTS):
        c = COUNTS[source]
        lines.append(
            f"{source}: {c['templates']} templates, {c['comparisons']} comparisons: {c['exact']} exact, "
            f"{c['both_raised']} both raised, {c['refused']} refused (drop), {c['deviation']} documented deviations; "
            f"{c['templates_not_compiling']} compile nowhere; expected outputs: {dict(EXPECTED[source])}"
        )
        for reason, n in REFUSALS[source].most_common():
            lines.append(f"    refused {n}x: {reason}")
    print("\n" + "\n".join(lines))
    report = os.environ.get("CHATIDS_CORPUS_REPORT")
    if report:
        Path(report).write_text(
            json.dumps(
                {
                    "counts": {s: dict(c) for s, c in COUNTS.items()},
                    "refusals": {s: dict(c) for s, c in REFUSALS.items()},
                    "expected_outputs": {s: dict(c) for s, c in EXPECTED.items()},
                },
                indent=1,
                sort_keys=True,
            )
        )
