"""convlab.torch in 1D and 3D: gradcheck (float64) of the functions, the modules against torch's, and
convert() on a model mixing Conv1d, Conv2d and Conv3d layers (outputs and gradients equal to PyTorch's)."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch.autograd import gradcheck  # noqa: E402

import convlab.torch as ct  # noqa: E402


def _leaves(*shapes):
    g = torch.Generator().manual_seed(sum(map(sum, shapes)))
    return [torch.randn(s, dtype=torch.float64, generator=g).requires_grad_() for s in shapes]


# (x shape, weight shape, kwargs)
CONV = [
    ("conv1d", (2, 4, 7), (4, 2, 3), dict(stride=2, padding=1, dilation=1, groups=2)),
    ("conv1d", (1, 2, 9), (2, 2, 2), dict(stride=1, padding=2, dilation=3)),  # dilated, causal-like
    ("conv3d", (1, 2, 3, 4, 3), (2, 2, 2, 2, 1), dict(stride=(1, 2, 1), padding=(1, 0, 1))),
    ("conv3d", (1, 2, 4, 3, 3), (2, 1, 3, 1, 2), dict(padding=(2, 1, 0), dilation=(2, 1, 1), groups=2)),
]
TRANSPOSE = [
    ("conv_transpose1d", (1, 2, 4), (2, 3, 3), dict(stride=2, padding=1, output_padding=1)),
    ("conv_transpose3d", (1, 2, 2, 3, 2), (2, 1, 2, 2, 2), dict(stride=(2, 1, 1), output_padding=(1, 0, 0))),
]


@pytest.mark.parametrize("case", CONV + TRANSPOSE, ids=lambda c: f"{c[0]}{c[1]}")
def test_gradcheck_1d_and_3d(case):
    op, xs, ws, args = case
    bias_len = ws[0] if op.startswith("conv") and "transpose" not in op else ws[1] * args.get("groups", 1)
    x, w, b = _leaves(xs, ws, (bias_len,))
    ours, theirs = getattr(ct, op), getattr(F, op)
    torch.testing.assert_close(ours(x, w, b, **args), theirs(x, w, b, **args))
    assert gradcheck(lambda *t: ours(*t, **args), (x, w, b), fast_mode=True)


class Mixed(nn.Module):
    """An audio frontend (Conv1d) into an image block (Conv2d) into a volume block (Conv3d / transpose)."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(2, 4, 3, padding=1)
        self.c2 = nn.Conv2d(1, 2, 3, padding=1, bias=False)
        self.c3 = nn.Conv3d(2, 2, (1, 3, 3), padding=(0, 1, 1))
        self.t3 = nn.ConvTranspose3d(2, 1, (2, 1, 1), stride=(2, 1, 1))
        self.t1 = nn.ConvTranspose1d(4, 2, 2, stride=2)

    def forward(self, x):
        a = self.c1(x)                                   # (N, 4, L)
        b = self.c2(a.unsqueeze(1))                      # (N, 2, 4, L)
        c = self.c3(b.unsqueeze(2).expand(-1, -1, 2, -1, -1))
        return self.t3(c).sum() + self.t1(a).sum()


def test_convert_mixed_model_matches_pytorch():
    torch.manual_seed(0)
    ref = Mixed().double()
    mine = Mixed().double()
    mine.load_state_dict(ref.state_dict())
    ct.convert(mine)
    assert {type(m) for m in mine.modules()} >= {ct.Conv1d, ct.Conv2d, ct.Conv3d, ct.ConvTranspose1d,
                                                 ct.ConvTranspose3d}
    x = torch.randn(2, 2, 6, dtype=torch.float64)
    out_ref, out = ref(x), mine(x)
    torch.testing.assert_close(out, out_ref)
    out_ref.backward()
    out.backward()
    for (name, p), q in zip(ref.named_parameters(), mine.parameters()):
        torch.testing.assert_close(q.grad, p.grad, msg=name)
    assert all(type(m) in (Mixed, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose3d)
               for m in ct.revert(mine).modules())


def test_functions_check_ranks_like_torch():
    with pytest.raises(RuntimeError, match="expected 2D .unbatched. or 3D .batched. input"):
        ct.conv1d(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 1))
    with pytest.raises(RuntimeError, match="expected a 5D weight"):
        ct.conv3d(torch.zeros(1, 2, 3, 4, 4), torch.zeros(1, 2, 1, 1))
    with pytest.raises(ValueError, match="stride must be an int or a tuple of 3 ints"):
        ct.conv3d(torch.zeros(1, 2, 3, 4, 4), torch.zeros(1, 2, 1, 1, 1), stride=(1, 2))
