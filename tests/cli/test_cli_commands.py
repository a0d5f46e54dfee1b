"""The other ``convlab`` commands: demo, list, explain, tune and check; bad input (exit status 2 with the
message, no traceback), argument types and every command's help.

On the simulator nothing is timed and "auto" picks by declared priority; on a GPU the same tests see
times, cuDNN rows (when PyTorch is installed) and tuned picks, and say so where the outcome differs.
"""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

import convlab
from convlab import runtime
from convlab.cli import parser as cli
from convlab.bench import harness as bench
from convlab.cli import commands
from convlab.plugin import registry
from convlab.ops import strategy
from convlab.bench.suite import load_suite, single_shape_suite

from cli_helpers import Broken, auto_label, run_cli


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
    (["explain", "--x", "16,3", "--w", "96,3,11,11"], "4 or 3 or 5 comma-separated ints"),
    (["explain", "--x", "16,3,227", "--w", "96,3,11,11"], "x and w of 3 entries"),
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


@pytest.mark.parametrize("command", ["demo", "list", "explain", "bench", "plot", "tune", "check", "compile", "source"])
def test_help_of_every_command(capsys, command):
    with pytest.raises(SystemExit) as exc:
        cli.main([command, "--help"])
    assert exc.value.code == 0 and "usage: convlab" in capsys.readouterr().out


def test_every_command_has_a_description_and_the_program_says_what_it_is():
    import argparse

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert not [name for name, p in sub.choices.items() if not p.description]
    assert "1D, 2D and 3D" in parser.description and "2D convolution" not in parser.description


def test_tune_picks_by_priority_on_the_simulator_and_tunes_on_a_gpu(capsys):
    code, out, _ = run_cli(capsys, "tune", "--suite", "tiny", "--ops", "forward", "--quiet", "--tune-mode", "tune")
    lines = [line for line in out.splitlines() if " -> " in line]
    assert code == 0 and len(lines) == len(load_suite("tiny").problems(["forward"])), out
    sources = ("(priority",) if runtime.SIMULATOR else ("(tuned", "(cache")
    assert all(any(s in line for s in sources) for line in lines), out


@pytest.mark.parametrize("argv, env, wanted", [([], None, "tune"), (["--tune-mode", "exhaustive"], None, "exhaustive"),
                                               ([], "exhaustive", "exhaustive"), (["--tune-mode", "heuristic"], None,
                                                                                  "heuristic")])
def test_tune_times_in_mode_tune_unless_another_is_named(capsys, monkeypatch, argv, env, wanted):
    """The default mode, heuristic, times nothing: ``convlab tune`` tunes in mode tune unless the flag or a
    mode set before (CONVLAB_TUNE_MODE, set_mode) names another; the mode in force is restored after."""
    from convlab import autotune
    from convlab.runtime import settings

    seen = []
    real = autotune.tune
    monkeypatch.setattr(autotune, "tune", lambda problem, **kw: (seen.append(settings.get_tune_mode()),
                                                                 real(problem, **kw))[1])
    before = autotune.set_mode(env or "heuristic")
    try:
        code, out, _ = run_cli(capsys, "tune", "--x", "1,2,4,4", "--w", "2,2,3,3", "--ops", "forward", "--quiet",
                               *argv)
        assert code == 0 and seen == [wanted], out
        assert autotune.get_mode() == (env or "heuristic")
    finally:
        autotune.set_mode(before)


def test_check_runs_the_conformance_suite(capsys):
    pytest.importorskip("convlab.testing")
    code, out, _ = run_cli(capsys, "check", "direct", "--ops", "forward", "--checks",
                           "check_matches_reference,check_declines_with_reason", "--max-examples", "2")
    assert code == 0 and "2/2 conformance checks passed" in out
    for check in ("check_matches_reference", "check_declines_with_reason"):  # as the plugin guide shows it
        found = re.search(rf"^  {check} +forward  ok \((\d+) examples?(: ((1D|2D|3D) \d+(, )?)+)?\)$", out,
                          flags=re.M)
        assert found, out  # "ok (N examples)", with the count per N when there are several
        per_n = [int(part.split()[1]) for part in (found[2] or "").lstrip(": ").split(", ") if part]
        assert int(found[1]) >= 1 and (not per_n or sum(per_n) == int(found[1]))


class _IgnoresBias(Broken):
    """A wrong plugin: the float64 reference computed on the host, without the bias."""

    name = "test_ignores_bias"

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        from convlab import reference

        host = [v.copy_to_host() for v in (a, b)]
        out.copy_to_device(reference.solve(problem, *host, None).astype(problem.dtype))


def test_check_prints_one_line_per_failed_check_with_the_property_problem_and_error(capsys):
    pytest.importorskip("convlab.testing")
    registry.register(_IgnoresBias)
    try:
        code, out, _ = run_cli(capsys, "check", "test_ignores_bias", "--checks",
                               "check_matches_reference,check_output_fully_written", "--max-examples", "12")
    finally:
        registry.unregister("test_ignores_bias")
    lines = out.splitlines()
    assert code == 1 and lines[-1] == "test_ignores_bias: 1/2 conformance checks passed" and len(lines) == 3
    failed = next(line for line in lines if "FAIL" in line)
    assert failed.startswith("  check_matches_reference          forward  FAIL: every config the plugin accepts "
                             "agrees with the float64 reference within the tolerance of its arithmetic for that "
                             "config; smallest failing problem: forward f")
    problem = failed.split("smallest failing problem: ")[1].split("; AssertionError: ")[0]
    assert "+bias" in problem  # the property fails only with a bias
    assert f"; AssertionError: test_ignores_bias[default] on {problem}: relative error " in failed
    assert "{" not in failed  # no dict repr
    assert re.search(r"^  check_output_fully_written +forward  ok \(\d+ examples", out, flags=re.M)


class _NegativeWorkspace(Broken):
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
