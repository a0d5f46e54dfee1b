"""The eager call paths of convlab.torch: autograd records a node only when it has something to
differentiate; otherwise the kernel runs without autograd.Function (the inference path)."""
import pytest

torch = pytest.importorskip("torch")
ct = pytest.importorskip("convlab.torch")


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("no_grad", [False, True])
def test_a_node_is_recorded_only_when_something_needs_a_gradient(requires_grad, no_grad):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 2, 4, 4, generator=g, dtype=torch.float64).requires_grad_(requires_grad)
    w = torch.randn(3, 2, 3, 3, generator=g, dtype=torch.float64)
    wt = torch.randn(2, 3, 3, 3, generator=g, dtype=torch.float64)
    with torch.set_grad_enabled(not no_grad):
        y = ct.conv2d(x, w, padding=1)
        z = ct.conv_transpose2d(x, wt, stride=2, padding=1)
    recorded = requires_grad and not no_grad
    assert (y.grad_fn is not None) == recorded and (z.grad_fn is not None) == recorded
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, padding=1))
    torch.testing.assert_close(z, torch.nn.functional.conv_transpose2d(x, wt, stride=2, padding=1))
