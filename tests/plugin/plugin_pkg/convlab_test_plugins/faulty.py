"""Plugins broken on purpose: convlab must report them by name and keep working without them."""
from __future__ import annotations

from convlab import Algorithm, Problem, Verdict


class RaisesInPredicate(Algorithm):
    """Its predicate raises for every problem: the registry turns that into a declining verdict."""

    name = "example_faulty_predicate"
    ops = frozenset({"forward"})
    priority = 100

    def check(self, problem: Problem) -> Verdict:
        raise RuntimeError("predicate exploded")

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        raise AssertionError("never launched: the predicate always raises")


class RaisesInKernel(Algorithm):
    """Accepts every forward problem, then raises at launch: tuning and conformance must catch it."""

    name = "example_faulty_kernel"
    ops = frozenset({"forward"})
    priority = 100

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        raise RuntimeError("kernel exploded")
