"""SentencePiece BPE: the Rust encoder against the `sentencepiece` package, id for id.

``chatids._core._sentencepiece_encode(model_path, texts)`` must give, for every text, the ids of
``SentencePieceProcessor(model_file=model_path).encode(text)`` (no bos/eos, no sampling).

Models: the SentencePiece files that ship inside mistral-common (v1, v2, v3, v7, v7m1) and
Llama 2's ``tokenizer.model`` (``$CHATIDS_DATA_DIR/sources/llama2-tokenizer``), plus variants of
them written at test time for the settings those files do not use (UNUSED and extra
USER_DEFINED pieces, ties and signed zeros in the scores, the other normalizer options, no byte
fallback). Texts: every message content of the conversation corpus (a fixed sample of
``SAMPLE_PER_FILE`` per file unless ``CHATIDS_CONFORMANCE=full``), generated edge cases, and
hypothesis (``HYPOTHESIS_PROFILE=ci`` is deterministic; ``full`` runs ten times more).
The counts of compared texts are printed at the end of the run.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import support

spm = pytest.importorskip("sentencepiece")
from sentencepiece import sentencepiece_model_pb2 as model_pb2  # noqa: E402

import chatids  # noqa: E402
from chatids import _core  # noqa: E402

#: Message contents compared per corpus file in sample mode.
SAMPLE_PER_FILE = 300
#: Message contents per corpus file for each variant model.
VARIANT_SAMPLE_PER_FILE = 40

_MC_SPEC = importlib.util.find_spec("mistral_common")
MC_DATA = Path(list(_MC_SPEC.submodule_search_locations)[0]) / "data" if _MC_SPEC else None

#: Model name -> ("mc", file in mistral_common/data) or ("data", path under CHATIDS_DATA_DIR).
MODEL_FILES: dict[str, tuple[str, str]] = {
    "mistral-v1": ("mc", "tokenizer.model.v1"),
    "mistral-v2": ("mc", "mistral_instruct_tokenizer_240216.model.v2"),
    "mistral-v3": ("mc", "mistral_instruct_tokenizer_240323.model.v3"),
    "mistral-v7": ("mc", "mistral_instruct_tokenizer_241114.model.v7"),
    "mistral-v7m1": ("mc", "mistral_instruct_tokenizer_241114.model.v7m1"),
    "llama-2": ("data", "sources/llama2-tokenizer/tokenizer.model"),
}
MODEL_NAMES = list(MODEL_FILES)

#: Texts of the CONTROL, USER_DEFINED, UNKNOWN and BYTE pieces of these models (and near misses).
SPECIAL_TEXTS = [
    "<s>", "</s>", "<unk>", "<0x41>", "<0x0A>", "[INST]", "[/INST]", "[TOOL_CALLS]",
    "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]",
    "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[REF]", "[/REF]", "[REFERENCE_DOC_0]",
    "[REFERENCE_DOC_3]", "[REFERENCE_DOC_19]", "[REFERENCE_DOC_20]", "[control_8]",
    "[control_746]", "[IMG]", "[INST", "INST]", "[REFERENCE_DOC_", "[/REF",
]

#: Compared texts: (model or variant, kind) -> count.
COUNTS: dict[tuple[str, str], int] = defaultdict(int)


class _Summary:
    """Prints COUNTS at the end of the run (registered by the session fixture below)."""

    def pytest_terminal_summary(self, terminalreporter):
        if not COUNTS:
            return
        tr = terminalreporter
        mode = "full" if support.full_conformance() else f"sample ({SAMPLE_PER_FILE}/file)"
        tr.section(f"sentencepiece BPE vs the sentencepiece package (corpus {mode})")
        kinds = sorted({k for _, k in COUNTS})
        tr.write_line(f"{'model':36s} " + " ".join(f"{k:>11s}" for k in kinds))
        for name in sorted({m for m, _ in COUNTS}):
            tr.write_line(f"{name:36s} " + " ".join(f"{COUNTS.get((name, k), 0):>11d}" for k in kinds))
        tr.write_line("(texts compared with equal ids; any difference fails its test)")


@pytest.fixture(scope="session", autouse=True)
def _report_counts(pytestconfig):
    name = "chatids-sentencepiece-summary"
    if not pytestconfig.pluginmanager.has_plugin(name):
        pytestconfig.pluginmanager.register(_Summary(), name)
    yield


def _missing(reason: str) -> None:
    if support.require_models():
        pytest.fail(reason)
    pytest.skip(reason)


def model_path(name: str) -> Path:
    where, rel = MODEL_FILES[name]
    if where == "mc":
        if MC_DATA is None:
            _missing("mistral_common is not installed (its data holds the Mistral .model files)")
        path = MC_DATA / rel
    else:
        base = os.environ.get("CHATIDS_DATA_DIR")
        if not base:
            _missing("CHATIDS_DATA_DIR is not set")
        path = Path(base) / rel
    if not path.is_file():
        _missing(f"{path} does not exist")
    return path


@functools.lru_cache(maxsize=None)
def reference(path: str):
    return spm.SentencePieceProcessor(model_file=path)


def compare(path: Path, texts: list[str], label: str, kind: str) -> None:
    """Encode `texts` with both encoders; fail listing the first differences."""
    got = _core._sentencepiece_encode(str(path), texts)
    sp = reference(str(path))
    assert len(got) == len(texts)
    bad = []
    for i, text in enumerate(texts):
        expected = sp.encode(text)
        if list(got[i]) != expected:
            bad.append((text, expected, list(got[i])))
    COUNTS[(label, kind)] += len(texts) - len(bad)
    if bad:
        lines = [f"{label} ({kind}): {len(bad)} of {len(texts)} texts differ"]
        for text, expected, actual in bad[:5]:
            lines.append(f"  text     {text[:200]!r}")
            lines.append(f"  expected {[sp.id_to_piece(i) for i in expected][:40]}")
            lines.append(f"  got      {[sp.id_to_piece(i) for i in actual if i < sp.get_piece_size()][:40]}")
        pytest.fail("\n".join(lines))


def corpus_texts(per_file: Optional[int]) -> dict[str, list[str]]:
    """Message contents of every corpus file: all, or a fixed sample of `per_file`."""
    path, reason = support.data_dir()
    if path is None:
        _missing(reason)
    out = {}
    for file in support.corpus_files():
        texts = []
        with open(path / file, encoding="utf-8") as f:
            for line in f:
                for message in json.loads(line).get("messages") or []:
                    if isinstance(message, dict) and isinstance(message.get("content"), str):
                        texts.append(message["content"])
        if per_file is not None and len(texts) > per_file:
            picked = random.Random(f"chatids-sentencepiece:{file}").sample(range(len(texts)), per_file)
            texts = [texts[i] for i in sorted(picked)]
        out[file] = texts
    if not out:
        _missing(f"no *.jsonl in {path}")
    return out


def special_texts(path: Path) -> list[str]:
    """The texts of the model's CONTROL, UNKNOWN, USER_DEFINED and BYTE pieces."""
    proto = model_pb2.ModelProto()
    proto.ParseFromString(path.read_bytes())
    return [p.piece for p in proto.pieces if p.type in (2, 3, 4, 6)]


def generated_texts(specials: list[str]) -> list[str]:
    """Edge cases: whitespace, digits, special piece texts in context, byte fallback, long runs."""
    ws = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r", "\u3000", "\u00a0", "\u2009",
          "\u200b", "\x0b", "\x0c", "\x1c", "\u2028", "\u2581", " \n ", " \t\n\r\n\u3000\u00a0 "]
    out = ["", " ", "\u2581", "\u2581\u2581", " \u2581 ", "a\u2581b", "\u2581hello", "hello\u2581", "\u2581 \u2581"]
    for w in ws:
        for n in (1, 2, 3, 8, 17):
            out += [w * n, "a" + w * n, w * n + "a", "a" + w * n + "b", w * n + "a" + w * n]
    for n in range(1, 25):
        out += ["1" * n, "0123456789"[: n % 11] * 2, "x" + "9" * n, " " + "7" * n + " ", "3.14159" * n, f"{10**n}"]
    for s in sorted(set(specials) | set(SPECIAL_TEXTS)):
        out += [s, " " + s, s + " ", "a " + s + " b", s + "x", "x" + s, s + s, s + " " + s, s[:-1], s[1:],
                "\n" + s + "\n", s.lower(), "\u2581" + s, s + "\u2581"]
    out += ["😀", "👩‍💻", "🙂 hi 🙂", "𠀀𠀁", "\U0010ffff", "\U0001f600" * 10, "\x00", "a\x00b", "\x00\x00",
            "\uffff", "\ufffe", "\ufeff", "\ue000", "龘", "鱻", "齉", "丠", "ꙮ", "𓀀", "\U000e0001", "\x7f", "\x80",
            "\u0300", "\ud7ff", "\ue000\uf8ff"]
    out += ["a" * 5000, "ab" * 2000, " " * 3000, "\n" * 1000, "\u2581" * 1000, "😀" * 500, "1" * 3000,
            "ababab " * 500, "é" * 1000, "aaaa bbbb " * 300, "\u3000" * 500]
    out += ["e\u0301", "a\u0300\u0301\u0302\u0303", "n\u0303o\u0308", "\u1100\u1161\u11a8", "Å", "\u212b", "ﬁ",
            "①", "Ⅷ", "ｈｅｌｌｏ", "Z\u0351\u0352\u0357\u0358"]
    out += ["שלום עולם", "مرحبا بالعالم", "\u202eabc\u202c", "\u200fא\u200e", "العربية 123 English", "עברית (Hebrew)"]
    out += ["def f(x):\n    return x\n", "\tif x:\n\t\ty = 1\n", "    " * 10 + "x", "```python\nprint('hi')\n```",
            "<div>\n  <p>hi</p>\n</div>", "for i in range(10):\n\tprint(i)  # comment\n", "  leading", "trailing  "]
    out += ["Hello world", "hello", "Hello, World!", "don't", "I'm", "你好世界", "こんにちは", "Привет мир",
            "안녕하세요", "ภาษาไทย", "हिन्दी", "Ελληνικά", "ქართული", "መልካም"]
    return out


# ---------------------------------------------------------------------------------------------
# The six model files.


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_corpus_messages(name):
    """Every message content of the corpus (or the fixed sample) gives equal ids."""
    path = model_path(name)
    per_file = None if support.full_conformance() else SAMPLE_PER_FILE
    texts = [t for file_texts in corpus_texts(per_file).values() for t in file_texts]
    compare(path, texts, name, "corpus")


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_generated_strings(name):
    """Whitespace of every kind, digits, the special pieces in context, byte fallback, long runs."""
    path = model_path(name)
    compare(path, generated_texts(special_texts(path)), name, "generated")


PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "dev")
EXAMPLES = 2000 if PROFILE == "full" else 100

WHITESPACE = st.sampled_from([" ", "  ", "\t", "\n", "\n\n", "\r\n", "\u3000", "\u00a0", "\u2581", "\x0b",
                              "\x1c", " \n ", "    "])
SCRIPTS = st.sampled_from(["hello", "world", "the", "你好", "世界", "こんにちは", "Привет", "🙂", "👩‍💻",
                           "e\u0301", "\u212b", "123", "3.14", "don't", "```py", "\x00", "\U0010ffff"])
SPECIALS = st.sampled_from(SPECIAL_TEXTS)
FRAGMENT = st.one_of(
    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=10),
    st.text(st.characters(max_codepoint=0x2fff, exclude_categories=("Cs",)), max_size=10),
    st.text(alphabet="ab1 \u2581\n", max_size=20),
    WHITESPACE,
    SCRIPTS,
    SPECIALS,
    SPECIALS.flatmap(lambda t: st.integers(1, len(t) - 1).map(lambda k: t[:k])),
    SPECIALS.flatmap(lambda t: st.integers(1, len(t) - 1).map(lambda k: t[k:])),
)
TEXT = st.lists(FRAGMENT, max_size=8).map("".join)


@pytest.mark.parametrize("name", MODEL_NAMES)
@settings(max_examples=EXAMPLES, derandomize=PROFILE == "ci", deadline=None,
          suppress_health_check=list(HealthCheck), print_blob=True)
@given(texts=st.lists(TEXT, min_size=1, max_size=6))
def test_random_text(name, texts):
    """Random Unicode text mixed with whitespace runs and the special piece texts."""
    compare(model_path(name), texts, name, "hypothesis")


@pytest.mark.parametrize("name", ["llama-2", "mistral-v7"])
def test_long_runs_are_fast(name):
    """5,000 repeated characters encode in well under 50 ms (the merge loop is not quadratic)."""
    path = model_path(name)
    _core._sentencepiece_encode(str(path), [""])  # warm up
    start = time.perf_counter()
    _core._sentencepiece_encode(str(path), [""])
    load = time.perf_counter() - start
    for text in ["a" * 5000, "ab" * 2500, " " * 5000, "\u3000" * 5000]:
        start = time.perf_counter()
        _core._sentencepiece_encode(str(path), [text] * 10)
        per_text = (time.perf_counter() - start - load) / 10
        assert per_text < 0.05, f"{text[:4]!r}... took {per_text * 1e3:.1f} ms"
    compare(path, ["a" * 200_000, "ab " * 50_000], name, "long")


# ---------------------------------------------------------------------------------------------
# Variants: the settings the shipped files do not use, on copies of Llama 2 and Mistral v7.


def _base(name: str):
    proto = model_pb2.ModelProto()
    proto.ParseFromString(model_path(name).read_bytes())
    return proto


def _mark_unused(share: float, seed: int, extra: tuple[str, ...] = ()) -> Callable:
    def mutate(p):
        rng = random.Random(seed)
        for x in p.pieces:
            if x.type == 1 and (x.piece in extra or (len(x.piece) > 1 and rng.random() < share)):
                x.type = 5  # UNUSED
    return mutate


def _scores(choices: list[float], seed: int) -> Callable:
    def mutate(p):
        rng = random.Random(seed)
        for x in p.pieces:
            if x.type == 1:
                x.score = rng.choice(choices)
    return mutate


def _user_defined(p):
    have = {x.piece: x for x in p.pieces}
    for text in ["\u2581the", "ing", "\u2581\u2581", "\u2581\u2581\u2581\u2581", "\n", "1", "ab", "abc", "abcd",
                 "[REF", "hello world", "\u2581world", "😀", "x\u2581y", "🙂🙂", "abcdefgh", "\u2581[REF]"]:
        if text in have:
            have[text].type = 4
        else:
            p.pieces.add(piece=text, score=0.0, type=4)


def _set(**fields) -> Callable:
    """Set fields of the normalizer spec or, for the others, the trainer spec."""
    normalizer_fields = {f.name for f in model_pb2.NormalizerSpec.DESCRIPTOR.fields}

    def mutate(p):
        for key, value in fields.items():
            setattr(p.normalizer_spec if key in normalizer_fields else p.trainer_spec, key, value)
    return mutate


def _no_byte_fallback(p):
    p.trainer_spec.byte_fallback = False
    for x in p.pieces:
        if x.type == 6:
            x.type = 1


def _control_chars(p):
    for x in p.pieces:
        if x.piece in ("e", "\u2581", "1"):
            x.type = 3  # CONTROL: a character with a CONTROL piece counts as unknown


def _extra_pieces(p):
    # Pieces made of characters that have no piece of their own (merged by text), and "\0"
    # (kept as an UNUSED piece when byte fallback is on).
    for text, score in [("a😀", 10.0), ("😀😀", 10.0), ("☃b", -0.5), ("\x00", -1.0)]:
        p.pieces.add(piece=text, score=score, type=1)


def _chain(*mutations: Callable) -> Callable:
    def mutate(p):
        for m in mutations:
            m(p)
    return mutate


VARIANTS: dict[str, tuple[str, Callable]] = {
    "unused-15%": ("llama-2", _mark_unused(0.15, 1, ("a", "\u2581t", "e"))),
    "unused-30%-v7": ("mistral-v7", _mark_unused(0.30, 2)),
    "unused-no-byte-fallback": ("llama-2", _chain(_mark_unused(0.2, 3, ("e",)), _no_byte_fallback)),
    "user-defined": ("mistral-v7", _user_defined),
    "all-scores-tied": ("llama-2", _scores([0.0], 0)),
    "signed-zero-ties": ("llama-2", _scores([-0.0, 0.0, -1.0, -2.0], 3)),
    "nan-and-inf-scores": ("llama-2", _scores([float("nan"), -float("nan"), float("inf"), -float("inf"), -1.0, 0.0], 4)),
    "remove-extra-whitespaces": ("llama-2", _set(remove_extra_whitespaces=True)),
    "remove-extra-whitespaces-ud": ("mistral-v7", _chain(_set(remove_extra_whitespaces=True), _user_defined)),
    "no-dummy-prefix": ("llama-2", _set(add_dummy_prefix=False)),
    "no-escape-whitespaces": ("llama-2", _set(escape_whitespaces=False)),
    "whitespace-as-suffix": ("llama-2", _set(treat_whitespace_as_suffix=True)),
    "no-byte-fallback": ("llama-2", _no_byte_fallback),
    "control-characters": ("llama-2", _control_chars),
    "extra-pieces": ("llama-2", _extra_pieces),
}


@pytest.fixture(scope="session")
def variant_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("sentencepiece-variants")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variant_models(variant, variant_dir):
    """Modified copies of the shipped models: the rarer settings, still equal ids."""
    base, mutate = VARIANTS[variant]
    proto = _base(base)
    mutate(proto)
    path = variant_dir / f"{variant}.model"
    path.write_bytes(proto.SerializeToString())
    texts = [t for file_texts in corpus_texts(VARIANT_SAMPLE_PER_FILE).values() for t in file_texts]
    texts += generated_texts(special_texts(path))
    texts += ["e", "ee", "eeee", "e😀", "ee😀😀", "a😀", "😀😀", "x😀😀😀", "☃b", "ab☃b", "the 1e", "\x00", "a\x00b",
              "  hello   world  ", " ", "\u2581", "abcabc abcd ababab"]
    compare(path, texts, f"variant:{variant}", "texts")


# ---------------------------------------------------------------------------------------------
# Loading: refuse what sentencepiece refuses; refuse clearly what this encoder does not implement.


def _add(text, type_=1, score=-1.0):
    return lambda p: p.pieces.add(piece=text, score=score, type=type_)


def _retype(text, type_):
    def mutate(p):
        for x in p.pieces:
            if x.piece == text:
                x.type = type_
    return mutate


def _rename(old, new):
    def mutate(p):
        for x in p.pieces:
            if x.piece == old:
                x.piece = new
    return mutate


REFUSED: dict[str, Callable] = {
    "duplicate-piece": _add("\u2581the"),
    "duplicate-across-types": _add("\u2581the", 3),
    "no-unknown-piece-without-fallback": _chain(_no_byte_fallback, _retype("<unk>", 3)),
    "two-unknown-pieces": _add("<unk2>", 2),
    "byte-piece-without-fallback": _set(byte_fallback=False),
    "missing-byte-piece": _retype("<0x41>", 1),
    "lowercase-byte-piece": _rename("<0x0A>", "<0x0a>"),
    "bad-byte-piece": _rename("<0x0A>", "<0xZZ>"),
    "empty-piece": _add(""),
    "nul-in-piece": _add("a\x00"),
    "nul-piece-without-fallback": _chain(_no_byte_fallback, _add("\x00")),
    "piece-too-long": _add("x" * 8000),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refuses_what_sentencepiece_refuses(case, variant_dir):
    proto = _base("llama-2")
    REFUSED[case](proto)
    path = variant_dir / f"refused-{case}.model"
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(Exception):
        spm.SentencePieceProcessor(model_file=str(path))
    with pytest.raises(chatids.CheckpointError):
        _core._sentencepiece_encode(str(path), ["hello"])


@pytest.mark.parametrize("data", [b"", b"not a model", b"\x0a\xff\xff\xff\x0f"])
def test_refuses_bytes_that_are_not_a_model(data, variant_dir):
    path = variant_dir / "garbage.model"
    path.write_bytes(data)
    with pytest.raises(Exception):
        spm.SentencePieceProcessor(model_file=str(path))
    with pytest.raises(chatids.CheckpointError):
        _core._sentencepiece_encode(str(path), ["hello"])


def test_truncated_model_is_refused(variant_dir):
    data = model_path("llama-2").read_bytes()
    path = variant_dir / "truncated.model"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(chatids.CheckpointError):
        _core._sentencepiece_encode(str(path), ["hello"])


@pytest.mark.parametrize(
    "case, mutate, words",
    [
        ("unigram", _set(model_type=1), "UNIGRAM"),
        ("charsmap", lambda p: setattr(p.normalizer_spec, "precompiled_charsmap", b"\x00" * 16), "charsmap"),
        # sentencepiece 0.2.3 loads a byte-fallback model without an UNKNOWN piece (unk_id -1).
        ("no-unknown-piece", _retype("<unk>", 3), "unk is not defined"),
    ],
)
def test_refuses_unsupported_models(case, mutate, words, variant_dir):
    proto = _base("llama-2")
    mutate(proto)
    path = variant_dir / f"unsupported-{case}.model"
    path.write_bytes(proto.SerializeToString())
    with pytest.raises(chatids.CheckpointError, match=words):
        _core._sentencepiece_encode(str(path), ["hello"])


def test_missing_file_is_refused(tmp_path):
    with pytest.raises(chatids.CheckpointError, match="cannot read"):
        _core._sentencepiece_encode(str(tmp_path / "nope.model"), ["hello"])
