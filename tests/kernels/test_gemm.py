"""The tiled GEMM kernel family (convlab.kernels.simt.gemm): transposes, accumulate, batching, batch-reduce,
k-splits, bias, ragged edges, argument checking. Float64 numpy products are the reference."""
import math

import numpy as np
import pytest

from convlab import runtime
from convlab.kernels.simt.gemm import Strided, Tile, gemm, matmul, pick_tiles, tiles_for

TILES = tiles_for()
from convlab.kernels.simt.gemm_source import kernel_source, make_gemm_kernel
from convlab.kernels.data.splitk import sum_partials

gpu_only = pytest.mark.skipif(runtime.SIMULATOR, reason="needs a real CUDA GPU")


def _rand(rng, shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


def _tol(k, dtype):
    return np.finfo(dtype).eps * (8 * math.sqrt(max(k, 1)) + 16)


def _err(got, want):
    return np.linalg.norm(got - want) / np.linalg.norm(want)


@pytest.mark.parametrize("tile", TILES, ids=lambda t: t.name)
@pytest.mark.parametrize("trans_a,trans_b", [(False, False), (True, False), (False, True), (True, True)])
def test_transposes_and_ragged_edges(tile, trans_a, trans_b):
    rng = np.random.default_rng(1)
    m, n, k = tile.bm + 3, tile.bn + 5, 2 * tile.bk + 3  # no dimension a multiple of the tile
    a = _rand(rng, (k, m) if trans_a else (m, k))
    b = _rand(rng, (n, k) if trans_b else (k, n))
    out = runtime.full((m, n), np.nan, "float32")
    matmul(runtime.to_device(a), runtime.to_device(b), out, trans_a=trans_a, trans_b=trans_b, tile=tile)
    want = (a.T if trans_a else a).astype(np.float64) @ (b.T if trans_b else b)
    assert _err(out.copy_to_host(), want) < _tol(k, "float32")


def test_float64_accumulate_and_batched_broadcast():
    rng = np.random.default_rng(2)
    a, b = _rand(rng, (1, 9, 14), "float64"), _rand(rng, (3, 14, 11), "float64")
    c0 = _rand(rng, (3, 9, 11), "float64")
    out = runtime.to_device(c0)
    matmul(runtime.to_device(a), runtime.to_device(b), out, accumulate=True)  # picks a float64 tile
    assert _err(out.copy_to_host(), c0 + a @ b) < _tol(14, "float64")


def test_batch_reduce_split_bias_and_k_splits():
    """The addressing the conv plugins use: z = (outer, inner), r summed, bias per inner index."""
    rng = np.random.default_rng(3)
    outer, inner, nred, m, n, k = 2, 3, 2, 5, 7, 9
    # A: (nred, inner, m, k); B stored transposed: (outer, nred, inner, n, k); C: (outer, inner, m, n)
    a, b = _rand(rng, (nred, inner, m, k)), _rand(rng, (outer, nred, inner, n, k))
    bias = _rand(rng, (inner, m))
    want = np.einsum("rimk,orink->oimn", a.astype(np.float64), b) + bias[None, :, :, None]
    da, db, dbias = runtime.to_device(a), runtime.to_device(b), runtime.to_device(bias)
    sa = Strided(da, k, inner=m * k, red=inner * m * k)
    sb = Strided(db, k, outer=nred * inner * n * k, inner=n * k, red=inner * n * k)
    out = runtime.full((outer, inner, m, n), np.nan, "float32")
    gemm(sa, sb, Strided(out, n, outer=inner * m * n, inner=m * n), m, n, k, trans_b=True,
         batch=outer * inner, split=inner, nred=nred, bias=Strided(dbias, 1, inner=m), tile=TILES[1])
    assert _err(out.copy_to_host(), want) < _tol(nred * k, "float32")
    # the same sum split over 3 k-splits into partials, added in order (bias added afterwards here)
    splits = 3
    part = runtime.full((splits, outer, inner, m, n), np.nan, "float32")
    gemm(sa, sb, Strided(part, n, outer=inner * m * n, inner=m * n, red=outer * inner * m * n), m, n, k,
         trans_b=True, batch=outer * inner, split=inner, nred=nred, ksplit=splits, tile=TILES[0])
    total = runtime.to_device(np.broadcast_to(bias[None, :, :, None], want.shape).copy())
    sum_partials(part, total, splits, accumulate=True)
    assert _err(total.copy_to_host(), want) < _tol(nred * k, "float32")


def test_empty_reduction_writes_zeros_plus_bias():
    rng = np.random.default_rng(4)
    bias = _rand(rng, (6,))
    out = runtime.full((6, 5), np.nan, "float32")
    empty = runtime.to_device(np.zeros(0, np.float32))
    gemm(Strided(empty, 0), Strided(empty, 5), Strided(out, 5), 6, 5, 0,
         bias=Strided(runtime.to_device(bias), 1), tile=TILES[1])
    np.testing.assert_array_equal(out.copy_to_host(), np.repeat(bias[:, None], 5, axis=1))


def test_bad_arguments_raise_before_launch():
    a = runtime.to_device(np.zeros((4, 3), np.float32))
    b = runtime.to_device(np.zeros((3, 5), np.float32))
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul(a, runtime.to_device(np.zeros((4, 5), np.float32)))
    with pytest.raises(ValueError, match="b reaches element 17"):  # b (3 x 5) is not 3 x 6
        gemm(Strided(a, 3), Strided(b, 6), Strided(runtime.empty((24,), "float32"), 6), 4, 6, 3)
    with pytest.raises(TypeError, match="dtype"):
        matmul(a, runtime.to_device(np.zeros((3, 5), np.float64)))
    with pytest.raises(ValueError, match="accumulate"):
        matmul(a, b, accumulate=True)
    with pytest.raises(ValueError, match="ksplit"):
        gemm(Strided(a, 3), Strided(b, 5), Strided(runtime.empty((40,), "float32"), 5, red=20), 4, 5,
             3, ksplit=2, accumulate=True)
    with pytest.raises(ValueError, match="tm and tn"):
        Tile(16, 16, 8, 3, 2).validate()
    with pytest.raises(ValueError, match="shared memory"):
        Tile(256, 256, 32, 8, 8).validate(8)


def test_pick_tiles_orders_presets_and_source_is_unrolled():
    tiles = pick_tiles(16, 100_000, 144)
    assert sorted(tiles) == sorted(TILES)
    from convlab.runtime.targets import get
    on_gpu = pick_tiles(16, 100_000, 144, target=get("sm_90"))  # the GPU's presets, ordered on the CPU
    assert sorted(on_gpu) == sorted(tiles_for(get("sm_90"))) and on_gpu[0].bm <= 32  # not a 128-row tile
    src = kernel_source("float32", TILES[0], False, True)
    assert "for " not in src and "c0_0 += a0 * b0" in src  # scalars, no loops over the accumulator


@gpu_only
def test_gpu_kernel_has_no_local_memory_and_4096_block_is_right():
    tile = Tile(128, 128, 8, 8, 8)
    kernel = make_gemm_kernel("float32", tile, False, False)
    rng = np.random.default_rng(5)
    a, b = _rand(rng, (256, 264)), _rand(rng, (264, 256))
    out = matmul(runtime.to_device(a), runtime.to_device(b), tile=tile)
    assert _err(out.copy_to_host(), a.astype(np.float64) @ b) < _tol(264, "float32")
    local, regs = kernel.get_local_mem_per_thread(), kernel.get_regs_per_thread()
    assert set(local.values()) == {0} and max(regs.values()) <= 128  # {signature: value}
