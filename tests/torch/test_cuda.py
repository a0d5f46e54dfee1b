"""convlab.torch on CUDA tensors (a real GPU only): gradients against torch's, a side stream under
autograd, autocast float16, and torch.compile of a converted model."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import convlab.torch as ct  # noqa: E402
from convlab import runtime  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(runtime.SIMULATOR or not torch.cuda.is_available(),
                                 reason="needs a real CUDA GPU and torch with CUDA")]


def _leaves(*shapes, dtype=torch.float64):
    g = torch.Generator(device="cuda").manual_seed(0)
    return [torch.randn(s, dtype=dtype, device="cuda", generator=g).requires_grad_() for s in shapes]


@pytest.mark.parametrize("op", ["conv2d", "conv_transpose2d"])
def test_cuda_gradcheck(op):
    x, w, b = _leaves((2, 4, 6, 5), (4, 2, 3, 3), (4,))
    assert torch.autograd.gradcheck(lambda *t: getattr(ct, op)(*t, stride=2, padding=1, groups=2), (x, w, b),
                                    fast_mode=True)


def test_side_stream_under_autograd():
    x, w = _leaves((8, 16, 16, 16), (16, 16, 3, 3), dtype=torch.float32)
    gy = torch.randn(8, 16, 16, 16, device="cuda")
    want = torch.autograd.grad(F.conv2d(x, w, padding=1), (x, w), gy)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # forward and backward issued on the side stream
        got = torch.autograd.grad(ct.conv2d(x, w, padding=1), (x, w), gy)
    torch.cuda.current_stream().wait_stream(side)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-3)


def test_autocast_float16():
    layer = ct.Conv2d(16, 16, 3, padding=1).cuda()
    x = torch.randn(4, 16, 8, 8, device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        y = layer(x)
        want = F.conv2d(x, layer.weight, layer.bias, padding=1)
    assert y.dtype == want.dtype == torch.float16
    torch.testing.assert_close(y, want, rtol=2e-2, atol=2e-2)
    y.float().sum().backward()
    assert layer.weight.grad.dtype == torch.float32 and torch.isfinite(layer.weight.grad).all()


def test_compile_converted_model_matches_eager():
    torch.manual_seed(0)
    model = ct.convert(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
                                           torch.nn.ConvTranspose2d(8, 3, 4, stride=2, padding=1))).cuda()
    x = torch.randn(2, 3, 16, 16, device="cuda")
    compiled = torch.compile(model, fullgraph=True)  # inductor
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
