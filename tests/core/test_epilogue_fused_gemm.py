"""implicit_gemm's forward kernel fused with an epilogue (its store_tile's element store swapped for
convlab.kernels.epilogue.fused_store): the aligned and general kernels, 2D and 3D, unsplit and split-K,
against the float64 reference and against the same kernel unfused followed by the epilogue pass."""
from __future__ import annotations

import numpy as np
import pytest

import convlab
from convlab import reference, runtime
from convlab.epilogue import Epilogue
from convlab.measure import rel_error
from convlab.plugin import registry
from convlab.problem import make_problem_nd

IG = registry.get("implicit_gemm")


def _spy(monkeypatch, fuses: bool) -> list:
    """Record implicit_gemm's run_fused calls; with ``fuses`` False it declines to fuse."""
    calls: list = []
    original = type(IG).run_fused

    def run_fused(self, *args, **kwargs):
        calls.append(args[0])
        return original(self, *args, **kwargs)
    monkeypatch.setattr(type(IG), "run_fused", run_fused)
    if not fuses:
        monkeypatch.setattr(type(IG), "fuses", lambda self, problem, epilogue: "declined in this test")
    return calls


def test_implicit_gemm_fuses_its_forward_only():
    assert IG.fuses(make_problem_nd("forward", 1, 4, (5, 5), 4, (3, 3)), Epilogue("relu")) == ""
    assert IG.fuses(make_problem_nd("forward", 1, 4, (3, 4, 4), 4, (2, 2, 2)), Epilogue("relu")) == ""
    for op in ("dgrad", "wgrad"):
        assert "forward kernel only" in IG.fuses(make_problem_nd(op, 1, 4, (5, 5), 4, (3, 3)), Epilogue("relu"))


#: (x shape, w shape, conv2d/3d keywords): the aligned kernel (groups 1, C*R*S = 16, a multiple of BK), the
#: general one (groups 2, a ragged reduction), a reduction split over blocks (C*R*S = 576 on 2 output
#: tiles) and a 3D volume
CASES = {
    "aligned": ((2, 16, 4, 4), (8, 16, 1, 1), {}),
    "general": ((1, 4, 5, 6), (6, 2, 3, 3), dict(padding=1, groups=2, stride=(2, 1))),
    "split_k": ((1, 64, 4, 4), (8, 64, 3, 3), dict(padding=1)),
    "volume": ((1, 4, 3, 4, 4), (4, 4, 2, 2, 2), dict(padding=1)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_kernel_matches_the_reference_and_the_pass(monkeypatch, case):
    xs, ws, kw = CASES[case]
    rng = np.random.default_rng(len(case))
    x, w = (rng.standard_normal(xs) / 4).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    conv = convlab.conv3d if len(xs) == 5 else convlab.conv2d
    y0 = conv(x, w, b, algorithm="implicit_gemm", **kw)
    r = rng.standard_normal(y0.shape).astype(np.float32)
    scale, shift = rng.uniform(-2, 2, ws[0]), rng.standard_normal(ws[0])
    epi = dict(activation="silu", residual=r, residual_at="before", scale=scale, shift=shift)
    with monkeypatch.context() as m:
        calls = _spy(m, fuses=True)
        fused = conv(x, w, b, algorithm="implicit_gemm", **kw, **epi)
        assert len(calls) == 1
    with monkeypatch.context() as m:
        calls = _spy(m, fuses=False)
        separate = conv(x, w, b, algorithm="implicit_gemm", **kw, **epi)
        assert not calls
    want = reference.epilogue(y0.astype(np.float64), Epilogue("silu", scale=True, shift=True, residual="before"),
                              scale, shift, r)
    assert rel_error(fused, want) <= 1e-6 and rel_error(fused, separate) <= 1e-6


def test_split_k_case_splits():
    """The split_k case reaches store_tile's ordered second pass (more than one split)."""
    from convlab.algorithms.implicit_gemm import common, plugin

    prob = make_problem_nd("forward", 1, 64, (4, 4), 8, (3, 3), padding=1)
    config = IG.configs(prob)[0]
    assert common.plan(prob, plugin.tile_of(config), convlab.get_workspace_limit(), target=runtime.target())[0] > 1


@pytest.mark.parametrize("activation", ["relu6", ("leaky_relu", 0.2), "hardswish", "gelu_tanh"])
def test_each_activation_is_its_own_kernel(activation):
    """Activations are compile-time specialisations: one kernel each, all correct."""
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((1, 4, 4, 4)).astype(np.float32), rng.standard_normal((4, 4, 1, 1)).astype(np.float32)
    got = convlab.conv2d(x, w, algorithm="implicit_gemm", activation=activation, residual_at="after")
    name, slope = (activation, 0.01) if isinstance(activation, str) else activation
    want = reference.epilogue(reference.solve(make_problem_nd("forward", 1, 4, (4, 4), 4, (1, 1)), x, w),
                              Epilogue(name, slope))
    assert rel_error(got, want) <= 1e-6
