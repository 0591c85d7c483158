"""pytest configuration: model fixtures and the conformance summary."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest

import support

#: Conformance counts per model directory, filled by test_conformance.py.
CONFORMANCE: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
#: Why chatids refused conversations the template accepts, per model: reason -> count.
POLICY_REASONS: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))


@pytest.fixture(params=support.MODEL_NAMES)
def model(request) -> support.Model:
    """Each checkpoint of the foundation formats, loaded with chatids and transformers."""
    return support.load_model(request.param)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not CONFORMANCE:
        return
    mode = "full" if support.full_conformance() else f"sample ({support.SAMPLE_PER_FILE}/file)"
    tr = terminalreporter
    tr.section(f"chatids conformance vs transformers ({mode})")
    cols = ["conversations", "with_tools", "compared", "rejected_by_template", "rejected_by_policy", "deviation_documented", "mismatches"]
    widths = [max(len(c), 8) for c in cols]
    tr.write_line(f"{'model':27s} " + " ".join(f"{c:>{w}s}" for c, w in zip(cols, widths)))
    for name, counts in sorted(CONFORMANCE.items()):
        tr.write_line(f"{name:27s} " + " ".join(f"{counts.get(c, 0):>{w}d}" for c, w in zip(cols, widths)))
    tr.write_line("(per conversation: 'conversations'; per conversation x add_generation_prompt: the other columns)")
    for name, reasons in sorted(POLICY_REASONS.items()):
        for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
            tr.write_line(f"  {name}: refused {n}x: {reason}")
    out = os.environ.get("CHATIDS_CONFORMANCE_REPORT")
    if out:
        with open(out, "w") as f:
            json.dump({"mode": mode, "counts": CONFORMANCE, "policy_reasons": POLICY_REASONS}, f, indent=2)
