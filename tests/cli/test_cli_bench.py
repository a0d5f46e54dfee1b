"""``convlab bench`` and the benchmark harness on tiny problems, checked against the reference: results
files, wrong and failing plugins recorded and excluded, a failing problem does not stop the run,
ranking, ``--batch``, and the simulator's refusal of large suites.

On the simulator nothing is timed and "auto" picks by declared priority; on a GPU the same tests see
times, cuDNN rows (when PyTorch is installed) and tuned picks, and say so where the outcome differs.
"""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import convlab
from convlab import Algorithm, reference, runtime
from convlab.bench import harness as bench
from convlab.plugin import registry
from convlab.ops import strategy
from convlab.bench.report import ProblemResult, rank, table
from convlab.measure import CandidateResult
from convlab.bench.suite import load_suite

from cli_helpers import TINY_RUN, Broken, auto_label, run_cli


def test_bench_tiny_suite_writes_checked_results(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "bench", "--suite", "tiny", "--out", str(tmp_path), *TINY_RUN)
    assert code == 0, out
    assert ("not meaningful" in out) == runtime.SIMULATOR and "transpose" in out
    data = json.loads((tmp_path / "tiny.json").read_text())
    assert data["simulator"] is runtime.SIMULATOR and data["device"] == runtime.device_name()
    assert data["versions"]["convlab"] == convlab.__version__ and "numba" in data["versions"]
    assert len(data["results"]) == len(load_suite("tiny").problems())
    limit = convlab.get_workspace_limit()
    for (_, problem), res in zip(load_suite("tiny").problems(), data["results"]):
        (row,) = res["candidates"]
        assert row["status"] == "ok" and row["rel_error"] <= row["tolerance"]
        assert res["reference"] == "host float64"
        if runtime.SIMULATOR:  # no times; "auto" goes by declared priority (no cost model there)
            assert row["median_ms"] is None and res["auto"]["source"] in ("heuristic", "priority")
            assert res["auto"]["plugin"] == strategy.by_priority(problem, limit).plugin.name
        else:  # timed; "auto" is the cost model's pick (the default mode) or tuned (or from the cache)
            assert row["median_ms"] > 0 and res["auto"]["source"] in ("heuristic", "tuned", "cache")
        assert f"{res['auto']['plugin']}[{res['auto']['config']}]" == auto_label(problem)
    with open(tmp_path / "tiny.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    cudnn_rows = sum(res["cudnn"] is not None for res in data["results"])  # GPU with PyTorch only
    assert len(rows) == len(data["results"]) + cudnn_rows
    assert {r["plugin"] for r in rows} == {"direct"} | ({"cudnn"} if cudnn_rows else set())


class _Wrong(Algorithm):
    """Direct's output scaled by 1.01: a 'fast wrong kernel' that must never win."""

    name = "test_wrong"
    ops = frozenset({"forward"})
    priority = 1000

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        registry.get("direct").run(problem, config, a, b, bias, out, workspace_limit=workspace_limit)
        out.copy_to_device(out.copy_to_host() * np.float32(1.01))


@pytest.fixture
def bad_plugins():
    registry.register(_Wrong)
    registry.register(Broken)
    yield
    registry.unregister("test_wrong")
    registry.unregister("test_broken")


def test_wrong_and_failing_plugins_are_recorded_and_excluded(bad_plugins, tmp_path, capsys):
    code, out, _ = run_cli(capsys, "bench", "--x", "1,2,5,5", "--w", "2,2,3,3", "--ops", "forward",
                           "--plugins", "direct,test_wrong,test_broken", "--out", str(tmp_path), "--quiet")
    assert code == 1  # a plugin disagreed with the reference
    (res,) = json.loads((tmp_path / "cli.json").read_text())["results"]
    rows = {r["plugin"]: r for r in res["candidates"]}
    assert rows["direct"]["status"] == "ok"
    assert rows["test_wrong"]["status"] == "wrong" and rows["test_wrong"]["rel_error"] > 5e-3
    assert rows["test_broken"]["status"] == "error" and "on purpose" in rows["test_broken"]["error"]
    assert "wrong" in out and "launch failed on purpose" in out


def test_a_failing_problem_is_recorded_and_the_run_goes_on(monkeypatch, tmp_path, capsys):
    real = bench.measure.random_operands

    def flaky(problem, rng=None):
        if problem.op == "dgrad":
            raise MemoryError("out of memory on purpose")
        return real(problem, rng)

    monkeypatch.setattr(bench.measure, "random_operands", flaky)
    code, out, _ = run_cli(capsys, "bench", "--x", "1,2,5,5", "--w", "2,2,3,3", "--out", str(tmp_path),
                           *TINY_RUN)
    assert code == 1 and "problem failed: MemoryError: out of memory on purpose" in out
    results = json.loads((tmp_path / "cli.json").read_text())["results"]
    assert [(r["op"], bool(r["error"]), len(r["candidates"])) for r in results] == [
        ("forward", False, 1), ("dgrad", True, 0), ("wgrad", False, 1)]


def test_ranking_and_ratios_ignore_wrong_candidates():
    res = ProblemResult("s", "shape", "conv2d", "forward", {}, 2 * 10**9, 10**6)
    res.candidates = [CandidateResult("fast", "default", status="wrong", median_ms=0.1),
                      CandidateResult("slow", "default", status="ok", median_ms=2.0),
                      CandidateResult("slow", "BM=8", status="ok", median_ms=1.0)]
    res.cudnn = CandidateResult("cudnn", "default", status="ok", median_ms=0.5)
    rank(res)
    assert res.best == "slow[BM=8]"
    assert [r.vs_cudnn for r in res.candidates] == [None, 0.25, 0.5]
    text = table([res])
    assert "geometric mean" in text and "slow                 forward   0.500 over 1" in text


def test_bench_batch_option_runs_the_suite_at_that_batch(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "bench", "--suite", "tiny", "--batch", "1", "--ops", "forward",
                           "--no-auto", "--out", str(tmp_path), *TINY_RUN)
    assert code == 0, out
    data = json.loads((tmp_path / "tiny_b1.json").read_text())
    assert data["results"] and all(res["problem"]["x"][0] == 1 for res in data["results"])
    code, out, _ = run_cli(capsys, "bench", "--suite", "tiny", "--batch", "0", *TINY_RUN)
    assert code != 0 and "--batch" in out + _


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the simulator's refusal: a GPU runs large suites")
def test_simulator_refuses_large_suites(capsys, monkeypatch):
    monkeypatch.setattr(runtime, "SIMULATOR", True)  # on a GPU too: the check runs before anything else
    code, _, err = run_cli(capsys, "bench", "--suite", "burn_b4", "--quiet")
    assert code == 2 and "too large for the CUDA simulator" in err


def test_ranking_and_ratios_use_the_public_op_time_where_it_was_timed():
    """On a GPU each candidate also has its time through the public op; the fastest and the ratio to
    cuDNN go by that (the user's path), falling back to plugin.run's time where there is none."""
    res = ProblemResult("s", "shape", "conv2d", "forward", {}, 2 * 10**9, 10**6)
    res.candidates = [CandidateResult("a", "default", status="ok", median_ms=1.0, op_median_ms=0.8),
                      CandidateResult("b", "default", status="ok", median_ms=0.9, op_median_ms=None),
                      CandidateResult("c", "default", status="ok", median_ms=2.0, op_median_ms=0.4)]
    res.cudnn = CandidateResult("cudnn", "default", status="ok", median_ms=0.2)
    rank(res)
    assert res.best == "c[default]"
    assert [r.vs_cudnn for r in res.candidates] == [0.25, 0.2 / 0.9, 0.5]


def test_table_wraps_long_reasons_and_errors_instead_of_cutting_them():
    from convlab.bench.text import REASON_WIDTH

    reason = "declines because " + " ".join(f"word{i}" for i in range(60)) + " END"
    error = "RuntimeError: " + " ".join(f"part{i}" for i in range(40)) + " LAST"
    res = ProblemResult("s", "n1 4x5x5 w4x3x3 p1", "conv2d", "forward", {}, 1, 1,
                        declined={"some_plugin": reason}, error=error, auto={"error": reason})
    res.candidates = [CandidateResult("direct", "default", status="error", error=error)]
    lines = table([res]).splitlines()
    for text, start in ((reason, "declines: "), (error, "problem failed: "), (error, "error: "),
                        (reason, "auto pick failed: ")):
        i = next(i for i, line in enumerate(lines) if start in line)
        column = lines[i].index(start) + len(start)
        chunks = [lines[i][column:]]
        for line in lines[i + 1:]:
            if line[:column].strip() or not line.strip():
                break
            chunks.append(line[column:])
        assert " ".join(chunks) == text and all(len(c) <= REASON_WIDTH for c in chunks), start
        assert len(chunks) > 1


class _HostCopy(Algorithm):
    """Right on every run, by a host copy a recorded plan does not hold: its replay writes nothing."""

    name = "test_host_copy"
    ops = frozenset({"forward"})

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        host = [None if v is None else runtime.to_host(v) for v in (a, b, bias)]
        runtime.copy_into(out, reference.solve(problem, *host).astype(problem.dtype))


def test_check_replay_catches_a_plugin_whose_replay_differs(tmp_path, capsys):
    registry.register(_HostCopy)
    try:
        argv = ["bench", "--x", "1,2,4,4", "--w", "2,2,3,3", "--ops", "forward", "--plugins", "test_host_copy",
                "--no-auto", "--out", str(tmp_path), "--quiet"]
        code, out, _ = run_cli(capsys, *argv, "--check-replay")
        ((row,),) = [res["candidates"] for res in json.loads((tmp_path / "cli.json").read_text())["results"]]
        assert code == 1 and row["status"] == "wrong" and row["error"].startswith("the public op (plan replay)")
        if runtime.SIMULATOR:  # a GPU checks every path it times, with or without the option
            assert run_cli(capsys, *argv)[0] == 0
    finally:
        registry.unregister("test_host_copy")
