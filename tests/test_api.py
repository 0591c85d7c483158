"""The Python API: types, batches, threads, provenance, stop tokens, loading."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

import chatids
import support

SYSTEM = {"role": "system", "content": "You are terse."}
TURNS = [
    {"role": "user", "content": "Name a prime."},
    {"role": "assistant", "content": "7"},
    {"role": "user", "content": "Another?"},
]


def chat_for(model) -> list[dict]:
    """A short chat the model's template accepts (Gemma 1/2 has no system turn)."""
    return TURNS if model.format == "gemma" else [SYSTEM] + TURNS


def test_encode_returns_uint32_array(model):
    CHAT = chat_for(model)
    ids = model.enc.encode(CHAT, add_generation_prompt=True, **model.ours_kwargs())
    assert isinstance(ids, np.ndarray) and ids.dtype == np.uint32 and ids.ndim == 1
    assert isinstance(model.enc.render(CHAT, **model.ours_kwargs()), str)
    assert model.enc.format == model.format


def test_encode_batch_layout(model):
    CHAT = chat_for(model)
    convs = [CHAT, TURNS[:1], [{"role": "user", "content": "x" * 1000}]] * 7
    batch = model.enc.encode_batch(convs, add_generation_prompt=True, **model.ours_kwargs())
    assert len(batch) == len(convs)
    assert batch.ids.dtype == np.uint32 and batch.offsets.dtype == np.int64
    assert batch.offsets.shape == (len(convs) + 1,) and batch.offsets[0] == 0 and batch.offsets[-1] == len(batch.ids)
    for i, conv in enumerate(convs):
        assert np.array_equal(batch[i], model.enc.encode(conv, add_generation_prompt=True, **model.ours_kwargs()))
    assert np.array_equal(batch[-1], batch[len(convs) - 1])
    assert [len(x) for x in batch] == batch.lengths.tolist()
    with pytest.raises(IndexError):
        batch[len(convs)]


def test_empty_batch(model):
    batch = model.enc.encode_batch([])
    assert len(batch) == 0 and batch.offsets.tolist() == [0] and len(batch.ids) == 0


def test_thread_counts_agree(model):
    CHAT = chat_for(model)
    convs = [CHAT] * 50 + [TURNS[:1]] * 50
    one = model.enc.encode_batch(convs, num_threads=1, **model.ours_kwargs())
    two = model.enc.encode_batch(convs, num_threads=2, **model.ours_kwargs())
    default = model.enc.encode_batch(convs, **model.ours_kwargs())
    assert np.array_equal(one.ids, two.ids) and np.array_equal(one.ids, default.ids)
    assert np.array_equal(one.offsets, two.offsets)


def test_many_python_threads_share_one_encoder(model):
    CHAT = chat_for(model)
    expected = model.enc.encode(CHAT, **model.ours_kwargs())
    errors = []

    def work():
        for _ in range(50):
            if not np.array_equal(model.enc.encode(CHAT, **model.ours_kwargs()), expected):
                errors.append("differs")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_message_indices_follow_the_messages(model):
    CHAT = chat_for(model)
    detailed = model.enc.encode_detailed(CHAT, add_generation_prompt=True, **model.ours_kwargs())
    assert detailed.ids.tolist() == model.enc.encode(CHAT, add_generation_prompt=True, **model.ours_kwargs()).tolist()
    idx = detailed.message_indices
    assert idx.dtype == np.int32 and len(idx) == len(detailed.ids) == len(detailed.from_content)
    # Messages appear in order (a system message folded into a user turn sits inside it);
    # the generation prompt (last tokens) belongs to no message.
    seen = [i for i in idx.tolist() if i >= 0]
    assert set(seen) == set(range(len(CHAT)))
    turns = [i for i in seen if CHAT[i]["role"] != "system"]
    assert turns == sorted(turns)
    if model.format not in support.IGNORES_GENERATION_PROMPT:
        assert idx[-1] == -1
    # Each message's tokens decode to text that contains its content.
    for i, message in enumerate(CHAT):
        mine = detailed.ids[idx == i]
        assert message["content"] in model.tok.decode(mine.tolist()).replace("\u2581", " ") or message["role"] == "system"


def test_stop_token_ids_follow_the_format_documentation(model):
    documented = {
        "llama-3": ["<|eot_id|>", "<|end_of_text|>"],
        "llama-3.1": ["<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"],
        "llama-3.2": ["<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"],
        "chatml": ["<|im_end|>"],
        "qwen2": ["<|im_end|>", "<|endoftext|>"],
        "qwen2.5": ["<|im_end|>", "<|endoftext|>"],
        "qwen3": ["<|im_end|>", "<|endoftext|>"],
        "llama-2": ["</s>"],
        "mistral-v1": ["</s>"],
        "mistral-v3": ["</s>"],
        "mistral-v3-tekken": ["</s>"],
        "mistral-v7": ["</s>"],
        "mistral-v7-tekken": ["</s>"],
        "gemma": ["<end_of_turn>", "<eos>"],
        "gemma-3": ["<end_of_turn>", "<eos>"],
        # The Jinja path: the config eos_token, generation_config.json, and the tool-call stops
        # the template writes (gpt-oss: <|call|>).
        "jinja": [t for t in ("<|eom_id|>", "<|call|>") if t in model.tok.chat_template],
    }[model.format] + [model.tok.eos_token]
    expected = sorted(set(model.tok.convert_tokens_to_ids(documented)))
    assert model.enc.stop_token_ids == expected


def test_control_tokens_match_transformers(model):
    theirs = set(model.tok._get_control_tokens(model.tok.chat_template))
    ours = {t for t, _ in model.enc.control_tokens}
    assert ours == theirs
    for text, i in model.enc.control_tokens:
        assert model.tok.convert_tokens_to_ids(text) == i


def test_tokenizer_pipeline_matches_transformers(model):
    """chatids builds the tokenizer transformers builds (see checkpoint/compat.rs)."""
    ours = json.loads(model.enc._core.tokenizer_json())
    theirs = json.loads(model.tok.backend_tokenizer.to_str())
    for key in ("normalizer", "pre_tokenizer"):
        assert ours[key] == theirs[key], key
    strip = lambda m: {k: v for k, v in m.items() if k not in ("vocab", "merges")}  # noqa: E731
    assert strip(ours["model"]) == strip(theirs["model"])
    flags = lambda toks: {(t["id"], t["content"], t["special"], t["lstrip"], t["rstrip"], t["single_word"]) for t in toks}  # noqa: E731
    assert flags(ours["added_tokens"]) == flags(theirs["added_tokens"])


def test_explain_names_the_template_source(model):
    text = model.enc.explain()
    assert text.startswith("chat template: the checkpoint's default template (sha256 ")
    assert f"\nformat {model.format}: " in text
    if model.format != "jinja":  # every shared checkpoint with a native format carries its official template
        assert "byte-for-byte the official one of" in text


def test_from_pretrained_accepts_paths(model):
    # model.enc was loaded from a pathlib.Path; a str gives the same encoder.
    assert repr(model.enc) == f"chatids.Encoder(format={model.format!r})"
    assert chatids.Encoder.from_pretrained(str(model.path)).format == model.format


def test_llama2_space_after_special_token_follows_transformers_not_tokenizer_json():
    """transformers 5 rebuilds Llama's pre-tokenizer from `legacy` (Metaspace, prepend "always")
    instead of tokenizer.json's Prepend normalizer; the two differ on text that starts with a
    space right after a special token. chatids follows transformers."""
    from tokenizers import Tokenizer

    m = support.load_model("llama-2-7b-chat")
    msgs = [{"role": "user", "content": "hi</s> leading space"}]
    ours = m.enc.encode(msgs, sanitize_control_tokens=False).tolist()
    assert ours == m.ref_ids(msgs, sanitize=False)
    raw = Tokenizer.from_file(str(m.path / "tokenizer.json"))
    assert raw.encode(m.ref_text(msgs), add_special_tokens=False).ids != ours
    assert raw.encode(" leading space", add_special_tokens=False).ids != m.tok.encode(" leading space", add_special_tokens=False)
