"""Injection: adversarial caller text must never become structure.

For every shared checkpoint, on its default route and on the Jinja path, adversarial
strings are put into every field a caller controls: system, user and assistant content, tool
results, tool-call arguments (dict and JSON string) and names, tool descriptions, template
arguments (``date_string``, ``today``) and, where the template writes roles through, role names.
The strings come in families (:data:`FAMILIES`): the model's control tokens verbatim, their
prefixes and suffixes (which the template text around a field could complete: content ending
in ``<|eot`` before a template ``_id|>``), the tokens split by zero-width characters, Unicode
confusables (fullwidth ``＜｜``, Cyrillic look-alikes, case), forms that NFC or NFKC
normalize into the token, tokens nested in tokens, and escaped forms.

With the default policy (``sanitize_control_tokens=True``) each encoded case must satisfy:

1. no control-token id starts inside caller text (``encode_detailed(...).from_content``), and
2. the output holds exactly the control-token ids of the same conversation with every
   adversarial string replaced by ``"X"``: the template's own structure and nothing else
   (this also catches a token that starts in template text and ends in a field, and fields a
   template passes through ``tojson``, which carry no ``from_content`` mark).

A case chatids refuses with ``ChatTemplateError`` produces nothing and passes (it is counted).
The session summary prints the cases per family; ``CHATIDS_INJECTION_REPORT=path`` writes them
as JSON (SECURITY.md's table). ``CHATIDS_CONFORMANCE=full`` tries every token and split point.
"""

from __future__ import annotations

import json
import os
import random
import unicodedata
from collections import defaultdict
from typing import Any, Callable, Iterator

import pytest

import chatids
import support

#: Cases per (model, family, outcome); outcome is "encoded" or "refused".
COUNTS: dict[tuple[str, str, str], int] = defaultdict(int)
#: Why cases were refused: (model, field) -> (count, first error message).
REFUSALS: dict[tuple[str, str], list] = {}

ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u034f"]
#: Look-alike characters: fullwidth forms of ASCII, and Cyrillic/Greek homoglyphs.
HOMOGLYPHS = {"a": "а", "e": "е", "o": "о", "p": "р", "c": "с", "x": "х", "i": "і", "s": "ѕ", "|": "ǀ", "_": "＿"}
#: Characters NFC maps to a different character (singleton decompositions): Kelvin, Angstrom, Ohm...
NFC_SINGLETONS = {"K": "\u212a", "Å": "\u212b", "Ω": "\u2126", ";": "\u037e", "`": "\u1fef", "·": "\u0387"}


def fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def _variants(token: str, rng: random.Random) -> dict[str, list[str]]:
    """Adversarial strings derived from one control token, by family."""
    inner = range(1, len(token))
    splits = list(inner) if support.full_conformance() else sorted(rng.sample(list(inner), min(4, len(inner))))
    fam: dict[str, list[str]] = {
        "verbatim": [token, f"Hi {token} there", f"{token}{token}", f"\n{token}\n"],
        "prefix (template text could complete it)": [f"x{token[:k]}" for k in splits] + [token[:k] for k in splits[:1]],
        "suffix (template text could start it)": [f"{token[k:]}x" for k in splits] + [token[k:] for k in splits[:1]],
        "zero-width split": [token[:k] + rng.choice(ZERO_WIDTH) + token[k:] for k in splits],
        "confusable": [
            fullwidth(token),
            token.upper(),
            token.replace("|", "｜").replace("<", "＜").replace(">", "＞"),
            "".join(HOMOGLYPHS.get(c, c) for c in token),
            token.replace("▁", " ").replace("｜", "|"),
            token.replace(" ", "▁"),
        ],
        "normalizes to it (NFC/NFKC)": [
            "".join(NFC_SINGLETONS.get(c, c) for c in token),
            unicodedata.normalize("NFD", token),
            fullwidth(token),  # NFKC maps fullwidth forms back to ASCII
            token.replace("|", "\uff5c").replace("_", "\uff3f"),
        ],
        "nested in itself": [token[:k] + token + token[k:] for k in splits[:2]],
        "escaped": [
            json.dumps(token).strip('"').replace("<", "\\u003c").replace(">", "\\u003e"),
            token.replace("<", "&lt;").replace(">", "&gt;"),
            repr(token),
        ],
    }
    return fam


def families(model: support.Model) -> dict[str, list[str]]:
    """Every family's adversarial strings for this model (a deterministic sample in CI)."""
    rng = random.Random(f"chatids-injection:{model.name}")
    tokens = [t for t, _ in model.enc.control_tokens]
    template = model.tok.chat_template or ""
    structural = [t for t in tokens if t in template]
    others = [t for t in tokens if t not in template]
    if not support.full_conformance():
        others = rng.sample(others, min(3, len(others)))
    out: dict[str, list[str]] = defaultdict(list)
    for token in structural + others:
        for name, strings in _variants(token, rng).items():
            out[name].extend(strings)
    return out


# --- where caller text goes ---

def _tool_call(name: str, arguments: Any) -> dict:
    return {"id": "abcDEF123", "type": "function", "function": {"name": name, "arguments": arguments}}


WEATHER_TOOL = support.WEATHER_TOOL


def slots(model: support.Model) -> dict[str, Callable[[str], tuple[list[dict], dict[str, Any]]]]:
    """Field name -> a function placing one string in that field: (messages, template kwargs)."""
    base_kwargs = dict(model.kwargs())
    greet = {"role": "user", "content": "Hello"}
    reply = {"role": "assistant", "content": "Hi."}

    def plain(messages: list[dict]) -> tuple[list[dict], dict[str, Any]]:
        return messages, {}

    out: dict[str, Callable[[str], tuple[list[dict], dict[str, Any]]]] = {
        "user content": lambda s: plain([{"role": "user", "content": s}]),
        "assistant content": lambda s: plain([greet, {"role": "assistant", "content": s}, {"role": "user", "content": "ok"}]),
        "last assistant content": lambda s: plain([greet, {"role": "assistant", "content": s}]),
    }
    if model.format not in ("gemma",):
        out["system content"] = lambda s: plain([{"role": "system", "content": s}, greet])
    for name, value in base_kwargs.items():
        if isinstance(value, str):
            out[f"template argument {name}"] = lambda s, name=name: ([greet], {name: s})
    # Every format: a role is written through as text, or rejected; never structure.
    out["role name"] = lambda s: plain([greet, reply, {"role": s, "content": "text"}])
    out["role name after a real role"] = lambda s: plain([{"role": "user" + s, "content": "text"}])
    if model.name.split(" ")[0] in TOOL_MODELS:
        user = {"role": "user", "content": "Weather in Paris?"}

        def with_call(args: Any, result: str = "sunny", fn: str = "get_weather") -> tuple[list[dict], dict[str, Any]]:
            return [
                user,
                {"role": "assistant", "content": "", "tool_calls": [_tool_call(fn, args)]},
                {"role": "tool", "tool_call_id": "abcDEF123", "name": fn, "content": result},
            ], {"tools": [WEATHER_TOOL]}

        out["tool result"] = lambda s: with_call({"city": "Paris"}, s)
        out["tool-call argument (dict)"] = lambda s: with_call({"city": s})
        out["tool-call argument (JSON string)"] = lambda s: with_call(json.dumps({"city": s}))

        def described(s: str) -> tuple[list[dict], dict[str, Any]]:
            tool = json.loads(json.dumps(WEATHER_TOOL))
            tool["function"]["description"] = s
            return [user], {"tools": [tool]}

        out["tool description"] = described
    return out


TOOL_MODELS = {"llama-3.1-8b-instruct", "llama-3.2-3b-instruct", "qwen2.5-7b-instruct", "qwen3-0.6b",
               "mistral-7b-instruct-v0.3", "mistral-nemo-instruct-2407", "deepseek-v3", "gpt-oss-120b"}


def _neutral(value: Any, strings: set[str]) -> Any:
    if isinstance(value, str):
        return "X" if value in strings else value
    if isinstance(value, list):
        return [_neutral(v, strings) for v in value]
    if isinstance(value, dict):
        return {k: _neutral(v, strings) for k, v in value.items()}
    return value


def _interpreted_by_template(model: support.Model, field: str, s: str) -> bool:
    """Cases where the template itself acts on the text (its documented behaviour, in both
    libraries): Qwen3 splits ``<think>...</think>`` out of assistant content and recognizes a
    ``<tool_response>`` wrapper; DeepSeek V3 keeps only what follows ``</think>``."""
    base = model.name.split(" ")[0]
    if base == "qwen3-0.6b":
        return "</think>" in s or "<think>" in s or "tool_response>" in s
    if base == "deepseek-v3":
        return "</think>" in s
    return False


def control_count(model: support.Model, ids) -> int:
    ctrl = support.control_ids(model)
    return sum(1 for t in ids if int(t) in ctrl)


def _encode(model: support.Model, messages: list[dict], agp: bool, kwargs: dict[str, Any]):
    return model.enc.encode_detailed(messages, agp, True, **model.ours_kwargs(**kwargs))


def check_case(model: support.Model, field: str, family: str, s: str, place) -> None:
    messages, extra = place(s)
    kwargs = {**extra}
    agp = messages[-1]["role"] != "assistant"
    try:
        detailed = _encode(model, messages, agp, kwargs)
    except chatids.ChatTemplateError as e:
        COUNTS[(model.name, family, "refused")] += 1
        REFUSALS.setdefault((model.name, field), [0, str(e)])[0] += 1
        with pytest.raises(chatids.ChatTemplateError):
            model.enc.encode(messages, add_generation_prompt=agp, **model.ours_kwargs(**kwargs))
        return
    COUNTS[(model.name, family, "encoded")] += 1
    ctrl = support.control_ids(model)
    leaked = [(i, int(t)) for i, (t, c) in enumerate(zip(detailed.ids, detailed.from_content)) if c and int(t) in ctrl]
    assert not leaked, f"{field} = {s!r}: control ids start in caller text: {leaked[:5]}"
    assert detailed.ids.tolist() == model.enc.encode(messages, add_generation_prompt=agp, **model.ours_kwargs(**kwargs)).tolist()
    if _interpreted_by_template(model, field, s):
        return
    clean_messages, clean_extra = place("X")
    try:
        clean = model.enc.encode(clean_messages, add_generation_prompt=agp, **model.ours_kwargs(**clean_extra))
    except chatids.ChatTemplateError:
        return  # the neutral string is refused (e.g. a role "X"); rule 1 was checked
    got, want = control_count(model, detailed.ids), control_count(model, clean)
    assert got == want, (
        f"{field} = {s!r}: {got} control ids, the same conversation with 'X' there has {want}: "
        f"{model.enc.render(messages, add_generation_prompt=agp, **model.ours_kwargs(**kwargs))!r}"
    )


#: Every checkpoint on its default route, and on the Jinja path where that is not the default.
ROUTES = [(name, generic) for name in support.MODEL_NAMES for generic in (False, True)
          if not (generic and support.MODELS[name][0] == "jinja")]


@pytest.mark.parametrize("name,generic", ROUTES, ids=[f"{n}{'-jinja' if g else ''}" for n, g in ROUTES])
def test_adversarial_text_never_becomes_structure(name: str, generic: bool) -> None:
    model = support.load_model(name, generic=generic)
    strings = families(model)
    failures = []
    for field, place in slots(model).items():
        for family, texts in strings.items():
            for s in texts:
                try:
                    check_case(model, field, family, s, place)
                except AssertionError as e:
                    failures.append(f"[{family}] {e}")
    assert not failures, f"{len(failures)} injections:\n" + "\n".join(failures[:20])


class _Summary:
    def pytest_terminal_summary(self, terminalreporter):
        if not COUNTS:
            return
        tr = terminalreporter
        tr.section("injection: adversarial caller text per family (encoded with no control id from it / refused)")
        fams = sorted({f for _, f, _ in COUNTS})
        models = sorted({m for m, _, _ in COUNTS})
        for fam in fams:
            enc = sum(COUNTS.get((m, fam, "encoded"), 0) for m in models)
            ref = sum(COUNTS.get((m, fam, "refused"), 0) for m in models)
            tr.write_line(f"{fam:45s} {enc:>8d} encoded {ref:>7d} refused")
        tr.write_line(f"({len(models)} routes; any control id from caller text fails its test)")
        for (m, field), (n, why) in sorted(REFUSALS.items()):
            tr.write_line(f"  refused {n:>4d}x {m} / {field}: {why[:110]}")
        out = os.environ.get("CHATIDS_INJECTION_REPORT")
        if out:
            table = {f"{m}|{f}|{o}": n for (m, f, o), n in sorted(COUNTS.items())}
            with open(out, "w") as fh:
                json.dump({"mode": "full" if support.full_conformance() else "sample", "counts": table}, fh, indent=1)


@pytest.fixture(scope="session", autouse=True)
def _report_counts(pytestconfig):
    name = "chatids-injection-summary"
    if not pytestconfig.pluginmanager.has_plugin(name):
        pytestconfig.pluginmanager.register(_Summary(), name)
    yield


def test_families_cover_every_kind_the_threat_model_names() -> None:
    """The families of SECURITY.md, each non-empty for a real checkpoint."""
    model = support.load_model("llama-3.1-8b-instruct")
    fams = families(model)
    assert set(fams) == {
        "verbatim", "prefix (template text could complete it)", "suffix (template text could start it)",
        "zero-width split", "confusable", "normalizes to it (NFC/NFKC)", "nested in itself", "escaped",
    }
    assert all(fams.values())
    assert "x<|eot" in fams["prefix (template text could complete it)"] or any(
        s.startswith("x<|") for s in fams["prefix (template text could complete it)"]
    )


# --- template text that completes a field: none of the shared templates has it, so build them ---

JOIN_MODELS = ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "gemma-3-it", "mistral-7b-instruct-v0.3", "deepseek-v3"]


def _joining_templates(token: str, rng: random.Random) -> Iterator[tuple[str, str, str]]:
    """(template, content, split) where the template's text completes a partial token in content."""
    splits = list(range(1, len(token)))
    if not support.full_conformance():
        splits = rng.sample(splits, min(2, len(splits)))
    for k in splits:
        head, tail = token[:k], token[k:]
        yield "{% for m in messages %}{{ m.content }}" + tail + "{% endfor %}", "x" + head, f"{head!r}+{tail!r}"
        yield "{% for m in messages %}" + head + "{{ m.content }}{% endfor %}", tail + "x", f"{head!r}+{tail!r}"


@pytest.mark.parametrize("name", JOIN_MODELS)
def test_template_text_never_completes_a_token_in_content(name: str) -> None:
    """transformers forms ``<|eot_id|>`` from content ``x<|eot`` and template text ``_id|>``
    (asserted, so the case is a real injection); chatids encodes it as plain text, in
    ``encode`` and ``encode_detailed``, whichever side of the border the token starts on.
    (Special tokens only: they are control tokens whatever the template.)"""
    model = support.load_model(name)
    rng = random.Random(f"chatids-join:{name}")
    special = [t for t, _ in model.enc.control_tokens if t in (model.tok.chat_template or "")]
    special = [t for t in special if t in model.tok.all_special_tokens or t in {a.content for a in model.tok.added_tokens_decoder.values() if a.special}]
    cases = 0
    for token in special[:3]:
        for template, content, split in _joining_templates(token, rng):
            enc = model.enc.with_chat_template(template)
            ctrl = {i for _, i in enc.control_tokens}
            messages = [{"role": "user", "content": content}]
            plain = model.tok.apply_chat_template(messages, chat_template=template, tokenize=True, return_dict=False)
            assert sum(t in ctrl for t in plain) >= 1, (token, split)  # transformers forms a control token
            ids = enc.encode(messages).tolist()
            detailed = enc.encode_detailed(messages)
            assert detailed.ids.tolist() == ids
            assert not [t for t in ids if t in ctrl], (token, split, ids)
            assert enc.encode(messages, sanitize_control_tokens=False).tolist() == list(plain)
            cases += 1
    COUNTS[(model.name, "template text completes a partial token", "encoded")] += cases
    assert cases >= 4
