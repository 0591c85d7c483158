"""A long session with tools: the cost of one step when the conversation is already long.

A session of a checkpoint (``--model``) starts with a system prompt and ``--turns`` user and
assistant turns (plain texts of a few hundred characters), with one tool passed as ``tools=``
(so a native format hands the conversation to the checkpoint's template). Then 40 steps each
append a short user and assistant turn and ask for the generation prompt. The medians of the
``append`` and ``generation_prompt()`` calls are printed, beside one full ``encode`` of the
starting conversation for scale. A session's step should cost what its new messages cost, not
what the conversation holds.

Run: ``python benches/long_session.py [--model qwen2.5-7b-instruct] [--turns 300]``
(CHATIDS_MODELS_DIR set).
"""

from __future__ import annotations

import argparse
import os
import time

import chatids

TOOLS = [{"type": "function", "function": {"name": "f", "description": "d",
                                            "parameters": {"type": "object", "properties": {}}}}]
STEPS = 40


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-7b-instruct")
    parser.add_argument("--turns", type=int, default=300)
    args = parser.parse_args()
    base = os.environ.get("CHATIDS_MODELS_DIR")
    if not base:
        raise SystemExit("long_session: set CHATIDS_MODELS_DIR")
    enc = chatids.Encoder.from_pretrained(os.path.join(base, args.model))
    messages = [{"role": "system", "content": "sys"}]
    for i in range(args.turns):
        messages.append({"role": "user", "content": f"question {i} " * 20})
        messages.append({"role": "assistant", "content": f"answer {i} " * 20})
    session = enc.session(messages, tools=TOOLS)
    appends, prompts = [], []
    for i in range(STEPS):
        start = time.perf_counter()
        session.append([{"role": "user", "content": f"more {i}"}, {"role": "assistant", "content": f"ok {i}"}])
        middle = time.perf_counter()
        session.generation_prompt()
        appends.append(middle - start)
        prompts.append(time.perf_counter() - middle)
    start = time.perf_counter()
    enc.encode(messages, tools=TOOLS, add_generation_prompt=True)
    full = time.perf_counter() - start
    appends.sort()
    prompts.sort()
    print(f"{args.model} ({enc.format}), {len(messages)} messages: append {appends[STEPS // 2] * 1e3:.3f} ms, "
          f"generation_prompt {prompts[STEPS // 2] * 1e3:.3f} ms, one full encode {full * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
