"""The float64 reference against a naive loop version and the adjoint identities."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from convlab import reference
from convlab.testing import problems


def _rand(rng, shape):
    return rng.standard_normal(shape)


@settings(max_examples=40)
@given(problems("forward", ("float64",)), st.integers(0, 2**32 - 1))
def test_forward_matches_naive_loops(prob, seed):
    rng = np.random.default_rng(seed)
    x, w = _rand(rng, prob.x_shape), _rand(rng, prob.w_shape)
    np.testing.assert_allclose(reference.forward(prob, x, w), reference.forward_naive(prob, x, w),
                               rtol=1e-12, atol=1e-12)


@settings(max_examples=60)
@given(problems("dgrad", ("float64",)), st.integers(0, 2**32 - 1))
def test_adjoint_identities(prob, seed):
    """<conv(x, w), g> = <x, dgrad(g, w)> = <w, wgrad(x, g)> (with dy possibly shortened)."""
    rng = np.random.default_rng(seed)
    x, w, g = _rand(rng, prob.x_shape), _rand(rng, prob.w_shape), _rand(rng, prob.y_shape)
    fwd, wgr = prob.replace(op="forward", bias=False), prob.replace(op="wgrad", bias=False)
    lhs = np.vdot(reference.forward(fwd, x, w), g)
    mid = np.vdot(x, reference.dgrad(prob.replace(bias=False), g, w))
    rhs = np.vdot(w, reference.wgrad(wgr, x, g))
    scale = np.linalg.norm(x) * np.linalg.norm(w) * np.linalg.norm(g)
    assert abs(lhs - mid) <= 1e-12 * scale and abs(lhs - rhs) <= 1e-12 * scale


@settings(max_examples=10)
@given(problems("forward", ("float64",)), st.integers(0, 2**32 - 1))
def test_bias_is_added_per_channel(prob, seed):
    rng = np.random.default_rng(seed)
    prob = prob.replace(bias=True)
    x, w, b = _rand(rng, prob.x_shape), _rand(rng, prob.w_shape), _rand(rng, (prob.k,))
    diff = reference.forward(prob, x, w, b) - reference.forward(prob, x, w)
    np.testing.assert_allclose(diff, np.broadcast_to(b[None, :, None, None], diff.shape))


def test_transpose_output_size_matches_pytorch_formula():
    # torch: (H-1)*s - 2p + d*(k-1) + output_padding + 1
    assert reference.transpose_output_size(4, 4, 2, 1, 0, 1) == 8
    assert reference.transpose_output_size(5, 3, 2, 1, 1, 1) == 10
