"""Mutation testing of the conformance suite: every planted bug of convlab.testing.mutants' CI set is
killed by the suite's own checks (class examples first, then the derandomized draws), in every run."""
import numpy as np
import pytest

import convlab
from convlab import measure, reference, runtime
from convlab.plugin import registry
from convlab.problem import make_problem
from convlab.testing import mutants, mutation
from convlab.testing.kernel_mutants import KERNEL_MUTANTS

SUITE = mutation.suite_mutants()
#: the planted bugs the suite missed before its class examples and tolerances (one each, at least)
OUTPUT_LEVEL = {"image0", "column_shift", "depth_dilation", "half_sum", "unit_height_padding"}


@pytest.mark.parametrize("mutant", SUITE, ids=[m.label for m in SUITE])
def test_the_suite_kills_the_mutant(mutant):
    found = mutation.hunt(mutant)
    assert found.killed, f"{mutant.label} ({mutant.description}) survived every conformance check"


def test_the_ci_set_holds_the_planted_bugs_of_every_kind():
    names = {m.name for m in SUITE}
    kernel = {m.name for m in KERNEL_MUTANTS if runtime.target().simulator or not m.simulator_only}
    assert OUTPUT_LEVEL <= names and kernel <= names
    assert len({m.label for m in SUITE}) == len(SUITE)


def test_mutants_leave_the_plugins_as_they_were():
    tc = registry.get("tensor_core")
    module = __import__("convlab.algorithms.tensor_core.gather", fromlist=["_conv"])
    before = (module._conv, module.sum_partials, type(tc).run)
    for mutant in [m for m in SUITE if m.plugin == "tensor_core" and m in KERNEL_MUTANTS]:
        with mutant.make(tc) as plugin:
            assert plugin.name == "tensor_core"
    assert (module._conv, module.sum_partials, type(tc).run) == before
    with mutants.output_mutant("image0", "direct").make(registry.get("direct")) as plugin:
        assert plugin.name == "direct~image0" and isinstance(plugin, type(registry.get("direct")))
    assert "direct~image0" not in {p.name for p in convlab.plugins()}


def test_half_accumulation_errs_beyond_the_tolerance_from_a_reduction_of_256():
    rng = np.random.default_rng(7)
    for channels in (32, 64):  # L = 288, 576
        problem = make_problem("forward", 2, channels, 4, 4, 8, 3, 3, padding=1, dtype="float16")
        host = measure.random_operands(problem, rng)
        want = reference.solve(problem, *host)
        tol = measure.plugin_tolerance(registry.get("tensor_core"), problem, None, want)
        half = mutants.half_accumulated(problem, *host)
        assert measure.rel_error(half, want) > 2 * tol
        exact = want.astype(np.float16)  # a perfect kernel's output passes
        assert measure.rel_error(exact, want) < tol


class _Mine(convlab.Algorithm):
    """A plugin declaring its own mutant (the protocol of docs/ADDING_A_PLUGIN.md)."""

    name, ops, dtypes = "_test_with_mutants", frozenset({"forward"}), frozenset({"float32"})

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        convlab.get_plugin("direct").run(problem, config, a, b, bias, out, workspace_limit=workspace_limit)

    def mutants(self):
        def drop_bias(plugin, super_run, problem, config, a, b, bias, out, limit):
            super_run(bias_=None)
        return [mutants.subclass_mutant("no_bias", self.name, "the bias never added", drop_bias)]


def test_a_plugin_declares_its_own_mutants():
    convlab.register(_Mine)
    try:
        found = mutation.mutants_for(_Mine.name)
        assert [m.name for m in found] == ["image0", "column_shift", "unit_height_padding", "no_bias"]
        assert all(mutation.hunt(m).killed for m in found)
    finally:
        convlab.unregister(_Mine.name)
