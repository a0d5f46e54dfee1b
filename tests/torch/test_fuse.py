"""convlab.torch.convert(model, fuse=True): Conv-BN-activation(-add) chains fused (torch.fx graphs and
nn.Sequential neighbours), outputs and gradients against torch in eval and train mode, revert bit for
bit, and what is not fusable left to torch."""
import copy

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import convlab.torch as ct  # noqa: E402
from convlab.torch.fuse import Fused, FusedConv2d  # noqa: E402


class Block(nn.Module):
    """torchvision's BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + x)."""

    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x
        return self.relu(out)


class Net(nn.Module):
    """Conv-BN-ReLU stem, a BasicBlock, a depthwise -> pointwise pair and a Conv-SiLU head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU())
        self.block = Block(4)
        self.dw = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False), nn.BatchNorm2d(4),
                                nn.ReLU6(), nn.Conv2d(4, 6, 1, bias=False), nn.BatchNorm2d(6))
        self.head = nn.Sequential(nn.Conv2d(6, 3, 1), nn.SiLU())

    def forward(self, x):
        return self.head(self.dw(self.block(self.stem(x))))


def _net(seed=0):
    torch.manual_seed(seed)
    model = Net().double()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):  # statistics and affine terms away from the identity
            m.running_mean.uniform_(-1, 1), m.running_var.uniform_(0.5, 2)
            m.weight.data.uniform_(0.5, 2), m.bias.data.uniform_(-1, 1)
    return model


def _state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _assert_bit_exact(model, state):
    got = model.state_dict()
    assert list(got) == list(state)
    assert all(torch.equal(got[k], v) for k, v in state.items())


@pytest.mark.parametrize("algorithm", ["auto", "direct"])  # direct: the epilogue in the kernel's store
def test_eval_fuse_folds_batchnorm_and_matches_torch(algorithm, monkeypatch):
    from convlab.ops.epilogue import DeviceEpilogue
    ran, run_fused = [], DeviceEpilogue.run_fused
    monkeypatch.setattr(DeviceEpilogue, "run_fused", lambda *a: ran.append(run_fused(*a)) or ran[-1])
    model = _net().eval()
    state, children = _state(model), list(model.modules())
    x = torch.randn(2, 2, 5, 5, dtype=torch.float64, requires_grad=True)
    want = model(x)
    fused = ct.convert(model, fuse=True, algorithm=algorithm)
    assert isinstance(fused, torch.fx.GraphModule) and fused is not model
    assert ct.fusions(fused) == {"stem.0": "BatchNorm2d(folded)+relu", "block.conv1": "BatchNorm2d(folded)+relu",
                                 "block.conv2": "BatchNorm2d(folded)+add(before)+relu",
                                 "dw.0": "BatchNorm2d(folded)+relu6", "dw.3": "BatchNorm2d(folded)",
                                 "head.0": "silu"}
    assert "fused=BatchNorm2d(folded)+add(before)+relu" in repr(fused.block.conv2)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in fused.modules())
    y = fused(x)
    torch.testing.assert_close(y, want)
    # dw.3: a bias only; dw.0 fuses (direct, or depthwise's forward under "auto"), "auto"'s others take a pass
    assert len(ran) == 5 and ran[3] and all(ran) == (algorithm == "direct")
    dy = torch.randn_like(y)
    torch.testing.assert_close(torch.autograd.grad(y, x, dy, retain_graph=True)[0],
                               torch.autograd.grad(want, x, dy, retain_graph=True)[0])
    # the folded weight w' = w * s: torch's dL/dw = dL/dw' * s
    y.backward(dy)
    want.backward(dy)
    conv, bn = model.block.conv2, model.block.bn2
    s = (bn.weight / torch.sqrt(bn.running_var + bn.eps)).detach().view(-1, 1, 1, 1)
    torch.testing.assert_close(conv.weight.grad, fused.block.conv2.weight.grad * s)
    with pytest.raises(RuntimeError, match="folded for inference"):
        fused.train()(x)
    copied = copy.deepcopy(fused)
    torch.testing.assert_close(copied.eval()(x), want)
    _assert_bit_exact(ct.revert(copied), state)  # a copy reverts to a copy of the original
    back = ct.revert(fused)
    assert back is model and list(back.modules()) == children
    _assert_bit_exact(back, state)
    assert type(back.stem[0]) is nn.Conv2d


def test_train_fuse_keeps_batchnorm_and_matches_outputs_and_gradients():
    model = _net(1).train()
    reference = copy.deepcopy(model)
    state = _state(model)
    fused = ct.convert(model, fuse=True)
    assert ct.fusions(fused) == {"head.0": "silu"}  # BatchNorm in training mode stays, and what follows it
    assert fused.get_submodule("head.0").weight is model.head[0].weight  # shared: the optimizer's references hold
    _assert_bit_exact(ct.revert(ct.convert(copy.deepcopy(model), fuse=True)), state)
    x = torch.randn(2, 2, 5, 5, dtype=torch.float64)
    y, want = fused(x), reference(x)
    torch.testing.assert_close(y, want)
    dy = torch.randn_like(y)
    y.backward(dy)
    want.backward(dy)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)
    for name, buf in model.named_buffers():  # running statistics from convlab's convolution outputs
        torch.testing.assert_close(buf, reference.get_buffer(name), msg=name)


class Untraceable(nn.Module):
    """Data-dependent control flow: torch.fx cannot trace it."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.BatchNorm2d(3), nn.LeakyReLU(0.2),
                                  nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3), nn.Tanh())

    def forward(self, x):
        return self.body(x) if x.sum() > -1e9 else x


def test_sequential_neighbours_where_the_model_does_not_trace():
    torch.manual_seed(2)
    model = Untraceable().double().eval()
    model.body[1].running_var.uniform_(0.5, 2)
    state, originals = _state(model), list(model.body)
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64)
    want = model(x)
    assert ct.convert(model, fuse=True) is model  # in place
    assert type(model.body[0]) is FusedConv2d and type(model.body[1]) is Fused
    assert type(model.body[5]) is nn.Tanh  # not fusable: it runs as it did, after the folded BatchNorm
    assert ct.fusions(model) == {"body.0": "BatchNorm2d(folded)+leaky_relu(0.2)", "body.3": "BatchNorm2d(folded)"}
    assert "LeakyReLU fused into 0" in repr(model.body[2])
    torch.testing.assert_close(model(x), want)
    assert ct.revert(model) is model and list(model.body) == originals
    _assert_bit_exact(model, state)


def test_sequential_neighbours_in_training_mode_fuse_only_the_activation():
    torch.manual_seed(5)
    model = Untraceable().double().train()
    model.body = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.Hardswish(), nn.BatchNorm2d(3),
                               nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3), nn.Tanh()).double()
    reference = copy.deepcopy(model)
    ct.convert(model, fuse=True)
    assert ct.fusions(model) == {"body.0": "hardswish"}  # BatchNorm in training stays, and what follows
    assert type(model.body[2]) is nn.BatchNorm2d and type(model.body[3]) is ct.Conv2d
    x = torch.randn(2, 2, 4, 4, dtype=torch.float64)
    y, want = model(x), reference(x)
    torch.testing.assert_close(y, want)
    y.square().sum().backward()
    want.square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


class Functional(nn.Module):
    """Functions instead of modules, a residual after the activation, a broadcast residual, an
    unsupported activation, and a convolution called twice."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(2, 2, 3, padding=1), nn.Conv2d(2, 2, 1)
        self.c, self.shared, self.d = nn.Conv2d(2, 2, 1), nn.Conv2d(2, 2, 1), nn.Conv2d(2, 2, 1)

    def forward(self, x):
        y = F.leaky_relu(self.a(x), 0.2) + x                 # residual after the activation
        z = torch.add(torch.relu(self.b(y)), x.mean((2, 3), keepdim=True))  # broadcast: added by torch
        u = F.elu(self.c(z))                                 # ELU is not fused
        v = F.relu(self.shared(u)) + self.shared(z)          # two call sites: not fused
        return F.relu(self.d(v)) + self.d.weight.sum()       # its weight read by the graph: not fused


def test_functions_residual_after_broadcast_and_unfusable_ones():
    torch.manual_seed(3)
    model = Functional().double().train()
    reference = copy.deepcopy(model)
    fused = ct.convert(model, fuse=True)
    assert ct.fusions(fused) == {"a": "leaky_relu(0.2)+add(after)", "b": "relu+add(after)"}
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    y, want = fused(x), reference(xr)
    torch.testing.assert_close(y, want)
    y.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


def test_fuse_argument_is_checked():
    with pytest.raises(TypeError, match="fuse must be a bool"):
        ct.convert(nn.Conv2d(1, 1, 1), fuse="yes")


def test_a_fused_model_compiles_fullgraph_and_matches_eager():
    """While torch.compile traces, the convolution is the custom op and the epilogue torch's ops."""
    model = _net(4).eval()
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64)
    fused = ct.convert(model, fuse=True)
    compiled = torch.compile(fused, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x), model(x))
