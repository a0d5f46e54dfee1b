"""The command line and the benchmark harness: tiny problems, checked against the reference.

On the simulator nothing is timed and "auto" picks by declared priority; on a GPU the same tests see
times, cuDNN rows (when PyTorch is installed) and tuned picks, and say so where the outcome differs.
"""
from __future__ import annotations

import csv
import json
import re
import subprocess
import sys

import numpy as np
import pytest

import convlab
from convlab import Algorithm, autotune, runtime
from convlab.cli import parser as cli
from convlab.bench import harness as bench
from convlab.cli import commands
from convlab.plugin import registry, strategy
from convlab.bench.baseline import transpose_output_padding
from convlab.bench.report import ProblemResult, rank, table
from convlab.measure import CandidateResult
from convlab.bench.suite import builtin_suites, load_suite, single_shape_suite

TINY_RUN = ["--plugins", "direct", "--quiet"]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def private_tuning_cache(tmp_path, monkeypatch):
    """On a GPU, "auto" tunes and stores its picks: keep them out of the user's cache folder."""
    monkeypatch.setenv("CONVLAB_CACHE_DIR", str(tmp_path / "tuning-cache"))


def auto_label(problem) -> str:
    """What "auto" runs for ``problem`` now: this process's last tuning result (by priority on the
    simulator, the tuned or cached winner on a GPU)."""
    return autotune.choose(problem, convlab.get_workspace_limit()).label


# ---- suites ---------------------------------------------------------------------------------------
def test_builtin_suites_hold_the_documented_shapes():
    assert {"burn", "burn_b4", "resnet50", "dcgan", "tiny"} <= set(builtin_suites())
    burn = load_suite("burn")
    assert len(burn.entries) == 14 and {p.n for _, p in burn.problems()} == {16}
    assert {p.op for _, p in burn.problems()} == {"forward", "dgrad", "wgrad"}
    assert all(p.padding == (0, 0) for _, p in burn.problems())
    first = burn.entries[0].problems[0]
    (b4,) = load_suite("burn_b4").entries
    assert b4.problems[0] == first.replace(n=4)
    resnet = load_suite("resnet50").problems(["forward"])
    assert {p.n for _, p in resnet} == {32} and len({p.key() for _, p in resnet}) == len(resnet) == 23
    dcgan = load_suite("dcgan").problems()
    assert [(p.p, p.h) for _, p in dcgan] == [(4, 8), (8, 16), (16, 32), (32, 64)]
    assert all(p.op == "dgrad" and p.bias and p.n == 64 and p.r == 4 for _, p in dcgan)
    assert all(p.flops <= bench.SIMULATOR_MAX_FLOPS for _, p in load_suite("tiny").problems())


def test_transpose_output_padding_round_trips():
    for _, p in load_suite("dcgan").problems():
        assert transpose_output_padding(p) == (0, 0)
    entry = single_shape_suite({"kind": "conv_transpose2d", "x": [1, 2, 3, 3], "w": [2, 2, 3, 3],
                                "stride": 2, "output_padding": 1}).entries[0]
    assert transpose_output_padding(entry.problems[0]) == (1, 1)


@pytest.mark.parametrize("spec, words", [
    ({"x": [1, 2, 5, 5], "w": [2, 2, 3, 3], "strides": 2}, "unknown key"),
    ({"x": [1, 2, 5], "w": [2, 2, 3, 3]}, "list of 4 ints"),
    ({"x": [1, 3, 5, 5], "w": [2, 2, 3, 3]}, "channel mismatch"),
    ({"x": [1, 2, 2, 2], "w": [2, 2, 3, 3]}, "empty"),
    ({"x": [1, 2, 5, 5], "w": [2, 2, 3, 3], "ops": ["fwd"]}, "ops"),
    ({"kind": "deconv", "x": [1, 2, 5, 5], "w": [2, 2, 3, 3]}, "kind"),
])
def test_bad_suite_entries_name_the_problem(tmp_path, capsys, spec, words):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"problems": [spec]}))
    with pytest.raises(ValueError, match=words):
        load_suite(str(path))
    code, _, err = run_cli(capsys, "bench", "--suite", str(path), "--out", str(tmp_path), *TINY_RUN)
    assert code == 2 and "problems[0]" in err and "Traceback" not in err


def test_user_suite_file_and_single_shape_run(tmp_path, capsys):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"name": "mine", "problems": [
        {"x": [1, 2, 5, 5], "w": [2, 2, 3, 3], "ops": ["wgrad"], "label": "a"}]}))
    code, out, _ = run_cli(capsys, "bench", "--suite", str(path), "--x", "1,2,4,4", "--w", "3,2,1,1",
                           "--ops", "forward,wgrad", "--out", str(tmp_path), "--no-auto", *TINY_RUN)
    assert code == 0, out
    data = json.loads((tmp_path / "mine+cli.json").read_text())
    assert [(r["suite"], r["label"], r["op"]) for r in data["results"]] == [
        ("mine", "a", "wgrad"), ("cli", "n1 2x4x4 w3x1x1", "forward"), ("cli", "n1 2x4x4 w3x1x1", "wgrad")]
    assert data["results"][0]["auto"] == {}


# ---- bench (tiny problems) -------------------------------------------------------------------------
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
        if runtime.SIMULATOR:  # no times; "auto" goes by declared priority
            assert row["median_ms"] is None and res["auto"]["source"] == "priority"
            assert res["auto"]["plugin"] == strategy.by_priority(problem, limit).plugin.name
        else:  # timed; "auto" was tuned (or answered from the cache)
            assert row["median_ms"] > 0 and res["auto"]["source"] in ("tuned", "cache")
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


class _Broken(Algorithm):
    name = "test_broken"
    ops = frozenset({"forward"})

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        raise RuntimeError("launch failed on purpose")


@pytest.fixture
def bad_plugins():
    registry.register(_Wrong)
    registry.register(_Broken)
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


def test_simulator_refuses_large_suites(capsys, monkeypatch):
    monkeypatch.setattr(runtime, "SIMULATOR", True)  # on a GPU too: the check runs before anything else
    code, _, err = run_cli(capsys, "bench", "--suite", "burn_b4", "--quiet")
    assert code == 2 and "too large for the CUDA simulator" in err


# ---- other commands -------------------------------------------------------------------------------
def test_demo_checks_every_plugin_and_shows_the_auto_pick(capsys):
    code, out, _ = run_cli(capsys, "demo", "--quiet")
    assert code == 0, out
    demo = single_shape_suite(commands.DEMO_SHAPES["simulator" if runtime.SIMULATOR else "gpu"])
    limit, runs = convlab.get_workspace_limit(), 0
    for _, p in demo.problems():
        firsts = [c.label for c in bench.candidates(p, bench.BenchOptions(), limit)[0]]
        # the auto pick is run too when it is not some plugin's first config (a tuned pick on a GPU)
        runs += len(firsts) + (auto_label(p) not in firsts)
    assert runs >= len(registry.plugins())
    assert re.search(rf"{runs} plugin runs matched the reference \((host|cudnn) float64\)", out), out
    for op in ("forward", "dgrad", "wgrad"):
        assert f"auto picks for {op}" in out


def test_list_and_explain(capsys):
    code, out, _ = run_cli(capsys, "list")
    assert code == 0 and "direct" in out and "resnet50" in out
    code, out, _ = run_cli(capsys, "explain", "--op", "forward", "--x", "16,3,227,227", "--w", "96,3,11,11",
                           "--stride", "4")
    problem = convlab.problem_for("conv2d", np.empty((16, 3, 227, 227), np.float32),
                                  np.empty((96, 3, 11, 11), np.float32), stride=4)
    if runtime.SIMULATOR:  # nothing timed: the highest declared priority
        assert auto_label(problem) == strategy.by_priority(problem, convlab.get_workspace_limit()).label
    assert code == 0 and "x(16, 3, 227, 227)" in out and f"picked: {auto_label(problem)}" in out
    code, out, _ = run_cli(capsys, "explain", "--op", "transpose", "--x", "2,8,4,4", "--w", "8,4,4,4",
                           "--stride", "2", "--padding", "1", "--bias")
    assert code == 0 and "dgrad f32 x(2, 4, 8, 8)" in out and "+bias" in out


@pytest.mark.parametrize("argv, words", [
    (["explain", "--x", "16,3,227", "--w", "96,3,11,11"], "4 comma-separated ints"),
    (["explain", "--x", "1,3,2,2", "--w", "4,3,5,5"], "output would be empty"),
    (["explain", "--x", "1,4,8,8", "--w", "4,4,3,3", "--stride", "0"], "stride must be >= 1"),
    (["explain", "--x", "1,4,8,8", "--w", "4,4,3,3", "--workspace-limit", "12Q"], "byte count"),
    (["bench", "--plugins", "nosuch"], "unknown plugin"),
    (["bench", "--suite", "nosuch"], "unknown suite"),
    (["bench", "--ops", "forward,back"], "subset of"),
    (["bench", "--x", "1,4,8,8"], "both --x and --w"),
    (["check", "nosuch"], "unknown algorithm"),
    (["check", "direct", "--checks", "check_nothing"], "unknown check"),
])
def test_bad_input_exits_2_with_the_message(capsys, argv, words):
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and words in err and "Traceback" not in err


def test_console_script_reports_bad_shapes_without_traceback():
    argv = ["explain", "--x", "1,3,2,2", "--w", "4,3,5,5"]
    proc = subprocess.run([sys.executable, "-m", "convlab.cli", *argv], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "output would be empty" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_argument_types():
    assert cli.nbytes("256M") == 256 * 2**20 and cli.nbytes("1GiB") == 2**30 and cli.nbytes("4096") == 4096
    assert cli.pair("2") == 2 and cli.pair("2,1") == [2, 1] and cli.shape4("1x2x3x4") == [1, 2, 3, 4]
    assert cli.op_list("wgrad,forward") == ("wgrad", "forward")


@pytest.mark.parametrize("command", ["demo", "list", "explain", "bench", "plot", "tune", "check"])
def test_help_of_every_command(capsys, command):
    with pytest.raises(SystemExit) as exc:
        cli.main([command, "--help"])
    assert exc.value.code == 0 and "usage: convlab" in capsys.readouterr().out


def test_tune_picks_by_priority_on_the_simulator_and_tunes_on_a_gpu(capsys):
    code, out, _ = run_cli(capsys, "tune", "--suite", "tiny", "--ops", "forward", "--quiet")
    lines = [line for line in out.splitlines() if " -> " in line]
    assert code == 0 and len(lines) == len(load_suite("tiny").problems(["forward"])), out
    sources = ("(priority",) if runtime.SIMULATOR else ("(tuned", "(cache")
    assert all(any(s in line for s in sources) for line in lines), out


def test_check_runs_the_conformance_suite(capsys):
    pytest.importorskip("convlab.testing")
    code, out, _ = run_cli(capsys, "check", "direct", "--ops", "forward", "--checks",
                           "check_matches_reference,check_declines_with_reason", "--max-examples", "2")
    assert code == 0 and "check_matches_reference" in out and "2/2 conformance checks passed" in out


class _NegativeWorkspace(_Broken):
    name = "test_negative_workspace"

    def workspace_bytes(self, problem, config, workspace_limit):
        return -1


def test_check_reports_a_failing_plugin(capsys):
    pytest.importorskip("convlab.testing")
    registry.register(_NegativeWorkspace)
    try:
        code, out, _ = run_cli(capsys, "check", "test_negative_workspace", "--checks",
                               "check_declines_with_reason", "--max-examples", "2")
    finally:
        registry.unregister("test_negative_workspace")
    assert code == 1 and "FAIL" in out and "0/1 conformance checks passed" in out


# ---- plots ----------------------------------------------------------------------------------------
def test_plot_from_results(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert run_cli(capsys, "bench", "--suite", "tiny", "--ops", "forward", "--out", str(tmp_path),
                   *TINY_RUN)[0] == 0
    data = json.loads((tmp_path / "tiny.json").read_text())
    for res in data["results"]:  # results without times (what the simulator writes): nothing to plot
        for row in res["candidates"] + ([res["cudnn"]] if res["cudnn"] else []):
            row.update(median_ms=None, min_ms=None, tflops=None, gbs=None, vs_cudnn=None)
    (tmp_path / "untimed.json").write_text(json.dumps(data))
    code, _, err = run_cli(capsys, "plot", str(tmp_path / "untimed.json"), "-o", str(tmp_path / "p"))
    assert code == 2 and "no timings" in err
    for i, res in enumerate(data["results"]):  # fabricate GPU-like numbers for the chart
        row = res["candidates"][0]
        row.update(median_ms=0.1 * (i + 1), tflops=res["flops"] / (0.1 * (i + 1)) / 1e9, vs_cudnn=0.5)
        res["cudnn"] = dict(row, plugin="cudnn", median_ms=0.05 * (i + 1), vs_cudnn=None)
    data["simulator"] = False
    (tmp_path / "gpu.json").write_text(json.dumps(data))
    code, out, err = run_cli(capsys, "plot", str(tmp_path / "gpu.json"), "-o", str(tmp_path / "p"))
    assert code == 0, err
    for name in ("tiny-ratio.png", "tiny-roofline.png"):
        png = (tmp_path / "p" / name).read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 5000 and name in out
    assert run_cli(capsys, "plot", str(tmp_path / "gpu.json"), "-o", str(tmp_path / "p"),
                   "--metric", "time", "--peak-tflops", "10")[0] == 0
    assert (tmp_path / "p" / "tiny-time.png").exists()


def test_time_bars_draws_each_plugins_fastest_checked_time():
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from convlab.bench.plot import time_bars

    def row(plugin, ms, status="ok"):
        return {"plugin": plugin, "median_ms": ms, "status": status}

    results = [{"label": "a", "candidates": [row("p1", 2.0), row("p1", 1.0), row("p2", 0.1, "wrong")],
                "cudnn": row("cudnn", 0.5)},
               {"label": "b", "candidates": [row("p2", 3.0)], "cudnn": None}]
    ax = Figure().add_subplot()
    time_bars(ax, results, highlight="p2")
    bars = {(c.get_label(), p.get_height(), p.get_hatch()) for c in ax.containers for p in c}
    assert bars == {("p1", 1.0, None), ("p2", 3.0, "//"), ("cudnn", 0.5, None)}  # never the wrong one
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"] and ax.get_yscale() == "log"


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the simulator's stand-in for a device clock")
def test_simulator_wall_clock_option_times_each_checked_candidate():
    (entry, prob), = load_suite("tiny").problems(("forward",))[:1]
    plain, clocked = (bench.bench_problem("tiny", entry, prob, bench.BenchOptions(
        ops=("forward",), auto=False, simulator_wall_clock=flag), None) for flag in (False, True))
    assert plain.candidates and all(row.median_ms is None for row in plain.candidates)
    assert all(row.status == "ok" for row in clocked.candidates)
    assert all(row.median_ms > 0 and row.tflops is None for row in clocked.candidates)  # no GPU rates
