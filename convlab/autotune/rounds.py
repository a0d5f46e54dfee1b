"""How the autotuner checks and times the candidates of one problem (used by :mod:`convlab.autotune`).

On fresh random operands of the real shape::

    trusted = measure.trusted_output(...)   # the float64 reference up to HOST_REFERENCE_MAX_FLOPS,
                                            # else the direct plugin's output
    for cand in candidates:                                  # registry order
        measure.check_candidate: run once into a NaN-poisoned output;
            rel err > tolerance -> status "wrong", exception -> "error" (neither is timed)
        probe: WARMUP calls, PROBE timed samples (CUDA events; each call a replay of the candidate's
               recorded plan, as a user's planned call runs: measure.time_candidate)
        probe median > SLOW_FACTOR x leader's median -> dropped early
        else REPEAT samples in all; leader = lowest median so far
    final round: the candidates within FINAL_MARGIN of the leader are re-timed interleaved
        for round in range(FINAL_ROUNDS): for cand in contenders: FINAL_REPEAT samples
    winner = lowest median (of the final-round samples when there was a final round)

With a per-shape ``budget_s`` (mode "tune"): once ``budget_s`` seconds have passed since the tuning
started and a candidate has been timed, the candidates not yet checked stay "not run" (the caller
orders them best-first by the cost model, so the least promising are cut) and the final round is
skipped.

The final round exists because candidates timed one after another see different conditions (clock
ramps, a busy host slowing the launches of multi-kernel plugins); round-robin sampling gives each
contender the same conditions, so a few percent between them is measured, not drawn.
A ``timer(candidate) -> list of ms`` replaces CUDA events (tests inject fake timings; on the simulator
this is the only way anything is timed).
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import numpy as np

from convlab import measure, runtime
from convlab.problem import Problem
from convlab.plugin.registry import Candidate
from convlab.measure import CandidateResult, check_candidate, trusted_output
from .result import TuneResult

REFERENCE_FLOPS = measure.HOST_REFERENCE_MAX_FLOPS  # the float64 reference up to this size, else "direct"
WARMUP, PROBE, REPEAT = 3, 3, 15  # first pass: warm-up calls (plan recorded, graph made), probe, all samples
SLOW_FACTOR = 3.0  # drop a candidate whose probe median exceeds this multiple of the leader's median
FINAL_MARGIN, FINAL_ROUNDS, FINAL_REPEAT = 0.10, 4, 5  # final round: who, how many rounds, samples each

#: how the candidates are timed; a cache entry timed otherwise (before: ``plugin.run`` alone, Numba's
#: launch marshalling included) is tuned again
TIMED = "by plan replay"
Timer = Callable[[Candidate], "list[float]"]


def _samples(cand: Candidate, timer: Timer | None, run_args: tuple, warmup: int, repeat: int
             ) -> list[float]:
    """``repeat`` samples in ms (an injected timer's list as it comes)."""
    if timer is not None:
        return [float(t) for t in (timer(cand) or [])]
    problem, da, db, dbias, out, limit, plans = run_args
    return measure.time_candidate(cand, problem, da, db, dbias, out, workspace_limit=limit,
                                  warmup=warmup, repeat=repeat, plans=plans) or []


def _timed(cand: Candidate, timer: Timer | None, run_args: tuple, leader: float | None,
           stats: dict[str, int]) -> tuple[float, int, bool]:
    """First pass: (median ms, samples, dropped early) of one candidate."""
    samples = _samples(cand, timer, run_args, WARMUP, PROBE)
    probe = samples[:PROBE]
    if not probe:
        raise RuntimeError("no timing samples")
    stats["timed"] += 1
    if leader is not None and statistics.median(probe) > SLOW_FACTOR * leader:
        return statistics.median(probe), len(probe), True
    if timer is None:
        samples = probe + _samples(cand, None, run_args, 0, REPEAT - PROBE)
    return statistics.median(samples), len(samples), False


def _final_round(contenders: list[tuple[Candidate, CandidateResult]], timer: Timer | None,
                 run_args: tuple) -> None:
    """Re-time the close contenders round-robin; their rows get the medians of these samples."""
    got: dict[str, list[float]] = {row.label: [] for _, row in contenders}
    for _ in range(FINAL_ROUNDS):
        for cand, row in contenders:
            got[row.label] += _samples(cand, timer, run_args, 1, FINAL_REPEAT)
    for _, row in contenders:
        if got[row.label]:
            row.median_ms, row.samples = statistics.median(got[row.label]), len(got[row.label])


def measure_candidates(problem: Problem, key: str, cands: list[Candidate], limit: int,
                       timer: Timer | None, start: float, stats: dict[str, int],
                       budget_s: float | None = None) -> TuneResult:
    """Check and time the candidates in order (see the module docstring; ``budget_s``: seconds since
    ``start``, None for no limit); the TuneResult names the winner.
    Each candidate's plan (recorded by its first timed call: convlab.call.plan.record) is kept through
    every round, so later samples replay it as a user's calls would; all are dropped at the end."""
    return _measure(problem, key, cands, limit, timer, start, stats, budget_s)


def _spent(start: float, budget_s: float | None) -> bool:
    return budget_s is not None and time.perf_counter() - start > budget_s


def _measure(problem: Problem, key: str, cands: list[Candidate], limit: int, timer: Timer | None,
             start: float, stats: dict[str, int], budget_s: float | None = None) -> TuneResult:
    host = measure.random_operands(problem, np.random.default_rng())
    dev = measure.to_device(*host)
    poison = np.full(problem.operand_shapes[2], np.nan, problem.dtype)
    out = runtime.empty(problem.operand_shapes[2], problem.dtype)
    trusted = trusted_output(problem, host, dev, limit)
    run_args = (problem, *dev, out, limit, {})  # the last: each candidate's recorded plan
    rows, ran, leader, cut = [], [], None, 0
    for cand in cands:
        row = CandidateResult(cand.plugin.name, cand.config.name)
        rows.append(row)
        if ran and _spent(start, budget_s):
            row.error = f"not timed: the per-shape budget of {budget_s:g} s was spent"
            cut += 1
            continue
        ok = check_candidate(row, cand, problem, dev, out, poison, trusted, limit)
        stats["checked"] += row.status != "error"
        if not ok:
            continue
        try:
            row.median_ms, row.samples, row.dropped_early = _timed(cand, timer, run_args, leader, stats)
        except Exception as exc:  # a candidate failing to time is reported, never fatal
            row.status, row.error = "error", f"{type(exc).__name__}: {exc}"[:500]
            continue
        ran.append((cand, row))
        leader = row.median_ms if leader is None else min(leader, row.median_ms)
    notes = [f"per-shape budget of {budget_s:g} s spent: {cut} candidate(s) not timed"] if cut else []
    contenders = [(c, r) for c, r in ran if not r.dropped_early and r.median_ms <= leader * (1 + FINAL_MARGIN)]
    if len(contenders) > 1 and _spent(start, budget_s):
        notes.append("final round skipped: the per-shape budget was spent")
    elif len(contenders) > 1:
        try:
            _final_round(contenders, timer, run_args)
            notes.append(f"final round (interleaved, {FINAL_ROUNDS}x{FINAL_REPEAT} samples each): "
                         + ", ".join(r.label for _, r in contenders))
        except Exception as exc:  # keep the first-pass medians
            notes.append(f"final round failed ({type(exc).__name__}: {exc}); first-pass medians used")
    best = min(contenders, key=lambda cr: cr[1].median_ms)[0] if contenders else None  # leader included
    reason = "lowest median" if best is not None else "no candidate ran correctly"
    return TuneResult(problem, key, rows, best, "tuned", time.perf_counter() - start, reason,
                      trusted.name, notes)
