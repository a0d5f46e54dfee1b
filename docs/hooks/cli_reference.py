"""MkDocs hook: the CLI reference page is rendered from convlab's argparse parser at build time.

A page holding the line ``<!-- convlab-cli-reference -->`` gets, in its place, ``convlab --help`` and
then one section per subcommand with its ``--help`` text, in the parser's order, a subcommand's own
subcommands (``convlab bench auto``) after it (help wrapped at :data:`WIDTH` columns, as a terminal of
that width shows it)."""
from __future__ import annotations

import argparse
import os
from typing import Any

MARKER = "<!-- convlab-cli-reference -->"
WIDTH = 100


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def render() -> str:
    """The reference as Markdown: ``convlab --help``, then ``## convlab CMD`` and its help per subcommand."""
    from convlab.cli.parser import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)  # argparse wraps help at the terminal width it reads from COLUMNS
    try:
        parser = build_parser()
        parts = ["## convlab", "", "```text", parser.format_help().rstrip(), "```", ""]
        for name, sub in _subcommands(parser).items():
            for title, page in [(name, sub)] + [(f"{name} {n}", s) for n, s in _subcommands(sub).items()]:
                parts += [f"## convlab {title}", "", "```text", page.format_help().rstrip(), "```", ""]
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())
