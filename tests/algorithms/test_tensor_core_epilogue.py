"""tensor_core's fused epilogue (convlab.epilogue): the gather route's staged store with Cs in float32
(one launch) and split-K's ordered sum of the partials, float16 and bfloat16, NCHW and channels-last
outputs with a residual of the same layout, against the float64 reference's epilogue; where it
declines (wgrad, the strided dgrad's column route, a residual whose layout is not the output's)."""
import numpy as np
import pytest

import convlab
from convlab import reference, runtime
from convlab.call.candidate import run_candidate
from convlab.epilogue import Epilogue
from convlab.algorithms.tensor_core import gather as tc_gather
from convlab.kernels.data import layouts
from convlab.kernels.epilogue import compute_dtype, operands as epilogue_operands
from convlab.kernels.tensor_core import conv as tc_conv
from convlab.kernels.tensor_core.config import TcConfig
from convlab.kernels.tensor_core.gemm import SIM_WGMMA
from convlab.measure import random_operands, to_device
from convlab.ops.epilogue import DeviceEpilogue, EpilogueCall
from convlab.plugin import registry
from convlab.plugin.registry import Candidate
from convlab.problem import make_problem, make_problem_nd, np_dtype
from convlab.testing.checks import epilogue_allowed
from tc_helpers import TC, split_like_the_simulator, spy  # noqa: F401  (a fixture)

#: the routes that fuse: a forward in either half type (bias; a strided one), and the stride-1 dgrad that
#: conv_transpose2d runs
PROBLEMS = {
    "fwd_f16": make_problem("forward", 2, 8, 5, 6, 16, 3, 3, padding=1, dtype="float16", bias=True),
    "fwd_bf16": make_problem("forward", 1, 8, 7, 7, 12, 3, 3, stride=2, padding=1, dtype="bfloat16", bias=True),
    "dgrad_f16": make_problem("dgrad", 1, 16, 5, 5, 8, 3, 3, padding=1, dtype="float16", bias=True),
}
#: epilogues: scale and shift with the residual before relu6, the residual after silu with a scale, and
#: leaky_relu with a shift and no residual
EPILOGUES = {
    "relu6_before": Epilogue("relu6", scale=True, shift=True, residual="before"),
    "silu_after": Epilogue("silu", scale=True, residual="after"),
    "leaky_shift": Epilogue("leaky_relu", 0.2, shift=True),
}


@pytest.fixture(autouse=True)
def _simulator_splits(split_like_the_simulator):
    """Split-K plans as on the simulator (tc_helpers)."""


def _run(problem, epi, out_last, residual_last, seed=0, plugin=TC):
    """(got, want, allowed error norm, DeviceEpilogue) of one fused call through run_candidate into a
    NaN-poisoned output (channels-last when ``out_last``; the residual when ``residual_last``)."""
    rng = np.random.default_rng(seed)
    host = random_operands(problem, rng)
    shape, dtype, k = problem.operand_shapes[2], np_dtype(problem.dtype), problem.operand_shapes[2][1]
    ops = {"scale": rng.uniform(-2, 2, k) if epi.scale else None,
           "shift": rng.standard_normal(k) if epi.shift else None,
           "residual": rng.standard_normal(shape).astype(dtype) if epi.residual else None}

    def device(h, last):
        return layouts.channels_last_copy(h) if last else runtime.to_device(h)
    out = device(np.full(shape, np.nan, dtype), out_last)
    residual = None if ops["residual"] is None else device(ops["residual"], residual_last)
    cast = compute_dtype(problem.dtype)
    scale, shift = (None if v is None else v.astype(cast) for v in (ops["scale"], ops["shift"]))
    epilogue = DeviceEpilogue(EpilogueCall(epi, problem.dtype, residual, scale, shift))
    config = plugin.configs(problem)[0]
    run_candidate(Candidate(plugin, config), problem, *to_device(*host), out, 2**28, epilogue=epilogue)
    got = np.asarray(runtime.to_host(out), np.float64)
    conv = reference.solve(problem, *host)
    want = reference.epilogue(conv, epi, ops["scale"], ops["shift"], ops["residual"])
    return got, want, epilogue_allowed(plugin, problem, config, conv, want, epi, ops), epilogue


@pytest.mark.parametrize("split", [True, False], ids=["split", "one"])
@pytest.mark.parametrize("out_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("epi", sorted(EPILOGUES))
@pytest.mark.parametrize("case", sorted(PROBLEMS))
def test_fused_matches_the_reference(case, epi, out_last, split, monkeypatch):
    if not split:  # the one-launch kernel: the epilogue in its staged store
        monkeypatch.setattr(tc_gather, "MIN_SPLIT_K_SIM" if runtime.target().simulator else "MIN_SPLIT_K_GPU",
                            10**9)
    problem = PROBLEMS[case]
    fused_sums = spy(monkeypatch, tc_gather, "sum_partials_fused")
    launches = spy(monkeypatch, tc_conv, "make_tc_conv")
    got, want, allowed, epilogue = _run(problem, EPILOGUES[epi], out_last, out_last, seed=len(case + epi))
    assert epilogue.fused is True
    assert bool(fused_sums) == split  # split: the sum applies it; one launch: the store does
    assert [call[-1] for call in launches] == [None if split else EPILOGUES[epi]]
    err = float(np.linalg.norm(got - want))
    assert np.all(np.isfinite(got)) and err <= allowed, (err, allowed)


@pytest.mark.parametrize("out_last", [False, True], ids=["nchw", "nhwc"])
def test_tf32x3_fuses_in_float32(out_last):
    """tf32x3 (tensor_core's kernels on 3xTF32) fuses the same way: float32 Cs, float32 output."""
    problem = PROBLEMS["fwd_f16"].replace(dtype="float32")
    got, want, allowed, epilogue = _run(problem, EPILOGUES["relu6_before"], out_last, out_last,
                                        plugin=registry.get("tf32x3"))
    assert epilogue.fused is True and float(np.linalg.norm(got - want)) <= allowed


@pytest.mark.parametrize("split", [True, False], ids=["split", "one"])
@pytest.mark.parametrize("out_last", [False, True], ids=["ncdhw", "ndhwc"])
def test_a_3d_forward_fuses(out_last, split, monkeypatch):
    if not split:
        monkeypatch.setattr(tc_gather, "MIN_SPLIT_K_SIM" if runtime.target().simulator else "MIN_SPLIT_K_GPU",
                            10**9)
    problem = make_problem_nd("forward", 1, 8, (3, 4, 5), 16, (2, 3, 3), padding=1, dtype="bfloat16", bias=True)
    got, want, allowed, epilogue = _run(problem, EPILOGUES["silu_after"], out_last, out_last, seed=5)
    assert epilogue.fused is True and np.all(np.isfinite(got)) and float(np.linalg.norm(got - want)) <= allowed


def test_a_residual_in_another_layout_takes_the_pass():
    """An NCHW output with a channels-last residual (and the reverse) is not fused: run, then the pass."""
    problem, epi = PROBLEMS["fwd_f16"], EPILOGUES["silu_after"]
    for out_last, residual_last in ((False, True), (True, False)):
        got, want, allowed, epilogue = _run(problem, epi, out_last, residual_last)
        assert epilogue.fused is False
        assert float(np.linalg.norm(got - want)) <= allowed


def test_fuses_its_gather_route_only():
    epi = EPILOGUES["relu6_before"]
    assert TC.fuses(PROBLEMS["fwd_bf16"], epi) == TC.fuses(PROBLEMS["dgrad_f16"], epi) == ""
    assert "not wgrad" in TC.fuses(make_problem("wgrad", 1, 8, 5, 5, 8, 3, 3, dtype="float16"), epi)
    assert "fold" in TC.fuses(make_problem("dgrad", 1, 8, 6, 6, 8, 3, 3, stride=2, dtype="float16"), epi)
    assert "phase" in TC.fuses(make_problem("dgrad", 1, 16, 6, 6, 8, 3, 3, stride=2, dtype="float16"), epi)
    assert TC.fused_layouts == {"nchw", "nhwc"}
    assert registry.get("direct").fused_layouts == {"nchw"}


def test_the_fused_source_is_a_specialisation():
    """The epilogue's element store replaces the vector write-out; Cs is float32; the operands follow
    the loader's parameters. The plain kernel's source has none of it."""
    cfg = TcConfig(32, 32, 16, 16, 32, 2)
    plain = tc_conv.kernel_source("f16", cfg, bias=True, nhwc_out=True)
    fused = tc_conv.kernel_source("f16", cfg, bias=True, nhwc_out=True, epi=EPILOGUES["silu_after"])
    assert "fput" not in plain and "c_float16, alignment" in plain and "copy16(Y" in plain
    assert "fput(Y, U(yb + col), Cs[" in fused and "c_float32, alignment" in fused and "copy16" not in fused
    assert fused.splitlines()[0].endswith(", ep_r, ep_scale, ep_shift, vec):")
    with pytest.raises(ValueError, match="split-K"):
        tc_conv.kernel_source("f16", cfg, split=True, epi=EPILOGUES["silu_after"])


def test_conv_transpose2d_fuses_on_tensor_cores(monkeypatch):
    """The public transpose op with an epilogue reaches run_fused (stride 1: the gather route)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 8, 5, 5)).astype(np.float16)
    w = (rng.standard_normal((8, 8, 3, 3)) / 8).astype(np.float16)
    r = rng.standard_normal((1, 8, 5, 5)).astype(np.float16)
    fused = spy(monkeypatch, type(TC), "run_fused")
    got = convlab.conv_transpose2d(x, w, padding=1, algorithm="tensor_core", activation="relu", residual=r)
    plain = convlab.conv_transpose2d(x, w, padding=1, algorithm="tensor_core")
    assert len(fused) == 1
    want = np.maximum(plain.astype(np.float32) + r.astype(np.float32), 0)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=4e-3, atol=4e-3)


def test_conv2d_on_channels_last_device_arrays_fuses(monkeypatch):
    """The public op on a channels-last input and residual: the output is written channels-last, fused."""
    ran, run_fused = [], DeviceEpilogue.run_fused
    monkeypatch.setattr(DeviceEpilogue, "run_fused", lambda *a: ran.append(run_fused(*a)) or ran[-1])
    problem, epi = PROBLEMS["fwd_bf16"], EPILOGUES["relu6_before"]
    rng = np.random.default_rng(7)
    x, w, b = random_operands(problem, rng)
    r = rng.standard_normal(problem.y_shape).astype(np_dtype(problem.dtype))
    scale, shift = rng.uniform(-2, 2, problem.k), rng.standard_normal(problem.k)
    y = convlab.conv2d(layouts.channels_last_copy(x), runtime.to_device(w), runtime.to_device(b), stride=2,
                       padding=1, algorithm="tensor_core", activation="relu6", residual=layouts.channels_last_copy(r),
                       scale=scale, shift=shift)
    assert ran == [True] and layouts.is_channels_last(y)
    conv = reference.solve(problem, x, w, b)
    want = reference.epilogue(conv, epi, scale, shift, r)
    ops = {"scale": scale, "shift": shift, "residual": r}
    got = np.asarray(runtime.to_host(y), np.float64)
    assert float(np.linalg.norm(got - want)) <= epilogue_allowed(TC, problem, TC.configs(problem)[0], conv, want,
                                                                 epi, ops)


@pytest.mark.parametrize("nhwc_out", [False, True], ids=["nchw", "nhwc"])
def test_a_wgmma_config_fuses_in_its_store(nhwc_out):
    """The warpgroup loop ends in the same staged store: its fused write-out, either layout."""
    cfg = SIM_WGMMA["f16"]
    n, c, h, w, k, r = 1, 8, 5, 6, 24, 3
    rng = np.random.default_rng(11)
    x = rng.standard_normal((n, h, w, c)).astype(np.float16)
    wt = (rng.standard_normal((k, r, r, c)) / 4).astype(np.float16)
    res = rng.standard_normal((n, k, h, w)).astype(np.float16)
    scale = rng.uniform(-2, 2, k).astype(np.float32)
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    conv = np.einsum("nhwrsc,krsc->nkhw", np.lib.stride_tricks.sliding_window_view(xp, (r, r), (1, 2))
                     .transpose(0, 1, 2, 4, 5, 3), wt.astype(np.float64))
    epi = Epilogue("relu", scale=True, residual="before")
    want = reference.epilogue(conv, epi, scale, None, res)
    dev_res = layouts.channels_last_copy(res) if nhwc_out else runtime.to_device(res)
    ops = epilogue_operands(epi, "float16", residual=dev_res, residual_channels_last=nhwc_out,
                            scale=runtime.to_device(scale))
    y = runtime.to_device(np.full(want.size, np.nan, np.float16))
    tc_conv.conv_launcher("f16", cfg, runtime.to_device(x.reshape(-1)), runtime.to_device(wt.reshape(-1)), y, None,
                          n=n, c=c, k=k, spatial=(h, w), kernel=(r, r), out=(h, w), stride=(1, 1), padding=(1, 1),
                          dilation=(1, 1), nhwc_out=nhwc_out, epilogue=ops)()
    got = runtime.to_host(y).astype(np.float64)
    got = got.reshape(n, h, w, k).transpose(0, 3, 1, 2) if nhwc_out else got.reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
