"""Smoke suite of the release wheel, run in a fresh virtualenv that never saw the source tree.

``scripts/test_wheel.sh`` runs it twice:

1. ``python wheel_smoke.py reference OUT.json`` in the development virtualenv: transformers'
   ``apply_chat_template`` ids of :data:`CONVERSATION` for one checkpoint per format family (the
   golden expectation; this venv has transformers).
2. ``python wheel_smoke.py check OUT.json`` in the fresh virtualenv (only the wheel and numpy
   installed, run from a temporary directory): ``import chatids`` comes from that venv, and for
   each family ``encode`` equals the reference, ``encode_batch`` equals ``encode``, a pickled
   encoder encodes the same, ``render`` holds the content, and the ``chatids`` console script
   renders a file; the metadata (license file, Python range, extras, console script) is the
   documented one. (The script measures the import time, in fresh interpreters.)

Exits non-zero on the first failure with the family and what differed. Needs
``CHATIDS_MODELS_DIR``.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

#: One checkpoint per format family.
FAMILIES = {
    "llama-3": "llama-3.1-8b-instruct",
    "chatml": "qwen2.5-7b-instruct",
    "llama-2": "llama-2-7b-chat",
    "mistral": "mistral-7b-instruct-v0.3",
    "gemma": "gemma-3-it",
    "harmony": "gpt-oss-120b",
    "deepseek": "deepseek-v3",
}
CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name a prime above 10, in one word. <|eot_id|> ünïcödé 日本"},
    {"role": "assistant", "content": "Eleven."},
    {"role": "user", "content": "And one below?"},
]
#: The clock of templates that read it, and Llama 3.1's date, on both sides.
NOW = datetime(2025, 1, 30, 12, 0, 0)
DATE = {"llama-3": {"date_string": "26 Jul 2024"}}


def _models() -> Path:
    return Path(os.environ["CHATIDS_MODELS_DIR"])


def reference(out: Path) -> None:
    """Write transformers' ids per family (development venv)."""
    from transformers import AutoTokenizer

    from chatids._verify import frozen_transformers_clock

    ids = {}
    for family, name in FAMILIES.items():
        tok = AutoTokenizer.from_pretrained(str(_models() / name))
        with frozen_transformers_clock(NOW):
            ids[family] = list(
                tok.apply_chat_template(
                    [dict(m) for m in CONVERSATION],
                    tokenize=True,
                    add_generation_prompt=True,
                    sanitize_control_tokens=True,
                    return_dict=False,
                    **DATE.get(family, {}),
                )
            )
    out.write_text(json.dumps(ids))


def _fail(family: str, what: str) -> None:
    print(f"wheel smoke: FAIL {family}: {what}")
    sys.exit(1)


#: The extras the README documents (pyproject.toml's optional-dependencies).
EXTRAS = {"cli", "datasets", "ray", "torch", "hf", "docs", "test", "dev"}


def _check_metadata() -> None:
    """The installed distribution's metadata: license file, Python range, extras, console script."""
    from importlib import metadata

    meta = metadata.metadata("chatids")
    if meta.get("License") != "Apache-2.0" or "LICENSE" not in (meta.get_all("License-File") or []):
        _fail("metadata", f"license {meta.get('License')!r}, license files {meta.get_all('License-File')}")
    if not any(str(f).endswith("licenses/LICENSE") for f in metadata.files("chatids") or []):
        _fail("metadata", "the wheel does not carry the LICENSE file")
    if meta.get("Requires-Python") != ">=3.9":
        _fail("metadata", f"Requires-Python is {meta.get('Requires-Python')!r}")
    extras = set(meta.get_all("Provides-Extra") or [])
    if extras != EXTRAS:
        _fail("metadata", f"extras {sorted(extras)}, expected {sorted(EXTRAS)}")
    scripts = [e for e in metadata.entry_points(group="console_scripts") if e.name == "chatids"]
    if [e.value for e in scripts] != ["chatids._cli:main"]:
        _fail("metadata", f"console script chatids: {[e.value for e in scripts]}")
    print(f"wheel smoke: metadata ok (Apache-2.0 with LICENSE, Python >=3.9, extras {', '.join(sorted(extras))})")


def check(golden_file: Path) -> None:
    """The checks in the fresh venv."""
    import chatids

    location = Path(chatids.__file__).resolve()
    if Path(sys.prefix).resolve() not in location.parents:
        _fail("import", f"chatids imported from {location}, not from the fresh venv {sys.prefix}")
    _check_metadata()
    golden = json.loads(golden_file.read_text())
    for family, name in FAMILIES.items():
        enc = chatids.Encoder.from_pretrained(_models() / name)
        kwargs = dict(DATE.get(family, {}), **({"now": NOW} if enc.reads_clock else {}))
        messages = [dict(m) for m in CONVERSATION]
        ids = enc.encode(messages, add_generation_prompt=True, **kwargs).tolist()
        if ids != golden[family]:
            first = next((i for i, (a, b) in enumerate(zip(ids, golden[family])) if a != b), min(len(ids), len(golden[family])))
            _fail(family, f"{name}: encode differs from apply_chat_template at token {first}")
        batch = enc.encode_batch([messages, messages[:2]], add_generation_prompt=True, **kwargs)
        if batch[0].tolist() != ids or batch[1].tolist() != enc.encode(messages[:2], add_generation_prompt=True, **kwargs).tolist():
            _fail(family, "encode_batch differs from encode")
        again = pickle.loads(pickle.dumps(enc))
        if again.encode(messages, add_generation_prompt=True, **kwargs).tolist() != ids:
            _fail(family, "the unpickled encoder encodes differently")
        if "Eleven." not in enc.render(messages, add_generation_prompt=True, **kwargs):
            _fail(family, "render lost the assistant content")
        print(f"wheel smoke: {family:9} {name:26} {len(ids):3} ids = apply_chat_template; batch, pickle, render ok")
    with tempfile.TemporaryDirectory() as tmp:
        conversations = Path(tmp) / "c.jsonl"
        conversations.write_text(json.dumps({"messages": CONVERSATION[1:2]}) + "\n")
        script = Path(sys.executable).with_name("chatids")
        shown = subprocess.run(
            [str(script), "render", str(conversations), "--model", str(_models() / FAMILIES["chatml"])],
            capture_output=True, text=True, timeout=120,
        )
        if shown.returncode != 0 or "<|im_start|>user" not in shown.stdout:
            _fail("cli", f"`chatids render` exited {shown.returncode}: {(shown.stdout + shown.stderr)[-500:]}")
    print("wheel smoke: console script ok; passed")


if __name__ == "__main__":
    mode, path = sys.argv[1], Path(sys.argv[2])
    {"reference": reference, "check": check}[mode](path)
