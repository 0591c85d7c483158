"""The explicit input policies (system=, merge_consecutive=) and lint().

Expected ids come from transformers applied to the conversation the policy documents (the
system message folded by hand, consecutive messages joined by hand).
"""

from __future__ import annotations

import pytest

import chatids
import support

SYS = {"role": "system", "content": "  Answer in French.\n"}
TURNS = [
    {"role": "user", "content": " Hello there "},
    {"role": "assistant", "content": "Bonjour !"},
    {"role": "user", "content": "How are you?"},
]


@pytest.mark.parametrize("agp", [False, True])
def test_gemma_system_fold_equals_the_hand_folded_conversation(agp):
    m = support.load_model("gemma-2-it-on-gemma3-tokenizer")
    with pytest.raises(chatids.ChatTemplateError, match="message 0: System role not supported"):
        m.enc.encode([SYS] + TURNS)
    folded = [{"role": "user", "content": SYS["content"] + "\n\n" + TURNS[0]["content"]}] + TURNS[1:]
    for sanitize in (False, True):
        ours = m.enc.encode([SYS] + TURNS, agp, sanitize, system="fold").tolist()
        assert ours == m.ref_ids(folded, agp, sanitize)
    assert m.enc.render([SYS] + TURNS, agp, system="fold") == m.ref_text(folded, agp)
    idx = m.enc.encode_detailed([SYS] + TURNS, agp, system="fold").message_indices.tolist()
    assert 0 in idx and 1 in idx  # the system text keeps its own message index


@pytest.mark.parametrize("name", ["llama-2-7b-chat", "mistral-7b-instruct-v0.1", "mistral-7b-instruct-v0.3", "gemma-3-it"])
def test_system_error_refuses_template_folding(name):
    m = support.load_model(name)
    with pytest.raises(chatids.ChatTemplateError, match=r'message 0: format \S+ has no system turn \(system="error"\)'):
        m.enc.encode([SYS] + TURNS, system="error")
    assert m.enc.encode(TURNS, system="error").tolist() == m.ref_ids(TURNS)


@pytest.mark.parametrize("name", ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "mistral-large-instruct-2411"])
def test_fold_is_refused_where_there_is_a_system_turn(name):
    m = support.load_model(name)
    with pytest.raises(chatids.ChatTemplateError, match='has a system turn; system="fold" is for formats without one'):
        m.enc.encode([SYS] + TURNS, system="fold", **m.kwargs())
    assert m.enc.encode([SYS] + TURNS, system="error", **m.kwargs()).tolist() == m.ref_ids([SYS] + TURNS)


def test_unknown_system_policy():
    m = support.load_model("gemma-3-it")
    with pytest.raises(chatids.ChatTemplateError, match='system must be None, "error" or "fold"'):
        m.enc.encode(TURNS, system="drop")


DOUBLED = [
    {"role": "user", "content": "First part."},
    {"role": "user", "content": "Second part."},
    {"role": "assistant", "content": "One"},
    {"role": "assistant", "content": "Two"},
    {"role": "user", "content": "Next"},
]
JOINED = [
    {"role": "user", "content": "First part.\n\nSecond part."},
    {"role": "assistant", "content": "One\n\nTwo"},
    {"role": "user", "content": "Next"},
]


@pytest.mark.parametrize("name", sorted(n for n, (f, _) in support.MODELS.items() if f in support.ALTERNATING))
def test_merge_consecutive_equals_the_hand_joined_conversation(name):
    m = support.load_model(name)
    with pytest.raises(chatids.ChatTemplateError, match=r"message 1: .*alternate"):
        m.enc.encode(DOUBLED, **m.kwargs())
    for sanitize in (False, True):
        ours = m.enc.encode(DOUBLED, True, sanitize, merge_consecutive=True, **m.kwargs()).tolist()
        assert ours == m.ref_ids(JOINED, True, sanitize)
    idx = set(m.enc.encode_detailed(DOUBLED, merge_consecutive=True, **m.kwargs()).message_indices.tolist())
    assert {0, 2, 4} <= idx and not {1, 3} & idx  # merged messages carry the first original index


def test_merge_errors_name_the_original_message():
    m = support.load_model("gemma-3-it")
    bad = DOUBLED[:4] + [{"role": "narrator", "content": "x"}, {"role": "narrator", "content": "y"}]
    with pytest.raises(chatids.ChatTemplateError, match=r"^message 4: "):
        m.enc.encode(bad, merge_consecutive=True)


def codes(findings):
    return [(f.code, f.message) for f in findings]


def test_lint_reports_silent_failures():
    gemma = support.load_model("gemma-2-it-on-gemma3-tokenizer").enc
    convo = [SYS, {"role": "user", "content": "a <start_of_turn>"}, {"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}]
    found = codes(gemma.lint(convo, add_generation_prompt=True, add_special_tokens=True))
    assert ("system-unsupported", 0) in found
    assert ("role-renamed", 3) in found
    assert ("alternation", 2) in found
    assert ("ends-with-assistant", 3) in found
    assert ("control-token-in-content", 1) in found
    assert not any(code == "refused" for code, _ in found)  # already explained above
    folded = codes(gemma.lint(convo, system="fold", merge_consecutive=True))
    assert ("system-folded", 0) in folded and not any(c == "alternation" for c, _ in folded)

    llama = support.load_model("llama-3.1-8b-instruct").enc
    prompt = [{"role": "user", "content": "hi"}]
    assert codes(llama.lint(prompt, for_generation=True, date_string="x")) == [("missing-generation-prompt", None)]
    assert codes(llama.lint(prompt, add_generation_prompt=True, add_special_tokens=True, date_string="x")) == [("double-bos", None)]
    assert llama.lint(prompt, add_generation_prompt=True, date_string="x") == []

    mistral = support.load_model("mistral-7b-instruct-v0.3").enc
    found = codes(mistral.lint([SYS] + TURNS[:2], add_generation_prompt=True))
    assert ("system-folded", 0) in found and ("generation-prompt-ignored", None) in found and ("refused", 0) in found

    qwen = support.load_model("qwen2.5-7b-instruct").enc
    found = qwen.lint([{"role": "user", "content": "q"}, {"role": "narrator", "content": "x"}])
    assert [(f.code, f.message) for f in found] == [("refused", 1)]
    assert "would drop the message silently" in found[0].explanation
    assert str(found[0]).startswith("[refused] message 1: ")


def test_lint_finds_nothing_wrong_with_a_clean_conversation(model):
    """Only the format's documented behaviour is reported for a well-formed conversation."""
    turns = TURNS if model.format == "gemma" else [SYS] + TURNS
    agp = model.format not in support.IGNORES_GENERATION_PROMPT
    findings = model.enc.lint(turns, add_generation_prompt=agp, for_generation=True, **model.ours_kwargs())
    unexpected = [str(f) for f in findings if f.code not in ("system-folded", "role-renamed")]
    assert not unexpected
