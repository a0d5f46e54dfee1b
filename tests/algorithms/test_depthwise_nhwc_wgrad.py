"""The depthwise channels-last wgrad (convlab.kernels.conv.depthwise_nhwc_wgrad, algorithms/depthwise/
channels_last.py): channels-last x and dy read as they are, dw NaN-poisoned, against the float64 reference
within the plugin's tolerance: float32 / float64 / float16 / bfloat16, stride 1, 2 and 2x3, padding,
dilation, M = 2, odd K (a tail thread with V = 2), 1D and 3D, split and unsplit, other tiles; two runs
bit-identical; mixed layouts and filters past MAX_WGRAD_WORDS take the NCHW kernels."""
from __future__ import annotations

import numpy as np
import pytest

from convlab import reference, runtime
from convlab.call.candidate import run_candidate
from convlab.dtypes import np_dtype
from convlab.kernels.data.layouts import channels_last_copy
from convlab.measure import plugin_tolerance, random_operands, rel_error
from convlab.plugin import registry
from convlab.plugin.registry import Candidate
from convlab.problem import make_problem, make_problem_nd

import convlab.algorithms.depthwise.channels_last as channels_last

PLUGIN = registry.get("depthwise")
mk = make_problem
ROOMY, NONE = 2**28, 0  # workspace limits: splits as planned, and none (one launch writes dw)

#: name: wgrad problem (n, c, h, w, k, r, s ...)
CASES = {
    "f32_s1": mk("wgrad", 2, 3, 7, 6, 3, 3, 3, padding=1, groups=3),
    "f64_m2_s2": mk("wgrad", 2, 2, 9, 8, 4, 3, 3, stride=2, padding=1, groups=2, dtype="float64"),
    "f16_odd_k": mk("wgrad", 2, 5, 6, 7, 5, 3, 3, padding=1, groups=5, dtype="float16"),
    "f16_m2_s2": mk("wgrad", 1, 3, 9, 8, 6, 3, 3, stride=2, padding=1, groups=3, dtype="float16"),
    "bf16_dil2_3x5": mk("wgrad", 2, 2, 8, 9, 2, 3, 5, padding=(2, 3), dilation=2, groups=2, dtype="bfloat16"),
    "bf16_s2x3_5x5": mk("wgrad", 1, 3, 11, 10, 3, 5, 5, stride=(2, 3), padding=2, groups=3, dtype="bfloat16"),
    "f32_no_pad": mk("wgrad", 1, 4, 6, 7, 4, 3, 3, groups=4),
    "f32_7x7_s2": mk("wgrad", 1, 2, 9, 10, 2, 7, 7, stride=2, padding=3, groups=2),  # 49 accumulators
    "1d_m2": make_problem_nd("wgrad", 4, 2, (13,), 4, (3,), stride=2, padding=1, groups=2).lowered(),
    "3d": make_problem_nd("wgrad", 3, 2, (4, 5, 6), 2, (3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1),
                          dilation=(1, 2, 1), groups=2),
}
SPLIT = ("f32_s1", "f16_odd_k", "1d_m2", "f64_m2_s2", "bf16_dil2_3x5", "3d")  # split on the simulator with ROOMY


def _spy(monkeypatch) -> list:
    """The workspace limit of each channels-last wgrad launch."""
    calls, original = [], channels_last.run_wgrad_channels_last

    def run(problem, x, dy, dw, workspace_limit):
        calls.append(workspace_limit)
        return original(problem, x, dy, dw, workspace_limit)
    monkeypatch.setattr("convlab.algorithms.depthwise.plugin.run_wgrad_channels_last", run)
    return calls


def _run(problem, host, limit=ROOMY, x_last=True, dy_last=True):
    """dw of ``problem`` through run_candidate from x and dy channels-last where asked, dw NaN-poisoned."""
    a = channels_last_copy(host[0]) if x_last else runtime.to_device(host[0])
    b = channels_last_copy(host[1]) if dy_last else runtime.to_device(host[1])
    out = runtime.to_device(np.full(problem.operand_shapes[2], np.nan, np_dtype(problem.dtype)))
    run_candidate(Candidate(PLUGIN, PLUGIN.configs(problem)[0]), problem, a, b, None, out, limit)
    return runtime.to_host(out)


def _check(problem, got, want):
    config = PLUGIN.configs(problem)[0]
    assert got.dtype == np_dtype(problem.dtype) and np.all(np.isfinite(got))
    assert rel_error(got, want) <= plugin_tolerance(PLUGIN, problem, config, want), problem.describe()


@pytest.mark.parametrize("limit", [ROOMY, NONE], ids=["planned_splits", "unsplit"])
@pytest.mark.parametrize("case", list(CASES))
def test_channels_last_wgrad_matches_the_reference(monkeypatch, case, limit):
    problem = CASES[case]
    host = random_operands(problem, np.random.default_rng(len(case)))
    calls = _spy(monkeypatch)
    got = _run(problem, host, limit)
    assert calls == [limit]  # the channels-last kernel ran, once
    _check(problem, got, reference.solve(problem, *host))
    again = _run(problem, host, limit)
    np.testing.assert_array_equal(got, again)  # fixed summation order: bit-identical


def test_the_split_path_is_taken():
    """The split cases split with a roomy workspace, none without one, and the workspace the plugin
    declares covers the channels-last partials within the limit."""
    target = runtime.target()
    for case in SPLIT:
        problem = CASES[case]
        splits, chunk = channels_last.wgrad_split(problem, target, ROOMY)
        units = channels_last.wgrad_units(problem, channels_last.wgrad_tile(problem, target)[1])
        assert splits > 1 and (splits - 1) * chunk < units <= splits * chunk, case
        assert channels_last.wgrad_split(problem, target, NONE) == (1, units)
        need = channels_last.wgrad_workspace_bytes(problem, target, ROOMY)
        declared = PLUGIN.workspace_bytes(problem, PLUGIN.configs(problem)[0], ROOMY, target)
        assert 0 < need <= declared <= ROOMY
        tight = need - 1  # one byte short: fewer splits, within the limit
        assert channels_last.wgrad_workspace_bytes(problem, target, tight) <= tight


@pytest.mark.parametrize("tile", [(1, 3, 2, 2), (2, 1, 4, 1), (4, 4, 1, 2), (1, 5, 1, 1), (2, 2, 8, 2)])
def test_every_tile_shape(monkeypatch, tile):
    """(CB, VQ, ROWS, V) other than the planner's: V = 2 in float32 / float64, strips longer than a row,
    one row (no tree) and eight."""
    monkeypatch.setattr(channels_last, "wgrad_tile", lambda problem, target: tile)
    for cache in (channels_last.wgrad_launch, channels_last.wgrad_split):
        cache.cache_clear()
    try:
        for case in ("f32_s1", "f16_odd_k", "3d", "f64_m2_s2"):
            problem = CASES[case]
            host = random_operands(problem, np.random.default_rng(7))
            _check(problem, _run(problem, host), reference.solve(problem, *host))
    finally:
        for cache in (channels_last.wgrad_launch, channels_last.wgrad_split):
            cache.cache_clear()


@pytest.mark.parametrize("x_last, dy_last", [(False, True), (True, False)])
def test_mixed_layouts_take_nchw_copies(monkeypatch, x_last, dy_last):
    problem = CASES["f16_m2_s2"]
    host = random_operands(problem, np.random.default_rng(3))
    calls = _spy(monkeypatch)
    got = _run(problem, host, ROOMY, x_last, dy_last)
    assert not calls
    _check(problem, got, reference.solve(problem, *host))


def test_a_filter_past_the_register_cap_takes_nchw_copies(monkeypatch):
    problem = mk("wgrad", 1, 2, 10, 9, 2, 9, 9, padding=4, groups=2, dtype="float16")  # 81 taps x 2 channels
    assert channels_last.wgrad_words(problem) > channels_last.MAX_WGRAD_WORDS
    host = random_operands(problem, np.random.default_rng(4))
    calls = _spy(monkeypatch)
    got = _run(problem, host)
    assert not calls
    _check(problem, got, reference.solve(problem, *host))
