"""Command-line edges a new user hits (issue 17): missing extras, simulator plots, explain's exit
status, tune on the simulator, options after the subcommand, one op vocabulary, the table's legend."""
from __future__ import annotations

import json
import re
import sys

import numpy as np

import pytest

import convlab
from convlab import runtime
from convlab.runtime import settings
from convlab.cli import parser as cli

from cli_helpers import TINY_RUN, run_cli

SHAPE = ["--x", "1,4,5,5", "--w", "4,4,3,3", "--padding", "1"]


def test_plot_without_matplotlib_prints_the_install_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as in the base install
    code, _, err = run_cli(capsys, "plot", str(tmp_path / "results.json"))
    assert code == 1 and 'pip install "convlab[plot]"' in err and "Traceback" not in err


def test_check_without_hypothesis_prints_the_install_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "hypothesis", None)
    code, _, err = run_cli(capsys, "check", "direct")
    assert code == 1 and 'pip install "convlab[test]"' in err and "hypothesis" in err


@pytest.mark.skipif(not runtime.SIMULATOR, reason="simulator runs only")
def test_simulator_wall_clock_bench_is_plotted_and_labelled(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert run_cli(capsys, "bench", "--suite", "tiny", "--ops", "forward", "--out", str(tmp_path / "a"),
                   *TINY_RUN)[0] == 0
    code, _, err = run_cli(capsys, "plot", str(tmp_path / "a" / "tiny.json"), "-o", str(tmp_path / "p"))
    assert code == 2 and "--simulator-wall-clock" in err  # says how to get something to plot
    code, out, _ = run_cli(capsys, "bench", "--suite", "tiny", "--ops", "forward", "--out",
                           str(tmp_path / "b"), "--simulator-wall-clock", *TINY_RUN)
    assert code == 0 and "simulator's wall-clock time, not GPU speed" in out
    assert "no time was measured" not in out  # the note above the times says what they are
    assert "note: CUDA simulator: outputs were checked; the ms column is the simulator's wall-clock" in out
    data = json.loads((tmp_path / "b" / "tiny.json").read_text())
    assert data["simulator"] and data["settings"]["simulator_wall_clock"]
    assert "wall-clock" in data["note"] and "no time was measured" not in data["note"]
    code, out, err = run_cli(capsys, "plot", str(tmp_path / "b" / "tiny.json"), "-o", str(tmp_path / "p"))
    assert code == 0, err
    png = tmp_path / "p" / "tiny-simulator-time.png"
    assert png.read_bytes().startswith(b"\x89PNG") and str(png) in out
    assert not (tmp_path / "p" / "tiny-roofline.png").exists()  # no rates on the simulator
    from convlab.bench import plot
    assert "not GPU speed" in plot.SIMULATOR_TITLE


def test_explain_on_a_declining_plugin_says_why_as_the_pick_and_exits_1(capsys):
    code, out, err = run_cli(capsys, "explain", "--x", "1,3,5,5", "--w", "5,3,3,3", "--algorithm", "depthwise")
    words = "algorithm 'depthwise' cannot run forward f32 x(1, 3, 5, 5) w(5, 3, 3, 3)"
    assert code == 1 and err == "" and "picked: None" not in out
    assert f"picked: nothing: {words}" in out and "not depthwise" in out.split("picked: nothing: ")[1]
    zeros = [np.zeros(s, np.float32) for s in ((1, 3, 5, 5), (5, 3, 3, 3))]
    with pytest.raises(ValueError, match=re.escape(words)):  # the same message as the Python API's
        convlab.conv2d(*zeros, algorithm="depthwise")
    assert convlab.explain(*zeros, algorithm="depthwise").why_none.startswith(words)


@pytest.mark.parametrize("algorithm, words", [("cufft", "unknown algorithm 'cufft'; registered: "),
                                              ("im2col[BK=3]", "unknown config 'BK=3'; choices are ")])
def test_explain_on_an_unknown_plugin_or_config_fails_as_conv2d_does(capsys, algorithm, words):
    from convlab.plugin import registry

    code, out, err = run_cli(capsys, "explain", *SHAPE, "--algorithm", algorithm)
    x, w = np.zeros((1, 4, 5, 5), np.float32), np.zeros((4, 4, 3, 3), np.float32)
    raised = []
    for call in (convlab.conv2d, convlab.explain):
        with pytest.raises(ValueError, match=re.escape(words)) as exc:
            call(x, w, padding=1, algorithm=cli.algorithm(algorithm))
        raised.append(str(exc.value))
    assert raised[0] == raised[1] and code == 2 and out == "" and err == f"convlab explain: error: {raised[0]}\n"
    problem = convlab.make_problem("forward", 1, 4, 5, 5, 4, 3, 3, padding=1)
    listed = ([p.name for p in registry.plugins()] if "algorithm" in words else
              [c.name for c in registry.get("im2col").configs(problem)])
    assert all(repr(name) in err for name in listed)
    with pytest.raises(TypeError, match="algorithm must be 'auto', a plugin name or"):
        convlab.explain(x, w, algorithm=3)


def test_explain_takes_a_config_either_op_spelling_and_string_padding(capsys, tmp_path):
    from convlab.plugin import registry

    prob = convlab.make_problem("forward", 1, 4, 5, 5, 4, 3, 3, padding=1)
    config = registry.get("im2col").configs(prob)[-1]
    spaced = ", ".join(f"{k}={config[k]}" for k in config)
    code, out, _ = run_cli(capsys, "explain", *SHAPE, "--algorithm", f"im2col[{spaced}]")
    assert code == 0 and f"picked: im2col[{config.name}] (forced)" in out
    for op, short in (("conv2d_backward_weight", "wgrad"), ("conv2d_backward_data", "dgrad")):
        code, out, _ = run_cli(capsys, "explain", *SHAPE, "--op", op)
        assert code == 0 and f"problem: {short} f32" in out
    assert cli.op_list("conv2d,wgrad") == ("forward", "wgrad")
    code, out, _ = run_cli(capsys, "explain", "--x", "1,4,5,5", "--w", "4,4,3,3", "--padding", "same")
    assert code == 0 and "problem: forward f32 x(1, 4, 5, 5) w(4, 4, 3, 3) s1 p1 " in out
    code, out, _ = run_cli(capsys, "bench", "--x", "1,4,5,5", "--w", "4,4,3,3", "--padding", "valid",
                           "--ops", "forward", "--no-auto", *TINY_RUN, "--out", str(tmp_path))
    assert code == 0 and "n1 4x5x5 w4x3x3 pvalid" in out


@pytest.mark.skipif(not runtime.SIMULATOR, reason="simulator runs only")
def test_tune_on_the_simulator_says_nothing_is_written(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "tune", *SHAPE, "--ops", "forward", "--quiet")
    assert code == 0 and "nothing was written" in out and "cache:" not in out
    assert not (tmp_path / "tuning-cache").exists()


def test_debug_and_deterministic_before_or_after_the_subcommand(capsys, monkeypatch):
    bad = ["--x", "1,3,2,2", "--w", "4,3,5,5"]
    with pytest.raises(ValueError, match="output would be empty"):
        cli.main(["explain", *bad, "--debug"])
    with pytest.raises(ValueError, match="output would be empty"):
        cli.main(["--debug", "explain", *bad])
    assert cli.main(["explain", *bad]) == 2
    seen = []
    monkeypatch.setattr(cli, "cmd_list", lambda args: seen.append(settings.get_deterministic()) or 0)
    for argv in (["list", "--deterministic"], ["--deterministic", "list"], ["list"]):
        assert cli.main(argv) == 0
    assert seen == [True, True, False] and settings.get_deterministic() is False
    for command in ("demo", "explain", "bench", "tune"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        assert "--deterministic" in capsys.readouterr().out


def test_table_has_a_legend_for_shape_labels_and_marks(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "bench", *SHAPE, "--ops", "forward", *TINY_RUN, "--out", str(tmp_path))
    assert code == 0 and out.index("legend:") > out.index("plugin[config]")
    assert "\nn1 4x5x5 w4x3x3 p1 " in out  # the label printed, and the legend reads that one
    assert "legend: shape 'n1 4x5x5 w4x3x3 p1' = batch N=1, input C x H x W = 4x5x5, weight K x R x S = 4x3x3" in out
    assert "'*' the plugin 'auto' picks, '<' the fastest" in out and "check: ok" in out


def test_legend_explains_a_printed_label_or_says_the_suite_names_them():
    from convlab.bench.report import legend

    assert legend(["3x3 s2", "n2 8x16 w4x3 s2"]).startswith(
        "legend: shape 'n2 8x16 w4x3 s2' = batch N=2, input C x L = 8x16, weight K x S = 4x3,")
    assert "input C x D x H x W = 8x3x3x3" in legend(["T n1 8x3x3x3 w4x2x2x2"])
    named = legend(["stem 3x3 s2 3->32"])
    assert named.startswith("legend: shape = the suite's name for the layer;") and "batch" not in named
