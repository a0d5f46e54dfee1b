"""``convlab --tune-mode MODE``: before or after the subcommand, argparse's error listing the modes for a
bad name, the mode restored after the command, and ``explain`` printing the cost model's estimates
(``--target sm_90``: the committed model file, nothing timed)."""
from __future__ import annotations

import pytest

from convlab import autotune, runtime
from convlab.cli import parser as cli


def _run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


SHAPE = ("--x", "1,2,4,4", "--w", "2,2,3,3")


@pytest.mark.parametrize("where", ["before", "after"])
def test_bad_mode_name_is_an_argparse_error_listing_the_modes(capsys, where):
    argv = ["--tune-mode", "fast", "list"] if where == "before" else ["list", "--tune-mode", "fast"]
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "invalid choice: 'fast'" in err
    assert all(f"'{m}'" in err for m in ("heuristic", "tune", "exhaustive"))


@pytest.mark.skipif(not runtime.SIMULATOR, reason="what the simulator answers: a GPU times the candidates")
def test_mode_applies_to_the_command_and_is_restored(capsys):
    code, out, _ = _run(capsys, "explain", *SHAPE, "--tune-mode", "heuristic")
    assert code == 0 and "(by the cost model, nothing timed)" in out
    assert "heuristic pick without a cost model: declared priority (the simulator" in out
    assert autotune.get_mode() == "tune"
    code, out, _ = _run(capsys, "--tune-mode", "exhaustive", "explain", *SHAPE)
    assert code == 0 and "(by declared priority)" in out  # the simulator, no timer: nothing timed


def test_explain_for_sm_90_shows_the_model_estimates(capsys):
    code, out, _ = _run(capsys, "explain", "--x", "16,64,56,56", "--w", "64,64,3,3", "--padding", "1",
                        "--target", "sm_90")
    assert code == 0 and "candidates (estimate, median, check):" in out
    direct = next(line for line in out.splitlines() if line.strip().startswith("direct") and "prio" in line)
    assert "est " in direct and "sm_90.json" in out and "picked:" in out
