"""Interleaved timing that keeps the last timed call's output: how the benchmarks time convlab and cuDNN.

    interleave(contenders, clock, rounds) -> {name: Timed}

    warm-up     each contender: ``warmup`` untimed calls (plans recorded, CUDA graphs captured, cuDNN's
                algorithm search); one that raises is left out, with its error
    rounds      ``rounds`` times, each contender in turn: its ``context`` entered (a tuning mode, outside
                the clock), ``settle`` untimed calls, then ceil(samples / rounds) calls timed by ``clock``
    last call   in the last round the last timed call is preceded by ``poison()`` (NaN into the output it
                will write) and followed by ``keep(output)`` (a host copy), both outside the clock

Every contender thus sees the same clocks and host load (none is timed alone before or after the others),
and what a caller checks against float64 is the output of the last timed call: the timed path is the
checked path (a plan's replay or its CUDA graph as the public op runs it, not a first run beside it).
Without a clock (``clock=None``: the CUDA simulator, where nothing is timed) each contender still makes its
warm-up calls and the poisoned last call, so the same path is checked there.
"""
from __future__ import annotations

import contextlib
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager

#: clock(fn, n) -> n per-call milliseconds of fn(), synchronised before it returns
Clock = Callable[[Callable[[], Any], int], "list[float] | None"]


@dataclass
class Contender:
    """One thing timed: ``call()`` makes one call (and returns its output, if it has one)."""

    call: Callable[[], Any]
    samples: int = 1
    warmup: int = 1
    settle: int = 0
    context: Callable[[], ContextManager[Any]] = contextlib.nullcontext
    poison: Callable[[], Any] | None = None
    keep: Callable[[Any], Any] | None = None


@dataclass
class Timed:
    """What :func:`interleave` measured of one contender."""

    samples: list[float] = field(default_factory=list)
    kept: Any = None  # keep(output of the last timed call); None when that call was not reached
    done: bool = False  # the last timed call ran
    error: str = ""

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def _last_call(c: Contender, clock: Clock | None, result: Timed) -> None:
    if c.poison is not None:
        c.poison()
    got: list[Any] = []

    def call() -> None:
        got.append(c.call())

    if clock is None:
        call()
    else:
        result.samples += clock(call, 1) or []
    result.kept = c.keep(got[-1]) if c.keep is not None else got[-1]
    result.done = True


def interleave(contenders: dict[str, Contender], clock: Clock | None, rounds: int = 5) -> dict[str, Timed]:
    """Warm up, then time ``contenders`` in ``rounds`` interleaved rounds (module docstring)."""
    results = {name: Timed() for name in contenders}
    live = []
    for name, c in contenders.items():
        try:
            with c.context():
                for _ in range(c.warmup):
                    c.call()
            live.append(name)
        except Exception as exc:  # recorded; the others are timed
            results[name].error = _why(exc)
    n_rounds = max(1, rounds) if clock is not None else 1
    for r in range(n_rounds):
        last = r == n_rounds - 1
        for name in list(live):
            c, result = contenders[name], results[name]
            per = -(-max(1, c.samples) // n_rounds) if clock is not None else 1
            try:
                with c.context():
                    for _ in range(c.settle):
                        c.call()
                    if clock is not None and per - last > 0:
                        result.samples += clock(c.call, per - last) or []
                    if last:
                        _last_call(c, clock, result)
            except Exception as exc:  # left out of the later rounds
                result.error = _why(exc)
                live.remove(name)
    return results
