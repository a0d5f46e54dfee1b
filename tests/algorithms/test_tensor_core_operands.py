"""The tensor_core plugin's operands read as they are (no layout copy or unfold): wgrad's dy and 1x1 x,
the NCHW input of 1x1 layers (16-bit through ldmatrix .trans, TF32 through 32-bit loads), their
alignment and tile rules, and the plan that keeps them unpadded."""
import dataclasses

import numpy as np
import pytest

import convlab
from convlab import reference, runtime
from convlab.runtime import targets
from convlab.algorithms import tensor_core
from convlab.kernels.tensor_core import conv as tc_conv
from convlab.kernels.data import layouts, transpose
from convlab.measure import random_operands, rel_error, tolerance
from convlab.problem import make_problem
from tc_helpers import TC, run_layouts, run_tc as _run, split_like_the_simulator, spy as _spy  # noqa: F401  (a fixture)


@pytest.fixture(autouse=True)
def _simulator_splits(split_like_the_simulator):
    """Every test here plans split-K as on the simulator (tc_helpers)."""


def _wgrad_unfolds(monkeypatch, problem, seed: int) -> int:
    """Run the wgrad ``problem`` (checked against the reference) and count its unfold launches."""
    from convlab.algorithms.tensor_core import wgrad
    calls = _spy(monkeypatch, wgrad, "unfold_into")
    err, tol = _run(problem, seed=seed)
    assert err <= tol, (err, tol)
    return len(calls)


def test_wgrad_reads_dy_and_1x1_x_as_they_are(monkeypatch):
    """One image per split and P*Q a multiple of the chunk: dy is the GEMM's A as it is, and for a 1x1
    filter x is its Bt (no unfold)."""
    from convlab.algorithms.tensor_core import wgrad
    problem = make_problem("wgrad", 2, 8, 8, 8, 16, 1, 1, dtype="float16")
    cfg = tensor_core.tc_config(TC.configs(problem)[0])
    assert wgrad.splits_of(problem, cfg, 8, runtime.target()) == 2 and wgrad.as_is(problem, 2, 8) == (True, True)
    assert _wgrad_unfolds(monkeypatch, problem, seed=4) == 0


@pytest.mark.parametrize("large", [True, False], ids=["large plane", "small plane"])
@pytest.mark.parametrize("x_last", [False, True], ids=["nchw x", "channels-last x"])
def test_wgrad_of_a_3x3_filter_gathers_the_taps_of_x_on_large_planes(monkeypatch, x_last, large):
    """On a plane of at least GATHER_MIN_PIXELS output pixels (lowered here to this problem's 64) a filter
    of more than one tap takes the tap gather (taps.py): dy read as it is (one image per split, P*Q in
    whole chunks), x never unfolded: an NCHW x transposed once to NHWC, a channels-last one read as it
    is; the partials of both images summed in order into dw. On a smaller plane x is unfolded, in either
    layout. Each against the reference."""
    from convlab.algorithms.tensor_core import taps, wgrad
    if large:
        monkeypatch.setattr(wgrad, "GATHER_MIN_PIXELS", 64)
    problem = make_problem("wgrad", 2, 8, 8, 8, 16, 3, 3, padding=1, dtype="float16")
    cfg = tensor_core.tc_config(TC.configs(problem)[0])
    assert wgrad.tap_gather(problem) == large
    assert wgrad.gemm_mn(problem, 8) == ((9 * 8, 16) if large else (16, 9 * 8))
    assert wgrad.plan(problem, cfg, 8, runtime.target()).splits == 2
    runs = _spy(monkeypatch, taps, "run_taps")
    unfolds = (_spy(monkeypatch, taps, "unfold_into"), _spy(monkeypatch, wgrad, "unfold_into"))  # live lists
    copies = _spy(monkeypatch, transpose, "to_channels_last")
    err, tol = run_layouts(problem, (x_last, False, False), seed=7)
    assert err <= tol
    assert bool(runs) == large
    unfolded = sum(map(len, unfolds))
    if large:
        assert not unfolded and len(copies) == (0 if x_last else 1)
    else:
        assert unfolded == 1  # x's taps (dy read as it is: one image a split, P*Q in whole chunks)


def test_the_tap_gather_takes_more_taps_on_large_planes_in_whole_chunks():
    """The route rule (wgrad.tap_gather): 3D always; 2D (1D) a filter of more than one tap whose channels
    are whole 16-byte chunks, on a plane of GATHER_MIN_PIXELS output pixels or more (ResNet-50's c2 3x3,
    not its c3-c5 3x3 layers nor the stems' 3 channels); a 1x1 filter never (channels-last: may_gather_1x1)."""
    from convlab.algorithms.tensor_core import wgrad
    from convlab.problem import make_problem_nd
    cases = [
        (make_problem("wgrad", 32, 64, 56, 56, 64, 3, 3, padding=1, dtype="float16"), True),
        (make_problem("wgrad", 32, 128, 28, 28, 128, 3, 3, padding=1, dtype="float16"), False),
        (make_problem("wgrad", 32, 128, 56, 56, 128, 3, 3, stride=2, padding=1, dtype="float16"), False),
        (make_problem("wgrad", 32, 3, 224, 224, 64, 7, 7, stride=2, padding=3, dtype="float16"), False),
        (make_problem("wgrad", 32, 64, 56, 56, 256, 1, 1, dtype="float16"), False),
        (make_problem("wgrad", 8, 12, 64, 64, 16, 3, 3, padding=1, dtype="float32"), True),  # TF32: chunks of 4
        (make_problem("wgrad", 8, 12, 64, 64, 16, 3, 3, padding=1, dtype="bfloat16"), False),  # 12: not 8s
        (make_problem_nd("wgrad", 4, 16, (4096,), 16, (3,), padding=1, dtype="float16"), True),  # 1D
        (make_problem_nd("wgrad", 4, 16, (1024,), 16, (3,), padding=1, dtype="float16"), False),
        (make_problem_nd("wgrad", 2, 3, (4, 4, 4), 8, (3, 3, 3), padding=1, dtype="float16"), True),  # 3D
    ]
    assert wgrad.GATHER_MIN_PIXELS == 56 * 56
    assert [wgrad.tap_gather(p) for p, _ in cases] == [want for _, want in cases]


@pytest.mark.parametrize("stride", [1, 2])
def test_a_1x1_wgrad_of_a_channels_last_x_gathers_it_as_it_is(monkeypatch, stride):
    """A channels-last x with whole chunks of channels takes a 1x1 wgrad to the tap gather on an mma.sync
    config: x read as it is (no layout copy of x, no unfold; strided: its pixels gathered at the stride),
    dy copied once; the same problem with an NCHW x, on a wgmma config, or with more output channels
    than input ones stays on the unfolded operands. Each against the reference."""
    from convlab.algorithms.tensor_core import taps, wgrad
    problem = make_problem("wgrad", 2, 16, 6, 8, 8, 1, 1, stride=stride, dtype="float16")
    sync = next(c for c in TC.configs(problem) if "MMA" not in c)
    assert TC.workspace_bytes(problem, sync, 2**28, runtime.target()) >= 2 * problem.n * 6 * 8 * 16
    host = random_operands(problem, np.random.default_rng(8 + stride))
    for x_last, config, gathered in ((True, sync, True), (False, sync, False)):
        runs = _spy(monkeypatch, taps, "run_taps")
        unfolds = _spy(monkeypatch, wgrad, "unfold_into")
        x = layouts.channels_last_copy(host[0]) if x_last else runtime.to_device(host[0])
        out = runtime.to_device(np.full(problem.operand_shapes[2], np.nan, np.float16))
        copies = _spy(monkeypatch, transpose, "to_channels_last")
        TC.run(problem, config, x, runtime.to_device(host[1]), None, out, workspace_limit=2**28)
        err = rel_error(runtime.to_host(out), reference.solve(problem, *host))
        assert err <= tolerance(problem, TC.compute_eps(problem.dtype)), (x_last, err)
        assert bool(runs) == gathered and (not copies if gathered else True)
        assert not unfolds if gathered else True
    wgmma = next(c for c in TC.configs(problem, targets.get("sm_90")) if "MMA" in c)
    assert not tensor_core.plugin.may_gather_1x1(problem, tensor_core.tc_config(wgmma), "f16")
    expand = make_problem("wgrad", 2, 8, 6, 8, 16, 1, 1, stride=stride, dtype="float16")  # C < K
    assert not tensor_core.plugin.may_gather_1x1(expand, tensor_core.tc_config(sync), "f16")


@pytest.mark.parametrize("shape,padded,unfolds", [
    (dict(h=9, w=9, r=1, s=1), True, 2),  # 81 -> 11 chunks (prime): images padded further, both unfolded
    (dict(h=8, w=8, r=1, s=1), False, 0),  # 8 chunks in 2 or 4 parts; dy and x as they are
])
def test_wgrad_cuts_a_short_gemm_reduction_in_slices(monkeypatch, shape, padded, unfolds):
    """K = 16 output channels, one image: the image groups leave SMs idle, so each reduction is cut in
    slices (the parted GEMM, grid z = splits * parts), summed in order with the groups' partials.
    (The slice count depends on the tile's BK: 5 / 4 on the simulator, 2 / 2 on a GPU.)"""
    from convlab.algorithms.tensor_core import wgrad
    eight = dataclasses.replace(runtime.target(), sm_count=8)
    problem = make_problem("wgrad", 1, 8, k=16, dtype="float16", **shape)
    cfg = tensor_core.tc_config(TC.configs(problem, eight)[0])
    splits, parts, pqp = wgrad.plan(problem, cfg, 8, eight)
    assert splits == 1 and parts > 1 and pqp % (8 * parts) == 0
    assert (pqp > wgrad.padded(problem.p * problem.q, 8)) == padded
    with targets.using(eight):
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
    from convlab.kernels.tensor_core.config import TcConfig
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
                          None, n=n, c=c, k=k, spatial=(h, w), kernel=(1, 1), out=(h, w), stride=(1, 1),
                          padding=(0, 0), dilation=(1, 1), tps=tps, nchw_in=True)()
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


def test_wgrad_of_an_empty_batch_is_zero():
    """N = 0 with P*Q in whole chunks (where one image per split would read dy as it is): dw = 0."""
    x = np.zeros((0, 8, 32, 32), np.float16)  # 4*K*C*R*S <= P*Q*K*2: one image per split if N > 0
    dy = np.zeros((0, 16, 32, 32), np.float16)
    dw = convlab.conv2d_backward_weight(x, dy, (16, 8, 3, 3), padding=1, algorithm="tensor_core")
    assert dw.shape == (16, 8, 3, 3) and not np.any(dw)


@pytest.mark.parametrize("bm,size,ok", [(32, 4, True), (64, 4, True), (48, 4, False), (16, 4, False),
                                        (32, 2, True), (48, 2, False), (64, 2, True), (192, 2, True)])
def test_m_contiguous_tiles_that_swizzle(bm, size, ok):
    """An m-contiguous A's k rows XOR their 16-byte chunks with values below 8: a row of 12 chunks (BM 48
    TF32) or 6 (BM 48 fp16) would send chunks out of the row, so such tiles do not read NCHW, and the
    generator refuses them."""
    from convlab.kernels.tensor_core.config import TcConfig
    from convlab.kernels.tensor_core.warp import km_tile_ok
    assert km_tile_ok(bm, size) == ok
    x = runtime.to_device(np.zeros(2 * 8 * 16, np.float16 if size == 2 else np.float32))
    itype = "f16" if size == 2 else "tf32"
    geo = dict(c=8, spatial=(4, 4), kernel=(1, 1), stride=(1, 1), padding=(0, 0))
    assert tc_conv.reads_nchw(itype, x, bm=bm, **geo) == ok
    if bm == 48:  # a config validate() accepts (96 threads)
        with pytest.raises(ValueError, match="swizzle"):
            tc_conv.kernel_source(itype, TcConfig(bm, 48, 32 // size, 16, 48, 2), nchw_in=True)


def test_single_image_groups_keep_dy_unpadded(monkeypatch):
    """One image per split (dy read as it is) and a reduction whose chunk count is prime: the slices take
    a divisor of it (here 1) instead of padding every image, which would bring dy's copy back."""
    from convlab.algorithms.tensor_core import wgrad
    from convlab.kernels.tensor_core.config import TcConfig
    problem = make_problem("wgrad", 2, 8, 8, 419, 16, 1, 1, dtype="float16")  # P*Q = 8 * 419 chunks
    plan = wgrad.plan(problem, TcConfig(128, 64, 32, 64, 32, 3), 8, targets.get("sm_90"))  # 132 SMs
    assert plan.splits == 2 and plan.pqp == 8 * 419 and wgrad.as_is(problem, plan.splits, 8, plan.pqp)[0]
