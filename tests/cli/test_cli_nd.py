"""1D and 3D on the command line and in suites: 3- and 5-element --x/--w shapes, the unet3d,
r2plus1d_18 and wavenet suites, N-d suite entries validated like calls."""
from __future__ import annotations

import pytest

from convlab.bench.suite import builtin_suites, load_suite, single_shape_suite

from cli_helpers import run_cli


def test_nd_suites_hold_their_layers():
    assert {"unet3d", "r2plus1d_18", "wavenet"} <= set(builtin_suites())
    unet = load_suite("unet3d").problems()
    assert {p.ndim for _, p in unet} == {3} and {p.n for _, p in unet} == {2}
    assert max(p.d for _, p in unet) == 128 and sum(e.kind == "conv_transpose3d" for e in load_suite("unet3d").entries) == 3
    r21 = [p for _, p in load_suite("r2plus1d_18").problems(["forward"])]
    assert {p.kernel_size for p in r21} >= {(1, 3, 3), (3, 1, 1), (1, 7, 7), (1, 1, 1)} and {p.n for p in r21} == {8}
    assert r21[0].spatial_in == (16, 112, 112) and len({p.key() for p in r21}) == len(r21)
    wave = [p for _, p in load_suite("wavenet").problems(["forward"])]
    assert all(p.ndim == 2 and p.h == 1 and p.n == 16 for p in wave)  # 1D entries: their 2D embeddings
    assert sorted(p.dilation[1] for p in wave if p.s == 2)[-1] == 512 and all(p.q == 16000 for p in wave[1:])


def test_nd_entries_are_validated_like_calls():
    entry = single_shape_suite({"x": [1, 2, 3, 4, 5], "w": [4, 2, 1, 3, 3], "padding": [0, 1, 1]}).entries[0]
    assert entry.kind == "conv3d" and entry.problems[0].spatial_out == (3, 4, 5)
    with pytest.raises(ValueError, match="padding must be an int or a tuple of 3"):
        single_shape_suite({"x": [1, 2, 3, 4, 5], "w": [4, 2, 1, 3, 3], "padding": [1, 1]})
    with pytest.raises(ValueError, match="x and w of 5 entries"):
        single_shape_suite({"x": [1, 2, 3, 4, 5], "w": [4, 2, 3, 3]})


def test_explain_takes_1d_and_3d_shapes(capsys):
    code, out, _ = run_cli(capsys, "explain", "--x", "1,2,3,4,4", "--w", "2,2,2,3,3", "--padding", "0,1,1")
    assert code == 0 and "x(1, 2, 3, 4, 4)" in out and "depthwise" in out and "not 3D" in out
    code, out, _ = run_cli(capsys, "explain", "--x", "1,2,9", "--w", "2,2,3", "--dilation", "2")
    assert code == 0 and "x(1, 2, 1, 9)" in out and "picked:" in out
