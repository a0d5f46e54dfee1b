"""MN-major wgmma operands (imm-trans, f16 / bf16): the descriptor layout is the copy engine's box of
MN-contiguous rows (wgmma_desc.mn_addresses against tensormap's swizzled box bytes), and one wgmma of
such operands gives the product (probes.mn_major_mma: the stand-in on the simulator, the GPU's on sm_90a)."""
import numpy as np
import pytest
from convlab import runtime
from convlab.kernels.arch import tensormap, wgmma_desc
from convlab.kernels.hopper import probes


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


@pytest.mark.skipif(not runtime.SIMULATOR and runtime.compute_capability() < (9, 0), reason="wgmma needs sm_90a")
@pytest.mark.parametrize("n,atom", [(16, 32), (32, 64), (128, 128)])
def test_mn_major_operands_multiply_as_the_isa_says(n, atom):
    rng = np.random.default_rng(n)
    A = rng.standard_normal((64, 16)).astype(np.float16)  # [m, k]
    B = rng.standard_normal((16, n)).astype(np.float16)  # [k, n]
    want = A.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_allclose(probes.mn_major_mma(A, B, atom), want, rtol=1e-5, atol=1e-5)
