"""What only the implicit-GEMM kernels share (``forward``: forward and backward-data, ``wgrad``:
backward-weight): the family's tile rules, the unrolled slice of FMAs, the epilogue with its in-kernel
split-K reduction, and the split-K plan (its workspace is lent by ``launches.workspace``).

The block tile (geometry, thread fragments, shared layout) is :class:`convlab.kernels.simt.tile.Tile`; this
family also needs every size a power of two, bk % 8 == 0 and 32..512 threads in whole warps, and lays
its warps out as LM x (32 / LM) threads (m x n; LM chosen per kernel with ``Tile.lanes_m``).

Split-K (planned by :func:`convlab.kernels.data.splitk.split_plan`) cuts the reduction into ``splits`` chunks
of ``chunk`` (a multiple of BK); each chunk writes its partial output tile to a workspace slice, and the
block finishing a tile last (an atomic counter per tile) sums that tile's slices in the fixed order
z = 0, 1, ... (``store_tile``): the order of :func:`convlab.kernels.data.splitk.sum_partials`, in the same
launch, bit-for-bit deterministic.
"""
from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Callable, NamedTuple

import numpy as np
from numba import uint32

from convlab import runtime
from convlab.problem import Problem
from convlab.kernels.arch.intrinsics import load_cg, u32, vector_load
from convlab.kernels.resources import allow_spills
from convlab.kernels.source import Writer, compile_source
from convlab.kernels.data.splitk import split_plan
from convlab.kernels.epilogue import fused_store
from convlab.kernels.simt.tile import PAD, Tile
from convlab.runtime import cuda


def factory(fn: Callable) -> Callable:
    """``fn`` (a kernel factory) cached on its bound arguments with the defaults applied, so that
    ``gather_kernel(.., general)`` and ``gather_kernel(.., general, 2)`` return the same kernel."""
    signature = inspect.signature(fn)
    made: dict[tuple, Any] = {}

    @functools.wraps(fn)
    def cached(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key = tuple(bound.arguments.values())
        if key not in made:
            made[key] = fn(*args, **kwargs)
        return made[key]
    cached.cache_clear = made.clear  # type: ignore[attr-defined]
    return cached


def validate(tile: Tile) -> Tile:
    """The family's rules on fp32 tiles (ValueError naming the broken rule); loaders add their own."""
    return Tile(*tile).validate(4, power_of_two=True, bk_multiple=8, warp_multiple=True, max_threads=512)


class Layout(NamedTuple):
    """Compile-time sizes of one kernel: padded shared rows (lda, ldb), the stride between fragment
    groups of 4 (span_m, span_n), the double-buffered shared arrays (a_size, b_size) and the threads
    of a warp along m (lanes_m)."""

    lda: int
    ldb: int
    span_m: int
    span_n: int
    a_size: int
    b_size: int
    lanes_m: int


def layout(tile: Tile, prefer: tuple[int, ...]) -> Layout:
    """The Layout of ``tile``, its warps laid out with the first of ``prefer`` that fits."""
    lda, ldb = tile.bm + PAD, tile.bn + PAD
    return Layout(lda, ldb, tile.gm * tile.nt_m, tile.gn * tile.nt_n, 2 * tile.bk * lda, 2 * tile.bk * ldb,
                  tile.lanes_m(prefer))


def plan(problem: Problem, tile: Tile, workspace_limit: int,
         gemm: tuple[int, int, int] | None = None, target: Any = None) -> tuple[int, int, int]:
    """(splits, chunk, n_tiles) of ``problem``'s GEMM (or of ``gemm`` = (M, N, K), one phase of a
    strided dgrad) under this tile and workspace limit on ``target`` (default: the current one); the
    groups' tiles share one launch."""
    m, n, k = problem.gemm_shape() if gemm is None else gemm
    n_tiles = math.ceil(n / tile.bn)
    tiles = math.ceil(m / tile.bm) * n_tiles * problem.groups
    k_pad = -(-k // tile.bk) * tile.bk  # a ragged K planned as whole slices: never more splits than fit
    splits, chunk = split_plan(tiles, k_pad, tile.bk, tile.threads, tiles * tile.bm * tile.bn,
                               workspace_limit, target=target)
    return (1 if splits == 1 else math.ceil(k / chunk)), chunk, n_tiles


def workspace_shape(problem: Problem, tile: Tile, splits: int, n_tiles: int,
                    m: int | None = None) -> tuple[int, int] | None:
    """(partial elements, counters) of the split-K workspace (GEMM rows ``m``, default the
    problem's M; all groups); None when unsplit."""
    m = problem.gemm_shape()[0] if m is None else m
    tiles = math.ceil(m / tile.bm) * n_tiles * problem.groups
    return None if splits == 1 else (splits * tiles * tile.bm * tile.bn, tiles)


@functools.cache
def slice_fma(bk: int, tm: int, tn: int, lda: int, ldb: int, span_m: int, span_n: int):
    """Device function ``slice_fma(As, Bs, oa, ob, acc, fa, fb)``: acc[i*tn + j] += A[kk, row i] *
    B[kk, col j] over one BK slice, the kk loop unrolled in generated source so that every shared offset
    is a literal and each group of 4 fragment values is one 128-bit load (``lds4``).

    Row i of the fragment is As[oa + kk*lda + (i // 4) * span_m + i % 4]; likewise for columns and Bs.
    """
    gm, gn = min(4, tm), min(4, tn)
    w = Writer("def slice_fma(As, Bs, oa, ob, acc, fa, fb):")
    w.indent()
    for kk in range(bk):
        for arr, frag, base, ld, t, g_len, span in (("As", "fa", "oa", lda, tm, gm, span_m),
                                                     ("Bs", "fb", "ob", ldb, tn, gn, span_n)):
            for g in range(t // g_len):
                off = kk * ld + g * span
                if g_len == 4:
                    w(f"t0, t1, t2, t3 = lds4({arr}, {base} + u32({off}))")
                    for v in range(4):
                        w(f"{frag}[{g * 4 + v}] = t{v}")
                else:
                    for v in range(g_len):
                        w(f"{frag}[{g * g_len + v}] = {arr}[{base} + u32({off + v})]")
        w(f"for i in range({tm}):")
        w(f"    for j in range({tn}):")
        w(f"        acc[i * {tn} + j] += fa[i] * fb[j]")
    namespace = compile_source(w.source, f"<slice_fma {bk}x{tm}x{tn} {lda} {ldb} {span_m} {span_n}>",
                               {"lds4": vector_load(4), "u32": u32})
    return runtime.jit(device=True, forceinline=True)(namespace["slice_fma"])


@functools.cache
def zero_fill(size: int):
    """Device function ``zero_fill(arr)`` setting arr[0:size] = 0 with literal indices (a loop of 64
    stores is not unrolled by NVVM, which would move a register accumulator to local memory)."""
    w = Writer("def zero_fill(arr):")
    w.indent()
    for i in range(size):
        w(f"arr[{i}] = f32(0)")
    namespace = compile_source(w.source, f"<zero_fill {size}>", {"f32": np.float32})
    return runtime.jit(device=True, forceinline=True)(namespace["zero_fill"])


@functools.cache
def tile_origin(bm: int, bn: int, general: bool):
    """Device function ``tile_origin(prm, tpg, n_tiles) -> (g, m0, n0)``: the group and the first GEMM
    row and column of this block's output tile. Tiles are numbered along blockIdx.x, ``n_tiles`` per
    row of tiles; the general kernels put the groups' tiles one after another, ``prm[tpg]`` tiles per
    group (g = 0 otherwise; ``tpg``: the position of the parameter tiles_per_group)."""
    uBM, uBN, GENERAL = u32(bm), u32(bn), general

    @runtime.jit(device=True, forceinline=True)
    def tile_origin(prm, tpg, n_tiles):
        bid = uint32(cuda.blockIdx.x)
        ntl = uint32(n_tiles)
        if GENERAL:  # the groups' tiles follow each other along blockIdx.x
            g = bid // uint32(prm[tpg])
            lt = bid - g * uint32(prm[tpg])
        else:
            g = uint32(0)
            lt = bid
        return g, (lt // ntl) * uBM, (lt % ntl) * uBN

    return tile_origin


def register_cap(threads: int) -> int:
    """Registers per thread that keep 2 blocks of 256, 3 of 128 or 4 of 64 threads on one SM."""
    return {256: 128, 128: 168}.get(threads, 255)


#: spill bytes (stores + loads) the register cap costs the 8x8 thread tiles, by block size: ptxas
#: reports up to 292 (256 threads, 128 registers; 128 on sm_90) and 56 (128 threads, 168 registers) for
#: the corpus of results/compile (convlab compile); the cap keeps the occupancy above instead
CAP_SPILLS = {256: 320, 128: 64}


def capped(kernel: Any, threads: int) -> Any:
    """``kernel`` with the spills :func:`register_cap` costs it declared (convlab compile checks them)."""
    spills = CAP_SPILLS.get(threads, 0)
    if not spills:
        return kernel
    return allow_spills(kernel, spills, f"the {register_cap(threads)}-register cap of {threads}-thread blocks "
                                        f"(occupancy over spills to L1-cached local memory)")


class OutMap(NamedTuple):
    """Where a general kernel's NCHW output pixel pq (row pq // ow, column pq % ow) of channel n goes:
    out[img * out_img + n * och + o0 + row * sth + column * stw] (a strided-dgrad phase's pixels; the
    plain layout: o0 = 0, sth = ow, stw = 1, och = ow * oh)."""

    o0: Any
    ow: Any
    sth: Any
    stw: Any
    och: Any


class DepthMap(NamedTuple):
    """The depth axis of a 3D :class:`OutMap`: pixel pq's depth slice dz = pq // plane (its (row, column)
    from pq - dz * plane) lands ``dz * std`` further."""

    plane: Any
    std: Any


@functools.cache
def store_tile(tm: int, tn: int, bm: int, bn: int, span_m: int, span_n: int, threads: int, nchw: bool,
               mapped: bool = False, depth: bool = False, put: Callable | None = None):
    """Device function writing a block's output tile, deterministically when the K loop is split.

    ``store(acc, rows, cols, fb, out, ws, bias, splits, z, tile, local, m0, n0, M, N, ohw, out_img,
    has_bias, flag, omap)``: unsplit, thread element (i, j) goes to out[rows[i] + cols[j]] + fb[j] (NONE marks
    rows/columns outside the problem). Split, partial z of the tile goes tile-major to
    ws[(z * tiles + tile) * bm * bn + local + c(i, j)] (local: the fragment's offset in the tile, c a
    literal); the block that finishes a tile last (an atomic counter per tile after the partials, reset
    to 0 afterwards) sums the tile's partials in the fixed order z = 0, 1, ... with all its threads
    along the tile (coalesced) and writes out (m, n) = out[img * out_img + n * ohw + pq] for NCHW outputs
    (m = img * ohw + pq), out[m * N + n] otherwise, plus bias[n]: the bits never depend on scheduling.
    ``mapped`` (general kernels; ``omap`` an :class:`OutMap` of uint32) writes NCHW pixel pq to
    out[img * out_img + n * och + o0 + (pq // ow) * sth + (pq % ow) * stw] instead: the output pixels
    of one phase of a strided dgrad, or with o0 = 0, sth = ow, stw = 1, och = ohw the plain layout;
    ``depth`` (3D; ``dmap`` a :class:`DepthMap`) splits the depth slice off pq first. ``put`` (a fused
    epilogue's element store, convlab.kernels.epilogue.fused_store; None: plain stores) writes each
    element with its output channel n and the epilogue operands ``ep``.
    """
    NONE = u32(0xFFFFFFFF)
    gm, gn = min(4, tm), min(4, tn)
    TILE, T, BN, ONE = u32(bm * bn), u32(threads), u32(bn), u32(1)
    PER_THREAD = bm * bn // threads
    NCHW, MAPPED, DEPTH = nchw, mapped, depth
    FUSED = put is not None
    unsplit = _unsplit_store(tm, tn, span_n, put) if FUSED else None
    put = fused_store("float32", None) if put is None else put

    @runtime.jit(device=True, forceinline=True)
    def store(acc, rows, cols, fb, out, ws, bias, splits, z, tile, local, m0, n0, M, N, ohw, out_img,
              has_bias, flag, omap=None, dmap=None, ep=None):
        out = out.flat  # out: the C-contiguous output tensor
        if splits == 1:
            if FUSED:
                unsplit(acc, rows, cols, fb, out, n0 + local % BN, ep)
                return
            for i in range(tm):
                for j in range(tn):
                    if rows[i] != NONE and cols[j] != NONE:
                        out[np.int64(rows[i] + cols[j])] = acc[i * tn + j] + fb[j]
            return
        tiles = u32(cuda.gridDim.x)
        at = (z * tiles + tile) * TILE + local
        for i in range(tm):
            for j in range(tn):
                ws[at + u32(((i // gm) * span_m + i % gm) * bn + (j // gn) * span_n + j % gn)] = \
                    acc[i * tn + j]
        cuda.threadfence()
        cuda.syncthreads()
        tid = u32(cuda.threadIdx.x)
        counter = splits * tiles * TILE + tile
        if tid == 0:
            flag[0] = cuda.atomic.add(ws, counter, np.float32(1)) == np.float32(splits - ONE)
        cuda.syncthreads()
        if flag[0]:
            cuda.threadfence()
            for e in range(PER_THREAD):
                el = tid + u32(e) * T
                m = m0 + el // BN
                n = n0 + el % BN
                if m < M and n < N:
                    at = tile * TILE + el
                    total = load_cg(ws, at)
                    zz = ONE
                    while zz < splits:
                        at += tiles * TILE
                        total += load_cg(ws, at)
                        zz += ONE
                    if has_bias:
                        total += bias[n]
                    if MAPPED:
                        img = m // ohw
                        pq = m - img * ohw
                        if DEPTH:
                            dz = pq // dmap.plane
                            pq = pq - dz * dmap.plane
                            img = img * out_img + dz * dmap.std  # the image's and the slice's offset
                        else:
                            img = img * out_img
                        row = pq // omap.ow
                        put(out, np.int64(img + n * omap.och + omap.o0 + row * omap.sth
                                          + (pq - row * omap.ow) * omap.stw), total, n, ep)
                    elif NCHW:
                        img = m // ohw
                        put(out, np.int64(img * out_img + n * ohw + (m - img * ohw)), total, n, ep)
                    else:
                        put(out, np.int64(m * N + n), total, n, ep)
            if tid == 0:
                ws[counter] = np.float32(0)

    return store


@functools.cache
def _unsplit_store(tm: int, tn: int, span_n: int, put: Callable):
    """Device function ``unsplit(acc, rows, cols, fb, out, kb, ep)``: element (i, j) of an unsplit
    fragment through ``put``, channel kb + (j // 4) * span_n + j % 4, with literal indices: NVVM left a
    loop with gelu inlined rolled, the 8x8 fragments' accumulators on a 288-320 byte stack (convlab compile)."""
    gn = min(4, tn)
    w = Writer("def unsplit(acc, rows, cols, fb, out, kb, ep):")
    w.indent()
    for i in range(tm):
        with w.block(f"if rows[{i}] != NONE:"):
            for j in range(tn):
                with w.block(f"if cols[{j}] != NONE:"):
                    w(f"put(out, i64(rows[{i}] + cols[{j}]), acc[{i * tn + j}] + fb[{j}], "
                      f"kb + u32({(j // gn) * span_n + j % gn}), ep)")
    namespace = compile_source(w.source, f"<unsplit_store {tm}x{tn} {span_n}>",
                               {"put": put, "i64": np.int64, "u32": u32, "NONE": u32(0xFFFFFFFF)})
    return runtime.jit(device=True, forceinline=True)(namespace["unsplit"])
