"""The public API: array interop, out=, N = 0, conv_transpose2d, explain, plugin listing."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import convlab
from convlab import reference, runtime
from convlab.measure import rel_error, tolerance
from convlab.testing import call_op, problems


def rand(*shape, dtype=np.float32):
    return np.random.default_rng().standard_normal(shape).astype(dtype)


@settings(max_examples=8)
@given(st.sampled_from(["forward", "dgrad", "wgrad"]).flatmap(problems), st.integers(0, 2**31))
def test_public_ops_match_reference(prob, seed):
    """Through the public functions (conv_transpose2d for dgrad with bias or output_padding)."""
    rng = np.random.default_rng(seed)
    from convlab.measure import random_operands
    a, b, bias = random_operands(prob, rng)
    got = call_op(prob, a, b, bias)
    assert isinstance(got, np.ndarray) and got.shape == prob.operand_shapes[2]
    assert rel_error(got, reference.solve(prob, a, b, bias)) <= tolerance(prob, np.finfo(prob.dtype).eps)


def test_conv_transpose2d_with_output_padding_and_groups():
    x, w, b = rand(2, 4, 3, 4), rand(4, 3, 3, 2), rand(6)
    y = convlab.conv_transpose2d(x, w, b, stride=(2, 1), padding=(1, 0), output_padding=(1, 0), groups=2,
                                 dilation=(1, 2))
    # torch: H_out = (3-1)*2 - 2 + 1*(3-1) + 1 + 1 = 6, W_out = (4-1)*1 - 0 + 2*(2-1) + 0 + 1 = 6
    assert y.shape == (2, 6, 6, 6)
    prob = convlab.problem_for("conv_transpose2d", x, w, b, stride=(2, 1), padding=(1, 0),
                               output_padding=(1, 0), groups=2, dilation=(1, 2))
    assert prob.op == "dgrad" and prob.x_shape == (2, 6, 6, 6) and prob.y_shape == x.shape
    assert rel_error(y, reference.dgrad(prob, x, w, b)) < 1e-5


def test_device_arrays_in_give_device_arrays_out():
    x, w = rand(1, 2, 5, 5), rand(3, 2, 3, 3)
    y = convlab.conv2d(runtime.to_device(x), runtime.to_device(w), padding=1)
    assert runtime.is_device_array(y)
    np.testing.assert_allclose(y.copy_to_host(), convlab.conv2d(x, w, padding=1), rtol=1e-6)


@pytest.mark.parametrize("device", [False, True])
def test_out_argument_is_written_and_returned(device):
    x, w = rand(1, 2, 5, 5), rand(3, 2, 3, 3)
    out_host = np.full((1, 3, 3, 3), np.nan, np.float32)
    out = runtime.to_device(out_host) if device else out_host
    got = convlab.conv2d(x, w, out=out)
    assert got is out
    result = out.copy_to_host() if device else out
    np.testing.assert_allclose(result, reference.forward(convlab.problem_for("conv2d", x, w), x, w),
                               rtol=1e-5, atol=1e-5)


def test_zero_batch_returns_empty_results():
    x, w = rand(0, 2, 5, 5), rand(3, 2, 3, 3)
    assert convlab.conv2d(x, w).shape == (0, 3, 3, 3)
    assert convlab.conv2d_backward_data(rand(0, 3, 3, 3), w, (0, 2, 5, 5)).shape == (0, 2, 5, 5)
    dw = convlab.conv2d_backward_weight(x, rand(0, 3, 3, 3), w.shape)
    assert dw.shape == w.shape and not dw.any()  # the gradient of an empty batch is zero
    assert convlab.conv_transpose2d(rand(0, 3, 3, 3), rand(3, 2, 3, 3)).shape == (0, 2, 5, 5)
    assert runtime.is_device_array(convlab.conv2d(runtime.to_device(x), runtime.to_device(w)))


def test_forced_plugin_and_config_pair():
    x, w = rand(1, 2, 5, 5), rand(3, 2, 3, 3)
    y = convlab.conv2d(x, w, algorithm=("direct", "default"))
    np.testing.assert_allclose(y, convlab.conv2d(x, w, algorithm="direct"))
    with pytest.raises(ValueError, match="unknown config"):
        convlab.conv2d(x, w, algorithm=("direct", "BM=999"))


def test_plugins_and_explain():
    names = [p.name for p in convlab.plugins()]
    assert "direct" in names and len(names) == len(set(names))
    x, w = rand(1, 4, 6, 6), rand(4, 2, 3, 3)
    text = str(convlab.explain(x, w, groups=2))
    assert "direct" in text and "picked:" in text
    expl = convlab.explain(rand(1, 4, 6, 4), rand(4, 4, 3, 3), (1, 4, 8, 6), op="conv2d_backward_data")
    assert expl.problem.op == "dgrad" and expl.chosen is not None
    with pytest.raises(ValueError, match="op must be one of"):
        convlab.explain(x, w, op="conv4d")


@pytest.mark.skipif(runtime.SIMULATOR, reason="CUDA array interface objects need a real GPU")
@pytest.mark.parametrize("lib", ["cupy", "torch"])
def test_cuda_array_interface_objects_are_used_in_place(lib):
    mod = pytest.importorskip(lib)
    x, w = rand(2, 3, 8, 8), rand(4, 3, 3, 3)
    if lib == "torch":
        if not mod.cuda.is_available():
            pytest.skip("torch without CUDA")
        dx, dw = mod.as_tensor(x, device="cuda"), mod.as_tensor(w, device="cuda")
        out = mod.empty((2, 4, 6, 6), device="cuda")
    else:
        dx, dw, out = mod.asarray(x), mod.asarray(w), mod.empty((2, 4, 6, 6), np.float32)
    got = convlab.conv2d(dx, dw, out=out)
    assert got is out
    host = out.cpu().numpy() if lib == "torch" else mod.asnumpy(out)
    np.testing.assert_allclose(host, convlab.conv2d(x, w), rtol=1e-5, atol=1e-5)
