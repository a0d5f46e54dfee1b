"""The depthwise channels-last forward (convlab.kernels.conv.depthwise_nhwc, algorithms/depthwise/
channels_last.py): channels-last x and out read and written as they are, against the float64 reference
within the plugin's tolerance, the output NaN-poisoned: float32 / float64 / float16 / bfloat16, stride 1
and 2, padding, dilation, M = 2 and 3, odd K (a tail thread with V = 2), bias or none, 1D and 3D, other
tiles; fused epilogues (scale, shift, activation, residual before / after) in its store; mixed layouts
(the kernel follows out's); the stride-1 M = 1 dgrad on the same kernel (filter flipped); any other
dgrad (strides, M > 1, rows no tap reaches) on the channels-last dgrad kernel, its strips of several
VQ; a channels-last dy into a C-contiguous dx through NCHW copies (wgrad: test_depthwise_nhwc_wgrad.py)."""
from __future__ import annotations

import numpy as np
import pytest

from convlab import reference, runtime
from convlab.call.candidate import run_candidate
from convlab.dtypes import np_dtype
from convlab.epilogue import Epilogue
from convlab.kernels.data.layouts import channels_last_copy
from convlab.kernels.epilogue import compute_dtype
from convlab.measure import plugin_tolerance, random_operands, rel_error
from convlab.ops.epilogue import DeviceEpilogue, EpilogueCall
from convlab.plugin import registry
from convlab.plugin.registry import Candidate
from convlab.problem import make_problem, make_problem_nd
from convlab.testing.checks import epilogue_allowed

import convlab.algorithms.depthwise.channels_last as channels_last

PLUGIN = registry.get("depthwise")
mk = make_problem

#: name: forward problem (n, c, h, w, k, r, s ...)
CASES = {
    "f32_s1_bias": mk("forward", 2, 3, 7, 6, 3, 3, 3, padding=1, groups=3, bias=True),
    "f64_m2_s2": mk("forward", 1, 2, 9, 8, 4, 3, 3, stride=2, padding=1, groups=2, bias=True, dtype="float64"),
    "f16_odd_k": mk("forward", 2, 5, 6, 7, 5, 3, 3, padding=1, groups=5, bias=True, dtype="float16"),
    "f16_m2_s2": mk("forward", 1, 3, 9, 8, 6, 3, 3, stride=2, padding=1, groups=3, dtype="float16"),
    "f16_m3_c1": mk("forward", 1, 1, 6, 9, 3, 3, 3, padding=1, groups=1, bias=True, dtype="float16"),
    "bf16_dil2_3x5": mk("forward", 1, 2, 8, 9, 2, 3, 5, padding=(2, 3), dilation=2, groups=2, dtype="bfloat16"),
    "bf16_s2x3_5x5": mk("forward", 1, 3, 11, 10, 3, 5, 5, stride=(2, 3), padding=2, groups=3, bias=True,
                        dtype="bfloat16"),
    "f32_no_pad": mk("forward", 1, 4, 6, 7, 4, 3, 3, groups=4),
    "1d_m2": make_problem_nd("forward", 2, 2, (13,), 4, (3,), stride=2, padding=1, groups=2, bias=True).lowered(),
    "3d": make_problem_nd("forward", 1, 2, (4, 5, 6), 2, (3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1),
                          dilation=(1, 2, 1), groups=2, bias=True),
}

#: stride-1 dgrad with M = 1: dy correlated with the flipped filter, padding dil*(taps-1) - pad
DGRAD = {
    "f32_bias": mk("dgrad", 2, 3, 7, 6, 3, 3, 3, padding=1, groups=3, bias=True),
    "bf16_dil2_3x5": mk("dgrad", 1, 2, 8, 9, 2, 3, 5, padding=(2, 3), dilation=2, groups=2, dtype="bfloat16"),
    "f16_short_dy": mk("dgrad", 1, 2, 7, 7, 2, 3, 3, p=4, padding=1, dilation=2, groups=2, bias=True,
                       dtype="float16"),  # conv_transpose2d's output_padding
    "f64_pad_past_the_filter": mk("dgrad", 1, 3, 6, 7, 3, 3, 3, padding=3, groups=3, dtype="float64"),
    "1d": make_problem_nd("dgrad", 2, 2, (13,), 2, (3,), padding=1, groups=2, bias=True).lowered(),
    "3d": make_problem_nd("dgrad", 1, 2, (4, 5, 6), 2, (3, 2, 3), padding=(1, 0, 1), dilation=(1, 2, 1),
                          groups=2, bias=True),
}

#: any other dgrad (stride > 1 or M > 1): the channels-last dgrad kernel (depthwise_nhwc_dgrad)
STRIDED_DGRAD = {
    "s2_m1_f32": mk("dgrad", 2, 3, 8, 7, 3, 3, 3, stride=2, padding=1, groups=3),
    "s2_m2_f16_bias": mk("dgrad", 1, 2, 9, 8, 4, 3, 3, stride=2, padding=1, groups=2, bias=True, dtype="float16"),
    "s2x3_5x5_bf16": mk("dgrad", 1, 3, 11, 10, 3, 5, 5, stride=(2, 3), padding=2, groups=3, bias=True,
                        dtype="bfloat16"),
    "s1_m2_f64": mk("dgrad", 1, 2, 7, 6, 4, 3, 3, padding=1, groups=2, dtype="float64"),
    "s2_m3_dil2_odd_c_f16": mk("dgrad", 1, 3, 9, 9, 9, 3, 3, stride=2, padding=2, dilation=2, groups=3,
                               dtype="float16"),  # a tail thread (C = 3, V = 2)
    "s3_unreached_rows": mk("dgrad", 1, 2, 11, 11, 2, 3, 3, stride=3, groups=2, bias=True),  # rows 9, 10: bias
    "1d_s2_m2": make_problem_nd("dgrad", 2, 2, (13,), 4, (3,), stride=2, padding=1, groups=2, bias=True).lowered(),
    "3d_s2": make_problem_nd("dgrad", 1, 2, (4, 5, 6), 2, (3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1),
                             dilation=(1, 2, 1), groups=2, bias=True),
}

#: every problem the channels-last kernels take here
KERNEL_CASES = {**CASES, **{f"dgrad_{name}": problem for name, problem in DGRAD.items()},
                **{f"dgrad_{name}": problem for name, problem in STRIDED_DGRAD.items()}}


def _spy(monkeypatch) -> list:
    """The epilogue (or None) of each channels-last launch."""
    calls, original = [], channels_last.run_channels_last

    def run(problem, a, b, bias, out, epilogue=None):
        calls.append(None if epilogue is None else epilogue.epilogue)
        return original(problem, a, b, bias, out, epilogue)
    monkeypatch.setattr("convlab.algorithms.depthwise.plugin.run_channels_last", run)
    return calls


def _run(problem, host, x_last=True, out_last=True, epilogue=None):
    """``problem`` through run_candidate with x and out channels-last where asked, out NaN-poisoned;
    out read back (NCHW index order)."""
    a = channels_last_copy(host[0]) if x_last else runtime.to_device(host[0])
    b, bias = runtime.to_device(host[1]), None if host[2] is None else runtime.to_device(host[2])
    poison = np.full(problem.operand_shapes[2], np.nan, np_dtype(problem.dtype))
    out = channels_last_copy(poison) if out_last else runtime.to_device(poison)
    run_candidate(Candidate(PLUGIN, PLUGIN.configs(problem)[0]), problem, a, b, bias, out, 2**28, epilogue=epilogue)
    return runtime.to_host(out)


def _check(problem, got, want):
    config = PLUGIN.configs(problem)[0]
    assert rel_error(got, want) <= plugin_tolerance(PLUGIN, problem, config, want), problem.describe()


@pytest.mark.parametrize("case", list(KERNEL_CASES))
def test_channels_last_kernel_matches_the_reference(monkeypatch, case):
    problem = KERNEL_CASES[case]
    host = random_operands(problem, np.random.default_rng(len(case)))
    calls = _spy(monkeypatch)
    got = _run(problem, host)
    assert calls == [None]  # the channels-last kernel ran, once
    assert got.dtype == np_dtype(problem.dtype)
    _check(problem, got, reference.solve(problem, *host))


@pytest.mark.parametrize("tile", [(1, 3, 2, 2), (2, 1, 3, 1), (4, 4, 1, 2), (1, 5, 1, 1)])
def test_every_tile_shape(monkeypatch, tile):
    """(CB, VQ, ROWS, V) other than the planner's: V = 2 in float32, strips longer than a row, odd rows."""
    monkeypatch.setattr(channels_last, "nhwc_tile", lambda problem, target: tile)
    channels_last.nhwc_launch.cache_clear()
    try:
        for case in ("f32_s1_bias", "f16_odd_k", "3d"):
            problem = CASES[case]
            host = random_operands(problem, np.random.default_rng(7))
            _check(problem, _run(problem, host), reference.solve(problem, *host))
    finally:
        channels_last.nhwc_launch.cache_clear()


@pytest.mark.parametrize("x_last, out_last", [(False, True), (True, False)])
def test_mixed_layouts_follow_the_output(monkeypatch, x_last, out_last):
    """A C-contiguous x into a channels-last out: the channels-last kernel on a copy of x; a channels-last
    x into a C-contiguous out: the NCHW kernels on a copy of x."""
    problem = CASES["f16_m2_s2"]
    host = random_operands(problem, np.random.default_rng(3))
    calls = _spy(monkeypatch)
    got = _run(problem, host, x_last, out_last)
    assert calls == ([None] if out_last else [])
    _check(problem, got, reference.solve(problem, *host))


EPILOGUES = {
    "bn_relu6": ("f32_s1_bias", Epilogue("relu6", scale=True, shift=True)),
    "gelu_after": ("f64_m2_s2", Epilogue("gelu", scale=True, residual="after")),
    "leaky_before": ("f16_odd_k", Epilogue("leaky_relu", 0.2, shift=True, residual="before")),
    "hardswish_after": ("bf16_dil2_3x5", Epilogue("hardswish", shift=True, residual="after")),
    "silu_3d": ("3d", Epilogue("silu", scale=True, shift=True, residual="before")),
}


def _draw(problem, epi: Epilogue, rng) -> dict:
    """The host operands of ``epi``: scale, shift (K,) float64, residual of the output dtype."""
    shape, dt = problem.operand_shapes[2], np_dtype(problem.dtype)
    return {"scale": rng.uniform(-2, 2, problem.k) if epi.scale else None,
            "shift": rng.standard_normal(problem.k) if epi.shift else None,
            "residual": rng.standard_normal(shape).astype(dt) if epi.residual else None}


def _device(problem, epi: Epilogue, ops: dict) -> DeviceEpilogue:
    """``epi`` with ``ops`` on the device, the residual channels-last (out's layout: fusable)."""
    residual = None if ops["residual"] is None else channels_last_copy(ops["residual"])
    cast = compute_dtype(problem.dtype)
    scale, shift = (None if v is None else v.astype(cast) for v in (ops["scale"], ops["shift"]))
    return DeviceEpilogue(EpilogueCall(epi, problem.dtype, residual, scale, shift))


@pytest.mark.parametrize("name", list(EPILOGUES))
def test_fused_epilogue_in_the_channels_last_store(monkeypatch, name):
    case, epi = EPILOGUES[name]
    problem, rng = CASES[case], np.random.default_rng(len(name))
    host = random_operands(problem, rng)
    ops = _draw(problem, epi, rng)
    calls = _spy(monkeypatch)
    epilogue = _device(problem, epi, ops)
    got = _run(problem, host, epilogue=epilogue)
    assert calls == [epi] and epilogue.fused  # fused into the channels-last kernel, no pass
    conv = reference.solve(problem, *host)
    want = reference.epilogue(conv, epi, ops["scale"], ops["shift"], ops["residual"])
    allowed = epilogue_allowed(PLUGIN, problem, PLUGIN.configs(problem)[0], conv, want, epi, ops)
    assert np.all(np.isfinite(got)) and np.linalg.norm(got.astype(np.float64) - want) <= allowed
    if problem.dtype in ("float32", "float64"):  # the same values through the same device function
        monkeypatch.setattr(type(PLUGIN), "fuses", lambda self, problem, epilogue: "declined in this test")
        epilogue = _device(problem, epi, ops)
        separate = _run(problem, host, epilogue=epilogue)
        assert not epilogue.fused and calls[-1] is None  # the plain channels-last kernel, then the pass
        np.testing.assert_array_equal(got, separate)


@pytest.mark.parametrize("tile", [(1, 2, 3, 1), (2, 4, 1, 2), (4, 6, 2, 1)])
def test_every_dgrad_tile_shape(monkeypatch, tile):
    """The dgrad kernel's strips of VQ = 2, 4, 6 (multiples of sw = 2; 6 on stride 3 too) with V = 1, 2."""
    monkeypatch.setattr(channels_last, "nhwc_tile", lambda problem, target: tile)
    channels_last.nhwc_launch.cache_clear()
    try:
        for case in ("s2_m2_f16_bias", "3d_s2") + (("s3_unreached_rows",) if tile[1] % 3 == 0 else ()):
            problem = STRIDED_DGRAD[case]
            host = random_operands(problem, np.random.default_rng(11))
            _check(problem, _run(problem, host), reference.solve(problem, *host))
    finally:
        channels_last.nhwc_launch.cache_clear()


def test_dgrad_strip_must_cover_whole_strides():
    from convlab.kernels.conv.depthwise_nhwc_dgrad import nhwc_dgrad_kernel
    with pytest.raises(ValueError, match="multiple of the stride"):
        nhwc_dgrad_kernel("float32", (1, 3, 1, 1), (3, 3, 2, 2, 1, 1, 1, 1), (4, 4, 8, 8, 2, 2, 1), False)


def test_dgrad_into_a_contiguous_dx_takes_nchw_copies(monkeypatch):
    """A channels-last dy into a C-contiguous dx: the NCHW kernels (the channels-last ones follow out)."""
    problem = STRIDED_DGRAD["s2_m2_f16_bias"]
    host = random_operands(problem, np.random.default_rng(5))
    calls = _spy(monkeypatch)
    got = _run(problem, host, x_last=True, out_last=False)
    assert not calls
    _check(problem, got, reference.solve(problem, *host))


@pytest.mark.skipif(runtime.SIMULATOR, reason="PTX needs the GPU compiler")
@pytest.mark.parametrize("op,dtype,size,stride", [("forward", "float16", 112, 1), ("forward", "bfloat16", 28, 1),
                                                  ("dgrad", "float32", 56, 1), ("dgrad", "float16", 112, 2)])
def test_ptx_keeps_registers_and_32_bit_indices(op, dtype, size, stride):
    """Accumulators, inputs and taps stay in registers (no local memory); index math stays 32-bit."""
    problem = mk(op, 2, 32, size, size, 32, 3, 3, stride=stride, padding=1, groups=32, dtype=dtype)
    host = random_operands(problem, np.random.default_rng(1))
    _run(problem, host)  # compiles the kernel
    (ptx,) = channels_last.nhwc_launch(problem, runtime.target(), False).dispatcher.inspect_asm().values()
    assert ".local" not in ptx and "mul.lo.s64" not in ptx and "mul.lo.u64" not in ptx
