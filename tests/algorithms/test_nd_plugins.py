"""1D and 3D through the public ops: the 3D plugins (direct, im2col / col2im on the 3D unfold / fold) per op
against the float64 reference, 1D on 2D plugins through its embedding, the one-axis and three-axis kernels
of direct, im2col / col2im and depthwise per op (every option on every axis, the first config),
channels-last-3d device operands, torch CPU tensors with out=."""
import numpy as np
import pytest

import convlab
from convlab import measure, reference, runtime
from convlab.kernels.conv.axes import kernel_ndim
from convlab.kernels.data import layouts
from convlab.problem import make_problem_nd

rng = np.random.default_rng(7)
P3 = dict(stride=(2, 1, 1), padding=(1, 0, 1), dilation=(1, 2, 1), groups=2)


def _case(op, dtype="float64"):
    p = make_problem_nd(op, 2, 4, (4, 5, 4), 4, (2, 2, 3), **P3, dtype=dtype)
    a, b = (rng.standard_normal(s).astype(dtype) for s in p.operand_shapes[:2])
    return p, a, b


@pytest.mark.parametrize("op, plugin", [("forward", "direct"), ("forward", "im2col"), ("dgrad", "direct"),
                                        ("dgrad", "col2im"), ("wgrad", "direct"), ("wgrad", "im2col")])
def test_3d_plugins_match_the_reference(op, plugin):
    p, a, b = _case(op)
    bias = rng.standard_normal(p.k if op == "forward" else p.c) if op != "wgrad" else None
    args = (P3["stride"], P3["padding"], P3["dilation"], P3["groups"])
    if op == "forward":
        got = convlab.conv3d(a, b, bias, *args, algorithm=plugin)
    elif op == "dgrad":
        got = convlab.conv_transpose3d(a, b, bias, P3["stride"], P3["padding"], 0, P3["groups"],
                                       P3["dilation"], algorithm=plugin)
        p = p.replace(bias=True)
    else:
        got = convlab.conv3d_backward_weight(a, b, p.w_shape, *args, algorithm=plugin)
    np.testing.assert_allclose(got, reference.solve(p, a, b, bias), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("algorithm", ["implicit_gemm", "tensor_core", "depthwise"])
def test_1d_runs_on_2d_plugins_through_its_embedding(algorithm):
    groups = 4 if algorithm == "depthwise" else 1
    dtype = np.float16 if algorithm == "tensor_core" else np.float32
    x = rng.standard_normal((2, 4, 11)).astype(dtype)
    w = rng.standard_normal((4, 4 // groups, 3)).astype(dtype)
    y = convlab.conv1d(x, w, None, 2, 2, 2, groups, algorithm=algorithm)
    p = make_problem_nd("forward", 2, 4, (11,), 4, (3,), stride=2, padding=2, dilation=2, groups=groups)
    assert y.shape == p.y_shape == (2, 4, 6) and y.dtype == dtype
    want = reference.solve(p, x, w)
    err = np.linalg.norm(y.astype(np.float64) - want) / np.linalg.norm(want)
    assert err <= (2.0**-10 if dtype == np.float16 else 2.0**-20)


def _nd_problem(op, nd, depthwise, dtype):
    """Groups, stride, padding, dilation (and bias) on every axis; depthwise: groups = C, M = 2. The
    outputs per image (8, 16) are whole 16-byte chunks: the unfold's vector stores."""
    c, k, g, bias = (2, 4, 2, op != "wgrad") if depthwise else (4, 6, 2, op != "wgrad")
    if nd == 1:
        return make_problem_nd(op, 2, c, (17,), k, (3,), stride=2, padding=1, dilation=2, groups=g,
                               dtype=dtype, bias=bias).lowered()
    return make_problem_nd(op, 1, c, (3, 4, 6), k, (2, 3, 3), stride=(2, 1, 2), padding=(1, 1, 1),
                           dilation=(1, 1, 2), groups=g, dtype=dtype, bias=bias)


@pytest.mark.parametrize("nd", [1, 3])
@pytest.mark.parametrize("plugin, op", [("direct", "forward"), ("direct", "dgrad"), ("direct", "wgrad"),
                                        ("im2col", "forward"), ("im2col", "wgrad"), ("col2im", "dgrad"),
                                        ("depthwise", "forward"), ("depthwise", "dgrad"),
                                        ("depthwise", "wgrad")])
def test_one_and_three_axis_kernels_match_the_reference(plugin, op, nd):
    dtype = "float32" if nd == 1 else "float64"
    problem = _nd_problem(op, nd, plugin == "depthwise", dtype)
    assert kernel_ndim(problem) == nd
    algo = convlab.get_plugin(plugin)
    assert algo.applicable(problem), problem.describe()
    host = measure.random_operands(problem, rng)
    out = runtime.full(problem.operand_shapes[2], np.nan, dtype)
    algo.run(problem, algo.configs(problem)[0], *measure.to_device(*host), out, workspace_limit=1 << 24)
    err = measure.rel_error(out.copy_to_host(), reference.solve(problem, *host))
    assert err <= measure.tolerance(problem, algo.compute_eps(dtype)), (problem.describe(), err)


def test_channels_last_3d_device_operands_give_a_channels_last_3d_output():
    p, a, b = _case("forward", "float32")
    x = layouts.channels_last_copy(a)
    assert layouts.is_channels_last(x)
    y = convlab.conv3d(x, runtime.to_device(b), None, P3["stride"], P3["padding"], P3["dilation"],
                       P3["groups"], algorithm="im2col")
    assert layouts.is_channels_last(y)
    np.testing.assert_allclose(runtime.to_host(y), reference.solve(p, a, b), rtol=1e-5, atol=1e-5)


def test_torch_cpu_tensors_and_out_in_1d_and_3d():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    p, a, b = _case("forward", "float32")
    out = torch.empty(p.y_shape)
    got = convlab.conv3d(torch.tensor(a), torch.tensor(b), None, *P3.values(), out=out, algorithm="direct")
    assert got is out
    torch.testing.assert_close(out, F.conv3d(torch.tensor(a), torch.tensor(b), None, *P3.values()))
    x, w = torch.randn(2, 4, 9).to(memory_format=torch.contiguous_format), torch.randn(4, 2, 3)
    out1 = torch.empty(2, 4, 9)
    assert convlab.conv1d(x, w, None, 1, "same", 1, 2, out=out1, algorithm="direct") is out1
    torch.testing.assert_close(out1, F.conv1d(x, w, None, 1, "same", 1, 2))
