"""The tensor-core GEMM (convlab.kernels.tensor_core.gemm) against float64 numpy, smallest tiles on the simulator."""
import numpy as np
import pytest

from convlab import runtime
from convlab.kernels.tensor_core import gemm as tc_gemm
from convlab.runtime import cuda


def _run(itype, m, n, k, out_dtype=np.float32, cfg=None):
    rng = np.random.default_rng(m * 7 + n * 3 + k)
    A, A64 = tc_gemm.to_storage(itype, rng.standard_normal((m, k)))
    Bt, B64 = tc_gemm.to_storage(itype, rng.standard_normal((n, k)))
    C = cuda.to_device(np.full((m, n), np.nan if out_dtype != np.uint16 else 0xFFFF, out_dtype))
    tc_gemm.tc_matmul(itype, cuda.to_device(A), cuda.to_device(Bt), C, cfg)
    return C.copy_to_host(), A64 @ B64.T


def _rel(got, want):
    return np.linalg.norm(got - want) / np.linalg.norm(want)


@pytest.mark.parametrize("itype", ["f16", "bf16", "tf32"])
@pytest.mark.parametrize("shape", [(64, 32, 48), (40, 24, 40)])  # tile multiples; remainders in M, N, K
def test_tc_gemm_matches_float64(itype, shape):
    got, want = _run(itype, *shape)
    assert np.all(np.isfinite(got))
    tol = 2e-3 if itype == "tf32" else 1e-6  # tf32 keeps 10 mantissa bits; f16/bf16 products are exact
    assert _rel(got, want) < tol


def test_tc_gemm_dynamic_shared_layout():
    """A's and B's stages, then the staged C tile, in one dynamic shared array."""
    cfg = tc_gemm.TcConfig(32, 32, 16, 16, 32, 2)
    src = tc_gemm.kernel_source("f16", cfg)
    assert "As = cuda.shared.array(0" in src and "Cs = cuda.shared.array(0" in src
    got, want = _run("f16", 64, 32, 48, cfg=cfg)
    assert _rel(got, want) < 1e-6


def test_tc_gemm_fp16_and_bf16_outputs():
    got, want = _run("f16", 32, 32, 32, np.float16)
    assert got.dtype == np.float16 and _rel(got.astype(np.float64), want) < 1e-3
    bits, want = _run("bf16", 32, 32, 32, np.uint16)
    got = (bits.astype(np.uint32) << 16).view(np.float32)
    assert _rel(got.astype(np.float64), want) < 8e-3


@pytest.mark.parametrize("itype", ["f16", "tf32"])
def test_batched_gemm_runs_every_matrix_in_one_launch(itype):
    """grid z = batch (wgrad's splits side by side): matrix z of each operand at z * its size; ragged
    M and N; every output element written (NaN-poisoned)."""
    z, m, n, k = 3, 40, 24, 32
    rng = np.random.default_rng(z + m + n + k)
    A, A64 = tc_gemm.to_storage(itype, rng.standard_normal((z, m, k)))
    Bt, B64 = tc_gemm.to_storage(itype, rng.standard_normal((z, n, k)))
    C = cuda.to_device(np.full((z, m, n), np.nan, np.float32))
    cfg = tc_gemm.SIM_CONFIG[itype] if runtime.SIMULATOR else tc_gemm.CONFIGS[itype][0]
    tc_gemm.batched_launcher(itype, cfg, cuda.to_device(A), cuda.to_device(Bt), C)()
    got, want = C.copy_to_host(), np.einsum("zmk,znk->zmn", A64, B64)
    assert np.all(np.isfinite(got))
    for i in range(z):  # each matrix its own (a wrong offset would mix them)
        assert _rel(got[i], want[i]) < (2e-3 if itype == "tf32" else 1e-6)
    with pytest.raises(ValueError, match="must agree"):
        tc_gemm.batched_launcher(itype, cfg, cuda.to_device(A), cuda.to_device(Bt[:2]), C)


@pytest.mark.parametrize("itype", ["f16", "tf32"])
def test_parted_gemm_slices_each_reduction(itype):
    """grid z = batch * parts: block z runs slice z % parts of matrix z // parts (rows L long, the
    slice K = L / parts); the slices' products add up to each matrix's product and differ from it."""
    z, parts, m, n, length = 2, 3, 20, 24, 48  # slices of 16: two fp16 chunks, four tf32 ones
    rng = np.random.default_rng(7)
    A, A64 = tc_gemm.to_storage(itype, rng.standard_normal((z, m, length)))
    Bt, B64 = tc_gemm.to_storage(itype, rng.standard_normal((z, n, length)))
    C = cuda.to_device(np.full((z * parts, m, n), np.nan, np.float32))
    cfg = tc_gemm.SIM_CONFIG[itype] if runtime.SIMULATOR else tc_gemm.CONFIGS[itype][0]
    tc_gemm.parted_launcher(itype, cfg, cuda.to_device(A), cuda.to_device(Bt), C, parts)()
    got = C.copy_to_host().reshape(z, parts, m, n)
    sl = length // parts
    for i in range(z):
        for p in range(parts):
            want = A64[i, :, p * sl:(p + 1) * sl] @ B64[i, :, p * sl:(p + 1) * sl].T
            assert _rel(got[i, p], want) < (2e-3 if itype == "tf32" else 1e-6), (i, p)
        assert _rel(got[i].sum(0), A64[i] @ B64[i].T) < (2e-3 if itype == "tf32" else 1e-6)
    with pytest.raises(ValueError, match="parts"):
        tc_gemm.parted_launcher(itype, cfg, cuda.to_device(A), cuda.to_device(Bt), C, 5)


def test_tc_gemm_configs_validate():
    for itype, configs in tc_gemm.CONFIGS.items():
        for cfg in configs:
            assert cfg.validate(itype).shared_bytes(itype) <= 227 * 1024
    with pytest.raises(ValueError, match="227 KiB"):
        tc_gemm.TcConfig(256, 256, 64, 64, 64, 4).validate("f16")
    with pytest.raises(ValueError, match="multiple of 8"):
        tc_gemm.tc_matmul("f16", cuda.to_device(np.zeros((16, 12), np.float16)),
                          cuda.to_device(np.zeros((16, 12), np.float16)),
                          cuda.to_device(np.zeros((16, 16), np.float32)))


@pytest.mark.skipif(runtime.SIMULATOR, reason="needs a real CUDA GPU")
@pytest.mark.parametrize("shape", [(300, 260, 136), (256, 256, 256), (1000, 520, 264), (129, 131, 72)])
@pytest.mark.parametrize("itype", ["f16", "bf16", "tf32"])
def test_tc_gemm_gpu_configs(itype, shape):
    for cfg in tc_gemm.CONFIGS[itype]:
        got, want = _run(itype, *shape, cfg=cfg)
        # fp32 accumulation of exact f16/bf16 products: 1e-6 at K 136, 1e-5 (the bound the GPU checks of
        # results/tc_gemm were held to) at the longer and ragged reductions
        tol = 2e-3 if itype == "tf32" else (1e-6 if shape == (300, 260, 136) else 1e-5)
        assert np.all(np.isfinite(got)) and _rel(got, want) < tol, cfg.name


def test_configure_folds_output_tiles_into_grid_x_and_names_its_limits():
    """Output tiles go along blockIdx.x (up to 2**31 - 1; grid y stops at 65535, which a 4M-row dgrad
    in 64-row tiles passes); beyond the grid's limits, a ValueError before any launch."""
    from convlab.kernels.tensor_core.config import TcConfig
    from convlab.kernels.tensor_core.launch import configure
    cfg = TcConfig(64, 64, 32, 32, 32, 3)

    class Kernel:
        def __getitem__(self, launch):
            return launch

    out = dict(out_dtype=np.float16, contig="m")
    grid, threads, _, dyn = configure(Kernel(), cfg, "f16", (), 16 * 512 * 512, 16, **out)
    assert grid == (65536, 1, 1) and threads == cfg.threads and dyn == cfg.shared_bytes("f16")
    with pytest.raises(ValueError, match="grid"):
        configure(Kernel(), cfg, "f16", (), 2**40, 64, **out)


def test_tf32_rounding_modes():
    """TF32_ROUND "add" (bits + half a TF32 ulp, the mma truncating) and "cvt" (cvt.rna.tf32.f32) give the
    same bits: round to nearest, ties away from zero, inf and NaN kept (CUDA's NaN 0x7FFFFFFF, which a
    bare add would turn into -0). "trunc" (the fp32 bits as they are) truncates: the mma reads the top
    19 bits, inf and NaN kept. Inputs sit on the tie and just beside it, so a truncation and a rounding
    (or ties-to-even) differ."""
    rng = np.random.default_rng(11)
    m, n, k = 32, 32, 16
    base = rng.standard_normal((m + n, k)).astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    nudge = rng.choice(np.array([0x0FFF, 0x1000, 0x1001, 0x1FFF], np.uint32), size=base.shape)
    vals = (base | nudge).view(np.float32)  # low 13 bits: below, at, above the tie; just under 1 ulp
    bits = vals.view(np.uint32)
    bits[0, 5], bits[1, 2] = 0x7FFFFFFF, 0xFF800000  # CUDA's NaN (an add would carry it into -0), -inf
    A, Bt = vals[:m], vals[m:]
    cfg = tc_gemm.SIM_CONFIG["tf32"] if runtime.SIMULATOR else tc_gemm.CONFIGS["tf32"][0]
    got = {}
    for rnd in ("add", "cvt", "trunc"):
        C = cuda.to_device(np.full((m, n), np.nan, np.float32))
        tc_gemm.launcher("tf32", cfg, cuda.to_device(A), cuda.to_device(Bt), C, tf32_round=rnd)()
        got[rnd] = C.copy_to_host()
        assert np.isnan(got[rnd][0]).all() and not np.isfinite(got[rnd][1]).any()  # inf / NaN propagate
    assert np.array_equal(got["add"], got["cvt"], equal_nan=True)
    A = A[2:]
    rna = lambda x: ((x.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)  # noqa
    rtz = lambda x: (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)  # noqa: E731
    want = {"add": rna(A).astype(np.float64) @ rna(Bt).astype(np.float64).T,
            "trunc": rtz(A).astype(np.float64) @ rtz(Bt).astype(np.float64).T}
    for rnd, other in (("add", "trunc"), ("trunc", "add")):
        assert _rel(got[rnd][2:], want[rnd]) < 1e-6 < _rel(got[rnd][2:], want[other])


@pytest.mark.parametrize("n,offset,vec", [(24, 0, True), (20, 0, False), (24, 1, False)])
def test_staged_epilogue_stores_vectors_or_elements(n, offset, vec):
    """The C tile goes through shared memory, then out in 16-byte vectors when the output is aligned and
    its rows are whole vectors (N = 24 fp16), else element by element (N = 20; or a view one element off
    alignment): every element written once, right (NaN-poisoned around the view too)."""
    from convlab.kernels.tensor_core.epilogue import vector_ok
    m, k = 40, 32
    rng = np.random.default_rng(n + offset)
    A, A64 = tc_gemm.to_storage("f16", rng.standard_normal((m, k)))
    Bt, B64 = tc_gemm.to_storage("f16", rng.standard_normal((n, k)))
    buf = cuda.to_device(np.full(m * n + 8, np.nan, np.float16))
    C = buf[offset:offset + m * n].reshape(m, n)
    assert vector_ok(C, n) == vec
    tc_gemm.tc_matmul("f16", cuda.to_device(A), cuda.to_device(Bt), C)
    host = buf.copy_to_host()
    got = host[offset:offset + m * n].reshape(m, n).astype(np.float64)
    assert np.all(np.isfinite(got)) and np.isnan(host[:offset]).all() and np.isnan(host[offset + m * n:]).all()
    assert _rel(got, A64 @ B64.T) < 1e-3


def test_staged_epilogue_in_passes_per_warp_row(monkeypatch):
    """A C tile larger than the stages' shared memory is staged one row of warps at a time (here forced
    by a zero static limit: fp32 32 x 32 outputs > two f16 stages)."""
    from convlab.kernels.tensor_core import epilogue as tc_epilogue
    monkeypatch.setattr(tc_epilogue, "STATIC_LIMIT", 0)
    cfg = tc_gemm.TcConfig(32, 32, 16, 16, 16, 2)  # a config no other test compiles (2 x 2 warps)
    assert tc_epilogue.epilogue_plan(cfg, "f16", np.float32, "n") == (2, 16, 36)  # 2 warp rows
    assert tc_epilogue.epilogue_plan(cfg, "f16", np.float16, "n")[0] == 1
    got, want = _run("f16", 64, 40, 48, cfg=cfg)
    assert np.all(np.isfinite(got)) and _rel(got, want) < 1e-6
