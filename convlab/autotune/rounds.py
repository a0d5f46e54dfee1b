"""How the autotuner checks and times the candidates of one problem (used by :mod:`convlab.autotune`).

On fresh random operands of the real shape::

    trusted = float64 reference            if problem.flops <= REFERENCE_FLOPS
              else the direct plugin's output (the reference would take minutes on the host)
    for cand in candidates:                                  # registry order
        run once into a NaN-poisoned output; rel err > tolerance -> "disqualified", exception -> "failed"
        probe: WARMUP runs, PROBE timed samples (CUDA events)
        probe median > SLOW_FACTOR x leader's median -> dropped early
        else REPEAT samples in all; leader = lowest median so far
    final round: the candidates within FINAL_MARGIN of the leader are re-timed interleaved
        for round in range(FINAL_ROUNDS): for cand in contenders: FINAL_REPEAT samples
    winner = lowest median (of the final-round samples when there was a final round)

The final round exists because candidates timed one after another see different conditions (clock
ramps, a busy host slowing the launches of multi-kernel plugins); round-robin sampling gives each
contender the same conditions, so a few percent between them is measured, not drawn.
A ``timer(candidate) -> list of ms`` replaces CUDA events (tests inject fake timings; on the simulator
this is the only way anything is timed).
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import numpy as np

from convlab import measure, reference, runtime
from convlab.problem import Problem
from convlab.plugin.registry import Candidate
from .result import CandidateResult, TuneResult

REFERENCE_FLOPS = 5e8  # check against the float64 reference up to this size, else against "direct"
WARMUP, PROBE, REPEAT = 2, 3, 15  # first pass: warm-up runs, probe samples, samples in all
SLOW_FACTOR = 3.0  # drop a candidate whose probe median exceeds this multiple of the leader's median
FINAL_MARGIN, FINAL_ROUNDS, FINAL_REPEAT = 0.10, 4, 5  # final round: who, how many rounds, samples each

Timer = Callable[[Candidate], "list[float]"]


def _trusted(problem: Problem, cands: list[Candidate], ops: tuple, out: Any, nan: np.ndarray,
             limit: int) -> tuple[np.ndarray, str, float]:
    """(trusted float64 output, its name, its eps): the reference when small, else direct's output."""
    a, b, bias, da, db, dbias = ops
    if problem.flops > REFERENCE_FLOPS:
        direct = next((c for c in cands if c.plugin.name == "direct"), None)
        if direct is not None:
            try:
                out.copy_to_device(nan)
                measure.run_candidate(direct, problem, da, db, dbias, out, limit)
                got = np.asarray(out.copy_to_host(), np.float64)
                if np.all(np.isfinite(got)):
                    return got, "direct", direct.plugin.compute_eps(problem.dtype)
            except Exception:  # fall back to the reference below
                pass
    return reference.solve(problem, a, b, bias), "reference", float(np.finfo(np.float64).eps)


def _samples(cand: Candidate, timer: Timer | None, run_args: tuple, warmup: int, repeat: int
             ) -> list[float]:
    """``repeat`` samples in ms (an injected timer's list as it comes)."""
    if timer is not None:
        return [float(t) for t in (timer(cand) or [])]
    problem, da, db, dbias, out, limit = run_args
    return measure.time_candidate(cand, problem, da, db, dbias, out, workspace_limit=limit,
                                  warmup=warmup, repeat=repeat) or []


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
                       timer: Timer | None, start: float, stats: dict[str, int]) -> TuneResult:
    """Check and time every candidate (see the module docstring); the TuneResult names the winner."""
    a, b, bias = measure.random_operands(problem, np.random.default_rng())
    da, db, dbias = measure.to_device(a, b, bias)
    nan = np.full(problem.operand_shapes[2], np.nan, problem.dtype)
    out = runtime.to_device(nan)
    trusted, trusted_name, trusted_eps = _trusted(problem, cands, (a, b, bias, da, db, dbias), out, nan,
                                                  limit)
    run_args = (problem, da, db, dbias, out, limit)
    rows, ran, leader = [], [], None
    for cand in cands:
        row = CandidateResult(cand.label, cand.plugin.name, cand.config.name)
        rows.append(row)
        try:
            out.copy_to_device(nan)
            measure.run_candidate(cand, problem, da, db, dbias, out, limit)
            got = out.copy_to_host()
            stats["checked"] += 1
            row.rel_err = measure.rel_error(got, trusted)
            tol = measure.tolerance(problem, max(cand.plugin.compute_eps(problem.dtype), trusted_eps))
            if not row.rel_err <= tol:
                row.status = (f"disqualified: rel err {row.rel_err:.3g} > tolerance {tol:.3g} "
                              f"vs {trusted_name}")
                continue
            row.median_ms, row.samples, row.dropped_early = _timed(cand, timer, run_args, leader, stats)
            row.status = "ok"
        except Exception as exc:  # a broken candidate is reported, never fatal
            row.status = f"failed: {type(exc).__name__}: {exc}"[:400]
            continue
        ran.append((cand, row))
        leader = row.median_ms if leader is None else min(leader, row.median_ms)
    notes = []
    contenders = [(c, r) for c, r in ran if not r.dropped_early and r.median_ms <= leader * (1 + FINAL_MARGIN)]
    if len(contenders) > 1:
        try:
            _final_round(contenders, timer, run_args)
            notes.append(f"final round (interleaved, {FINAL_ROUNDS}x{FINAL_REPEAT} samples each): "
                         + ", ".join(r.label for _, r in contenders))
        except Exception as exc:  # keep the first-pass medians
            notes.append(f"final round failed ({type(exc).__name__}: {exc}); first-pass medians used")
    best = min(contenders, key=lambda cr: cr[1].median_ms)[0] if contenders else None  # leader included
    reason = "lowest median" if best is not None else "no candidate ran correctly"
    return TuneResult(problem, key, rows, best, "tuned", time.perf_counter() - start, reason,
                      trusted_name, notes)
