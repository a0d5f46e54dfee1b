"""Generated kernel source: an indenting line writer and a compiler that keeps tracebacks readable.

Kernels whose loops must be fully unrolled (so that accumulators and fragments stay in registers) are
written out as Python source with every tile size a literal, then compiled into a namespace holding the
names the source uses. The source is registered with ``linecache`` under its file name, so tracebacks
and the simulator's error messages show the generated lines.
"""
from __future__ import annotations

import linecache
from typing import Any


class Writer:
    """Collects source lines: ``w(line)`` adds one at the current depth, ``w.indent(+-n)`` moves it."""

    def __init__(self, first: str | None = None) -> None:
        self.lines: list[str] = []
        self.depth = 0
        if first is not None:
            self(first)

    def __call__(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def indent(self, by: int = 1) -> None:
        self.depth += by

    @property
    def source(self) -> str:
        return "\n".join(self.lines) + "\n"


def compile_source(source: str, filename: str, namespace: dict[str, Any]) -> dict[str, Any]:
    """Execute ``source`` in ``namespace`` (which it extends and returns) under ``filename``, a
    ``<...>`` name that tracebacks show with the generated lines."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    return namespace
