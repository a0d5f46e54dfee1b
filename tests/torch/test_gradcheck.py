"""gradcheck (float64) of convlab.torch.conv2d / conv_transpose2d over strides, paddings, dilations,
groups, bias and output_padding, on tiny shapes (the kernels run on the simulator: a chosen set of
combinations rather than their full product, each option value in several cases)."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.autograd import gradcheck  # noqa: E402

import convlab.torch as ct  # noqa: E402

# (N, C, H, W, K, R, S, stride, padding, dilation, groups, bias)
CONV = [
    (1, 2, 5, 5, 2, 3, 3, 1, 0, 1, 1, True),
    (2, 2, 5, 4, 3, 3, 2, 2, 1, 1, 1, False),
    (1, 4, 5, 5, 2, 2, 3, 1, (1, 0), 2, 2, True),
    (1, 2, 5, 5, 4, 3, 3, 2, (1, 0), 1, 2, False),
    (2, 3, 4, 5, 2, 1, 2, (2, 1), 1, (1, 2), 1, True),
    (1, 2, 5, 5, 2, 3, 3, 1, "same", 2, 1, True),
]
# (N, C_in, H, W, C_out, R, S, stride, padding, output_padding, dilation, groups, bias)
TRANSPOSE = [
    (1, 2, 3, 3, 2, 3, 3, 1, 0, 0, 1, 1, True),
    (2, 2, 3, 2, 3, 3, 2, 2, 1, 1, 1, 1, False),
    (1, 4, 3, 3, 2, 2, 3, 2, (1, 0), (1, 0), 1, 2, True),
    (1, 2, 3, 3, 4, 3, 3, 1, 1, 1, 2, 2, False),  # output_padding >= stride (< dilation)
    (1, 2, 2, 3, 2, 2, 2, (2, 1), 0, (1, 0), (1, 2), 1, True),
]


def _leaves(*shapes):
    g = torch.Generator().manual_seed(sum(map(sum, shapes)))
    return [torch.randn(s, dtype=torch.float64, generator=g).requires_grad_() for s in shapes]


@pytest.mark.parametrize("case", CONV, ids=str)
def test_conv2d_gradcheck(case):
    n, c, h, w, k, r, s, stride, padding, dilation, groups, bias = case
    x, wt, b = _leaves((n, c, h, w), (k, c // groups, r, s), (k,))
    b = b if bias else None
    args = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    y = ct.conv2d(x, wt, b, **args)
    torch.testing.assert_close(y, F.conv2d(x, wt, b, **args))
    inputs = (x, wt) if b is None else (x, wt, b)
    assert gradcheck(lambda *t: ct.conv2d(*t, **args), inputs, fast_mode=True)


@pytest.mark.parametrize("case", TRANSPOSE, ids=str)
def test_conv_transpose2d_gradcheck(case):
    n, c, h, w, co, r, s, stride, padding, out_pad, dilation, groups, bias = case
    x, wt, b = _leaves((n, c, h, w), (c, co // groups, r, s), (co,))
    b = b if bias else None
    args = dict(stride=stride, padding=padding, output_padding=out_pad, dilation=dilation, groups=groups)
    y = ct.conv_transpose2d(x, wt, b, **args)
    torch.testing.assert_close(y, F.conv_transpose2d(x, wt, b, **args))
    inputs = (x, wt) if b is None else (x, wt, b)
    assert gradcheck(lambda *t: ct.conv_transpose2d(*t, **args), inputs, fast_mode=True)


@pytest.mark.parametrize("op", ["conv2d", "conv_transpose2d"])
def test_gradients_match_torch_and_only_needed_ones_are_computed(op, monkeypatch):
    x, wt, b = _leaves((2, 2, 4, 4), (2, 2, 3, 3), (2,))
    fn, ref = getattr(ct, op), getattr(F, op)
    gy = torch.randn(fn(x, wt, b, stride=2, padding=1).shape, dtype=torch.float64)
    got = torch.autograd.grad(fn(x, wt, b, stride=2, padding=1), (x, wt, b), gy)
    want = torch.autograd.grad(ref(x, wt, b, stride=2, padding=1), (x, wt, b), gy)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)
    calls = []
    from convlab import ops

    for name in ("conv2d", "conv2d_backward_data", "conv2d_backward_weight"):
        real = getattr(ops, name)
        monkeypatch.setattr(ops, name, lambda *a, _n=name, _r=real, **k: calls.append(_n) or _r(*a, **k))
    x.requires_grad_(False)
    fn(x, wt, b, stride=2, padding=1).sum().backward()  # weight and bias only: no dgrad (dx)
    assert "conv2d_backward_data" not in calls and "conv2d_backward_weight" in calls


def test_double_backward_raises():
    x, wt = _leaves((1, 2, 4, 4), (2, 2, 3, 3))
    (gx,) = torch.autograd.grad(ct.conv2d(x, wt).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice|double backward"):
        gx.sum().backward()


def test_a_forced_plugin_serves_the_ops_it_implements_and_auto_the_others(monkeypatch):
    from convlab import ops

    seen = []
    for name in ("conv2d", "conv2d_backward_data", "conv2d_backward_weight"):
        real = getattr(ops, name)
        monkeypatch.setattr(ops, name, lambda *a, _n=name, _r=real, **k: seen.append((_n, k["algorithm"]))
                            or _r(*a, **k))
    x, wt = _leaves((1, 2, 4, 4), (2, 2, 3, 3))
    gx, gw = torch.autograd.grad(ct.conv2d(x, wt, padding=1, algorithm="im2col").sum(), (x, wt))
    assert seen == [("conv2d", "im2col"), ("conv2d_backward_data", "auto"),  # im2col has no dgrad
                    ("conv2d_backward_weight", "im2col")]
    want = torch.autograd.grad(F.conv2d(x, wt, padding=1).sum(), (x, wt))
    torch.testing.assert_close(gx, want[0])
    torch.testing.assert_close(gw, want[1])
