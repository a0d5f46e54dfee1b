"""Fused epilogues: the contract's declaration (``fuses``), direct's forward applying the epilogue
before its store, and the op choosing the fused path where the plugin accepts it, else the pass."""
from __future__ import annotations

import numpy as np
import pytest

import convlab
from convlab import reference
from convlab.epilogue import Epilogue
from convlab.kernels.data import layouts
from convlab.measure import rel_error
from convlab.ops.arguments import forward_problem
from convlab.plugin import registry

DIRECT = registry.get("direct")


def _case(dtype=np.float32):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 4, 5, 6)).astype(dtype)
    w = rng.standard_normal((6, 2, 3, 3)).astype(dtype)  # groups=2
    b = rng.standard_normal(6).astype(dtype)
    prob = forward_problem(x, w, b, 2, 1, 1, 2)
    r = rng.standard_normal(prob.y_shape).astype(dtype)
    return prob, x, w, b, r, rng.uniform(0.5, 2, 6), rng.standard_normal(6)


def _spy(monkeypatch, fuses: bool) -> list:
    """Record the calls of direct's run_fused; with ``fuses`` False, direct declines to fuse."""
    calls: list = []
    original = type(DIRECT).run_fused

    def run_fused(self, *args, **kwargs):
        calls.append(args[0])
        return original(self, *args, **kwargs)
    monkeypatch.setattr(type(DIRECT), "run_fused", run_fused)
    if not fuses:
        monkeypatch.setattr(type(DIRECT), "fuses", lambda self, problem, epilogue: "declined in this test")
    return calls


#: the plugins that fuse an epilogue into their forward kernels (their own tests: test_epilogue_fused*,
#: tests/algorithms/test_depthwise_fused.py, tests/algorithms/test_tensor_core_epilogue.py)
FUSING = {"direct", "implicit_gemm", "depthwise", "tensor_core", "tf32x3"}


def test_default_plugins_declare_why_they_do_not_fuse():
    for plugin in registry.plugins():
        if plugin.name not in FUSING:
            assert plugin.fuses(DIRECT.sample_problems("forward")[0], Epilogue("relu")) != ""


def test_direct_fuses_its_2d_forward_only():
    assert DIRECT.fuses(_case()[0], Epilogue("relu")) == ""
    for op in ("forward", "dgrad"):  # its sample problems are 3D
        assert "2D forward" in DIRECT.fuses(DIRECT.sample_problems(op)[0], Epilogue("relu"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("activation, residual_at", [("gelu_tanh", "before"), (("leaky_relu", 0.3), "after")])
def test_fused_and_separate_pass_agree(monkeypatch, dtype, activation, residual_at):
    prob, x, w, b, r, scale, shift = _case(dtype)
    kw = dict(stride=2, padding=1, groups=2, algorithm="direct", activation=activation, residual=r,
              residual_at=residual_at, scale=scale, shift=shift)
    with monkeypatch.context() as m:
        calls = _spy(m, fuses=True)
        fused = convlab.conv2d(x, w, b, **kw)
        assert len(calls) == 1
    with monkeypatch.context() as m:
        calls = _spy(m, fuses=False)
        separate = convlab.conv2d(x, w, b, **kw)
        assert not calls
    name, slope = (activation, 0.01) if isinstance(activation, str) else activation
    epi = Epilogue(name, slope, True, True, residual_at)
    want = reference.epilogue(reference.forward(prob, x, w, b), epi, scale, shift, r)
    eps = float(np.finfo(dtype).eps)
    assert rel_error(fused, want) <= 64 * eps and rel_error(separate, want) <= 64 * eps
    assert rel_error(fused, separate) <= 8 * eps  # one device function, on the same float values


def test_channels_last_residual_takes_the_separate_pass(monkeypatch):
    prob, x, w, b, r, scale, shift = _case()
    calls = _spy(monkeypatch, fuses=True)
    from convlab import runtime

    y = convlab.conv2d(runtime.to_device(x), runtime.to_device(w), None, stride=2, padding=1, groups=2,
                       algorithm="direct", activation="relu", residual=layouts.channels_last_copy(r))
    assert not calls
    want = reference.epilogue(reference.forward(prob, x, w), Epilogue("relu", residual="before"), residual=r)
    assert rel_error(runtime.to_host(y), want) <= 1e-5
