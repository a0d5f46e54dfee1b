"""PyTorch's own convolution test cases (the Conv1d / Conv2d / ConvTranspose module tests of
torch.testing._internal.common_nn, at their sizes) with the winograd and fft plugins forced wherever they
apply, against torch's functional convolutions in float64: forward for every case, dgrad and wgrad for
those PyTorch tests the gradients of. A case a plugin declines is skipped for it, with the reason."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.nn import grad  # noqa: E402

import convlab  # noqa: E402

# (name, N, input spatial, C, K, kernel, kwargs): common_nn's Conv1d / Conv2d / ConvTranspose cases
CASES = [
    ("Conv1d", 2, (10,), 4, 5, (3,), dict()),
    ("Conv1d_pad1", 2, (10,), 4, 5, (3,), dict(padding=1)),
    ("Conv1d_pad2size1", 2, (10,), 4, 5, (1,), dict(padding=2)),
    ("Conv1d_dilated", 2, (10,), 4, 5, (3,), dict(dilation=2)),
    ("Conv1d_groups", 2, (6,), 4, 6, (3,), dict(groups=2)),
    ("Conv1d_pad_same", 2, (10,), 4, 5, (5,), dict(padding="same")),
    ("Conv2d", 2, (7, 5), 3, 4, (3, 2), dict()),
    ("Conv2d_padding", 2, (6, 5), 3, 4, (3, 3), dict(padding=1)),
    ("Conv2d_dilated", 2, (8, 8), 3, 4, (3, 3), dict(dilation=2)),
    ("Conv2d_groups", 2, (6, 5), 4, 6, (3, 3), dict(groups=2, padding=1)),
    ("Conv2d_depthwise_padded", 2, (6, 6), 4, 4, (3, 3), dict(groups=4, padding=1)),
    ("Conv2d_5x5_pad_same", 1, (7, 6), 2, 3, (5, 5), dict(padding="same")),
    ("ConvTranspose1d", 1, (6,), 3, 4, (3,), dict(transpose=True, padding=1)),
    ("ConvTranspose2d", 1, (5, 4), 3, 4, (3, 3), dict(transpose=True)),
]
#: the cases whose gradients (dgrad, wgrad) are checked as well
GRADS = {"Conv1d_pad1", "Conv2d_padding", "Conv2d_dilated"}


def _operands(n, spatial, c, k, kernel, groups, transpose):
    g = torch.Generator().manual_seed(n + c + k + sum(spatial) + sum(kernel))
    x = torch.randn(n, c, *spatial, dtype=torch.float64, generator=g)
    wshape = (c, k // groups, *kernel) if transpose else (k, c // groups, *kernel)
    return x, torch.randn(wshape, dtype=torch.float64, generator=g), torch.randn(k, dtype=torch.float64, generator=g)


def _close(got, want, what):
    err = ((got.double() - want).norm() / want.norm()).item()
    assert err < 5e-5, (what, err)


def _forced(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except ValueError as exc:
        if "cannot run" not in str(exc):
            raise
        pytest.skip(str(exc).splitlines()[0][:200])


@pytest.mark.parametrize("plugin", ["winograd", "fft"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_forward(plugin, case):
    name, n, spatial, c, k, kernel, kw = case
    kw = dict(kw)
    transpose, groups = kw.pop("transpose", False), kw.get("groups", 1)
    x, w, b = _operands(n, spatial, c, k, kernel, groups, transpose)
    nd = len(spatial)
    op = f"conv_transpose{nd}d" if transpose else f"conv{nd}d"
    got = _forced(getattr(convlab, op), x.float(), w.float(), b.float(), algorithm=plugin, **kw)
    _close(got, getattr(F, op)(x, w, b, **kw), name)


@pytest.mark.parametrize("plugin", ["winograd", "fft"])
@pytest.mark.parametrize("which", ["input", "weight"])
@pytest.mark.parametrize("case", [c for c in CASES if c[0] in GRADS], ids=lambda c: c[0])
def test_gradients(plugin, which, case):
    name, n, spatial, c, k, kernel, kw = case
    x, w, _ = _operands(n, spatial, c, k, kernel, kw.get("groups", 1), False)
    nd = len(spatial)
    gy = torch.randn(getattr(F, f"conv{nd}d")(x, w, **kw).shape, dtype=torch.float64,
                     generator=torch.Generator().manual_seed(3))
    if which == "input":
        want = getattr(grad, f"conv{nd}d_input")(x.shape, w, gy, **kw)
        got = _forced(getattr(convlab, f"conv{nd}d_backward_data"), gy.float(), w.float(), tuple(x.shape),
                      algorithm=plugin, **kw)
    else:
        want = getattr(grad, f"conv{nd}d_weight")(x, w.shape, gy, **kw)
        got = _forced(getattr(convlab, f"conv{nd}d_backward_weight"), x.float(), gy.float(), tuple(w.shape),
                      algorithm=plugin, **kw)
    _close(got, want, f"{name} {which}")


def test_the_plugins_apply_to_most_cases():
    """The skips above are the exception: each plugin runs most of the forward cases."""
    for plugin, least in (("winograd", 8), ("fft", 11)):
        ran = 0
        for name, n, spatial, c, k, kernel, kw in CASES:
            kw = dict(kw)
            transpose = kw.pop("transpose", False)
            nd = len(spatial)
            op = f"conv_transpose{nd}d" if transpose else f"conv{nd}d"
            x, w, b = _operands(n, spatial, c, k, kernel, kw.get("groups", 1), transpose)
            verdict = convlab.explain(x.float(), w.float(), op=op, algorithm=plugin, **kw)
            ran += verdict.chosen == plugin
        assert ran >= least, (plugin, ran)
