"""Channels-last device operands (convlab.kernels.data.layouts): each op matches the float64 reference with any mix
of C-contiguous and channels-last operands, gives channels-last outputs for a channels-last first
input, writes a channels-last ``out``; the transposes round-trip; other strided layouts are refused;
channels-last calls are planned (a plan per layout) and replay with new operands; tensor_core takes
channels-last operands with no layout copy.

Channels-last Numba arrays are NHWC-contiguous device arrays viewed as NCHW with NHWC strides
(``runtime.view_at``), as torch's ``memory_format=torch.channels_last`` lays tensors out.
"""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import convlab
from convlab import reference, runtime
from convlab.kernels.data import layouts
from convlab.call import operands, plan
from convlab.measure import random_operands, rel_error, tolerance
from convlab.plugin import registry
from convlab.problem import np_dtype
from convlab.testing import call_op, problems

EPS = np.finfo(np.float32).eps


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


channels_last = layouts.channels_last_copy  # a device array holding host (N, C, H, W) in NHWC memory


def on_device(host, last):
    return channels_last(host) if last else runtime.to_device(host)


@pytest.fixture(autouse=True)
def fresh_plans():
    plan.clear()
    yield
    plan.clear()


# op: (operand shapes a, b; extra positional args; options); grouped, strided, padded, odd sizes
OPS = {
    "conv2d": ((2, 4, 5, 6), (6, 2, 3, 2), (), {"stride": (2, 1), "padding": (1, 0), "groups": 2}),
    "conv2d_backward_data": ((2, 6, 3, 5), (6, 2, 3, 2), ((2, 4, 5, 6),),
                             {"stride": (2, 1), "padding": (1, 0), "groups": 2}),
    "conv2d_backward_weight": ((2, 4, 5, 6), (2, 6, 3, 5), ((6, 2, 3, 2),),
                               {"stride": (2, 1), "padding": (1, 0), "groups": 2}),
    "conv_transpose2d": ((2, 4, 3, 4), (4, 3, 3, 2), (), {"stride": 2, "padding": 1, "dilation": (1, 2)}),
}


def _check(op, args, kwargs, a, b, got):
    prob = convlab.problem_for(op, a, b, *args, **kwargs)
    want = reference.solve(prob, a.astype(np.float64), b.astype(np.float64))
    assert rel_error(got, want) <= tolerance(prob, EPS)


@pytest.mark.parametrize("lasts", [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize("op", sorted(OPS))
def test_op_with_channels_last_operands(op, lasts):
    ashape, bshape, args, kwargs = OPS[op]
    a, b = rand(*ashape, seed=1), rand(*bshape, seed=2)
    y = getattr(convlab, op)(on_device(a, lasts[0]), on_device(b, lasts[1]), *args, **kwargs)
    assert operands.is_channels_last(y) == lasts[0]  # the first input's layout
    _check(op, args, kwargs, a, b, y.copy_to_host())
    a2, b2 = rand(*ashape, seed=3), rand(*bshape, seed=4)  # the same signature again: a planned call
    y2 = getattr(convlab, op)(on_device(a2, lasts[0]), on_device(b2, lasts[1]), *args, **kwargs)
    assert len(plan._table().plans) == 1 and operands.is_channels_last(y2) == lasts[0]
    _check(op, args, kwargs, a2, b2, y2.copy_to_host())


@pytest.mark.parametrize("op", sorted(OPS))
def test_out_channels_last_is_written(op):
    ashape, bshape, args, kwargs = OPS[op]
    a, b = rand(*ashape, seed=3), rand(*bshape, seed=4)
    shape = convlab.problem_for(op, a, b, *args, **kwargs).operand_shapes[2]
    out = channels_last(np.full(shape, np.nan, np.float32))
    got = getattr(convlab, op)(runtime.to_device(a), runtime.to_device(b), *args, out=out, **kwargs)
    assert got is out and operands.is_channels_last(out)
    _check(op, args, kwargs, a, b, out.copy_to_host())


def test_bias_with_channels_last_input():
    x, w, bias = rand(1, 3, 4, 5, seed=5), rand(4, 3, 3, 3, seed=6), rand(4, seed=7)
    y = convlab.conv2d(channels_last(x), runtime.to_device(w), runtime.to_device(bias), padding=1)
    want = convlab.conv2d(x, w, bias, padding=1)
    assert operands.is_channels_last(y)
    assert rel_error(y.copy_to_host(), want) <= 4 * EPS


@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (1, 7, 1, 9), (3, 2, 6, 1)])
def test_transposes_round_trip(shape):
    host = rand(*shape, seed=8)
    src = channels_last(host)
    nchw = runtime.full(shape, np.nan, np.float32)
    layouts.to_nchw(src, nchw)
    assert np.array_equal(nchw.copy_to_host(), host)
    back = channels_last(np.full(shape, np.nan, np.float32))
    layouts.to_nhwc(nchw, back)
    assert np.array_equal(runtime.flat_view(back).copy_to_host(), host.transpose(0, 2, 3, 1).reshape(-1))


def test_detection():
    assert operands.is_channels_last(channels_last(rand(2, 3, 4, 5)))
    for shape in [(2, 1, 4, 5), (2, 3, 1, 1)]:  # both layouts at once: C-contiguous wins
        assert not operands.is_channels_last(channels_last(rand(*shape)))
    assert not operands.is_channels_last(runtime.to_device(rand(2, 3, 4, 5)))
    assert not operands.is_channels_last(runtime.to_device(rand(2, 3, 4)))


@pytest.mark.parametrize("name", ["x", "weight", "out"])
def test_other_strided_layouts_are_refused(name):
    x, w = runtime.to_device(rand(1, 2, 5, 5)), runtime.to_device(rand(3, 2, 3, 3))
    args = {"x": x, "weight": w, "out": None}
    shape = {"x": (1, 2, 5, 5), "weight": (3, 2, 3, 3), "out": (1, 3, 3, 3)}[name]
    n, c, h, w_ = shape
    wide = runtime.to_device(rand(n, c, h, 2 * w_))[:, :, :, ::2]  # every other column: neither layout
    assert not wide.is_c_contiguous() and not operands.is_channels_last(wide)
    args[name] = wide
    with pytest.raises(ValueError, match=f"{name} is a non-contiguous device array.*channels-last"):
        convlab.conv2d(args["x"], args["weight"], out=args["out"])


def test_each_layout_has_its_own_plan_and_replays_with_new_operands():
    x, w = rand(1, 2, 5, 5, seed=9), rand(3, 2, 3, 3, seed=10)
    for _ in range(2):
        y = convlab.conv2d(runtime.to_device(x), runtime.to_device(w))
    assert len(plan._table().plans) == 1 and y.is_c_contiguous()
    y = convlab.conv2d(channels_last(x), runtime.to_device(w))  # same shapes, other strides: a new plan
    assert operands.is_channels_last(y) and len(plan._table().plans) == 2
    assert rel_error(y.copy_to_host(), convlab.conv2d(x, w)) <= 4 * EPS
    built = plan._table().stats["built"]
    for seed in (20, 21):  # replays: a new channels-last output each call, the new operands' values
        x2 = rand(1, 2, 5, 5, seed=seed)
        y2 = convlab.conv2d(channels_last(x2), runtime.to_device(w))
        assert operands.is_channels_last(y2) and y2 is not y
        assert rel_error(y2.copy_to_host(), convlab.conv2d(x2, w)) <= 4 * EPS
    assert len(plan._table().plans) == 2 and plan._table().stats["built"] == built


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_tensor_core_takes_channels_last_as_they_are_and_replays(dtype):
    """The plugin declaring "nhwc" reads an aligned NHWC input and KRSC filter and writes an NHWC output
    with no layout copy, planned like an NCHW call."""
    prob = convlab.make_problem("forward", 2, 8, 5, 6, 16, 3, 3, padding=1, dtype=dtype)
    ws = rand(16, 8, 3, 3, seed=31).astype(np_dtype(dtype))
    for seed in (32, 33):  # recorded, then replayed
        xs = rand(2, 8, 5, 6, seed=seed).astype(np_dtype(dtype))
        y = convlab.conv2d(channels_last(xs), channels_last(ws), padding=1, algorithm="tensor_core")
        assert operands.is_channels_last(y)
        want = reference.solve(prob, xs.astype(np.float64), ws.astype(np.float64))
        got = runtime.to_host(y).astype(np.float64)
        assert rel_error(got, want) <= tolerance(prob, registry.get("tensor_core").compute_eps(dtype))
    (recorded,) = plan._table().plans.values()
    names = [getattr(rec.dispatcher, "__name__", "?") for rec in recorded.launches]
    # the conv kernel alone, no layout copy (split-K on the simulator's 2 "SMs": its ordered sum,
    # rounding to the input type as it stores, follows)
    from convlab.algorithms import tensor_core
    tc = registry.get("tensor_core")
    split = tensor_core.split_k(prob, tensor_core.tc_config(tc.configs(prob)[0]), runtime.target())[0] > 1
    assert names == ["conv"] + (["sum_splits"] if split else []), names


def test_every_layout_mix_of_conv2d():
    """x, weight and out each C-contiguous or channels-last (out None when the first is absent)."""
    x, w = rand(1, 3, 4, 4, seed=11), rand(2, 3, 3, 3, seed=12)
    want = convlab.conv2d(x, w, padding=1)
    for lx, lw, lo in itertools.product([False, True], repeat=3):
        out = on_device(np.full((1, 2, 4, 4), np.nan, np.float32), lo)
        got = convlab.conv2d(on_device(x, lx), on_device(w, lw), padding=1, out=out)
        assert got is out and operands.is_channels_last(out) == lo
        assert rel_error(out.copy_to_host(), want) <= 4 * EPS


@pytest.mark.parametrize("dtype", ["float64", "float16", "bfloat16"])
def test_dtypes(dtype):
    """The transposes move any element type (bfloat16 as its uint16 bits): the same bits as the
    C-contiguous call."""
    if dtype == "bfloat16":
        dtype = pytest.importorskip("ml_dtypes").bfloat16
    x, w = rand(1, 3, 4, 5, seed=13).astype(dtype), rand(2, 3, 3, 3, seed=14).astype(dtype)
    y = convlab.conv2d(channels_last(x), runtime.to_device(w), padding=1)
    assert operands.is_channels_last(y) and y.dtype == np.dtype(dtype)
    assert np.array_equal(runtime.to_host(y), convlab.conv2d(x, w, padding=1))


def test_empty_batch_zeroes_a_channels_last_out():
    out = channels_last(np.full((2, 3, 3, 3), np.nan, np.float32))
    x, dy = runtime.to_device(rand(0, 3, 4, 5)), runtime.to_device(rand(0, 2, 4, 5))
    got = convlab.conv2d_backward_weight(x, dy, (2, 3, 3, 3), padding=1, out=out)
    assert got is out and not np.any(out.copy_to_host())


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(["forward", "dgrad", "wgrad"]).flatmap(problems),
       st.booleans(), st.booleans(), st.sampled_from([None, False, True]), st.integers(0, 2**31))
def test_any_problem_any_layouts(prob, last_a, last_b, last_out, seed):
    """A drawn problem (grouped, strided, dilated, padded, odd sizes, bias) with each operand
    C-contiguous or channels-last, and ``out`` absent, C-contiguous or channels-last (NaN-poisoned)."""
    a, b, bias = random_operands(prob, np.random.default_rng(seed))
    poisoned = np.full(prob.operand_shapes[2], np.nan, prob.dtype)
    out = None if last_out is None else on_device(poisoned, last_out)
    got = call_op(prob, on_device(a, last_a), on_device(b, last_b),
                  None if bias is None else runtime.to_device(bias), out=out)
    assert out is None or got is out
    expect_last = last_a if out is None else last_out
    assert operands.is_channels_last(got) == (expect_last and not got.is_c_contiguous())
    assert rel_error(got.copy_to_host(), reference.solve(prob, a, b, bias)) <= tolerance(
        prob, np.finfo(prob.dtype).eps)


def test_a_plugin_taking_nhwc_gets_channels_last_operands_as_they_are():
    """(Built-in plugins take "nchw" only: the tests above would fail if they got channels-last ones.)"""
    seen = []

    class TakesNhwc(convlab.Algorithm):
        name = "_test_nhwc"
        ops = frozenset({"forward"})
        layouts = frozenset({"nchw", "nhwc"})

        def run(self, problem, config, a, b, bias, out, workspace_limit=None):
            seen.append([operands.is_channels_last(v) for v in (a, b, out)])
            runtime.flat_view(out).copy_to_device(np.zeros(out.size, out.dtype))

    convlab.register(TakesNhwc)
    try:
        x = channels_last(rand(1, 2, 5, 5))
        convlab.conv2d(x, runtime.to_device(rand(3, 2, 3, 3)), algorithm="_test_nhwc")
    finally:
        convlab.unregister("_test_nhwc")
    assert seen == [[True, False, True]]
