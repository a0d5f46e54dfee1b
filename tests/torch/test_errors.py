"""Bad arguments to convlab.torch give PyTorch-style errors naming the argument, before any launch;
autocast runs the convolution in the autocast dtype."""
import pytest

torch = pytest.importorskip("torch")
import numpy as np  # noqa: E402

import convlab  # noqa: E402
import convlab.torch as ct  # noqa: E402


@pytest.fixture
def no_launch(monkeypatch):
    """Any convlab kernel launch fails the test."""
    from convlab.ops import strategy

    monkeypatch.setattr(strategy, "resolve", lambda *a, **k: pytest.fail("launched"))


@pytest.mark.parametrize("call, error, match", [
    (lambda x, w: ct.conv2d(np.zeros((1, 2, 4, 4)), w), TypeError, "argument 'input' must be Tensor"),
    (lambda x, w: ct.conv2d(x, w, bias=[0.0, 0.0]), TypeError, "argument 'bias' must be Tensor"),
    (lambda x, w: ct.conv2d(x[0, 0], w), RuntimeError, "expected 3D .*input"),
    (lambda x, w: ct.conv2d(x, w[0]), RuntimeError, "4D weight"),
    (lambda x, w: ct.conv2d(x, w, stride=0), ValueError, "stride"),
    (lambda x, w: ct.conv2d(x, w, padding=-1), ValueError, "padding"),
    (lambda x, w: ct.conv2d(x, w, padding="full"), ValueError, "padding"),
    (lambda x, w: ct.conv2d(x, w, padding="same", stride=2), ValueError, "same"),
    (lambda x, w: ct.conv2d(x, w, dilation=(1, 2, 3)), (TypeError, ValueError), "dilation"),
    (lambda x, w: ct.conv2d(x, w, groups=3), ValueError, "groups"),
    (lambda x, w: ct.conv2d(x, w.float()), TypeError, "dtype"),
    (lambda x, w: ct.conv2d(x[:, :1], w), ValueError, "channel"),
    (lambda x, w: ct.conv2d(x, w, algorithm="nope"), ValueError, "unknown algorithm"),
    (lambda x, w: ct.conv_transpose2d(x, w, padding="same"), ValueError, "padding"),
    (lambda x, w: ct.conv_transpose2d(x, w, stride=2, output_padding=2), ValueError, "output_padding"),
    (lambda x, w: ct.conv2d(x, w, algorithm=("direct", None)), TypeError, "algorithm must be 'auto' or"),
    (lambda x, w: ct.Conv2d(2, 2, 3, algorithm=3), TypeError, "algorithm"),
])
def test_bad_arguments(no_launch, call, error, match):
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64)
    w = torch.randn(2, 2, 3, 3, dtype=torch.float64)
    with pytest.raises(error, match=match):
        call(x, w)


def test_meta_device_tensor_refused():
    x = torch.randn(1, 2, 4, 4)
    with pytest.raises(RuntimeError, match="same device"):
        ct.conv2d(x, torch.empty(2, 2, 3, 3, device="meta"))


def test_autocast_runs_in_the_autocast_dtype():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 4, 4, generator=g)
    layer = ct.Conv2d(2, 2, 3, padding=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = layer(x)
        assert y.dtype == torch.bfloat16
        want = torch.nn.functional.conv2d(x, layer.weight, layer.bias, padding=1)
    y.float().sum().backward()  # dgrad and wgrad in bfloat16 (fp32 accumulation)
    assert layer.weight.grad.dtype == torch.float32
    torch.testing.assert_close(y.float(), want.float(), atol=5e-2, rtol=5e-2)
    ref = torch.nn.grad.conv2d_weight(x.bfloat16().double(), layer.weight.shape,
                                      torch.ones_like(want, dtype=torch.float64), padding=1)
    torch.testing.assert_close(layer.weight.grad.double(), ref, atol=5e-2, rtol=5e-2)
    assert convlab.conv2d  # the base op stays untouched by autocast (no torch ops inside)
