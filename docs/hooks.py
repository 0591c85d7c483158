"""MkDocs hooks of the documentation site (mkdocs.yml loads this file; it is not a page).

Tables in SECURITY.md and BENCHMARKS.md (included verbatim) escape a pipe inside inline code as
``\\|``, as GitHub needs. Python-Markdown keeps code spans literal, so the backslash would show;
this removes it from the code spans of table cells.
"""

from __future__ import annotations

import re
from typing import Any

_CELL = re.compile(r"<t([dh])([^>]*)>(.*?)</t\1>", re.S)
_CODE = re.compile(r"<code>(.*?)</code>", re.S)


def _unescape_pipes(cell: re.Match[str]) -> str:
    kind, attrs, body = cell.groups()
    body = _CODE.sub(lambda code: "<code>" + code.group(1).replace("\\|", "|") + "</code>", body)
    return f"<t{kind}{attrs}>{body}</t{kind}>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return _CELL.sub(_unescape_pipes, html)
