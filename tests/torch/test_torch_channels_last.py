"""convlab.torch with channels-last tensors, without a GPU: CPU channels-last tensors (host path, values
and gradients against torch's), and the fake implementations torch.compile traces with: a channels-last
CUDA first operand gives a channels-last output, any other a C-contiguous one. The CUDA runs are in
test_cuda.py."""
import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

import convlab
import convlab.torch as ct

CL = torch.channels_last


def test_cpu_channels_last_model_matches_torch():
    torch.manual_seed(0)
    x = torch.randn(2, 4, 6, 5).to(memory_format=CL).requires_grad_()
    w = torch.randn(6, 2, 3, 3).to(memory_format=CL).requires_grad_()
    y = ct.conv2d(x, w, stride=2, padding=1, groups=2)
    want = F.conv2d(x, w, stride=2, padding=1, groups=2)
    torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-4)
    gy = torch.randn_like(y)
    for a, b in zip(torch.autograd.grad(y, (x, w), gy), torch.autograd.grad(want, (x, w), gy)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_cpu_channels_last_out_is_written():
    x, w = torch.randn(1, 3, 5, 5), torch.randn(4, 3, 3, 3)
    out = torch.full((1, 4, 5, 5), float("nan")).to(memory_format=CL)
    assert convlab.conv2d(x.to(memory_format=CL), w, padding=1, out=out) is out
    assert out.is_contiguous(memory_format=CL)
    torch.testing.assert_close(out, F.conv2d(x, w, padding=1), rtol=1e-4, atol=1e-4)


CALLS = {  # op: (first operand shape, second shape, extra args)
    "conv2d": ((2, 3, 6, 5), (4, 3, 3, 3), (None, [1, 1], [1, 1], [1, 1], 1)),
    "conv_transpose2d": ((2, 3, 6, 5), (3, 4, 3, 3), (None, [1, 1], [1, 1], [0, 0], 1, [1, 1])),
    "conv2d_backward_data": ((2, 4, 6, 5), (4, 3, 3, 3), ([2, 3, 6, 5], [1, 1], [1, 1], [1, 1], 1)),
    "conv2d_backward_weight": ((2, 3, 6, 5), (2, 4, 6, 5), ([4, 3, 3, 3], [1, 1], [1, 1], [1, 1], 1)),
}


@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("op", sorted(CALLS))
def test_fake_outputs_follow_the_first_operand(op, last):
    first, second, args = CALLS[op]
    with FakeTensorMode():
        a = torch.empty(first, device="cuda", memory_format=CL if last else torch.contiguous_format)
        b = torch.empty(second, device="cuda")
        y = getattr(torch.ops.convlab, op)(a, b, *args, "auto")
    assert y.is_contiguous(memory_format=CL) is last and y.is_contiguous() is not last
