"""The warpgroup (wgmma) tensor-core loop (convlab.kernels.tensor_core.warpgroup) through tc_gemm and tc_conv, against
float64 numpy; its config rules; the simulator's checks of the cp.async / wgmma ordering it relies on."""
import numpy as np
import pytest

from convlab import runtime
from convlab.kernels.tensor_core import conv as tc_conv, gemm as tc_gemm, warpgroup as tc_wgmma
from convlab.kernels.tensor_core.config import TcConfig
from convlab.kernels.tensor_core.launch import compile_kernel, configure
from convlab.runtime import cuda

U = np.uint32
SIM = tc_gemm.SIM_WGMMA
hopper = pytest.mark.skipif(not runtime.SIMULATOR and runtime.compute_capability() < (9, 0),
                            reason="wgmma needs sm_90a")
pytestmark = hopper


def _operands(itype, shape, seed):
    """(A [..., m, k], Bt [..., n, k] in the storage type, the float64 values wgmma multiplies (TF32: the
    truncated ones), the inputs' own float64 values) for shape (..., m, n, k)."""
    rng = np.random.default_rng(seed)
    *z, m, n, k = shape
    A, A64 = tc_gemm.to_storage(itype, rng.standard_normal((*z, m, k)))
    Bt, B64 = tc_gemm.to_storage(itype, rng.standard_normal((*z, n, k)))
    if itype == "tf32":  # wgmma drops the low 13 bits of each fp32 operand
        cut = lambda x: (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)  # noqa
        return A, Bt, cut(A), cut(Bt), A64, B64
    return A, Bt, A64, B64, A64, B64


def _rel(got, want):
    return np.linalg.norm(got - want) / np.linalg.norm(want)


def _check(itype, got, A64, B64, raw_a, raw_b, k):
    """Every element written; against the product of the operands wgmma reads, the fp32 accumulation's
    error (k u, u = 2**-24, with margin); against the inputs' own product, the input rounding (unit
    roundoff 2**-11 f16, 2**-8 bf16, 2**-10 truncated TF32)."""
    assert np.all(np.isfinite(got))
    einsum = "...mk,...nk->...mn"
    assert _rel(got, np.einsum(einsum, A64, B64)) < 4 * k * 2.0**-24
    u = {"f16": 2.0**-11, "bf16": 2.0**-8, "tf32": 2.0**-10}[itype]
    assert _rel(got, np.einsum(einsum, raw_a, raw_b)) < 2 * u


def _gemm(itype, m, n, k, cfg, out=np.float32, seed=0):
    A, Bt, A64, B64, raw_a, raw_b = _operands(itype, (m, n, k), seed)
    C = cuda.to_device(np.full((m, n), np.nan if out != np.uint16 else 0xFFFF, out))
    tc_gemm.tc_matmul(itype, cuda.to_device(A), cuda.to_device(Bt), C, cfg)
    return C.copy_to_host(), A64, B64, raw_a, raw_b


@pytest.mark.parametrize("itype", ["f16", "bf16", "tf32"])
@pytest.mark.parametrize("shape", [(64, 32, 48), (100, 40, 36)])  # a whole tile; ragged M, N and K
def test_wgmma_gemm_matches_float64(itype, shape):
    shape = shape[:2] + (shape[2] + 4 * (shape[2] % 8 and itype != "tf32"),)  # K in whole 16-byte chunks
    cfg = SIM[itype] if runtime.SIMULATOR else tc_gemm.WGMMA_CONFIGS[itype][0]
    got, *ops = _gemm(itype, *shape, cfg, seed=sum(shape))
    _check(itype, got, *ops, shape[2])


#: the other swizzles (64- and 128-byte rows), two warpgroups along M (256 threads) or N, two m64 slices
#: a warpgroup, no group in flight ("wgmma0")
LAYOUTS = [("f16", TcConfig(64, 16, 32, 64, 16, 3, 0, "wgmma")), ("f16", TcConfig(64, 16, 64, 64, 16, 3, 0, "wgmma")),
           ("tf32", TcConfig(64, 16, 32, 64, 16, 3, 0, "wgmma")),
           ("bf16", TcConfig(128, 16, 16, 64, 16, 3, 0, "wgmma")),
           ("f16", TcConfig(64, 32, 16, 64, 16, 2, 0, "wgmma0")),
           ("f16", TcConfig(128, 16, 16, 128, 16, 3, 0, "wgmma"))]


@pytest.mark.parametrize("itype,cfg", LAYOUTS, ids=lambda x: getattr(x, "name", x))
def test_wgmma_gemm_layouts(itype, cfg):
    # ragged: a second, mostly empty tile each way; K one 16-byte chunk short of 3 k tiles
    m, n, k = cfg.BM + 8, cfg.BN + 8, 3 * cfg.BK - (4 if itype == "tf32" else 8)
    got, *ops = _gemm(itype, m, n, k, cfg, seed=cfg.BK)
    _check(itype, got, *ops, k)


def test_wgmma_gemm_outputs_in_the_input_type():
    got, A64, B64, *_ = _gemm("f16", 64, 32, 32, SIM["f16"], np.float16)
    assert got.dtype == np.float16 and _rel(got.astype(np.float64), A64 @ B64.T) < 1e-3
    bits, A64, B64, *_ = _gemm("bf16", 64, 16, 32, SIM["bf16"], np.uint16)
    assert _rel((bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64), A64 @ B64.T) < 8e-3


def test_wgmma_batched_and_parted():
    """grid z = batch (each matrix its own offsets), and a batch whose reductions are cut in parts."""
    cfg = SIM["f16"]
    z, m, n, k = 2, 70, 24, 32
    A, Bt, A64, B64, *_ = _operands("f16", (z, m, n, k), 3)
    C = cuda.to_device(np.full((z, m, n), np.nan, np.float32))
    tc_gemm.batched_launcher("f16", cfg, cuda.to_device(A), cuda.to_device(Bt), C)()
    got = C.copy_to_host()
    for i in range(z):
        assert np.all(np.isfinite(got[i])) and _rel(got[i], A64[i] @ B64[i].T) < 1e-6
    parts = 2
    C = cuda.to_device(np.full((z * parts, m, n), np.nan, np.float32))
    tc_gemm.parted_launcher("f16", cfg, cuda.to_device(A), cuda.to_device(Bt), C, parts)()
    got = C.copy_to_host().reshape(z, parts, m, n)
    sl = k // parts
    for i in range(z):
        for p in range(parts):
            want = A64[i, :, p * sl:(p + 1) * sl] @ B64[i, :, p * sl:(p + 1) * sl].T
            assert np.all(np.isfinite(got[i, p])) and _rel(got[i, p], want) < 1e-6


@pytest.mark.parametrize("split", [False, True])
def test_wgmma_conv_gathers_nhwc(split):
    """tc_conv's NHWC gather (padding, a 3x3 filter, ragged M and K) feeds the warpgroup loop unchanged,
    and split-K (grid z: k tiles [z*tps, (z+1)*tps), fp32 partials) runs on it."""
    cfg = SIM["f16"]
    n, c, h, w, k, r = 1, 8, 7, 7, 24, 3
    rng = np.random.default_rng(9 + split)
    x = rng.standard_normal((n, h, w, c)).astype(np.float16)
    wt = rng.standard_normal((k, r, r, c)).astype(np.float16)
    xp = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.einsum("nhwrsc,krsc->nkhw", np.lib.stride_tricks.sliding_window_view(xp, (r, r), (1, 2))
                     .transpose(0, 1, 2, 4, 5, 3), wt.astype(np.float64))
    tps = 2 if split else 0  # 72 reduction elements: 5 k tiles of 16, 3 splits
    splits = tc_conv.split_count(r * r * c, cfg.BK, tps) if split else 1
    y = cuda.to_device(np.full(splits * want.size, np.nan, np.float32 if split else np.float16))
    tc_conv.conv_launcher("f16", cfg, cuda.to_device(x.reshape(-1)), cuda.to_device(wt.reshape(-1)), y, None,
                          n=n, c=c, k=k, spatial=(h, w), kernel=(r, r), out=(h, w), stride=(1, 1), padding=(1, 1),
                          dilation=(1, 1), tps=tps)()
    parts = y.copy_to_host().astype(np.float64).reshape(splits, *want.shape)
    assert np.all(np.isfinite(parts)) and splits == (3 if split else 1)
    assert _rel(parts.sum(axis=0), want) < (1e-6 if split else 1e-3)  # fp32 partials; fp16 outputs


def test_wgmma_config_rules():
    cfg = TcConfig(128, 256, 64, 64, 256, 4, 0, "wgmma")
    assert cfg.validate("f16") is cfg and cfg.threads == 256 and cfg.name == "128x256x64/64x256/s4/wg"
    assert cfg.depth == 2 and cfg._replace(MMA="wgmma0").depth == 3 and TcConfig(*cfg[:7]).MMA == "sync"
    bad = {"WM a multiple of 64": TcConfig(128, 128, 64, 32, 128, 4, 0, "wgmma"),
           "a multiple of 8 in 8..256": TcConfig(64, 512, 64, 64, 512, 2, 0, "wgmma"),
           "over 128": TcConfig(256, 256, 32, 128, 256, 2, 0, "wgmma"),
           "3\\+ stages": TcConfig(64, 64, 64, 64, 64, 2, 0, "wgmma"),
           "227 KiB": TcConfig(256, 256, 64, 64, 256, 4, 0, "wgmma"),
           "'sync', 'wgmma' or 'wgmma0'": TcConfig(64, 64, 64, 64, 64, 3, 0, "wgmma2")}
    for match, c in bad.items():
        with pytest.raises(ValueError, match=match):
            c.validate("f16")
    with pytest.raises(ValueError, match="3xTF32"):
        cfg._replace(BK=32).validate("tf32x3")
    for itype, configs in tc_gemm.WGMMA_CONFIGS.items():
        for c in configs:
            assert c.validate(itype).wgmma and c.shared_bytes(itype) <= 227 * 1024


def test_wgmma_refuses_what_it_cannot_feed():
    """An m-contiguous A (the 1x1 NCHW read) and a TF32 rounding other than truncation need mma.sync: a
    ValueError at generation, which a plugin turns into a decline."""
    cfg = TcConfig(64, 32, 16, 64, 32, 3, 0, "wgmma")
    with pytest.raises(ValueError, match="m-contiguous"):
        tc_conv.kernel_source("f16", cfg, nchw_in=True)
    with pytest.raises(ValueError, match="truncates"):
        tc_gemm.make_tc_gemm("tf32", cfg._replace(BK=8), tf32_round="cvt")
    src = tc_gemm.kernel_source("f16", cfg)
    assert "wgmma_wait(" in src and "ldmatrix" not in src


# --- the simulator's ordering checks: each breaks one rule of the loop and must be caught


def _launch(cfg, extra=None, name="gemm"):
    """A wgmma GEMM compiled outside make_tc_gemm's cache (namespace entries replaced by ``extra``)."""
    m, n, k = 64, 32, 6 * cfg.BK
    A, Bt, A64, B64, *_ = _operands("f16", (m, n, k), 1)
    src = tc_gemm._source(cfg, "f16", "f32")
    kernel = compile_kernel(src, "gemm", f"<test_tc_wgmma {name} {id(extra)}>", cfg, "f16", extra)
    C = cuda.to_device(np.full(m * n, np.nan, np.float32))
    args = (cuda.to_device(A), cuda.to_device(Bt), C, U(m), U(n), U(k), True)
    configure(kernel, cfg, "f16", args, m, n, out_dtype=np.float32, contig="n")(*args)
    return _rel(C.copy_to_host().reshape(m, n), A64 @ B64.T)


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the simulator's checks")
def test_simulator_catches_a_stage_overwritten_under_a_pending_wgmma(monkeypatch):
    """One group in flight ("wgmma", wait_group 1) with the prefetch distance of "wgmma0" (S - 1): the
    prefetch writes the stage the previous k tile's wgmma may still read."""
    cfg = SIM["f16"]
    assert _launch(cfg) < 1e-6
    monkeypatch.setattr(TcConfig, "depth", property(lambda self: self.STAGES - 1))
    with pytest.raises(RuntimeError, match="pending"):
        _launch(cfg, name="distance")


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the simulator's checks")
@pytest.mark.parametrize("broken", ["fence", "wait"])
def test_simulator_catches_an_unfenced_or_unwaited_copy(broken):
    """wgmma reading a stage whose cp.async its thread has not fenced (fence.proxy.async), or not waited
    for (cp.async.wait_group one group too loose)."""
    from convlab.kernels.arch.mma import cp_async_wait
    cfg = SIM["f16"]
    extra = {"fence_proxy_async": lambda: None} if broken == "fence" else {"wait": cp_async_wait(cfg.depth)}
    with pytest.raises(RuntimeError, match="waited for and fenced"):
        _launch(cfg, extra, name=broken)


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the simulator's checks")
def test_a_thread_of_an_aborted_launch_stops_at_its_next_intrinsic():
    """The simulator leaves a raising block's other threads running, and the next launch's context is
    global: such a thread must not record copies or reads in that launch's ordering state."""
    import threading

    from convlab.kernels.arch import wgmma_sim

    caught = []

    class Zombie(threading.Thread):
        abort = True

        def run(self):
            for hook in (wgmma_sim.note_commit, wgmma_sim.fence_proxy_async, wgmma_sim.wgmma_commit):
                try:
                    hook()
                except RuntimeError as e:
                    caught.append(str(e))

    z = Zombie()
    z.start()
    z.join()
    assert len(caught) == 3 and all("aborted" in m for m in caught)


@pytest.mark.skipif(runtime.SIMULATOR, reason="needs a Hopper GPU")
@pytest.mark.parametrize("itype", ["f16", "bf16", "tf32"])
def test_wgmma_gpu_configs(itype):
    for cfg in tc_gemm.WGMMA_CONFIGS[itype]:
        got, *ops = _gemm(itype, 300, 260, 136, cfg, seed=cfg.BM + cfg.BN)
        _check(itype, got, *ops, 136)


def test_namespace_binds_the_loop_waits():
    cfg = SIM["f16"]
    ns = tc_wgmma.namespace(cfg, "f16")
    assert len(ns["ZEROS"]) == cfg.WN // 2 and int(ns["DHI"]) >> 62 == 3  # 32-byte rows: the 32B swizzle
