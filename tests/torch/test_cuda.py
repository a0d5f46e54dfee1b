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



@pytest.mark.parametrize("op", ["conv2d", "conv2d_backward_data", "conv2d_backward_weight",
                                "conv_transpose2d"])
def test_channels_last_tensors_ops(op):
    """convlab's ops on channels-last CUDA tensors: the output is channels-last (the first input's
    layout) and matches the same call on C-contiguous tensors; a channels-last ``out`` is written."""
    import convlab

    g = torch.Generator(device="cuda").manual_seed(0)
    x, w, dy, wt = (torch.randn(s, device="cuda", generator=g)
                    for s in [(2, 8, 9, 7), (6, 4, 3, 3), (2, 6, 5, 4), (6, 2, 3, 3)])
    args = {"conv2d": (x, w), "conv2d_backward_data": (dy, w, x.shape),
            "conv2d_backward_weight": (x, dy, w.shape), "conv_transpose2d": (dy, wt)}[op]
    options = {"stride": 2, "padding": 1, "groups": 2}
    want = getattr(convlab, op)(*args, **options)
    last = [a.to(memory_format=torch.channels_last) if torch.is_tensor(a) else a for a in args]
    got = getattr(convlab, op)(*last, **options)
    assert got.is_contiguous(memory_format=torch.channels_last) and not got.is_contiguous()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    out = torch.full_like(want, float("nan")).to(memory_format=torch.channels_last)
    assert getattr(convlab, op)(*args, out=out, **options) is out
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)


def test_channels_last_model_trains_channels_last():
    """A channels-last converted model (weights and input) gets channels-last outputs and torch's
    gradients, eager and under torch.compile (the fakes claim channels-last outputs too)."""
    import copy

    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
                                    torch.nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1)).cuda()
    model = ct.convert(copy.deepcopy(reference)).to(memory_format=torch.channels_last)
    x = torch.randn(4, 8, 12, 10, device="cuda").to(memory_format=torch.channels_last).requires_grad_()
    y = model(x)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):  # torch's default lets cuDNN use TF32: compare like for like
        want = reference(x)
    assert y.is_contiguous(memory_format=torch.channels_last) and not y.is_contiguous()
    torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-4)
    gy = torch.randn_like(y)
    got = torch.autograd.grad(y, (x, *model.parameters()), gy)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        exp = torch.autograd.grad(want, (x, *reference.parameters()), gy)
    for a, b in zip(got, exp):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-3)
    yc = torch.compile(model, fullgraph=True)(x)
    assert yc.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(yc, y, rtol=1e-4, atol=1e-4)


def test_steady_calls_replay_the_whole_paths_result():
    """A converted, fused model's second no_grad call replays each convolution's plan (convlab.torch.steady)
    and gives the whole path's output bit for bit, in both layouts; a new shape misses, then replays."""
    from convlab.torch import steady

    torch.manual_seed(0)
    c = 16
    base = torch.nn.Sequential(torch.nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False), torch.nn.BatchNorm2d(c),
                               torch.nn.ReLU6(), torch.nn.Conv2d(c, 2 * c, 1), torch.nn.ReLU(),
                               torch.nn.ConvTranspose2d(2 * c, c, 2, stride=2)).cuda().eval()
    model = ct.convert(base, fuse=True)
    for fmt in (torch.contiguous_format, torch.channels_last):
        for shape in ((4, c, 8, 8), (2, c, 6, 10)):
            x = torch.randn(shape, device="cuda").to(memory_format=fmt)
            with torch.no_grad(), steady.disabled():
                want = model(x)
            before = steady.stats()
            with torch.no_grad():
                first, again = model(x), model(x)
            after = steady.stats()
            assert after["steady"] - before["steady"] == 6, (after, before)  # 3 convolutions, 2 calls
            assert torch.equal(first, want) and torch.equal(again, want)
            assert again.is_contiguous(memory_format=fmt)


def test_bound_calls_replay_a_training_steps_kernels():
    """A converted model's training step replays its forward, dgrad and wgrad plans through
    convlab.torch.bound_calls and gives the whole path's output and gradients bit for bit."""
    from convlab.torch import bound_calls, steady

    torch.manual_seed(0)
    model = ct.convert(torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(),
                                           torch.nn.Conv2d(16, 8, 1))).cuda()
    x = torch.randn(4, 8, 10, 10, device="cuda", requires_grad=True)

    def step():
        for t in (x, *model.parameters()):
            t.grad = None
        y = model(x)
        y.square().sum().backward()
        return [y.detach(), x.grad, *(p.grad for p in model.parameters())]
    with steady.disabled():
        want = step()
    before = bound_calls.stats()["replayed"]
    got = step()
    assert bound_calls.stats()["replayed"] - before == 6  # 2 forwards, 2 dgrads, 2 wgrads
    for g, w in zip(got, want):
        assert torch.equal(g, w)
