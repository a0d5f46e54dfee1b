"""The tensor-core intrinsics (convlab.kernels.arch.mma), one warp each, against numpy and the PTX spec.

On the simulator these exercise the stand-ins (convlab.kernels.arch.mma_sim); on a GPU the inline PTX.
"""
import numpy as np
import pytest

from convlab.kernels.arch import mma
from convlab.kernels.tensor_core.gemm import to_storage

K_OF = {"f16": 16, "bf16": 16, "tf32": 8}


def _tf32(x: np.ndarray) -> np.ndarray:
    """Round float32 to TF32 (10 mantissa bits, ties away from zero), as cvt.rna.tf32.f32."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("itype", ["f16", "bf16", "tf32"])
def test_warp_mma_matches_numpy(itype):
    rng = np.random.default_rng(11)
    k = K_OF[itype]
    A, A64 = to_storage(itype, rng.standard_normal((16, k)))
    Bt, B64 = to_storage(itype, rng.standard_normal((8, k)))
    C = rng.standard_normal((16, 8)).astype(np.float32)
    if itype == "tf32":
        A64, B64 = _tf32(A).astype(np.float64), _tf32(Bt).astype(np.float64)
    want = A64 @ B64.T + C
    got = mma.warp_mma(itype, A, Bt, C)
    assert np.all(np.isfinite(got))
    # products are exact in fp32; only the fp32 accumulation rounds
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max() * k)
    # a layout mix-up (e.g. B not transposed) must fail this test
    assert np.abs(got - (A64 @ B64.reshape(k, 8) + C)).max() > 1e-2


def test_to_tf32_rounds_like_cvt_rna():
    x = np.array([1.0, 1 + 2.0**-11, 1 + 3 * 2.0**-11, -(1 + 2.0**-11), 3.14159, 1e-3], np.float32)
    A = np.zeros((16, 8), np.float32)
    A[0, :6] = x  # a0 of lane 0 and a2 of lane 0 ... checked through the mma: D[0, 0] = sum A[0, k] B[k, 0]
    for k in range(6):
        Bt = np.zeros((8, 8), np.float32)
        Bt[0, k] = 1.0
        got = mma.warp_mma("tf32", A, Bt, np.zeros((16, 8), np.float32))
        assert got[0, 0] == _tf32(x[k : k + 1])[0], (k, got[0, 0])


def test_warp_mma_tf32x3_is_fp32_class():
    """Three TF32 mma on split operands: every product to ~2**-22 (one TF32 mma: 2**-11)."""
    rng = np.random.default_rng(12)
    A = rng.standard_normal((16, 8)).astype(np.float32)
    Bt = rng.standard_normal((8, 8)).astype(np.float32)
    C = rng.standard_normal((16, 8)).astype(np.float32)
    want = A.astype(np.float64) @ Bt.astype(np.float64).T + C
    scale = np.abs(A).astype(np.float64) @ np.abs(Bt).astype(np.float64).T + np.abs(C)
    got = mma.warp_mma("tf32x3", A, Bt, C)
    one = mma.warp_mma("tf32", A, Bt, C)
    assert np.all(np.isfinite(got))
    assert np.abs(got - want).max() <= 2.0**-20 * scale.max()  # 3 * 2**-22 a product, fp32 sums
    assert np.abs(one - want).max() > 2.0**-16 * scale.max()  # TF32 alone is far coarser


def test_split_tf32_parts():
    """big + small represent x to 2**-22 (both TF32: low 13 bits zero)."""
    x = np.array([1 + 2.0**-11 + 2.0**-20, np.pi, -1e-3, 3e5, -7.0, 2.0**-30], np.float32)
    A = np.zeros((16, 8), np.float32)
    A[0, :6] = x
    for k in range(6):
        Bt = np.zeros((8, 8), np.float32)
        Bt[0, k] = 1.0  # exact in TF32: small part 0, so D[0, 0] = small(x) + big(x)
        got = mma.warp_mma("tf32x3", A, Bt, np.zeros((16, 8), np.float32))[0, 0]
        assert abs(float(got) - float(x[k])) <= 2.0**-22 * abs(float(x[k])), (k, got, x[k])
        assert float(got) != float(_tf32(x[k : k + 1])[0]) or float(x[k]) == float(_tf32(x[k : k + 1])[0])


@pytest.mark.parametrize("count", [2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_distribution(count, trans):
    rng = np.random.default_rng(count + 2 * trans)
    src = rng.integers(0, 2**16, size=256, dtype=np.uint16)
    rows = rng.permutation(32).astype(np.int32)  # lane l gives the address of row rows[l]
    got = mma.warp_ldmatrix(count, trans, src, rows)
    mat = src.reshape(32, 8).astype(np.uint32)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i in range(count):
            m = mat[rows[8 * i : 8 * i + 8]]  # matrix i: its 8 rows
            lo, hi = (m[2 * t, g], m[2 * t + 1, g]) if trans else (m[g, 2 * t], m[g, 2 * t + 1])
            assert got[lane, i] == lo | hi << 16, (lane, i)


def test_cp_async_copies_and_zero_fills():
    rng = np.random.default_rng(5)
    src = rng.integers(1, 2**32, size=64 * 4, dtype=np.uint32)
    chunks = rng.integers(0, 64, size=32)
    nbytes = np.array([16, 0, 8, 4, 12] * 6 + [16, 0])
    got = mma.warp_cp_async(src, chunks, nbytes).reshape(32, 4)
    for lane in range(32):
        want = np.zeros(4, np.uint32)
        words = nbytes[lane] // 4
        want[:words] = src[chunks[lane] * 4 : chunks[lane] * 4 + words]
        np.testing.assert_array_equal(got[lane], want, err_msg=f"lane {lane}")
