"""Every registered plugin's forward (conv{N}d) and dgrad (conv_transpose{N}d) output with a drawn
epilogue, against the float64 reference: the epilogue pass runs after whichever plugin computed the
output, so every epilogue works with every plugin. One tiny problem per plugin and op (the smallest of
its sample problems that it accepts)."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from convlab import reference
from convlab.dtypes import unit_roundoff
from convlab.epilogue import ACTIVATIONS, Epilogue
from convlab.measure import random_operands, rel_error, tolerance
from convlab.ops import call_problem
from convlab.plugin import registry

#: the largest slope of any activation (hardswish's, at t = 3): how far an output error can grow
LIPSCHITZ = 1.5
CASES = [(plugin.name, op) for plugin in registry.plugins() for op in ("forward", "dgrad") if op in plugin.ops]


def _as_transpose(prob) -> bool:
    """Whether a dgrad problem is a conv_transpose{N}d's: its output padding below the stride or the
    dilation on every axis."""
    extra = (size - ((o - 1) * st - 2 * pad + d * (k - 1) + 1) for size, o, st, pad, d, k in
             zip(prob.spatial_in, prob.spatial_out, prob.strides, prob.paddings, prob.dilations, prob.kernel_size))
    return all(e < st or e < d for e, st, d in zip(extra, prob.strides, prob.dilations))


def _smallest_accepted(plugin, op: str):
    accepted = [p for p in plugin.sample_problems(op)
                if p.op == op and plugin.applicable(p) and (op == "forward" or _as_transpose(p))]
    if not accepted:
        pytest.skip(f"{plugin.name} has no {op} sample problem it accepts here")
    return min(accepted, key=lambda p: int(np.prod(p.operand_shapes[2])) * int(np.prod(p.kernel_size)) * p.c)


def _draw(rng: np.random.Generator, channels: int, shape: tuple, dtype) -> tuple[Epilogue, dict]:
    """A random epilogue and its operands (scale, shift, residual each present or not)."""
    activation = str(rng.choice(ACTIVATIONS))
    epi = Epilogue(activation, float(rng.uniform(0.01, 0.5)), bool(rng.integers(2)), bool(rng.integers(2)),
                   [None, "before", "after"][int(rng.integers(3))])
    args = {"activation": (activation, epi.negative_slope) if activation == "leaky_relu" else activation,
            "scale": rng.uniform(-2, 2, channels) if epi.scale else None,
            "shift": rng.standard_normal(channels) if epi.shift else None,
            "residual": rng.standard_normal(shape).astype(dtype) if epi.residual else None,
            "residual_at": epi.residual or "before"}
    return epi, args


@pytest.mark.parametrize("name, op", CASES, ids=[f"{n}-{o}" for n, o in CASES])
def test_plugin_output_with_a_drawn_epilogue(name: str, op: str):
    plugin = registry.get(name)
    prob = _smallest_accepted(plugin, op)
    rng = np.random.default_rng(zlib.crc32(f"{name}-{op}".encode()))
    a, b, bias = random_operands(prob, rng)
    shape = prob.operand_shapes[2]
    epi, args = _draw(rng, shape[1], shape, a.dtype)
    out = np.full(shape, np.nan, a.dtype)  # poisoned: every element written by the plugin and the pass
    got = call_problem(prob, a, b, bias, transpose=op == "dgrad", algorithm=name, out=out, **args)
    assert got is out
    conv = reference.solve(prob, a, b, bias)
    want = reference.epilogue(conv, epi, args["scale"], args["shift"],
                              None if args["residual"] is None else args["residual"].astype(np.float64))
    gain = LIPSCHITZ * (float(np.abs(args["scale"]).max()) if epi.scale else 1.0)
    norm = float(np.linalg.norm(want)) or 1.0
    allowed = tolerance(prob, plugin.compute_eps(prob.dtype)) * gain * float(np.linalg.norm(conv)) / norm
    allowed += unit_roundoff(prob.dtype)  # the pass's rounding of each output to the output dtype
    assert rel_error(got, want) <= allowed, f"{name} {op} {epi}"
