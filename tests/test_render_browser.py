"""``chatids render --html`` in a real browser: headless Chromium through Selenium.

Debian's ``/usr/bin/chromium`` and ``/usr/bin/chromedriver`` (``scripts/install_system_packages.sh``
installs them); the driver path is passed explicitly, and Selenium Manager is disabled for the
test, so nothing is ever downloaded. Without them (or without ``selenium``) the test skips
with the reason. The page is one conversation compared with transformers (identical) and the
same conversation compared with a changed template (one first difference); content and a role
carry ``<script>`` and event handlers that would set ``window.pwned``.
"""

from __future__ import annotations

import os
import shutil
import struct
import time
from pathlib import Path
from typing import Any

import pytest

import support
import chatids
from chatids import _render_view as rv

LLAMA = "llama-3.1-8b-instruct"
DATE = {"date_string": support.FIXED_DATE}
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse.\nAnswer in one line. <script>window.pwned = 'system'</script>"},
    {"role": "user", "content": 'Is <script>window.pwned=1</script> safe?\n"><img src=x onerror="window.pwned=2"> € 🤖\tok'},
    {"role": "assistant", "content": "No.\n\nEscape it: &lt;script&gt; <svg onload=window.pwned=3>"},
]


def _browser() -> tuple[str, str]:
    """Paths of chromium and chromedriver, or skip with the reason."""
    pytest.importorskip("selenium", reason="selenium is not installed (pip install selenium)")
    browser = os.environ.get("CHATIDS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    driver = os.environ.get("CHATIDS_CHROMEDRIVER") or shutil.which("chromedriver") or "/usr/bin/chromedriver"
    missing = [p for p in (browser, driver) if not os.access(p, os.X_OK)]
    if missing:
        pytest.skip(f"headless browser test needs {', '.join(missing)} (scripts/install_system_packages.sh installs chromium, chromium-driver)")
    return browser, driver


@pytest.fixture(scope="module")
def driver() -> Any:
    browser, chromedriver = _browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common import selenium_manager

    def _no_download(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Selenium Manager was called: it could download a driver")

    saved = selenium_manager.SeleniumManager.binary_paths
    selenium_manager.SeleniumManager.binary_paths = _no_download  # type: ignore[method-assign]
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900",
                "--no-first-run", "--disable-extensions", "--disable-background-networking"):
        options.add_argument(arg)
    drv = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    try:
        yield drv
    finally:
        drv.quit()
        selenium_manager.SeleniumManager.binary_paths = saved  # type: ignore[method-assign]


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_page_in_chromium(driver: Any, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    path = support.require_model_path(LLAMA)
    enc = chatids.Encoder.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(str(path))
    same = rv.build_view(enc, MESSAGES, 0, template_kwargs=DATE, reference=tok)
    assert same.comparison is not None and same.comparison.identical
    template = tok.chat_template
    assert "December 2023" in template
    changed = template.replace("December 2023", "December 2024")
    diff = rv.build_view(enc, MESSAGES, 1, template_kwargs=DATE, reference=tok, chat_template=changed)
    assert diff.comparison is not None and diff.comparison.first_diff is not None
    ref = rv.transformers_ids(tok, MESSAGES, chat_template=changed, template_kwargs=DATE)
    ids = enc.encode(MESSAGES, **DATE).tolist()
    expected = next(i for i, (a, b) in enumerate(zip(ids, ref)) if a != b)
    mask = enc.encode_detailed(MESSAGES, return_assistant_mask=True, **DATE).assistant_mask.tolist()

    page = tmp_path / "prompt.html"
    page.write_text(rv.html_page([same, diff], subtitle=[f"model {LLAMA}"]), encoding="utf-8")
    driver.get(page.as_uri())
    run = driver.execute_script

    assert run("return typeof window.pwned") == "undefined", "a script from content ran"
    assert run("return document.scripts.length") == 0
    assert run("return document.querySelectorAll('img, svg, iframe, object').length") == 0
    assert run("return document.querySelectorAll('.tok').length") == 2 * len(ids)
    for k in (0, 1):
        dom_ids = run(f"return Array.from(document.querySelectorAll('#conv-{k} .tok')).map(e => +e.dataset.id)")
        assert dom_ids == ids
    dom_messages = run("return Array.from(document.querySelectorAll('#conv-0 .tok')).map(e => +e.dataset.message)")
    assert dom_messages == [c.message for c in same.cells]
    trained = run("return Array.from(document.querySelectorAll('#conv-0 .tok')).map(e => e.classList.contains('trained') ? 1 : 0)")
    assert trained == mask and sum(trained) > 0
    assert run("return document.querySelectorAll('#conv-0 .first-diff').length") == 0
    positions = run("return Array.from(document.querySelectorAll('#conv-1 .first-diff')).map(e => +e.dataset.pos)")
    assert positions == [expected]
    # Content markup is shown as text; the escaped piece stream holds it.
    shown = run("return Array.from(document.querySelectorAll('#conv-0 .tok .txt')).map(e => e.textContent).join('')")
    assert "<script>window.pwned=1</script>" in shown
    assert "↵" in shown and "→" in shown and "·" in shown and "<0xF0>" in shown
    # The special tokens look different from content: another background colour.
    styles = run(
        "const s = document.querySelector('#conv-0 .tok.special'), c = document.querySelector('#conv-0 .tok.content');"
        "return [getComputedStyle(s).backgroundColor, getComputedStyle(c).backgroundColor,"
        " getComputedStyle(document.querySelector('#conv-1 .first-diff')).outlineStyle]"
    )
    assert styles[0] != styles[1] and styles[2] == "solid"

    # A screenshot of the whole page.
    height = run("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(int(height) + 140, 6000))
    time.sleep(0.2)
    shot = Path(os.environ.get("CHATIDS_RENDER_SCREENSHOT") or tmp_path / "prompt.png")
    assert driver.save_screenshot(str(shot))
    data = shot.read_bytes()
    width, h = _png_size(data)
    assert width >= 800 and h >= 500 and len(data) > 20_000
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - pillow is usually there; the header check stands
        return
    with Image.open(shot) as img:
        colours = img.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50, "the screenshot is (nearly) one colour"
