"""The tensor_core plugin (implicit GEMM on tensor cores) and its kernels, on the simulator's smallest tile.

The conformance suite (tests/plugin/test_conformance.py) runs every check on it; these tests pin the
cases it might not draw: negative effective padding in dgrad, TF32 under "high", channel padding, the
layout permutation, the predicate's reasons, the public ops with float16 / bfloat16 arrays and split-K
of forward / dgrad (every dtype, bias, NCHW and NHWC outputs).
"""
import numpy as np
import pytest

import convlab
from convlab import layouts, reference, runtime
from convlab.algorithms import tensor_core
from convlab.kernels import tc_conv, transpose
from convlab.measure import random_operands, rel_error, tolerance
from convlab.plugin import registry
from convlab.problem import make_problem, np_dtype, unit_roundoff

ml_dtypes = pytest.importorskip("ml_dtypes")  # a core dependency; bfloat16 arrays

TC = registry.get("tensor_core")


@pytest.fixture(autouse=True)
def _split_like_the_simulator(monkeypatch):
    """Split-K plans as on the simulator (MIN_SPLIT_K 1, wgrad's MIN_KTILES 1), so that these tiny
    problems split the same way on a GPU; a test that wants another value sets its own."""
    monkeypatch.setattr(tensor_core, "MIN_SPLIT_K", 1)
    monkeypatch.setattr(tensor_core.wgrad, "MIN_KTILES", 1)


def _spy(monkeypatch, module, name):
    """A list that records one entry per call of ``module.name`` (which still runs)."""
    calls, real = [], getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: calls.append(a) or real(*a, **k))
    return calls


def _run(problem, seed=0, nhwc_out=False, outputs=None):
    """(relative error, tolerance) of one run on random operands into a NaN-poisoned output (NCHW or
    channels-last); ``outputs`` (a list) collects (host output, host bias or None)."""
    host = random_operands(problem, np.random.default_rng(seed))
    dev = [None if v is None else runtime.to_device(v) for v in host]
    nan = np.full(problem.operand_shapes[2], np.nan, np_dtype(problem.dtype))
    out = layouts.channels_last_copy(nan) if nhwc_out else runtime.to_device(nan)
    TC.run(problem, TC.configs(problem)[0], *dev, out, workspace_limit=2**28)
    got = runtime.to_host(out)
    assert got.dtype == np.dtype(problem.dtype)
    if outputs is not None:
        outputs.append((got.astype(np.float64), None if host[2] is None else host[2].astype(np.float64)))
    return rel_error(got, reference.solve(problem, *host)), tolerance(problem, TC.compute_eps(problem.dtype))


@pytest.mark.parametrize("problem", [
    # reductions of 3 k tiles on a GPU too (BK 32 there): padding' = -1, 0; 20 channels padded to 24
    make_problem("dgrad", 1, 8, 4, 5, 32, 1, 3, padding=(1, 2), dtype="float16"),
    make_problem("forward", 2, 20, 6, 5, 12, 2, 2, padding=1, stride=(2, 1), dtype="bfloat16", bias=True),
], ids=lambda p: p.describe())
@pytest.mark.parametrize("split", [True, False], ids=["split", "one"])
def test_half_precision_cases(problem, split, monkeypatch):
    if not split:  # the one-pass kernel (bias and rounding in its epilogue), as large layers run it
        monkeypatch.setattr(tensor_core, "MIN_SPLIT_K", 10**9)
    assert (tensor_core.split_k(problem, tensor_core.tc_config(TC.configs(problem)[0]))[0] > 1) == split
    err, tol = _run(problem)
    assert err <= tol, (err, tol)


@pytest.mark.parametrize("split", [True, False], ids=["split", "one"])
def test_tf32_only_under_high_precision(split, monkeypatch):
    if not split:
        monkeypatch.setattr(tensor_core, "MIN_SPLIT_K", 10**9)
    problem = make_problem("forward", 1, 4, 5, 5, 8, 3, 3, padding=1, dtype="float32", bias=True)
    verdict = TC.applicable(problem)
    assert not verdict and "set_float32_precision('high')" in verdict.reason
    with convlab.float32_precision("high"):
        assert TC.applicable(problem)
        assert (tensor_core.split_k(problem, tensor_core.tc_config(TC.configs(problem)[0]))[0] > 1) == split
        err, tol = _run(problem)
        assert err <= tol, (err, tol)
        assert err > 1e-6  # the inputs really were cut to TF32
    assert convlab.get_float32_precision() == "highest"


@pytest.mark.parametrize("op,dtype", [("forward", "float16"), ("dgrad", "bfloat16"), ("forward", "float32")])
def test_narrow_tile_for_few_output_channels(op, dtype):
    """GEMM N <= 16 (the seed's 16-channel layers) runs a 16-wide tile whose B tile has fewer chunks
    than the block has threads (only threads tid < BN * chunks copy)."""
    problem = make_problem(op, 2, 16, 6, 5, 16, 3, 3, padding=1, dtype=dtype, bias=True)
    with convlab.float32_precision("high"):
        assert TC.configs(problem)[0]["BN"] == 16
        err, tol = _run(problem, seed=3)
    assert err <= tol, (err, tol)
    cfg = tensor_core.SIM_NARROW[16][0]
    assert f"if tid < {cfg.BN * cfg.BK * 2 // 16}:" in tc_conv.kernel_source("f16", cfg)


@pytest.mark.parametrize("change,reason", [
    (dict(groups=2), "groups == 1"),
    (dict(op="dgrad", stride=2), "stride 1"),
    (dict(dtype="float64"), "supports dtypes"),
])
def test_declines_with_reason(change, reason):
    fields = dict(op="forward", n=1, c=8, h=6, w=6, k=8, r=3, s=3, dtype="float16")
    fields.update(change)
    verdict = TC.applicable(make_problem(**fields))
    assert not verdict and reason in verdict.reason


def test_transpose_flips_and_pads_dgrad_filter():
    src = np.arange(2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2)  # [k', c', r, s]
    dst = runtime.full((3 * 2 * 2 * 4,), -1, np.float32)
    # dgrad's weights: dst[c', r, s, k'] = src[k', c', 1-r, 1-s], k' padded from 2 to 4
    transpose.to_channels_last(runtime.to_device(src.reshape(-1)), dst, 1, 2, 3 * 2 * 2, 4, flip=4)
    want = np.zeros((3, 2, 2, 4), np.float32)
    want[..., :2] = src[:, :, ::-1, ::-1].transpose(1, 2, 3, 0)
    np.testing.assert_array_equal(dst.copy_to_host().reshape(3, 2, 2, 4), want)


def test_workspace_counts_padded_channels():
    problem = make_problem("forward", 2, 3, 6, 6, 16, 1, 1, dtype="float16")  # one k tile: no split
    config = TC.configs(problem)[0]
    assert tensor_core.split_k(problem, tensor_core.tc_config(config)) == (1, 1)
    assert TC.workspace_bytes(problem, config, 2**30) == (2 * 6 * 6 + 16) * 8 * 2
    assert "workspace" in TC.applicable(problem, config, workspace_limit=100).reason


SPLIT = {"forward": dict(op="forward", n=1, c=12, h=4, w=5, k=6, r=3, s=3, padding=1),  # C padded (fp16)
         "dgrad": dict(op="dgrad", n=1, c=8, h=5, w=4, k=16, r=3, s=3, padding=(1, 2), dilation=(1, 2))}


@pytest.mark.parametrize("nhwc_out", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("op", ["forward", "dgrad"])
def test_split_k_matches_reference(op, dtype, nhwc_out):
    """Few output tiles, a long reduction: the fp32 partials of 3-4 splits, summed in order, the bias
    added once, rounded to the input type; NCHW or channels-last output. Without, then with bias (the
    same x and w): each near the reference, and their difference the bias up to the output rounding
    (the reference's tolerance for TF32 would let a doubled bias pass)."""
    outputs = []
    with convlab.float32_precision("high"):  # TF32 for float32
        for bias in (False, True):
            problem = make_problem(**SPLIT[op], dtype=dtype, bias=bias)
            splits, tps = tensor_core.split_k(problem, tensor_core.tc_config(TC.configs(problem)[0]))
            assert splits >= 3 and tps >= 1
            err, tol = _run(problem, nhwc_out=nhwc_out, outputs=outputs)
            assert err <= tol, (bias, err, tol)
    (y0, _), (y1, b) = outputs
    diff = y1 - y0 - b.reshape(1, -1, 1, 1)
    ulp = 2.0 * unit_roundoff(dtype) * (np.abs(y0) + np.abs(y1))  # fp32 sums alike; each rounded once
    assert np.all(np.abs(diff) <= ulp), np.max(np.abs(diff) - ulp)


def test_split_k_plan_and_workspace(monkeypatch):
    """Burn's layer (batch 16, 512x7x7, w512x3x3, fp16) on 132 SMs with 64x64 tiles: 104 blocks,
    144 k tiles of 32 -> 3 splits of 48 (each at least 1024 long: 32 k tiles); the workspace counts the
    fp32 partials (the sum rounds to fp16 as it stores); enough output tiles, or too short a reduction
    -> no split."""
    monkeypatch.setattr(tensor_core, "sm_count", lambda: 132)
    monkeypatch.setattr(tensor_core, "MIN_SPLIT_K", 1024)
    problem = make_problem("forward", 16, 512, 7, 7, 512, 3, 3, padding=1, dtype="float16", bias=True)
    cfg = tensor_core.TcConfig(64, 64, 32, 32, 32, 4)
    assert tensor_core.split_k(problem, cfg) == (3, 48)
    assert tensor_core.split_k(problem, tensor_core.TcConfig(128, 128, 32, 64, 64, 3)) == (4, 36)
    mn = 16 * 7 * 7 * 512
    base = (16 * 7 * 7 + 512 * 9) * 512 * 2
    config = tensor_core._config(cfg)
    assert TC.workspace_bytes(problem, config, 2**30) == base + 4 * 3 * mn  # the partials
    big = make_problem("forward", 64, 512, 14, 14, 512, 3, 3, padding=1, dtype="float16")
    assert tensor_core.split_k(big, cfg) == (1, 144)
    short = make_problem("forward", 16, 128, 7, 7, 512, 3, 3, padding=1, dtype="float16")
    assert tensor_core.split_k(short, cfg) == (1, 36)  # 1152 long: under MIN_SPLIT_K per split


def test_kernel_source_gathers_and_stores_nchw():
    cfg = tensor_core.SIM_TILES[16][0]
    src = tc_conv.kernel_source("bf16", cfg, bias=True)
    assert "cp_async16(As" in src and "bf16_to_f32(bias[c0])" in src and "f32_to_bf16(" in src
    assert "copy16(Y, U(yb + U(col * PQ))" in src and "blockIdx.z" not in src and "kl = U(0)" in src
    split = tc_conv.kernel_source("bf16", cfg, split=True)  # fp32 partials: no bias, no conversion
    assert "dw, tps, vec):" in split and "kl = kb" in split and "kt = kb" in split
    assert "U(U(cuda.blockIdx.z) * U(M * N))" in split and "f32_to_bf16(" not in split
    with pytest.raises(ValueError, match="bias"):
        tc_conv.kernel_source("bf16", cfg, bias=True, split=True)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_public_ops_in_half_precision(dtype):
    """conv2d / conv_transpose2d on numpy float16 and bfloat16 arrays: "auto" finds the tensor-core
    plugin (the others decline), the output keeps the input dtype."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 8, 5, 5)).astype(dtype)
    w = rng.standard_normal((8, 8, 3, 3)).astype(dtype)
    b = rng.standard_normal(8).astype(dtype)
    name = np.dtype(dtype).name
    y = convlab.conv2d(x, w, b, padding=1)
    problem = make_problem("forward", 1, 8, 5, 5, 8, 3, 3, padding=1, dtype=name, bias=True)
    assert y.dtype == np.dtype(dtype)
    assert rel_error(y, reference.forward(problem, x, w, b)) <= tolerance(problem, 2.0**-23)
    explained = str(convlab.explain(x, w, b, padding=1, algorithm="tensor_core"))
    assert "direct" in explained and "supports dtypes" in explained
    dx = convlab.conv_transpose2d(x, w, padding=1)
    assert dx.dtype == np.dtype(dtype) and dx.shape == (1, 8, 5, 5)


def _wgrad_unfolds(monkeypatch, problem, seed: int) -> int:
    """Run the wgrad ``problem`` (checked against the reference) and count its unfold launches."""
    from convlab.algorithms.tensor_core import wgrad
    calls = _spy(monkeypatch, wgrad, "unfold_into")
    err, tol = _run(problem, seed=seed)
    assert err <= tol, (err, tol)
    return len(calls)


@pytest.mark.parametrize("r,padding,unfolds", [(1, 0, 0), (3, 1, 1)])
def test_wgrad_reads_dy_and_1x1_x_as_they_are(monkeypatch, r, padding, unfolds):
    """One image per split and P*Q a multiple of the chunk: dy is the GEMM's A as it is, and for a 1x1
    filter x is its Bt (no unfold); a 3x3 filter still unfolds x."""
    from convlab.algorithms.tensor_core import wgrad
    problem = make_problem("wgrad", 2, 8, 8, 8, 16, r, r, padding=padding, dtype="float16")
    cfg = tensor_core.tc_config(TC.configs(problem)[0])
    assert wgrad.splits_of(problem, cfg, 8) == 2 and wgrad.as_is(problem, 2, 8) == (True, r == 1)
    assert _wgrad_unfolds(monkeypatch, problem, seed=4) == unfolds


@pytest.mark.parametrize("shape,padded,unfolds", [
    (dict(h=9, w=9, r=3, s=3, padding=1), True, 2),  # 81 -> 11 chunks (prime): images padded further
    (dict(h=8, w=8, r=1, s=1), False, 0),            # 8 chunks in 2 or 4 parts; dy and x as they are
])
def test_wgrad_cuts_a_short_gemm_reduction_in_slices(monkeypatch, shape, padded, unfolds):
    """K = 16 output channels, one image: the image groups leave SMs idle, so each reduction is cut in
    slices (the parted GEMM, grid z = splits * parts), summed in order with the groups' partials.
    (The slice count depends on the tile's BK: 5 / 4 on the simulator, 2 / 2 on a GPU.)"""
    from convlab.algorithms.tensor_core import wgrad
    monkeypatch.setattr(wgrad, "sm_count", lambda: 8)
    problem = make_problem("wgrad", 1, 8, k=16, dtype="float16", **shape)
    cfg = tensor_core.tc_config(TC.configs(problem)[0])
    splits, parts, pqp = wgrad.plan(problem, cfg, 8)
    assert splits == 1 and parts > 1 and pqp % (8 * parts) == 0
    assert (pqp > wgrad.padded(problem.p * problem.q, 8)) == padded
    assert _wgrad_unfolds(monkeypatch, problem, seed=6) == unfolds



@pytest.mark.parametrize("op,dtype,bias,nhwc_out,hw", [
    ("forward", "float16", True, False, (4, 6)),    # 24 pixels: x read as NCHW (no copy), bias
    ("forward", "bfloat16", False, True, (2, 4)),   # 8 pixels: NCHW read, channels-last out
    ("forward", "float16", False, False, (3, 5)),   # 15 pixels, not whole chunks: the NHWC copy
    ("dgrad", "float16", True, False, (4, 4)),      # dy read as NCHW; the filter still transposed
    ("dgrad", "bfloat16", False, False, (3, 3)),    # 9 pixels: dy copied
    ("forward", "float32", True, False, (3, 4)),    # TF32: 12 pixels, whole chunks of 4: NCHW read
    ("dgrad", "float32", False, True, (2, 2)),      # TF32 dy read as NCHW, channels-last out
    ("forward", "float32", False, False, (3, 3)),   # TF32, 9 pixels: the NHWC copy
])
def test_1x1_reads_the_nchw_input_as_it_is(monkeypatch, op, dtype, bias, nhwc_out, hw):
    """A 1x1 stride-1 unpadded forward (dgrad) gathers A straight from the NCHW x (dy): m-contiguous
    chunks (ldmatrix .trans for 16-bit types, 32-bit shared loads for TF32) when H*W is whole 16-byte
    chunks; no copy of x at all (a 1x1 forward filter is read as it is too); otherwise x (dy) is copied
    to NHWC."""
    problem = make_problem(op, 2, 16, hw[0], hw[1], 24, 1, 1, dtype=dtype, bias=bias)
    calls = _spy(monkeypatch, transpose, "to_channels_last")
    with convlab.float32_precision("high"):
        err, tol = _run(problem, seed=3, nhwc_out=nhwc_out)
    assert err <= tol, (err, tol)
    copies_of_x = 0 if hw[0] * hw[1] % (16 // problem.itemsize) == 0 else 1
    assert len(calls) == copies_of_x + (op == "dgrad")  # dgrad's filter: transposed (C x K)


@pytest.mark.parametrize("itype,split", [("f16", False), ("f16", True), ("tf32", False), ("tf32", True)])
def test_nchw_read_with_a_64_row_tile(itype, split):
    """The m-contiguous A of a 64-row tile (the GPU tiles' swizzle: one XOR per row, 8 or 16 chunks per
    k row; TF32's 32-bit fragment loads) and split-K, against float64."""
    from convlab.kernels.tc_config import TcConfig
    cfg = TcConfig(64, 32, 16, 32, 32, 2)
    n, c, h, w, k = 3, 24, 4, 8, 16
    dtype = np.float16 if itype == "f16" else np.float32
    rng = np.random.default_rng(5 + split)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((k, c)).astype(dtype)
    want = np.einsum("nchw,kc->nkhw", x.astype(np.float64), wt.astype(np.float64))
    tps = 1 if split else 0
    splits = tc_conv.split_count(c, cfg.BK, tps) if split else 1
    y = runtime.to_device(np.full(splits * want.size, np.nan, np.float32 if split else dtype))
    tc_conv.conv_launcher(itype, cfg, runtime.to_device(x.reshape(-1)), runtime.to_device(wt.reshape(-1)), y,
                          None, n=n, c=c, h=h, w=w, k=k, r=1, s=1, p=h, q=w, stride=(1, 1), padding=(0, 0),
                          dilation=(1, 1), tps=tps, nchw_in=True)()
    got = runtime.to_host(y).astype(np.float64).reshape(splits, *want.shape).sum(axis=0)
    assert np.all(np.isfinite(got)) and splits == (2 if split else 1)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 2e-3


def test_misaligned_operands_are_copied_not_read_as_they_are(monkeypatch):
    """cp.async reads 16 aligned bytes: a 1x1 fp16 forward whose NCHW x and filter are views one
    element off alignment copies both (NHWC x, KRSC filter) instead of reading them as they are."""
    problem = make_problem("forward", 2, 16, 4, 4, 24, 1, 1, dtype="float16")
    x, w, _ = random_operands(problem, np.random.default_rng(8))
    views = []
    for host in (x, w):
        buf = runtime.to_device(np.concatenate([np.zeros(1, host.dtype), host.ravel()]))
        views.append(buf[1:].reshape(host.shape))
    calls = _spy(monkeypatch, transpose, "to_channels_last")
    out = runtime.to_device(np.full(problem.operand_shapes[2], np.nan, np.float16))
    TC.run(problem, TC.configs(problem)[0], *views, None, out, workspace_limit=2**28)
    err = rel_error(runtime.to_host(out), reference.solve(problem, x, w))
    assert err <= tolerance(problem, TC.compute_eps(problem.dtype)) and len(calls) == 2
