"""The quick start's first command runs with nothing beside the repository.

``scripts/example.sh`` (what ``make example`` runs after building) is run from a directory that
holds only copies of ``examples/`` and the script, with no shared models
(``CHATIDS_MODELS_DIR`` points nowhere), an empty Hugging Face cache and the Hub offline. It must
pick the bundled Mistral 7B v0.3 tokenizer, and the ids it prints must be mistral-common's
(``encode_chat_completion`` with the same tokenizer file: the reference library, at test time).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_make_example_runs_without_shared_models(tmp_path: Path) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "example.sh", tmp_path / "scripts" / "example.sh")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CHATIDS_", "HF_"))}
    env.update(CHATIDS_MODELS_DIR=str(tmp_path / "no-models"), HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        ["bash", "scripts/example.sh", sys.executable], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "using the bundled Mistral 7B v0.3 tokenizer" in proc.stdout
    assert "refused: 0" in proc.stdout
    shown = dict(re.findall(r"--- conversation (\d+):.*?\nids: (\[[^\]]*\])", proc.stdout, re.S))
    assert set(shown) == {"0", "6"}, proc.stdout

    tokenizer_mod = pytest.importorskip("mistral_common.tokens.tokenizers.mistral")
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.protocol.instruct.validator import ValidationMode

    # Conversations ending with the assistant's answer are training examples: mistral-common's
    # finetuning mode encodes them (its serving mode refuses them).
    mc = tokenizer_mod.MistralTokenizer.from_file(
        str(REPO / "examples" / "mistral-7b-v0.3" / "tokenizer.model.v3"), mode=ValidationMode.finetuning
    )
    rows = [json.loads(line) for line in open(REPO / "examples" / "conversations.jsonl", encoding="utf-8")]
    for k, ids in shown.items():
        want = mc.encode_chat_completion(ChatCompletionRequest(messages=rows[int(k)]["messages"])).tokens
        assert json.loads(ids) == want, f"conversation {k}"
