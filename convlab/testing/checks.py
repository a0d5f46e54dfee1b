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
from ..epilogue import ACTIVATIONS, Epilogue
from ..kernels.epilogue import compute_dtype
from ..ops.epilogue import DeviceEpilogue, EpilogueCall
from ..measure import output_rounding, plugin_tolerance, random_operands, rel_error, to_device
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


#: the ops whose public calls take an epilogue (conv{N}d and conv_transpose{N}d)
EPILOGUE_OPS = frozenset({"forward", "dgrad"})
#: the largest slope of any activation (hardswish's, at t = 3): how much an error before it can grow
ACTIVATION_LIPSCHITZ = 1.5
#: roundings of the epilogue's arithmetic in its compute type, in units of its unit roundoff (scale,
#: shift, residual, the activation's few operations, the residual after it)
EPILOGUE_ROUNDINGS = 8.0


def draw_epilogue(rng: np.random.Generator, channels: int, shape: tuple, dtype: Any) -> tuple[Epilogue, dict]:
    """A random epilogue (any activation; scale and shift each present 3 times in 4; no residual, or one
    before or after the activation) and its host operands: ``scale`` of mixed signs, ``shift``
    (K,) float64, ``residual`` of ``shape`` and ``dtype``."""
    activation = str(rng.choice(ACTIVATIONS))
    epi = Epilogue(activation, float(rng.uniform(0.01, 0.5)), bool(rng.random() < 0.75), bool(rng.random() < 0.75),
                   (None, "before", "after")[int(rng.integers(3))])
    return epi, {"scale": rng.uniform(-2, 2, channels) if epi.scale else None,
                 "shift": rng.standard_normal(channels) if epi.shift else None,
                 "residual": rng.standard_normal(shape).astype(dtype) if epi.residual else None}


def epilogue_allowed(plugin: Algorithm, problem: Problem, config, conv: np.ndarray, want: np.ndarray, epi: Epilogue,
                     operands: dict) -> float:
    """The norm of the error a correct run of ``epi`` after ``plugin``'s convolution may make: the
    convolution's (:func:`convlab.measure.plugin_tolerance` of ``conv``, the float64 result) times the
    largest |scale| and the activation's slope, the epilogue's roundings in its compute type
    (EPILOGUE_ROUNDINGS per element, relative to the magnitudes it adds up), doubled as the tolerance
    does for a rounded store, plus the store's rounding of ``want`` to the output dtype."""
    gain = float(np.abs(operands["scale"]).max()) if epi.scale else 1.0
    per_channel = (1, -1) + (1,) * (conv.ndim - 2)
    mag = np.abs(conv) * (np.abs(operands["scale"]).reshape(per_channel) if epi.scale else 1.0)
    if epi.shift:
        mag = mag + np.abs(operands["shift"]).reshape(per_channel)
    if epi.residual is not None:
        mag = mag + np.abs(operands["residual"].astype(np.float64))
    u = float(np.finfo(compute_dtype(problem.dtype)).eps) / 2
    conv_err = plugin_tolerance(plugin, problem, config, conv) * float(np.linalg.norm(conv))
    inner = ACTIVATION_LIPSCHITZ * (gain * conv_err + EPILOGUE_ROUNDINGS * u * float(np.linalg.norm(mag)))
    return output_rounding(problem, want) * float(np.linalg.norm(want)) + 2 * inner


def check_epilogue_matches_reference(plugin: Algorithm, problem: Problem, rng: np.random.Generator) -> None:
    """The first accepted config with a drawn epilogue (:func:`draw_epilogue`), fused into the plugin's
    store where it fuses it, else the separate pass (run_candidate's ``epilogue=``), agrees with the
    float64 reference's epilogue of the convolution within :func:`epilogue_allowed`. The output is
    NaN-poisoned; a 4-D output and residual are each channels-last one time in 4 (fused where the plugin
    fuses into that output layout and the residual has it: ``fused_layouts``, else the pass)."""
    from ..kernels.data.layouts import channels_last_copy

    config = _accepted(plugin, problem)
    if config is None or problem.op not in EPILOGUE_OPS:
        return
    host = random_operands(problem, rng)
    shape, dtype = problem.operand_shapes[2], np_dtype(problem.dtype)
    epi, operands = draw_epilogue(rng, shape[1], shape, dtype)
    last = [len(shape) == 4 and rng.random() < 0.25 for _ in range(2)]
    on_device = [channels_last_copy(h) if cl else runtime.to_device(h)
                 for h, cl in ((np.full(shape, np.nan, dtype), last[0]), (operands["residual"], last[1]))
                 if h is not None]
    residual = on_device[1] if epi.residual is not None else None
    cast = compute_dtype(problem.dtype)
    scale, shift = (None if v is None else v.astype(cast) for v in (operands["scale"], operands["shift"]))
    epilogue = DeviceEpilogue(EpilogueCall(epi, problem.dtype, residual, scale, shift))
    run_candidate(Candidate(plugin, config), problem, *to_device(*host), on_device[0], get_workspace_limit(),
                  epilogue=epilogue)
    got = np.asarray(runtime.to_host(on_device[0]), np.float64)
    conv = reference.solve(problem, *host)
    want = reference.epilogue(conv, epi, operands["scale"], operands["shift"], operands["residual"])
    err, allowed = float(np.linalg.norm(got - want)), epilogue_allowed(plugin, problem, config, conv, want, epi,
                                                                       operands)
    assert np.all(np.isfinite(got)) and err <= allowed, (
        f"{plugin.name}[{config.name}] on {problem.describe()} with {epi} ({'fused' if epilogue.fused else 'pass'}"
        f"; out, residual channels-last: {last}): error norm {err:.3g} > allowed {allowed:.3g}")


def call_op(problem: Problem, a: Any, b: Any, bias: Any = None, **kw: Any) -> Any:
    """Run ``problem`` through the public op that builds it (convlab.ops.call_problem)."""
    return ops.call_problem(problem, a, b, bias, **kw)


Check = Callable[[Algorithm, Problem, np.random.Generator], None]
CHECKS: dict[str, Check] = {f.__name__: f for f in (
    check_matches_reference, check_output_fully_written, check_inputs_unmodified, check_deterministic,
    check_channels_last_operands, check_declines_with_reason, check_declined_never_launched,
    check_epilogue_matches_reference)}
#: checks that only make sense on problems the plugin accepts (the others take any problem)
NEEDS_ACCEPTED = {"check_matches_reference", "check_output_fully_written", "check_inputs_unmodified",
                  "check_deterministic", "check_channels_last_operands", "check_epilogue_matches_reference"}
