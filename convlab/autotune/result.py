"""What the autotuner reports: the :class:`TuneResult` of a problem (winner, where the decision came
from, how long it took) with one :class:`~convlab.measure.CandidateResult` per candidate (the same
record the benchmarks use)."""
from __future__ import annotations

from dataclasses import dataclass, field

from convlab.measure import CandidateResult
from convlab.problem import Problem
from convlab.plugin.registry import Candidate


@dataclass
class TuneResult:
    """The outcome of :func:`tune`: every candidate's median and check, the winner and its source."""

    problem: Problem
    key: str
    candidates: list[CandidateResult]
    winner: Candidate | None
    source: str  # "cache", "tuned", "heuristic" or "priority"
    tuning_s: float  # seconds this call spent
    reason: str = ""
    checked_against: str = ""  # measure.Trusted.name: "host float64" or "direct" (empty when nothing ran)
    notes: list[str] = field(default_factory=list)
    mode: str = ""  # the tuning mode that made the pick (convlab.autotune.modes)
    estimates: dict[str, float] = field(default_factory=dict)  # the cost model's ms per label
    ranking: str = ""  # how the candidates were ordered ("cost model (...)", "declared priority (...)")

    @property
    def winner_label(self) -> str | None:
        return None if self.winner is None else self.winner.label

    @property
    def picked_by(self) -> str:
        """Whose pick the winner is: "tuned" (checked and timed in mode tune or exhaustive, now or in
        the stored entry), "model" (the cost model's lowest estimate, mode heuristic, nothing timed) or
        "priority" (the highest declared priority: no cost model applies, nothing timed)."""
        if self.source == "priority":
            return "priority"
        if self.mode == "heuristic":
            return "priority" if self.ranking.startswith("declared priority") else "model"
        return "tuned"

    def pick_text(self) -> str:
        """One phrase on :attr:`picked_by` (explain and convlab.torch.tune print it)."""
        return {"tuned": f"tuned (mode {self.mode!r}: candidates checked and timed)",
                "model": "the cost model's (mode 'heuristic': nothing timed)",
                "priority": "declared priority (no cost model applies: nothing timed)"}[self.picked_by]

    def medians(self) -> dict[str, float | None]:
        return {c.label: c.median_ms for c in self.candidates}

    def __str__(self) -> str:
        lines = [f"tuning {self.problem.describe()}  [{self.key}]"]
        width = max([len(c.label) for c in self.candidates] + [8])
        for c in self.candidates:
            mark = "*" if c.label == self.winner_label else " "
            med = "-" if c.median_ms is None else f"{c.median_ms:.4g} ms"
            est = f"  est {self.estimates[c.label]:.4g} ms" if c.label in self.estimates else ""
            drop = " (dropped early)" if c.dropped_early else ""
            lines.append(f" {mark} {c.label:<{width}}  {med:>12}{est}  {c.verdict}{drop}")
        mode = f", mode {self.mode}" if self.mode else ""
        lines.append(f"winner: {self.winner_label} ({self.source}{mode}, {self.tuning_s:.3g} s)"
                     + (f": {self.reason}" if self.reason else ""))
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)
