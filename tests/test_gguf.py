"""GGUF files: the tokenizer chatids rebuilds from llama.cpp's metadata, against transformers.

For each case a small GGUF (metadata only, no tensors) is written at test time with the
``gguf`` package from a checkpoint of ``$CHATIDS_MODELS_DIR``, the way llama.cpp's
``convert_hf_to_gguf.py`` writes it: ``general.architecture``, ``tokenizer.ggml.model/pre/
tokens/token_type/scores/merges``, the special token ids, ``add_bos_token`` and the chat template.
Byte-level vocabularies follow ``get_vocab_base`` (added tokens typed CONTROL or USER_DEFINED,
``[PADn]`` UNUSED tokens up to the model's embedding size); SentencePiece ones follow
``_create_vocab_sentencepiece`` (from Llama 2's ``tokenizer.model`` in
``$CHATIDS_DATA_DIR/sources/llama2-tokenizer``), or, for checkpoints shipped here without a
``tokenizer.model``, the same types with scores that follow the vocabulary order.

The reference is transformers' own GGUF loader, ``AutoTokenizer.from_pretrained(dir,
gguf_file=name)``, run in a subprocess: it imports torch and checks for it although a tokenizer
reads no tensor, so where torch is not installed the subprocess stubs it. Compared:

* the rebuilt tokenizer (``_core._gguf_tokenizer_json``) serialized, component for component,
  against transformers' backend tokenizer (vocabulary, merges in order, added tokens and
  flags, normalizer, pre-tokenizer, post-processor, decoder);
* the ids of a deterministic sample of message contents from the conversation corpus, edge
  strings and strings holding the model's special tokens, without and with special tokens;
* for byte-level vocabularies also against the checkpoint's own ``tokenizer.json``, up to the
  three changes transformers' GGUF path makes (asserted exactly, see
  ``_as_transformers_gguf_builds_it``): its BPE does not ignore merges (Llama 3's
  ``tokenizer.json`` does: a few texts in a thousand encode differently), a Qwen GGUF loses the
  NFC normalizer, and a Llama 3 GGUF gets ``<|endoftext|>`` appended as id 128256
  (``GPT2Tokenizer``'s default special token). A SentencePiece GGUF is not compared with the
  checkpoint: transformers rebuilds it as ``LlamaTokenizer`` with merges derived from the scores,
  which differs from the checkpoint's ``tokenizer.json`` around special-token text and runs of
  spaces;
* ``chatids.Encoder.from_pretrained(file.gguf)`` against ``apply_chat_template`` of the GGUF
  tokenizer on corpus conversations;
* broken files (truncated, wrong magic, big-endian, no chat template, unsupported tokenizer):
  a clean ``chatids.CheckpointError``.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any, Optional

import pytest

import support

gguf = pytest.importorskip("gguf")
from tokenizers import Tokenizer  # noqa: E402

import chatids  # noqa: E402
from chatids import _core  # noqa: E402

#: Message contents compared per corpus file.
SAMPLE_PER_FILE = 25
#: Conversations compared end to end per corpus file.
CHATS_PER_FILE = 3
#: Texts also compared with add_special_tokens=True.
WITH_SPECIAL = 40

LLAMA2_MODEL = "sources/llama2-tokenizer/tokenizer.model"


class Case:
    def __init__(self, model: str, kind: str, architecture: str, pre: str = "default", vocab_size: Optional[int] = None, fmt: str = "") -> None:
        self.model = model  # checkpoint directory name (support.MODELS)
        self.kind = kind  # "bpe" | "spm-model" | "spm-json"
        self.architecture = architecture
        self.pre = pre
        self.vocab_size = vocab_size  # the model's embedding rows (config.json), for [PADn] tokens
        self.fmt = fmt or support.MODELS[model][0]


CASES: dict[str, Case] = {
    "llama-3.1": Case("llama-3.1-8b-instruct", "bpe", "llama", "llama-bpe"),
    "qwen2.5": Case("qwen2.5-7b-instruct", "bpe", "qwen2", "qwen2", vocab_size=152064),
    "qwen3": Case("qwen3-0.6b", "bpe", "qwen3", "qwen2", vocab_size=151936),
    "llama-2": Case("llama-2-7b-chat", "spm-model", "llama"),
    # Llama 2's vocabulary under architecture phi3: transformers' Phi-3 builder (prefix space
    # from a normalizer instead of Metaspace).
    "phi3-on-llama-2": Case("llama-2-7b-chat", "spm-model", "phi3"),
    "mistral-v0.3": Case("mistral-7b-instruct-v0.3", "spm-json", "llama"),
    "gemma-3": Case("gemma-3-it", "spm-json", "gemma3"),
}

#: Strings every case is compared on, besides the corpus.
EDGE_TEXTS = [
    "", " ", "  ", "   ", "\n", "\n\n", "\n\n\n", " \n", "\n ", "\t", " \t \n", "\r\n", "a\r\nb",
    "hello", " hello", "hello ", "  hello  world  ", "Hello,\tworld!\n", "a  b   c    d",
    "I'm here; we'll go. They've 'S 'T 'RE'LL", "don't DON'T", "3.14159 and 1234567890 and 12 345",
    "e\u0301", "\u00e9", "A\u030a", "\u212b", "\ufb01", "\u2460", "ｆｕｌｌ", "x\u200by", "\u00a0nbsp\u00a0",
    "日本語のテキストです。", "中文，标点。", "한국어 텍스트", "العربية", "עברית", "ไทย", "Ελληνικά",
    "🦙🦙 🚀", "👍🏽👩\u200d👩\u200d👧", "\U0001f600" * 5, "\u2581", "\u2581\u2581hi", " \u2581 ",
    "<0x0A>", "<0x41>", "Ġhello", "ĊĊ", "[PAD5]", "▁▁▁▁", "  \n\n  \t  ", "\x00\x01\x7f", "\ud7ff\ue000\uffff",
    "```python\ndef f(x):\n    return x  # comment\n```", "{\"key\": [1, 2, {\"a\": null}]}",
    "<s>", "</s>", "<unk>", "<pad>", "<mask>", "<bos>", "<eos>", "[INST]", "[/INST]",
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|eot_id|>", "<|begin_of_text|>", "<think>",
    "</think>", "<tool_call>", "<start_of_turn>", "<end_of_turn>", "<|endoftext|><|endoftext|>",
    "a<|endoftext|>b", " <s> [INST] hi [/INST]", "<s><s>", "<<s>>", "<|im_start|>user\nhi<|im_end|>\n",
]


# --- Finding the inputs ----------------------------------------------------------------------------


def _missing(message: str) -> None:
    if support.require_models():
        pytest.fail(message)
    pytest.skip(message)


def model_dir(name: str) -> Path:
    path, reason = support.model_path(name)
    if path is None:
        _missing(f"model {name} not found: {reason}")
    return path


def data_file(relative: str) -> Path:
    base = os.environ.get("CHATIDS_DATA_DIR")
    path = Path(base) / relative if base else None
    if path is None or not path.is_file():
        _missing(f"{relative} not found under CHATIDS_DATA_DIR ({base!r})")
    return path


def corpus_texts() -> list[str]:
    """A deterministic sample of message contents, SAMPLE_PER_FILE per corpus file."""
    path, reason = support.data_dir()
    if path is None:
        _missing(f"conversation corpus not found: {reason}")
    texts: list[str] = []
    for name in support.corpus_files():
        contents = []
        with open(path / name, encoding="utf-8") as f:
            for line in f:
                for m in json.loads(line).get("messages", []):
                    if isinstance(m.get("content"), str) and m["content"]:
                        contents.append(m["content"])
        rng = random.Random(f"chatids:gguf:{name}")
        texts += rng.sample(contents, min(SAMPLE_PER_FILE, len(contents)))
    assert texts, "the corpus holds no message content"
    return texts


def corpus_chats() -> list[list[dict]]:
    """A few conversations per corpus file (plain roles and string contents only)."""
    chats = []
    for name in support.corpus_files():
        rows = [r for r in support.corpus_rows(name) if "tools" not in r]
        plain = [
            r["messages"]
            for r in rows
            if r.get("messages")
            and all(m.get("role") in ("system", "user", "assistant") and isinstance(m.get("content"), str) for m in r["messages"])
        ]
        chats += [[{"role": m["role"], "content": m["content"]} for m in msgs] for msgs in plain[:CHATS_PER_FILE]]
    return chats


def special_texts(model: Path) -> list[str]:
    """Strings holding the checkpoint's added tokens (a deterministic sample for big lists)."""
    added = [t["content"] for t in json.loads((model / "tokenizer.json").read_text())["added_tokens"]]
    picked = added if len(added) <= 60 else added[:20] + random.Random("chatids:gguf:added").sample(added[20:], 40)
    out = []
    for t in picked:
        out += [t, f"x{t}y", f" {t} ", f"{t}\n{t}", f"hello {t}world"]
    return out


# --- Writing GGUF files as convert_hf_to_gguf.py does --------------------------------------------

SPECIAL_LOOKING = ("<pad>", "<mask>", "<2mass>", "[@BOS@]")


def does_token_look_special(t: str) -> bool:
    """convert_hf_to_gguf.py's heuristic for added tokens a config forgot to mark special."""
    return (
        t in SPECIAL_LOOKING
        or (t.startswith("<|") and t.endswith("|>"))
        or (t.startswith("<\uff5c") and t.endswith("\uff5c>"))
        or (t.startswith("<unused") and t.endswith(">"))
    )


def _writer(out: Path, case: Case, model: str, pre: str) -> "gguf.GGUFWriter":
    w = gguf.GGUFWriter(str(out), case.architecture)
    w.add_tokenizer_model(model)
    w.add_tokenizer_pre(pre)
    return w


def _finish(w: "gguf.GGUFWriter") -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_bpe(case: Case, model: Path, out: Path) -> None:
    """`get_vocab_base` + `_set_vocab_gpt2`: byte-level tokens, types, merges and specials."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    vocab = tok.get_vocab()
    size = case.vocab_size or len(vocab)
    reverse = {i: t for t, i in vocab.items()}
    added = tok.get_added_vocab()
    decoder = tok.added_tokens_decoder
    tokens, types = [], []
    for i in range(size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        t = reverse[i]
        if t in added:
            if not decoder[i].normalized:
                t = tok.decode(tok.encode(t, add_special_tokens=False))
            if decoder[i].special or does_token_look_special(t):
                types.append(gguf.TokenType.CONTROL)
            else:
                t = t.replace("\u2581", " ")
                types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(t)
    w = _writer(out, case, "gpt2", case.pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    gguf.SpecialVocab(str(model), load_merges=True, n_vocab=len(tokens)).add_to_gguf(w, quiet=True)
    _finish(w)


def _apply_added_tokens_decoder(model: Path, tokens: list, scores: list, types: list) -> None:
    """`_create_vocab_sentencepiece`'s pass over tokenizer_config.json's added tokens."""
    config = json.loads((model / "tokenizer_config.json").read_text())
    for key, data in config.get("added_tokens_decoder", {}).items():
        i, t = int(key), data["content"]
        if i >= len(tokens):
            continue
        if data.get("special") or does_token_look_special(t):
            types[i] = gguf.TokenType.CONTROL
        else:
            t = t.replace("\u2581", " ")
            types[i] = gguf.TokenType.USER_DEFINED
        scores[i] = -1000.0
        tokens[i] = t


def write_spm_model(case: Case, model: Path, spm_file: Path, out: Path) -> None:
    """`_set_vocab_sentencepiece` from a `tokenizer.model` (+ the checkpoint's config)."""
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_file))
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        kind = gguf.TokenType.NORMAL
        if sp.is_unknown(i):
            kind = gguf.TokenType.UNKNOWN
        elif sp.is_control(i):
            kind = gguf.TokenType.CONTROL
        elif sp.is_unused(i):
            kind = gguf.TokenType.UNUSED
        elif sp.is_byte(i):
            kind = gguf.TokenType.BYTE
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        types.append(kind)
    _apply_added_tokens_decoder(model, tokens, scores, types)
    w = _writer(out, case, "llama", "default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    gguf.SpecialVocab(str(model), n_vocab=len(tokens)).add_to_gguf(w, quiet=True)
    _finish(w)


def write_spm_json(case: Case, model: Path, out: Path) -> None:
    """A SentencePiece vocabulary from `tokenizer.json` (no `tokenizer.model` here): the types
    `_create_vocab_sentencepiece` gives, scores falling with the id as in a BPE `.model`."""
    data = json.loads((model / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    size = max([*vocab.values(), *(t["id"] for t in data["added_tokens"])]) + 1
    tokens = [f"[PAD{i}]" for i in range(size)]
    scores = [-10000.0] * size
    types = [gguf.TokenType.UNUSED] * size
    for t, i in vocab.items():
        tokens[i] = t
        byte = re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", t) is not None
        types[i] = gguf.TokenType.BYTE if byte else gguf.TokenType.NORMAL
        scores[i] = 0.0 if byte else -float(i)
    unk = json.loads((model / "tokenizer_config.json").read_text()).get("unk_token")
    if unk in vocab:
        types[vocab[unk]] = gguf.TokenType.UNKNOWN
        scores[vocab[unk]] = 0.0
    _apply_added_tokens_decoder(model, tokens, scores, types)
    w = _writer(out, case, "llama", "default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    gguf.SpecialVocab(str(model), n_vocab=len(tokens)).add_to_gguf(w, quiet=True)
    _finish(w)


def write_case(case: Case, out: Path) -> Path:
    model = model_dir(case.model)
    if case.kind == "bpe":
        write_bpe(case, model, out)
    elif case.kind == "spm-model":
        write_spm_model(case, model, data_file(LLAMA2_MODEL), out)
    else:
        write_spm_json(case, model, out)
    return model


# --- The reference: transformers' GGUF loader, in a subprocess -----------------------------------

_REFERENCE = r"""
import json, sys, types
req = json.load(open(sys.argv[1]))
from transformers import AutoTokenizer
try:
    import torch  # noqa: F401
except ImportError:
    # transformers' GGUF path imports torch and checks it is installed, but builds a tokenizer
    # from metadata alone; a stub lets it run where torch is not installed.
    class _Any:
        def __getattr__(self, name): return _Any()
        def __call__(self, *a, **k): return _Any()
        def __getitem__(self, k): return _Any()
        def __or__(self, other): return _Any()
        __ror__ = __or__
    stub = types.ModuleType("torch")
    stub.__getattr__ = lambda name: _Any()
    sys.modules["torch"] = stub
    import transformers.modeling_gguf_pytorch_utils as gguf_utils
    gguf_utils.is_torch_available = lambda: True
tok = AutoTokenizer.from_pretrained(req["dir"], gguf_file=req["file"])
texts = req["texts"]
chats = []
for messages in req["chats"]:
    row = {}
    for agp in (False, True):
        try:
            row[str(agp)] = list(tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=agp,
                                                         sanitize_control_tokens=True, return_dict=False, **req["kwargs"]))
        except Exception as e:
            row[str(agp)] = f"{type(e).__name__}: {e}"
    chats.append(row)
out = {
    "class": type(tok).__name__,
    "backend": tok.backend_tokenizer.to_str(),
    "ids": [tok(t, add_special_tokens=False)["input_ids"] for t in texts],
    "ids_special": [tok(t)["input_ids"] for t in texts[: req["n_special"]]],
    "chat_template": tok.chat_template,
    "special": {k: getattr(tok, k) for k in ("bos_token", "eos_token", "unk_token", "pad_token")},
    "chats": chats,
}
json.dump(out, open(req["out"], "w"))
"""


def reference(path: Path, texts: list[str], chats: list[list[dict]], kwargs: dict, work: Path) -> dict:
    request, out = work / "request.json", work / "reference.json"
    request.write_text(
        json.dumps({"dir": str(path.parent), "file": path.name, "texts": texts, "n_special": WITH_SPECIAL,
                    "chats": chats, "kwargs": kwargs, "out": str(out)})
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-c", _REFERENCE, str(request)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, f"transformers could not load {path.name}:\n{done.stderr[-4000:]}"
    return json.loads(out.read_text())


# --- The cases -----------------------------------------------------------------------------------

#: Counts of compared strings, printed by test_zz_counts.
COUNTS: dict[str, dict[str, int]] = {}


class Loaded:
    def __init__(self, case: Case, path: Path, model: Path, texts: list[str], chats: list[list[dict]], ref: dict) -> None:
        self.case, self.path, self.model, self.texts, self.chats, self.ref = case, path, model, texts, chats, ref
        mine, self.chat_template = _core._gguf_tokenizer_json(str(path))
        self.tokenizer = Tokenizer.from_str(mine)


_LOADED: dict[str, Loaded] = {}


def _load(name: str, tmp_path_factory) -> Loaded:
    if name not in _LOADED:
        case = CASES[name]
        work = tmp_path_factory.mktemp(f"gguf-{name}")
        path = work / f"{name}.gguf"
        model = write_case(case, path)
        texts = list(dict.fromkeys(EDGE_TEXTS + special_texts(model) + corpus_texts()))
        chats = corpus_chats()
        ref = reference(path, texts, chats, support.template_kwargs(case.fmt), work)
        _LOADED[name] = Loaded(case, path, model, texts, chats, ref)
    return _LOADED[name]


#: The cases a run loads. Loading is transformers' GGUF conversion, 35-60 s for each large
#: vocabulary; sample runs keep one case per GGUF tokenizer kind and builder (byte-level BPE:
#: Qwen3; SentencePiece model: Llama 2 under llama and phi3; SentencePiece JSON: Mistral v0.3)
#: and leave Llama 3.1, Qwen2.5 and Gemma 3 to full runs.
SAMPLE_CASES = ["qwen3", "llama-2", "phi3-on-llama-2", "mistral-v0.3"]
RUN_CASES = list(CASES) if support.full_conformance() else SAMPLE_CASES


@pytest.fixture(scope="module", params=RUN_CASES)
def loaded(request, tmp_path_factory) -> Loaded:
    """Each case: its GGUF file, chatids' tokenizer and transformers' reference."""
    return _load(request.param, tmp_path_factory)


@pytest.fixture(scope="module", params=[n for n in RUN_CASES if CASES[n].kind == "bpe"])
def loaded_bpe(request, tmp_path_factory) -> Loaded:
    """The byte-level cases."""
    return _load(request.param, tmp_path_factory)


def _component_diff(mine: dict, ref: dict) -> list[str]:
    diffs = []
    for key in sorted(set(mine) | set(ref)):
        if key == "model":
            for k in sorted(set(mine["model"]) | set(ref["model"])):
                a, b = mine["model"].get(k), ref["model"].get(k)
                if a != b:
                    if isinstance(a, list) and isinstance(b, list):
                        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                        diffs.append(f"model.{k}: lengths {len(a)} vs {len(b)}, first difference at {first}")
                    elif isinstance(a, dict) and isinstance(b, dict):
                        only = sorted(set(a.items()) ^ set(b.items()))[:5]
                        diffs.append(f"model.{k}: {len(a)} vs {len(b)} entries, differing e.g. {only}")
                    else:
                        diffs.append(f"model.{k}: {a!r} vs {b!r}")
        elif mine.get(key) != ref.get(key):
            diffs.append(f"{key}: {json.dumps(mine.get(key))[:300]} vs {json.dumps(ref.get(key))[:300]}")
    return diffs


def test_rebuilt_tokenizer_is_transformers_tokenizer(loaded: Loaded) -> None:
    mine = json.loads(loaded.tokenizer.to_str())
    ref = json.loads(Tokenizer.from_str(loaded.ref["backend"]).to_str())
    assert _component_diff(mine, ref) == []


def test_ids_equal_transformers(loaded: Loaded) -> None:
    ours = [e.ids for e in loaded.tokenizer.encode_batch(loaded.texts, add_special_tokens=False)]
    bad = [(t, a, b) for t, a, b in zip(loaded.texts, ours, loaded.ref["ids"]) if a != b]
    assert not bad, f"{len(bad)} of {len(ours)} texts differ, e.g. {bad[:3]}"
    head = loaded.texts[:WITH_SPECIAL]
    ours_special = [e.ids for e in loaded.tokenizer.encode_batch(head, add_special_tokens=True)]
    assert ours_special == loaded.ref["ids_special"]
    COUNTS.setdefault(loaded.case.model + f" [{loaded.case.architecture}]", {})["texts vs transformers"] = len(ours) + len(head)


def test_chat_template_is_the_checkpoints(loaded: Loaded) -> None:
    assert loaded.chat_template == loaded.ref["chat_template"]
    config = json.loads((loaded.model / "tokenizer_config.json").read_text())
    jinja = loaded.model / "chat_template.jinja"
    expected = jinja.read_text() if jinja.is_file() else config["chat_template"]
    assert loaded.chat_template == expected


def _as_transformers_gguf_builds_it(original: Tokenizer) -> Tokenizer:
    """The checkpoint's tokenizer.json with the three changes transformers' GGUF loader makes to
    a byte-level vocabulary: its BPE does not ignore merges (Llama 3's does), it has no
    normalizer (Qwen's NFC is lost: Qwen2Tokenizer's backend is replaced by the GGUF one), and
    GPT2Tokenizer's default special token <|endoftext|> is added, past the vocabulary if the
    file does not have it (Llama 3)."""
    data = json.loads(original.to_str())
    data["model"]["ignore_merges"] = False
    data["normalizer"] = None
    adjusted = Tokenizer.from_str(json.dumps(data))
    if adjusted.token_to_id("<|endoftext|>") is None or "<|endoftext|>" not in {
        t.content for t in adjusted.get_added_tokens_decoder().values()
    }:
        from tokenizers import AddedToken

        adjusted.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    return adjusted


def test_byte_level_ids_equal_the_original_tokenizer(loaded_bpe: Loaded) -> None:
    """Byte-level: the checkpoint's own tokenizer.json, up to transformers' three changes."""
    loaded = loaded_bpe
    original = Tokenizer.from_file(str(loaded.model / "tokenizer.json"))
    adjusted = _as_transformers_gguf_builds_it(original)
    ours = [e.ids for e in loaded.tokenizer.encode_batch(loaded.texts, add_special_tokens=False)]
    raw = [e.ids for e in original.encode_batch(loaded.texts, add_special_tokens=False)]
    expected = [e.ids for e in adjusted.encode_batch(loaded.texts, add_special_tokens=False)]
    bad = [(t, a, b) for t, a, b in zip(loaded.texts, ours, expected) if a != b]
    assert not bad, f"{len(bad)} of {len(ours)} texts differ, e.g. {bad[:3]}"
    counts = COUNTS.setdefault(loaded.case.model + f" [{loaded.case.architecture}]", {})
    counts["texts vs tokenizer.json"] = len(ours)
    counts["differing from the unchanged tokenizer.json"] = sum(a != b for a, b in zip(ours, raw))


def test_encoder_from_gguf_equals_apply_chat_template(loaded: Loaded) -> None:
    """End to end: `Encoder.from_pretrained(file.gguf)` against the GGUF tokenizer's template."""
    enc = chatids.Encoder.from_pretrained(str(loaded.path))
    kwargs = support.template_kwargs(loaded.case.fmt)
    compared = refused = 0
    for messages, ref in zip(loaded.chats, loaded.ref["chats"]):
        for agp in (False, True):
            expected = ref[str(agp)]
            if isinstance(expected, str):  # the template raised
                continue
            try:
                ids = enc.encode(messages, add_generation_prompt=agp, **kwargs).tolist()
            except chatids.ChatTemplateError:
                refused += 1
                continue
            assert ids == expected, f"{loaded.case.model}: {messages[:2]} agp={agp}"
            compared += 1
    assert compared > 0
    counts = COUNTS.setdefault(loaded.case.model + f" [{loaded.case.architecture}]", {})
    counts["conversations vs apply_chat_template"] = compared
    counts["conversations refused by chatids"] = refused


# --- Broken and unsupported files ---------------------------------------------------------------


def _tiny(path: Path, *, model: str = "llama", pre: str = "default", arch: str = "llama",
          template: Optional[str] = "{{ messages[0]['content'] }}", endianess: Any = None) -> Path:
    """A tiny valid SentencePiece GGUF, with the given tokenizer model and template."""
    kw = {"endianess": endianess} if endianess is not None else {}
    w = gguf.GGUFWriter(str(path), arch, **kw)
    w.add_tokenizer_model(model)
    w.add_tokenizer_pre(pre)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581", "a", "\u2581a"]
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 259 + [-1.0, -2.0, -3.0])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1, 1, 1])
    if model == "gpt2":
        w.add_token_merges(["\u2581 a"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    if template is not None:
        w.add_chat_template(template)
    _finish(w)
    return path


def _raises(path: Path, match: str) -> None:
    with pytest.raises(chatids.CheckpointError, match=match):
        _core._gguf_tokenizer_json(str(path))


def test_tiny_file_loads(tmp_path: Path) -> None:
    path = _tiny(tmp_path / "ok.gguf")
    mine, template = _core._gguf_tokenizer_json(str(path))
    assert template == "{{ messages[0]['content'] }}"
    assert Tokenizer.from_str(mine).encode("a a").ids == [1, 261, 261]


def test_truncated_files_raise(tmp_path: Path) -> None:
    data = _tiny(tmp_path / "ok.gguf").read_bytes()
    for cut in sorted({0, 3, 4, 7, 12, 23, 24, 30, len(data) // 3, len(data) // 2, len(data) - 40}):
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(data[:cut])
        _raises(path, "truncated|corrupt|not a GGUF file")


def test_wrong_magic_raises(tmp_path: Path) -> None:
    data = bytearray(_tiny(tmp_path / "ok.gguf").read_bytes())
    data[:4] = b"GGML"
    path = tmp_path / "magic.gguf"
    path.write_bytes(bytes(data))
    _raises(path, "not a GGUF file")
    (tmp_path / "text.gguf").write_text("{\"not\": \"gguf\"}")
    _raises(tmp_path / "text.gguf", "not a GGUF file")
    _raises(tmp_path / "missing.gguf", "cannot read")


def test_big_endian_raises(tmp_path: Path) -> None:
    _raises(_tiny(tmp_path / "be.gguf", endianess=gguf.GGUFEndian.BIG), "big-endian")


def test_missing_chat_template_raises(tmp_path: Path) -> None:
    _raises(_tiny(tmp_path / "nt.gguf", template=None), "the GGUF file has no chat template")


def test_unsupported_tokenizers_raise(tmp_path: Path) -> None:
    _raises(_tiny(tmp_path / "t5.gguf", model="t5"), 'tokenizer.ggml.model "t5" is not supported')
    _raises(_tiny(tmp_path / "bert.gguf", model="bert"), 'tokenizer.ggml.model "bert" is not supported')
    _raises(_tiny(tmp_path / "rwkv.gguf", arch="rwkv6"), 'architecture "rwkv6" is not supported')
    _raises(_tiny(tmp_path / "pre.gguf", model="gpt2", pre="deepseek-llm"), 'tokenizer.ggml.pre "deepseek-llm" is not supported')


def test_zz_counts(capsys) -> None:
    """Print what was compared (run with -s to see it)."""
    with capsys.disabled():
        for name, counts in sorted(COUNTS.items()):
            print(f"\ngguf {name}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
