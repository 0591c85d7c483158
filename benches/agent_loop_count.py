"""The 20-step agent loop of ``benches/agent_loop.py``, for counting instructions under callgrind.

Wall-clock medians on a shared 2-core machine move by tens of percent between runs; the
instructions a piece of work executes do not. This script runs one workload ``N`` times after
one warm-up run: ``loop`` (a session: ``append`` and ``generation_prompt`` per step, as
``Serving.loop_session``) or ``full`` (one ``encode`` of the final conversation). Run it twice
under ``valgrind --tool=callgrind``, with ``N`` = 0 and ``N`` = 5, and divide the difference of
the two totals by 5: that is the count of one run, without the setup (imports, loading)::

    for n in 0 5; do
        OPENBLAS_NUM_THREADS=1 PYTHONHASHSEED=0 valgrind --tool=callgrind \\
            --callgrind-out-file=/dev/null python benches/agent_loop_count.py loop $n 2>&1 | grep Collected
    done

``OPENBLAS_NUM_THREADS=1`` keeps numpy's idle BLAS threads out of the count and
``PYTHONHASHSEED=0`` makes Python's own work repeatable. Counts do not show memory stalls, so
they complement the timed benchmarks; they do not replace them. Usage:
``python benches/agent_loop_count.py {loop,full} N [--model NAME]`` with CHATIDS_MODELS_DIR and
CHATIDS_DATA_DIR set (the conversation is the benchmark's, without its transformers check).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import agent_loop  # noqa: E402
import test_bench_serving as serving  # noqa: E402

import chatids  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", choices=["loop", "full"])
    parser.add_argument("runs", type=int)
    parser.add_argument("--model", default="llama-3.1-8b-instruct")
    args = parser.parse_args()
    base = os.environ.get("CHATIDS_MODELS_DIR")
    if not base:
        raise SystemExit("agent_loop_count: set CHATIDS_MODELS_DIR")
    enc = chatids.Encoder.from_pretrained(Path(base) / args.model)
    tools = serving._tools()
    msgs = serving.agent_conversation(agent_loop.corpus(), tools)
    kwargs = {"date_string": "26 Jul 2024"} if enc.format.startswith("llama-3.") else {}

    def loop() -> None:
        session = enc.session(msgs[:2], tools=tools, **kwargs)
        session.generation_prompt()
        for step in range(serving.STEPS):
            session.append(msgs[2 + 2 * step : 4 + 2 * step])
            session.generation_prompt()

    def full() -> None:
        enc.encode(msgs, add_generation_prompt=True, tools=tools, **kwargs)

    run = loop if args.workload == "loop" else full
    run()  # warm-up: the word caches and the compiled template, in both counts
    for _ in range(args.runs):
        run()


if __name__ == "__main__":
    main()
