"""Fail when pytest JUnit reports hold skipped tests and skips are not allowed, or hold no test.

`.ci/run` sets CHATIDS_REQUIRE_MODELS=1: there a skipped test (a model or the corpus not found)
means the conformance suite did not really run, so CI must fail. Locally skips are reported
and allowed.
"""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET


def main(paths: list[str]) -> int:
    skipped, total = [], 0
    for path in paths:
        root = ET.parse(path).getroot()
        cases = list(root.iter("testcase"))
        if not cases:
            print(f"error: {path} holds no test at all", file=sys.stderr)
            return 1
        total += len(cases)
        skipped += [
            f"{case.get('classname')}::{case.get('name')}: {skip.get('message', '')}"
            for case in cases
            for skip in case.findall("skipped")
        ]
    print(f"{total} tests, {len(skipped)} skipped ({len(paths)} report(s))")
    for s in skipped:
        print("  skipped:", s)
    if skipped and os.environ.get("CHATIDS_REQUIRE_MODELS", "") not in ("", "0"):
        print("error: tests were skipped in CI (CHATIDS_REQUIRE_MODELS=1)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: check_no_skips.py REPORT.xml [REPORT.xml ...]")
    sys.exit(main(sys.argv[1:]))
