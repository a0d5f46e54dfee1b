"""convlab.torch.steady: a module call that records no graph replays the launch plan the whole path
stored, under the key the op builds. On the CPU, device operands are stood in for: the operand records
say "CUDA tensor" for CPU tensors and the plan lookup reports the key it was asked for, so the steady
path's key is compared with the op's own for every module kind (tests/torch/test_cuda.py replays them
on a GPU)."""
import contextlib
import copy

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import convlab.torch as ct  # noqa: E402
from convlab.call import operands, plan  # noqa: E402
from convlab.torch import steady  # noqa: E402


class _Seen(Exception):
    """The plan lookup's key, raised instead of a lookup."""


@pytest.fixture
def device_keys(monkeypatch):
    """CPU tensors as device operands (record and signature of a CUDA tensor at their address), and a
    plan lookup that raises :class:`_Seen` with its key."""
    def signature(t):
        return ("torch", t.shape, t.stride(), t.dtype, 0, t.data_ptr() % 16 == 0)

    def adapt(obj):
        if isinstance(obj, torch.Tensor):
            return operands.Operand((signature(obj), obj.data_ptr(), obj, operands.TORCH))
        return operands.ABSENT if obj is None else operands.Operand((False, 0, obj, operands.NUMPY))

    def lookup(key):
        raise _Seen(key)
    monkeypatch.setattr(operands, "adapt", adapt)
    monkeypatch.setattr(operands, "signature", lambda t: None if t is None else signature(t))
    monkeypatch.setattr(operands, "is_host_tensor", lambda t: False)
    monkeypatch.setattr(plan, "lookup", lookup)


def _keys(module, *args):
    """(the steady path's key, the whole path's key) of ``module(*args)`` under no_grad."""
    keys = []
    for context in (steady.disabled, contextlib.nullcontext):
        with torch.no_grad(), context(), pytest.raises(_Seen) as seen:
            module(*args)
        keys.append(seen.value.args[0])
    return keys[1], keys[0]


MODULES = {
    "conv1d": (lambda: ct.Conv1d(4, 6, 3, stride=2, padding=1, dilation=1, groups=2), (2, 4, 9)),
    "conv2d": (lambda: ct.Conv2d(4, 6, (3, 1), stride=(2, 1), padding=(1, 0), dilation=(1, 2)), (2, 4, 7, 6)),
    "conv2d_nobias": (lambda: ct.Conv2d(4, 4, 3, padding=2, dilation=2, groups=4, bias=False), (1, 4, 5, 5)),
    "conv3d": (lambda: ct.Conv3d(2, 4, 3, stride=(1, 2, 2), padding=1), (1, 2, 4, 5, 5)),
    "conv_transpose1d": (lambda: ct.ConvTranspose1d(4, 2, 3, stride=2, padding=1, output_padding=1), (1, 4, 5)),
    "conv_transpose2d": (lambda: ct.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1,
                                                    groups=2, dilation=1), (2, 4, 4, 3)),
    "conv_transpose3d": (lambda: ct.ConvTranspose3d(2, 2, 2, stride=2), (1, 2, 2, 3, 3)),
}


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("channels_last", [False, True])
def test_module_key_is_the_ops_key(device_keys, name, channels_last):
    make, shape = MODULES[name]
    x = torch.randn(shape)
    if channels_last and x.dim() in (4, 5):
        x = x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    elif channels_last:
        pytest.skip("1D has no channels-last format in torch")
    whole, quick = _keys(make(), x)
    assert quick == whole


class Block(nn.Module):
    """Conv-BN-ReLU, then Conv-BN + x -> ReLU (residual before), and Conv-LeakyReLU + x (after)."""

    def __init__(self, c=4):
        super().__init__()
        self.a, self.bn_a = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.b, self.bn_b = nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c)
        self.c = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.bn_b(self.b(torch.relu(self.bn_a(self.a(x))))) + x)
        return nn.functional.leaky_relu(self.c(y), 0.1) + y


def test_fused_module_key_is_the_ops_key(device_keys):
    fused = ct.convert(Block().eval(), fuse=True)
    assert ct.fusions(fused) == {"a": "BatchNorm2d(folded)+relu", "b": "BatchNorm2d(folded)+add(before)+relu",
                                 "c": "leaky_relu(0.1)+add(after)"}
    x = torch.randn(2, 4, 5, 5)
    for name, args in (("a", (x,)), ("b", (x, x.clone())), ("c", (x, x.clone()))):
        whole, quick = _keys(fused.get_submodule(name), *args)
        assert quick == whole, name
        assert len(whole) == 6, name  # the epilogue's key is part of it


def test_no_steady_call_where_a_graph_is_recorded(device_keys):
    """With grad on and a parameter requiring grad, the module goes through autograd (no steady key)."""
    layer = ct.Conv2d(2, 2, 3)
    before = steady.stats()
    with pytest.raises(_Seen):  # the whole path's own lookup: forward through autograd
        layer(torch.randn(1, 2, 4, 4))
    assert steady.stats() == before


def test_host_calls_never_take_it():
    """CPU tensors are host operands: the whole path runs (on the simulator) and gives torch's result."""
    layer = ct.Conv2d(2, 3, 3, padding=1).double()
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64)
    before = steady.stats()
    with torch.no_grad():
        got = layer(x)
    assert steady.stats() == before
    torch.testing.assert_close(got, nn.functional.conv2d(x, layer.weight, layer.bias, padding=1))


def test_changed_options_change_the_key(device_keys):
    """The module's options are re-read on each call: a changed stride gives another key."""
    layer = ct.Conv2d(2, 2, 3)
    x = torch.randn(1, 2, 6, 6)
    first = _keys(layer, x)[1]
    layer.stride = (2, 2)
    whole, quick = _keys(copy.copy(layer), x)
    assert quick == whole != first


BOUND = {  # op, operand shapes (a, b, bias, residual), options, epilogue form
    "conv2d": ("conv2d", ((2, 4, 6, 6), (6, 2, 3, 3), (6,), None), ((2, 2), (1, 1), (1, 1), 2), {}),
    "conv2d_relu_residual": ("conv2d", ((2, 4, 6, 6), (4, 4, 1, 1), None, (2, 4, 6, 6)), (1, 0, 1, 1),
                             dict(activation="relu", residual_at="before")),
    "conv2d_leaky_after": ("conv2d", ((1, 3, 5, 5), (3, 3, 3, 3), (3,), (1, 3, 5, 5)), (1, 1, 1, 1),
                           dict(activation=("leaky_relu", 0.1), residual_at="after")),
    "conv3d_silu": ("conv3d", ((1, 2, 3, 4, 4), (2, 2, 1, 3, 3), None, None), (1, (0, 1, 1), 1, 1),
                    dict(activation="silu")),
    "conv_transpose2d": ("conv_transpose2d", ((1, 4, 3, 3), (4, 2, 2, 2), (2,), None), (2, 0, 0, 1, 1), {}),
}


@pytest.mark.parametrize("name", sorted(BOUND))
def test_bound_call_key_is_the_ops_key(device_keys, name):
    """convlab.ops.bound.BoundCall.replay asks the plan table for the key the op itself asks for."""
    import convlab
    from convlab.ops.bound import BoundCall

    op, shapes, options, epilogue = BOUND[name]
    a, b, bias, residual = (None if s is None else torch.randn(s) for s in shapes)
    bound = BoundCall(op, options, residual=residual is not None, **epilogue)
    keys = []
    for call in (lambda: bound.replay(a, b, bias, residual),
                 lambda: getattr(convlab, op)(a, b, bias, *options, residual=residual, **epilogue)):
        with pytest.raises(_Seen) as seen:
            call()
        keys.append(seen.value.args[0])
    assert keys[0] == keys[1]


def test_bound_call_with_scale_runs_the_op():
    """scale / shift are converted per call by the op: such a call is not bound, and calling it runs the op
    (here on host operands, through the simulator)."""
    import numpy as np

    import convlab
    from convlab.ops.bound import BoundCall

    g = np.random.default_rng(0)
    x, w, scale = g.standard_normal((1, 2, 5, 5)), g.standard_normal((3, 2, 3, 3)), g.standard_normal(3)
    bound = BoundCall("conv2d", (1, 1, 1, 1), activation="relu", scale=True)
    assert not bound.bindable and bound.replay(x, w) is None
    np.testing.assert_array_equal(bound(x, w, scale=scale),
                                  convlab.conv2d(x, w, None, 1, 1, 1, 1, activation="relu", scale=scale))


def _core_calls():
    """convlab.torch._core's kernel calls of autograd and the functional ops (2D and 3D): name, call."""
    from convlab.torch import _core

    x, w, dy = torch.randn(2, 4, 6, 6), torch.randn(6, 2, 3, 3), torch.randn(2, 6, 3, 3)
    x3, w3, dy3 = torch.randn(1, 2, 3, 4, 4), torch.randn(2, 2, 1, 3, 3), torch.randn(1, 2, 3, 4, 4)
    res = torch.randn(2, 6, 3, 3)
    geo = ((2, 2), (1, 1), (1, 1), 2)
    epi = dict(activation=("leaky_relu", 0.1), residual=res, residual_at="after", scale=None, shift=None)
    return {
        "forward": lambda: _core.conv2d(x, w, torch.randn(6), *geo, "auto"),
        "forward_epilogue": lambda: _core.conv2d(x, w, None, *geo, "auto", epi),
        "dgrad": lambda: _core.backward_data(dy, w, list(x.shape), *geo, "auto"),
        "wgrad": lambda: _core.backward_weight(x, dy, list(w.shape), *geo, "auto"),
        "transpose": lambda: _core.conv_transpose2d(dy, w, None, (2, 2), (1, 1), (1, 1), 2, (1, 1), "auto"),
        "dgrad3d": lambda: _core.backward_data(dy3, w3, list(x3.shape), (1, 1, 1), (0, 1, 1), (1, 1, 1), 1, "auto"),
        "wgrad3d": lambda: _core.backward_weight(x3, dy3, list(w3.shape), (1, 1, 1), (0, 1, 1), (1, 1, 1), 1,
                                                 "direct"),
    }


@pytest.mark.parametrize("name", sorted(_core_calls()))
def test_core_calls_key_is_the_ops_key(device_keys, monkeypatch, name):
    """convlab.torch.bound_calls asks the plan table for the key the op itself asks for, for every kernel
    call convlab.torch makes (autograd's backward included), without entering the op."""
    entered, real = [], plan.call_key  # the op's own key: only its _call builds one
    monkeypatch.setattr(plan, "call_key", lambda *a, **k: entered.append(1) or real(*a, **k))
    call = _core_calls()[name]
    keys = []
    for context in (contextlib.nullcontext, steady.disabled):
        with context(), pytest.raises(_Seen) as seen:
            call()
        keys.append(seen.value.args[0])
        assert len(entered) == (context is steady.disabled)
    assert keys[0] == keys[1]
