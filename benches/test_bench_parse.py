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
"""

from __future__ import annotations

import os

import pytest

import chatids

MODELS = {
    "qwen2.5-7b-instruct": '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call><|im_end|>',
    "llama-3.1-8b-instruct": '<|python_tag|>brave_search.call(query="weather in Paris")<|eom_id|>',
}


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
        s = self.enc.stream_parser()
        feed = s.feed
        for t in self.ids:
            feed(t)
        s.finish()

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
