"""Mutation testing's runner: which mutants a plugin has, and the hunt of the suite's checks for them.

    mutants_for(plugin)   the mutants ``convlab check --mutants`` runs: the output-level ones that apply
                          (convlab.testing.mutants), the built-ins' kernel-level ones for the plugin
                          (convlab.testing.kernel_mutants) and those its ``mutants()`` method declares
    hunt(mutant)          the suite's own checks (run_check: class examples, then the draws) on the
                          mutant until one fails: killed; a mutant no check fails survived
    hunt_all(plugin)      every mutant of a plugin, one line each, and the mutation score
    suite_mutants()       the set CI requires killed (tests/plugin/test_mutants.py)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from convlab import runtime
from convlab.plugin import registry
from convlab.plugin.contract import Algorithm

from .kernel_mutants import KERNEL_MUTANTS
from .mutants import Mutant, output_mutant, output_mutants
from .suite import applicable_checks, run_check

#: the checks a mutant is hunted with, in order (the others cannot see a wrong output)
HUNTING_CHECKS = ("check_matches_reference", "check_channels_last_operands", "check_output_fully_written",
                  "check_epilogue_matches_reference")


@dataclass
class Hunt:
    """What :func:`hunt` found: ``killed_by`` ("check op") and the failure, or empty when it survived."""

    mutant: Mutant
    killed_by: str = ""
    failure: str = ""

    @property
    def killed(self) -> bool:
        return bool(self.killed_by)


def mutants_for(plugin: Algorithm | str) -> list[Mutant]:
    """The mutants ``convlab check --mutants`` runs on ``plugin``: the output-level ones, the built-in
    kernel-level ones of this plugin (convlab.testing.kernel_mutants) and its own ``mutants()``."""
    plugin = registry.get(plugin) if isinstance(plugin, str) else plugin
    own = list(plugin.mutants()) if callable(getattr(plugin, "mutants", None)) else []
    kernel = [m for m in KERNEL_MUTANTS if m.plugin == plugin.name]
    return output_mutants(plugin) + kernel + own


def hunt(mutant: Mutant, checks: tuple[str, ...] = HUNTING_CHECKS) -> Hunt:
    """Run the suite's checks (``mutant.first`` first, op by op) on the mutant until one fails."""
    base = registry.get(mutant.plugin)
    found = Hunt(mutant)
    order = [mutant.first] + [c for c in checks if c != mutant.first]
    with mutant.make(base) as plugin:
        pairs = [(op, name) for name in order for op, other in applicable_checks(plugin) if other == name]
        for op, name in pairs:
            try:
                run_check(name, plugin, op, shrink=False)
            except Exception as exc:  # an AssertionError, or the mutant's kernel raising: killed either way
                found.killed_by, found.failure = f"{name} {op}", f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
                break
    return found


def suite_mutants() -> list[Mutant]:
    """The mutants CI requires killed: the output-level ones on the plugins of :data:`SUITE_OUTPUT_LEVEL`
    and every built-in kernel-level one (simulator-only ones only on the simulator)."""
    chosen = [output_mutant(name, plugin) for name, plugin in SUITE_OUTPUT_LEVEL]
    return chosen + [m for m in KERNEL_MUTANTS if runtime.target().simulator or not m.simulator_only]


#: the output-level mutants of the CI set, each on one built-in plugin (the cheapest that takes its class)
SUITE_OUTPUT_LEVEL = (("image0", "direct"), ("column_shift", "implicit_gemm"), ("depth_dilation", "direct"),
                      ("half_sum", "tensor_core"), ("unit_height_padding", "direct"))


def hunt_all(plugin: Algorithm | str, say: Callable[[str], None] = print) -> list[Hunt]:
    """:func:`hunt` every mutant of :func:`mutants_for` ``plugin`` (simulator-only ones on the simulator
    only), one line each through ``say``, then the mutation score (killed / planted)."""
    chosen = [m for m in mutants_for(plugin) if runtime.target().simulator or not m.simulator_only]
    found = []
    for mutant in chosen:
        found.append(hunt(mutant))
        verdict = f"killed by {found[-1].killed_by}" if found[-1].killed else "SURVIVED"
        say(f"  {mutant.label:<36} {verdict}  ({mutant.description})")
    killed = sum(h.killed for h in found)
    say(f"mutation score: {killed}/{len(found)} mutants killed")
    return found
