"""Running the conformance checks: :func:`run_check` (one check, one op: the plugin's class examples,
then hypothesis-drawn problems), :func:`check_plugin` (every check on every op, a summary),
:func:`parametrize_with_checks` (one pytest case each) and how many examples a plugin draws. The
hypothesis profile they run under is :mod:`convlab.testing.profiles`' (applied here, wherever they are
called from)."""
from __future__ import annotations

from typing import Iterable

import numpy as np
from hypothesis import Phase, assume, example, given, settings
from hypothesis import seed as fixed_seed
from hypothesis.errors import Unsatisfiable
from hypothesis import strategies as st

from convlab import runtime
from convlab.plugin import registry
from convlab.plugin.contract import Algorithm
from convlab.testing import profiles
from convlab.testing.checks import CHECKS, EPILOGUE_OPS, NEEDS_ACCEPTED
from convlab.runtime.settings import float32_precision
from convlab.testing.classes import CLASSES, NUMERIC, class_examples, epilogue_example, float32_precision_for
from convlab.testing.strategies import any_problems

#: the classes (convlab.testing.classes) whose examples each check runs every time: every class for the
#: reference check (which also NaN-poisons the output of every accepted config: an unwritten element
#: fails it), the geometric ones for the layout check; the other checks (their properties do not
#: depend on the class) run on the random draws only
CHECK_CLASSES = {"check_matches_reference": frozenset(CLASSES),
                 "check_channels_last_operands": frozenset(CLASSES) - NUMERIC}
#: checks run on fixed problems instead of the classes and draws (a function of (plugin, op)), with one
#: draw of the check's own randomness: the epilogue check (a drawn epilogue on one tiny problem per op)
ONE_PROBLEM = {"check_epilogue_matches_reference": epilogue_example}


def spatial_label(problem) -> str:
    """"1D", "2D" or "3D": a 2D problem of unit height, kernel and output height is a 1D one's
    embedding (what the ops hand a plugin for a conv1d)."""
    if problem.ndim == 2 and (problem.h, problem.r, problem.p) == (1, 1, 1):
        return "1D"
    return f"{problem.ndim}D"


def run_check(check_name: str, plugin: Algorithm | str, op: str,
              max_examples: int | None = None, shrink: bool = True, counts: dict | None = None) -> int:
    """Run one check on one op of a plugin: first its class examples (:data:`CHECK_CLASSES`, chosen by
    :func:`convlab.testing.classes.class_examples`: every class the plugin accepts, in every run), then
    hypothesis-drawn problems (``max_examples``, default :func:`examples_for`) under the active convlab
    profile (:mod:`convlab.testing.profiles`: deadline off, derandomized in CI). ``shrink=False``
    reports the first failing problem instead of searching for a minimal one (faster on the
    simulator). Problems are drawn at every N the plugin claims (``plugin.ndims``; 1D as 2D embeddings
    for a 2D plugin). Returns how many problems the check ran on; ``counts`` (a dict), when given, is
    filled with how many of them had each N (:func:`spatial_label`)."""
    plugin = registry.get(plugin) if isinstance(plugin, str) else plugin
    check = CHECKS[check_name]
    samples = [p for p in _samples(plugin, op)]
    dtypes = tuple(sorted(plugin.dtypes))
    fixed_problems = ONE_PROBLEM[check_name](plugin, op) if check_name in ONE_PROBLEM else None
    if fixed_problems is not None:  # its one problem, one draw of the check's own randomness
        if not fixed_problems:
            raise AssertionError(f"{check_name} {op}: plugin {plugin.name!r} accepts none of the fixed "
                                 f"problems and sample problems; declare problems it accepts with its "
                                 f"sample_problems(op) method (see docs/ADDING_A_PLUGIN.md)")
        max_examples = 1

    if max_examples is None:
        max_examples = examples_for(plugin)
    extra = {} if max_examples is None else {"max_examples": max_examples}
    if not shrink:  # the first failure, as it comes
        extra.update(phases=[Phase.explicit, Phase.reuse, Phase.generate], report_multiple_bugs=False)

    ran = []

    ndims = tuple(getattr(plugin, "ndims", (2,)))

    drawn = any_problems(op, dtypes, samples, ndims) if fixed_problems is None else st.sampled_from(fixed_problems)

    @settings(profiles.active(), **extra)
    @given(problem=drawn, seed=st.integers(0, 2**32 - 1))
    def run(problem, seed):
        if check_name in NEEDS_ACCEPTED:
            assume(registry.verdict(plugin, problem))
        check(plugin, problem, np.random.default_rng(seed))
        ran.append(problem)

    for i, problem in enumerate(reversed(class_examples(plugin, op, CHECK_CLASSES.get(check_name, ())))):
        run = example(problem=problem, seed=i)(run)  # hypothesis runs the last decorator's first
    fixed = profiles.case_seed(plugin.name, op, check_name)
    if fixed is not None:
        run = fixed_seed(fixed)(run)
    try:
        with float32_precision(float32_precision_for(plugin, op)):  # TF32-only plugins: their float32 too
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
        return min(int(plugin.simulator_examples), profiles.active().max_examples)
    if simulator or not getattr(plugin, "compiles_per_shape", False):
        return None
    return max(5, profiles.active().max_examples // 4)


def applicable_checks(plugin: Algorithm | str) -> list[tuple[str, str]]:
    """The (op, check name) pairs that apply to ``plugin``, from what it declares: every op in
    ``plugin.ops`` x every check, less ``check_deterministic`` for a plugin declaring
    ``deterministic = False``, ``check_channels_last_operands`` for one whose ``layouts`` lack
    ``"nhwc"`` and ``check_epilogue_matches_reference`` for wgrad (no op takes an epilogue there)."""
    plugin = registry.get(plugin) if isinstance(plugin, str) else plugin
    return [(op, name) for op in sorted(plugin.ops) for name in CHECKS
            if (plugin.deterministic or name != "check_deterministic")
            and ("nhwc" in plugin.layouts or name != "check_channels_last_operands")
            and (op in EPILOGUE_OPS or name != "check_epilogue_matches_reference")]


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
