"""Every layout change of convlab: one tiled transpose through shared memory, coalesced on both sides.

    dst[b, j, i] = src[b, i, j']   (i < ci, else 0)   over [B, ci, hw] -> [B, hw, cp], cp >= ci

    NCHW -> NHWC (an input of the tensor-core plugin):   B = N, ci = C, hw = H*W, cp = C padded
    KCRS -> KRSC (the forward filter):                   B = K, ci = C, hw = R*S
    KCRS -> flipped CRSK (dgrad's filter):               B = 1, ci = K, hw = C*R*S, flip = R*S
    NHWC -> NCHW and back (convlab.kernels.data.layouts):             [A, C*D, B] <-> [A, B, C*D]

j' = j, or with ``flip`` > 1 the index j with its position inside each run of ``flip`` reversed:
(j // flip) * flip + flip - 1 - j % flip (dgrad's spatially flipped filter).

Two kernels, one loop nest (a third for short rows):

    for each tile (b, i0, j0):                       # grid (hw / T, cp / T, B)
        buf[i - i0, j - j0] = src[b, i, j']         # rows of src: coalesced reads along j
        sync
        dst[b, j, i] = buf[i - i0, j - j0]          # rows of dst: coalesced writes along i

- ``_transpose_kernel``: one element per thread and step, any element type (T x T tile, ``rows``
  thread rows).
- ``_pairs_kernel`` (16-bit types, even hw and cp, 4-byte aligned, no flip): the same nest on uint32
  pairs, two halves per load and per store (a 16-bit copy is limited by instructions, not bytes: on the
  H200 the element kernel moved fp16 at half its fp32 bandwidth).
- ``_rows_kernel`` (hw < ROWS_BELOW, no flip: a filter's R*S, which would fill 9 of a tile's 32
  columns): no tile; thread (b, i) reads its hw contiguous elements and writes them hw times, each
  store coalesced across consecutive i.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from convlab import runtime
from convlab.kernels.arch.intrinsics import u32 as U
from convlab.runtime import cuda

#: (tile edge, thread rows) of the element kernel; on the H200 (32, 4) beat (32, 8), (32, 16),
#: (64, 4 / 8) and (16, 16) on every copy measured or tied (results/transpose/h200/c5da6f0, whose README
#: names the command)
TILE_GPU, TILE_SIM = (32, 4), (8, 4)
#: (tile edge in elements, thread rows) of the pairs kernel (tile / 2 threads across): on the H200 a
#: 32-wide tile where the copy has at most 32 (padded) channels, a 64-wide one for more (each the
#: fastest or within 6% of it on every copy of results/transpose/h200/c911f71)
PAIRS_NARROW_GPU, PAIRS_GPU, PAIRS_SIM = (32, 8), (64, 4), (8, 4)
ROWS_BELOW = 16  # spatial sizes below it take the rows kernel (a 3x3 filter's 9; on the simulator too)
#: threads a block of the rows kernel (on the simulator, a few: each is a Python thread)
ROWS_THREADS_GPU, ROWS_THREADS_SIM = 256, 32


@functools.cache
def _rows_kernel(dtype: str) -> Callable:
    """The rows kernel (module doc) for one element type (16-bit types as uint16 bits)."""
    zero = np.dtype(dtype).type(0)

    def transpose_rows(src, dst, batch, ci, hw, cp):
        t = U(U(U(cuda.blockIdx.x) * U(cuda.blockDim.x)) + U(cuda.threadIdx.x))
        if t >= U(batch * cp):
            return
        b = U(t // cp)
        i = U(t - U(b * cp))
        src0 = U(U(U(b * ci) + i) * hw)
        dst0 = U(U(U(b * hw) * cp) + i)
        j = U(0)
        while j < hw:
            dst[U(dst0 + U(j * cp))] = src[U(src0 + j)] if i < ci else zero
            j = U(j + 1)

    return runtime.jit(transpose_rows)


@functools.cache
def _transpose_kernel(dtype: str, tile: int, rows: int) -> Callable:
    """The element kernel (module doc) for one element type and tile."""
    stype, shape = np.dtype(dtype), (tile, tile + 1)  # +1: column reads hit distinct banks

    def transpose(src, dst, ci, hw, cp, flip):  # uint32 index math (launcher: sizes < 2**32)
        buf = cuda.shared.array(shape, stype)
        b = U(cuda.blockIdx.z)
        j0 = U(U(cuda.blockIdx.x) * tile)
        i0 = U(U(cuda.blockIdx.y) * tile)
        tx, ty = U(cuda.threadIdx.x), U(cuda.threadIdx.y)
        j = U(j0 + tx)
        js = j if flip <= 1 else U(U(U(j - U(j % flip)) + U(flip - 1)) - U(j % flip))
        src0 = U(U(b * ci) * hw)
        for e in range(0, tile, rows):
            i = U(U(i0 + ty) + e)
            buf[ty + e, tx] = src[U(src0 + U(U(i * hw) + js))] if i < ci and j < hw else 0
        cuda.syncthreads()
        dst0 = U(U(b * hw) * cp)
        for e in range(0, tile, rows):
            jj, i = U(U(j0 + ty) + e), U(i0 + tx)
            if jj < hw and i < cp:
                dst[U(dst0 + U(U(jj * cp) + i))] = buf[tx, ty + e]

    return runtime.jit(transpose)


@functools.cache
def _pairs_kernel(tile: int, rows: int) -> Callable:
    """The pairs kernel (module doc): src32 / dst32 are the uint32 views of 16-bit [B, ci, hw] and
    [B, hw, cp] (hw, cp even); thread tx moves elements 2tx, 2tx + 1 of a tile row."""
    shape = (tile, tile + 1)  # rows of an odd number of halves: the column reads hit distinct banks

    def transpose_pairs(src32, dst32, ci, hw, cp):
        buf = cuda.shared.array(shape, np.uint16)
        b = U(cuda.blockIdx.z)
        j0 = U(U(cuda.blockIdx.x) * tile)
        i0 = U(U(cuda.blockIdx.y) * tile)
        tx, ty = U(cuda.threadIdx.x), U(cuda.threadIdx.y)
        j = U(j0 + U(2 * tx))
        src0 = U(U(U(b * ci) * hw) // 2)
        for e in range(0, tile, rows):
            i = U(U(i0 + ty) + e)
            v = src32[U(src0 + U(U(U(i * hw) + j) // 2))] if i < ci and j < hw else U(0)
            buf[ty + e, 2 * tx] = U(v & 0xFFFF)
            buf[ty + e, 2 * tx + 1] = U(v >> 16)
        cuda.syncthreads()
        dst0 = U(U(U(b * hw) * cp) // 2)
        i = U(i0 + U(2 * tx))
        for e in range(0, tile, rows):
            jj = U(U(j0 + ty) + e)
            if jj < hw and i < cp:
                lo, hi = U(buf[2 * tx, ty + e]), U(buf[2 * tx + 1, ty + e])
                dst32[U(dst0 + U(U(U(jj * cp) + i) // 2))] = U(lo | U(hi << 16))

    return runtime.jit(transpose_pairs)


def _as_pairs(arr: Any) -> Any:
    """The uint32 view of a flat 16-bit device array (even size, 4-byte aligned), or None."""
    if np.dtype(arr.dtype).itemsize != 2 or arr.size % 2 or not runtime.is_aligned(arr, 4):
        return None
    return arr.view(np.uint32)


def to_channels_last(src: Any, dst: Any, batch: int, channels: int, spatial: int, padded: int,
                     flip: int = 0) -> None:
    """dst [batch, spatial, padded] (flat) <- src [batch, channels, spatial] (flat), channels >= the
    source's zero-filled; ``flip`` > 1 reverses the spatial index inside each run of ``flip`` (module
    doc). Any element type (bf16 as uint16); 16-bit copies with even ``spatial`` and ``padded`` and
    4-byte aligned arrays move pairs."""
    if max(batch * channels, batch * padded) * spatial >= 2**32:
        raise ValueError(f"to_channels_last takes fewer than 2**32 elements a side, got batch {batch}, "
                         f"channels {channels} (padded {padded}), spatial {spatial}")
    if flip <= 1 and spatial < ROWS_BELOW:
        if np.dtype(src.dtype).itemsize == 2:
            src, dst = src.view(np.uint16), dst.view(np.uint16)
        threads = ROWS_THREADS_SIM if runtime.target().simulator else ROWS_THREADS_GPU
        blocks = (batch * padded + threads - 1) // threads
        _rows_kernel(np.dtype(src.dtype).name)[max(blocks, 1), threads](
            src, dst, U(batch), U(channels), U(spatial), U(padded))
        return
    pairs = flip <= 1 and spatial % 2 == 0 and padded % 2 == 0
    src32, dst32 = (_as_pairs(src), _as_pairs(dst)) if pairs else (None, None)
    sim = runtime.target().simulator
    if src32 is None or dst32 is None:
        tile, rows = TILE_SIM if sim else TILE_GPU
    else:
        tile, rows = PAIRS_SIM if sim else PAIRS_NARROW_GPU if padded <= 32 else PAIRS_GPU
    grid = ((spatial + tile - 1) // tile, (padded + tile - 1) // tile, batch)
    if grid[1] > 65535 or grid[2] > 65535:
        raise ValueError(f"to_channels_last takes at most {65535 * tile} channels and 65535 batches (the "
                         f"grid's y and z limits), got batch {batch}, padded channels {padded}")
    if src32 is not None and dst32 is not None:
        _pairs_kernel(tile, rows)[grid, (tile // 2, rows)](src32, dst32, U(channels), U(spatial), U(padded))
        return
    _transpose_kernel(np.dtype(src.dtype).name, tile, rows)[grid, (tile, rows)](
        src, dst, U(channels), U(spatial), U(padded), U(flip))
