"""Tables generated into Markdown pages between two marker comments, shared by the table tools.

    replace_between(text, new, page, start, end) -> text    the part between the markers replaced
    main(argv, doc, table, pages, start, end, script, after_write=None) -> exit status
        no flag: print the table; --write: rewrite every stale page (then after_write());
        --check: exit 1 naming the stale pages
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent


def replace_between(text: str, new: str, page: Path, start: str, end: str) -> str:
    """``text`` with the part between the markers replaced by ``new``; ValueError without the markers."""
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"{page}: no '{start}' ... '{end}' markers")
    return text[:i + len(start)] + "\n" + new + "\n" + text[j:]


def main(argv: list[str] | None, doc: str, table: Callable[[], str], pages: Sequence[Path], start: str,
         end: str, script: str, after_write: Callable[[], None] | None = None) -> int:
    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the table in its pages")
    mode.add_argument("--check", action="store_true", help="exit 1 if a page's table is stale")
    args = parser.parse_args(argv)
    new = table()
    if not (args.write or args.check):
        print(new)
        return 0
    stale = []
    for page in pages:
        text = page.read_text()
        updated = replace_between(text, new, page, start, end)
        if updated != text:
            stale.append(page)
            if args.write:
                page.write_text(updated)
    if args.write and after_write is not None:
        after_write()
    if args.check and stale:
        print("stale table in " + ", ".join(str(p.relative_to(ROOT)) for p in stale)
              + f": run python tools/{script} --write", file=sys.stderr)
        return 1
    return 0
