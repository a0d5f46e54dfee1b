"""The harness checks every path it times (convlab.bench.harness, paths, rounds): a candidate whose public
op computes something else on its plan's replay is caught, cuDNN goes through the same interleaved rounds
and last-call check as the candidates, and the last timed call's output is the one checked."""
from __future__ import annotations

import numpy as np
import pytest

from convlab import Algorithm, Config, reference, runtime
from convlab.bench import harness, paths, rounds
from convlab.bench.harness import BenchOptions
from convlab.bench.suite import single_shape_suite
from convlab.call import plan
from convlab.plugin import registry

SHAPE = {"x": [1, 2, 4, 4], "w": [2, 2, 3, 3], "padding": 1}


def _problem(op: str = "forward"):
    ((entry, problem),) = single_shape_suite(SHAPE).problems([op])
    return entry, problem


def _host(problem, a, b, bias):
    return [None if v is None else runtime.to_host(v) for v in (a, b, bias)]


class HostOnly(Algorithm):
    """Right on every run, but its output is written by a host copy, not a launch: a plan records no
    launch, so the public op's replay leaves ``out`` as it was (what a plugin that does host work and
    does not set ``replayable = False`` gets)."""

    name, ops, priority = "tb_host_only", frozenset({"forward"}), -5

    def configs(self, problem):
        return [Config()]

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        runtime.copy_into(out, reference.solve(problem, *_host(problem, a, b, bias)).astype(problem.dtype))


@pytest.fixture
def host_only():
    registry.register(HostOnly)
    yield
    registry.unregister(HostOnly.name)


def _bench(plugins, **kw):
    entry, problem = _problem()
    opts = BenchOptions(ops=("forward",), plugins=plugins, auto=False, check_replay=True)
    return harness.bench_problem("t", entry, problem, opts, **kw)


def test_a_wrong_replay_path_is_caught_and_never_timed(host_only):
    res = _bench(("direct", HostOnly.name))
    rows = {r.plugin: r for r in res.candidates}
    assert rows["direct"].status == "ok" and res.reference == "host float64"
    bad = rows[HostOnly.name]
    assert bad.status == "wrong" and bad.error.startswith("the public op (plan replay), last timed call:")
    assert bad.median_ms is None and bad.op_median_ms is None and res.best != bad.label


def test_a_broken_plan_replay_fails_every_row(monkeypatch):
    monkeypatch.setattr(plan.Plan, "replay", lambda self, operands, bases, stream: None)
    plan.clear()
    (row,) = _bench(("direct",)).candidates
    assert row.status == "wrong" and "public op" in row.error and row.rel_error == float("inf")


class FakeCudnn(Algorithm):
    """A stand-in for convlab.bench.baseline.Cudnn: the host reference, off by ``scale`` from its
    ``wrong_from``-th call on."""

    name = "cudnn"

    def __init__(self, wrong_from: int | None = None):
        self.calls, self.wrong_from, self.result = 0, wrong_from, None

    def bind(self, problem, a, b, bias, *, transpose=False):
        self.problem, self.host = problem, _host(problem, a, b, bias)

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        self.calls += 1
        scale = 1.01 if self.wrong_from is not None and self.calls >= self.wrong_from else 1.0
        self.result = reference.solve(self.problem, *self.host) * scale

    def output(self):
        return self.result

    def compute_eps(self, dtype):
        return 2.0**-24

    def extra_memory(self, problem):
        return 0

    def reference(self, problem, a, b, bias, *, transpose=False):
        raise AssertionError("small problems are checked on the host")


def test_cudnn_is_timed_in_the_same_rounds_and_its_last_output_checked(monkeypatch):
    seen = []
    real = rounds.interleave

    def spy(contenders, clock, n):
        seen.append(sorted(map(str, contenders)))
        return real(contenders, clock, n)

    monkeypatch.setattr(rounds, "interleave", spy)
    res = _bench(("direct",), cudnn=FakeCudnn())
    assert seen == [["('cudnn', 'cudnn')", "(0, 'op')"]]  # one interleave: the candidates' paths and cuDNN
    assert res.cudnn.status == "ok" and res.candidates[0].status == "ok"
    late = _bench(("direct",), cudnn=FakeCudnn(wrong_from=3))  # right first, wrong when timed
    assert late.cudnn.status == "wrong" and late.cudnn.error.startswith("cuDNN, last timed call:")


class Clock:
    """A fake clock: each timed call counts 1 ms; the log says who ran and whether the clock ran."""

    def __init__(self):
        self.log = []

    def __call__(self, fn, n):
        for _ in range(n):
            self.log.append("tick")
            fn()
        return [1.0] * n


def test_interleave_alternates_and_keeps_the_poisoned_last_timed_output():
    log, clock = [], Clock()
    state = {"a": 0.0, "b": 0.0}

    def contender(name, value):
        def call():
            log.append(name)
            state[name] = value if state[name] != "poison" or name == "a" else state[name]
            return state[name]
        return rounds.Contender(call, samples=4, warmup=1, poison=lambda: state.update({name: "poison"}),
                                keep=lambda got: ("kept", got))

    got = rounds.interleave({"a": contender("a", 1.0), "b": contender("b", 2.0)}, clock, rounds=2)
    # warm-up a, b; the first of two rounds of timing: a a, b b; the second: a then its last call, b likewise
    assert log == ["a", "b"] + ["a", "a", "b", "b"] + ["a", "a", "b", "b"]
    assert got["a"].samples == [1.0] * 4 and got["a"].kept == ("kept", 1.0) and got["a"].done
    assert got["b"].kept == ("kept", "poison")  # b's last call wrote nothing over the poison


def test_interleave_without_a_clock_still_makes_the_checked_call_and_records_errors():
    calls = []

    def broken():
        raise RuntimeError("on purpose")

    got = rounds.interleave({"ok": rounds.Contender(lambda: calls.append(1) or len(calls), warmup=2),
                             "bad": rounds.Contender(broken)}, None)
    assert calls == [1, 1, 1] and got["ok"].kept == 3 and got["ok"].samples == [] and got["ok"].median is None
    assert not got["bad"].done and "RuntimeError: on purpose" in got["bad"].error


def test_settle_names_the_failing_path_and_keeps_the_largest_error():
    _, problem = _problem()
    rng = np.random.default_rng(0)
    host = [rng.standard_normal(s) for s in problem.operand_shapes[:2]] + [None]
    want = reference.solve(problem, *host)
    trusted = harness.Trusted(want, "host float64")
    row = harness.CandidateResult("p", "c", status="ok", rel_error=0.0)
    ok = rounds.Timed(samples=[1.0, 2.0, 3.0], kept=want * (1 + 1e-7), done=True)
    paths.settle(row, {"run": ok, "op": rounds.Timed(samples=[0.5], kept=want, done=True)}, trusted, problem,
                 2.0**-24)
    assert row.status == "ok" and row.median_ms == 2.0 and row.op_median_ms == 0.5 and row.rel_error > 0
    paths.settle(row, {"op": rounds.Timed(samples=[0.5], kept=want * 1.1, done=True)}, trusted, problem,
                 2.0**-24)
    assert row.status == "wrong" and row.error.startswith("the public op (plan replay), last timed call: rel err")
    assert row.median_ms is None and row.op_median_ms is None and row.rel_error > 0.09


class GpuClock:
    """convlab.runtime as the harness's paths see it on a GPU: a device, and a clock that makes every
    call it times (1 ms each)."""

    HAS_DEVICE = True

    def __init__(self):
        self.timed = 0

    def time_ms(self, fn, warmup=0, repeat=1, inner=1):
        for _ in range(warmup):
            fn()
        for _ in range(repeat * inner):
            fn()
        self.timed += repeat
        return [1.0] * repeat

    def __getattr__(self, name):
        return getattr(runtime, name)


@pytest.mark.parametrize("broken_replay", [False, True])
def test_on_a_gpu_both_paths_are_timed_interleaved_and_each_last_output_checked(monkeypatch, broken_replay):
    fake = GpuClock()
    monkeypatch.setattr(paths, "runtime", fake)
    if broken_replay:
        monkeypatch.setattr(plan.Plan, "replay", lambda self, operands, bases, stream: None)
    plan.clear()
    _, problem = _problem()
    host = [np.random.default_rng(0).standard_normal(s).astype(np.float32) for s in problem.operand_shapes[:2]]
    dev = (runtime.to_device(host[0]), runtime.to_device(host[1]), None)
    out = runtime.empty(problem.operand_shapes[2], problem.dtype)
    poison = np.full(problem.operand_shapes[2], np.nan, np.float32)
    cand = registry.candidates(problem, 2**28, all_configs=False)[0]
    got = paths.contenders(0, cand, problem, dev, out, poison, 2**28, False, repeat=4, warmup=1, max_seconds=0)
    assert sorted(got) == [(0, "op"), (0, "run")] and all(c.samples == 4 for c in got.values())
    timed = rounds.interleave(got, paths.clock(), 2)
    row = harness.CandidateResult(cand.plugin.name, cand.config.name, status="ok", rel_error=0.0)
    trusted = harness.Trusted(reference.solve(problem, *host), "host float64")
    paths.settle(row, {path: t for (_, path), t in timed.items()}, trusted, problem, 2.0**-24)
    if broken_replay:
        assert row.status == "wrong" and row.error.startswith("the public op (plan replay)")
        assert row.median_ms is None and row.op_median_ms is None
    else:
        assert row.status == "ok" and row.median_ms == 1.0 and row.op_median_ms == 1.0 and row.samples == 4
