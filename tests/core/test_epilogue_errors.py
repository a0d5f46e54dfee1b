"""Bad epilogue arguments on the transposes and on device operands: a ValueError or TypeError naming the
argument, raised before any plugin runs or any epilogue pass launches (test_epilogue.py holds conv2d's
host-operand cases)."""
from __future__ import annotations

import numpy as np
import pytest

import convlab
from convlab import runtime
from convlab.plugin import registry


@pytest.fixture
def launches(monkeypatch):
    """The plugin runs (direct's run and run_fused) and epilogue passes a call makes."""
    seen: list = []
    direct = type(registry.get("direct"))
    for name in ("run", "run_fused"):
        monkeypatch.setattr(direct, name, lambda *args, _n=name, **kw: seen.append(_n))
    monkeypatch.setattr("convlab.kernels.epilogue.run_pass", lambda *args, **kw: seen.append("pass"))
    return seen


def _transpose_operands():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 3, 3, 3)).astype(np.float32)  # conv_transpose2d: w (C_in, C_out, R, S)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    return x, w, (1, 2, 5, 5)


TRANSPOSE_BAD = [
    (dict(activation="mish"), ValueError, "activation"),
    (dict(activation=("leaky_relu", float("inf"))), TypeError, "slope"),
    (dict(residual=np.zeros((1, 3, 5, 5), np.float32)), ValueError, "residual"),  # the input's channels
    (dict(residual=np.zeros((1, 2, 5, 5), np.float16)), ValueError, "residual"),
    (dict(scale=np.ones(3)), ValueError, "scale"),  # C_in, not the output's C_out = 2
    (dict(shift=np.ones(2, np.complex64)), TypeError, "shift"),
]


@pytest.mark.parametrize("kwargs, error, name", TRANSPOSE_BAD, ids=[f"{b[2]}-{i}" for i, b in enumerate(TRANSPOSE_BAD)])
def test_conv_transpose2d_rejects_bad_epilogue_arguments_before_any_launch(launches, kwargs, error, name):
    x, w, y_shape = _transpose_operands()
    with pytest.raises(error, match=name):
        convlab.conv_transpose2d(x, w, algorithm="direct", **kwargs)
    assert not launches


def _device_operands():
    rng = np.random.default_rng(5)
    x = runtime.to_device(rng.standard_normal((1, 2, 4, 4)).astype(np.float32))
    w = runtime.to_device(rng.standard_normal((3, 2, 3, 3)).astype(np.float32))
    return x, w, (1, 3, 2, 2)


def test_device_residual_of_the_wrong_dtype_shape_or_strides(launches):
    x, w, y_shape = _device_operands()
    wrong = {"dtype": runtime.to_device(np.zeros(y_shape, np.float64)),
             "shape": runtime.to_device(np.zeros((1, 3, 2, 3), np.float32)),
             # a view with H and W swapped: neither C-contiguous nor channels-last
             "strides": runtime.to_device(np.zeros((1, 2, 2, 3), np.float32)).transpose((0, 3, 2, 1))}
    said = {"dtype": "dtype float32", "shape": r"shape \(1, 3, 2, 2\)", "strides": "C-contiguous or channels-last"}
    for what, residual in wrong.items():
        with pytest.raises(ValueError, match=f"residual must .*{said[what]}"):
            convlab.conv2d(x, w, algorithm="direct", residual=residual)
    assert not launches


def test_device_scale_and_shift_of_the_wrong_length(launches):
    x, w, _ = _device_operands()
    with pytest.raises(ValueError, match=r"scale must have shape \(3,\)"):
        convlab.conv2d(x, w, algorithm="direct", scale=runtime.to_device(np.ones(4, np.float32)))
    with pytest.raises(ValueError, match=r"shift must have shape \(3,\)"):
        convlab.conv2d(x, w, algorithm="direct", shift=runtime.to_device(np.ones((1, 3), np.float32)))
    assert not launches


def test_cpu_tensor_residual_of_the_wrong_dtype(launches):
    torch = pytest.importorskip("torch")
    x, w = torch.randn(1, 2, 4, 4), torch.randn(3, 2, 3, 3)
    with pytest.raises(ValueError, match="residual"):
        convlab.conv2d(x, w, algorithm="direct", residual=torch.zeros(1, 3, 2, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="scale"):
        convlab.conv2d(x, w, algorithm="direct", scale=torch.ones(2))
    assert not launches
