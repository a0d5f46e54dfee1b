"""The plugin tables committed in the docs are the registry's (tools/plugin_table.py)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("plugin_table", REPO / "tools" / "plugin_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_tables_are_the_registrys():
    tool = _tool()
    table = tool.table()
    import convlab

    for plugin in convlab.plugins():
        if type(plugin).__module__.startswith("convlab.algorithms."):
            assert f"| `{plugin.name}` | {plugin.priority} |" in table
    for page in tool.PAGES:
        text = page.read_text()
        assert tool.replace_table(text, table, page) == text, \
            f"{page.relative_to(REPO)}: stale plugin table; run python tools/plugin_table.py --write"


def test_a_page_without_markers_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="markers"):
        _tool().replace_table("no table here", "| a |", tmp_path / "page.md")
