"""A pytest plugin recording each test's CPU seconds (user + system of the test process and of the child
processes it waited for: a notebook's kernel, a compile script) and wall seconds: on a loaded shared
machine the CPU time is the figure that compares two runs.

    CPU_OUT=cpu.json PYTHONPATH=tools python -m pytest tests/plugin -q -p pytest_cpu_times

Writes ``{node id: [cpu seconds, wall seconds]}`` to ``$CPU_OUT`` at the end of the session (the call
phase of each test: its setup and teardown left out).
"""
from __future__ import annotations

import json
import os
from typing import Iterator

import pytest

_ROWS: dict[str, tuple[float, float]] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    start = os.times()
    yield
    end = os.times()
    cpu = sum(getattr(end, f) - getattr(start, f) for f in ("user", "system", "children_user", "children_system"))
    _ROWS[item.nodeid] = (round(cpu, 2), round(end.elapsed - start.elapsed, 2))


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("CPU_OUT")
    if path:
        with open(path, "w") as f:
            json.dump(_ROWS, f, indent=0)
