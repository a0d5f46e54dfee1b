"""Running the conformance checks: :func:`run_check` (one check, one op, hypothesis-drawn problems),
:func:`check_plugin` (every check on every op, a summary), :func:`parametrize_with_checks` (one pytest case
each), the hypothesis profiles (``convlab-sim``, ``convlab-gpu``) and how many examples a plugin draws."""
from __future__ import annotations

from typing import Iterable

import numpy as np
from hypothesis import HealthCheck, Phase, assume, example, given, settings
from hypothesis.errors import Unsatisfiable
from hypothesis import strategies as st

from convlab import runtime
from convlab.plugin import registry
from convlab.plugin.contract import Algorithm
from convlab.testing.checks import CHECKS, NEEDS_ACCEPTED
from convlab.testing.strategies import any_problems, nd_example

settings.register_profile("convlab-sim", max_examples=6, deadline=None, derandomize=False,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
settings.register_profile("convlab-gpu", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
DEFAULT_PROFILE = "convlab-gpu" if runtime.HAS_DEVICE else "convlab-sim"


def spatial_label(problem) -> str:
    """"1D", "2D" or "3D": a 2D problem of unit height, kernel and output height is a 1D one's
    embedding (what the ops hand a plugin for a conv1d)."""
    if problem.ndim == 2 and (problem.h, problem.r, problem.p) == (1, 1, 1):
        return "1D"
    return f"{problem.ndim}D"


def run_check(check_name: str, plugin: Algorithm | str, op: str,
              max_examples: int | None = None, shrink: bool = True, counts: dict | None = None) -> int:
    """Run one check on one op of a plugin over hypothesis-drawn problems (``shrink=False`` reports
    the first failing problem instead of searching for a minimal one: faster on the simulator).
    Problems are drawn at every N the plugin claims (``plugin.ndims``; 1D as 2D embeddings for a 2D
    plugin), and a plugin claiming 3D always runs one fixed 3D problem (strategies.nd_example) besides.
    Returns how many problems the check ran on; ``counts`` (a dict), when given, is filled with how
    many of them had each N (:func:`spatial_label`)."""
    plugin = registry.get(plugin) if isinstance(plugin, str) else plugin
    check = CHECKS[check_name]
    samples = [p for p in _samples(plugin, op)]
    dtypes = tuple(sorted(plugin.dtypes))

    if max_examples is None:
        max_examples = examples_for(plugin)
    extra = {} if max_examples is None else {"max_examples": max_examples}
    if not shrink:
        extra["phases"] = [Phase.explicit, Phase.reuse, Phase.generate]

    ran = []

    ndims = tuple(getattr(plugin, "ndims", (2,)))

    @settings(**extra)
    @given(problem=any_problems(op, dtypes, samples, ndims), seed=st.integers(0, 2**32 - 1))
    def run(problem, seed):
        if check_name in NEEDS_ACCEPTED:
            assume(registry.verdict(plugin, problem))
        check(plugin, problem, np.random.default_rng(seed))
        ran.append(problem)

    if 3 in ndims:
        run = example(problem=nd_example(op, dtypes[0]), seed=0)(run)
    try:
        run()
    except Unsatisfiable:
        raise AssertionError(
            f"{check_name} {op}: no drawn problem was accepted by plugin {plugin.name!r} (its predicate is "
            f"narrower than random problems reach); declare problems it accepts with its "
            f"sample_problems(op) method (see docs/ADDING_A_PLUGIN.md)") from None
    if counts is not None:
        for problem in ran:
            counts[spatial_label(problem)] = counts.get(spatial_label(problem), 0) + 1
    return len(ran)


#: examples a check draws on the simulator for a plugin declaring ``simulator_examples`` (a composite
#: that runs another plugin's kernels, each conformance-checked on its own, so that the profile's
#: examples need not repeat the inner plugin's simulator runs)
def examples_for(plugin: Algorithm, simulator: bool | None = None) -> int | None:
    """The examples a check draws for ``plugin``: the active profile's (None), except a quarter of
    them (at least 5) on a GPU for a plugin declaring ``compiles_per_shape``: each drawn shape compiles
    new kernels there (seconds each; the profile's 60 examples x 3 ops x 4 checks did not finish), and
    on the simulator a plugin's ``simulator_examples`` when it declares them.
    ``simulator``: whether kernels run on the simulator (default: this process's target)."""
    simulator = runtime.target().simulator if simulator is None else simulator
    if simulator and getattr(plugin, "simulator_examples", None):
        return min(int(plugin.simulator_examples), settings.default.max_examples)
    if simulator or not getattr(plugin, "compiles_per_shape", False):
        return None
    return max(5, settings.default.max_examples // 4)


def applicable_checks(plugin: Algorithm | str) -> list[tuple[str, str]]:
    """The (op, check name) pairs that apply to ``plugin``, from what it declares: every op in
    ``plugin.ops`` x every check, less ``check_deterministic`` for a plugin declaring
    ``deterministic = False`` and ``check_channels_last_operands`` for one whose ``layouts`` lack
    ``"nhwc"``."""
    plugin = registry.get(plugin) if isinstance(plugin, str) else plugin
    return [(op, name) for op in sorted(plugin.ops) for name in CHECKS
            if (plugin.deterministic or name != "check_deterministic")
            and ("nhwc" in plugin.layouts or name != "check_channels_last_operands")]


def parametrize_with_checks(plugins: Iterable[Algorithm | str] | None = None, **run_options):
    """A ``pytest.mark.parametrize`` over (plugin, op, check) for ``plugins`` (default: every
    registered one), like scikit-learn's ``parametrize_with_checks``. The test receives the plugin, the
    op and a callable ``check(plugin, op)`` that runs the check (``run_options`` go to
    :func:`run_check`); ids read ``plugin-op-check``, so a third-party package gets the same test ids
    and coverage as the built-ins with one decorator."""
    import pytest

    chosen = [registry.get(p) if isinstance(p, str) else p
              for p in (registry.plugins() if plugins is None else plugins)]
    cases, ids = [], []
    for plugin in chosen:
        for op, name in applicable_checks(plugin):
            def check(plugin_, op_, _name=name):
                return run_check(_name, plugin_, op_, **run_options)
            check.__name__ = name
            cases.append((plugin, op, check))
            ids.append(f"{plugin.name}-{op}-{name.removeprefix('check_')}")
    return pytest.mark.parametrize("plugin,op,check", cases, ids=ids)


def _samples(plugin: Algorithm, op: str):
    try:
        return [p for p in plugin.sample_problems(op) if p.op == op]
    except Exception:
        return []


def check_plugin(plugin: Algorithm | str, *, ops: Iterable[str] | None = None,
                 checks: Iterable[str] | None = None, max_examples: int | None = None,
                 shrink: bool = True) -> dict[str, str]:
    """Run every applicable check (:func:`applicable_checks`; or ``checks``) on every op of ``plugin``;
    returns ``{"check op": "ok (N examples: 1D a, 2D b, 3D c)" | "FAIL: ..."}`` and raises AssertionError at the end if any
    failed."""
    plugin = registry.get(plugin) if isinstance(plugin, str) else plugin
    report: dict[str, str] = {}
    applicable = applicable_checks(plugin)
    for op in sorted(plugin.ops if ops is None else ops):
        for name in [n for o, n in applicable if o == op] if checks is None else checks:
            try:
                counts: dict[str, int] = {}
                count = run_check(name, plugin, op, max_examples, shrink, counts)
                per_n = ", ".join(f"{n} {counts[n]}" for n in sorted(counts))
                report[f"{name} {op}"] = f"ok ({count} examples: {per_n})"
            except Exception as exc:  # report every failing property, not only the first
                report[f"{name} {op}"] = f"FAIL: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    failed = {k: v for k, v in report.items() if not v.startswith("ok")}
    if failed:
        raise AssertionError(f"plugin {plugin.name} failed {len(failed)} checks: {failed}")
    return report
