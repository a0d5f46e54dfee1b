"""The autotuner's cache entries (:mod:`.cache` holds them per device): the candidates a problem has, when
a stored entry still answers it, the :class:`~.result.TuneResult` it answers with, and the entry a tuning
stores.

    eligible(problem, limit)      every eligible (plugin, config), minus non-deterministic plugins under
                                  deterministic mode; ValueError when none
    stale_for(problem, entry, ...) why an entry cannot answer ('' when it can): another convlab version,
                                  another way of timing (rounds.TIMED), another candidate set, a plugin's
                                  source or configs changed, its winner no longer eligible (an entry of a
                                  neighbouring shape, under the pow2 key policy, is judged on that shape)
    from_entry(...)               the TuneResult of a stored entry
    entry_of(result, ...)         the entry a tuning stores
"""
from __future__ import annotations

import time
from dataclasses import asdict

from convlab import _version, runtime
from convlab.plugin import registry
from convlab.plugin.registry import Candidate
from convlab.problem import Problem
from convlab.runtime import settings

from . import modes
from .cache import plugin_fingerprint
from .result import CandidateResult, TuneResult
from .rounds import TIMED


def eligible(problem: Problem, limit: int) -> list[Candidate]:
    cands = registry.candidates(problem, limit, per_plugin=settings.get_tune_configs())
    deterministic = settings.get_deterministic()
    if deterministic:
        cands = [c for c in cands if c.plugin.deterministic]
    if not cands:
        what = "deterministic plugin (deterministic mode is on)" if deterministic else "registered plugin"
        raise ValueError(f"no {what} can run {problem.describe()}")
    return cands


def fingerprints(problem: Problem, cands: list[Candidate]) -> dict[str, str]:
    plugins = {c.plugin.name: c.plugin for c in cands}
    return {name: plugin_fingerprint(p, registry.safe_configs(p, problem)) for name, p in plugins.items()}


def _stale(entry: dict, cands: list[Candidate], prints: dict[str, str]) -> str:
    """Why a cache entry cannot be used ('' when it can)."""
    labels = sorted(c.label for c in cands)
    try:
        if entry["version"] != _version.__version__:
            return f"written by convlab {entry['version']}, this is {_version.__version__}"
        if entry.get("timed") != TIMED:
            return f"timed {entry.get('timed', 'by plugin.run')}, now {TIMED}"
        if sorted(entry["candidates"]) != labels:
            return "the candidate set changed"
        changed = sorted(n for n in prints if entry["plugins"].get(n) != prints[n])
        if changed:
            return f"source or configs of {', '.join(changed)} changed"
        if entry["winner"] not in labels:
            return "its winner is no longer eligible"
    except (KeyError, TypeError, AttributeError) as exc:
        return f"malformed entry ({exc!r})"
    return ""


def stale_for(problem: Problem, entry: dict, cands: list[Candidate], prints: dict[str, str],
               limit: int) -> str:
    """Why ``entry`` cannot answer ``problem`` ('' when it can). An entry shared through the pow2 key
    policy was tuned on a neighbouring shape: it is judged against the candidates and fingerprints of
    that shape (whose configs may differ), and its winner must also be eligible here."""
    try:
        tuned = Problem.from_dict(entry["problem"])
    except (KeyError, TypeError, ValueError):
        tuned = problem
    if tuned != problem:
        try:
            tuned_cands = eligible(tuned, limit)
        except ValueError as exc:
            return f"the tuned shape has no candidates now ({exc})"
        why = _stale(entry, tuned_cands, fingerprints(tuned, tuned_cands))
        if why:
            return why
        return "" if entry["winner"] in {c.label for c in cands} else \
            f"its winner (tuned on {tuned.describe()}) is not eligible for this shape"
    return _stale(entry, cands, prints)


def from_entry(problem: Problem, key: str, entry: dict, cands: list[Candidate], start: float
                ) -> TuneResult:
    known = {c.label: c for c in cands}
    rows = []
    for row in entry.get("results", []):
        try:
            rows.append(CandidateResult.from_dict(row))
        except TypeError:
            continue
    made = modes.entry_mode(entry)
    how = "a heuristic pick (nothing timed)" if made == "heuristic" else \
        f"tuned in {entry.get('tuning_s', float('nan')):.3g} s"
    estimates = entry.get("estimates") if isinstance(entry.get("estimates"), dict) else {}
    return TuneResult(problem, key, rows, known[entry["winner"]], "cache", time.perf_counter() - start,
                      f"stored result of mode {made!r}", entry.get("checked_against", ""),
                      [f"{how} on {entry.get('device')}"]
                      + ([f"shared: tuned on {entry['problem']['x']} (key policy {settings.get_key_policy()})"]
                         if entry.get("problem") != problem.to_dict() else []),
                      mode=made, estimates=dict(estimates), ranking=str(entry.get("ranking", "")))


def entry_of(result: TuneResult, cands: list[Candidate], prints: dict[str, str], extra: dict) -> dict:
    """The cache entry a tuning stores: ``extra`` (the mode's fields) and the result, the candidates,
    the plugins' fingerprints, this convlab version and how it timed."""
    return {**extra, "winner": result.winner_label, "version": _version.__version__, "timed": TIMED,
            "plugins": prints, "candidates": sorted(c.label for c in cands),
            "results": [asdict(r) for r in result.candidates], "tuning_s": result.tuning_s,
            "checked_against": result.checked_against, "problem": result.problem.to_dict(),
            "device": runtime.device_name()}
