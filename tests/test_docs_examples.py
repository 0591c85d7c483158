"""Every example of the documentation site (docs/**/*.md) runs, and every command it shows exists.

The conventions (docs/index.md, "About the examples", tells readers the same):

* ```python blocks run in order, one namespace per page, so a later block uses the variables of
  an earlier one. A page reads the models directory itself (``MODELS =
  os.environ["CHATIDS_MODELS_DIR"]`` in its first block); every checkpoint directory a page names
  must exist (``support.require_model_path``: a skip locally, a failure under ``.ci/run``). A
  block whose fence has a ``title="Not run..."`` (a Ray cluster, an S3 bucket) is compiled, not
  run. A failing block fails the page's test with the page, the block number, its line in the
  Markdown file and the traceback.
* ```console blocks: lines starting with ``$ `` are commands, run with bash in a temporary
  directory that holds a copy of the repository's ``examples/`` (with ``CHATIDS_MODELS_DIR`` set);
  each must exit 0. The other lines are output: each one shown must be a line of the real output,
  except lines containing ``...`` (elisions).
* ```bash blocks (installing, ``make``) are not run, but in them as in console blocks every
  ``chatids <command>`` shown must be a real subcommand, and each of its ``--flags`` must appear in
  ``chatids <command> --help``.

Each page runs in its own temporary working directory, so examples that write files leave nothing
behind.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

import support

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
#: The console script of the environment running the tests (the .venv's, in CI).
CHATIDS = shutil.which("chatids", path=os.path.dirname(sys.executable)) or "chatids"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*)$")


@dataclass
class Block:
    page: str
    number: int  # 1-based, among the page's blocks of the same language
    line: int  # 1-based line of the opening fence in the Markdown file
    lang: str
    info: str
    code: str

    @property
    def not_run(self) -> bool:
        return bool(re.search(r'title="Not run', self.info))

    @property
    def where(self) -> str:
        return f"docs/{self.page}, {self.lang} block {self.number} (line {self.line})"


def blocks(page: str) -> list[Block]:
    """The fenced code blocks of a page, in order (fences inside admonitions are dedented)."""
    lines = (DOCS / page).read_text(encoding="utf-8").split("\n")
    out: list[Block] = []
    counts: dict[str, int] = {}
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group("indent"), m.group("fence"), m.group("info").strip()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not (
            lines[j].startswith(indent) and lines[j][len(indent):].rstrip() == fence[0] * len(fence)
        ):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        lang = info.split()[0].lower() if info else ""
        counts[lang] = counts.get(lang, 0) + 1
        out.append(Block(page, counts[lang], i + 1, lang, info, "\n".join(body) + "\n"))
        i = j + 1
    return out


def _models_named(code: str) -> list[str]:
    return [name for name in support.MODEL_NAMES if re.search(r"(?<![\w.-])" + re.escape(name) + r"(?![\w.-])", code)]


def _require_models(page: str, code: str) -> None:
    if not os.environ.get("CHATIDS_MODELS_DIR"):
        support.missing(f"docs/{page}: CHATIDS_MODELS_DIR is not set (the examples read the checkpoints from there)")
    for name in _models_named(code):
        support.require_model_path(name)


def _page_workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(REPO / "examples", work / "examples")
    return work


def _real_transformers_clock(monkeypatch) -> None:
    """The pages run as a reader runs them: other suites freeze transformers' template clock
    (``support.freeze_transformers_clock``) for the whole session, so it is put back here."""
    import datetime

    try:
        import transformers.utils.chat_template_utils as ctu
    except ImportError:
        return
    monkeypatch.setattr(ctu, "datetime", datetime.datetime)


PYTHON_PAGES = [p for p in PAGES if any(b.lang in ("python", "py") for b in blocks(p))]
CONSOLE_PAGES = [p for p in PAGES if any(b.lang == "console" for b in blocks(p))]


def test_the_docs_have_examples():
    """Guards the extraction itself: the pages and their blocks are found."""
    assert {"index.md", "getting-started.md", "training.md", "serving.md", "verifying.md"} <= set(PAGES)
    n_python = sum(1 for p in PAGES for b in blocks(p) if b.lang == "python")
    assert n_python >= 40, f"only {n_python} python blocks found in docs/"
    assert len(PYTHON_PAGES) >= 10


@pytest.mark.parametrize("page", PYTHON_PAGES)
def test_python_examples_run(page, tmp_path, monkeypatch):
    page_blocks = [b for b in blocks(page) if b.lang in ("python", "py")]
    _require_models(page, "".join(b.code for b in page_blocks))
    monkeypatch.chdir(_page_workdir(tmp_path))
    _real_transformers_clock(monkeypatch)
    namespace: dict = {"__name__": "__docs__"}
    for block in page_blocks:
        filename = f"<{block.where}>"
        try:
            code = compile(block.code, filename, "exec")
        except SyntaxError:
            pytest.fail(f"{block.where} does not compile:\n{traceback.format_exc()}", pytrace=False)
        if block.not_run:
            continue
        try:
            exec(code, namespace)
        except ModuleNotFoundError as e:
            if e.name and e.name.split(".")[0] != "chatids":
                support.missing(f"{block.where} needs the {e.name} package, which is not installed")
            raise
        except Exception:
            tb = traceback.format_exc()
            pytest.fail(f"{block.where} raised:\n{tb}\n--- the block:\n{block.code}", pytrace=False)


def _commands(block: Block) -> list[tuple[str, list[str]]]:
    """A console block's commands (lines after ``$ ``, with ``\\`` continuations) and the
    output lines shown after each."""
    out: list[tuple[str, list[str]]] = []
    lines = block.code.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            cmd = line[2:]
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd[:-1] + " " + lines[i].strip()
            out.append((cmd, []))
        elif out:
            out[-1][1].append(line)
        i += 1
    return out


@pytest.mark.parametrize("page", CONSOLE_PAGES)
def test_console_examples_run(page, tmp_path):
    page_blocks = [b for b in blocks(page) if b.lang == "console"]
    _require_models(page, "".join(b.code for b in page_blocks))
    work = _page_workdir(tmp_path)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", NO_COLOR="1", COLUMNS="120")
    env["PATH"] = os.path.dirname(CHATIDS) + os.pathsep + env.get("PATH", "")
    for block in page_blocks:
        commands = _commands(block)
        assert commands, f"{block.where}: a console block without a `$ ` command"
        for cmd, shown in commands:
            run = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, capture_output=True, text=True, timeout=300)
            output = run.stdout + run.stderr
            assert run.returncode == 0, f"{block.where}: `{cmd}` exited {run.returncode}:\n{output[-3000:]}"
            actual = {line.rstrip() for line in output.split("\n")}
            for line in shown:
                if "..." in line or not line.strip():
                    continue
                assert line.rstrip() in actual, (
                    f"{block.where}: `{cmd}` does not print the line shown\n  {line!r}\nIts output:\n{output[-3000:]}"
                )


# --- every chatids command shown exists, with its flags -------------------------------------

_HELP: dict[str, str] = {}


def _help(sub: str) -> str:
    if sub not in _HELP:
        run = subprocess.run([CHATIDS, sub, "--help"], capture_output=True, text=True, timeout=60)
        _HELP[sub] = run.stdout if run.returncode == 0 else ""
    return _HELP[sub]


def _shown_commands() -> list[tuple[Block, str]]:
    found = []
    for page in PAGES:
        for block in blocks(page):
            if block.lang not in ("console", "bash", "sh", "shell"):
                continue
            if block.lang == "console":  # the commands; the other lines are output
                lines = [cmd for cmd, _ in _commands(block)]
            else:
                lines = re.sub(r"\\\n\s*", " ", block.code).split("\n")
            for line in lines:
                line = line.split("#", 1)[0]
                for m in re.finditer(r"(?:^|[;&|]\s*|\s)(?:python -m )?chatids\s+([^;&|]*)", line):
                    found.append((block, m.group(1).strip()))
    return found


def test_every_chatids_command_shown_exists():
    shown = _shown_commands()
    assert len(shown) >= 8, "the docs show the chatids commands; the extraction found too few"
    subcommands = set(re.search(r"\{([a-z,]+)\}", subprocess.run(
        [CHATIDS, "--help"], capture_output=True, text=True, timeout=60).stdout).group(1).split(","))
    assert {"render", "encode", "verify", "explain", "lint"} <= subcommands
    problems = []
    for block, rest in shown:
        words = rest.split()
        if not words:
            problems.append(f"{block.where}: `chatids` without a command")
            continue
        sub = words[0]
        if sub not in subcommands:
            problems.append(f"{block.where}: `chatids {sub}` is not a command (there are {sorted(subcommands)})")
            continue
        help_text = _help(sub)
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest):
            if not re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", help_text):
                problems.append(f"{block.where}: `chatids {sub}` has no flag {flag}")
    assert not problems, "\n".join(problems)
