"""convlab.torch.convert(model, fuse=True, blocks=True): eval-mode depthwise -> 1x1 pairs run as one
fused block (convlab.torch.fuse_block), in torch.fx graphs and nn.Sequential neighbours; outputs match
torch, autograd and training fall back to the two layers, revert is bit for bit."""
import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import convlab.torch as ct  # noqa: E402
from convlab.blocks import dw_pw  # noqa: E402
from convlab.torch.fuse_block import DepthwisePointwise  # noqa: E402


class InvertedResidual(nn.Module):
    """MobileNetV2's block with a residual: x + bn3(pw(relu6(bn2(dw(relu6(bn1(expand(x))))))))."""

    def __init__(self, c=3, hidden=6):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(c, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False),
                                nn.BatchNorm2d(hidden), nn.ReLU6())
        self.pw, self.bn = nn.Conv2d(hidden, c, 1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        return x + self.bn(self.pw(self.dw(self.expand(x))))


def _randomize(model):
    torch.manual_seed(4)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return model.double().eval()


def _spy(monkeypatch):
    calls = []
    launch = dw_pw.launch
    monkeypatch.setattr(dw_pw, "launch", lambda *a, **k: calls.append(a[4]) or launch(*a, **k))
    return calls


def test_graph_block_matches_torch_and_reverts(monkeypatch):
    model = _randomize(InvertedResidual())
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64)
    with torch.no_grad():
        want = model(x)
    fused = ct.convert(model, fuse=True, blocks=True)
    assert isinstance(fused, torch.fx.GraphModule)
    blocks = [m for m in fused.modules() if isinstance(m, DepthwisePointwise)]
    assert len(blocks) == 1 and ct.fusions(fused)["pw"] == "depthwise+pointwise"
    assert ct.fusions(fused)["pw.pw"] == "BatchNorm2d(folded)+add(before)"
    calls = _spy(monkeypatch)
    with torch.no_grad():
        y = fused(x)
    assert len(calls) == 1  # the fused kernel ran (auto's rule on the simulator)
    torch.testing.assert_close(y, want)
    back = ct.revert(fused)
    assert back is model
    assert all(torch.equal(back.state_dict()[k], v) for k, v in state.items())


def test_autograd_runs_the_layers_apart(monkeypatch):
    model = _randomize(InvertedResidual())
    x = torch.randn(1, 3, 6, 6, dtype=torch.float64, requires_grad=True)
    want = model(x)
    fused = ct.convert(copy.deepcopy(model), fuse=True, blocks=True)
    calls = _spy(monkeypatch)
    y = fused(x)
    assert calls == []
    torch.testing.assert_close(y, want)
    (gx,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(gx, torch.autograd.grad(want.sum(), x)[0])


class Untraceable(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=4), nn.BatchNorm2d(4),
                                  nn.ReLU6(), nn.Conv2d(4, 5, 1), nn.BatchNorm2d(5), nn.Hardswish())

    def forward(self, x):
        return self.body(x) if x.sum() > -1e9 else x


def test_sequential_block_matches_torch_and_reverts(monkeypatch):
    model = _randomize(Untraceable())
    children, state = list(model.modules()), {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(1, 4, 6, 6, dtype=torch.float64)
    with torch.no_grad():
        want = model(x)
    fused = ct.convert(model, fuse=True, blocks=True)
    assert fused is model and isinstance(model.body[0], DepthwisePointwise)
    assert ct.fusions(model) == {"body.0": "depthwise+pointwise", "body.0.dw": "BatchNorm2d(folded)+relu6",
                                 "body.0.pw": "BatchNorm2d(folded)+hardswish"}
    calls = _spy(monkeypatch)
    with torch.no_grad():
        y = model(x)
    assert len(calls) == 1
    torch.testing.assert_close(y, want)
    back = ct.revert(model)
    assert list(back.modules()) == children and type(back.body[0]) is nn.Conv2d
    assert all(torch.equal(back.state_dict()[k], v) for k, v in state.items())


def test_not_fused_unless_asked_or_on_a_named_plugin():
    model = _randomize(Untraceable())
    assert not any(isinstance(m, DepthwisePointwise)
                   for m in ct.convert(copy.deepcopy(model), fuse=True).modules())
    assert not any(isinstance(m, DepthwisePointwise)
                   for m in ct.convert(copy.deepcopy(model), fuse=True, blocks=True, algorithm="direct").modules())
    with pytest.raises(ValueError, match="blocks=True needs fuse=True"):
        ct.convert(copy.deepcopy(model), blocks=True)
    with pytest.raises(TypeError, match="blocks must be a bool"):
        ct.convert(copy.deepcopy(model), fuse=True, blocks=1)
