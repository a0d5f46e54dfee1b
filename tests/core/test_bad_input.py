"""Bad input raises ValueError/TypeError naming the argument, before any kernel launch."""
import numpy as np
import pytest

import convlab


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    """Any launch in these tests is a failure: validation must come first."""
    for plugin in convlab.plugins():
        monkeypatch.setattr(plugin, "run", lambda *a, **k: pytest.fail("a kernel was launched"))


def f32(*shape):
    return np.random.default_rng().standard_normal(shape).astype(np.float32)


X, W = f32(2, 4, 8, 8), f32(6, 4, 3, 3)

CONV2D_CASES = [
    (dict(x=f32(4, 8, 8)), ValueError, "x must have 4 dimensions"),
    (dict(weight=f32(6, 3, 3, 3)), ValueError, "channel mismatch"),
    (dict(groups=3), ValueError, "divisible by groups"),
    (dict(groups=0), ValueError, "groups must be >= 1"),
    (dict(padding=-1), ValueError, "padding"),
    (dict(stride=0), ValueError, "stride"),
    (dict(dilation=0), ValueError, "dilation"),
    (dict(stride=(1, 2, 3)), TypeError, "stride"),
    (dict(weight=f32(6, 4, 9, 9)), ValueError, "empty"),
    (dict(weight=W.astype(np.float64)), TypeError, "dtypes must match"),
    (dict(x=X.astype(np.int32)), TypeError, "x must be one of float32, float64, float16, bfloat16"),
    (dict(x=X.astype(np.complex64)), TypeError, "x must be one of float32"),
    (dict(weight=W.astype(np.int8)), TypeError, "weight must be one of float32"),
    (dict(x=X.astype(np.float16)), TypeError, "dtypes must match"),
    (dict(bias=f32(6).astype(np.float16)), TypeError, "bias has dtype float16"),
    (dict(x=[[1.0]]), TypeError, "x must be an array"),
    (dict(bias=f32(5)), ValueError, "bias must have shape"),
    (dict(bias=f32(6).astype(np.float64)), TypeError, "dtypes must match"),
    (dict(algorithm="nope"), ValueError, "unknown algorithm 'nope'"),
    (dict(algorithm=3), TypeError, "algorithm must be"),
    (dict(out=f32(2, 6, 5, 5)), ValueError, "out must have shape"),
    (dict(workspace_limit=-1), ValueError, "workspace_limit"),
]


@pytest.mark.parametrize("change,exc,match", CONV2D_CASES, ids=[c[2] for c in CONV2D_CASES])
def test_conv2d_rejects(change, exc, match):
    args = dict(x=X, weight=W, bias=None)
    args.update(change)
    with pytest.raises(exc, match=match):
        convlab.conv2d(**args)


def test_backward_data_rejects_inconsistent_shapes():
    dy = f32(2, 6, 6, 6)
    with pytest.raises(ValueError, match="grad_out spatial size"):
        convlab.conv2d_backward_data(dy, W, (2, 4, 9, 9))
    with pytest.raises(ValueError, match="grad_out"):
        convlab.conv2d_backward_data(f32(3, 6, 6, 6), W, (2, 4, 8, 8))
    with pytest.raises(TypeError, match="input_shape"):
        convlab.conv2d_backward_data(dy, W, (2, 4, 8))
    with pytest.raises(ValueError, match="channel mismatch"):
        convlab.conv2d_backward_data(dy, W, (2, 5, 8, 8))


def test_backward_weight_rejects_inconsistent_shapes():
    with pytest.raises(ValueError, match="grad_out spatial size"):
        convlab.conv2d_backward_weight(X, f32(2, 6, 5, 5), W.shape)
    with pytest.raises(ValueError, match="K=6"):
        convlab.conv2d_backward_weight(X, f32(2, 7, 6, 6), W.shape)
    with pytest.raises(TypeError, match="weight_shape"):
        convlab.conv2d_backward_weight(X, f32(2, 6, 6, 6), "6,4,3,3")


def test_conv_transpose_rejects():
    x, w = f32(1, 4, 5, 5), f32(4, 3, 3, 3)
    with pytest.raises(ValueError, match="output_padding"):
        convlab.conv_transpose2d(x, w, stride=2, output_padding=2)
    with pytest.raises(ValueError, match="channel mismatch"):
        convlab.conv_transpose2d(f32(1, 5, 5, 5), w)
    with pytest.raises(ValueError, match="bias must have shape"):
        convlab.conv_transpose2d(x, w, bias=f32(4))
    with pytest.raises(ValueError, match="empty"):
        convlab.conv_transpose2d(f32(1, 4, 1, 1), f32(4, 3, 1, 1), padding=1)


def test_forced_plugin_that_declines_quotes_its_reason():
    class Picky(convlab.Algorithm):
        name = "_test_picky"
        ops = frozenset({"forward"})

        def check(self, problem):
            return convlab.Verdict.no("needs a 1x1 kernel, got 3x3")

    convlab.register(Picky)
    try:
        with pytest.raises(ValueError, match="needs a 1x1 kernel, got 3x3"):
            convlab.conv2d(X, W, algorithm="_test_picky")
    finally:
        convlab.unregister("_test_picky")


def test_non_contiguous_device_array_is_rejected():
    from convlab import runtime
    dev = runtime.to_device(f32(2, 4, 8, 16))[:, :, :, ::2]
    if dev.is_c_contiguous():
        pytest.skip("this array implementation makes contiguous slices")
    with pytest.raises(ValueError, match="non-contiguous"):
        convlab.conv2d(dev, runtime.to_device(W))
