"""Shared measuring tools: random operands, error against the reference, tolerances, timing.

Used by the conformance suite, the autotuner and the benchmarks, so all three judge and time a
candidate the same way.
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from . import runtime, settings
from .problem import Problem
from .plugin.registry import Candidate


def random_operands(problem: Problem, rng: np.random.Generator | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Fresh standard-normal host operands (a, b, bias) of ``problem`` (order as in problem.py)."""
    rng = np.random.default_rng() if rng is None else rng
    a_shape, b_shape, _ = problem.operand_shapes
    a = rng.standard_normal(a_shape).astype(problem.dtype)
    b = rng.standard_normal(b_shape).astype(problem.dtype)
    bias = None
    if problem.bias:
        bias = rng.standard_normal(problem.bias_shape).astype(problem.dtype)
    return a, b, bias


def to_device(*arrays: np.ndarray | None) -> tuple[Any, ...]:
    """Device copies of host arrays (None stays None)."""
    return tuple(None if a is None else runtime.to_device(a) for a in arrays)


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| in float64; inf when ``out`` holds a NaN or infinity."""
    out = np.asarray(out, np.float64)
    if not np.all(np.isfinite(out)):
        return math.inf
    denom = float(np.linalg.norm(ref))
    diff = float(np.linalg.norm(out - ref))
    return diff / denom if denom > 0 else diff


def tolerance(problem: Problem, eps: float) -> float:
    """Relative-norm tolerance for an arithmetic of unit roundoff ``eps``.

    Rounding errors of a length-L sum of random terms grow like sqrt(L) * eps; the bound allows
    8 * eps * sqrt(L) plus a floor of 16 * eps for tiny reductions.
    """
    return eps * (8.0 * math.sqrt(max(problem.reduction_length, 1)) + 16.0)


def run_candidate(candidate: Candidate, problem: Problem, a: Any, b: Any, bias: Any, out: Any,
                  workspace_limit: int) -> None:
    """Launch one candidate on device operands (no synchronisation)."""
    candidate.plugin.run(problem, candidate.config, a, b, bias, out, workspace_limit=workspace_limit)


def time_candidate(candidate: Candidate, problem: Problem, a: Any, b: Any, bias: Any, out: Any, *,
                   workspace_limit: int, warmup: int = 3, repeat: int = 20) -> list[float] | None:
    """Per-run milliseconds (CUDA events) of a candidate, after ``warmup`` runs; None on the simulator."""
    return runtime.time_ms(lambda: run_candidate(candidate, problem, a, b, bias, out, workspace_limit),
                           warmup=warmup, repeat=repeat)


def wall_clock_ms(candidate: Candidate, problem: Problem, a: Any, b: Any, bias: Any, out: Any,
                  workspace_limit: int) -> float:
    """Wall-clock milliseconds of one synchronised run. The CUDA simulator has no device clock, so this
    is its stand-in; the number says how slowly Python simulates a kernel, not how fast a GPU runs it."""
    start = time.perf_counter()
    run_candidate(candidate, problem, a, b, bias, out, workspace_limit)
    runtime.synchronize()
    return (time.perf_counter() - start) * 1e3


def wall_clock_timer(problem: Problem, repeat: int = 1,
                     rng: np.random.Generator | None = None) -> Callable[[Candidate], list[float]]:
    """``timer(candidate) -> [ms, ...]``: :func:`wall_clock_ms` of ``repeat`` runs on fresh random
    operands of ``problem``, what notebooks and self-tests hand to ``autotune.tune(timer=...)`` on the
    simulator."""
    a, b, bias = to_device(*random_operands(problem, rng))
    out = runtime.empty(problem.operand_shapes[2], problem.dtype)
    limit = settings.get_workspace_limit()

    def timer(candidate: Candidate) -> list[float]:
        return [wall_clock_ms(candidate, problem, a, b, bias, out, limit) for _ in range(repeat)]

    return timer
