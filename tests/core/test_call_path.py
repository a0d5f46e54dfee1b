"""What a replayed call does and does not do: launches per call, no plugin or pool work, tensors that
require grad, and plans owning their workspace.

Launches are counted by wrapping ``convlab.runtime.launch.Launch.replay``; torch CUDA tensors are the
stand-ins of convlab.testing.torch_standin (the plan recorded on Numba arrays is adopted for them).
"""
import sys

import numpy as np
import pytest

import convlab
from convlab import reference, runtime
from convlab.runtime import launch, scratch
from convlab.call import plan
from convlab.algorithms.implicit_gemm import gathers
from convlab.measure import rel_error, tolerance
from convlab.plugin import registry
from convlab.testing.torch_standin import Tensor, adopt_plan, fake_torch



def split(prob):
    """(("implicit_gemm", config name), splits): a config of this device that splits K on ``prob`` (it
    owns a workspace) if there is one, else the first; the tile lists of the simulator and a GPU differ."""
    plugin, limit = registry.get("implicit_gemm"), convlab.get_workspace_limit()
    configs = plugin.configs(prob)
    splitting = [c for c in configs if plugin.workspace_bytes(prob, c, limit) > 0]
    return ("implicit_gemm", (splitting or configs)[0].name), bool(splitting)


def rand(*shape, seed=None):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def dev(*shape):
    return runtime.to_device(rand(*shape))


@pytest.fixture(autouse=True)
def fresh_plans():
    plan.clear()
    yield
    plan.clear()


@pytest.fixture
def count_launches(monkeypatch):
    """Counts replayed launches; plugin ``run`` and the scratch pool must not be reached on replay."""
    counted = []
    real = launch.Launch.replay
    monkeypatch.setattr(launch.Launch, "replay", lambda self, *a: (counted.append(self), real(self, *a)))
    return counted


CALLS = {  # op: (call on device arrays, stride); 1x4x6x6 input, 4x4x3x3 weight
    "conv2d": lambda s: (convlab.conv2d, (dev(1, 4, 6, 6), dev(4, 4, 3, 3)), {"stride": s}),
    "conv2d_backward_data": lambda s: (convlab.conv2d_backward_data,
                                       (dev(1, 4, 6 // s, 6 // s), dev(4, 4, 3, 3), (1, 4, 6, 6)),
                                       {"stride": s, "padding": 1}),
    "conv2d_backward_weight": lambda s: (convlab.conv2d_backward_weight,
                                         (dev(1, 4, 6, 6), dev(1, 4, 6 // s, 6 // s), (4, 4, 3, 3)),
                                         {"stride": s, "padding": 1}),
    "conv_transpose2d": lambda s: (convlab.conv_transpose2d, (dev(1, 4, 3, 3), dev(4, 4, 3, 3)),
                                   {"stride": s, "padding": 1}),
}


def _problem(op_name, args, kwargs):
    options = {k: v for k, v in kwargs.items() if k != "algorithm"}
    return convlab.problem_for(op_name, *[a.copy_to_host() if hasattr(a, "copy_to_host") else a
                                          for a in args], **options)


def _minimum_launches(op_name, args, kwargs):
    """implicit_gemm's launches for the problem: one per GEMM (dgrad: per stride phase)."""
    prob = _problem(op_name, args, kwargs)
    return 1 if prob.op == "wgrad" else len(gathers.gathers(prob))


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("op_name", sorted(CALLS))
def test_a_replay_issues_only_the_kernels(op_name, stride, count_launches, monkeypatch):
    """Replayed: no rebuild, no plugin run (so no workspace lending or zeroing), no output allocation
    when ``out`` is given; exactly the kernel launches (implicit GEMM: one, a strided dgrad one per
    stride phase), on split-K workspaces too."""
    fn, args, kwargs = CALLS[op_name](stride)
    kwargs = dict(kwargs, padding=kwargs.get("padding", 1))
    kwargs["algorithm"] = split(_problem(op_name, args, kwargs))[0]
    first_out = runtime.full(_problem(op_name, args, kwargs).operand_shapes[2], np.nan, np.float32)
    fn(*args, **kwargs, out=first_out)
    built = plan.stats()["built"]
    recorded = len(count_launches)
    assert recorded == 0  # recording launches through Numba, not through replay
    plugin = registry.get("implicit_gemm")
    monkeypatch.setattr(type(plugin), "run", lambda *a, **k: pytest.fail("replay ran the plugin"))
    monkeypatch.setattr(scratch, "output", lambda *a, **k: pytest.fail("out= given: no pooled output"))
    fresh = [runtime.to_device(rand(*a.shape, seed=7)) if hasattr(a, "copy_to_host") else a for a in args]
    out = runtime.full(_problem(op_name, args, kwargs).operand_shapes[2], np.nan, np.float32)
    fn(*fresh, **kwargs, out=out)
    assert plan.stats()["built"] == built
    assert len(count_launches) == _minimum_launches(op_name, args, kwargs) >= 1
    assert not np.isnan(out.copy_to_host()).any()  # every output element written by the replay


def test_a_tensor_that_requires_grad_replays_the_plan(count_launches, monkeypatch):
    """torch tensors with requires_grad=True take the same plan as without: the key reads no grad
    state, nothing is rebuilt, nothing is detached on the thin path, one launch per call."""
    monkeypatch.setitem(sys.modules, "torch", fake_torch())
    for op_name in ("conv2d", "conv2d_backward_data"):
        plan.clear()
        fn, args, kwargs = CALLS[op_name](1)
        kwargs = dict(kwargs, padding=1, algorithm="implicit_gemm")
        fn(*args, **kwargs)
        key = next(reversed(plan._table().plans))
        arrays = [a for a in args if hasattr(a, "copy_to_host")]
        shape_arg = [a for a in args if not hasattr(a, "copy_to_host")]
        adopt_plan(key, [Tensor(a.shape) for a in arrays])
        grads = [Tensor(a.shape, requires_grad=True) for a in arrays]
        monkeypatch.setattr(launch.Launch, "replay", lambda self, *a: count_launches.append(self))
        before, launched = plan.stats(), len(count_launches)
        for _ in range(3):
            fn(*grads, *shape_arg, **kwargs)
        after = plan.stats()
        assert after["built"] == before["built"] and after["replayed"] == before["replayed"] + 3
        assert len(count_launches) - launched == 3 and all(t.detached == 0 for t in grads)


def test_a_plan_owns_its_workspace():
    """A split-K plan's workspace is never lent to another call: an im2col call that reuses pooled
    buffers between two replays cannot overwrite its counters (the result stays exact), and the pool
    does not believe a plan's buffer is zeroed."""
    xi, wi = dev(1, 16, 4, 4), dev(8, 16, 3, 3)
    prob = convlab.problem_for("conv2d", xi.copy_to_host(), wi.copy_to_host(), padding=1)
    SPLIT, splits = split(prob)
    if not splits:
        pytest.skip("no implicit_gemm config of this device splits K on this problem")
    convlab.conv2d(xi, wi, padding=1, algorithm="im2col")  # leaves a large column buffer in the pool
    convlab.conv2d(dev(1, 16, 4, 4), dev(8, 16, 3, 3), padding=1, algorithm=SPLIT)  # records split-K
    assert any(rec.owned for p in plan._table().plans.values() for rec in p.launches)
    convlab.conv2d(xi, wi, padding=1, algorithm="im2col")  # replays: writes its whole column buffer
    x, w = rand(1, 16, 4, 4, seed=3), rand(8, 16, 3, 3, seed=4)
    for out in (None, runtime.full((1, 8, 4, 4), np.nan, np.float32)):  # replay, then a new plan
        got = convlab.conv2d(runtime.to_device(x), runtime.to_device(w), padding=1, algorithm=SPLIT,
                             out=out).copy_to_host()
        prob = convlab.problem_for("conv2d", x, w, padding=1)
        want = reference.solve(prob, x.astype(np.float64), w.astype(np.float64))
        assert rel_error(got, want) <= tolerance(prob, np.finfo(np.float32).eps)


def test_a_sub_batched_call_keeps_its_plan_and_counts_its_column_buffer_once(monkeypatch):
    """im2col under a small workspace limit runs several sub-batches on one column buffer: the plan
    holds that buffer once (not once per launch), so it is kept under a bound just above one buffer
    and the next call replays it instead of recording again on a new buffer."""
    x, w = dev(4, 2, 4, 4), dev(2, 2, 3, 3)
    col_bytes = 2 * 3 * 3 * 4 * 4 * 4  # C*R*S x P*Q floats of one image
    kwargs = {"padding": 1, "algorithm": "im2col", "workspace_limit": col_bytes}  # one image a batch
    convlab.conv2d(x, w, **kwargs)
    (only,) = plan._table().plans.values()
    launches = [rec for rec in only.launches if rec.owned]
    assert len(launches) >= 4 and only.held_bytes <= col_bytes  # four sub-batches, one buffer
    plan.clear()
    monkeypatch.setattr(plan, "MAX_HELD_BYTES", int(col_bytes * 1.5))
    convlab.conv2d(x, w, **kwargs)
    before = plan.stats()
    got = convlab.conv2d(x, w, **kwargs).copy_to_host()
    after = plan.stats()
    assert before["plans"] == 1 and after["built"] == before["built"]
    assert after["replayed"] == before["replayed"] + 1
    xh, wh = x.copy_to_host(), w.copy_to_host()
    prob = convlab.problem_for("conv2d", xh, wh, padding=1)
    want = reference.solve(prob, xh.astype(np.float64), wh.astype(np.float64))
    assert rel_error(got, want) <= tolerance(prob, np.finfo(np.float32).eps)


def test_a_call_whose_workspace_is_over_the_plan_bound_runs_unplanned_on_pooled_buffers(monkeypatch):
    """A workspace larger than plan.MAX_HELD_BYTES is not recorded (the plan could not be kept): the
    call runs unplanned and its column buffer goes back to the scratch pool for the next call."""
    x, w = dev(2, 2, 4, 4), dev(2, 2, 3, 3)
    monkeypatch.setattr(plan, "MAX_HELD_BYTES", 64)
    scratch.release()
    for _ in range(2):
        convlab.conv2d(x, w, padding=1, algorithm="im2col")
        assert plan.stats()["plans"] == 0 and scratch.held_bytes() > 64
    xh, wh = x.copy_to_host(), w.copy_to_host()
    got = convlab.conv2d(x, w, padding=1, algorithm="im2col").copy_to_host()
    prob = convlab.problem_for("conv2d", xh, wh, padding=1)
    want = reference.solve(prob, xh.astype(np.float64), wh.astype(np.float64))
    assert rel_error(got, want) <= tolerance(prob, np.finfo(np.float32).eps)


def test_plans_over_the_bound_are_dropped_oldest_first_and_counted(monkeypatch):
    """Two signatures whose plans each hold a column buffer of one size (two filters' K), under a bound
    that keeps one: the second plan drops the first (counted in stats()["dropped"]), and the first
    signature records again, dropping the second."""
    x, w1, w2 = dev(1, 2, 4, 4), dev(2, 2, 3, 3), dev(3, 2, 3, 3)
    kwargs = {"padding": 1, "algorithm": "im2col"}
    plan.clear()
    convlab.conv2d(x, w1, **kwargs)
    (first,) = plan._table().plans.values()
    monkeypatch.setattr(plan, "MAX_HELD_BYTES", first.held_bytes + 8)
    start = plan.stats()
    convlab.conv2d(x, w2, **kwargs)
    convlab.conv2d(x, w1, **kwargs)
    end = plan.stats()
    assert end["plans"] == 1 and end["held_limit"] == first.held_bytes + 8
    assert end["dropped"] - start["dropped"] == 2 and end["built"] - start["built"] == 2


def test_the_plan_bound_grows_with_the_device():
    """1/16 of a device's memory, never under the 512 MiB floor (the floor without a device)."""
    assert plan.held_bound(None) == plan.MAX_HELD_BYTES == 512 * 2**20
    assert plan.held_bound(4 * 2**30) == plan.MAX_HELD_BYTES
    assert plan.held_bound(80 * 10**9) == 5 * 10**9
    assert plan.held_limit() == plan.MAX_HELD_BYTES  # the simulator has no device memory to read
