"""The benchmark suites behind ``convlab bench`` and ``convlab tune``: the built-in ones hold the documented
shapes, bad suite entries name the problem, a user suite file and a single ``--x/--w`` shape run.
"""
from __future__ import annotations

import json

import pytest

from convlab.bench import harness as bench
from convlab.bench.baseline import transpose_output_padding
from convlab.bench.suite import builtin_suites, load_suite, single_shape_suite

from cli_helpers import TINY_RUN, run_cli


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
    ({"x": [1, 2, 5, 5], "w": [2, 2, 3]}, "list of 4 ints"),
    ({"x": [1, 2], "w": [2, 2, 3, 3]}, "list of 4 ints .3 for 1D, 5 for 3D"),
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
