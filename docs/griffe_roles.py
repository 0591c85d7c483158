"""A griffe extension for the API reference (mkdocs.yml loads it; not part of the site).

The package's docstrings are reST-flavoured: Sphinx roles (``:class:`Encoder```,
``:meth:`~chatids.Session.append```) and double-backtick literals. mkdocstrings renders them as
Markdown, where a role would show as ``:class:`` followed by code. This turns each role into
plain inline code (``~`` keeps the last component, as Sphinx does), and restores the one escaped
newline pair that a docstring writes as real line breaks (``"\\n\\n"`` in the Encoder
docstring, which also kept the docstring from being dedented), without touching the package.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|attr|data|mod|exc|obj|py:\w+):`(~?)([^`]+)`")


def _code(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    if tilde:
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


class SphinxRoles(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, loader: Any = None, **kwargs: Any) -> None:
        if obj.docstring is None:
            return
        text = obj.docstring.value
        if '"\n\n"' in text:
            # The real line breaks also defeated the dedent (a line at column 0): dedent again.
            text = inspect.cleandoc(text.replace('"\n\n"', '"\\n\\n"'))
        obj.docstring.value = _ROLE.sub(_code, text)
