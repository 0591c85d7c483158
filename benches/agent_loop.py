"""The 20-step agent loop of ``benches/test_bench_serving.py``, outside pytest: its time against
one full encode, and a way to profile it.

Builds the same ``Serving`` case (the conversation, the tools, the 21 prompts checked against
``apply_chat_template``), then times ``loop_session`` (a session: ``append`` and
``generation_prompt`` per step), ``full_encode`` (one ``encode`` of the final conversation, the
yardstick of the issue-23 target) and ``loop_reencode`` (``encode`` of every prompt), run one
after another in each of ``--rounds`` rounds, their medians, ``--repeats`` times. ``--clock cpu``
times the process's CPU time (``time.process_time``) instead of the wall clock: on a shared
machine, time the process spent waiting for a core does not count.

``--appends-only`` also times the session's appends without a generation prompt after each
(a session that only grows).

``--profile SECONDS`` instead runs ``loop_session`` alone for that long after the setup, for a
profiler attached to the process, e.g.::

    perf record -F 299 --call-graph dwarf,32768 -D 14000 -o perf.data \\
        python benches/agent_loop.py --profile 24

(``-D`` skips the setup, about 10 s here). Run: ``python benches/agent_loop.py [--model NAME]``
with CHATIDS_MODELS_DIR and CHATIDS_DATA_DIR set.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import conftest  # noqa: E402  (the benches' corpus filter)
import test_bench_serving as serving  # noqa: E402


def corpus() -> list[list[dict]]:
    """The plain corpus conversations, shuffled as the benches' ``corpus`` fixture does."""
    base = os.environ.get("CHATIDS_DATA_DIR")
    if not base:
        raise SystemExit("agent_loop: set CHATIDS_DATA_DIR")
    rows = []
    for f in sorted(glob.glob(str(Path(base) / "conversations" / "*.jsonl"))):
        with open(f, encoding="utf-8") as handle:
            rows += [json.loads(line) for line in handle]
    convs = [r["messages"] for r in rows if conftest._plain(r)]
    random.Random(2024).shuffle(convs)
    return convs


def timed_rounds(
    fns: list[Callable[[], None]], rounds: int, clock: Callable[[], float]
) -> list[float]:
    """Median seconds of each of ``fns``, run one after another in each round (interleaved, so
    that a slow stretch of the machine weighs on all of them alike)."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, own in zip(fns, times):
            start = clock()
            fn()
            own.append(clock() - start)
    return [sorted(t)[rounds // 2] for t in times]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="llama-3.1-8b-instruct")
    parser.add_argument("--no-tools", action="store_true", help="the chat loop without tools")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--appends-only", action="store_true", help="also time appends without prompts")
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall: time.perf_counter; cpu: time.process_time (the process's CPU time only)",
    )
    args = parser.parse_args()
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    case = serving.Serving(args.model, corpus(), not args.no_tools)
    print(f"{case.label}: format {case.enc.format}, {case.tokens} tokens in the last prompt", flush=True)
    if args.profile:
        end = time.perf_counter() + args.profile
        while time.perf_counter() < end:
            case.loop_session()
        return
    def appends() -> None:
        msgs = case.messages
        session = case.enc.session(msgs[:2], tools=case.tools, **case.kwargs)
        for step in range(serving.STEPS):
            session.append(msgs[2 + 2 * step : 4 + 2 * step])

    for _ in range(args.repeats):
        fns = [case.loop_session, case.full_encode, case.loop_reencode]
        if args.appends_only:
            fns.append(appends)
        loop, full, again, *only = timed_rounds(fns, args.rounds, clock)
        if only:
            print(f"appends without prompts {only[0] * 1e3:.2f} ms", flush=True)
        print(
            f"session loop {loop * 1e3:.2f} ms, full encode {full * 1e3:.2f} ms: {loop / full:.2f}x; "
            f"re-encoding every prompt {again * 1e3:.2f} ms: {again / full:.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
