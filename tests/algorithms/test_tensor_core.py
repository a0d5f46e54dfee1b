"""The tensor_core plugin (implicit GEMM on tensor cores) and its kernels, on the simulator's smallest tile.

The conformance suite (tests/plugin/test_conformance.py) runs every check on it; these tests pin the
cases it might not draw: negative effective padding in dgrad, TF32 under "high", channel padding, the
layout permutation, the predicate's reasons, the public ops with float16 / bfloat16 arrays and split-K
of forward / dgrad (every dtype, bias, NCHW and NHWC outputs).
"""
import numpy as np
import pytest

import convlab
from convlab import reference, runtime
from convlab.runtime.targets import get as get_target
from convlab.algorithms import tensor_core
from convlab.algorithms.tensor_core import configs as tc_configs, gather as tc_gather
from convlab.kernels.tensor_core.config import TcConfig
from convlab.kernels.tensor_core import conv as tc_conv
from convlab.kernels.data import transpose
from convlab.measure import rel_error, tolerance
from convlab.problem import make_problem, unit_roundoff
from tc_helpers import TC, run_tc as _run, split_like_the_simulator, spy  # noqa: F401  (a fixture)

ml_dtypes = pytest.importorskip("ml_dtypes")  # a core dependency; bfloat16 arrays


@pytest.fixture(autouse=True)
def _simulator_splits(split_like_the_simulator):
    """Every test here plans split-K as on the simulator (tc_helpers)."""


@pytest.mark.parametrize("problem", [
    # reductions of 3 k tiles on a GPU too (BK 32 there): padding' = -1, 0; 20 channels padded to 24
    make_problem("dgrad", 1, 8, 4, 5, 32, 1, 3, padding=(1, 2), dtype="float16"),
    make_problem("forward", 2, 20, 6, 5, 12, 2, 2, padding=1, stride=(2, 1), dtype="bfloat16", bias=True),
], ids=lambda p: p.describe())
@pytest.mark.parametrize("split", [True, False], ids=["split", "one"])
def test_half_precision_cases(problem, split, monkeypatch):
    if not split:  # the one-pass kernel (bias and rounding in its epilogue), as large layers run it
        monkeypatch.setattr(tc_gather, "MIN_SPLIT_K_SIM" if runtime.target().simulator
                            else "MIN_SPLIT_K_GPU", 10**9)
    assert (tensor_core.split_k(problem, tensor_core.tc_config(TC.configs(problem)[0]), runtime.target())[0] > 1) == split
    err, tol = _run(problem)
    assert err <= tol, (err, tol)


@pytest.mark.parametrize("split", [True, False], ids=["split", "one"])
def test_tf32_only_under_high_precision(split, monkeypatch):
    if not split:
        monkeypatch.setattr(tc_gather, "MIN_SPLIT_K_SIM" if runtime.target().simulator
                            else "MIN_SPLIT_K_GPU", 10**9)
    problem = make_problem("forward", 1, 4, 5, 5, 8, 3, 3, padding=1, dtype="float32", bias=True)
    verdict = TC.applicable(problem)
    assert not verdict and "set_float32_precision('high')" in verdict.reason
    with convlab.float32_precision("high"):
        assert TC.applicable(problem)
        assert (tensor_core.split_k(problem, tensor_core.tc_config(TC.configs(problem)[0]), runtime.target())[0] > 1) == split
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
    cfg = tc_configs.SIM_NARROW[16][0]
    assert f"if tid < {cfg.BN * cfg.BK * 2 // 16}:" in tc_conv.kernel_source("f16", cfg)


@pytest.mark.parametrize("change,reason", [
    (dict(groups=2), "groups == 1"),
    (dict(dtype="float64"), "supports dtypes"),
])
def test_declines_with_reason(change, reason):
    fields = dict(op="forward", n=1, c=8, h=6, w=6, k=8, r=3, s=3, dtype="float16")
    fields.update(change)
    verdict = TC.applicable(make_problem(**fields))
    assert not verdict and reason in verdict.reason


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("limit", [2**28, 1], ids=["one pass", "one image a pass"])
def test_strided_dgrad_column_route(limit, dtype, monkeypatch):
    """Strided dgrad (float32 as TF32 under "high"): dy NHWC x w [CRS, K] on tc_gemm into float32
    columns, then the fold (a half dx rounded once, at its store, the bias added in float32); with a
    workspace limit below one image's columns, one image a pass (n0 > 0 reaches the fold)."""
    from convlab.algorithms.tensor_core import strided
    problem = make_problem("dgrad", 3, 5, 9, 8, 6, 3, 2, stride=(2, 3), padding=1, dtype=dtype, bias=True)
    with convlab.float32_precision("high"):
        assert TC.applicable(problem)
        assert strided.images_per_pass(problem, limit) == (1 if limit == 1 else 3)
        monkeypatch.setattr(tensor_core.strided, "images_per_pass", lambda pr, _limit, real=strided.images_per_pass:
                            real(pr, limit))
        folds = spy(monkeypatch, tensor_core.strided, "fold")
        err, tol = _run(problem)
    assert err <= tol, (err, tol)
    assert [call[4] for call in folds] == ([0, 1, 2] if limit == 1 else [0])  # n0 of each pass


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_strided_dgrad_workspace_counts_half_operands(dtype):
    """The column route's operands in 2-byte elements (K = 12 padded to 16, a whole 16-byte chunk), its
    columns in float32: P, Q = 5, 3 -> operands (3*15 + 30) * 16 * 2 = 2400 bytes, 450 * 4 = 1800 a
    pass's image; 6000 bytes hold two images a pass, one byte less one."""
    from convlab.algorithms.tensor_core import strided
    problem = make_problem("dgrad", 3, 5, 9, 8, 12, 3, 2, stride=(2, 3), padding=1, dtype=dtype)
    assert TC.applicable(problem)
    assert strided.operand_elements(problem) == (3 * 15 + 30) * 16
    assert [strided.images_per_pass(problem, limit) for limit in (6000, 5999)] == [2, 1]
    assert TC.workspace_bytes(problem, TC.configs(problem)[0], 6000, runtime.target()) == 6000


def test_strided_dgrad_declines_a_dx_beyond_32_bit_indexing():
    """The strided route keeps the 2**31 tensor rule (an 18 GB dx overflowed the fold's uint32 offsets)."""
    problem = make_problem("dgrad", 17, 64, 2048, 2048, 4, 1, 1, stride=4, dtype="float32")
    with convlab.float32_precision("high"):
        verdict = TC.check(problem)
    assert not verdict and "x (17, 64, 2048, 2048) has 2**31 elements" in verdict.reason


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
    assert tensor_core.split_k(problem, tensor_core.tc_config(config), runtime.target()) == (1, 1)
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
            splits, tps = tensor_core.split_k(problem, tensor_core.tc_config(TC.configs(problem)[0]), runtime.target())
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
    -> no split. Planned for the named sm_90 target on this machine."""
    monkeypatch.setattr(tc_gather, "MIN_SPLIT_K_GPU", 1024)  # the GPU's (the module's fixture sets 1)
    sm90 = get_target("sm_90")
    problem = make_problem("forward", 16, 512, 7, 7, 512, 3, 3, padding=1, dtype="float16", bias=True)
    cfg = TcConfig(64, 64, 32, 32, 32, 4)
    assert tensor_core.split_k(problem, cfg, sm90) == (3, 48)
    assert tensor_core.split_k(problem, TcConfig(128, 128, 32, 64, 64, 3), sm90) == (4, 36)
    mn = 16 * 7 * 7 * 512
    base = (16 * 7 * 7 + 512 * 9) * 512 * 2
    config = tensor_core.to_config(cfg)
    assert TC.workspace_bytes(problem, config, 2**30, sm90) == base + 4 * 3 * mn  # the partials
    big = make_problem("forward", 64, 512, 14, 14, 512, 3, 3, padding=1, dtype="float16")
    assert tensor_core.split_k(big, cfg, sm90) == (1, 144)
    short = make_problem("forward", 16, 128, 7, 7, 512, 3, 3, padding=1, dtype="float16")
    assert tensor_core.split_k(short, cfg, sm90) == (1, 36)  # 1152 long: under MIN_SPLIT_K per split


def test_kernel_source_gathers_and_stores_nchw():
    cfg = tc_configs.SIM_TILES[16][0]
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
