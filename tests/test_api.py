"""The Python API: types, batches, threads, provenance, stop tokens, loading."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

import chatids
import support

CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name a prime."},
    {"role": "assistant", "content": "7"},
    {"role": "user", "content": "Another?"},
]


def test_encode_returns_uint32_array(model):
    ids = model.enc.encode(CHAT, add_generation_prompt=True, **model.kwargs())
    assert isinstance(ids, np.ndarray) and ids.dtype == np.uint32 and ids.ndim == 1
    assert isinstance(model.enc.render(CHAT, **model.kwargs()), str)
    assert model.enc.format == model.format


def test_encode_batch_layout(model):
    convs = [CHAT, CHAT[:2], [{"role": "user", "content": "x" * 1000}]] * 7
    batch = model.enc.encode_batch(convs, add_generation_prompt=True, **model.kwargs())
    assert len(batch) == len(convs)
    assert batch.ids.dtype == np.uint32 and batch.offsets.dtype == np.int64
    assert batch.offsets.shape == (len(convs) + 1,) and batch.offsets[0] == 0 and batch.offsets[-1] == len(batch.ids)
    for i, conv in enumerate(convs):
        assert np.array_equal(batch[i], model.enc.encode(conv, add_generation_prompt=True, **model.kwargs()))
    assert np.array_equal(batch[-1], batch[len(convs) - 1])
    assert [len(x) for x in batch] == batch.lengths.tolist()
    with pytest.raises(IndexError):
        batch[len(convs)]


def test_empty_batch(model):
    batch = model.enc.encode_batch([])
    assert len(batch) == 0 and batch.offsets.tolist() == [0] and len(batch.ids) == 0


def test_thread_counts_agree(model):
    convs = [CHAT] * 50 + [CHAT[:1]] * 50
    one = model.enc.encode_batch(convs, num_threads=1, **model.kwargs())
    two = model.enc.encode_batch(convs, num_threads=2, **model.kwargs())
    default = model.enc.encode_batch(convs, **model.kwargs())
    assert np.array_equal(one.ids, two.ids) and np.array_equal(one.ids, default.ids)
    assert np.array_equal(one.offsets, two.offsets)


def test_many_python_threads_share_one_encoder(model):
    expected = model.enc.encode(CHAT, **model.kwargs())
    errors = []

    def work():
        for _ in range(50):
            if not np.array_equal(model.enc.encode(CHAT, **model.kwargs()), expected):
                errors.append("differs")

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_message_indices_follow_the_messages(model):
    detailed = model.enc.encode_detailed(CHAT, add_generation_prompt=True, **model.kwargs())
    assert detailed.ids.tolist() == model.enc.encode(CHAT, add_generation_prompt=True, **model.kwargs()).tolist()
    idx = detailed.message_indices
    assert idx.dtype == np.int32 and len(idx) == len(detailed.ids) == len(detailed.from_content)
    # Messages appear in order; the generation prompt (last tokens) belongs to no message.
    seen = [i for i in idx.tolist() if i >= 0]
    assert seen == sorted(seen) and set(seen) == set(range(len(CHAT)))
    assert idx[-1] == -1
    # Each message's content tokens decode to its content.
    for i, message in enumerate(CHAT):
        mine = detailed.ids[(idx == i) & detailed.from_content]
        assert message["content"] in model.tok.decode(mine.tolist()) or message["role"] == "system"


def test_stop_token_ids_follow_the_format_documentation(model):
    documented = {
        "llama-3": ["<|eot_id|>", "<|end_of_text|>"],
        "llama-3.1": ["<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"],
        "llama-3.2": ["<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"],
        "chatml": ["<|im_end|>"],
        "qwen2": ["<|im_end|>", "<|endoftext|>"],
        "qwen2.5": ["<|im_end|>", "<|endoftext|>"],
        "qwen3": ["<|im_end|>", "<|endoftext|>"],
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
    assert text.startswith(f"format {model.format}: the checkpoint's chat template")
    assert "byte-for-byte" in text


def test_from_pretrained_accepts_paths(model):
    assert chatids.Encoder.from_pretrained(str(model.path)).format == model.format
    assert repr(chatids.Encoder.from_pretrained(model.path)) == f"chatids.Encoder(format={model.format!r})"
