"""MN-major wgmma operands (imm-trans, f16 / bf16): the descriptor layout is the copy engine's box of
MN-contiguous rows (wgmma_desc.mn_addresses against tensormap's swizzled box bytes), and the stand-in
multiplies such operands as the ISA says (one warpgroup against numpy)."""
import numpy as np
import pytest
from numba import types

from convlab import runtime
from convlab.kernels.arch import tensormap, wgmma, wgmma_desc
from convlab.runtime import cuda


@pytest.mark.parametrize("atom", [32, 64, 128])
def test_mn_major_layout_is_the_copy_engines_box(atom):
    """A box of ``atom``-byte MN rows (k rows of them, 128B / 64B / 32B swizzle) holds element (mn, k) where
    the MN-major descriptor reads it; atoms along MN are the next boxes, LBO apart."""
    per, rows = atom // 2, 32
    lbo = rows * atom
    desc = wgmma_desc.mn_desc_hi(atom, lbo) | wgmma_desc.encode(0)
    mn = np.arange(3 * per)
    got = wgmma_desc.mn_addresses(desc, mn, k=rows)  # [mn, rows * 2]
    box = tensormap.swizzled(np.arange(rows * atom), atom).reshape(rows, per, 2)  # [k, mn in a box, byte]
    for m in mn:
        want = (m // per) * lbo + box[:, m % per, :].reshape(-1)
        np.testing.assert_array_equal(got[m], want)
    assert wgmma_desc.decode(desc) == {"start": 0, "lbo": lbo, "sbo": 8 * atom, "base_offset": 0,
                                       "mode": wgmma_desc.MODE[atom]}


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the stand-in's semantics (the GPU check runs the probes)")
@pytest.mark.parametrize("n,atom", [(16, 32), (32, 64), (128, 128)])
def test_stand_in_multiplies_mn_major_operands(n, atom):
    rng = np.random.default_rng(n)
    A = rng.standard_normal((64, 16)).astype(np.float16)  # [m, k]
    B = rng.standard_normal((16, n)).astype(np.float16)  # [k, n]
    b0 = 64 * 16 * 2
    da = wgmma_desc.mn_desc_hi(128, 2048) | wgmma_desc.encode(0)
    db = wgmma_desc.mn_desc_hi(atom, 16 * atom) | wgmma_desc.encode(b0)
    buf = np.zeros(b0 + n * 16 * 2, np.uint8)
    for desc, mat, count in ((da, A, 64), (db, B.T, n)):
        addr = wgmma_desc.mn_addresses(desc, np.arange(count))
        buf[addr] = np.ascontiguousarray(mat).view(np.uint8).reshape(count, -1)
    mma, wait = wgmma.wgmma_async("f16", n, 1, 1), wgmma.wgmma_wait(0)
    zeros = (np.float32(0),) * (n // 2)

    def kernel(src, out, da, db):
        sm = cuda.shared.array(0, types.uint8)
        t = cuda.threadIdx.x
        base = wgmma.shared_addr(sm, 0)
        for i in range(t, src.size, 128):
            sm[i] = src[i]
        wgmma.fence_proxy_async()
        cuda.syncthreads()
        acc = wgmma.wgmma_fence(zeros)
        acc = mma(np.uint64(da + (base >> 4)), np.uint64(db + (base >> 4)), 1, acc)
        wgmma.wgmma_commit()
        acc = wait(acc)
        w, g, q = t // 32, (t % 32) // 4, t % 4
        for j in range(n // 8):
            for h in range(2):
                for u in range(2):
                    out[16 * w + g + 8 * h, 8 * j + 2 * q + u] = acc[4 * j + 2 * h + u]
    out = cuda.to_device(np.full((64, n), np.nan, np.float32))
    runtime.jit(kernel)[1, 128, 0, buf.size](cuda.to_device(buf), out, np.uint64(da), np.uint64(db))
    want = A.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_allclose(out.copy_to_host(), want, rtol=1e-5, atol=1e-5)
