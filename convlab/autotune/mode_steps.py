"""The steps of :func:`convlab.autotune.tune` that depend on the tuning mode (:mod:`.modes`).

    heuristic   rank the candidates (:mod:`.ranking`); the first is the pick; nothing is checked,
                compiled or timed here (the pick compiles when the op first runs it)
    tune        rank; time each plugin's TOP_K best in rank order (rounds.py, within the budget); the
                others get "not run" rows saying why
    exhaustive  every candidate, in registry order, no budget

What a cache entry records beside the winner (``entry_fields``): ``mode``; in mode "tune" ``k`` and
``candidates_timed`` (the labels compiled and timed); ``ranking`` (how the order was made), ``model``
(its identity) and ``estimates`` (ms per label) when a cost model ranked them.
"""
from __future__ import annotations

import time
from typing import Any

from convlab.measure import CandidateResult
from convlab.plugin.registry import Candidate
from convlab.problem import Problem
from convlab.runtime.targets import current as current_target

from . import costmodel, modes
from .ranking import Ranking, model_identity, rank, top_per_plugin
from .result import TuneResult


def current_model() -> str:
    """The identity of the ranking the current target gets: its model's, or "priority"."""
    model = costmodel.model_for(current_target())
    return "priority" if model is None else model_identity(model)


def mode_stale(entry: dict, mode: str) -> str:
    """Why ``entry`` cannot answer a call in ``mode`` ('' when it can): made in a less thorough mode,
    or a heuristic pick made by another cost model (or by priority, where a model exists now)."""
    made = modes.entry_mode(entry)
    if not modes.answers(entry, mode):
        return f"it is a {made} pick (nothing or fewer timed) and mode {mode!r} is asked for"
    if made == "heuristic" and entry.get("model", "priority") != current_model():
        return "it is a heuristic pick of another cost model"
    return ""


def heuristic(problem: Problem, key: str, cands: list[Candidate], limit: int, start: float
              ) -> tuple[TuneResult, Ranking]:
    """The model's pick, nothing timed (module docstring)."""
    ranking = rank(problem, cands, limit)
    rows = [CandidateResult(c.plugin.name, c.config.name, error="not timed: mode 'heuristic'")
            for c in cands]
    pick = ranking.order[0]
    why = (f"heuristic pick: first of the {ranking.how}" + (f", groups without measured times ranked last: "
                                                          f"{', '.join(ranking.unmeasured)}" if ranking.unmeasured
                                                          else "") if ranking.by_model else
           f"heuristic pick without a cost model: {ranking.how}")
    result = TuneResult(problem, key, rows, pick, "heuristic", time.perf_counter() - start,
                        why + " (nothing was compiled or timed)", mode="heuristic",
                        estimates=ranking.estimates, ranking=ranking.how)
    return result, ranking


def to_time(problem: Problem, cands: list[Candidate], limit: int, mode: str
            ) -> tuple[list[Candidate], Ranking | None]:
    """The candidates to check and time, in order, and the ranking (None in mode "exhaustive")."""
    if mode == "exhaustive":
        return list(cands), None
    ranking = rank(problem, cands, limit)
    return top_per_plugin(ranking, modes.TOP_K), ranking


def finish(result: TuneResult, cands: list[Candidate], timed: list[Candidate], ranking: Ranking | None,
           mode: str) -> None:
    """Record the mode and ranking on ``result``; "not run" rows for the candidates left out by the
    ranking, in the candidates' registry order after the timed ones."""
    result.mode = mode
    if ranking is None:
        return
    result.estimates, result.ranking = dict(ranking.estimates), ranking.how
    chosen = {c.label for c in timed}
    place = {c.label: i for i, c in enumerate(ranking.order)}
    for c in cands:
        if c.label not in chosen:
            mine = [x for x in ranking.order if x.plugin.name == c.plugin.name]
            why = (f"not timed: rank {mine.index(c) + 1} of {c.plugin.name}'s {len(mine)} by the "
                   f"{ranking.how.split(' (')[0]}, mode 'tune' times the top {modes.TOP_K} a plugin")
            result.candidates.append(CandidateResult(c.plugin.name, c.config.name, error=why))
    result.candidates.sort(key=lambda r: (r.status == "not run", place.get(r.label, 0)))
    result.notes.append(f"mode 'tune': {len(timed)} of {len(cands)} candidates considered for timing "
                        f"(top {modes.TOP_K} a plugin by the {ranking.how})")


def entry_fields(result: TuneResult, timed: list[Candidate] | None, ranking: Ranking | None) -> dict[str, Any]:
    """The mode's fields of a cache entry (module docstring)."""
    fields: dict[str, Any] = {"mode": result.mode}
    if result.mode == "tune" and timed is not None:
        fields.update(k=modes.TOP_K, candidates_timed=[r.label for r in result.candidates if r.samples > 0])
    if ranking is not None:
        fields.update(ranking=ranking.how, model=ranking.model,
                      estimates={k: round(v, 6) for k, v in ranking.estimates.items()})
    return fields
