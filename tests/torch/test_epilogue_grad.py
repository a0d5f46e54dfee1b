"""convlab.torch's epilogue keywords (activation, residual, residual_at, scale, shift): outputs and
every gradient against torch's unfused ops, float64 on tiny shapes, for every activation."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import convlab.torch as ct  # noqa: E402
from convlab.epilogue import ACTIVATIONS  # noqa: E402
from convlab.torch.epilogue import TORCH_ACTIVATIONS, _recomputes, Spec  # noqa: E402


def _leaf(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


def _reference(t, activation, slope, residual, at, scale, shift):
    view = (1, -1) + (1,) * (t.dim() - 2)
    t = t * scale.view(view) + shift.view(view)
    t = t + residual if at == "before" else t
    y = TORCH_ACTIVATIONS[activation](t, slope)
    return y + residual if at == "after" else y


def _assert_outputs_and_gradients(y: torch.Tensor, want: torch.Tensor, leaves: tuple) -> None:
    """y equals torch's ``want``, and so do the gradients of both with respect to ``leaves`` for a random dy."""
    torch.testing.assert_close(y, want)
    dy = torch.randn_like(y)
    for got, ref in zip(torch.autograd.grad(y, leaves, dy), torch.autograd.grad(want, leaves, dy)):
        torch.testing.assert_close(got, ref)


@pytest.mark.parametrize("at", ["before", "after"])
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_conv2d_epilogue_gradients_match_torch(activation, at):
    torch.manual_seed(ACTIVATIONS.index(activation))
    x, w, b = _leaf(1, 2, 4, 4), _leaf(3, 2, 3, 3), _leaf(3)
    scale, shift, residual = _leaf(3), _leaf(3), _leaf(1, 3, 4, 4)
    slope = -0.3 if activation == "leaky_relu" and at == "after" else 0.2  # a negative slope recomputes
    act = ("leaky_relu", slope) if activation == "leaky_relu" else activation
    y = ct.conv2d(x, w, b, padding=1, activation=act, residual=residual, residual_at=at, scale=scale,
                  shift=shift)
    want = _reference(F.conv2d(x, w, b, padding=1), activation, slope, residual, at, scale, shift)
    _assert_outputs_and_gradients(y, want, (x, w, b, scale, shift, residual))


@pytest.mark.parametrize("activation", ["relu", "relu6", "sigmoid", ("leaky_relu", 0.1), "identity"])
def test_derivative_from_the_output_without_scale_gradient(activation):
    """The activations whose derivative backward reads from y: dx, dw, db, dshift, dresidual."""
    torch.manual_seed(1)
    x, w = _leaf(2, 2, 5), _leaf(2, 2, 3)
    shift, residual = _leaf(2), _leaf(2, 2, 3)
    scale = torch.rand(2, dtype=torch.float64) + 0.5  # no gradient: the output path
    name, slope = activation if isinstance(activation, tuple) else (activation, 0.01)
    assert not _recomputes(Spec("conv", (), "auto", name, slope, "before"), True, False)
    y = ct.conv1d(x, w, None, activation=activation, residual=residual, scale=scale, shift=shift)
    want = _reference(F.conv1d(x, w), name, slope, residual, "before", scale, shift)
    _assert_outputs_and_gradients(y, want, (x, w, shift, residual))


def test_conv_transpose_epilogue_gradients_match_torch():
    torch.manual_seed(2)
    x, w, b, residual = _leaf(1, 3, 3, 3), _leaf(3, 2, 3, 3), _leaf(2), _leaf(1, 2, 6, 6)
    y = ct.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, activation="silu",
                            residual=residual, residual_at="after")
    want = F.silu(F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1)) + residual
    _assert_outputs_and_gradients(y, want, (x, w, b, residual))


def test_no_grad_and_unbatched_calls():
    torch.manual_seed(3)
    x, w = torch.randn(2, 4, 4, dtype=torch.float64), torch.randn(3, 2, 3, 3, dtype=torch.float64)
    residual = torch.randn(3, 4, 4, dtype=torch.float64)
    with torch.no_grad():
        y = ct.conv2d(x, w, padding=1, activation="hardswish", residual=residual, scale=[1.0, 2.0, 0.5])
    scale = torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64).view(-1, 1, 1)
    torch.testing.assert_close(y, F.hardswish(F.conv2d(x, w, padding=1) * scale + residual))


def test_bad_epilogue_arguments():
    x, w = torch.randn(1, 2, 4, 4), torch.randn(3, 2, 3, 3)
    with pytest.raises(ValueError, match="activation must be one of"):
        ct.conv2d(x, w, activation="tanh")
    with pytest.raises(ValueError, match="residual_at must be one of"):
        ct.conv2d(x, w, activation="relu", residual_at="middle")
    with pytest.raises(ValueError, match="residual must have the output's shape"):
        ct.conv2d(x, w, residual=torch.randn(1, 3, 4, 4))
    with pytest.raises(ValueError, match="scale must have shape"):
        ct.conv2d(x, w, scale=torch.ones(2))
    with pytest.raises(TypeError, match="residual must be a tensor"):
        ct.conv2d(x, w, residual=[1.0])
