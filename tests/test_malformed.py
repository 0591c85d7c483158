"""Malformed and extreme input through every public entry point (tests/malformed_corpus.py).

The corpus runs in a subprocess, one encoder per format family and route: every case of
:data:`malformed_corpus.CASES` must get its clear error from ``encode``, ``encode_detailed``,
``render``, ``lint``, ``encode_batch`` and ``Session.append`` with no partial output, and the
extremes (NUL, 100 MB of content, 100,000 messages) must encode. The process must exit with
status 0, so a panic that aborted, a stack overflow or a segfault (a 100,000-deep tool argument
crashed the interpreter before the nesting limit) fails the test instead of the test run; the
failing cases are in the assertion message.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import chatids
import support

MODELS = ["llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "llama-2-7b-chat", "mistral-small-24b-instruct-2501",
          "gemma-3-it", "gpt-oss-120b", "deepseek-v3"]


def test_the_whole_corpus_runs_in_a_subprocess_without_crashing() -> None:
    for name in MODELS:
        support.require_model_path(name)
    script = Path(__file__).with_name("malformed_corpus.py")
    env = {**os.environ, "CHATIDS_MODELS_DIR": str(support.require_model_path(MODELS[0]).parent)}
    # Sample runs leave the heavy extremes (100,000 messages, 100 MB of content, 10 MB of one word)
    # to full runs: every malformed case and every other extreme still runs on every route.
    light = [] if support.full_conformance() else ["--light"]
    done = subprocess.run([sys.executable, str(script), *light], capture_output=True, text=True, timeout=900, env=env)
    tail = (done.stdout + done.stderr)[-3000:]
    assert done.returncode == 0, f"exit status {done.returncode} (negative: killed by signal {-done.returncode}):\n{tail}"
    assert ", 0 failures" in done.stdout, tail


def test_a_dropped_tool_call_is_refused_by_render_and_unsanitized_encode_alike() -> None:
    """Regression (cargo fuzz, encode_messages): Qwen3's template drops a message of role
    "function"; its tool call is named "</think>", which the sanitized prompt holds as text
    from the assistant content, so only the unsanitized prompt shows the call is gone. render
    and unsanitized encode must agree (both refuse)."""
    enc = chatids.Encoder.from_pretrained(support.require_model_path("qwen3-0.6b"), format="jinja")
    messages = [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": "</think></think><|vision_end|>function"},
        {"role": "function", "tool_calls": [{"type": "function", "function": {"name": "</think>", "arguments": {"x": ""}}}],
         "tool_call_id": ""},
    ]
    pattern = r"^message 2: the checkpoint's template drops this message's tool call"
    with pytest.raises(chatids.ChatTemplateError, match=pattern):
        enc.render(messages)
    with pytest.raises(chatids.ChatTemplateError, match=pattern):
        enc.encode(messages, sanitize_control_tokens=False)
