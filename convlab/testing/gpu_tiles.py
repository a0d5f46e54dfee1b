"""The GPU's tile sizes run on the simulator: a few of the configs a plugin offers a named GPU target
(convlab.runtime.targets: sm_90, sm_80), each on one tiny problem, planned and launched as on that
target (``targets.using``), checked against the float64 reference. The simulator's own target offers
toy tiles (tests of tile logic at small sizes); these runs exercise the real tiles' indexing, block
shapes and shared-memory layouts through the simulator's stand-ins, without a GPU.

    gpu_tile_cases(plugin)    [(op, target name, config, problem)]: per op, the first config sm_80
                              offers and the last of those only sm_90 offers (its wgmma tiles)
    check_gpu_tile(plugin, op, target, config, problem, rng)   AssertionError when it is wrong
"""
from __future__ import annotations

import numpy as np

from convlab import reference
from convlab.measure import plugin_tolerance, random_operands, rel_error
from convlab.plugin import registry
from convlab.plugin.contract import Algorithm, Config
from convlab.problem import Problem, make_problem
from convlab.runtime import targets

from .checks import _run

#: the problem each op runs on: 8 channels in and out, 5 x 6 pixels, a 3x3 filter, padding 1, bias;
#: groups 1, or 8 for a plugin that takes only depthwise layers
SHAPE = dict(n=1, c=8, h=5, w=6, k=8, r=3, s=3, padding=1)
DTYPE_ORDER = ("float32", "float16", "bfloat16", "float64")


def _problem(plugin: Algorithm, op: str, target: targets.Target) -> Problem | None:
    """The first of :data:`SHAPE` (groups 1, then depthwise) in the first dtype of DTYPE_ORDER that
    ``plugin`` accepts on ``target``, or None."""
    for dtype in [d for d in DTYPE_ORDER if d in plugin.dtypes]:
        for groups in (1, SHAPE["c"]):
            problem = make_problem(op, **SHAPE, groups=groups, dtype=dtype, bias=op != "wgrad")
            if registry.verdict(plugin, problem, target=target):
                return problem
    return None


def gpu_tile_cases(plugin: Algorithm, names: tuple[str, ...] = targets.GPU_TARGETS
                   ) -> list[tuple[str, str, Config, Problem]]:
    """The (op, target, config, problem) runs of ``plugin`` (module docstring): per op, the config the
    first target (sm_80) offers first, and the last config a later target (sm_90) offers that no earlier
    one does. None for a composite (its configs name another plugin's, ``via``: that plugin's runs
    cover them). On 2 loaded cores the sm_90 tiles that sm_80 offers too (tf32x3's 64x64 and 128x128,
    implicit_gemm's 128x128) took 40 of the 81 CPU seconds that also running sm_90's last config per op
    took (tools/pytest_cpu_times.py on tests/plugin/test_gpu_tiles.py): left out."""
    cases = []
    for op in sorted(plugin.ops):
        seen, own = set(), []
        for name in names:
            target = targets.get(name)
            problem = _problem(plugin, op, target)
            configs = [] if problem is None else [c for c in registry.safe_configs(plugin, problem, target)
                                                  if registry.verdict(plugin, problem, c, target=target)
                                                  and "via" not in c]
            if not seen and configs:
                cases.append((op, name, configs[0], problem))
            elif [c for c in configs if c not in seen]:
                own.append((op, name, [c for c in configs if c not in seen][-1], problem))
            seen |= set(configs)
        cases += own[-1:]
    return cases


def check_gpu_tile(plugin: Algorithm, op: str, target: str, config: Config, problem: Problem,
                   rng: np.random.Generator) -> None:
    """Run ``config`` of ``plugin`` on ``problem`` as on ``target`` (its plan: splits, launch shapes) and
    compare with the float64 reference; the output is NaN-poisoned, so an unwritten element fails."""
    host = random_operands(problem, rng)
    with targets.using(target):
        got = _run(plugin, problem, config, host)
    want = reference.solve(problem, *host)
    err, tol = rel_error(got, want), plugin_tolerance(plugin, problem, config, want)
    assert err <= tol, (f"{plugin.name}[{config.name}] ({target}'s tile) on {problem.describe()}: relative "
                        f"error {err:.3g} > tolerance {tol:.3g}")
