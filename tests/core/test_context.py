"""The per-device context: reset, thread safety, and failures scoped to what failed."""
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import convlab
from convlab import reference, runtime
from convlab.call import plan
from convlab.plugin import registry
from convlab.problem import make_problem
from convlab.runtime import context, scratch
from convlab.runtime.settings import DEFAULT_WORKSPACE_LIMIT


def _operands(shape_x, shape_w, seed):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape_x).astype(np.float32), rng.standard_normal(shape_w).astype(np.float32)


def test_reset_drops_plans_pools_and_decisions():
    x, w = _operands((1, 4, 6, 6), (4, 4, 3, 3), 0)
    dx, dw = runtime.to_device(x), runtime.to_device(w)
    convlab.conv2d(dx, dw, padding=1, algorithm="im2col")  # device arrays: a plan recorded
    convlab.conv2d(x, w, padding=1, algorithm="im2col")  # numpy: unplanned, its column buffer pooled
    assert plan.stats()["plans"] >= 1 and scratch.held_bytes() > 0
    convlab.reset()
    assert plan.stats()["plans"] == 0 and scratch.held_bytes() == 0
    assert "plans" in context.current().names()  # the stores stay, emptied
    y = convlab.conv2d(dx, dw, padding=1, algorithm="im2col")  # a reset process convolves as a new one
    assert np.allclose(runtime.to_host(y), reference.solve(make_problem("forward", 1, 4, 6, 6, 4, 3, 3,
                                                                        padding=1), x, w, None), atol=1e-4)


def test_two_threads_calling_ops_of_different_shapes_at_once():
    """The simulator's kernels are not thread-safe: launches are serialised by the runtime, so both
    threads get right results and no plugin is set aside."""
    cases = [((1, 3, 7, 7), (5, 3, 3, 3)), ((2, 4, 5, 6), (4, 4, 1, 1))]
    results, errors = {}, []
    barrier = threading.Barrier(2)

    def work(i):
        try:
            x, w = _operands(*cases[i], seed=i)
            barrier.wait()
            for _ in range(2):
                results[i] = (convlab.conv2d(x, w, padding=0), x, w)
        except Exception as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a set-aside plugin warns: must not happen
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    for i, (got, x, w) in results.items():
        prob = make_problem("forward", *x.shape, w.shape[0], *w.shape[2:])
        want = reference.solve(prob, x, w, None)
        assert np.linalg.norm(got - want) <= 1e-5 * np.linalg.norm(want)
        assert registry.set_aside_for(prob) == {}


class _Flaky(convlab.Algorithm):
    """Forward only, priority above every built-in; raises ``ERROR`` on 5-channel inputs."""

    name, ops, priority = "_test_flaky", frozenset({"forward"}), 1000
    error: Exception = RuntimeError("flaky kernel")
    calls = 0

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        type(self).calls += 1
        if problem.c == 5:
            raise self.error
        registry.get("direct").run(problem, config, a, b, bias, out, workspace_limit=workspace_limit)


@pytest.fixture
def flaky():
    convlab.register(_Flaky, replace=True)
    _Flaky.calls = 0
    yield registry.get("_test_flaky")
    convlab.unregister("_test_flaky")
    registry.clear_set_aside()


def test_a_raising_plugin_is_set_aside_for_that_problem_only(flaky):
    x5, w5 = _operands((1, 5, 6, 6), (3, 5, 3, 3), 1)
    x4, w4 = _operands((1, 4, 6, 6), (3, 4, 3, 3), 2)
    with pytest.warns(RuntimeWarning, match="set aside for that problem"):
        got = convlab.conv2d(x5, w5)
    prob5 = make_problem("forward", 1, 5, 6, 6, 3, 3, 3)
    assert np.allclose(got, reference.solve(prob5, x5, w5, None), atol=1e-4)
    assert "_test_flaky" in registry.set_aside_for(prob5)
    assert "set aside for this problem" in str(convlab.explain(prob5))
    convlab.conv2d(x4, w4)  # another shape: the plugin still runs it
    assert registry.set_aside_for(make_problem("forward", 1, 4, 6, 6, 3, 3, 3)) == {}
    assert _Flaky.calls >= 2
    convlab.reset()  # gives it another chance
    assert registry.set_aside_for(prob5) == {}


def test_out_of_memory_frees_the_pools_and_retries_once(flaky, monkeypatch):
    released = []
    monkeypatch.setattr(_Flaky, "error", MemoryError("out of memory"))
    original = _Flaky.run

    def once(self, problem, config, *args, **kw):
        if not released:
            released.append(scratch.held_bytes())
            raise MemoryError("out of memory")
        return original(self, problem.replace(c=problem.c), config, *args, **kw)

    monkeypatch.setattr(_Flaky, "run", once)
    x, w = _operands((1, 4, 6, 6), (3, 4, 3, 3), 3)
    got = convlab.conv2d(x, w)
    assert released and np.allclose(got, reference.solve(make_problem("forward", 1, 4, 6, 6, 3, 3, 3),
                                                          x, w, None), atol=1e-4)
    assert registry.set_aside_for(make_problem("forward", 1, 4, 6, 6, 3, 3, 3)) == {}


@pytest.mark.parametrize("error", [runtime.RuntimeFault("the runtime's own"), KeyboardInterrupt()])
def test_an_error_that_is_not_the_plugins_sets_nothing_aside(flaky, monkeypatch, error):
    monkeypatch.setattr(_Flaky, "error", error)
    x5, w5 = _operands((1, 5, 6, 6), (3, 5, 3, 3), 4)
    with pytest.raises(type(error)):
        convlab.conv2d(x5, w5)
    assert registry.set_aside_for(make_problem("forward", 1, 5, 6, 6, 3, 3, 3)) == {}


def test_a_forced_plugin_that_raises_is_not_set_aside(flaky):
    x5, w5 = _operands((1, 5, 6, 6), (3, 5, 3, 3), 5)
    with pytest.raises(RuntimeError, match="flaky kernel"):
        convlab.conv2d(x5, w5, algorithm="_test_flaky")
    assert registry.set_aside_for(make_problem("forward", 1, 5, 6, 6, 3, 3, 3)) == {}


def test_a_users_class_cannot_take_a_builtin_name_even_before_the_builtins_load():
    code = ("import convlab\n"
            "class Mine(convlab.Algorithm):\n    name, ops = 'direct', frozenset({'forward'})\n"
            "try:\n    convlab.register(Mine)\nexcept ValueError as exc:\n    print('refused:', exc)\n"
            "print(type(convlab.get_plugin('direct')).__module__, sorted(convlab.load_errors()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "refused: a plugin named 'direct' is already registered" in out
    assert "convlab.algorithms.direct []" in out


def test_set_workspace_limit_none_restores_the_default():
    previous = convlab.set_workspace_limit("1M")
    try:
        assert convlab.get_workspace_limit() == 2**20
        convlab.set_workspace_limit(None)
        assert convlab.get_workspace_limit() == DEFAULT_WORKSPACE_LIMIT
    finally:
        convlab.set_workspace_limit(previous)
