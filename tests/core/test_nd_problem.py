"""The N-d problem model: 2D keys unchanged, N-d accessors, the 1D embedding, dict round trips, the
N-d float64 reference against torch on the CPU, and the ops' bad-input errors for 1D and 3D."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import convlab
from convlab import reference
from convlab.plugin import registry
from convlab.plugin.contract import Algorithm
from convlab.problem import Problem, make_problem, make_problem_nd

torch = pytest.importorskip("torch")


def test_a_2d_problem_and_its_key_name_no_depth():
    p = make_problem("forward", 2, 4, 9, 8, 6, 3, 3, stride=2, padding=1, groups=2)
    assert p.key() == ("forward", "float32", 2, 4, 9, 8, 6, 3, 3, 5, 4, (2, 2), (1, 1), (1, 1), 2, False)
    assert make_problem_nd("forward", 2, 4, (9, 8), 6, (3, 3), stride=2, padding=1, groups=2) == p
    assert p.ndim == 2 and p.spatial_in == (9, 8) and p.kernel_size == (3, 3) and p.spatial_out == (5, 4)
    assert "nd" not in p.to_dict() and "ndim" not in p.to_dict()


def test_3d_accessors_shapes_gemm_and_round_trip():
    p = make_problem_nd("wgrad", 2, 4, (5, 6, 7), 8, (3, 1, 2), stride=(2, 1, 1), padding=(1, 0, 1),
                        dilation=(1, 2, 1))
    assert p.spatial_out == (3, 6, 8) and p.strides == (2, 1, 1) and p.dilations == (1, 2, 1)
    assert p.x_shape == (2, 4, 5, 6, 7) and p.w_shape == (8, 4, 3, 1, 2) and p.y_shape == (2, 8, 3, 6, 8)
    assert p.gemm_shape() == (8, 4 * 3 * 1 * 2, 2 * 3 * 6 * 8)
    assert p.flops == 2 * 2 * 8 * 3 * 6 * 8 * 4 * 6
    assert Problem.from_dict(p.to_dict()) == p and p.replace(dtype="float64").ndim == 3
    other = make_problem_nd("wgrad", 2, 4, (5, 6, 7), 8, (3, 1, 2), stride=(2, 1, 1), padding=(0, 0, 1),
                            dilation=(1, 2, 1))
    assert other.spatial_out == (2, 6, 8) and p.key() != other.key()  # the depth axis is in the key
    assert p.replace(dilation=(1, 1, 1), do=3, p=6).dilations == (1, 1, 1)  # N-tuples, depth first


def test_1d_problem_is_its_2d_embedding():
    p = make_problem_nd("forward", 2, 4, (9,), 6, (3,), stride=2, padding=1, dilation=2, bias=True)
    assert p.ndim == 1 and p.x_shape == (2, 4, 9) and p.spatial_out == (4,)
    low = p.lowered()
    assert low.ndim == 2 and low.x_shape == (2, 4, 1, 9) and (low.stride, low.padding, low.dilation) == \
        ((1, 2), (0, 1), (1, 2))
    assert Problem.from_dict(p.to_dict()) == p
    assert registry.verdict(registry.get("im2col"), low)
    assert "2D embedding" in registry.verdict(registry.get("im2col"), p).reason


class _Flat(Algorithm):
    """A plugin of the default ``ndims``: 2D only."""

    name = "flat2d"
    ops = frozenset({"forward"})


def test_2d_only_plugins_decline_3d_naming_it():
    p = make_problem_nd("forward", 1, 4, (3, 4, 4), 4, (1, 3, 3), groups=4)  # depthwise-shaped
    verdict = _Flat().applicable(p)
    assert not verdict and "runs 2D convolutions, not 3D" in verdict.reason
    for plugin in registry.plugins("forward"):
        if 3 not in plugin.ndims:
            verdict = registry.verdict(plugin, p)
            assert not verdict and "not 3D" in verdict.reason, (plugin.name, verdict.reason)
    for name in ("direct", "im2col", "depthwise"):
        assert registry.verdict(registry.get(name), p), name


def _torch_solve(p, a, b):
    args = (p.strides, p.paddings, p.dilations, p.groups)
    nd = p.ndim
    ta, tb = torch.tensor(a), torch.tensor(b)
    if p.op == "forward":
        return getattr(torch.nn.functional, f"conv{nd}d")(ta, tb, None, *args).numpy()
    if p.op == "dgrad":
        return getattr(torch.nn.grad, f"conv{nd}d_input")(p.x_shape, tb, ta, *args).numpy()
    return getattr(torch.nn.grad, f"conv{nd}d_weight")(ta, p.w_shape, tb, *args).numpy()


@settings(max_examples=8, deadline=None)
@given(nd=st.sampled_from([1, 3]), op=st.sampled_from(["forward", "dgrad", "wgrad"]),
       data=st.data())
def test_nd_reference_matches_torch_on_the_cpu(nd, op, data):
    from convlab.testing.strategies import nd_problems

    low = data.draw(nd_problems(op, ("float64",), nd=nd))
    p = low if nd == 3 else make_problem_nd(op, low.n, low.c, (low.w,), low.k, (low.s,), (low.q,),
                                            stride=low.stride[1], padding=low.padding[1],
                                            dilation=low.dilation[1], groups=low.groups, dtype="float64")
    if op == "dgrad" and p.spatial_out != make_problem_nd("forward", p.n, p.c, p.spatial_in, p.k,
                                                          p.kernel_size, stride=p.strides,
                                                          padding=p.paddings,
                                                          dilation=p.dilations, groups=p.groups).spatial_out:
        return  # a transposed conv's smaller dy: torch.nn.grad takes the forward formula's only
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s) for s in p.operand_shapes[:2])
    np.testing.assert_allclose(reference.solve(p, a, b), _torch_solve(p, a, b), rtol=1e-10, atol=1e-10)
    if nd == 1:  # the 1D reference equals the 2D reference of the embedding
        np.testing.assert_allclose(reference.solve(p.lowered(), a[:, :, None], b[:, :, None]),
                                   reference.solve(p, a, b)[:, :, None], rtol=1e-12, atol=1e-12)


X3, W3 = np.zeros((1, 2, 3, 4, 4)), np.zeros((2, 2, 1, 3, 3))


@pytest.mark.parametrize("call, error, match", [
    (lambda: convlab.conv2d(X3, W3), ValueError, "x must have 4 dimensions.*use conv3d"),
    (lambda: convlab.conv3d(X3[0], W3), ValueError, "x must have 5 dimensions.*use conv2d"),
    (lambda: convlab.conv3d(X3, W3[:, :, 0]), ValueError, "weight must have 5 dimensions"),
    (lambda: convlab.conv3d(X3, W3, stride=(1, 2)), ValueError, "stride must be an int or a tuple of 3"),
    (lambda: convlab.conv3d(X3, W3, dilation=(1, 1, 1, 1)), ValueError, "dilation .* 4 entries"),
    (lambda: convlab.conv1d(X3[:, :, 0, 0], W3[:, :, 0, 0], padding=(1, 1)), ValueError,
     "padding must be an int or a tuple of 1"),
    (lambda: convlab.conv1d(X3[:, :, 0], W3[:, :, 0, 0]), ValueError, "x must have 3 dimensions.*conv2d"),
    (lambda: convlab.conv3d_backward_data(np.zeros((1, 2, 3, 2, 2)), W3, (1, 2, 3, 4)), TypeError,
     "input_shape must be a sequence of 5 ints"),
    (lambda: convlab.conv3d_backward_weight(X3, np.zeros((1, 2, 3, 2, 3)), W3.shape), ValueError,
     "grad_out spatial size 3x2x3 does not match the forward output 3x2x2"),
    (lambda: convlab.conv_transpose3d(X3, W3, output_padding=(0, 1, 0)), ValueError, "output_padding"),
    (lambda: convlab.conv_transpose1d(X3[:, :, 0, 0], W3[:, :, 0, 0], padding="same"), ValueError,
     "conv_transpose1d takes padding as an int"),
])
def test_nd_ops_reject_bad_input_naming_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()
