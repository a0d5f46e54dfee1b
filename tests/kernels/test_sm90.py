"""The Hopper intrinsics (convlab.kernels.arch.sm90) against the PTX ISA's semantics: mbarrier phases and
transaction counts, named barriers, tensor copies in tile and im2col mode (the im2col walk checked on
the worked examples of Triton's TMA im2col tutorial, independently of the reference in tensormap), and
the stand-ins' refusals of what a GPU would get wrong silently. One or two warps per launch."""
import numpy as np
import pytest

from convlab import runtime
from convlab.kernels.arch import sm90, sm90_sim, tensormap, wgmma
from convlab.kernels.hopper import probes
from convlab.runtime import cuda
from numba import types

u8, u32 = types.uint8, types.uint32

sim_only = pytest.mark.skipif(not runtime.SIMULATOR, reason="the stand-ins' own checks (simulator)")
hopper = pytest.mark.skipif(not runtime.SIMULATOR and runtime.compute_capability() < (9, 0),
                            reason="the copy engine and mbarriers need sm_90")
U, I = np.uint32, np.int32
SMEM = 8192
BAR = SMEM - 64  # the launches' mbarriers at the end of dynamic shared memory


def _launch(kernel, threads, *args):
    runtime.jit(kernel)[1, threads, 0, SMEM](*args)


def _maps(*records_and_tensors):
    return cuda.to_device(np.concatenate([tensormap.encode(r, t) for r, t in records_and_tensors]))


@sim_only
def test_mbarrier_phase_completes_on_arrivals_and_transaction_bytes():
    """count 2 plus 48 expected bytes: the phase completes after both arrivals and the bytes; a fresh
    barrier's parity-1 wait returns at once, parity 0 after phase 0, then parity 1 after phase 1."""
    def kernel(out):
        sm = cuda.shared.array(0, u8)
        bar = U(wgmma.shared_addr(sm, 0) + BAR)
        tid = cuda.threadIdx.x
        if tid == 0:
            sm90.mbar_init(bar, 2)
            out[0] = sm90.mbar_try_wait(bar, 1)  # the "preceding" phase: complete
            out[1] = sm90.mbar_try_wait(bar, 0)
            sm90.mbar_arrive_tx(bar, 48)
            out[2] = sm90.mbar_try_wait(bar, 0)  # one arrival and 48 bytes still pending
        cuda.syncthreads()
        if tid == 32:
            sm90.mbar_arrive(bar)
            out[3] = sm90.mbar_try_wait(bar, 0)  # arrivals done, bytes pending
        cuda.syncthreads()
        if tid == 0:
            sm90_sim._complete_tx(sm90_sim._here()[0], bar, 48)  # what a 48-byte copy does
        cuda.syncthreads()
        if tid == 33:
            sm90.mbar_wait(bar, 0)
            out[4] = sm90.mbar_try_wait(bar, 1)  # phase 1 pending
            sm90.mbar_arrive(bar)
            sm90.mbar_arrive(bar)
            sm90.mbar_wait(bar, 1)
            out[5] = 1
    out = cuda.to_device(np.full(6, 7, np.uint32))
    _launch(kernel, 64, out)
    assert out.copy_to_host().tolist() == [1, 0, 0, 0, 0, 1]


@sim_only
def test_a_wait_for_a_phase_that_never_completes_is_reported(monkeypatch):
    monkeypatch.setattr(sm90_sim, "WAIT_LIMIT", 0.3)

    def kernel(out):
        sm = cuda.shared.array(0, u8)
        bar = U(wgmma.shared_addr(sm, 0) + BAR)
        if cuda.threadIdx.x == 0:
            sm90.mbar_init(bar, 1)
            sm90.mbar_wait(bar, 0)
    with pytest.raises(RuntimeError, match="deadlock"):
        _launch(kernel, 32, cuda.to_device(np.zeros(1)))


@hopper
def test_named_barrier_orders_two_warps():
    sync = sm90.named_sync(3, 64)

    def kernel(out):
        sm = cuda.shared.array(0, u32)
        tid = cuda.threadIdx.x
        sm[tid] = tid * 3
        sync()
        out[tid] = sm[63 - tid]
    out = cuda.to_device(np.zeros(64, np.uint32))
    _launch(kernel, 64, out)
    np.testing.assert_array_equal(out.copy_to_host(), 3 * np.arange(63, -1, -1))
    with pytest.raises(ValueError):
        sm90.named_sync(0, 64)


@hopper
@pytest.mark.parametrize("swizzle,coords", [(0, (-3, 1, 2)), (32, (4, -1, 0)), (64, (8, 2, 1)),
                                            (128, (0, 3, -1))])
def test_tile_load_and_store_move_the_box_with_zeros_outside(swizzle, coords):
    """A (C=40, W=5, N=3) fp16 tensor, box (inner = the swizzle span, 3, 2): the shared bytes, read through
    the swizzle, are the tensor's box with zeros outside; the store writes the box back where it lies in
    the tensor and nothing outside (probes.tile_roundtrip)."""
    rng = np.random.default_rng(1)
    ten = rng.standard_normal((3, 5, 40)).astype(np.float16)  # N, W, C: dims (40, 5, 3)
    inner = (swizzle or 16) // 2
    box = (inner, 3, 2)
    got, stored = probes.tile_roundtrip(ten, box, swizzle, coords)
    want = np.zeros(box[::-1], np.float16)
    written = np.zeros_like(ten)
    for n in range(2):
        for w in range(3):
            for c in range(inner):
                i = (coords[2] + n, coords[1] + w, coords[0] + c)
                if all(0 <= v < s for v, s in zip(i, ten.shape)):
                    want[n, w, c] = ten[i]
                    written[i] = ten[i]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(stored, written)


def _im2col(inp: np.ndarray, lower, upper, coords, offsets) -> np.ndarray:
    """One 16-pixel, 32-channel im2col copy of a (N, 4, 4, 32) float32 NHWC tensor; returns channel 0 of
    each pixel (what Triton's tutorial prints). ``coords`` (n, h, w, c) and corners (h, w) in the
    tutorial's order."""
    b, h, w, c = coords
    return probes.im2col_load(inp, lower[::-1], upper[::-1], (c, w, h, b), offsets[::-1], 16, 32)


@hopper
def test_im2col_walk_matches_the_tutorials_worked_examples():
    """Triton's ``13-tma-im2col`` tutorial (checked there on a GPU): a (1 or 2, 4, 4, 32) tensor of
    pixel numbers 1.., 16 pixels per copy; padded corners, filter offsets, and the walk into the next
    image."""
    one = np.repeat(np.arange(1, 17, dtype=np.float32)[:, None], 32, 1).reshape(1, 4, 4, 32)
    two = np.repeat(np.arange(1, 33, dtype=np.float32)[:, None], 32, 1).reshape(2, 4, 4, 32)
    assert _im2col(one, (0, 0), (0, 0), (0, 0, 0, 0), (0, 0))[:, 0].tolist() == list(range(1, 17))
    assert _im2col(one, (-1, -1), (-1, -1), (0, -1, -1, 0), (0, 0))[:, 0].tolist() == \
        [0, 0, 0, 0, 0, 1, 2, 3, 0, 5, 6, 7, 0, 9, 10, 11]
    assert _im2col(one, (-1, -1), (-1, -1), (0, -1, -1, 0), (1, 1))[:, 0].tolist() == list(range(1, 17))
    assert _im2col(two, (0, 0), (0, 0), (0, 1, 3, 0), (0, 0))[:, 0].tolist() == list(range(8, 24))
    got = _im2col(two, (-1, -1), (-1, -1), (0, 1, 2, 0), (0, 0))
    assert got[:, 0].tolist() == [7, 0, 9, 10, 11, 0, 0, 0, 0, 0, 17, 18, 19, 0, 21, 22]
    assert np.array_equal(got[:, 31], got[:, 0])  # every channel of a pixel


@sim_only
def test_copies_refuse_what_a_gpu_would_get_wrong():
    ten = cuda.to_device(np.zeros(64, np.float32))
    rec = tensormap.TiledMap("float32", (64,), (), (32,), 128, 0)
    maps = _maps((rec, ten))
    load = sm90.tma_load(1)

    def kernel(maps, dst, bar_at, fence):
        sm = cuda.shared.array(0, u8)
        base = wgmma.shared_addr(sm, 0)
        bar = U(base + bar_at)
        if cuda.threadIdx.x == 0:
            sm90.mbar_init(bar, 1)
            if fence:
                sm90.tensormap_acquire(maps, 0)
            load(maps, 0, U(base + dst), bar, I(0))
    with pytest.raises(RuntimeError, match="tensormap_acquire"):
        _launch(kernel, 32, maps, U(0), U(BAR), False)
    with pytest.raises(ValueError, match="1024 bytes"):
        _launch(kernel, 32, maps, U(128), U(BAR), True)
    with pytest.raises(RuntimeError, match="overwrites the mbarrier"):
        _launch(kernel, 32, maps, U(0), U(64), True)
