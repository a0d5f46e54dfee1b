"""The depthwise forward fused with an epilogue (its row store swapped for convlab.kernels.epilogue.
fused_store): 1D-3D, float32 / float64 / float16 / bfloat16, plane and plain tiles, scale, shift, the
residual before and after the activation, against the float64 reference within the epilogue check's
bound (convlab.testing.checks.epilogue_allowed) and, in float32 and float64, bit for bit against the
same kernel unfused followed by the epilogue pass; dgrad and wgrad take the pass."""
from __future__ import annotations

import numpy as np
import pytest

import convlab
from convlab import reference
from convlab.dtypes import np_dtype
from convlab.epilogue import Epilogue
from convlab.ops.arguments import forward_problem
from convlab.ops.epilogue import DeviceEpilogue
from convlab.plugin import registry
from convlab.problem import make_problem_nd
from convlab.testing.checks import epilogue_allowed

PLUGIN = registry.get("depthwise")
OPS = {3: convlab.conv1d, 4: convlab.conv2d, 5: convlab.conv3d}

#: name: (x shape, w shape, op keywords, dtype, epilogue); MobileNetV2's BatchNorm + ReLU6 first
CASES = {
    "bn_relu6": ((2, 3, 7, 6), (6, 1, 3, 3), dict(stride=2, padding=1, groups=3), "float32",
                 Epilogue("relu6", scale=True, shift=True)),  # M = 2, stride 2
    "gelu_after": ((1, 2, 6, 6), (2, 1, 3, 3), dict(padding=1, groups=2), "float32",
                   Epilogue("gelu", scale=True, residual="after")),
    "float64": ((1, 2, 5, 6), (2, 1, 3, 3), dict(padding=1, dilation=2, groups=2), "float64",
                Epilogue("leaky_relu", 0.2, shift=True, residual="before")),
    "float16": ((1, 2, 7, 6), (4, 1, 3, 3), dict(stride=2, padding=1, groups=2), "float16",
                Epilogue("relu6", scale=True, shift=True, residual="before")),
    "bfloat16": ((2, 2, 6, 5), (2, 1, 3, 3), dict(padding=1, groups=2), "bfloat16",
                 Epilogue("hardswish", shift=True, residual="after")),
    "1d": ((2, 2, 13), (4, 1, 3), dict(stride=2, padding=1, groups=2), "float32",
           Epilogue("silu", scale=True, residual="after")),
    "3d": ((1, 2, 4, 5, 6), (2, 1, 3, 2, 3), dict(stride=(2, 1, 2), padding=(1, 0, 1), groups=2), "float32",
           Epilogue("relu6", scale=True, shift=True, residual="before")),
}


def _spy(monkeypatch, fuses: bool = True) -> tuple[list, list]:
    """(the (problem, config) of each Depthwise.run_fused call, DeviceEpilogue.run_fused's answers);
    with ``fuses`` False the plugin declines to fuse."""
    calls, answers = [], []
    plugin_run_fused, device_run_fused = type(PLUGIN).run_fused, DeviceEpilogue.run_fused

    def run_fused(self, *args, **kwargs):
        calls.append(args[:2])
        return plugin_run_fused(self, *args, **kwargs)

    def device(self, *args):
        answers.append(device_run_fused(self, *args))
        return answers[-1]
    monkeypatch.setattr(type(PLUGIN), "run_fused", run_fused)
    monkeypatch.setattr(DeviceEpilogue, "run_fused", device)
    if not fuses:
        monkeypatch.setattr(type(PLUGIN), "fuses", lambda self, problem, epilogue: "declined in this test")
    return calls, answers


def _operands(xs, ws, kw, dtype, epi: Epilogue, seed: int):
    """Host x, w, bias of ``dtype``, the problem, and the epilogue's host operands (scale, shift float64)."""
    rng = np.random.default_rng(seed)
    dt = np_dtype(dtype)
    x, w, b = (rng.standard_normal(s).astype(dt) for s in (xs, ws, (ws[0],)))
    nd = len(xs) - 2
    stride, padding, dilation = (kw.get(k, d) for k, d in (("stride", 1), ("padding", 0), ("dilation", 1)))
    prob = forward_problem(x, w, b, stride, padding, dilation, kw["groups"], nd=nd)
    operands = {"scale": rng.uniform(-2, 2, ws[0]) if epi.scale else None,
                "shift": rng.standard_normal(ws[0]) if epi.shift else None,
                "residual": rng.standard_normal(prob.y_shape).astype(dt) if epi.residual else None}
    return x, w, b, prob, operands


def _call(x, w, b, kw, epi: Epilogue, operands: dict, algorithm="depthwise") -> np.ndarray:
    act = (epi.activation, epi.negative_slope) if epi.activation == "leaky_relu" else epi.activation
    return OPS[x.ndim](x, w, b, **kw, algorithm=algorithm, activation=act, residual=operands["residual"],
                       residual_at=epi.residual or "before", scale=operands["scale"], shift=operands["shift"])


@pytest.mark.parametrize("case", list(CASES))
def test_fused_forward_matches_the_reference_and_the_pass(monkeypatch, case):
    xs, ws, kw, dtype, epi = CASES[case]
    x, w, b, prob, operands = _operands(xs, ws, kw, dtype, epi, seed=len(case))
    with monkeypatch.context() as m:
        calls, answers = _spy(m)
        fused = _call(x, w, b, kw, epi, operands)
        assert answers == [True] and len(calls) == 1  # the call fused: one launch, no pass
    conv = reference.forward(prob, x, w, b)
    want = reference.epilogue(conv, epi, operands["scale"], operands["shift"], operands["residual"])
    got = np.asarray(fused, np.float64)
    problem, config = calls[0]
    allowed = epilogue_allowed(PLUGIN, problem, config, conv, want, epi, operands)
    assert np.all(np.isfinite(got)) and np.linalg.norm(got - want) <= allowed
    if dtype in ("float32", "float64"):  # the same float values through the same device function
        with monkeypatch.context() as m:
            calls, answers = _spy(m, fuses=False)
            separate = _call(x, w, b, kw, epi, operands)
            assert answers == [False] and not calls
        np.testing.assert_array_equal(fused, separate)


def test_every_config_fuses():
    """Plane tiles (PL > 1) and plain tiles, no bias (the kernel without it), each correct fused."""
    xs, ws, kw, dtype, epi = (1, 2, 7, 6), (4, 1, 3, 3), dict(padding=1, groups=2), "float32", \
        Epilogue("relu6", scale=True, shift=True, residual="after")
    x, w, _, prob, operands = _operands(xs, ws, kw, dtype, epi, seed=3)
    configs = PLUGIN.configs(prob)
    assert {c["PL"] > 1 for c in configs} == {True, False}
    want = reference.epilogue(reference.forward(prob, x, w), epi, operands["scale"], operands["shift"],
                              operands["residual"])
    for config in configs:
        got = _call(x, w, None, kw, epi, operands, algorithm=("depthwise", config.name))
        assert np.abs(got - want).max() <= 1e-5, config


def test_fuses_the_forward_only():
    for spatial, kernel in (((9,), (3,)), ((5, 5), (3, 3)), ((3, 4, 4), (2, 2, 2))):
        for dtype in sorted(PLUGIN.dtypes):
            forward = make_problem_nd("forward", 1, 2, spatial, 2, kernel, groups=2, dtype=dtype)
            assert PLUGIN.fuses(forward, Epilogue("relu6", scale=True, residual="after")) == ""
    for op in ("dgrad", "wgrad"):
        problem = make_problem_nd(op, 1, 2, (5, 5), 2, (3, 3), groups=2)
        assert "forward kernels only" in PLUGIN.fuses(problem, Epilogue("relu"))


def test_transpose_takes_the_pass(monkeypatch):
    """conv_transpose2d runs depthwise's dgrad: the epilogue in a separate pass, still correct."""
    rng = np.random.default_rng(9)
    x, w = rng.standard_normal((1, 2, 4, 4)).astype(np.float32), rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
    scale = rng.uniform(0.5, 2, 2)
    calls, answers = _spy(monkeypatch)
    got = convlab.conv_transpose2d(x, w, stride=2, padding=1, groups=2, algorithm="depthwise",
                                   activation="relu6", scale=scale)
    assert answers == [False] and not calls
    plain = convlab.conv_transpose2d(x, w, stride=2, padding=1, groups=2, algorithm="depthwise")
    want = reference.epilogue(plain.astype(np.float64), Epilogue("relu6", scale=True), scale)
    assert np.abs(got - want).max() <= 1e-5


def test_device_calls_replay_the_fused_plan_with_each_calls_operands(monkeypatch):
    """A repeated device call replays its launch plan (the fused launch), reading that call's residual,
    scale and shift."""
    from convlab import runtime
    from convlab.call import plan

    xs, ws, kw, dtype, epi = CASES["bn_relu6"]
    epi = Epilogue("relu6", scale=True, shift=True, residual="after")
    x, w, b, prob, _ = _operands(xs, ws, kw, dtype, epi, seed=4)
    dx, dw, db = (runtime.to_device(v) for v in (x, w, b))
    calls, answers = _spy(monkeypatch)
    plan.clear()
    replayed = plan.stats()["replayed"]
    for seed in range(3):
        *_, operands = _operands(xs, ws, kw, dtype, epi, seed=10 + seed)
        y = convlab.conv2d(dx, dw, db, **kw, activation="relu6", residual=runtime.to_device(operands["residual"]),
                           residual_at="after", scale=operands["scale"], shift=runtime.to_device(operands["shift"]),
                           algorithm="depthwise")
        want = reference.epilogue(reference.forward(prob, x, w, b), epi, operands["scale"], operands["shift"],
                                  operands["residual"])
        assert np.abs(runtime.to_host(y) - want).max() <= 1e-5
    assert plan.stats()["plans"] == 1 and plan.stats()["replayed"] - replayed == 2
    assert answers == [True] and len(calls) == 1  # recorded once, fused; the replays relaunch it
