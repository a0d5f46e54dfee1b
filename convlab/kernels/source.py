"""Generated kernel source: an indenting line writer and a compiler that keeps tracebacks readable.

Kernels whose loops must be fully unrolled (so that accumulators and fragments stay in registers) are
written out as Python source with every tile size a literal, then compiled into a namespace holding the
names the source uses. The source is registered with ``linecache`` under its file name, so tracebacks
and the simulator's error messages show the generated lines.
"""
from __future__ import annotations

import contextlib
import linecache
from typing import Any, Iterator


class Writer:
    """Collects source lines: ``w(line)`` adds one at the current depth, ``w.indent(+-n)`` moves it,
    ``with w.block(header):`` adds ``header`` and indents the lines written inside the ``with``.

        w = Writer("def f(x):"); w.indent()
        with w.block("if x > 0:"):
            w("x = -x")
        w("return x")
    """

    def __init__(self, first: str | None = None) -> None:
        self.lines: list[str] = []
        self.depth = 0
        if first is not None:
            self(first)

    def __call__(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    def indent(self, by: int = 1) -> None:
        self.depth += by

    @contextlib.contextmanager
    def block(self, header: str | None) -> Iterator["Writer"]:
        """``header`` (an ``if``, ``for``, ``while`` line), then the lines written inside the ``with``
        one level deeper; None: neither (a block that a condition leaves out)."""
        if header is None:
            yield self
            return
        self(header)
        self.depth += 1
        try:
            yield self
        finally:
            self.depth -= 1

    @property
    def source(self) -> str:
        return "\n".join(self.lines) + "\n"


def compile_source(source: str, filename: str, namespace: dict[str, Any]) -> dict[str, Any]:
    """Execute ``source`` in ``namespace`` (which it extends and returns) under ``filename``, a
    ``<...>`` name that tracebacks show with the generated lines. Each function it defines keeps its
    source as ``generated_source`` (``convlab source`` prints it; kernels of one family may share a
    file name, whose ``linecache`` entry is the last one's)."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    for value in namespace.values():
        code = getattr(value, "__code__", None)
        if code is not None and code.co_filename == filename:
            value.generated_source = source
    return namespace
