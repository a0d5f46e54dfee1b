"""The table of built-in plugins, generated from the plugin registry.

    python tools/plugin_table.py            print the table (Markdown)
    python tools/plugin_table.py --write    rewrite it in every page of PAGES (the README), between the markers
    python tools/plugin_table.py --check    exit 1 if a page's table differs from the registry's

Only the plugins shipped in ``convlab.algorithms`` are listed, not those other installed packages
register through the entry point. The docs site renders :func:`table` at build time
(docs/hooks/plugin_table.py); the README, which GitHub renders as committed, keeps a copy that
tests/docs/test_plugin_table.py compares with the registry's.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generated_pages  # noqa: E402  (beside this file)
from generated_pages import replace_between  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md",)
START = "<!-- plugin-table:start (tools/plugin_table.py --write) -->"
END = "<!-- plugin-table:end -->"
OPS = ("forward", "dgrad", "wgrad")
DTYPES = ("float64", "float32", "float16", "bfloat16")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("*", "\\*").replace("\n", " ")


def table() -> str:
    """The Markdown table: one row per built-in plugin, highest priority first."""
    import convlab

    rows = ["| plugin | priority | ops | dims | dtypes | layouts | what it does |",
            "| --- | ---: | --- | --- | --- | --- | --- |"]
    for plugin in convlab.plugins():
        if not type(plugin).__module__.startswith("convlab.algorithms."):
            continue
        ops = ", ".join(op for op in OPS if op in plugin.ops)
        dtypes = ", ".join(d for d in DTYPES if d in plugin.dtypes)
        layouts = ", ".join(sorted(plugin.layouts))
        dims = ", ".join(f"{n}D" for n in sorted(plugin.ndims))
        rows.append(f"| `{plugin.name}` | {plugin.priority} | {ops} | {dims} | {dtypes} | {layouts} | "
                    f"{_cell(plugin.description)} |")
    return "\n".join(rows)


def replace_table(text: str, new: str, page: Path) -> str:
    """``text`` with the part between the markers replaced by ``new``; ValueError without the markers."""
    return replace_between(text, new, page, START, END)


def main(argv: list[str] | None = None) -> int:
    return generated_pages.main(argv, __doc__, table, PAGES, START, END, "plugin_table.py")


if __name__ == "__main__":
    sys.exit(main())
