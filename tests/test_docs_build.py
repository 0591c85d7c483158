"""The documentation site builds with ``mkdocs build --strict`` and reads offline.

``mkdocs.yml`` sets ``strict: true``, so any warning fails the build: a broken link or anchor, a
page left out of the nav, a mkdocstrings object that does not resolve, a missing snippet file
(SECURITY.md and BENCHMARKS.md are included verbatim). The built pages must not fetch anything:
no stylesheet, script, font or image from the web (links to other sites are fine). Material's
JavaScript bundle holds two conditional loaders (a ResizeObserver polyfill for browsers without
one, and mermaid for pages with mermaid diagrams, which this site has none of); those are
allowed, nothing else is.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -r requirements-dev.txt)")
pytest.importorskip("material", reason="mkdocs-material is not installed")
pytest.importorskip("mkdocstrings_handlers.python", reason="mkdocstrings[python] is not installed")

#: Remote URLs that the theme's JavaScript may load, and only under a condition this site never meets.
ALLOWED_JS_FETCHES = {"https://unpkg.com/resize-observer-polyfill", "https://unpkg.com/mermaid@11/dist/mermaid.min.js"}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    elapsed = time.perf_counter() - start
    assert run.returncode == 0, f"mkdocs build --strict failed ({elapsed:.1f} s):\n{run.stdout}\n{run.stderr}"
    warnings = [line for line in (run.stdout + run.stderr).splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert not warnings, "\n".join(warnings)
    return out


def test_every_page_is_built(site):
    pages = sorted(p.relative_to(REPO / "docs").with_suffix("").as_posix() for p in (REPO / "docs").rglob("*.md"))
    for page in pages:
        built = site / ("index.html" if page == "index" else page.removesuffix("/index") + "/index.html")
        assert built.is_file(), f"docs/{page}.md was not built ({built})"
    assert (site / "img" / "throughput.png").is_file()
    assert not (site / "hooks.py").exists() and not (site / "griffe_roles.py").exists()


def test_the_api_reference_is_generated_from_the_docstrings(site):
    html = "".join(p.read_text(encoding="utf-8") for p in (site / "reference").rglob("*.html"))
    for obj in (
        "chatids.Encoder.from_pretrained", "chatids.Encoder.encode", "chatids.Encoder.encode_batch",
        "chatids.Encoder.session", "chatids.Encoder.lint", "chatids.EncodedChat", "chatids.Batch.to_padded",
        "chatids.Session.append_completion", "chatids.pack", "chatids.Packed", "chatids.Padded",
        "chatids.hf_map", "chatids.RayEncode", "chatids.ChatTemplateError", "chatids.CheckpointError",
    ):
        assert f'id="{obj}"' in html, f"the API reference has no entry for {obj}"
    # a docstring sentence, so the text really comes from the package
    assert "Encodes conversations for one checkpoint, exactly as its chat template does." in html
    # the docstrings' Sphinx roles were turned into code (docs/griffe_roles.py)
    assert not re.search(r":(class|meth|func|attr):<code>", html)


def test_the_site_fetches_nothing_from_the_web(site):
    problems = []
    for path in site.rglob("*"):
        if path.suffix == ".html":
            text = path.read_text(encoding="utf-8")
            for tag in re.findall(r"<(?:link|script|img|iframe|source|video|audio|embed)\b[^>]*>", text):
                if re.search(r"""\b(?:src|href|srcset)=["']?(?:https?:)?//""", tag) and not tag.startswith("<a"):
                    problems.append(f"{path.relative_to(site)}: {tag}")
            if 'class="mermaid"' in text:
                problems.append(f"{path.relative_to(site)}: a mermaid diagram (Material would fetch mermaid)")
        elif path.suffix == ".css":
            for url in re.findall(r"""(?:url\(\s*["']?|@import\s+["'])((?:https?:)?//[^"')\s]+)""", path.read_text(encoding="utf-8")):
                problems.append(f"{path.relative_to(site)}: {url}")
        elif path.suffix == ".js":
            text = path.read_text(encoding="utf-8")
            for url in re.findall(r"""_t\(["'](https?://[^"']+)["']\)""", text):  # Material's script loader
                if url not in ALLOWED_JS_FETCHES:
                    problems.append(f"{path.relative_to(site)} loads {url}")
            if "fonts.googleapis.com" in text or "fonts.gstatic.com" in text:
                problems.append(f"{path.relative_to(site)}: web fonts (theme.font must be false)")
    assert not problems, "\n".join(problems)
