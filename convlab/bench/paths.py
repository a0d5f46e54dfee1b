"""The paths of one candidate the harness checks and times, and the checks of their timed outputs.

    path   what runs                                                        row field
    run    run_candidate: convlab.call.candidate.run_candidate              median_ms (min, samples, rates)
    op     op_call: the public op with ``algorithm=(plugin, config)``        op_median_ms
           forced, as a user calls it (its plan replayed, a CUDA graph once
           the same operands repeat: convlab.call)
    cudnn  the baseline (convlab.bench.baseline.Cudnn), run like a plugin   median_ms of the cuDNN row

:func:`first_check` runs a candidate once into a NaN-poisoned ``out`` and judges it; :func:`contenders`
gives the checked candidate's paths to :func:`convlab.bench.rounds.interleave`, each with ``out``
poisoned before its last timed call and copied to the host after it; :func:`settle` judges those copies
and fills the row's times only when every path agreed with the reference.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from convlab import runtime
from convlab.call.candidate import run_candidate as entry
from convlab.measure import CandidateResult, Trusted, judge
from convlab.ops import call_problem
from convlab.plugin.registry import Candidate
from convlab.problem import Problem

from .rounds import Contender, Timed

PATH_NAMES = {"run": "plugin.run", "op": "the public op (plan replay)", "cudnn": "cuDNN"}


def run_candidate(cand: Candidate, problem: Problem, dev: tuple, out: Any, limit: int) -> None:
    """One run of ``cand`` = (plugin, config) on the device operands ``dev`` = (a, b, bias) into ``out``,
    not synchronised: every run of a candidate the benchmarks make outside the public op is this call."""
    entry(cand, problem, *dev, out, limit)


def op_call(cand: Candidate, problem: Problem, dev: tuple, out: Any, limit: int,
            transpose: bool = False) -> Callable[[], Any]:
    """``fn()``: the public op of ``problem`` on ``dev`` = (a, b, bias) into ``out`` with ``cand`` forced
    (``algorithm=(plugin, config)``; convlab.ops.call_problem picks the op), as a user calls it."""
    kw = {"algorithm": (cand.plugin.name, cand.config), "out": out, "workspace_limit": limit}
    return lambda: call_problem(problem, *dev, transpose=transpose, **kw)


def compute_eps(cand: Candidate, problem: Problem) -> float:
    """The unit roundoff of the candidate's arithmetic on ``problem`` (its tolerance's scale)."""
    return cand.plugin.compute_eps(problem.dtype)


def why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def first_check(row: CandidateResult, cand: Candidate, problem: Problem, dev: tuple, out: Any,
                poison: np.ndarray, trusted: Trusted, limit: int) -> bool:
    """Run ``cand`` once into ``out`` poisoned with NaN and judge it against ``trusted``; an exception
    is recorded as status "error" (never raised). True when the candidate may be timed."""
    try:
        runtime.copy_into(out, poison)
        run_candidate(cand, problem, dev, out, limit)
        return judge(row, runtime.to_host(out), trusted, problem, compute_eps(cand, problem))
    except Exception as exc:  # a broken candidate is reported, never fatal
        row.status, row.error = "error", why(exc)
        return False


def wall_clock_ms(cand: Candidate, problem: Problem, dev: tuple, out: Any, limit: int) -> float:
    """Wall-clock ms of one synchronised run: the simulator's stand-in for a device clock (it says how
    slowly Python simulates a kernel, not how fast a GPU runs it)."""
    start = time.perf_counter()
    run_candidate(cand, problem, dev, out, limit)
    runtime.synchronize()
    return (time.perf_counter() - start) * 1e3


def clock() -> Callable[[Callable[[], Any], int], list[float] | None] | None:
    """CUDA-event milliseconds per call on a GPU (convlab.runtime.time_ms); None on the simulator."""
    if not runtime.HAS_DEVICE:
        return None
    return lambda fn, n: runtime.time_ms(fn, warmup=0, repeat=n)


def sampling(fn: Callable[[], Any], repeat: int, warmup: int, max_seconds: float) -> tuple[int, int]:
    """(timed calls, further warm-up calls) for ``fn``: one call and one timed call probe it, and a slow
    one gets fewer samples (>= 3) and warm-ups (>= 1) so it takes about ``max_seconds``."""
    probe = runtime.time_ms(fn, warmup=1, repeat=1)
    if max_seconds and probe and probe[0] > 0:
        repeat = max(3, min(repeat, int(max_seconds * 1e3 / probe[0])))
        warmup = min(warmup, max(1, repeat // 3))
    return repeat, warmup


def contenders(key: Any, cand: Candidate, problem: Problem, dev: tuple, out: Any, poison: np.ndarray,
               limit: int, transpose: bool, repeat: int, warmup: int, max_seconds: float
               ) -> dict[tuple, Contender]:
    """The timed paths of a checked candidate, keyed (key, path): on the simulator only the public op
    (its first call records the plan, the checked call replays it); on a GPU plugin.run and the op."""
    keep = lambda _: runtime.to_host(out)  # noqa: E731  (synchronises)
    fill = lambda: runtime.copy_into(out, poison)  # noqa: E731
    op = op_call(cand, problem, dev, out, limit, transpose)
    if not runtime.HAS_DEVICE:
        return {(key, "op"): Contender(op, warmup=1, poison=fill, keep=keep)}
    got = {}
    for path, fn in (("run", lambda: run_candidate(cand, problem, dev, out, limit)), ("op", op)):
        samples, more = sampling(fn, repeat, warmup, max_seconds)
        got[(key, path)] = Contender(fn, samples, more, poison=fill, keep=keep)
    return got


def settle(row: CandidateResult, timed: dict[str, Timed], trusted: Trusted, problem: Problem,
           eps: float) -> None:
    """Judge the last timed output of each path (``timed``: path -> Timed) and keep the row's times only
    when every path agreed: a path that raised makes the row "error", one that disagreed "wrong" (its
    reason names the path); ``rel_error`` becomes the largest error of every checked output."""
    for path, t in timed.items():
        if t.error:
            row.status, row.error = "error", f"{PATH_NAMES[path]}: {t.error}"
        elif t.done:
            check = CandidateResult(row.plugin, row.config)
            ok = judge(check, t.kept, trusted, problem, eps)
            row.rel_error = max(row.rel_error or 0.0, check.rel_error or 0.0)
            if not ok:
                row.status, row.error = "wrong", f"{PATH_NAMES[path]}, last timed call: {check.error}"
        if row.status != "ok":
            row.median_ms = row.op_median_ms = row.min_ms = row.tflops = row.gbs = None
            row.samples = 0
            return
    if "run" in timed:
        row.fill_times(problem, timed["run"].samples)
    if "cudnn" in timed:
        row.fill_times(problem, timed["cudnn"].samples)
    if "op" in timed:
        row.op_median_ms = timed["op"].median
