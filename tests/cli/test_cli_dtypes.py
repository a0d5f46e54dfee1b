"""``--dtype`` in every command that takes one shape: the library's dtypes and ``float32+high``
(float32 under float32 precision "high"); a bad dtype exits 2 naming the choices."""
from __future__ import annotations

import argparse
import json

import pytest

from convlab.runtime import settings
from convlab.cli import parser as cli
from convlab.cli.arg_types import DTYPE_CHOICES

from cli_helpers import TINY_RUN, run_cli

SHAPE = ["--x", "1,16,4,4", "--w", "16,16,3,3", "--padding", "1"]


def _row(out: str, plugin: str) -> str:
    """explain's line for ``plugin`` (its first line naming it, '*' mark or not)."""
    return next(line for line in out.splitlines() if line.replace("*", " ").split()[:1] == [plugin])


def _dtype_actions() -> dict[str, argparse.Action]:
    """Each subcommand's --dtype option."""
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: a for name, p in sub.choices.items() for a in p._actions if "--dtype" in a.option_strings}


def test_every_command_with_a_shape_takes_every_dtype():
    actions = _dtype_actions()
    assert {"explain", "bench", "tune", "compile", "source"} <= set(actions)
    assert set(DTYPE_CHOICES) == {"float64", "float32", "float16", "bfloat16", "float32+high"}
    for name, action in actions.items():
        assert tuple(action.choices) == DTYPE_CHOICES, name
        assert "float32+high" in action.help and "'high'" in action.help, name


@pytest.mark.parametrize("dtype,short", [("float16", "f16"), ("bfloat16", "bf16"), ("float64", "f64")])
def test_explain_takes_the_half_dtypes(capsys, dtype, short):
    code, out, err = run_cli(capsys, "explain", *SHAPE, "--dtype", dtype)
    assert code == 0, err
    assert out.startswith(f"problem: forward {short} ")
    if dtype != "float64":  # the half-precision plugins apply
        assert "eligible" in _row(out, "widen")


def test_explain_float32_high_runs_under_precision_high_and_restores_it(capsys):
    assert settings.get_float32_precision() == "highest"
    code, out, err = run_cli(capsys, "explain", *SHAPE, "--dtype", "float32+high")
    assert code == 0, err
    assert out.startswith("problem: forward f32 ") and "note: float32 precision: high" in out
    assert "eligible" in _row(out, "tensor_core")  # TF32 allowed
    assert settings.get_float32_precision() == "highest"
    code, out, _ = run_cli(capsys, "explain", *SHAPE, "--dtype", "float32")
    assert code == 0 and "note: float32 precision: highest" in out
    assert "declines" in _row(out, "tensor_core")


@pytest.mark.parametrize("command", [["explain"], ["bench"], ["tune"], ["compile"], ["source", "direct"]])
def test_a_bad_dtype_exits_2_naming_the_choices(capsys, command):
    with pytest.raises(SystemExit) as exc:
        cli.main([*command, *SHAPE, "--dtype", "int8"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--dtype" in err and "'int8'" in err
    assert all(f"'{d}'" in err for d in DTYPE_CHOICES)


def test_source_takes_float32_high_as_its_precision(capsys):
    p = cli.build_parser()
    args = p.parse_args(["source", "tensor_core", *SHAPE, "--dtype", "float32+high"])
    assert cli._dtype_precision(p, args) == "high" and (args.dtype, args.precision) == ("float32", "high")
    args = p.parse_args(["source", "tensor_core", *SHAPE, "--dtype", "float32+high", "--precision", "highest"])
    with pytest.raises(SystemExit) as exc:
        cli._dtype_precision(p, args)
    assert exc.value.code == 2 and "--precision is 'highest'" in capsys.readouterr().err


def test_bench_records_the_precision_of_float32_high(tmp_path, capsys):
    code, out, err = run_cli(capsys, "bench", *SHAPE, "--ops", "forward", "--dtype", "float32+high",
                             *TINY_RUN, "--no-torch", "--out", str(tmp_path))
    assert code == 0, out + err
    data = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert data["settings"]["float32_precision"] == "high"
    assert data["results"][0]["problem"]["dtype"] == "float32"
    assert settings.get_float32_precision() == "highest"


@pytest.mark.parametrize("dtype,picked", [("float32+high", "tensor_core"), ("bfloat16", "tensor_core"),
                                          ("float32", None)])
def test_tune_runs_the_shape_in_the_dtype_asked(capsys, dtype, picked):
    code, out, err = run_cli(capsys, "tune", *SHAPE, "--ops", "forward", "--dtype", dtype, "--quiet")
    assert code == 0, out + err
    line = next(line for line in out.splitlines() if " forward " in line)
    assert f" forward  {dtype:<12} -> " in line  # the dtype token of the task tuned
    if picked:
        assert f"-> {picked}[" in line
    else:  # float32 under "highest": no TF32 plugin
        assert "-> tensor_core[" not in line
