"""torch.compile (fullgraph, aot_eager: no C compiler needed) traces a converted model through the
torch.ops.convlab custom ops and matches eager, forward and backward; opcheck of the custom ops."""
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import convlab.torch as ct  # noqa: E402


def test_compile_fullgraph_matches_eager_and_uses_the_custom_ops():
    torch.manual_seed(0)
    model = ct.convert(nn.Sequential(nn.Conv2d(2, 3, 3, stride=2, padding=1), nn.ReLU(),
                                     nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1))
                       .double())
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64, requires_grad=True)
    seen = []

    def backend(gm, inputs):  # dynamo's graph: record its ops, then hand it to aot_eager
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        from torch._dynamo.backends.common import aot_autograd
        from functorch.compile import make_boxed_func

        def compiler(g, _):
            seen.extend(str(n.target) for n in g.graph.nodes if n.op == "call_function")
            return make_boxed_func(g.forward)
        return aot_autograd(fw_compiler=compiler, bw_compiler=compiler)(gm, inputs)

    compiled = torch.compile(model, fullgraph=True, backend=backend)
    y = compiled(x)
    y.square().sum().backward()
    got = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    x.grad = None
    model.zero_grad()
    want_y = model(x)
    want_y.square().sum().backward()
    want = [x.grad] + [p.grad for p in model.parameters()]
    torch.testing.assert_close(y, want_y)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e)
    for op in ("convlab.conv2d", "convlab.conv_transpose2d", "convlab.conv2d_backward_data",
               "convlab.conv2d_backward_weight"):
        assert any(op in name for name in seen), (op, seen)


def test_compile_follows_autocast():
    layer = ct.Conv2d(2, 2, 3, padding=1)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    x = torch.randn(1, 2, 4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = compiled(x)
    assert y.dtype == torch.bfloat16 and compiled(x).dtype == torch.float32
    want = ct.conv2d(x.bfloat16(), layer.weight.bfloat16(), layer.bias.bfloat16(), padding=1)
    torch.testing.assert_close(y, want, atol=0, rtol=0)


def test_opcheck_custom_ops():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 2, 4, 4, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(2, 2, 3, 3, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(2, dtype=torch.float64, generator=g, requires_grad=True)
    ops = torch.ops.convlab
    tests = ("test_schema", "test_faketensor", "test_autograd_registration")
    torch.library.opcheck(ops.conv2d, (x, w, b, [2, 1], [1, 0], [1, 1], 1, "auto"), test_utils=tests)
    torch.library.opcheck(ops.conv_transpose2d, (x, w, b, [2, 2], [1, 1], [1, 1], 1, [1, 1], "auto"),
                          test_utils=tests)
    gy = torch.randn(1, 2, 2, 2, dtype=torch.float64, generator=g)
    torch.library.opcheck(ops.conv2d_backward_data, (gy, w, [1, 2, 4, 4], [2, 1], [1, 0], [1, 1], 1, "auto"),
                          test_utils=tests[:2])
    torch.library.opcheck(ops.conv2d_backward_weight, (x, gy, [2, 2, 3, 3], [2, 1], [1, 0], [1, 1], 1,
                                                       "auto"), test_utils=tests[:2])
