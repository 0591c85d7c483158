"""benches/report.py: the ratio tables and the throughput chart, on a small synthetic
pytest-benchmark JSON (no benchmark is run here)."""

from __future__ import annotations

import importlib.util
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REPORT = REPO / "benches" / "report.py"

pytest.importorskip("matplotlib", reason="matplotlib is not installed (benches/report.py draws the chart with it)")


def _report_module():
    spec = importlib.util.spec_from_file_location("bench_report", REPORT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bench(group: str, name: str, median: float, **extra) -> dict:
    return {"group": group, "name": f"{name}[x]", "stats": {"median": median, "rounds": 7}, "extra_info": extra}


def synthetic() -> dict:
    benches = []
    for model, fmt, scale in (("llama-3.1-8b-instruct", "llama-3.1", 1.0), ("qwen2.5-7b-instruct:jinja", "jinja", 1.8)):
        info = {"format": fmt, "conversations": 2000, "tokens": 850_000}
        benches += [
            _bench(f"batch-{model}", "test_batch_chatids", 0.040 * scale, **info),
            _bench(f"batch-{model}", "test_batch_chatids_tokenizers_crate", 0.210 * scale, **info),
            _bench(f"batch-{model}", "test_batch_tokenizers_encode_batch_fast", 0.530, **info),
            _bench(f"batch-{model}", "test_batch_transformers", 0.577, **info),
            _bench(f"single-{model}", "test_single_chatids", 0.005 * scale, format=fmt, conversations=200),
            _bench(f"single-{model}", "test_single_transformers", 0.117, format=fmt, conversations=200),
            _bench(f"single-{model}", "test_single_transformers_sanitized", 9.2, format=fmt, conversations=200),
        ]
    # groups the chart leaves out
    benches.append(_bench("training-pack", "test_pack_chatids", 0.2, conversations=100_000, tokens=39_000_000))
    benches.append(_bench("bpe-long-gemma-3-it", "test_bpe_long_chatids", 0.69, conversations=8, unit="inputs"))
    return {"datetime": "2026-12-02T13:48:07", "machine_info": {"cpu": {"count": 2}, "python_version": "3.11.7"},
            "benchmarks": benches}


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_throughput_is_tokens_per_second_or_conversations_per_second():
    report = _report_module()
    rates = report.throughput(synthetic())
    assert set(rates) == {"batch-", "single-"}  # training- and bpe-long- are not charted
    rate, unit = rates["batch-"]["llama-3.1-8b-instruct"]["test_batch_chatids"]
    assert unit == "tokens/s" and rate == pytest.approx(850_000 / 0.040)
    rate, unit = rates["single-"]["qwen2.5-7b-instruct:jinja"]["test_single_transformers"]
    assert unit == "conversations/s" and rate == pytest.approx(200 / 0.117)


def test_rows_are_labelled_with_the_recorded_format():
    report = _report_module()
    assert report.formats(synthetic()) == {"llama-3.1-8b-instruct": "llama-3.1", "qwen2.5-7b-instruct:jinja": "jinja"}
    assert report._model_label("llama-3.1-8b-instruct", "batch-", "llama-3.1") == "llama-3.1-8b-instruct\n(llama-3.1)"
    assert report._model_label("qwen2.5-7b-instruct:jinja", "batch-", "jinja") == "qwen2.5-7b-instruct\n(jinja, forced)"
    assert report._model_label("gemma-3-it", "batch-", None) == "gemma-3-it"  # a JSON from before formats were recorded
    assert report._model_label("gemma-3-it", "bpe-", "gemma-3") == "gemma-3-it"


def test_the_chart_is_a_png(tmp_path):
    report = _report_module()
    out = report.chart(synthetic(), str(tmp_path / "sub" / "throughput.png"))
    width, height = _png_size(Path(out))
    assert width >= 800 and height >= 400
    assert Path(out).stat().st_size > 20_000  # bars, labels and legend, not an empty canvas
    # one panel only: a shorter figure
    only_batch = report.chart(synthetic(), str(tmp_path / "batch.png"), families=["batch-"])
    assert _png_size(Path(only_batch))[1] < height
    with pytest.raises(ValueError, match="no benchmark group to chart"):
        report.chart({"benchmarks": [b for b in synthetic()["benchmarks"] if b["group"] == "training-pack"]},
                     str(tmp_path / "none.png"))


def test_the_command_writes_the_chart_beside_the_json(tmp_path):
    data = tmp_path / "bench.json"
    data.write_text(json.dumps(synthetic()))
    run = subprocess.run([sys.executable, str(REPORT), str(data)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "**batch-llama-3.1-8b-instruct** (2000 conversations, 850,000 tokens; run 2026-12-02)" in run.stdout
    assert "| `apply_chat_template(list, tokenize=True)` | 577.0 ms" in run.stdout
    _png_size(tmp_path / "throughput.png")
    assert "wrote the throughput chart" in run.stderr

    chosen = tmp_path / "elsewhere" / "chart.png"
    run = subprocess.run([sys.executable, str(REPORT), str(data), "--chart", str(chosen), "--chart-groups", "single"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    _png_size(chosen)

    (tmp_path / "throughput.png").unlink()
    run = subprocess.run([sys.executable, str(REPORT), str(data), "--no-chart"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and not (tmp_path / "throughput.png").exists()


def test_update_leaves_no_chart_when_nothing_is_chartable(tmp_path):
    data = tmp_path / "serving.json"
    data.write_text(json.dumps({"datetime": "2026-12-02T00:00:00", "benchmarks": [
        _bench("serving-loop-llama-3.1-8b-instruct", "test_loop_chatids_session", 0.03, prompts=21, steps=20, tokens=21000),
    ]}))
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text("# Benchmarks\n")
    run = subprocess.run([sys.executable, str(REPORT), str(data), "--update", str(doc)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "<!-- serving:begin -->" in doc.read_text()
    assert not (tmp_path / "throughput.png").exists()
