"""Run the Python API fuzz check (tests/test_fuzz_api.py) for a given time.

``python fuzz/fuzz_api.py SECONDS`` (``make fuzz-api``) runs the hypothesis check over and over
with fresh random seeds, in rounds of ``ROUND`` examples, until the time is up, and prints the
examples and rounds run. A failure stops at once: hypothesis shrinks it and prints the
smallest failing case and its ``@reproduce_failure`` blob; add that case to
``tests/test_malformed.py`` as a regression test. Needs ``CHATIDS_MODELS_DIR``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hypothesis import HealthCheck, given, settings  # noqa: E402

import test_fuzz_api  # noqa: E402

ROUND = 500


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 1800.0
    deadline = time.monotonic() + seconds
    started = time.monotonic()
    test = settings(max_examples=ROUND, deadline=None, suppress_health_check=list(HealthCheck), print_blob=True,
                    database=None)(given(test_fuzz_api.cases())(test_fuzz_api.check_case))
    rounds = 0
    while time.monotonic() < deadline:
        test()
        rounds += 1
        print(f"round {rounds}: {rounds * ROUND} examples in {time.monotonic() - started:.0f} s", flush=True)
    print(f"fuzz_api: {rounds * ROUND} examples in {rounds} rounds, {time.monotonic() - started:.0f} s, no failure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
