"""The command line: ``chatids render|encode|verify|explain|lint`` (run in-process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import support
from chatids._cli import main

CONVERSATIONS = [
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <|eot_id|> there\n"}]},
    {
        "messages": [
            {"role": "user", "content": "What's the weather in Paris?"},
            {"role": "assistant", "content": "Sunny."},
        ],
        "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {}}}}],
    },
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
]


def _model(name: str) -> str:
    return str(support.require_model_path(name))


@pytest.fixture()
def jsonl(tmp_path: Path) -> str:
    path = tmp_path / "chats.jsonl"
    path.write_text("\n".join(json.dumps(c) for c in CONVERSATIONS) + "\n")
    return str(path)


def test_render_prints_repr_lines(jsonl: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", jsonl, "--model", _model("llama-3.1-8b-instruct")]) == 0
    out = capsys.readouterr().out
    assert "'<|begin_of_text|><|start_header_id|>system<|end_header_id|>\\n'" in out
    assert "--- conversation 2 ---" in out


def test_encode_writes_ids(jsonl: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ids.npz"
    assert main(["encode", jsonl, "--model", _model("qwen2.5-7b-instruct"), "--out", str(out)]) == 0
    data = np.load(out)
    assert len(data["offsets"]) == len(data["conversation_index"]) + 1
    # Every conversation is encoded, the one with tools as apply_chat_template(..., tools=...) does.
    assert data["conversation_index"].tolist() == [0, 1, 2]
    import chatids

    enc = chatids.Encoder.from_pretrained(_model("qwen2.5-7b-instruct"))
    second = data["ids"][data["offsets"][1] : data["offsets"][2]]
    assert second.tolist() == enc.encode(CONVERSATIONS[1]["messages"], tools=CONVERSATIONS[1]["tools"]).tolist()


def test_explain(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--model", _model("deepseek-v3")]) == 0
    out = capsys.readouterr().out
    assert "format jinja" in out and "stop token ids" in out


def test_lint_reports_findings(jsonl: str, capsys: pytest.CaptureFixture[str]) -> None:
    main(["lint", jsonl, "--model", _model("llama-2-7b-chat")])
    out = capsys.readouterr().out
    assert "conversation 2" in out


@pytest.mark.parametrize("name,extra", [("qwen2.5-7b-instruct", []), ("qwen2.5-7b-instruct", ["--format", "jinja"]), ("gpt-oss-120b", [])])
def test_verify_against_transformers(jsonl: str, name: str, extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", jsonl, "--model", _model(name), *extra]) == 0
    out = capsys.readouterr().out
    assert "mismatches: 0" in out
    compared = int(out.split("compared: ")[1].split()[0])
    assert compared >= 2


def test_verify_fails_on_a_wrong_format(jsonl: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Forcing Qwen2's format on Qwen2.5 (different default system prompt) must show mismatches.
    assert main(["verify", jsonl, "--model", _model("qwen2.5-7b-instruct"), "--format", "qwen2"]) == 1
    assert "render differs" in capsys.readouterr().out


def test_console_script_entry_point() -> None:
    result = subprocess.run([sys.executable, "-m", "chatids", "--help"], capture_output=True, text=True, check=True)
    for command in ("render", "encode", "verify", "explain", "lint"):
        assert command in result.stdout
