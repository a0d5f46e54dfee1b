"""The tensor-core strided dgrad by stride phases (algorithms/tensor_core/phases.py): the phase split
against its definition, the route rule (C >= PHASE_MIN_CHANNELS, 2D) beside the column route, and the
route against the float64 reference with NaN-poisoned dx: strides 2, 2x3 and 3, 1x1 / 3x3 / 5x5 filters,
dilation, padding, a shortened dy (conv_transpose2d's output_padding), phases without taps (bias only),
1D, NCHW and channels-last operands, fp16 / bf16 / TF32 and tf32x3's 3xTF32."""
from __future__ import annotations

import numpy as np
import pytest

import convlab
from convlab import reference, runtime
from convlab.call.candidate import run_candidate
from convlab.dtypes import np_dtype
from convlab.kernels.data.layouts import channels_last_copy, is_channels_last
from convlab.measure import plugin_tolerance, random_operands, rel_error
from convlab.plugin import registry
from convlab.plugin.registry import Candidate
from convlab.problem import make_problem as mk, make_problem_nd

import convlab.algorithms.tensor_core.phases as phases

CASES = {
    "3x3_s2_f16_bias": mk("dgrad", 1, 16, 7, 6, 8, 3, 3, stride=2, padding=1, dtype="float16", bias=True),
    "1x1_s2_bf16_empty_phases": mk("dgrad", 1, 16, 6, 5, 8, 1, 1, stride=2, dtype="bfloat16", bias=True),
    "3x3_s2x3_dil2x1_f16": mk("dgrad", 2, 16, 9, 8, 8, 3, 3, stride=(2, 3), padding=(1, 0), dilation=(2, 1),
                              dtype="float16"),
    "5x5_s3_bf16": mk("dgrad", 1, 16, 9, 9, 12, 5, 5, stride=3, padding=2, dtype="bfloat16"),
    "short_dy_f16": mk("dgrad", 1, 16, 8, 8, 8, 3, 3, p=3, q=3, stride=2, padding=1, dtype="float16"),
    "1d_s2_bf16": make_problem_nd("dgrad", 2, 16, (11,), 8, (3,), stride=2, padding=1, dtype="bfloat16",
                                  bias=True).lowered(),
}


@pytest.mark.parametrize("size, kernel, stride, pad, dil", [(7, 3, 2, 1, 1), (9, 3, 2, 1, 2), (8, 5, 3, 2, 1),
                                                            (6, 1, 2, 0, 1), (10, 4, 3, 3, 2), (5, 3, 4, 0, 1)])
def test_axis_phases_cover_every_index_once_with_its_taps(size, kernel, stride, pad, dil):
    """Each dx index h lies in one phase, and its taps read dy at (h + pad - r*dil) / stride exactly for the
    r where that is whole (any dy length: the gather's bounds check cuts the rest)."""
    seen = {}
    for ph in phases.axis_phases(size, kernel, stride, pad, dil):
        for i in range(ph.count):
            h = ph.start + stride * i
            assert h not in seen and 0 <= h < size
            seen[h] = {(ph.first - t * ph.step, i - ph.pad + t * ph.dil) for t in range(ph.taps)}
    assert sorted(seen) == list(range(size))
    for h, taps in seen.items():
        want = {(r, (h + pad - r * dil) // stride) for r in range(kernel) if (h + pad - r * dil) % stride == 0}
        assert taps == want, h


def _run(problem, plugin, host, last, mma=None):
    a = channels_last_copy(host[0]) if last else runtime.to_device(host[0])
    b = channels_last_copy(host[1]) if last else runtime.to_device(host[1])
    bias = None if host[2] is None else runtime.to_device(host[2])
    poison = np.full(problem.operand_shapes[2], np.nan, np_dtype(problem.dtype))
    out = channels_last_copy(poison) if last else runtime.to_device(poison)
    assert is_channels_last(out) == last
    config = [c for c in plugin.configs(problem) if mma is None or c.get("MMA", "sync") == mma][0]
    run_candidate(Candidate(plugin, config), problem, a, b, bias, out, 2**28)
    got = runtime.to_host(out)
    want = reference.solve(problem, *host)
    assert np.all(np.isfinite(got))
    assert rel_error(got, want) <= plugin_tolerance(plugin, problem, config, want), problem.describe()


def _spy(monkeypatch) -> list:
    calls, original = [], phases.run_phases
    monkeypatch.setattr(phases, "run_phases", lambda *args: (calls.append(args[0]), original(*args)))
    return calls


@pytest.mark.parametrize("last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("case", list(CASES))
def test_phase_route_matches_the_reference(monkeypatch, case, last):
    problem = CASES[case]
    calls = _spy(monkeypatch)
    _run(problem, registry.get("tensor_core"), random_operands(problem, np.random.default_rng(len(case))), last)
    assert calls == [problem]


@pytest.mark.parametrize("case", ["3x3_s2x3_dil2x1_f16", "1x1_s2_bf16_empty_phases"])
def test_phases_on_a_warpgroup_config(monkeypatch, case):
    """The same route on the wgmma pipeline (A read K-major from dy's NHWC copy)."""
    problem = CASES[case]
    calls = _spy(monkeypatch)
    _run(problem, registry.get("tensor_core"), random_operands(problem, np.random.default_rng(9)), True, "wgmma")
    assert calls == [problem]


@pytest.mark.parametrize("plugin", ["tensor_core", "tf32x3"])
def test_float32_phases_in_tf32_and_3xtf32(monkeypatch, plugin):
    problem = mk("dgrad", 1, 16, 7, 7, 8, 3, 3, stride=2, padding=1, dtype="float32", bias=True)
    calls = _spy(monkeypatch)
    with convlab.float32_precision("high" if plugin == "tensor_core" else "highest"):
        _run(problem, registry.get(plugin), random_operands(problem, np.random.default_rng(4)), False)
    assert calls == [problem]


def test_the_route_rule_keeps_few_channels_and_3d_on_columns(monkeypatch):
    """C below PHASE_MIN_CHANNELS (a stem's 3) and 3D problems take the column route."""
    narrow = mk("dgrad", 1, phases.PHASE_MIN_CHANNELS - 1, 7, 6, 8, 3, 3, stride=2, padding=1, dtype="float16")
    volume = make_problem_nd("dgrad", 1, 16, (4, 5, 4), 8, (3, 2, 3), stride=(2, 1, 2), padding=1,
                             dtype="float16")
    assert phases.applies(CASES["3x3_s2_f16_bias"]) and not phases.applies(narrow) and not phases.applies(volume)
    calls = _spy(monkeypatch)
    _run(narrow, registry.get("tensor_core"), random_operands(narrow, np.random.default_rng(2)), False)
    assert not calls


def test_workspace_and_cost_follow_the_route():
    tc = registry.get("tensor_core")
    problem = CASES["3x3_s2_f16_bias"]
    config = tc.configs(problem)[0]
    assert tc.workspace_bytes(problem, config, 2**28, runtime.target()) == phases.workspace_bytes(problem)
    features = tc.cost_features(problem, config, runtime.target(), 2**28)
    assert features.launches == 1 + 2 * 4  # dy's copy, then a filter and a GEMM for each of the 4 phases
    empty = CASES["1x1_s2_bf16_empty_phases"]
    assert tc.cost_features(empty, tc.configs(empty)[0], runtime.target(), 2**28).launches == 1 + 2 + 1
