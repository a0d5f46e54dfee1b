"""The autotuner behind ``algorithm="auto"``.

For a problem, :func:`tune` does, in order (the tuning mode, :mod:`.modes`, decides steps 2-4's scope):

1. candidates: every eligible (plugin, config) from ``registry.candidates(problem, workspace_limit)``
   (within the workspace limit; each plugin's first N configs under ``set_tune_configs(N)``), minus
   plugins declaring ``deterministic = False`` when :func:`set_deterministic` is on;
2. cache (:mod:`.cache_entries`): the entry under ``cache.tuning_key(problem, key policy,
   deterministic)`` answers at once (nothing runs, nothing is timed) when it was written by this
   convlab version, timed the same way (``rounds.TIMED``: by plan replay), for the same candidate
   labels and the same plugin fingerprints (source + config names) and its winner is still eligible (an
   entry shared by a neighbouring shape under the pow2 policy: the labels and fingerprints of the shape
   it was tuned on, and its winner eligible for this one) and it was made in a mode at least as thorough
   as the current one (heuristic < tune < exhaustive);
   mode "heuristic": the cost model's best candidate (:mod:`.ranking`), nothing
   compiled or timed, stored as a heuristic entry (a later "tune" replaces it; a pick by declared
   priority, where no model applies, is not stored);
3. simulator without an injected timer (timings mean nothing there), or an empty batch (N = 0): the
   highest declared priority wins (nothing runs, nothing is cached) and the result says so;
4. otherwise, on fresh random operands of the real shape: each candidate runs once into a NaN-poisoned
   output and is compared with the trusted result (the float64 reference when ``problem.flops <=
   REFERENCE_FLOPS``, else the ``direct`` plugin's output) by ``measure.rel_error`` against
   the tolerance of its arithmetic (plus the trusted output's): worse -> status "wrong", never chosen;
   an exception -> "error", not fatal (``measure.check_candidate``, the engine the benchmarks use
   too); mode "tune": only each plugin's TOP_K best by the cost model, best first, within the
   per-shape budget (mode_steps.py); mode "exhaustive": all, in registry order. Survivors are timed
   with CUDA events (warm-up, PROBE samples,
   dropped early when their median exceeds SLOW_FACTOR x the leader's, else REPEAT samples in all),
   then those within FINAL_MARGIN of the leader are re-timed round-robin (rounds.py has the loop
   nest); the lowest median wins and is stored in memory and in the JSON file (see cache.py).

Key policy (:func:`set_key_policy`): ``"exact"`` (default) keys on every size; ``"pow2"`` rounds batch and
spatial sizes up to powers of two so that nearby shapes share one tuning. ``$CONVLAB_KEY_POLICY`` sets the
initial value.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

from convlab import runtime
from convlab.runtime import context, settings
from convlab.runtime.settings import cache_dir
from convlab.plugin import registry
from convlab.problem import Problem
from convlab.plugin.registry import Candidate
from .result import CandidateResult, TuneResult
from .cache import TuningCache, file_name, tuning_key
from .rounds import Timer, measure_candidates
from . import cache_entries, mode_steps, modes

log = logging.getLogger("convlab")

_lock = threading.RLock()
_recorders: list[list[TuneResult]] = []  # the open recording() blocks
_COUNTERS = ("timed", "checked", "tuned", "cache_hits", "priority", "heuristic")


def _decisions() -> dict[tuple, "TuneResult"]:
    """The current device's last result per exact problem (the context's "tuner.decisions" store)."""
    return context.current().store("tuner.decisions")


def _caches() -> dict[Path, TuningCache]:
    """The tuning-cache files read on the current device (the context's "tuner.caches" store)."""
    return context.current().store("tuner.caches")


class _Counters(dict):
    """The tuner's counters on the current device (a context store: reset to zero, not emptied)."""

    def __init__(self) -> None:
        super().__init__(dict.fromkeys(_COUNTERS, 0))

    def clear(self) -> None:
        self.update(dict.fromkeys(_COUNTERS, 0))


def _counters() -> dict[str, int]:
    return context.current().store("tuner.stats", _Counters)


# ---- counters -----------------------------------------------------------------------------------
def stats() -> dict[str, int]:
    """Counters since start (or :func:`reset_stats`): candidates timed and checked, keys tuned, cache
    hits, choices made by priority, heuristic picks (mode "heuristic": nothing checked or timed)."""
    return dict(_counters())


def reset_stats() -> None:
    counters = _counters()
    for k in counters:
        counters[k] = 0


# ---- the cache ----------------------------------------------------------------------------------
def cache_path() -> Path:
    """The JSON file of the current device (model and compute capability)."""
    return cache_dir() / file_name(runtime.device_name(), runtime.compute_capability())


def _cache() -> TuningCache:
    path = cache_path()
    with _lock:
        return _caches().setdefault(path, TuningCache(path))


def clear_cache(memory: bool = True, disk: bool = True) -> None:
    """Forget tuning results in this process (``memory``) and/or delete this device's file (``disk``)."""
    with _lock:
        if memory:
            _decisions().clear()
            settings.bump_generation()  # "auto" launch plans re-check their decision
            for cache in _caches().values():
                cache.clear(memory=True, disk=False)
        if disk:
            _cache().clear(memory=False, disk=True)


def _store(result: TuneResult, cands: list[Candidate], prints: dict[str, str], extra: dict) -> None:
    _cache().put(result.key, cache_entries.entry_of(result, cands, prints, extra))


def stored(key: str) -> dict | None:
    """The entry this device's cache holds under a tuning ``key`` (as written, ``written_at``
    included), or None."""
    return _cache().get(key)


def seed(entries: dict[str, dict]) -> int:
    """Merge entries from another copy of this device's cache file (see ``TuningCache.merge``)."""
    return _cache().merge(entries)


def remembered(key: tuple) -> TuneResult | None:
    """This process's last result under a :func:`memo_key` (what ``choose`` answers from)."""
    return _decisions().get(key)


def memo_key(problem: Problem, limit: int, mode: str | None = None) -> tuple:
    """The key of this process's decision for ``problem`` under the settings in force (``mode``: the
    tuning mode's place, default the current mode)."""
    return (problem.key(), limit, settings.get_key_policy(), settings.get_deterministic(),
            settings.get_float32_precision(), settings.get_tune_configs(),
            settings.get_tune_mode() if mode is None else mode, registry.state())


def _remember(problem: Problem, limit: int, result: TuneResult) -> None:
    """Remember ``result`` for the current mode and, as its cache entry would (modes.answers), for every
    less thorough mode: a shape tuned on request runs its tuned pick when the default mode calls it."""
    _decisions()[memo_key(problem, limit)] = result
    if result.winner is not None and result.source in ("tuned", "cache", "heuristic") and result.mode in modes.RANK:
        for lower, rank in modes.RANK.items():
            if rank < modes.RANK[result.mode]:
                _decisions()[memo_key(problem, limit, lower)] = result


@contextlib.contextmanager
def recording() -> Iterator[list[TuneResult]]:
    """``with recording() as seen:``: every decision :func:`choose` answers inside the block, in call
    order (convlab.torch.tune attributes them to a model's layers)."""
    seen: list[TuneResult] = []
    _recorders.append(seen)
    try:
        yield seen
    finally:
        _recorders.remove(seen)


def tune(problem: Problem, *, workspace_limit: int | None = None, force: bool = False,
         timer: Timer | None = None) -> TuneResult:
    """Tune ``problem`` (or answer from the cache unless ``force``); see the module docstring.

    ``timer(candidate) -> list[float]`` replaces CUDA-event timing (tests inject fake milliseconds;
    with a timer, the check and timing steps also run on the simulator).
    """
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a convlab Problem, got {type(problem).__name__}")
    if timer is not None and not callable(timer):
        raise TypeError(f"timer must be callable(candidate) -> list of ms, got {timer!r}")
    limit = settings.check_workspace_limit(workspace_limit)
    start = time.perf_counter()
    mode = settings.get_tune_mode()
    with _lock:
        cands = cache_entries.eligible(problem, limit)
        key = tuning_key(problem, settings.get_key_policy(), settings.get_deterministic())
        prints = cache_entries.fingerprints(problem, cands)
        entry = None if force or problem.n == 0 else _cache().get(key)
        stale = cache_entries.stale_for(problem, entry, cands, prints, limit) if entry is not None else "no entry"
        if not stale:
            stale = mode_steps.mode_stale(entry, mode)
        if not stale:
            _counters()["cache_hits"] += 1
            result = cache_entries.from_entry(problem, key, entry, cands, start)
        elif problem.n == 0 or (mode != "heuristic" and not runtime.HAS_DEVICE and timer is None):
            _counters()["priority"] += 1
            why = ("an empty batch (N = 0) has nothing to time" if problem.n == 0 else
                   "CUDA simulator: timings mean nothing")
            result = TuneResult(problem, key, [CandidateResult(c.plugin.name, c.config.name)
                                               for c in cands], cands[0], "priority",
                                time.perf_counter() - start,
                                f"{why}, so the highest declared priority wins (nothing was run or timed)",
                                mode=mode)
        else:
            result = _decide(problem, key, cands, limit, timer, start, mode, prints)
            if entry is not None and not force:
                result.notes.append(f"cache entry replaced: {stale}")
        _remember(problem, limit, result)
        settings.bump_generation()
    return result


def _decide(problem: Problem, key: str, cands: list[Candidate], limit: int, timer: Timer | None,
            start: float, mode: str, prints: dict[str, str]) -> TuneResult:
    """A pick made now in ``mode`` (heuristic, or checked and timed), stored when there is a winner."""
    if mode == "heuristic":
        _counters()["heuristic"] += 1
        result, ranking = mode_steps.heuristic(problem, key, cands, limit, start)
        if ranking.by_model:  # a priority order is recomputed as fast as it is read (modes.py)
            _store(result, cands, prints, mode_steps.entry_fields(result, None, ranking))
        return result
    _counters()["tuned"] += 1
    timed, ranking = mode_steps.to_time(problem, cands, limit, mode)
    budget = settings.get_tune_budget() if mode == "tune" else None
    log.info("tuning %s (mode %s): compiling/checking %d of %d candidates", problem.describe(), mode,
             len(timed), len(cands))
    result = measure_candidates(problem, key, timed, limit, timer, start, _counters(), budget)
    rest = [c for c in (ranking.order if ranking else []) if c not in timed]
    if result.winner is None and rest:  # every candidate timed failed its check: on down the ranking
        more = measure_candidates(problem, key, rest, limit, timer, start, _counters())
        more.candidates[:0], more.notes[:0] = result.candidates, result.notes
        more.notes.append(f"none of the top {modes.TOP_K} a plugin ran correctly: the other "
                          f"{len(rest)} candidates were checked and timed too")
        result, timed = more, timed + rest
    mode_steps.finish(result, cands, timed, ranking, mode)
    log.info("tuning %s: done in %.2f s, winner %s", problem.describe(), time.perf_counter() - start,
             result.winner.label if result.winner else None)
    if result.winner is not None:
        _store(result, cands, prints, mode_steps.entry_fields(result, timed, ranking))
    return result


def choose(problem: Problem, workspace_limit: int) -> Candidate:
    """The candidate ``algorithm="auto"`` runs: remembered in this process, else :func:`tune`'s winner.

    ValueError when no plugin can run the problem; RuntimeError when every candidate failed its check.
    """
    result = _decisions().get(memo_key(problem, workspace_limit))
    if result is not None and result.winner is not None and not registry.verdict(
            result.winner.plugin, problem, result.winner.config, workspace_limit):
        result = None  # the remembered winner was excluded since (e.g. its kernel raised)
    if result is None:
        result = tune(problem, workspace_limit=workspace_limit)
    if result.winner is None:
        statuses = "; ".join(f"{c.label}: {c.verdict}" for c in result.candidates)
        raise RuntimeError(f"no candidate ran {problem.describe()} correctly ({statuses})")
    for seen in _recorders:
        seen.append(result)
    return result.winner


def pretune(problems: Iterable[Problem], **kw: Any) -> list[TuneResult]:
    """:func:`tune` each problem (keyword arguments are passed on); returns the results in order."""
    problems = list(problems)
    for i, p in enumerate(problems):
        if not isinstance(p, Problem):
            raise TypeError(f"problems[{i}] must be a convlab Problem, got {type(p).__name__}")
    return [tune(p, **kw) for p in problems]
