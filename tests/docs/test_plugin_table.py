"""The plugin tables are the registry's: the docs site renders them at build time (docs/hooks/plugin_table.py),
and the README's committed copy (tools/plugin_table.py --write) is compared with the registry here."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: the docs pages whose plugin table the hook renders
HOOKED = (REPO / "docs" / "index.md", REPO / "docs" / "concepts" / "plugins.md")


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tool():
    return _load(REPO / "tools" / "plugin_table.py", "plugin_table")


def test_the_readmes_committed_table_is_the_registrys():
    tool = _tool()
    table = tool.table()
    import convlab

    for plugin in convlab.plugins():
        if type(plugin).__module__.startswith("convlab.algorithms."):
            assert f"| `{plugin.name}` | {plugin.priority} |" in table
    assert tool.PAGES == (REPO / "README.md",)
    for page in tool.PAGES:
        text = page.read_text()
        assert tool.replace_table(text, table, page) == text, \
            f"{page.relative_to(REPO)}: stale plugin table; run python tools/plugin_table.py --write"


def test_the_docs_pages_get_the_registrys_table_at_build_time():
    hook = _load(REPO / "docs" / "hooks" / "plugin_table.py", "plugin_table_hook")
    table = _tool().table()
    for page in HOOKED:
        text = page.read_text()
        assert text.count(hook.MARKER) == 1 and "| `direct` |" not in text  # no committed copy to go stale
        rendered = hook.on_page_markdown(text, None)
        assert table in rendered and hook.MARKER not in rendered
    assert hook.on_page_markdown("no marker", None) == "no marker"
    assert "docs/hooks/plugin_table.py" in (REPO / "mkdocs.yml").read_text()


def test_a_page_without_markers_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="markers"):
        _tool().replace_table("no table here", "| a |", tmp_path / "page.md")
