"""The warpgroup intrinsics (convlab.kernels.arch.wgmma): descriptors, the one-warpgroup probes against numpy,
and the simulator's ordering checks. On the simulator these run the stand-ins (wgmma_sim); on a Hopper
GPU the inline PTX."""
import numpy as np
import pytest

from convlab import runtime
from convlab.kernels.arch import wgmma, wgmma_desc
from convlab.kernels.tensor_core.gemm import to_storage

hopper = pytest.mark.skipif(not runtime.SIMULATOR and runtime.compute_capability() < (9, 0),
                            reason="wgmma needs sm_90a")


def _trunc_tf32(x: np.ndarray) -> np.ndarray:
    """fp32 -> TF32 by dropping the low 13 bits, as wgmma does (PTX ISA 9.7.15.5.2)."""
    return (np.ascontiguousarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def _values(itype, stored, exact):
    return _trunc_tf32(stored).astype(np.float64) if itype == "tf32" else exact


def test_descriptor_bits_follow_the_isa_table():
    """Bits 0-13 start >> 4, 16-29 LBO >> 4 (1: unused when swizzled), 32-45 SBO >> 4, 49-51 base offset,
    62-63 mode (1: 128B, 2: 64B, 3: 32B), as CUTLASS's GmmaDescriptor packs them."""
    d = wgmma_desc.descriptor(0x2A40, 128)
    assert d == (1 << 62) | ((1024 >> 4) << 32) | (1 << 16) | (0x2A40 >> 4)
    assert wgmma_desc.decode(d) == {"start": 0x2A40, "lbo": 16, "sbo": 1024, "base_offset": 0, "mode": 1}
    assert wgmma_desc.decode(wgmma_desc.descriptor(512, 64))["mode"] == 2
    assert wgmma_desc.decode(wgmma_desc.descriptor(256, 32)) == {"start": 256, "lbo": 16, "sbo": 256,
                                                                  "base_offset": 0, "mode": 3}
    assert wgmma_desc.encode(0x40000 + 0x30) == 3  # (x & 0x3FFFF) >> 4
    with pytest.raises(ValueError, match="16 bytes"):
        wgmma_desc.descriptor(8, 128)
    with pytest.raises(ValueError, match="32, 64 or 128"):
        wgmma_desc.desc_hi(16)


@pytest.mark.parametrize("row_bytes", [32, 64, 128])
def test_descriptor_addresses_are_the_pipeline_layout(row_bytes):
    """The ISA's K-major swizzled addressing (SBO = 8 rows, the XOR on address bits 4.. with bits 7..) of a
    tile on its swizzle repeat, started 32 bytes further per k step, reads the warp pipeline's layout: chunk c
    of row r at chunk c ^ ((r // (8 // CH)) % CH)."""
    ch = row_bytes // 16
    rows = np.arange(128)
    for base in (0, 8 * row_bytes, 5 * 8 * row_bytes):
        for kk in range(row_bytes // 32):
            got = wgmma_desc.addresses(wgmma_desc.descriptor(base + 32 * kk, row_bytes), rows)
            byte = 32 * kk + np.arange(32)
            chunk = np.array([[wgmma_desc.pipeline_chunk(r, c, ch) for c in byte // 16] for r in rows])
            np.testing.assert_array_equal(got, base + rows[:, None] * row_bytes + chunk * 16 + byte % 16)
    if row_bytes > 32:  # off the repeat (one row further) the XOR pattern no longer matches the rows
        shifted = wgmma_desc.addresses(wgmma_desc.descriptor(row_bytes, row_bytes), np.arange(8))
        assert not np.array_equal(shifted - row_bytes, wgmma_desc.addresses(wgmma_desc.descriptor(0, row_bytes),
                                                                            np.arange(8)))


def test_simulated_descriptor_rules():
    """The stand-in refuses a base offset (every tile here starts on its repeat) and reads no byte outside
    dynamic shared memory."""
    d = wgmma_desc.descriptor(0, 128) | (1 << 49)
    with pytest.raises(ValueError, match="base offset"):
        wgmma_desc.addresses(d, np.arange(8))


#: (row bytes, n, a_row0, b_row0, scale0): the three swizzles, several N, descriptors starting inside the
#: tile, scale_d 0 over NaN accumulators
CASES = [(32, 8, 0, 0, 1), (64, 24, 8, 16, 0), (128, 64, 64, 8, 1), (128, 256, 0, 8, 0)]


@hopper
@pytest.mark.parametrize("itype", ["f16", "bf16", "tf32"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "{}B-n{}-a{}-b{}-s{}".format(*c))
def test_warpgroup_mma_matches_numpy(itype, case):
    row_bytes, n, a0, b0, scale0 = case
    rng = np.random.default_rng(row_bytes + n + a0)
    k = row_bytes // wgmma.ITEMSIZE[itype]
    A, A64 = to_storage(itype, rng.standard_normal((a0 + 64, k)))
    Bt, B64 = to_storage(itype, rng.standard_normal((b0 + n + 8, k)))
    A64, B64 = _values(itype, A, A64)[a0:a0 + 64], _values(itype, Bt, B64)[b0:b0 + n]
    C = np.full((64, n), np.nan, np.float32) if not scale0 else rng.standard_normal((64, n)).astype(np.float32)
    D, base = wgmma.warpgroup_mma(itype, A, Bt, C, n, scale0=scale0, a_row0=a0, b_row0=b0)
    want = A64 @ B64.T + (C if scale0 else 0)
    assert np.all(np.isfinite(D)) and base % 1024 == 0  # scale_d 0 ignored the NaN accumulators
    # products exact in fp32 (11 x 11 mantissa bits at most), the fp32 accumulation in any order rounds:
    # |error| <= k u sum |terms| (u = 2**-24; 2**-22 leaves a factor 4)
    scale = np.abs(A64) @ np.abs(B64).T + (np.abs(C) if scale0 else 0)
    assert np.all(np.abs(D - want) <= 2.0**-22 * (k + 1) * scale)


@hopper
def test_warpgroup_mma_tf32_truncates():
    """wgmma reads the fp32 bits and drops the low 13 (truncation toward zero), unlike cvt.rna: inputs just
    under the next TF32 value tell the two apart."""
    rng = np.random.default_rng(5)
    base = rng.standard_normal((64 + 8, 8)).astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    vals = (base | np.uint32(0x1FFF)).view(np.float32)
    A, Bt = vals[:64], np.ascontiguousarray(vals[64:])
    D, _ = wgmma.warpgroup_mma("tf32", A, Bt, np.zeros((64, 8), np.float32), 8)
    trunc = _trunc_tf32(A).astype(np.float64) @ _trunc_tf32(Bt).astype(np.float64).T
    rna = ((A.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64) \
        @ ((Bt.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64).T
    assert np.abs(D - trunc).max() < 1e-5 < np.abs(D - rna).max()


def test_warpgroup_mma_argument_rules():
    A = np.zeros((64, 16), np.float16)
    with pytest.raises(ValueError, match="32, 64, 128"):
        wgmma.warpgroup_mma("f16", np.zeros((64, 8), np.float16), np.zeros((8, 8), np.float16),
                            np.zeros((64, 8), np.float32), 8)
    with pytest.raises(ValueError, match="multiples of 8"):
        wgmma.warpgroup_mma("f16", A, np.zeros((16, 16), np.float16), np.zeros((64, 8), np.float32), 8, b_row0=12)
    with pytest.raises(ValueError, match="N must be a multiple of 8|multiple of 8 in 8..256"):
        wgmma.wgmma_async("f16", 12)
