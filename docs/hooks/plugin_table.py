"""MkDocs hook: the table of built-in plugins is generated from the registry at build time.

A page holding the line ``<!-- convlab-plugin-table -->`` gets, in its place, the Markdown table of
``tools/plugin_table.py`` (its :func:`table`: one row per plugin of ``convlab.algorithms``, highest
priority first), so a new built-in plugin appears on the site with no step of its own. The README, which
GitHub renders without a build, keeps a committed copy (``python tools/plugin_table.py --write``;
tests/docs/test_plugin_table.py checks it).
"""
from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

MARKER = "<!-- convlab-plugin-table -->"
TOOL = Path(__file__).resolve().parents[2] / "tools" / "plugin_table.py"


@functools.cache
def render() -> str:
    spec = importlib.util.spec_from_file_location("convlab_plugin_table", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.table()


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())
