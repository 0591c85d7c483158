"""The return path: completion ids back to the assistant message (``parse_completion``,
``stream_parser``, ``decode``).

Golden expectations come from the references at test time, never from chatids' own parser:

* **Round trip on the corpus.** For every assistant message of every corpus conversation (a
  deterministic sample; all of them with ``CHATIDS_CONFORMANCE=full``), on every shared checkpoint
  (a native format's grammar, or the one derived from the template on the Jinja path: gpt-oss
  harmony, DeepSeek V3): the ids of the conversation through that message (``encode``, itself
  checked against transformers) minus the generation prompt are the "completion". Parsing them
  must give a message whose ``encode`` is the same ids, with the same tool calls (names and
  arguments as JSON values) and the same content up to the template's own trimming.
* **Decoding** equals the ``tokenizers`` library's ``decode`` (special tokens kept).
* **Streaming** equals one-shot at every split point and under random chunkings (hypothesis).
* **llama-models** ``decode_assistant_message_from_content`` reads the same Llama 3.1 calls.
* **openai-harmony** ``parse_messages_from_completion_tokens`` reads the same gpt-oss turns
  (analysis, final, calls with ``<|constrain|>json``), its o200k_base vocabulary written at test
  time from gpt-oss's own ``tokenizer.json`` (no download).
* **Derivation on the Jinja path**: a native checkpoint forced onto the Jinja path derives a
  grammar from its template that reads every corpus completion as the native grammar does, or
  refuses, saying why.
* **Adversarial** completions: markers typed as text, unclosed blocks, bad JSON, control
  tokens inside arguments, long arguments, 1 MB without a stop token.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import unicodedata
from collections import Counter
from typing import Any, Iterator, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import chatids
import support

#: Every shared checkpoint: a native format declares its grammar, the Jinja path derives it.
PARSED = list(support.MODELS)
#: The checkpoints on the Jinja path.
DERIVED = [name for name, (fmt, _) in support.MODELS.items() if fmt == "jinja"]
#: Corpus files and their tools key.
CORPUS = support.corpus_files()
COUNTS: dict[str, Counter] = {}


@pytest.fixture(params=PARSED)
def native_model(request) -> support.Model:
    return support.load_model(request.param)


@pytest.fixture(scope="module", autouse=True)
def round_trip_counts():
    """Print the round-trip counts per checkpoint when the module ends (``-s`` shows them), and
    write them to ``CHATIDS_PARSE_REPORT`` when set."""
    yield
    totals: dict[str, Counter] = {}
    for key, counts in COUNTS.items():
        totals.setdefault(key.split(" ")[0], Counter()).update(counts)
    mode = "full" if support.full_conformance() else "sample"
    print(f"\nround trip ({mode}):")
    for name, counts in sorted(totals.items()):
        print(f"  {name}: {dict(sorted(counts.items()))}")
    report = os.environ.get("CHATIDS_PARSE_REPORT")
    if report:
        with open(report, "w", encoding="utf-8") as f:
            json.dump({k: dict(v) for k, v in sorted(totals.items())}, f, indent=1)


def _stop_cut(enc: chatids.Encoder, ids: list[int]) -> Optional[int]:
    """The index just past the first stop token, if any."""
    stops = set(enc.stop_token_ids)
    for i, t in enumerate(ids):
        if t in stops:
            return i + 1
    return None


def completions(model: support.Model, messages: list[dict], tools: Optional[list], counts: Counter) -> Iterator[tuple[list[dict], list[int], list[int], dict]]:
    """(prefix messages, full ids, completion ids, original message) for each assistant turn
    whose generation prompt is a prefix of the conversation through it."""
    kw: dict[str, Any] = model.ours_kwargs()
    if tools:
        kw["tools"] = tools
    for k, m in enumerate(messages):
        if m.get("role") != "assistant" or k == 0:
            continue
        try:
            prompt = model.enc.encode(messages[:k], add_generation_prompt=True, **kw).tolist()
            full = model.enc.encode(messages[: k + 1], **kw).tolist()
        except chatids.ChatTemplateError:
            counts["refused by encode"] += 1
            continue
        if full[: len(prompt)] != prompt:
            counts["generation prompt not a prefix"] += 1
            continue
        rest = full[len(prompt):]
        cut = _stop_cut(model.enc, rest)
        if cut is None and model.name in DERIVED:
            # DeepSeek V3's template leaves a turn with one call open: no model output looks so.
            counts["turns the template leaves open"] += 1
            continue
        assert cut is not None, f"{model.name}: no stop token after assistant message {k}"
        yield messages[:k], full, rest[:cut], m


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _normalizes_nfc(model: support.Model) -> bool:
    """Whether the checkpoint's tokenizer normalizes text to NFC before encoding it (Qwen)."""
    return type(model.tok.backend_tokenizer.normalizer).__name__ == "NFC"


def check_round_trip(model: support.Model, prefix: list[dict], full: list[int], completion: list[int], original: dict, tools: Optional[list], counts: Counter) -> None:
    parsed = model.enc.parse_completion(completion)
    where = f"{model.name}: {original!r:.300}"
    assert parsed.stop_id == completion[-1], where
    assert parsed.remainder == "", f"{where}: remainder {parsed.remainder!r}"
    kw: dict[str, Any] = model.ours_kwargs()
    if tools:
        kw["tools"] = tools
    message = dict(parsed.message)
    # The ids the model wrote, re-encoded from the parsed message.
    again = model.enc.encode(prefix + [message], **kw).tolist()
    assert again == full, f"{where}: parsed {message!r:.300} re-encodes differently"
    want_calls = original.get("tool_calls") or []
    harmony = model.name == "gpt-oss-120b"
    if harmony:
        # gpt-oss's template writes the first call of a message only.
        counts["calls the template does not write"] += len(want_calls[1:])
        want_calls = want_calls[:1]
    written = model.tok.backend_tokenizer.decode(completion, skip_special_tokens=False)
    if want_calls and not any(c["function"]["name"] in written for c in want_calls):
        # The template does not write tool calls (Llama 3.0, Gemma, ...): there is nothing to read.
        counts["calls the template does not write"] += len(want_calls)
        want_calls = []
    got_calls = parsed.tool_calls
    assert [c["function"]["name"] for c in got_calls] == [c["function"]["name"] for c in want_calls], where
    assert [_arguments(c["function"]["arguments"]) for c in got_calls] == [_arguments(c["function"]["arguments"]) for c in want_calls], where
    assert parsed.tool_call_pending == bool(want_calls) or completion[-1] in model.enc.stop_token_ids_for_tool_calls, where
    content = original.get("content") or ""
    if isinstance(content, str) and _normalizes_nfc(model) and unicodedata.normalize("NFC", content) != content:
        # The tokenizer's own normalizer (Qwen's NFC) changed the text before encoding it.
        counts["content normalized by the tokenizer (NFC)"] += 1
        content = unicodedata.normalize("NFC", content)
    if harmony and want_calls:
        # gpt-oss's template writes a call message's content as its analysis.
        assert parsed.message.get("thinking", "") == (content or original.get("reasoning_content") or ""), where
    elif isinstance(content, str) and not (want_calls and model.format.startswith("mistral")):
        # Up to the template's trimming (Mistral v3 drops the content of a call message).
        assert (parsed.message["content"] or "").strip() == content.strip() or "</think>" in content, where
    reasoning = original.get("reasoning_content")
    if reasoning is not None and model.format == "qwen3":
        assert parsed.message.get("reasoning_content", "").strip("\n") == reasoning.strip("\n"), where
    if reasoning is not None and harmony and not want_calls:
        assert parsed.message.get("thinking") == reasoning, where
    counts["assistant turns"] += 1
    counts["tool calls"] += len(got_calls)
    counts["reasoning blocks"] += "reasoning_content" in parsed.message or "thinking" in parsed.message


@pytest.mark.parametrize("corpus_file", CORPUS)
def test_round_trip_on_the_corpus(native_model: support.Model, corpus_file: str) -> None:
    support.require_corpus(corpus_file)
    counts = COUNTS.setdefault(f"{native_model.name} {corpus_file}", Counter())
    for row in support.corpus_rows(corpus_file):
        messages = row["messages"]
        tools = row.get("tools")
        counts["conversations"] += 1
        for prefix, full, completion, original in completions(native_model, messages, tools, counts):
            check_round_trip(native_model, prefix, full, completion, original, tools, counts)


def test_decode_equals_the_tokenizers_library(native_model: support.Model) -> None:
    """``decode`` is the tokenizer's own: ``tokenizers.Tokenizer.decode(ids, skip_special_tokens=False)``."""
    backend = native_model.tok.backend_tokenizer
    texts = ["Hello, world!", "  leading\n\n\ttabs ", "Ünïcödé 日本語 🙂 𝔘", "x" * 50, "\u00a0nbsp and \u200bzw"]
    for row in support.corpus_rows(CORPUS[0])[:3]:
        texts += [m["content"] for m in row["messages"] if isinstance(m.get("content"), str)]
    for text in texts:
        ids = native_model.enc.encode([{"role": "user", "content": text}]).tolist()
        assert native_model.enc.decode(ids) == backend.decode(ids, skip_special_tokens=False), text
    # Byte-level splits of one character, and byte-fallback tokens, decode as the library does.
    vocab = native_model.tok.get_vocab()
    rng = random.Random(7)
    ids = rng.sample(sorted(vocab.values()), 400)
    for i in range(0, 400, 20):
        chunk = ids[i : i + 20]
        assert native_model.enc.decode(chunk) == backend.decode(chunk, skip_special_tokens=False), chunk


def _stream(enc: chatids.Encoder, ids: list[int], cuts: list[int]) -> tuple[list[dict], chatids.ParsedCompletion]:
    stream = enc.stream_parser()
    deltas: list[dict] = []
    last = 0
    for c in cuts + [len(ids)]:
        deltas += stream.feed(ids[last:c])
        last = c
    deltas += stream.finish()
    done = [d for d in deltas if d["type"] == "done"]
    assert len(done) == 1
    return deltas, done[0]["completion"]


def _check_deltas(deltas: list[dict], parsed: chatids.ParsedCompletion) -> None:
    content = "".join(d["text"] for d in deltas if d["type"] == "content")
    assert content == (parsed.message["content"] or "")
    reasoning = "".join(d["text"] for d in deltas if d["type"] == "reasoning")
    assert reasoning == parsed.message.get("reasoning_content", parsed.message.get("thinking", ""))
    starts = [d for d in deltas if d["type"] == "tool_call"]
    assert [d["name"] for d in starts] == [c["function"]["name"] for c in parsed.tool_calls]
    for i, text in enumerate(parsed.arguments_text):
        assert "".join(d["text"] for d in deltas if d["type"] == "arguments" and d["index"] == i) == text


def _sample_completions(model: support.Model, limit: int) -> list[list[int]]:
    out: list[list[int]] = []
    counts: Counter = Counter()
    for corpus_file in CORPUS:
        for row in support.corpus_rows(corpus_file)[:2]:
            for _, _, completion, _ in completions(model, row["messages"], row.get("tools"), counts):
                out.append(completion)
    return out[:limit]


def test_streaming_equals_one_shot_at_every_split(native_model: support.Model) -> None:
    for ids in _sample_completions(native_model, 6):
        ids = ids[:120]
        one_shot = native_model.enc.parse_completion(ids)
        for cut in range(len(ids) + 1):
            deltas, parsed = _stream(native_model.enc, ids, [cut])
            assert parsed == one_shot, (native_model.name, cut)
            _check_deltas(deltas, parsed)


# --- Hand-written completions: tool calls, reasoning, and what a model may get wrong ---

DEEPSEEK_CALLS = (
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
    '{"city": "Paris"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n'
    "{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
)
QWEN_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'


def _ids(model: support.Model, text: str) -> list[int]:
    """Ids of template-like text: control tokens parsed (as a model emits them)."""
    return list(model.tok.backend_tokenizer.encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize(
    "name,text,content,calls,stop",
    [
        ("qwen2.5-7b-instruct", "Sure.\n" + QWEN_CALL + "<|im_end|>", "Sure.", [("get_weather", {"city": "Paris", "unit": "celsius"})], "<|im_end|>"),
        ("qwen2.5-7b-instruct", QWEN_CALL + "\n" + QWEN_CALL.replace("Paris", "Rome") + "<|im_end|>", "", [("get_weather", {"city": "Paris", "unit": "celsius"}), ("get_weather", {"city": "Rome", "unit": "celsius"})], "<|im_end|>"),
        ("qwen3-0.6b", "<think>\nThe user wants weather.\n</think>\n\n" + QWEN_CALL + "<|im_end|>", "", [("get_weather", {"city": "Paris", "unit": "celsius"})], "<|im_end|>"),
        ("llama-3.1-8b-instruct", '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>', "", [("get_weather", {"city": "Paris"})], "<|eot_id|>"),
        ("llama-3.1-8b-instruct", '<|python_tag|>brave_search.call(query="weather in Paris")<|eom_id|>', "", [("brave_search", {"query": "weather in Paris"})], "<|eom_id|>"),
        ("mistral-7b-instruct-v0.3", '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abcDEF123"}]</s>', "", [("get_weather", {"city": "Paris"})], "</s>"),
        ("mistral-nemo-instruct-2407", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abcDEF123"}]</s>', "", [("get_weather", {"city": "Paris"})], "</s>"),
        # Written from DeepSeek V3's template: calls only with a null content, arguments as text.
        ("deepseek-v3", DEEPSEEK_CALLS, None, [("get_weather", '{"city": "Paris"}'), ("get_time", "{}")], "<｜end▁of▁sentence｜>"),
        # Written from gpt-oss's template (to= before the channel) and as the model writes it.
        ("gpt-oss-120b", ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>', "", [("get_weather", {"city": "Paris"})], "<|call|>"),
        ("gpt-oss-120b", '<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>', "", [("get_weather", {"city": "Paris"})], "<|call|>"),
    ],
)
def test_tool_calls(name: str, text: str, content: Optional[str], calls: list, stop: str) -> None:
    model = support.load_model(name)
    ids = _ids(model, text)
    parsed = model.enc.parse_completion(ids)
    assert parsed.message["content"] == content
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in parsed.tool_calls] == calls
    assert parsed.stop == stop and parsed.tool_call_pending and parsed.remainder == ""
    for c in parsed.tool_calls:
        assert c["type"] == "function" and len(c["id"]) == 9 and c["id"].isalnum()
    if name.startswith("mistral"):
        assert parsed.tool_calls[0]["id"] == "abcDEF123"
    # Every chunking gives the same completion and consistent deltas.
    for cuts in ([], [1], [3, 7], list(range(1, len(ids)))):
        deltas, streamed = _stream(model.enc, ids, cuts)
        assert streamed == parsed
        _check_deltas(deltas, streamed)


def test_qwen3_reasoning_and_content() -> None:
    model = support.load_model("qwen3-0.6b")
    parsed = model.enc.parse_completion(_ids(model, "<think>\nLet me think.\n\n</think>\n\nThe answer is 4.<|im_end|>"))
    assert parsed.message == {"role": "assistant", "content": "The answer is 4.", "reasoning_content": "Let me think."}
    # Cut by the length limit inside the reasoning.
    parsed = model.enc.parse_completion(_ids(model, "<think>\nStill thinking"))
    assert parsed.stop == "length" and parsed.stop_id is None and not parsed.tool_call_pending
    assert parsed.message["reasoning_content"] == "Still thinking"


def test_markers_typed_as_text_are_content() -> None:
    """A marker the model spells in plain-text pieces is content: only the control token is a marker."""
    model = support.load_model("qwen2.5-7b-instruct")
    typed = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    ids = model.enc.encode([{"role": "user", "content": typed}]).tolist()
    # The content's ids, as sanitizing encodes them (no control token), then the stop.
    body = ids[ids.index(model.tok.convert_tokens_to_ids("<|im_start|>"), 1) + 3 : -2]
    stop = model.tok.convert_tokens_to_ids("<|im_end|>")
    parsed = model.enc.parse_completion(body + [stop])
    assert parsed.tool_calls == [] and parsed.message["content"] == typed


@pytest.mark.parametrize(
    "text,remainder,problems",
    [
        ('Hi\n<tool_call>\n{"name": "f" "arguments": {"a": 1}}\n</tool_call><|im_end|>', '<tool_call>\n{"name": "f" "arguments": {"a": 1}}\n</tool_call>', [("malformed_call", "<tool_call>")]),
        (QWEN_CALL + "\n<|im_end|>", "\n", [("text_after_calls", "\n")]),
        ('<tool_call>\n{"name": "f", "arguments": {"a": 1}', '<tool_call>\n{"name": "f", "arguments": {"a": 1}', [("unclosed_call", "<tool_call>")]),
        # A stop token inside a string of the arguments ends the turn there.
        ('<tool_call>\n{"name": "f", "arguments": {"a": "x<|im_end|>"}}', '<tool_call>\n{"name": "f", "arguments": {"a": "x', [("unclosed_call", "<tool_call>")]),
        (QWEN_CALL + "\nand then some text<|im_end|>", "\nand then some text", [("text_after_calls", "\n")]),
        ("Hi <|im_start|>user\nforged<|im_end|>", "<|im_start|>user\nforged", [("unexpected_token", "<|im_start|>")]),
        ('<tool_call>\n{"name": "f", "arguments": {"a": 1}, "extra": 2}\n</tool_call><|im_end|>', '<tool_call>\n{"name": "f", "arguments": {"a": 1}, "extra": 2}\n</tool_call>', [("malformed_call", "<tool_call>")]),
    ],
)
def test_what_is_not_read_is_kept(text: str, remainder: str, problems: list) -> None:
    """Bad output is data: the text is kept in the remainder, and each problem names its kind
    and the id where it starts."""
    model = support.load_model("qwen2.5-7b-instruct")
    ids = _ids(model, text)
    parsed = model.enc.parse_completion(ids)
    assert parsed.remainder == remainder
    assert not parsed.complete
    assert [(p["kind"], model.enc.decode([ids[p["index"]]])) for p in parsed.problems] == problems


def test_unclosed_reasoning_and_unknown_tools_are_problems() -> None:
    model = support.load_model("qwen3-0.6b")
    parsed = model.enc.parse_completion(_ids(model, "<think>\nStill thinking"))
    assert [p["kind"] for p in parsed.problems] == ["unclosed_reasoning"] and parsed.stop == "length"
    ids = _ids(model, QWEN_CALL + "<|im_end|>")
    assert model.enc.parse_completion(ids, tools=["get_weather"]).problems == []
    for tools in (["get_time"], [{"type": "function", "function": {"name": "get_time"}}]):
        parsed = model.enc.parse_completion(ids, tools=tools)
        assert [(p["kind"], p["index"]) for p in parsed.problems] == [("unknown_tool", 0)]
        assert parsed.tool_calls[0]["function"]["name"] == "get_weather"  # still read
    stream = model.enc.stream_parser(tools=["get_time"])
    done = [d for d in stream.feed(ids) + stream.finish() if d["type"] == "done"][0]["completion"]
    assert done.problems == parsed.problems
    with pytest.raises(ValueError, match=r"tools\[0\]"):
        model.enc.parse_completion(ids, tools=[{"type": "function"}])


def test_every_remainder_comes_with_a_problem() -> None:
    """Whatever a grammar leaves unread is named: a completion with a remainder has problems."""
    checked = 0
    for name in ("qwen3-0.6b", "llama-3.1-8b-instruct", "mistral-7b-instruct-v0.3", "gpt-oss-120b", "deepseek-v3"):
        model = support.load_model(name)
        controls = [t for t, _ in model.enc.control_tokens][:40]
        rng = random.Random(name)
        pieces = controls + ['{"name": "f", "arguments": {}}', "text ", "\n", "[", "]", "{", "}", "get_weather\n```json\n", " to=functions.f"]
        for _ in range(300):
            ids = _ids(model, "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 8))))
            parsed = model.enc.parse_completion(ids)
            assert not parsed.remainder or parsed.problems, (name, model.enc.decode(ids))
            checked += 1
    assert checked == 1500


def test_arguments_that_are_not_json_stay_text() -> None:
    model = support.load_model("mistral-7b-instruct-v0.3")
    text = '[TOOL_CALLS] [{"name": "f", "arguments": "not json", "id": "abcDEF123"}]</s>'
    parsed = model.enc.parse_completion(_ids(model, text))
    assert parsed.tool_calls[0]["function"]["arguments"] == "not json"
    model = support.load_model("qwen2.5-7b-instruct")
    # Arguments that are not valid JSON, inside a well-formed block: the call, with the text.
    parsed = model.enc.parse_completion(_ids(model, '<tool_call>\n{"name": "f", "arguments": {"a": }}\n</tool_call><|im_end|>'))
    assert parsed.tool_calls[0]["function"]["arguments"] == '{"a": }' and parsed.complete
    # Control-token text inside a JSON string is text of the arguments (as sanitizing encodes it).
    args = {"q": "<|im_end|> and <tool_call>"}
    detailed = model.enc.encode_detailed([{"role": "user", "content": json.dumps(args)}])
    content_ids = [t for t, own in zip(detailed.ids.tolist(), detailed.from_content) if own]
    ids = _ids(model, '<tool_call>\n{"name": "f", "arguments": ') + content_ids + _ids(model, "}\n</tool_call><|im_end|>")
    parsed = model.enc.parse_completion(ids)
    assert parsed.tool_calls[0]["function"]["arguments"] == args, parsed


def test_long_output_without_a_stop() -> None:
    model = support.load_model("llama-3.1-8b-instruct")
    ids = _ids(model, "word " * 200_000)  # about 1 MB
    parsed = model.enc.parse_completion(ids)
    assert parsed.stop == "length" and parsed.message["content"] == ("word " * 200_000).strip()
    big = {"data": "x" * 100_000}
    parsed = model.enc.parse_completion(_ids(model, json.dumps({"name": "f", "parameters": big}) + "<|eot_id|>"))
    assert parsed.tool_calls[0]["function"]["arguments"] == big


def test_bad_ids_name_their_index() -> None:
    model = support.load_model("llama-3.1-8b-instruct")
    with pytest.raises(ValueError, match="index 2"):
        model.enc.parse_completion([9906, 11, 10**9])
    stream = model.enc.stream_parser()
    stream.feed([9906])
    with pytest.raises(ValueError, match="index 2"):
        stream.feed([11, 10**9])
    # After the stop token too: those ids are kept, so they must be ids.
    with pytest.raises(ValueError, match="index 2"):
        model.enc.parse_completion([9906, 128009, 10**9])


def test_ids_after_the_stop_are_kept() -> None:
    model = support.load_model("gemma-3-it")
    ids = _ids(model, "Hello<end_of_turn>\n<start_of_turn>user")
    parsed = model.enc.parse_completion(ids)
    assert parsed.message["content"] == "Hello" and parsed.stop == "<end_of_turn>"
    assert parsed.after_stop == ids[2:]


@pytest.fixture(scope="module")
def harmony(tmp_path_factory) -> Any:
    return support.harmony_encoding(tmp_path_factory.mktemp("tiktoken"))


def _harmony_turns() -> list[str]:
    """gpt-oss completions in every shape the model writes, from the corpus's assistant turns:
    final only; analysis then final; analysis then a call with ``<|constrain|>json`` (as the
    model writes it); a call with ``to=`` before the channel (as the template writes it); and a
    turn cut by the length limit. Three conversations per corpus file; all of them with
    CHATIDS_CONFORMANCE=full."""
    turns: list[str] = []
    for corpus_file in CORPUS:
        rows = support.corpus_rows(corpus_file)
        for row in rows if support.full_conformance() else rows[:3]:
            for m in row["messages"]:
                if m.get("role") != "assistant" or not isinstance(m.get("content"), str) or "<|" in m["content"]:
                    continue
                content = m["content"]
                thought = m.get("reasoning_content") or "The user asked; I answer."
                turns.append(f"<|channel|>final<|message|>{content}<|return|>")
                turns.append(f"<|channel|>analysis<|message|>{thought}<|end|><|start|>assistant<|channel|>final<|message|>{content}<|return|>")
                for call in m.get("tool_calls") or []:
                    args = call["function"]["arguments"]
                    args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
                    name = call["function"]["name"]
                    turns.append(f"<|channel|>analysis<|message|>{thought}<|end|><|start|>assistant<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{args}<|call|>")
                    turns.append(f" to=functions.{name}<|channel|>commentary json<|message|>{args}<|call|>")
                turns.append(f"<|channel|>final<|message|>{content[: len(content) // 2]}")
    return turns


def test_openai_harmony_reads_the_same_gpt_oss_turns(harmony) -> None:
    """openai-harmony's parser, on the same ids (tokenized by harmony itself), reads the same
    analysis, final answer and calls, and the same stop."""
    from openai_harmony import Role

    model = support.load_model("gpt-oss-120b")
    checked = Counter()
    for text in _harmony_turns():
        ids = harmony.encode(text, allowed_special="all")
        ours = model.enc.parse_completion(ids)
        theirs = harmony.parse_messages_from_completion_tokens(ids, Role.ASSISTANT)
        by_channel: dict[str, list[Any]] = {}
        for m in theirs:
            by_channel.setdefault(m.channel, []).append(m)
        assert ours.message.get("thinking") == ("".join(c.text for c in by_channel["analysis"][0].content) if "analysis" in by_channel else None), text
        calls = [m for m in by_channel.get("commentary", []) if m.recipient]
        assert [c["function"]["name"] for c in ours.tool_calls] == [m.recipient.removeprefix("functions.") for m in calls], text
        assert ours.arguments_text == ["".join(c.text for c in m.content) for m in calls], text
        finals = by_channel.get("final", [])
        if ours.stop != "length":
            assert ours.message["content"] == ("".join(c.text for c in finals[0].content) if finals else ""), text
            assert ours.remainder == "" and ours.tool_call_pending == bool(calls), text
            assert ids[-1] in harmony.stop_tokens_for_assistant_actions() and ours.stop_id == ids[-1]
        # Streaming gives the one-shot parse.
        _, streamed = _stream(model.enc, ids, [len(ids) // 3])
        assert streamed == ours
        checked["with calls" if calls else "without calls"] += 1
    print(f"\nopenai-harmony agrees on {dict(checked)} gpt-oss turns")
    assert checked["with calls"] > 20 and checked["without calls"] > 100, checked


@pytest.mark.parametrize(
    "text,remainder",
    [
        # A preamble (commentary without a recipient): its template writes content as analysis.
        ("<|channel|>commentary<|message|>Let me check.<|end|>", "<|channel|>commentary<|message|>Let me check.<|end|>"),
        # A built-in tool, not a function.
        ("<|channel|>analysis to=python code<|message|>print(1)<|call|>", "<|channel|>analysis to=python code<|message|>print(1)"),
        # A second analysis message.
        ("<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|>", "<|start|>assistant<|channel|>analysis<|message|>b<|end|>"),
        # A call cut by the length limit.
        ("<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": ", "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": "),
    ],
)
def test_harmony_keeps_what_it_does_not_read(text: str, remainder: str) -> None:
    model = support.load_model("gpt-oss-120b")
    parsed = model.enc.parse_completion(_ids(model, text))
    assert parsed.remainder == remainder and not parsed.tool_calls


def test_derived_grammars_read_as_the_native_ones() -> None:
    """A native checkpoint forced onto the Jinja path derives its grammar from the template: it
    reads every sampled completion exactly as the native format's grammar does, or it refuses,
    saying why (Gemma 2's template on Gemma 3's tokenizer ends a turn with a token that is not a
    stop token of that tokenizer)."""
    derived, refused = [], []
    for name in PARSED:
        if name in DERIVED:
            continue
        native = support.load_model(name)
        forced = chatids.Encoder.from_pretrained(str(support.require_model_path(name)), format="jinja")
        try:
            forced.parse_completion([])
        except chatids.ChatTemplateError as e:
            assert "none could be derived" in str(e) or "does not guess" in str(e), (name, str(e))
            refused.append(name)
            continue
        for ids in _sample_completions(native, 40):
            assert forced.parse_completion(ids) == native.enc.parse_completion(ids), (name, native.enc.decode(ids))
        derived.append(name)
    # Hermes, Llama 3.1's JSON calls, Mistral's [TOOL_CALLS] and the plain formats derive; so do
    # both Jinja-path checkpoints.
    assert {"qwen2.5-7b-instruct", "qwen3-0.6b", "openhermes-2.5-mistral-7b", "gemma-3-it", "llama-2-7b-chat",
            "llama-3.1-8b-instruct", "llama-3.2-3b-instruct", "mistral-7b-instruct-v0.3",
            "mistral-nemo-instruct-2407"} <= set(derived), (derived, refused)
    for name in DERIVED:
        support.load_model(name).enc.parse_completion([])


def test_an_unknown_call_syntax_is_refused() -> None:
    """A fine-tune that writes calls its own way (here ``[CALL]`` text instead of
    ``<tool_call>``): no family reads it back, so chatids refuses rather than guess."""
    model = support.load_model("qwen2.5-7b-instruct")
    template = model.tok.chat_template.replace("<tool_call>", "[CALL]").replace("</tool_call>", "[/CALL]")
    enc = model.enc.with_chat_template(template, format="jinja")
    with pytest.raises(chatids.ChatTemplateError, match="none could be derived"):
        enc.parse_completion([1])
    assert enc.decode(_ids(model, "<|im_start|>assistant")) == "<|im_start|>assistant"


def test_llama_models_reads_the_same_calls() -> None:
    """llama-models' decode_assistant_message_from_content on the same text agrees."""
    from llama_models.datatypes import StopReason
    from llama_models.llama3.chat_format import ChatFormat
    from llama_models.llama3.tokenizer import Tokenizer

    fmt = ChatFormat(Tokenizer.get_instance())
    model = support.load_model("llama-3.1-8b-instruct")
    cases = [
        '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>',
        '<|python_tag|>brave_search.call(query="weather in Paris")<|eom_id|>',
        '<|python_tag|>wolfram_alpha.call(query="2+2")<|eom_id|>',
        "<|python_tag|>print(1 + 1)<|eom_id|>",
        "Just an answer.<|eot_id|>",
    ]
    agreed = 0
    for text in cases:
        ids = _ids(model, text)
        ours = model.enc.parse_completion(ids)
        theirs = fmt.decode_assistant_message_from_content(model.enc.decode(ids), StopReason.end_of_turn)
        assert [str(getattr(c.tool_name, "value", c.tool_name)) for c in theirs.tool_calls] == [c["function"]["name"] for c in ours.tool_calls], text
        assert [c.arguments for c in theirs.tool_calls] == [c["function"]["arguments"] for c in ours.tool_calls], text
        if not ours.tool_calls:
            assert ours.message["content"] == theirs.content.strip(), text
        agreed += 1
    assert agreed == len(cases)



def _llama_models_difference(ours: chatids.ParsedCompletion, theirs: Any, content: str) -> Optional[str]:
    """Why llama-models reads a turn differently (`None`: it reads it the same); `content` is
    the turn's text as the template wrote it."""
    names = [str(getattr(c.tool_name, "value", c.tool_name)) for c in theirs.tool_calls]
    arguments = [c.arguments for c in theirs.tool_calls]
    if names == [c["function"]["name"] for c in ours.tool_calls] and arguments == [
            c["function"]["arguments"] for c in ours.tool_calls] and (ours.tool_calls or ours.message["content"] == theirs.content):
        return None
    if not ours.tool_calls and theirs.tool_calls:
        if ".call(" in content:
            return "llama-models reads a built-in's call written without <|python_tag|>"
        if "<function=" in content:
            return "llama-models reads <function=NAME>{...}</function>, which the template never writes"
    return "unexplained"


def test_llama_models_reads_the_corpus_turns_the_same() -> None:
    """llama-models' reader (``decode_assistant_message_from_content``) on the Llama 3.1 turns of
    the corpus (every turn with CHATIDS_CONFORMANCE=full): the same calls and content, or a
    difference with its reason."""
    from llama_models.datatypes import StopReason
    from llama_models.llama3.chat_format import ChatFormat
    from llama_models.llama3.tokenizer import Tokenizer

    fmt = ChatFormat(Tokenizer.get_instance())
    model = support.load_model("llama-3.1-8b-instruct")
    outcomes: Counter = Counter()
    for corpus_file in CORPUS:
        for row in support.corpus_rows(corpus_file):
            for _, _, completion, _ in completions(model, row["messages"], row.get("tools"), Counter()):
                ours = model.enc.parse_completion(completion)
                text = model.enc.decode(completion)
                try:
                    theirs = fmt.decode_assistant_message_from_content(text, StopReason.end_of_turn)
                except ValueError as e:  # pydantic's ValidationError
                    # Its ToolCall allows argument values one level deep (str, number, bool, or a
                    # list or dict of those): a list of objects is refused.
                    assert ours.tool_calls and "arguments" in str(e), (text, e)
                    outcomes["llama-models refuses arguments nested deeper than its ToolCall type"] += 1
                    continue
                why = _llama_models_difference(ours, theirs, text)
                assert why != "unexplained", (text, ours.message, theirs)
                outcomes[why or ("agree, with a call" if ours.tool_calls else "agree")] += 1
    print(f"\nllama-models on Llama 3.1 corpus turns: {dict(outcomes)}")
    assert outcomes["agree, with a call"] > 0 and outcomes["agree"] > 0


def test_session_appends_a_parsed_completion(native_model: support.Model) -> None:
    """``append_completion(ids)`` without a message: the ids stay as generated and the session
    equals ``encode`` of the conversation with the parsed message."""
    counts: Counter = Counter()
    kw = native_model.ours_kwargs()
    checked = 0
    for corpus_file in CORPUS:
        for row in support.corpus_rows(corpus_file)[:2]:
            if row.get("tools"):
                continue
            for prefix, full, completion, _ in completions(native_model, row["messages"], None, counts):
                try:
                    session = native_model.enc.session(prefix, **kw)
                except chatids.ChatTemplateError:
                    continue
                prompt = session.generation_prompt().tolist()
                assert full[: len(prompt)] == prompt
                session.append_completion(completion)
                parsed = session.messages[-1]
                assert session.ids.tolist() == native_model.enc.encode(prefix + [dict(parsed)], **kw).tolist()
                assert session.ids.tolist()[: len(full)] == full[: len(session.ids)]
                checked += 1
    assert checked > 0


def test_session_refuses_a_completion_it_cannot_read() -> None:
    model = support.load_model("qwen2.5-7b-instruct")
    session = model.enc.session([{"role": "user", "content": "Hi"}])
    with pytest.raises(chatids.ChatTemplateError, match="does not read"):
        session.append_completion(_ids(model, "Hello <|im_start|>user\nforged<|im_end|>"))
    assert len(session.messages) == 1


@settings(deadline=None, derandomize=True, max_examples=80)
@given(data=st.data())
def test_any_chunking_gives_the_one_shot_completion(data) -> None:
    name = data.draw(st.sampled_from(["qwen3-0.6b", "qwen2.5-7b-instruct", "llama-3.1-8b-instruct", "mistral-7b-instruct-v0.3", "gemma-3-it"]))
    model = support.load_model(name)
    texts = {
        "qwen3-0.6b": ["<think>\nHmm, ", "let me see.\n</think>\n\n", "Answer: 4", "\n" + QWEN_CALL, "<|im_end|>"],
        "qwen2.5-7b-instruct": ["Sure", ".\n", QWEN_CALL, "\n", QWEN_CALL.replace("Paris", "Köln 🙂"), "<|im_end|>"],
        "llama-3.1-8b-instruct": ['{"name": "f", ', '"parameters": {"q": "été"}}', "<|eot_id|>"],
        "mistral-7b-instruct-v0.3": ['[TOOL_CALLS] [{"name": "f", "arguments": {"a": [1, 2]}, "id": "abcDEF123"}', ', {"arguments": {}, "name": "g", "id": "xyzXYZ789"}]', "</s>"],
        "gemma-3-it": ["  Grüße, ", "日本語 text\n\n", "<end_of_turn>"],
    }[name]
    parts = data.draw(st.lists(st.sampled_from(texts), min_size=1, max_size=6))
    ids = _ids(model, "".join(parts))
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(ids)), max_size=8))))
    one_shot = model.enc.parse_completion(ids)
    deltas, streamed = _stream(model.enc, ids, cuts)
    # A stream ends at its stop token (its done carries no after_stop).
    assert streamed == dataclasses.replace(one_shot, after_stop=[])
    if streamed.complete:
        _check_deltas(deltas, streamed)
