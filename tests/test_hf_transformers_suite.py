"""transformers' own ``apply_chat_template`` tests pass with ``chatids.hf.patch_all()`` as without it.

The tests are ``TokenizerTesterMixin``'s chat-template tests of transformers' test suite, vendored
unchanged from the sdist of the pinned version (``third_party/transformers_tests``, see its
PROVENANCE.md), pointed at shared checkpoints (Qwen2.5; Llama 3.1, Gemma 3 and Mistral v0.3 too
with ``CHATIDS_CONFORMANCE=full``). They run twice in a subprocess, once unpatched and once with
every tokenizer patched; each test must have the same outcome both times, and chatids must have
served calls in the patched run (``chatids.hf.stats()``, printed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import support

SUITE = Path(__file__).resolve().parent.parent / "third_party" / "transformers_tests"


def _run(tmp: Path, patched: bool) -> tuple[dict[str, str], dict]:
    report, stats = tmp / f"junit-{patched}.xml", tmp / f"stats-{patched}.json"
    env = {**os.environ, "CHATIDS_HF_PATCH": "1" if patched else "0", "CHATIDS_HF_STATS": str(stats)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_shared_checkpoints.py",
         "-k", "chat_template or jinja", "-W", "ignore", f"--junitxml={report}"],
        cwd=SUITE, env=env, capture_output=True, text=True, timeout=1800,
    )
    outcomes: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        kind = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        outcomes[f"{case.get('classname')}::{case.get('name')}"] = kind
    assert outcomes, proc.stdout[-3000:] + proc.stderr[-3000:]
    return outcomes, json.loads(stats.read_text())


def test_transformers_chat_template_tests_pass_with_the_patch(tmp_path: Path) -> None:
    support.require_model_path("qwen2.5-7b-instruct")
    plain, plain_stats = _run(tmp_path, patched=False)
    patched, stats = _run(tmp_path, patched=True)
    assert not plain_stats["patched"] and plain_stats["served"] == 0
    assert stats["patched"]
    differ = {k: (plain.get(k), patched.get(k)) for k in plain.keys() | patched.keys() if plain.get(k) != patched.get(k)}
    assert not differ, f"outcomes differ with the patch (unpatched, patched): {differ}"
    counts = {kind: sum(1 for v in patched.values() if v == kind) for kind in ("passed", "skipped", "failure", "error")}
    print(f"\ntransformers' chat-template tests: {counts} with and without the patch; "
          f"chatids served {stats['served']} calls, {stats['fallback']} went to the original: {stats['fallback_reasons']}")
    assert counts["passed"] > 0 and stats["served"] > 0
    assert plain == patched
