"""Launch plans (convlab.call.plan), the launch module's recording/replay and the caller's stream.

Device operands (Numba device arrays) take the planned path; tiny problems keep the simulator fast.
"""
import numpy as np
import pytest

import convlab
from convlab import reference, runtime
from convlab.runtime import launch
from convlab.call import plan
from convlab.plugin import registry
from convlab.measure import rel_error, tolerance
from convlab.runtime import cuda


def rand(*shape, dtype=np.float32, seed=None):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def dev(*shape, dtype=np.float32):
    return runtime.to_device(rand(*shape, dtype=dtype))


@pytest.fixture(autouse=True)
def fresh_plans():
    plan.clear()
    yield
    plan.clear()


def built_replayed():
    s = plan.stats()
    return s["built"], s["replayed"]


def test_same_signature_reuses_the_plan():
    x, w = dev(1, 2, 5, 5), dev(3, 2, 3, 3)
    before = built_replayed()
    convlab.conv2d(x, w, padding=1)
    key = next(reversed(plan._table().plans))
    first = plan._table().plans[key]
    convlab.conv2d(dev(1, 2, 5, 5), dev(3, 2, 3, 3), padding=1)
    after = built_replayed()
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)
    assert plan._table().plans[key] is first and len(plan._table().plans) == 1


CHANGES = {
    "shape": lambda: ((dev(1, 2, 6, 5), dev(3, 2, 3, 3)), {"padding": 1}),
    "dtype": lambda: ((dev(1, 2, 5, 5, dtype=np.float64), dev(3, 2, 3, 3, dtype=np.float64)), {"padding": 1}),
    "option": lambda: ((dev(1, 2, 5, 5), dev(3, 2, 3, 3)), {"padding": 1, "stride": 2}),
    "option type": lambda: ((dev(1, 2, 5, 5), dev(3, 2, 3, 3)), {"padding": (1, 1)}),
    "algorithm": lambda: ((dev(1, 2, 5, 5), dev(3, 2, 3, 3)), {"padding": 1, "algorithm": "direct"}),
    "workspace limit": lambda: ((dev(1, 2, 5, 5), dev(3, 2, 3, 3)), {"padding": 1, "workspace_limit": 0}),
    "bias": lambda: ((dev(1, 2, 5, 5), dev(3, 2, 3, 3), dev(3)), {"padding": 1}),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_any_change_of_signature_builds_a_new_plan(change):
    convlab.conv2d(dev(1, 2, 5, 5), dev(3, 2, 3, 3), padding=1)
    args, kwargs = CHANGES[change]()
    before = built_replayed()
    convlab.conv2d(*args, **kwargs)
    after = built_replayed()
    assert after == (before[0] + 1, before[1]) and len(plan._table().plans) == 2


def test_alignment_is_part_of_the_signature():
    """Kernels choose 16-byte loads and stores by their operands' alignment (tensor_core's epilogue,
    its NCHW read): a view one element off a planned operand's alignment builds a plan of its own."""
    from convlab.call import operands
    base = runtime.to_device(rand(2 * 2 * 5 * 5 + 4))
    aligned, off = base[:100].reshape(2, 2, 5, 5), base[1:101].reshape(2, 2, 5, 5)
    assert operands.signature(aligned) != operands.signature(off)
    w = dev(3, 2, 3, 3)
    convlab.conv2d(aligned, w, padding=1)
    before = built_replayed()
    got = runtime.to_host(convlab.conv2d(off, w, padding=1))
    assert built_replayed() == (before[0] + 1, before[1])
    problem = convlab.make_problem("forward", 2, 2, 5, 5, 3, 3, 3, padding=1)
    want = reference.forward(problem, runtime.to_host(off).astype(np.float64), runtime.to_host(w).astype(np.float64))
    assert rel_error(got, want) < 1e-5


def test_strides_are_part_of_the_signature():
    """A non-contiguous operand of a planned shape is not replayed: it gets the full path's error."""
    convlab.conv2d(dev(1, 2, 5, 5), dev(3, 2, 3, 3))
    strided = runtime.to_device(rand(1, 2, 5, 10))[:, :, :, ::2]
    for _ in range(2):
        with pytest.raises(ValueError, match="x is a non-contiguous device array"):
            convlab.conv2d(strided, dev(3, 2, 3, 3))


@pytest.mark.parametrize("bad, error", [
    ({"bias": "wrong bias"}, "bias must have shape"),
    ({"out": "wrong out"}, "out must have shape"),
    ({"groups": True}, "groups must be an int"),
    ({"algorithm": "nope"}, "nope"),
])
def test_a_bad_argument_raises_the_same_error_every_call(bad, error):
    x, w = dev(1, 2, 5, 5), dev(3, 2, 3, 3)
    convlab.conv2d(x, w, padding=1)  # a plan exists for the good signature
    kwargs = {"padding": 1}
    name, = bad
    kwargs[name] = {"bias": dev(4), "out": dev(1, 3, 4, 4), "groups": True, "algorithm": "nope"}[name]
    messages = []
    for _ in range(2):
        with pytest.raises((ValueError, TypeError, KeyError), match=error) as info:
            convlab.conv2d(x, w, **kwargs)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


OPS = {
    "conv2d": lambda rng: ((rng(1, 4, 5, 5), rng(4, 2, 3, 3), rng(4)),
                           {"padding": 1, "stride": (1, 2), "groups": 2}, (1, 4, 5, 3)),
    "conv2d_backward_data": lambda rng: ((rng(1, 4, 5, 3), rng(4, 2, 3, 3), (1, 4, 5, 5)),
                                         {"padding": 1, "stride": (1, 2), "groups": 2}, (1, 4, 5, 5)),
    "conv2d_backward_weight": lambda rng: ((rng(1, 4, 5, 5), rng(1, 4, 5, 3), (4, 2, 3, 3)),
                                           {"padding": 1, "stride": (1, 2), "groups": 2}, (4, 2, 3, 3)),
    "conv_transpose2d": lambda rng: ((rng(1, 4, 3, 3), rng(4, 1, 3, 3), rng(2)),
                                     {"padding": 1, "stride": 2, "output_padding": 1, "groups": 2},
                                     (1, 2, 6, 6)),
}


def _plugins_for(op_name):
    args, kwargs, _ = OPS[op_name](lambda *s: rand(*s))
    prob = convlab.problem_for(op_name, *args, **kwargs)
    return [p.name for p in registry.plugins(prob.op) if registry.verdict(p, prob)]


@pytest.mark.parametrize("op_name", sorted(OPS))
def test_replayed_results_equal_fresh_results_on_new_inputs(op_name):
    """Per plugin: record on one input, replay on new random inputs into a NaN-poisoned out; equal to
    a fresh full-path run (plans cleared) and to the float64 reference."""
    op = getattr(convlab, op_name)
    for name in _plugins_for(op_name):
        plan.clear()
        host_args, kwargs, out_shape = OPS[op_name](lambda *s: rand(*s))
        op(*[runtime.to_device(a) if isinstance(a, np.ndarray) else a for a in host_args],
           algorithm=name, out=runtime.full(out_shape, np.nan, np.float32), **kwargs)
        host_args, _, _ = OPS[op_name](lambda *s: rand(*s))
        devs = [runtime.to_device(a) if isinstance(a, np.ndarray) else a for a in host_args]
        out = runtime.full(out_shape, np.nan, np.float32)
        before = built_replayed()
        assert op(*devs, algorithm=name, out=out, **kwargs) is out
        assert built_replayed()[1] == before[1] + 1, name  # replayed, not rebuilt
        replayed = out.copy_to_host()
        plan.clear()
        fresh = op(*devs, algorithm=name, **kwargs).copy_to_host()
        np.testing.assert_array_equal(replayed, fresh, err_msg=name)
        prob = convlab.problem_for(op_name, *host_args, **kwargs)
        arrays = [a for a in host_args if isinstance(a, np.ndarray)]
        bias = arrays[2] if len(arrays) == 3 else None
        want = reference.solve(prob, *[a.astype(np.float64) for a in arrays[:2]], bias)
        assert rel_error(replayed, want) <= tolerance(prob, np.finfo(np.float32).eps), name


def test_a_plugin_can_opt_out_of_replay(monkeypatch):
    monkeypatch.setattr(registry.get("direct"), "replayable", False, raising=False)
    x, w = dev(1, 2, 5, 5), dev(3, 2, 3, 3)
    for _ in range(2):
        convlab.conv2d(x, w, algorithm="direct")
    assert plan.stats()["plans"] == 0


def test_the_plan_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(plan, "MAX_PLANS", 2)
    for h in (5, 6, 7):
        convlab.conv2d(dev(1, 2, h, 5), dev(3, 2, 3, 3))
    assert plan.stats()["plans"] == 2


def test_a_host_state_change_rebuilds_the_plan():
    """Setting aside the plugin a plan runs (its kernel raised on that problem) drops the plan: the
    next call records a new one, with another plugin."""
    from convlab import autotune

    x, w = dev(1, 2, 5, 5), dev(3, 2, 3, 3)
    convlab.conv2d(x, w)
    (found,) = plan._table().plans.values()
    name = found.candidate.plugin.name
    problem = convlab.problem_for("conv2d", x.copy_to_host(), w.copy_to_host())
    with pytest.warns(RuntimeWarning, match=name):
        registry.set_aside(name, problem, RuntimeError("test"))
    try:
        before = built_replayed()
        convlab.conv2d(x, w)
        assert built_replayed() == (before[0] + 1, before[1])
        (rebuilt,) = plan._table().plans.values()
        assert rebuilt.candidate.plugin.name != name
    finally:
        registry.clear_set_aside(name)
        autotune.clear_cache(memory=True, disk=False)  # the decision re-made while it was set aside


def test_a_precision_mode_change_rebuilds_the_plan():
    """float32 precision "high" lets TF32 plugins take float32: a plan made under "highest" is not
    replayed under "high", and one made under "high" not after returning to "highest"."""
    from convlab.runtime import settings

    x, w = dev(1, 2, 5, 5), dev(3, 2, 3, 3)
    convlab.conv2d(x, w)
    before = built_replayed()
    with settings.float32_precision("high"):
        convlab.conv2d(x, w)
        assert built_replayed() == (before[0] + 1, before[1])
        convlab.conv2d(x, w)
        assert built_replayed() == (before[0] + 1, before[1] + 1)  # replayed under "high"
    convlab.conv2d(x, w)
    assert built_replayed()[0] == before[0] + 2


def _same_stream(seen, stream) -> bool:
    """``seen`` is ``stream`` itself or its CUstream handle (what a thin replay receives)."""
    from convlab.runtime.thin import stream_handle

    if seen is stream:
        return True
    try:
        return int(seen) == stream_handle(stream) != 0
    except (TypeError, ValueError):
        return False


def test_stream_argument_is_used_for_every_launch(monkeypatch):
    """Two simulator streams: each call's launches (recorded and replayed) run on the stream given."""
    seen = []
    original_launch, original_replay = launch.launch, launch.Launch.replay

    def spy_launch(kernel, grid, block, args, *, stream=None, shared=0):
        seen.append(launch.ambient_stream() if stream is None else stream)
        original_launch(kernel, grid, block, args, stream=stream, shared=shared)

    def spy_replay(self, operands, bases, stream):
        seen.append(stream)
        original_replay(self, operands, bases, stream)

    monkeypatch.setattr(launch, "launch", spy_launch)
    monkeypatch.setattr(launch.Launch, "replay", spy_replay)
    s1, s2 = cuda.stream(), cuda.stream()
    x, w = rand(1, 2, 5, 5), rand(3, 2, 3, 3)
    want = reference.forward(convlab.problem_for("conv2d", x, w), x, w)
    for stream in (s1, s2, s2, s1):
        seen.clear()
        y = convlab.conv2d(runtime.to_device(x), runtime.to_device(w), stream=stream)
        # the stream object, or (a thin replay on a GPU) its driver handle
        assert seen and all(_same_stream(s, stream) for s in seen), seen
        assert rel_error(y.copy_to_host(), want) < 1e-5
    assert launch.ambient_stream() == 0  # restored after the call
    with pytest.raises(TypeError, match="stream must be"):
        convlab.conv2d(runtime.to_device(x), runtime.to_device(w), stream="default")


def test_recorded_operand_views_are_rebased_on_replay():
    """A kernel launched on a view at an offset inside an operand replays on the new operand's view."""
    @runtime.jit
    def add_one(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] += 1

    base = runtime.to_device(np.zeros(8, np.float32))
    spans = [(runtime.device_pointer(base), base.size * 4)]
    with launch.recording(spans) as rec:
        add_one[1, 8](base[3:7])
    assert len(rec) == 1 and rec[0].views[0][1:3] == (0, 12)
    other = runtime.to_device(np.arange(8, dtype=np.float32))
    rec[0].replay([other], [runtime.device_pointer(other)], 0)
    np.testing.assert_array_equal(other.copy_to_host(), [0, 1, 2, 4, 5, 6, 7, 7])
    np.testing.assert_array_equal(base.copy_to_host(), [0, 0, 0, 1, 1, 1, 1, 0])


def test_a_new_auto_decision_rebuilds_the_plan():
    """Forgetting the autotuner's remembered choice invalidates the "auto" plans made from it."""
    from convlab import autotune

    x, w = dev(1, 2, 5, 5), dev(3, 2, 3, 3)
    convlab.conv2d(x, w)
    convlab.conv2d(dev(1, 2, 6, 6), w)  # another decision leaves the first plan valid
    before = built_replayed()
    convlab.conv2d(x, w)
    assert built_replayed() == (before[0], before[1] + 1)
    autotune.clear_cache(memory=True, disk=False)
    convlab.conv2d(x, w)
    assert built_replayed() == (before[0] + 1, before[1] + 1)


def test_a_failing_thin_replay_falls_back_to_the_full_path(monkeypatch):
    """On a GPU, a thin launch that raises switches the device to Numba's launch (the context's
    launch store, until convlab.reset()), with a warning, and the call still returns the full path's
    result (simulated: a plan marked thin that raises)."""
    from convlab.runtime import context

    x, w = rand(1, 2, 5, 5), rand(3, 2, 3, 3)
    convlab.conv2d(runtime.to_device(x), runtime.to_device(w))
    found, = plan._table().plans.values()
    monkeypatch.setattr(found, "thin", True)

    def broken(*args):
        raise RuntimeError("cuLaunchKernel failed: simulated")

    monkeypatch.setattr(found, "replay", broken)
    store = context.current().store("launch")
    monkeypatch.setitem(store, "thin_off", False)  # the thin path on (and the flag removed after)
    with pytest.warns(RuntimeWarning, match="thin kernel launch failed"):
        y = convlab.conv2d(runtime.to_device(x), runtime.to_device(w))
    assert store["thin_off"] is True and not launch.thin_enabled()
    want = reference.forward(convlab.problem_for("conv2d", x, w), x, w)
    assert rel_error(y.copy_to_host(), want) < 1e-5


def test_a_replay_whose_out_overlaps_an_input_takes_the_full_path_and_raises():
    """The replay checks ``out`` against every input with the extents the key fixes: an ``out`` that
    shares memory with x (or bias) is not replayed, and the full path names the overlap; inputs that
    overlap each other are only read, so that call replays."""
    buf = runtime.to_device(rand(2 * 50 + 3))
    w, bias = dev(2, 2, 3, 3), dev(2)
    x, out = buf[:50].reshape(1, 2, 5, 5), buf[50:100].reshape(1, 2, 5, 5)
    convlab.conv2d(x, w, bias, padding=1, out=out, algorithm="direct")  # records the plan
    assert plan.extents_of(next(reversed(plan._table().plans))[1]) == [200, 144, 8, 200]
    replayed = plan.stats()["replayed"]
    late = buf[6:56].reshape(1, 2, 5, 5)  # overlaps x's first 4 elements (same alignments as before)
    with pytest.raises(ValueError, match="out overlaps x"):
        convlab.conv2d(buf[52:102].reshape(1, 2, 5, 5), w, bias, padding=1, out=late, algorithm="direct")
    other = runtime.to_device(rand(52))  # bias inside out: the same
    with pytest.raises(ValueError, match="out overlaps bias"):
        convlab.conv2d(dev(1, 2, 5, 5), w, other[4:6], padding=1, out=other[2:].reshape(1, 2, 5, 5),
                       algorithm="direct")
    assert plan.stats()["replayed"] == replayed  # each overlap was seen before any launch
    both = runtime.to_device(rand(50))  # x and w overlap, out apart: replayed, right result
    x2, w2 = both.reshape(1, 2, 5, 5), both[4:40].reshape(2, 2, 3, 3)
    out2 = runtime.to_device(np.full(52, np.nan, np.float32))[2:].reshape(1, 2, 5, 5)
    convlab.conv2d(x2, w2, bias, padding=1, out=out2, algorithm="direct")
    assert plan.stats()["replayed"] == replayed + 1
    hx, hw, hb = x2.copy_to_host(), w2.copy_to_host(), bias.copy_to_host()
    ref = reference.solve(convlab.problem_for("conv2d", hx, hw, hb, padding=1), hx, hw, hb)
    np.testing.assert_allclose(out2.copy_to_host(), ref, rtol=1e-5, atol=1e-5)


def test_the_tuner_times_a_candidates_recorded_replays_and_leaves_the_plans_alone(monkeypatch):
    """measure.time_candidate (the autotuner's clock) records the candidate's launches once
    (plan.record, as the public op records a call) and times replays of that plan, as a user's planned
    calls run; a ``plans`` dict keeps the recording between calls (the tuner's rounds). The current
    device's plan table, the user's own plans, is not touched."""
    from convlab import measure

    x, w = dev(1, 2, 5, 5), dev(3, 2, 3, 3)
    convlab.conv2d(x, w, padding=1, algorithm="direct")  # the user's plans
    convlab.conv2d(x, w, padding=1, algorithm="im2col")
    mine = list(plan._table().plans.items())
    monkeypatch.setattr(runtime, "time_ms", lambda fn, warmup, repeat: [fn() is not None and 1.0
                                                                         for _ in range(warmup + repeat)])
    problem = convlab.problem_for("conv2d", x.copy_to_host(), w.copy_to_host(), padding=1)
    im2col = registry.get("im2col")
    cand = registry.Candidate(im2col, registry.safe_configs(im2col, problem)[-1])
    runs, replays = [], []
    real_run, real_replay = im2col.run, launch.Launch.replay
    monkeypatch.setattr(im2col, "run", lambda *a, **k: (runs.append(1), real_run(*a, **k))[1])
    monkeypatch.setattr(launch.Launch, "replay", lambda self, *a: (replays.append(self),
                                                                   real_replay(self, *a))[1])
    out = runtime.to_device(np.full((1, 3, 5, 5), np.nan, np.float32))
    stats = plan.stats()
    kept = {}
    times = measure.time_candidate(cand, problem, x, w, None, out, workspace_limit=2**30, warmup=1,
                                   repeat=2, plans=kept)
    assert times == [1.0, 1.0, 1.0]
    assert len(runs) == 1 and list(kept) == [cand.label]  # recorded once, then replayed
    launches = len(kept[cand.label].launches)
    assert launches >= 1 and len(replays) == 3 * launches
    measure.time_candidate(cand, problem, x, w, None, out, workspace_limit=2**30, warmup=0, repeat=1,
                           plans=kept)
    assert len(runs) == 1 and len(replays) == 4 * launches  # the same plan again: no new recording
    assert plan.stats() == stats and list(plan._table().plans.items()) == mine
    hx, hw = x.copy_to_host(), w.copy_to_host()
    np.testing.assert_allclose(out.copy_to_host(), reference.solve(problem, hx, hw), rtol=1e-4, atol=1e-4)


def test_a_dgrad_with_more_output_padding_than_stride_is_called_through_conv_transpose2d():
    """A conv_transpose2d whose output padding is at least its stride (allowed below the dilation) gives
    a dgrad that conv2d_backward_data refuses; ops.call_problem (the benchmarks' op column, the
    conformance checks) takes conv_transpose2d for it."""
    from convlab.ops import call_problem

    x, w = rand(1, 2, 3, 3), rand(2, 2, 3, 3)
    y = convlab.conv_transpose2d(x, w, stride=1, output_padding=1, dilation=2, algorithm="direct")
    problem = convlab.problem_for("conv_transpose2d", x, w, stride=1, output_padding=1, dilation=2)
    cand = registry.Candidate(registry.get("direct"), registry.safe_configs(registry.get("direct"), problem)[0])
    out = runtime.to_device(np.full(y.shape, np.nan, np.float32))
    got = call_problem(problem, runtime.to_device(x), runtime.to_device(w), None,
                       algorithm=(cand.plugin.name, cand.config), out=out, workspace_limit=2**30)
    assert got is out
    np.testing.assert_allclose(out.copy_to_host(), y, rtol=1e-5, atol=1e-5)
