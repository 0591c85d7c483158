"""Training columns: loss masks and labels, train_on policies, truncation, error collection.

The masks themselves are verified against transformers' ``return_assistant_tokens_mask`` in
test_masks.py; here the policies built on them are checked by reconstruction: every expected
value comes from a separate chatids or transformers encode of a transformed conversation,
never from the implementation's own output.
"""

from __future__ import annotations

import numpy as np
import pytest

import chatids

from support import load_model

CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name a prime."},
    {"role": "assistant", "content": "Seven."},
    {"role": "user", "content": "Another one, larger than one hundred please."},
    {"role": "assistant", "content": "One hundred and one."},
    {"role": "user", "content": "And a third?"},
    {"role": "assistant", "content": "Thirteen."},
]

NATIVE = ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "llama-2-7b-chat", "gemma-3-it", "mistral-7b-instruct-v0.3"]


def chat_for(name: str) -> list[dict]:
    # Mistral v3's template drops a system message unless the conversation ends with a user turn.
    return CHAT[1:] if name == "mistral-7b-instruct-v0.3" else CHAT


def trained_text(m, chat: chatids.EncodedChat) -> list[str]:
    """The decoded runs of trained tokens."""
    runs, current = [], []
    for token, bit in zip(chat.ids.tolist(), chat.assistant_mask.tolist()):
        if bit:
            current.append(token)
        elif current:
            runs.append(m.tok.decode(current))
            current = []
    if current:
        runs.append(m.tok.decode(current))
    return runs


@pytest.mark.parametrize("name", NATIVE)
def test_mask_trains_assistant_bodies_and_labels_follow(name):
    m = load_model(name)
    messages = chat_for(name)
    chat = m.enc.encode(messages, return_assistant_mask=True, **m.ours_kwargs())
    assert chat.ids.tolist() == m.ref_ids(messages)
    assert chat.assistant_mask.dtype == np.uint8 and chat.labels.dtype == np.int64
    assert np.array_equal(chat.labels, np.where(chat.assistant_mask == 1, chat.ids.astype(np.int64), -100))
    runs = trained_text(m, chat)
    answers = [x["content"] for x in messages if x["role"] == "assistant"]
    assert len(runs) == len(answers), runs
    for run, answer in zip(runs, answers):
        assert answer in run, (run, answer)
        assert "user" not in run and "assistant" not in run and "model" not in run, run
    # Every trained run ends with a stop token of the checkpoint: the model learns to stop.
    ends = [chat.ids[i] for i in range(len(chat.ids)) if chat.assistant_mask[i] and (i + 1 == len(chat.ids) or not chat.assistant_mask[i + 1])]
    assert all(int(t) in m.enc.stop_token_ids for t in ends), (ends, m.enc.stop_token_ids)


@pytest.mark.parametrize("name", ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct"])
def test_train_on_policies_and_train_keys(name):
    m = load_model(name)
    kw = m.ours_kwargs()
    every = m.enc.encode(CHAT, return_assistant_mask=True, **kw)
    last = m.enc.encode(CHAT, return_assistant_mask=True, train_on="last_assistant", **kw)
    everything = m.enc.encode(CHAT, return_assistant_mask=True, train_on="all", **kw)
    assert np.array_equal(every.ids, last.ids)
    # last_assistant: the last trained run of all_assistant, nothing else.
    assert trained_text(m, last) == trained_text(m, every)[-1:]
    assert everything.assistant_mask.all()
    # train=False drops that message; train=True on a user message adds its body.
    keyed = [dict(x) for x in CHAT]
    keyed[2]["train"] = False
    keyed[3]["train"] = True
    chat = m.enc.encode(keyed, return_assistant_mask=True, **kw)
    assert np.array_equal(chat.ids, every.ids), "the train key must not change the ids"
    runs = trained_text(m, chat)
    assert not any("Seven." in r for r in runs)
    assert any(CHAT[3]["content"] in r for r in runs)
    # Under "all", train=False removes the message's tokens only.
    chat = m.enc.encode(keyed, return_assistant_mask=True, train_on="all", **kw)
    dropped = np.flatnonzero(chat.assistant_mask == 0)
    detailed = m.enc.encode_detailed(keyed, **kw)
    assert set(detailed.message_indices[dropped].tolist()) == {2}


def test_nothing_to_train_is_reported_not_all_zeros():
    m = load_model("llama-3.1-8b-instruct")
    prompt = CHAT[:2]
    with pytest.raises(chatids.ChatTemplateError, match="nothing to train on"):
        m.enc.encode(prompt, return_assistant_mask=True, **m.ours_kwargs())
    batch = m.enc.encode_batch([CHAT, prompt], return_assistant_mask=True, on_error="collect", **m.ours_kwargs())
    assert list(batch.errors) == [1] and "nothing to train on" in batch.errors[1]
    assert batch.lengths[1] == 0 and batch.lengths[0] > 0
    with pytest.raises(chatids.ChatTemplateError, match="conversation 1: nothing to train on"):
        m.enc.encode_batch([CHAT, prompt], return_assistant_mask=True, **m.ours_kwargs())


def test_bad_train_key_and_policy_names_name_the_problem():
    m = load_model("qwen2.5-7b-instruct")
    bad = [dict(x) for x in CHAT]
    bad[4]["train"] = "yes"
    with pytest.raises(chatids.ChatTemplateError, match="message 4: 'train' must be a bool"):
        m.enc.encode(bad, return_assistant_mask=True)
    with pytest.raises(chatids.ChatTemplateError, match="train_on must be"):
        m.enc.encode(CHAT, return_assistant_mask=True, train_on="assistant")
    with pytest.raises(chatids.ChatTemplateError, match="truncation must be"):
        m.enc.encode(CHAT, max_length=10, truncation="left")
    with pytest.raises(chatids.ChatTemplateError, match="needs max_length"):
        m.enc.encode(CHAT, truncation="right")
    with pytest.raises(chatids.ChatTemplateError, match="on_error must be"):
        m.enc.encode_batch([CHAT], on_error="ignore")


@pytest.mark.parametrize("name", ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "gemma-3-it"])
def test_batch_columns_equal_single_encodes(name):
    m = load_model(name)
    convs = [CHAT[: n] for n in (3, 5, 7)] * 5
    batch = m.enc.encode_batch(convs, return_assistant_mask=True, num_threads=2, **m.ours_kwargs())
    assert len(batch) == len(convs) and not batch.errors
    assert batch.assistant_mask.shape == batch.ids.shape == batch.labels.shape
    for i, conv in enumerate(convs):
        one = m.enc.encode(conv, return_assistant_mask=True, **m.ours_kwargs())
        lo, hi = batch.offsets[i], batch.offsets[i + 1]
        assert np.array_equal(batch.ids[lo:hi], one.ids)
        assert np.array_equal(batch.assistant_mask[lo:hi], one.assistant_mask)
        assert np.array_equal(batch.labels[lo:hi], one.labels)


def test_truncation_error_is_the_default_with_max_length():
    m = load_model("llama-3.1-8b-instruct")
    n = len(m.enc.encode(CHAT, **m.ours_kwargs()))
    with pytest.raises(chatids.ChatTemplateError, match=f"{n} tokens, more than max_length=20"):
        m.enc.encode(CHAT, max_length=20, **m.ours_kwargs())
    assert len(m.enc.encode(CHAT, max_length=n, **m.ours_kwargs())) == n


@pytest.mark.parametrize("name", ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "llama-2-7b-chat", "gemma-3-it"])
def test_truncation_right_cuts_tokens_and_reports_them(name):
    m = load_model(name)
    full = m.enc.encode(CHAT, return_assistant_mask=True, **m.ours_kwargs())
    limit = len(full.ids) - 5
    cut = m.enc.encode_detailed(CHAT, return_assistant_mask=True, max_length=limit, truncation="right", **m.ours_kwargs())
    assert np.array_equal(cut.ids, full.ids[:limit])
    assert np.array_equal(cut.assistant_mask, full.assistant_mask[:limit])
    assert cut.truncation == chatids.Truncation("right", len(full.ids), 5, ())


@pytest.mark.parametrize("name", NATIVE)
def test_drop_oldest_turns_equals_encoding_the_kept_messages(name):
    m = load_model(name)
    messages = chat_for(name)
    has_system = messages[0]["role"] == "system"
    full = len(m.enc.encode(messages, **m.ours_kwargs()))
    # Budget between "drop one turn" and "drop nothing": exactly the first turn goes.
    without_first = (messages[:1] if has_system else []) + messages[(3 if has_system else 2) :]
    shorter = m.enc.encode(without_first, **m.ours_kwargs())
    cut = m.enc.encode_detailed(
        messages, return_assistant_mask=True, max_length=full - 1, truncation="drop_oldest_turns", **m.ours_kwargs()
    )
    assert cut.ids.tolist() == shorter.tolist() == m.ref_ids(without_first)
    first_turn = (1, 2) if has_system else (0, 1)
    assert cut.truncation == chatids.Truncation("drop_oldest_turns", full, full - len(shorter), first_turn)
    # Message indices still refer to the caller's list; the mask trains the kept answers.
    kept = set(cut.message_indices.tolist()) - {-1}
    assert kept.isdisjoint(first_turn) and max(kept) == len(messages) - 1
    assert [r for r in trained_text(m, cut)] == trained_text(m, m.enc.encode(without_first, return_assistant_mask=True, **m.ours_kwargs()))
    # Budget for the last turn only.
    last_turn = (messages[:1] if has_system else []) + messages[-2:]
    budget = len(m.enc.encode(last_turn, **m.ours_kwargs()))
    cut = m.enc.encode_detailed(messages, max_length=budget, truncation="drop_oldest_turns", **m.ours_kwargs())
    assert cut.ids.tolist() == m.ref_ids(last_turn)
    with pytest.raises(chatids.ChatTemplateError, match="does not make it fit"):
        m.enc.encode(messages, max_length=budget - 1, truncation="drop_oldest_turns", **m.ours_kwargs())


def test_batch_truncation_and_collected_errors_are_reported_per_conversation():
    m = load_model("qwen2.5-7b-instruct")
    short = CHAT[:3]
    limit = len(m.enc.encode(short)) + 1
    bad = [{"role": "user"}]  # no content
    convs = [short, CHAT, bad, "not a conversation", CHAT]
    batch = m.enc.encode_batch(convs, return_assistant_mask=True, max_length=limit, truncation="right", on_error="collect")
    assert sorted(batch.errors) == [2, 3]
    assert "message 0" in batch.errors[2]
    assert sorted(batch.truncations) == [1, 4]
    assert batch.truncations[1].policy == "right" and batch.truncations[1].original_length == len(m.enc.encode(CHAT))
    assert batch.lengths.tolist() == [limit - 1, limit, 0, 0, limit]
    with pytest.raises(chatids.ChatTemplateError, match="conversation 2, message 0"):
        m.enc.encode_batch(convs, max_length=limit, truncation="right")


def test_generic_path_masks_bodies_with_the_generation_prompt_rule():
    m = load_model("qwen2.5-7b-instruct", generic=True)
    native = load_model("qwen2.5-7b-instruct")
    ours = m.enc.encode(CHAT, return_assistant_mask=True, **m.ours_kwargs())
    theirs = native.enc.encode(CHAT, return_assistant_mask=True)
    assert np.array_equal(ours.ids, theirs.ids)
    assert np.array_equal(ours.assistant_mask, theirs.assistant_mask)


def test_batches_of_several_windows_equal_single_encodes_and_name_late_errors():
    """A batch is encoded a window of 1,024 conversations per thread at a time (converted from
    Python as each window is reached): ids, offsets, masks, truncations and errors of a batch of
    several windows are those of its conversations one by one, and an error in a late window
    names its conversation."""
    m = load_model("qwen2.5-7b-instruct")
    variants = [CHAT, CHAT[:3], CHAT[:5], [{"role": "user", "content": "z" * 30}, {"role": "assistant", "content": "ok"}]]
    convs = [variants[i % len(variants)] for i in range(2600)]
    limit = len(m.enc.encode(CHAT)) - 1
    bad = [{"role": "user"}]  # no content
    convs[2500] = bad
    batch = m.enc.encode_batch(
        convs, num_threads=1, return_assistant_mask=True, max_length=limit, truncation="right", on_error="collect"
    )
    assert sorted(batch.errors) == [2500] and "message 0" in batch.errors[2500]
    assert sorted(batch.truncations) == [i for i in range(2600) if i % 4 == 0 and i != 2500]
    singles = {}
    for i, conv in enumerate(convs):
        if i == 2500:
            assert len(batch[i]) == 0
            continue
        key = i % 4
        if key not in singles:
            singles[key] = m.enc.encode(conv, return_assistant_mask=True, max_length=limit, truncation="right")
        assert np.array_equal(batch[i], singles[key].ids)
        start = batch.offsets[i]
        assert np.array_equal(batch.assistant_mask[start : start + len(batch[i])], singles[key].assistant_mask)
    two = m.enc.encode_batch(convs, num_threads=2, max_length=limit, truncation="right", on_error="collect")
    assert np.array_equal(two.ids, batch.ids) and np.array_equal(two.offsets, batch.offsets)
    with pytest.raises(chatids.ChatTemplateError, match="^conversation 2500, message 0"):
        m.enc.encode_batch(convs, num_threads=1, max_length=limit, truncation="right")
