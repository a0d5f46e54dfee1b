"""The conformance checks: one ``check_*`` function per property a plugin must have.

Each check takes ``(plugin, problem, rng)`` and raises AssertionError when the property fails; checks
that need an accepted problem skip (return) when the plugin declines it. The reference check runs every
config the plugin accepts (into a NaN-poisoned output); the checks of coverage and layout every accepted
config of a problem of at most :data:`ALL_CONFIGS_FLOPS` (the first otherwise); the others the first. ``CHECKS`` lists them all;
:func:`convlab.testing.check_plugin` runs every check on hypothesis-drawn problems.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .. import ops, reference, runtime
from ..call.candidate import run_candidate
from ..plugin import registry
from ..plugin.registry import Candidate
from ..measure import plugin_tolerance, random_operands, rel_error, to_device
from ..plugin.contract import Algorithm
from ..problem import Problem, np_dtype
from convlab.runtime.settings import get_workspace_limit


#: problems up to this many flops run the checks of coverage and layout on every accepted config (the
#: class examples, 3.5e3 flops, and most random draws); larger ones on the first
ALL_CONFIGS_FLOPS = 2**15


def _accepted_configs(plugin: Algorithm, problem: Problem) -> list:
    return [c for c in registry.safe_configs(plugin, problem) if registry.verdict(plugin, problem, c)]


def _accepted(plugin: Algorithm, problem: Problem):
    configs = _accepted_configs(plugin, problem)
    return configs[0] if configs else None


def _cheap_configs(plugin: Algorithm, problem: Problem) -> list:
    """Every accepted config of a problem of at most ALL_CONFIGS_FLOPS flops, else the first."""
    configs = _accepted_configs(plugin, problem)
    return configs if problem.flops <= ALL_CONFIGS_FLOPS else configs[:1]


def _run(plugin: Algorithm, problem: Problem, config, host_ops, poison: float = np.nan) -> np.ndarray:
    a, b, bias = to_device(*host_ops)
    out = runtime.full(problem.operand_shapes[2], poison, problem.dtype)
    run_candidate(Candidate(plugin, config), problem, a, b, bias, out, get_workspace_limit())
    return runtime.to_host(out)


def check_matches_reference(plugin: Algorithm, problem: Problem, rng: np.random.Generator) -> None:
    """Every config the plugin accepts agrees with the float64 reference within the tolerance of its
    arithmetic for that config.

    The tolerance is :func:`convlab.measure.plugin_tolerance`."""
    for config in _accepted_configs(plugin, problem):
        host = random_operands(problem, rng)
        got = _run(plugin, problem, config, host)
        want = reference.solve(problem, *host)
        err = rel_error(got, want)
        tol = plugin_tolerance(plugin, problem, config, want)
        assert err <= tol, (f"{plugin.name}[{config.name}] on {problem.describe()}: relative error "
                            f"{err:.3g} > tolerance {tol:.3g}")


def check_output_fully_written(plugin: Algorithm, problem: Problem, rng: np.random.Generator) -> None:
    """No output element keeps the NaN poison the output was filled with (every accepted config of a
    small problem)."""
    host = random_operands(problem, rng)
    for config in _cheap_configs(plugin, problem):
        got = _run(plugin, problem, config, host)
        unwritten = np.argwhere(np.isnan(got))
        assert unwritten.size == 0, (f"{plugin.name}[{config.name}] left {len(unwritten)} output elements "
                                     f"unwritten on {problem.describe()}, first at {tuple(unwritten[0])}")


def check_inputs_unmodified(plugin: Algorithm, problem: Problem, rng: np.random.Generator) -> None:
    """The device operands hold the same bits after the run."""
    config = _accepted(plugin, problem)
    if config is None:
        return
    host = random_operands(problem, rng)
    dev = to_device(*host)
    out = runtime.empty(problem.operand_shapes[2], problem.dtype)
    run_candidate(Candidate(plugin, config), problem, *dev, out, get_workspace_limit())
    for name, before, after in zip(("a", "b", "bias"), host, dev):
        if before is not None:
            assert np.array_equal(before, runtime.to_host(after)), f"{plugin.name} modified input {name}"


def check_deterministic(plugin: Algorithm, problem: Problem, rng: np.random.Generator) -> None:
    """A plugin declaring ``deterministic = True`` gives identical bits on two runs."""
    config = _accepted(plugin, problem)
    if config is None or not plugin.deterministic:
        return
    host = random_operands(problem, rng)
    first, second = _run(plugin, problem, config, host), _run(plugin, problem, config, host)
    assert np.array_equal(first, second), f"{plugin.name} gave different bits on two identical runs"


def check_channels_last_operands(plugin: Algorithm, problem: Problem, rng: np.random.Generator) -> None:
    """A plugin declaring ``"nhwc"`` in ``layouts`` gets 4-D operands with channels-last strides as they
    are (NHWC memory viewed as NCHW): the output NaN-poisoned, each run agrees with the float64 reference
    (read back in NCHW order). The first accepted config runs with a, b and out all channels-last; the
    others of a small problem (ALL_CONFIGS_FLOPS) each with a random mix (at least one channels-last)."""
    if "nhwc" not in plugin.layouts:
        return
    host = random_operands(problem, rng)
    want = reference.solve(problem, *host)
    for i, config in enumerate(_cheap_configs(plugin, problem)):
        lasts = (True, True, True) if i == 0 else _mix(rng)
        got = _run_channels_last(plugin, problem, config, host, lasts)
        err = rel_error(got, want)
        tol = plugin_tolerance(plugin, problem, config, want)
        layout = ", ".join(f"{n} {'channels-last' if last else 'NCHW'}" for n, last in zip("abo", lasts))
        assert err <= tol, (f"{plugin.name}[{config.name}] on {problem.describe()} with {layout}: "
                            f"relative error {err:.3g} > tolerance {tol:.3g}")


def _mix(rng: np.random.Generator) -> tuple[bool, bool, bool]:
    """Which of a, b and out are channels-last: random, at least one."""
    lasts = [bool(rng.integers(2)) for _ in range(3)]
    if not any(lasts):
        lasts[int(rng.integers(3))] = True
    return tuple(lasts)  # type: ignore[return-value]


def _run_channels_last(plugin: Algorithm, problem: Problem, config, host, lasts) -> np.ndarray:
    """``plugin.run`` with each of a, b and out channels-last where ``lasts`` says; out read back NCHW."""
    from convlab.kernels.data.layouts import channels_last_copy

    a, b = (channels_last_copy(h) if last else to_device(h)[0] for h, last in zip(host[:2], lasts))
    bias = None if host[2] is None else to_device(host[2])[0]
    poison = np.full(problem.operand_shapes[2], np.nan, np_dtype(problem.dtype))
    out = channels_last_copy(poison) if lasts[2] else runtime.to_device(poison)
    run_candidate(Candidate(plugin, config), problem, a, b, bias, out, get_workspace_limit())
    return runtime.to_host(out)  # in NCHW index order whatever the memory layout


def check_declines_with_reason(plugin: Algorithm, problem: Problem, rng: np.random.Generator) -> None:
    """A declining verdict carries a non-empty one-line reason; an accepting one fits the workspace."""
    verdict = registry.verdict(plugin, problem)
    if verdict:
        configs = registry.safe_configs(plugin, problem)
        assert configs, f"{plugin.name} accepts {problem.describe()} but offers no config"
        ws = plugin.workspace_bytes(problem, configs[0], get_workspace_limit())
        assert 0 <= ws <= get_workspace_limit(), f"{plugin.name} workspace {ws} outside the limit"
        return
    assert isinstance(verdict.reason, str) and verdict.reason.strip(), "declined without a reason"
    assert "\n" not in verdict.reason.strip(), f"reason should be one line: {verdict.reason!r}"
    assert "raised" not in verdict.reason, f"{plugin.name}'s predicate raised: {verdict.reason}"


def check_declined_never_launched(plugin: Algorithm, problem: Problem,
                                  rng: np.random.Generator) -> None:
    """Forcing a plugin on a problem it declines raises ValueError quoting the reason, with no launch."""
    verdict = registry.verdict(plugin, problem)
    if verdict:
        return
    launched = []
    original = plugin.run
    plugin.run = lambda *args, **kw: launched.append(args)  # type: ignore[method-assign]
    try:
        call_op(problem, *random_operands(problem, rng), algorithm=plugin.name)
    except ValueError as exc:
        assert verdict.reason in str(exc), f"error {exc} does not quote the reason {verdict.reason!r}"
    else:
        raise AssertionError(f"forcing {plugin.name} on a declined problem did not raise")
    finally:
        del plugin.run
        assert plugin.run == original
    assert not launched, f"{plugin.name} was launched on a problem it declines"


def call_op(problem: Problem, a: Any, b: Any, bias: Any = None, **kw: Any) -> Any:
    """Run ``problem`` through the public op that builds it (convlab.ops.call_problem)."""
    return ops.call_problem(problem, a, b, bias, **kw)


Check = Callable[[Algorithm, Problem, np.random.Generator], None]
CHECKS: dict[str, Check] = {f.__name__: f for f in (
    check_matches_reference, check_output_fully_written, check_inputs_unmodified, check_deterministic,
    check_channels_last_operands, check_declines_with_reason, check_declined_never_launched)}
#: checks that only make sense on problems the plugin accepts (the others take any problem)
NEEDS_ACCEPTED = {"check_matches_reference", "check_output_fully_written", "check_inputs_unmodified",
                  "check_deterministic", "check_channels_last_operands"}
