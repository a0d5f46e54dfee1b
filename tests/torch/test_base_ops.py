"""The base ops (convlab.conv2d, ...) with CPU torch tensors: CPU tensors of the input dtype back,
requires_grad detached, non-contiguous inputs, out=, and mixing with device arrays refused."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import convlab  # noqa: E402

TOL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-2, torch.bfloat16: 6e-2}


def _close(got, want, dtype):
    assert isinstance(got, torch.Tensor) and got.device.type == "cpu" and got.dtype == dtype
    err = ((got.double() - want).norm() / want.norm()).item()
    assert err < TOL[dtype], err


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_conv2d_and_transpose_return_cpu_tensors(dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64, generator=g)
    w = torch.randn(2, 2, 3, 3, dtype=torch.float64, generator=g)
    b = torch.randn(2, dtype=torch.float64, generator=g)
    _close(convlab.conv2d(x.to(dtype).requires_grad_(), w.to(dtype), b.to(dtype), padding=1), F.conv2d(
        x.to(dtype).double(), w.to(dtype).double(), b.to(dtype).double(), padding=1), dtype)
    stride = 2 if dtype in (torch.float64, torch.float32) else 1  # half dgrad: stride 1 only (tensor_core)
    _close(convlab.conv_transpose2d(x.to(dtype), w.to(dtype), stride=stride),
           F.conv_transpose2d(x.to(dtype).double(), w.to(dtype).double(), stride=stride), dtype)


def test_backward_ops_noncontiguous_and_out():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 5, 4, dtype=torch.float32, generator=g).transpose(2, 3)  # (2, 3, 4, 5) strided
    w = torch.randn(2, 3, 3, 3, dtype=torch.float32, generator=g, requires_grad=True)
    gy = torch.randn(2, 2, 2, 3, dtype=torch.float32, generator=g)
    assert not x.is_contiguous()
    dx = convlab.conv2d_backward_data(gy, w, x.shape)
    dw = convlab.conv2d_backward_weight(x, gy, w.shape)
    _close(dx, torch.nn.grad.conv2d_input(x.shape, w.double(), gy.double()), torch.float32)
    _close(dw, torch.nn.grad.conv2d_weight(x.double(), w.shape, gy.double()), torch.float32)
    out = torch.full((2, 2, 2, 3), float("nan"), dtype=torch.bfloat16)
    got = convlab.conv2d(x.bfloat16(), w.bfloat16(), out=out)
    assert got is out
    _close(out, F.conv2d(x.bfloat16().double(), w.bfloat16().double()), torch.bfloat16)


def test_mixing_cpu_tensors_and_numpy_or_device_arrays():
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64)
    w = np.random.default_rng(0).standard_normal((2, 2, 3, 3))
    got = convlab.conv2d(x, w)  # numpy is a host operand too: a CPU tensor back
    _close(got, F.conv2d(x, torch.from_numpy(w)), torch.float64)
    dev = convlab.runtime.to_device(w)
    with pytest.raises(ValueError, match="x is a CPU tensor but weight is a device array"):
        convlab.conv2d(x, dev)
    with pytest.raises(TypeError, match="dtypes must match"):
        convlab.conv2d(x, torch.from_numpy(w).float())


def test_import_convlab_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, convlab; assert 'torch' not in sys.modules, 'torch imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
