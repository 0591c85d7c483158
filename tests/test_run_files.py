"""`scripts/run_files.py`, the resumable runner of `make conformance-full`, on a throwaway git
repository of three tiny test files: a record per file, `--resume` skipping exactly the files
that passed in full under the same code, and no resume from a tree with uncommitted changes or
after a commit that changes the tests.

Each tiny test appends a line to a file outside the repository, so the test can count which
files really ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "run_files.py"

FILES = {
    "tests/test_ok.py": "def test_ok():\n    ran('ok')\n",
    "tests/test_skip.py": "import pytest\n\ndef test_skip():\n    ran('skip')\n    pytest.skip('no model')\n",
    "tests/test_fail.py": "def test_fail():\n    ran('fail')\n    assert False\n",
}


def make_repo(tmp_path: Path) -> tuple[Path, Path]:
    repo, log = tmp_path / "repo", tmp_path / "ran.txt"
    (repo / "tests").mkdir(parents=True)
    (repo / "src").mkdir()
    (repo / "src" / "lib.rs").write_text("// code\n")
    helper = f"def ran(name):\n    open({str(log)!r}, 'a').write(name + '\\n')\n"
    for path, text in FILES.items():
        (repo / path).write_text(helper + text)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "tiny")
    return repo, log


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True)


def run(repo: Path, results: Path, log: Path, *extra: str) -> tuple[int, list[str]]:
    log.write_text("")
    options, pytest_args = list(extra), []
    if "--" in options:
        options, pytest_args = options[: options.index("--")], options[options.index("--") :]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(repo), "--results", str(results), "--jobs", "2"]
        + options
        + list(FILES)
        + pytest_args,
        capture_output=True,
        text=True,
        timeout=300,
        # The tiny files need no plugin; loading the installed ones is most of a run's time.
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    assert "run_files:" in proc.stdout, proc.stdout + proc.stderr
    return proc.returncode, sorted(log.read_text().split())


def test_records_and_resume(tmp_path: Path) -> None:
    repo, log = make_repo(tmp_path)
    results = tmp_path / "results"
    status, ran = run(repo, results, log)
    assert status != 0  # test_fail failed
    assert ran == ["fail", "ok", "skip"]
    records = {p: json.loads((results / f"{Path(p).stem}.run.json").read_text()) for p in FILES}
    assert records["tests/test_ok.py"]["exit"] == 0 and records["tests/test_ok.py"]["tests"] == 1
    assert records["tests/test_skip.py"]["skipped"] == 1
    assert records["tests/test_fail.py"]["failures"] == 1 and records["tests/test_fail.py"]["exit"] != 0
    assert len({r["identity"] for r in records.values()}) == 1 and records["tests/test_ok.py"]["identity"]
    assert (results / "test_ok.xml").is_file() and "1 passed" in (results / "test_ok.log").read_text()

    # With --resume only the skipped and the failed file run again.
    status, ran = run(repo, results, log, "--resume")
    assert ran == ["fail", "skip"] and status != 0

    # A documentation change keeps the identity; a change to the tests or code does not.
    (repo / "README.md").write_text("docs\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-q", "-m", "docs")
    assert run(repo, results, log, "--resume")[1] == ["fail", "skip"]
    (repo / "src" / "lib.rs").write_text("// changed\n")
    assert run(repo, results, log, "--resume")[1] == ["fail", "ok", "skip"]  # uncommitted: no identity
    git(repo, "commit", "-q", "-am", "code")
    assert run(repo, results, log, "--resume")[1] == ["fail", "ok", "skip"]  # new code: runs again
    assert run(repo, results, log, "--resume")[1] == ["fail", "skip"]


def test_the_mode_is_part_of_the_identity(tmp_path: Path) -> None:
    repo, log = make_repo(tmp_path)
    results = tmp_path / "results"
    run(repo, results, log)
    assert run(repo, results, log, "--resume", "--", "-x")[1] == ["fail", "ok", "skip"]
    assert run(repo, results, log, "--resume", "--", "-x")[1] == ["fail", "skip"]
