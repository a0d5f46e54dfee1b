"""convlab.blocks.dw_pw_plan: a repeated depthwise_pointwise call on device operands replays what its first
call prepared (no check, choice or conversion again) with the same results and errors; which calls are
not planned; the bound, reset and the thin launch's fallback; auto's timing through both public calls."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import convlab
from convlab import blocks, runtime
from convlab.blocks import dw_pw, dw_pw_plan
from convlab.kernels.data.layouts import channels_last_view
from convlab.runtime import launch


@pytest.fixture(autouse=True)
def _fresh():
    convlab.reset()
    yield
    convlab.reset()


@pytest.fixture
def checks(monkeypatch):
    """The number of argument checks depthwise_pointwise ran."""
    count = [0]
    real = dw_pw.check

    def counted(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)
    monkeypatch.setattr(dw_pw, "check", counted)
    return count


def _host(seed, c=4, k=6, hw=5, dtype=np.float16):
    rng = np.random.default_rng(seed)
    shapes = [(1, c, hw, hw), (c, 1, 3, 3), (k, c, 1, 1), (c,), (k,), (1, k, hw, hw)]
    return [rng.standard_normal(s).astype(dtype) for s in shapes], rng.uniform(0.5, 2, k), rng.standard_normal(k)


def _dev(a, cl=False):
    if not cl:
        return runtime.to_device(a)
    return channels_last_view(runtime.to_device(np.ascontiguousarray(a.transpose(0, 2, 3, 1))), a.shape, a.dtype)


KW = dict(padding=1, dw_activation="relu6", activation=("leaky_relu", 0.2), residual_at="after")


@pytest.mark.parametrize("algorithm,cl", [("fused", False), ("fused", True), ("separate", True), ("auto", False)])
def test_a_repeated_device_call_replays_without_checking_again(algorithm, cl, checks):
    before, op_checks = dw_pw_plan.stats(), 0
    for seed in range(3):  # new operands of one signature each call
        (x, wd, wp, bd, bp, res), scale, shift = _host(seed)
        ref = blocks.reference_depthwise_pointwise(x, wd, wp, bd, bp, residual=res, scale=scale, shift=shift, **KW)
        # scale of the compute type (read as it is), shift float64 (converted each call)
        counted = checks[0]
        y = blocks.depthwise_pointwise(_dev(x, cl), _dev(wd), _dev(wp), _dev(bd), _dev(bp), residual=_dev(res, cl),
                                       scale=_dev(scale.astype(np.float32)), shift=_dev(shift), algorithm=algorithm,
                                       **KW)
        op_checks += checks[0] - counted
        assert runtime.is_device_array(y) and y.shape == ref.shape
        host = runtime.to_host(runtime.flat_view(y)).reshape(1, 5, 5, 6).transpose(0, 3, 1, 2) if cl \
            else runtime.to_host(y)
        assert float(np.abs(host.astype(np.float64) - ref).max()) < 16 * 2.0**-11 * max(1, np.abs(ref).max())
    assert op_checks == 1
    stats = dw_pw_plan.stats()
    assert (stats["plans"], stats["built"] - before["built"], stats["replayed"] - before["replayed"]) == (1, 1, 2)


def test_a_bad_call_after_a_stored_plan_raises_as_before(checks):
    (x, wd, wp, *_), _, _ = _host(0)
    dev = [_dev(a) for a in (x, wd, wp)]
    blocks.depthwise_pointwise(*dev, padding=1, algorithm="fused")
    with pytest.raises(ValueError, match="algorithm must be one of"):
        blocks.depthwise_pointwise(*dev, padding=1, algorithm="fastest")
    with pytest.raises(ValueError, match="activation must be one of"):
        blocks.depthwise_pointwise(*dev, padding=1, activation="swish", algorithm="fused")
    with pytest.raises(ValueError, match="residual must have shape"):
        blocks.depthwise_pointwise(*dev, padding=1, residual=_dev(np.zeros((1, 6, 4, 4), np.float16)),
                                   algorithm="fused")
    with pytest.raises(TypeError, match="w_dw must be a device operand"):
        blocks.depthwise_pointwise(dev[0], wd, dev[2], padding=1, algorithm="fused")
    assert checks[0] == 5 and dw_pw_plan.stats()["plans"] == 1


def test_calls_that_are_not_planned_run_in_full_each_time(checks):
    (x, wd, wp, bd, bp, res), scale, _ = _host(1, c=6)
    cases = [
        ((x, wd, wp), {}),  # host operands
        ((_dev(x), _dev(wd), _dev(wp)), {"scale": scale}),  # a host scale on a device call
    ]
    for args, kwargs in cases:
        for _ in range(2):
            blocks.depthwise_pointwise(*args, padding=1, algorithm="fused", **kwargs)
    assert checks[0] == 4 and dw_pw_plan.stats()["plans"] == 0
    # x also as the residual (C = K, stride 1): overlapping slots are not recorded, each call is right
    (x, wd, wp, *_), _, _ = _host(2, c=6, k=6)
    ref = blocks.reference_depthwise_pointwise(x, wd, wp, padding=1, residual=x)  # a check of its own
    dx = _dev(x)
    for _ in range(2):
        y = blocks.depthwise_pointwise(dx, _dev(wd), _dev(wp), padding=1, residual=dx, algorithm="fused")
        assert float(np.abs(runtime.to_host(y).astype(np.float64) - ref).max()) < 16 * 2.0**-11 * np.abs(ref).max()
    assert checks[0] == 4 + 1 + 2 and dw_pw_plan.stats()["plans"] == 0


def test_the_table_is_bounded_and_dropped_by_reset(monkeypatch):
    monkeypatch.setattr(dw_pw_plan, "MAX_PLANS", 2)
    before = dw_pw_plan.stats()
    (x, wd, wp, *_), _, _ = _host(3)
    dev = [_dev(a) for a in (x, wd, wp)]
    for padding in (0, 1, 2):
        blocks.depthwise_pointwise(*dev, padding=padding, algorithm="fused")
    stats = dw_pw_plan.stats()
    assert (stats["plans"], stats["built"] - before["built"], stats["dropped"] - before["dropped"]) == (2, 3, 1)
    convlab.reset()
    assert dw_pw_plan.stats()["plans"] == 0


def test_a_failing_thin_launch_falls_back_to_the_full_path(monkeypatch, checks):
    (x, wd, wp, *_), _, _ = _host(4)
    dev = [_dev(a) for a in (x, wd, wp)]
    want = runtime.to_host(blocks.depthwise_pointwise(*dev, padding=1, algorithm="fused"))
    (plan,) = dw_pw_plan._table().values()
    plan.thin = True

    def fails(self, operands, bases, stream):
        raise RuntimeError("cuLaunchKernel failed")
    monkeypatch.setattr(launch.Launch, "replay", fails)
    with pytest.warns(RuntimeWarning, match="thin kernel launch failed"):
        y = blocks.depthwise_pointwise(*dev, padding=1, algorithm="fused")
    np.testing.assert_array_equal(runtime.to_host(y), want)
    assert checks[0] == 2 and runtime.context.current().store("launch").get("thin_off")


@pytest.mark.parametrize("cl", [False, True])
def test_auto_times_both_ways_through_their_replayed_calls(cl, monkeypatch, checks):
    """Each way is timed as a caller runs it: its first call checks and records, the timed ones replay
    (host operands copied once, a channels-last x and residual viewed in their layout)."""
    gpu = dataclasses.replace(runtime.target(), simulator=False)
    monkeypatch.setattr(runtime, "target", lambda: gpu)
    timed = []

    def time_ms(fn, repeat=20, **kwargs):
        before = checks[0]
        fn()  # warm-up: the way's first call
        timed.append(checks[0] - before)
        before = checks[0]
        fn()
        timed.append(checks[0] - before)
        return [1.0] if len(timed) == 2 else [2.0]  # fused 1 ms, separate 2 ms
    monkeypatch.setattr(runtime, "time_ms", time_ms)
    (x, wd, wp, bd, bp, res), _, _ = _host(5)
    if cl:
        x, res = (np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) for a in (x, res))
    text = blocks.explain_depthwise_pointwise(x, wd, wp, bd, bp, padding=1, residual=res)
    assert "runs fused" in text and "fused 1.0000 ms, separate 2.0000 ms" in text
    assert timed == [1, 0, 1, 0]  # each way checked once, then replayed


@pytest.mark.parametrize("cl", [False, True])
def test_the_separate_form_replays_both_convolutions_plans(cl, monkeypatch):
    """A repeated separate-form call replays conv2d's own plans of its two convolutions
    (convlab.ops.bound.BoundCall: the op's key, the op itself not called), with the first call's result."""
    from convlab import ops
    from convlab.call import plan

    (x, wd, wp, bd, bp, res), _, _ = _host(1)
    args = [_dev(a, cl) for a in (x, wd, wp)] + [_dev(bd), _dev(bp)]
    kw = dict(KW, residual=_dev(res, cl), algorithm="separate")
    first = runtime.to_host(blocks.depthwise_pointwise(*args, **kw))
    built, replayed = plan.stats()["built"], plan.stats()["replayed"]
    monkeypatch.setattr(ops, "conv2d", lambda *a, **k: pytest.fail("the op ran: BoundCall's key missed"))
    again = runtime.to_host(blocks.depthwise_pointwise(*args, **kw))
    assert plan.stats()["built"] == built and plan.stats()["replayed"] == replayed + 2
    np.testing.assert_array_equal(again, first)
