"""chatids' native BPE core against the tokenizers crate, text for text (issue 7).

Every shared checkpoint's tokenizer runs on the native core (``Encoder.text_encoder ==
"native"``). Each test hands the same texts to both text encoders of one encoder, in the same
process (``Encoder._core._text_differences``: the native core and the ``tokenizers`` crate
pipeline chatids used before it), with every combination of the options chatids encodes with
(added tokens matched or not, at the start of the string or not) and with token start offsets
(which loss masks and provenance use), and fails on any difference. The texts:

* the corpus: every message content, tool argument and tool result, alone and inside the
  template text around it (a fixed sample per file unless ``CHATIDS_CONFORMANCE=full``); these
  are also checked against the ``tokenizers`` package from PyPI, an independent build;
* every Unicode scalar value alone and between letters, digits, spaces, line breaks and
  apostrophes (a deterministic sample unless ``CHATIDS_CONFORMANCE=full``: then all 1,112,064);
* whitespace runs of every kind, long numbers, control-token strings and their fragments;
* random text (hypothesis: ``HYPOTHESIS_PROFILE=ci`` is deterministic, ``full`` runs more);
* pathological inputs: long runs of one character and of characters without merges.

Counts of compared texts are printed at the end of the run.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import random
from collections import defaultdict
from typing import Iterable, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import support

import chatids

#: Texts compared per corpus file in sample mode.
SAMPLE_PER_FILE = 60
#: (add tokens, at start) combinations; the text encoder sees all four from chatids.
OPTIONS = list(itertools.product([True, False], [True, False]))
#: Compared texts per (model, kind).
COUNTS: dict[tuple[str, str], int] = defaultdict(int)

MODEL_NAMES = support.MODEL_NAMES


def _distinct_tokenizers(names: list[str]) -> list[str]:
    """One checkpoint per distinct ``tokenizer.json`` in sample mode: the text encoder reads
    nothing else, so checkpoints that ship the same bytes (Llama 3.1 and 3.2, Qwen2 and 2.5,
    Gemma 3 and the Gemma 2 template on its tokenizer, Mistral Nemo and Small 3) are one test.
    Full runs take every checkpoint."""
    if support.full_conformance():
        return names
    seen: dict[str, str] = {}
    for name in names:
        path, _ = support.model_path(name)
        key = hashlib.sha256((path / "tokenizer.json").read_bytes()).hexdigest() if path else name
        seen.setdefault(key, name)
    return list(seen.values())


#: The checkpoints the per-tokenizer tests run on.
TOKENIZER_NAMES = _distinct_tokenizers(MODEL_NAMES)


class _Summary:
    def pytest_terminal_summary(self, terminalreporter):
        if not COUNTS:
            return
        tr = terminalreporter
        mode = "full" if support.full_conformance() else "sample"
        tr.section(f"native BPE core vs the tokenizers crate ({mode}; texts x 4 option sets, ids and starts)")
        kinds = sorted({k for _, k in COUNTS})
        tr.write_line(f"{'model':32s} " + " ".join(f"{k:>10s}" for k in kinds))
        for name in sorted({m for m, _ in COUNTS}):
            tr.write_line(f"{name:32s} " + " ".join(f"{COUNTS.get((name, k), 0):>10d}" for k in kinds))
        tr.write_line("(texts compared with zero differences; any difference fails its test)")


@pytest.fixture(scope="session", autouse=True)
def _report_counts(pytestconfig):
    name = "chatids-native-bpe-summary"
    if not pytestconfig.pluginmanager.has_plugin(name):
        pytestconfig.pluginmanager.register(_Summary(), name)
    yield


@functools.lru_cache(maxsize=None)
def encoder(name: str) -> chatids.Encoder:
    path = support.require_model_path(name)
    return chatids.Encoder.from_pretrained(str(path), reference="transformers")


def native(name: str) -> chatids.Encoder:
    enc = encoder(name)
    assert enc.text_encoder == "native", enc.explain()
    return enc


def compare(name: str, texts: list[str], kind: str, starts: bool = True, chunk: int = 20000) -> None:
    """Both text encoders on ``texts`` with every option set; fail showing the first differences."""
    enc = native(name)
    bad: list[tuple[str, bool, bool]] = []
    for added, at_start in OPTIONS:
        for lo in range(0, len(texts), chunk):
            part = texts[lo : lo + chunk]
            for i in enc._core._text_differences(part, added, at_start, False):
                bad.append((part[i], added, at_start))
            if starts:
                for i in enc._core._text_differences(part, added, at_start, True):
                    bad.append((part[i], added, at_start))
    if bad:
        lines = [f"{name} ({kind}): {len(bad)} differences in {len(texts)} texts"]
        for text, added, at_start in bad[:5]:
            n_ids, n_starts = enc._core._encode_text(text, "native", added, at_start, True)
            t_ids, t_starts = enc._core._encode_text(text, "tokenizers", added, at_start, True)
            lines.append(f"  text {text[:120]!r} (added_tokens={added}, at_start={at_start})")
            lines.append(f"    native     {n_ids[:30]} starts {n_starts[:30]}")
            lines.append(f"    tokenizers {t_ids[:30]} starts {t_starts[:30]}")
        pytest.fail("\n".join(lines))
    COUNTS[(name, kind)] += len(texts)


def test_every_shared_tokenizer_runs_on_the_native_core() -> None:
    for name in MODEL_NAMES:
        enc = encoder(name)
        assert enc.text_encoder == "native", f"{name}: {enc.explain()}"
        assert "native BPE core" in enc.explain()


def test_the_tokenizers_crate_can_be_forced(monkeypatch) -> None:
    monkeypatch.setenv("CHATIDS_TEXT_ENCODER", "tokenizers")
    path = support.require_model_path("llama-3.1-8b-instruct")
    enc = chatids.Encoder.from_pretrained(str(path))
    assert enc.text_encoder == "tokenizers"
    assert "CHATIDS_TEXT_ENCODER=tokenizers" in enc.explain()
    monkeypatch.delenv("CHATIDS_TEXT_ENCODER")
    fast = chatids.Encoder.from_pretrained(str(path))
    messages = [{"role": "user", "content": "Hello there, 1234 ünïcödé 日本語 <|eot_id|>"}]
    assert fast.text_encoder == "native"
    assert list(fast.encode(messages)) == list(enc.encode(messages))


def _strings(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


@functools.lru_cache(maxsize=None)
def corpus_texts(file_name: str) -> tuple[str, ...]:
    """Every string of the file's messages and tools (content, arguments, results, names), or a
    deterministic sample of them."""
    path, reason = support.data_dir()
    assert path is not None, reason
    texts: list[str] = []
    for line in open(path / file_name, encoding="utf-8"):
        row = json.loads(line)
        for s in _strings([row.get("messages"), row.get("tools")]):
            if s:
                texts.append(s)
    texts = list(dict.fromkeys(texts))
    if not support.full_conformance() and len(texts) > SAMPLE_PER_FILE:
        picked = random.Random(f"chatids-native:{file_name}").sample(range(len(texts)), SAMPLE_PER_FILE)
        texts = [texts[i] for i in sorted(picked)]
    return tuple(texts)


#: Template text that surrounds content in the formats, so the text encoder sees the joins.
WRAPPERS = [
    "{}",
    " {}",
    "\n\n{}",
    "{} ",
    "{}\n",
    "user\n{}\n",
    "[INST] {} [/INST]",
    "<start_of_turn>user\n{}<end_of_turn>\n",
    "<|im_start|>user\n{}<|im_end|>\n",
    '{{"name": "f", "arguments": {}}}',
]


@pytest.mark.parametrize("corpus_file", support.corpus_files() or ["<no corpus>"])
@pytest.mark.parametrize("name", TOKENIZER_NAMES)
def test_corpus(name: str, corpus_file: str) -> None:
    support.require_corpus(corpus_file)
    texts = list(corpus_texts(corpus_file))
    compare(name, texts, "corpus")
    wrappers = WRAPPERS[1:] if support.full_conformance() else WRAPPERS[1::2]
    wrapped = [w.format(t) for t in texts for w in wrappers]
    compare(name, wrapped, "wrapped", starts=False)


@pytest.mark.parametrize("name", TOKENIZER_NAMES)
def test_corpus_sample_equals_the_tokenizers_package(name: str) -> None:
    """An independent build of the same pipeline: the PyPI ``tokenizers`` package, loaded from the
    tokenizer chatids runs, without special tokens."""
    tokenizers = pytest.importorskip("tokenizers")
    files = support.corpus_files()
    if not files:
        support.missing("conversation corpus not found")
    enc = native(name)
    reference = tokenizers.Tokenizer.from_str(enc._core.tokenizer_json())
    texts = [t for f in files for t in corpus_texts(f)[:60]]
    for text in texts:
        ids, _ = enc._core._encode_text(text, "native", True, True, False)
        expected = reference.encode(text, add_special_tokens=False).ids
        assert ids == expected, f"{name}: {text[:200]!r}"
    COUNTS[(name, "pypi")] += len(texts)


#: Contexts each scalar value is put in ({} is the character).
CONTEXTS = ["{}", "a{}b", "1{}2", " {} ", "\n{}\n", "'{}", "A{}a", "{}{}", "x {}y"]


def scalar_values() -> list[str]:
    """All scalar values (full mode) or the first 0x800 plus every 97th of the rest."""
    full = support.full_conformance()
    return [
        chr(cp)
        for cp in range(0x110000)
        if not 0xD800 <= cp <= 0xDFFF and (full or cp < 0x800 or cp % 251 == 0)
    ]


@pytest.mark.parametrize("name", TOKENIZER_NAMES)
def test_every_scalar_value_in_context(name: str) -> None:
    chars = scalar_values()
    for context in CONTEXTS:
        texts = [context.replace("{}", c) for c in chars]
        compare(name, texts, "scalars", starts=context in ("{}", "a{}b"))


def _not_nfc_texts() -> list[str]:
    """Texts NFC changes: every scalar value NFC maps to something else (by Python's tables),
    alone and in context, and the cases of the normalization's alignments: marks that compose,
    reorder, expand (one character to two) or follow an added token, Hangul jamo, and
    characters newer than the crate's Unicode 9 tables."""
    import unicodedata

    changed = [chr(cp) for cp in range(0x110000)
               if not 0xD800 <= cp <= 0xDFFF and unicodedata.normalize("NFC", chr(cp)) != chr(cp)]
    cases = [
        "e\u0301", "Cafe\u0301 au lait", "a\u0316\u0301b", "a\u0301\u0316b", "o\u0308\u0304 x",
        "\u1100\u1161\u11a8 \u1100\u1161", "\u0344\u0344a", "\u0f73\u0f75", "\ufb2c\ufb2d",
        "\u0958\u0959 \u0915\u093c", "\u2126\u212b", "\uf900\uf901 \u8c48", "\U0002f800\U0002f801",
        "\u0301start", " \u0301", "\u0301\u0301\u0301e", "A\u030a\u0327\u0301",
        "<|im_end|>\u0301", "<|im_end|>e\u0301<|im_start|>", "\u0301<|im_end|>\u0301",
        "<|endoftext|>\u0344", "e\u0301" * 40, "\U0001e900\U0001e944 e\u0301",
        "\u0d00\u0d3b e\u0301", "\U00011f00\U00011f41a\u0301", "x\u0334\u0301\u0327y",
        "日本\u3099\u304b\u3099", "\u304b\u3099\u309a", "1\u20dd\u0301 2",
    ]
    texts = cases + changed
    texts += [context.replace("{}", c) for c in changed for context in ("a{}b", " {}\u0301", "\u0301{}e\u0301")]
    return texts


@pytest.mark.parametrize("name", TOKENIZER_NAMES)
def test_text_that_is_not_nfc(name: str) -> None:
    """Qwen2's NFC runs in the native core (issue 23): text NFC changes is normalized there, by
    the crate's own tables, and its token starts follow the crate's alignments; the PyPI
    ``tokenizers`` package is the second reference for the ids."""
    texts = _not_nfc_texts()
    compare(name, texts, "not NFC")
    tokenizers = pytest.importorskip("tokenizers")
    enc = native(name)
    reference = tokenizers.Tokenizer.from_str(enc._core.tokenizer_json())
    for text in texts[:: 1 if support.full_conformance() else 7]:
        ids, _ = enc._core._encode_text(text, "native", True, True, False)
        assert ids == reference.encode(text, add_special_tokens=False).ids, f"{name}: {text!r}"


WHITESPACE = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x85", "\xa0", "\u1680", "\u2000", "\u2009", "\u200a",
              "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u200b", "\u180e", "\ufeff", "\u2581"]


@pytest.mark.parametrize("name", TOKENIZER_NAMES)
def test_whitespace_runs(name: str) -> None:
    runs = ["".join(p) for n in (1, 2, 3) for p in itertools.product(WHITESPACE, repeat=n)]
    if not support.full_conformance():  # every run of one or two, a fixed quarter of the threes
        runs = [r for i, r in enumerate(runs) if len(r) < 3 or i % 4 == 0]
    texts = []
    for run in runs:
        texts += [run, "a" + run, run + "a", "a" + run + "b", "1" + run + "!", run * 5, "x" + run * 3 + "\n"]
    compare(name, texts, "whitespace")


@pytest.mark.parametrize("name", TOKENIZER_NAMES)
def test_long_numbers(name: str) -> None:
    rng = random.Random(7)
    digit_sets = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "０１２３４５６７８９", "¼½¾²³", "𝟘𝟙𝟚𝟛"]
    texts = []
    for digits in digit_sets:
        for n in list(range(1, 40)) + [100, 1000]:
            number = "".join(rng.choice(digits) for _ in range(n))
            texts += [number, f"x{number}y", f" {number} ", f"{number}.{number}", f"-{number},{number}", f"{number}\n"]
    compare(name, texts, "numbers")


@pytest.mark.parametrize("name", TOKENIZER_NAMES)
def test_control_token_strings(name: str) -> None:
    """Added-token texts whole, cut, joined and surrounded: the added-token rules of the crate."""
    enc = native(name)
    added = json.loads(enc._core.tokenizer_json()).get("added_tokens", [])
    tokens = [t for t, _ in enc.control_tokens] + [t["content"] for t in added[:300]]
    texts = []
    for t in dict.fromkeys(tokens):
        texts += [t, t + t, f"a{t}b", f" {t} ", f"\n{t}\n", t[:-1], t[1:], t[: len(t) // 2], f"x{t[:-1]}{t}"]
    compare(name, texts, "added")


def _pathological(size: int) -> list[str]:
    rng = random.Random(11)
    no_merges = "".join(chr(rng.randrange(0xE000, 0xF8FF)) for _ in range(size // 3))
    rare = "".join(chr(rng.choice([0x10400 + i for i in range(80)] + [0x1F300 + i for i in range(200)])) for _ in range(size // 4))
    return [
        "a" * size,
        " " * size,
        "\n" * size,
        "1" * size,
        "!" * size,
        "日" * (size // 3),
        "\u0301" * (size // 2),
        "ab" * (size // 2),
        " a" * (size // 2),
        "\u2581" * (size // 3),
        no_merges,
        rare,
    ]


@pytest.mark.parametrize("name", TOKENIZER_NAMES)
def test_pathological_inputs(name: str) -> None:
    """Long runs (1 MiB in full mode, 64 KiB otherwise): same ids; their time is in BENCHMARKS.md."""
    size = (1 << 20) if support.full_conformance() else (1 << 16)
    compare(name, _pathological(size), "long", starts=False, chunk=1)


#: Characters hypothesis draws from besides arbitrary text: the classes the patterns split on.
ALPHABET = list("aZ0' \n\r\t.,!?-/_") + ["ſ", "İ", "ǅ", "ʰ", "\u0301", "\u0663", "日", "ア", "\u2581", "\u00a0",
                                          "\u3000", "\u200b", "😀", "'s", "'LL", "<|", "|>", "<", ">"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(st.text(max_size=40), st.lists(st.sampled_from(ALPHABET), max_size=40).map("".join)),
        min_size=1,
        max_size=20,
    )
)
def test_random_text_on_every_tokenizer(pieces: list[str]) -> None:
    texts = pieces + ["".join(pieces)]
    for name in TOKENIZER_NAMES:
        compare(name, texts, "random")
