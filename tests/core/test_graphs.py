"""CUDA graphs of launch plans (convlab.call.graphs): when a plan captures, launches, falls back and stops.

The rules run against a fake driver (the simulator has no graphs); the last test checks graph replays
on a GPU against the float64 reference."""
import logging
import threading
import types

import numpy as np
import pytest
from cuda.bindings import driver as _real  # the driver's own result codes (no GPU needed to read them)

import convlab
from convlab import reference, runtime
from convlab.call import graphs, plan

OK, ERROR = _real.CUresult.CUDA_SUCCESS, _real.CUresult.CUDA_ERROR_UNKNOWN


class FakeDriver:
    """The cuda.bindings calls convlab.call.graphs makes, logged; ``fail`` names one that returns an error."""

    def __init__(self, fail: str | None = None) -> None:
        self.calls, self.fail, self.capturing, self.graphs, self.alive = [], fail, False, 0, set()
        self.user_capture = False  # the call's own stream is being captured by the caller
        self.destroyed = []
        self.CUstreamCaptureStatus = types.SimpleNamespace(CU_STREAM_CAPTURE_STATUS_NONE=0)
        self.CUstream_flags = types.SimpleNamespace(CU_STREAM_NON_BLOCKING=1)
        self.CUstreamCaptureMode = types.SimpleNamespace(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL=2)

    def _ret(self, name, *values):
        self.calls.append(name)
        return (ERROR if name == self.fail else OK, *values)

    def cuStreamCreate(self, flags):
        return self._ret("cuStreamCreate", 0xCA9)

    def cuStreamBeginCapture(self, stream, mode):
        assert stream == 0xCA9 and mode == 2
        self.capturing = self.fail != "cuStreamBeginCapture"
        return self._ret("cuStreamBeginCapture")

    def cuStreamEndCapture(self, stream):
        self.capturing = False
        return self._ret("cuStreamEndCapture", "graph")

    def cuStreamIsCapturing(self, stream):
        return (OK, 1 if self.user_capture else 0)

    def cuGraphInstantiate(self, graph, flags):
        self.graphs += 1
        self.alive.add(self.graphs)
        return self._ret("cuGraphInstantiate", self.graphs)

    def cuGraphDestroy(self, graph):
        self.destroyed.append(graph)
        return self._ret("cuGraphDestroy")

    def cuGraphLaunch(self, exec_, stream):
        assert exec_ in self.alive
        self.launched = (exec_, stream)
        return self._ret("cuGraphLaunch")

    def cuGraphExecDestroy(self, exec_):
        self.alive.discard(exec_)
        return self._ret("cuGraphExecDestroy")


class FakeThin:
    """A thin launch: ``issue`` logs (bases, stream, whether the driver was capturing)."""

    def __init__(self, drv):
        self.drv, self.lock, self.issued = drv, threading.Lock(), []

    raises = None  # an exception class issue() raises (mid-capture)

    def issue(self, bases, stream):
        assert self.lock.locked()  # the capture holds every launch's lock
        self.issued.append((bases, stream, self.drv.capturing))
        if self.raises is not None:
            raise self.raises("a launch failed mid-capture")


@pytest.fixture
def fake(monkeypatch):
    drv = FakeDriver()
    monkeypatch.setattr(graphs, "_driver", lambda: drv)
    monkeypatch.setattr(graphs, "cu_stream", lambda s: ("stream", s))
    monkeypatch.setattr(graphs, "_local", threading.local())
    monkeypatch.setattr(graphs, "_enabled", [True])
    return drv


def test_a_graph_is_captured_once_the_same_addresses_repeat_and_then_launched(fake):
    thins = [FakeThin(fake), FakeThin(fake)]
    g = graphs.Graphs(thins)
    a, b = (1, 2, 0, 3), (5, 6, 0, 7)
    assert g.run(a, 9) is False  # first call: the thin path
    assert g.run(a, 9) is True  # the same addresses again: captured, then launched
    assert [t.issued for t in thins] == [[(a, 0xCA9, True)]] * 2
    assert fake.launched == (1, ("stream", 9))
    assert g.run(a, 4) is True and fake.launched == (1, ("stream", 4))  # no new capture
    assert fake.calls.count("cuStreamBeginCapture") == 1
    assert g.run(b, 4) is False  # other addresses: the thin path, the graph kept
    assert fake.alive == {1}
    assert g.run(b, 4) is True and fake.launched == (2, ("stream", 4))  # rebuilt for them
    assert fake.alive == {2}  # the old graph destroyed
    assert g.run(a, 4) is False  # back to a: the thin path until a repeats


def test_one_launch_no_graph_and_graphs_off_no_graph(fake):
    one = graphs.Graphs([FakeThin(fake)])
    assert not any(one.run((1, 2, 0, 3), 0) for _ in range(4))
    graphs.set_enabled(False)
    two = graphs.Graphs([FakeThin(fake), FakeThin(fake)])
    assert not any(two.run((1, 2, 0, 3), 0) for _ in range(4))
    assert fake.calls == []


def test_addresses_that_keep_changing_stop_capturing(fake):
    g = graphs.Graphs([FakeThin(fake), FakeThin(fake)])
    for i in range(3 * graphs.MAX_CAPTURES):
        key = (i, 0, 0, 1)
        g.run(key, 0)
        g.run(key, 0)
    assert fake.calls.count("cuStreamBeginCapture") == graphs.MAX_CAPTURES
    assert g.run((0, 0, 0, 9), 0) is False and g.run((0, 0, 0, 9), 0) is False


@pytest.mark.parametrize("fail", ["cuStreamBeginCapture", "cuStreamEndCapture", "cuGraphInstantiate"])
def test_a_failed_capture_keeps_the_thin_path_for_that_plan(fake, fail, caplog):
    fake.fail = fail
    thins = [FakeThin(fake), FakeThin(fake)]
    g = graphs.Graphs(thins)
    with caplog.at_level(logging.WARNING, logger="convlab.call.graphs"):
        assert g.run((1, 2, 0, 3), 0) is False and g.run((1, 2, 0, 3), 0) is False
    assert f"{fail} failed" in caplog.text
    assert not fake.capturing  # a begun capture is ended
    assert all(not t.lock.locked() for t in thins)
    assert g.run((1, 2, 0, 3), 0) is False and fake.calls.count("cuStreamBeginCapture") == 1
    assert "cuGraphLaunch" not in fake.calls


@pytest.mark.skipif(runtime.SIMULATOR, reason="CUDA graphs need a GPU")
def test_graph_replays_read_new_values_and_follow_new_operands():
    """im2col's plan (unfold + GEMM: two launches) on a GPU: the same operands three times with new
    values written into them each time, then other operands; every result against float64."""
    plan.clear()
    before = dict(graphs.stats)
    rng = np.random.default_rng(5)
    x = runtime.to_device(rng.standard_normal((2, 8, 9, 9)).astype(np.float32))
    w = runtime.to_device(rng.standard_normal((16, 8, 3, 3)).astype(np.float32))
    out = runtime.to_device(np.full((2, 16, 9, 9), np.nan, np.float32))
    for _ in range(4):
        hx = rng.standard_normal((2, 8, 9, 9)).astype(np.float32)
        hw = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
        x.copy_to_device(hx)
        w.copy_to_device(hw)
        convlab.conv2d(x, w, padding=1, out=out, algorithm="im2col")
        ref = reference.solve(convlab.problem_for("conv2d", hx, hw, padding=1), hx, hw)
        np.testing.assert_allclose(out.copy_to_host(), ref, rtol=1e-4, atol=1e-4)
    assert len(plan._table().plans[next(reversed(plan._table().plans))].launches) >= 2
    if graphs.enabled():
        assert graphs.stats["captured"] > before["captured"]
        assert graphs.stats["launched"] >= before["launched"] + 2
    x2 = runtime.to_device(rng.standard_normal((2, 8, 9, 9)).astype(np.float32))
    y = convlab.conv2d(x2, w, padding=1, algorithm="im2col")
    hx2 = x2.copy_to_host()
    ref = reference.solve(convlab.problem_for("conv2d", hx2, hw, padding=1), hx2, hw)
    np.testing.assert_allclose(y.copy_to_host(), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_launch_failing_mid_capture_ends_the_capture_and_frees_everything(fake, error, caplog):
    thins = [FakeThin(fake), FakeThin(fake)]
    thins[1].raises = error
    g = graphs.Graphs(thins)
    g.run((1, 2, 0, 3), 0)
    if error is KeyboardInterrupt:
        with pytest.raises(KeyboardInterrupt):
            g.run((1, 2, 0, 3), 0)
    else:
        with caplog.at_level(logging.WARNING, logger="convlab.call.graphs"):
            assert g.run((1, 2, 0, 3), 0) is False
        assert "capture failed" in caplog.text and not g.usable
    assert not fake.capturing and fake.destroyed == ["graph"]  # ended, and its graph destroyed
    assert all(not t.lock.locked() for t in thins) and "cuGraphLaunch" not in fake.calls


def test_a_call_on_a_stream_being_captured_takes_the_thin_path(fake):
    """Inside the caller's own capture (torch.cuda.graph) no graph is launched or made: the thin
    launches are what the caller's capture records."""
    g = graphs.Graphs([FakeThin(fake), FakeThin(fake)])
    fake.user_capture = True
    assert g.run((1, 2, 0, 3), 0) is False and g.run((1, 2, 0, 3), 0) is False
    assert "cuStreamBeginCapture" not in fake.calls
    fake.user_capture = False
    assert g.run((1, 2, 0, 3), 0) is True  # the same addresses kept repeating: captured now
    fake.user_capture = True
    assert g.run((1, 2, 0, 3), 0) is False and fake.calls.count("cuGraphLaunch") == 1


def test_a_failed_graph_launch_turns_graphs_off_for_that_plan_only(fake, caplog):
    g = graphs.Graphs([FakeThin(fake), FakeThin(fake)])
    fake.fail = "cuGraphLaunch"
    with caplog.at_level(logging.WARNING, logger="convlab.call.graphs"):
        assert g.run((1, 2, 0, 3), 0) is False and g.run((1, 2, 0, 3), 0) is False
    assert "launch failed" in caplog.text and not g.usable
    assert g.run((1, 2, 0, 3), 0) is False and fake.calls.count("cuGraphLaunch") == 1


def test_graphs_off_inside_a_block_then_as_they_were(fake):
    for before in (True, False):
        graphs.set_enabled(before)
        with graphs.disabled():
            assert not graphs.enabled()
            assert graphs.Graphs([FakeThin(fake), FakeThin(fake)]).run((1, 2, 0, 3), 0) is False
        assert graphs.enabled() is before
