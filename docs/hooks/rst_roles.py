"""A Griffe extension for the API reference: convlab's docstrings are written in reStructuredText's
inline style, which Markdown renders except for two constructs rewritten here. A Sphinx role
(``:func:`~convlab.ops.conv.conv2d```) becomes a code span of the name (the last dotted part under
``~``, as Sphinx shows it); a paragraph ending in ``::`` (an indented literal block follows, which
Markdown shows as code too) ends in one colon, as Sphinx prints it."""
from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const):`(~?)([^`]+)`")
_LITERAL = re.compile(r"(?<=\S)::$", re.M)


def _span(match: re.Match) -> str:
    short, name = match.group(1), match.group(2).strip()
    if short:
        name = name.rsplit(".", 1)[-1]
    return f"`{name.lstrip('.')}`"


def strip_roles(text: str) -> str:
    """``text`` with every Sphinx cross-reference role replaced by a Markdown code span, and ``::`` at
    the end of a line by ``:``."""
    return _LITERAL.sub(":", _ROLE.sub(_span, text))


class RstRoles(griffe.Extension):
    """Rewrites the roles in every docstring of a loaded package."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        seen: set[int] = set()
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if obj.docstring is not None:
                obj.docstring.value = strip_roles(obj.docstring.value)
            stack.extend(m for m in obj.members.values() if not m.is_alias)
