"""Launchers of the tiled GEMM kernel family (:mod:`convlab.kernels.simt.gemm_source`), shared by the plugins.

    C[M, N] (+)= opA[M, K] @ opB[K, N] (+ bias[M])    opX = X or X^T, fp32 or fp64 throughout

:func:`gemm` is the general form: each operand is a :class:`Strided` family of matrices inside a flat
device array, addressed per batch index z (grid z) and per batch-reduce index r (summed into the same
output, e.g. over the images of a sub-batch). :func:`matmul` covers plain 2-D and batched 3-D arrays.
:func:`pick_tiles` orders the tile presets for a GEMM shape (tiny tiles on the simulator).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from convlab import runtime

from convlab.kernels.simt.gemm_source import make_gemm_kernel
from convlab.kernels.arch.intrinsics import u32
from convlab.kernels.data.splitk import flat, sm_count
from convlab.kernels.simt.tile import MAX_SHARED, Tile

__all__ = ["Tile", "Strided", "gemm", "matmul", "pick_tiles", "tiles_for", "GPU_TILES", "SIM_TILES"]

#: Tile presets for the GPU, largest first (on ties, pick_tiles keeps this order).
GPU_TILES = (Tile(128, 128, 8, 8, 8), Tile(128, 128, 16, 8, 8), Tile(128, 64, 8, 8, 4),
             Tile(64, 128, 8, 4, 8), Tile(32, 128, 8, 4, 4), Tile(16, 128, 8, 2, 4))
#: Tiny presets for the simulator (32 and 16 threads per block; 2- and 4-wide fragment loads).
SIM_TILES = (Tile(8, 16, 4, 2, 2), Tile(16, 8, 8, 4, 2))


def tiles_for(target: Any = None) -> tuple[Tile, ...]:
    """The presets of ``target`` (default: the current one): the simulator's tiny ones, else the GPU's."""
    return SIM_TILES if (runtime.target() if target is None else target).simulator else GPU_TILES

_U32 = 2 ** 32


@dataclass(frozen=True)
class Strided:
    """A family of row-major matrices in a flat device array ``data``, rows ``ld`` elements apart.

    Matrix (z, r) starts at ``offset + (z // split) * outer + (z % split) * inner + r * red``, where
    ``split`` is the :func:`gemm` argument: z = (outer index, inner index), e.g. (image, group). For
    the output C, ``red`` is instead the distance between the partial results of k-splits.
    """

    data: Any
    ld: int
    offset: int = 0
    outer: int = 0
    inner: int = 0
    red: int = 0


def _last_index(x: Strided, rows: int, cols: int, batch: int, split: int, nred: int) -> int:
    return (x.offset + (batch - 1) // split * x.outer + (min(batch, split) - 1) * x.inner
            + (nred - 1) * x.red + (rows - 1) * x.ld + cols - 1)


def _check_operand(x: Strided, name: str, rows: int, cols: int, batch: int, split: int,
                   nred: int) -> Any:
    """The operand's flat array, after checking that every matrix lies inside it (32-bit indexable)."""
    if not isinstance(x, Strided):
        raise TypeError(f"{name} must be a Strided, got {type(x).__name__}")
    for field in ("ld", "offset", "outer", "inner", "red"):
        value = getattr(x, field)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{name}.{field} must be a non-negative int, got {value!r}")
    if rows > 1 and x.ld < cols:
        raise ValueError(f"{name}.ld={x.ld} is shorter than its rows ({cols} elements)")
    data = flat(x.data, f"{name}.data")
    last = _last_index(x, rows, cols, batch, split, nred)
    if last >= data.size:
        raise ValueError(f"{name} reaches element {last} but {name}.data has {data.size}")
    if last >= _U32:
        raise ValueError(f"{name} reaches element {last}, beyond 32-bit indexing")
    return data


def gemm(a: Strided, b: Strided, c: Strided, m: int, n: int, k: int, *, trans_a: bool = False,
         trans_b: bool = False, accumulate: bool = False, batch: int = 1, split: int = 1,
         nred: int = 1, bias: Strided | None = None, tile: Tile | None = None,
         ksplit: int = 1) -> None:
    """For z < batch: C(z) = sum_{r < nred} opA(z, r) @ opB(z, r) (+ bias) (+ C(z) if ``accumulate``).

    opA(z, r) is M x K (stored K x M when ``trans_a``), opB(z, r) is K x N (stored N x K when
    ``trans_b``), C(z) is M x N; matrices are addressed as in :class:`Strided`. ``bias`` adds
    ``bias.data[bias.offset + (z % split) * bias.inner + i]`` to row i. ``ksplit`` > 1 splits the
    r-and-k reduction over that many blocks, split s writing its partial C(z) at ``c.red * s`` further
    (no bias or accumulate then; add the partials with
    :func:`convlab.kernels.data.splitk.sum_partials`). Launches on the default
    stream; does not synchronise.
    """
    for name, value in (("m", m), ("n", n), ("k", k), ("batch", batch), ("split", split),
                        ("nred", nred), ("ksplit", ksplit)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    if split < 1 or ksplit < 1:
        raise ValueError(f"split and ksplit must be >= 1, got {split} and {ksplit}")
    if ksplit > 1 and (bias is not None or accumulate):
        raise ValueError("ksplit > 1 writes partial results: bias and accumulate are not allowed")
    if m == 0 or n == 0 or batch == 0:
        return
    if batch * ksplit > 65535:
        raise ValueError(f"batch * ksplit = {batch * ksplit} exceeds the grid's z limit of 65535")
    for name, x in (("a", a), ("b", b), ("c", c)):
        if not isinstance(x, Strided):
            raise TypeError(f"{name} must be a Strided, got {type(x).__name__}")
    rows_a, cols_a = (k, m) if trans_a else (m, k)
    rows_b, cols_b = (n, k) if trans_b else (k, n)
    if k > 0 and nred > 0:
        da = _check_operand(a, "a", rows_a, cols_a, batch, split, nred)
        db = _check_operand(b, "b", rows_b, cols_b, batch, split, nred)
    else:  # nothing is read
        da, db = flat(a.data, "a.data"), flat(b.data, "b.data")
    dc = _check_operand(c, "c", m, n, batch, split, ksplit)
    dtypes = {np.dtype(x.dtype) for x in (da, db, dc)}
    if len(dtypes) != 1 or next(iter(dtypes)) not in (np.float32, np.float64):
        raise TypeError(f"a, b and c must share one dtype, float32 or float64; "
                        f"got {sorted(map(str, dtypes))}")
    dtype = str(next(iter(dtypes)))
    tile = pick_tiles(m, n, k, batch, dtype)[0] if tile is None else Tile(*tile)
    if bias is not None:
        dbias = _check_operand(bias, "bias", 1, m, batch, split, 1)
        if dbias.dtype != dc.dtype:
            raise TypeError(f"bias has dtype {dbias.dtype}, c has {dc.dtype}")
    else:
        bias, dbias = Strided(None, 0), dc  # never read (has_bias = 0): no allocation
    blocks_y = math.ceil(m / tile.bm)
    if blocks_y > 65535:
        raise ValueError(f"m={m} needs {blocks_y} row tiles, over the grid's y limit of 65535")
    kernel = make_gemm_kernel(dtype, tile, bool(trans_a), bool(trans_b))
    tiles = math.ceil(k / tile.bk) * nred
    u = u32
    grid = (math.ceil(n / tile.bn), blocks_y, batch * ksplit)
    kernel[grid, tile.threads](
        da, db, dc, dbias, u(m), u(n), u(k), u(a.ld), u(b.ld), u(c.ld),
        u(a.offset), u(a.outer), u(a.inner), u(a.red), u(b.offset), u(b.outer), u(b.inner), u(b.red),
        u(c.offset), u(c.outer), u(c.inner), u(c.red), u(batch), u(split), u(nred),
        u(math.ceil(tiles / ksplit)), u(bias.offset), u(bias.inner), u(bias.data is not None),
        u(bool(accumulate)))


def matmul(a: Any, b: Any, out: Any = None, *, trans_a: bool = False, trans_b: bool = False,
           accumulate: bool = False, tile: Tile | None = None) -> Any:
    """out = opA(a) @ opB(b) (+ out if ``accumulate``) for C-contiguous device arrays.

    2-D: a (M, K) or (K, M) if ``trans_a``; b (K, N) or (N, K) if ``trans_b``; out (M, N).
    3-D: the same with a leading batch dimension on all three (a batch of 1 broadcasts).
    Returns ``out`` (allocated when None; ``accumulate`` then needs ``out``).
    """
    da, db = runtime.as_device_array(a), runtime.as_device_array(b)
    if da.ndim != db.ndim or da.ndim not in (2, 3):
        raise ValueError(f"a and b must both be 2-D or both 3-D, got shapes {da.shape} and {db.shape}")
    batched = da.ndim == 3
    sa = da.shape if batched else (1,) + tuple(da.shape)
    sb = db.shape if batched else (1,) + tuple(db.shape)
    m, ka = (sa[2], sa[1]) if trans_a else (sa[1], sa[2])
    kb, n = (sb[2], sb[1]) if trans_b else (sb[1], sb[2])
    if ka != kb:
        raise ValueError(f"inner dimensions differ: a gives K={ka}, b gives K={kb}")
    batch = max(sa[0], sb[0])
    for name, size in (("a", sa[0]), ("b", sb[0])):
        if size not in (1, batch):
            raise ValueError(f"batch size of {name} ({size}) must be 1 or {batch}")
    shape = (batch, m, n) if batched else (m, n)
    if out is None:
        if accumulate:
            raise ValueError("accumulate=True needs an out array to accumulate into")
        out = runtime.empty(shape, np.dtype(da.dtype))
    dout = runtime.as_device_array(out)
    if tuple(dout.shape) != shape:
        raise ValueError(f"out must have shape {shape}, got {tuple(dout.shape)}")
    gemm(Strided(da, sa[2], outer=0 if sa[0] == 1 else sa[1] * sa[2]),
         Strided(db, sb[2], outer=0 if sb[0] == 1 else sb[1] * sb[2]),
         Strided(dout, n, outer=m * n), m, n, ka, trans_a=trans_a, trans_b=trans_b,
         accumulate=accumulate, batch=batch, tile=tile)
    return out


def _intensity(tile: Tile) -> float:
    """FMAs per shared-memory element loaded by a thread: a proxy for the tile's peak speed."""
    return tile.tm * tile.tn / (tile.tm + tile.tn)


def pick_tiles(m: int, n: int, k: int, batch: int = 1, dtype: str = "float32",
               target: Any = None) -> list[Tile]:
    """Tile presets of ``target`` (default: the current one) ordered by an estimated time for this
    GEMM shape (padding waste, register-tile intensity, and how many blocks there are to fill the
    GPU); all presets valid for ``dtype``."""
    target = runtime.target() if target is None else target
    itemsize = np.dtype(dtype).itemsize
    scored = []
    for tile in tiles_for(target):
        if tile.shared_bytes(itemsize) > MAX_SHARED or (itemsize == 8 and tile.tm * tile.tn > 32
                                                         and not target.simulator):
            continue  # fp64 8x8 thread tiles need ~240 registers
        blocks = math.ceil(m / tile.bm) * math.ceil(n / tile.bn) * max(batch, 1)
        padded = math.ceil(m / tile.bm) * tile.bm * math.ceil(n / tile.bn) * tile.bn
        fill = min(1.0, blocks / (2 * sm_count(target)))  # resident 256-thread blocks
        scored.append((padded / (_intensity(tile) * fill), tile))
    return [t for _, t in sorted(scored, key=lambda st: st[0])]
