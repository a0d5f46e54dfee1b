"""The table of built-in plugins in the docs, generated from the plugin registry.

    python tools/plugin_table.py            print the table (Markdown)
    python tools/plugin_table.py --write    rewrite it in every page of PAGES, between the markers
    python tools/plugin_table.py --check    exit 1 if a page's table differs from the registry's

Only the plugins shipped in ``convlab.algorithms`` are listed, not those other installed packages
register through the entry point. tests/docs/test_plugin_table.py runs ``--check``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", ROOT / "docs" / "index.md", ROOT / "docs" / "concepts" / "plugins.md")
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
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{page}: no '{START}' ... '{END}' markers")
    return text[:start + len(START)] + "\n" + new + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the table in the docs pages")
    mode.add_argument("--check", action="store_true", help="exit 1 if a page's table is stale")
    args = parser.parse_args(argv)
    new = table()
    if not (args.write or args.check):
        print(new)
        return 0
    stale = []
    for page in PAGES:
        text = page.read_text()
        updated = replace_table(text, new, page)
        if updated != text:
            stale.append(page)
            if args.write:
                page.write_text(updated)
    if args.check and stale:
        print("stale plugin table in " + ", ".join(str(p.relative_to(ROOT)) for p in stale)
              + ": run python tools/plugin_table.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
