"""``convlab plot``: charts from results files (untimed simulator files refused with a hint), the time
bars, and the simulator's wall-clock option that gives them something to chart.
"""
from __future__ import annotations

import json

import pytest

from convlab import runtime
from convlab.bench import harness as bench
from convlab.bench.suite import load_suite

from cli_helpers import TINY_RUN, run_cli


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


def test_time_bars_show_the_public_op_where_it_was_timed():
    """A candidate's bar is its time through the public op (``op_median_ms``) when measured, and each
    plugin's fastest is chosen by that time, not by ``plugin.run``'s."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from convlab.bench.plot import time_bars

    cands = [{"plugin": "p1", "median_ms": 1.0, "op_median_ms": 0.9, "status": "ok"},
             {"plugin": "p1", "median_ms": 2.0, "op_median_ms": 0.4, "status": "ok"},
             {"plugin": "p2", "median_ms": 0.7, "op_median_ms": None, "status": "ok"}]
    ax = Figure().add_subplot()
    time_bars(ax, [{"label": "a", "candidates": cands, "cudnn": None}])
    assert {(c.get_label(), p.get_height()) for c in ax.containers for p in c} == {("p1", 0.4), ("p2", 0.7)}
