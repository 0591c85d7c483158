"""Reading completions back, side by side (one pytest-benchmark group per model).

* ``parse-<model>``: one completion of about 1,000 tokens, content then a tool call where the
  format writes calls (Qwen2.5: a ``<tool_call>`` block; Llama 3.1: a ``<|python_tag|>``
  built-in call), ending with the stop token:
  - ``chatids parse_completion``: decoding and reading it into the message;
  - ``chatids stream, one id per feed``: the same through ``stream_parser`` fed one id at a time
    from Python, as a serving loop does (``extra_info["ns_per_token"]``);
  - ``transformers decode``: ``tokenizer.decode(ids)`` alone, the first step of any
    hand-written parser (no parsing), as the yardstick.

  Before timing, the parse is checked: the call is read, the content equals the text written.
* ``parse-gpt-oss-120b``: a harmony completion of about 1,000 tokens (an analysis message, then
  a call with ``<|constrain|>json``), tokenized by openai-harmony itself:
  - ``chatids parse_completion`` and ``chatids stream, one id per feed``, as above;
  - ``openai-harmony parse_messages_from_completion_tokens``: the reference parser, one shot;
  - ``openai-harmony StreamableParser, one id per process``: its streaming parser.

  Before timing, both parsers are checked to read the same analysis, call and arguments.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import chatids

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import support  # noqa: E402

MODELS = {
    "qwen2.5-7b-instruct": '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call><|im_end|>',
    "llama-3.1-8b-instruct": '<|python_tag|>brave_search.call(query="weather in Paris")<|eom_id|>',
}


def _stream(enc: chatids.Encoder, ids: list[int]) -> None:
    """Feed ``ids`` to a stream parser one at a time, as a serving loop does."""
    s = enc.stream_parser()
    feed = s.feed
    for t in ids:
        feed(t)
    s.finish()


class ParseBench:
    def __init__(self, name: str, corpus: list[list[dict]]):
        from transformers import AutoTokenizer

        path = os.path.join(os.environ["CHATIDS_MODELS_DIR"], name)
        self.name = name
        self.enc = chatids.Encoder.from_pretrained(path)
        self.tok = AutoTokenizer.from_pretrained(path)
        text = ""
        for conv in corpus:
            for m in conv:
                if m["role"] == "assistant":
                    text += m["content"] + "\n\n"
            if len(self.tok.encode(text, add_special_tokens=False)) > 1000:
                break
        body = self.tok.encode(text, add_special_tokens=False)[:1000]
        self.content = self.tok.decode(body).strip()
        tail = MODELS[name]
        if name.startswith("llama"):
            # Llama 3's built-in call stands alone in its turn: the content goes in a turn of its own.
            self.ids = self.tok.encode(self.content, add_special_tokens=False) + self.tok.encode("<|eot_id|>", add_special_tokens=False)
            self.call_ids = self.tok.encode(tail, add_special_tokens=False)
        else:
            self.ids = self.tok.encode(self.content + tail, add_special_tokens=False)
            self.call_ids = None
        parsed = self.enc.parse_completion(self.ids)
        assert parsed.complete and parsed.message["content"] == self.content, name
        if self.call_ids is None:
            assert parsed.tool_calls[0]["function"]["name"] == "get_weather"
        else:
            call = self.enc.parse_completion(self.call_ids)
            assert call.tool_calls[0]["function"] == {"name": "brave_search", "arguments": {"query": "weather in Paris"}}

    def parse(self) -> None:
        self.enc.parse_completion(self.ids)

    def stream(self) -> None:
        _stream(self.enc, self.ids)

    def decode(self) -> None:
        self.tok.decode(self.ids)


@pytest.fixture(scope="module", params=list(MODELS))
def parse_bench(request, corpus) -> ParseBench:
    return ParseBench(request.param, corpus)


def test_parse_chatids(benchmark, parse_bench):
    benchmark.group = f"parse-{parse_bench.name}"
    benchmark.extra_info.update(tokens=len(parse_bench.ids), conversations=1, unit="completions")
    benchmark(parse_bench.parse)


def test_parse_chatids_stream(benchmark, parse_bench):
    benchmark.group = f"parse-{parse_bench.name}"
    benchmark.extra_info.update(tokens=len(parse_bench.ids), conversations=1, unit="completions")
    benchmark(parse_bench.stream)
    if benchmark.stats is not None:
        benchmark.extra_info["ns_per_token"] = round(benchmark.stats.stats.median / len(parse_bench.ids) * 1e9, 1)


def test_parse_transformers_decode(benchmark, parse_bench):
    benchmark.group = f"parse-{parse_bench.name}"
    benchmark.extra_info.update(tokens=len(parse_bench.ids), conversations=1, unit="completions")
    benchmark(parse_bench.decode)


class HarmonyBench:
    def __init__(self, corpus: list[list[dict]], cache: Path):
        from openai_harmony import Role, StreamableParser

        self.Role, self.StreamableParser = Role, StreamableParser
        self.harmony = support.harmony_encoding(cache)
        self.enc = chatids.Encoder.from_pretrained(os.path.join(os.environ["CHATIDS_MODELS_DIR"], "gpt-oss-120b"))
        text = ""
        for conv in corpus:
            for m in conv:
                if m["role"] == "assistant" and "<|" not in m["content"]:
                    text += m["content"] + "\n\n"
            if len(self.harmony.encode(text)) > 1000:
                break
        self.thought = self.harmony.decode(self.harmony.encode(text)[:950]).strip()
        completion = (
            f"<|channel|>analysis<|message|>{self.thought}<|end|><|start|>assistant<|channel|>commentary "
            'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "days": 3}<|call|>'
        )
        self.ids = self.harmony.encode(completion, allowed_special="all")
        ours = self.enc.parse_completion(self.ids)
        theirs = self.harmony.parse_messages_from_completion_tokens(self.ids, Role.ASSISTANT)
        assert ours.complete and ours.message["thinking"] == theirs[0].content[0].text == self.thought
        assert ours.arguments_text == [theirs[1].content[0].text]
        assert ours.tool_calls[0]["function"]["name"] == theirs[1].recipient.removeprefix("functions.")

    def parse(self) -> None:
        self.enc.parse_completion(self.ids)

    def stream(self) -> None:
        _stream(self.enc, self.ids)

    def harmony_parse(self) -> None:
        self.harmony.parse_messages_from_completion_tokens(self.ids, self.Role.ASSISTANT)

    def harmony_stream(self) -> None:
        p = self.StreamableParser(self.harmony, self.Role.ASSISTANT)
        process = p.process
        for t in self.ids:
            process(t)


@pytest.fixture(scope="module")
def harmony_bench(corpus, tmp_path_factory) -> HarmonyBench:
    return HarmonyBench(corpus, tmp_path_factory.mktemp("tiktoken"))


def _harmony(benchmark, bench: HarmonyBench) -> None:
    benchmark.group = "parse-gpt-oss-120b"
    benchmark.extra_info.update(tokens=len(bench.ids), conversations=1, unit="completions")


def test_parse_harmony_chatids(benchmark, harmony_bench):
    _harmony(benchmark, harmony_bench)
    benchmark(harmony_bench.parse)


def test_parse_harmony_chatids_stream(benchmark, harmony_bench):
    _harmony(benchmark, harmony_bench)
    benchmark(harmony_bench.stream)


def test_parse_harmony_reference(benchmark, harmony_bench):
    _harmony(benchmark, harmony_bench)
    benchmark(harmony_bench.harmony_parse)


def test_parse_harmony_reference_stream(benchmark, harmony_bench):
    _harmony(benchmark, harmony_bench)
    benchmark(harmony_bench.harmony_stream)
