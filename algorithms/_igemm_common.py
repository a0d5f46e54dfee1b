"""Pieces shared by the implicit-GEMM kernels (``_igemm_fwd``: forward and backward-data, ``_igemm_wgrad``:
backward-weight): the block-tile geometry, the split-K plan and the deterministic split-K reduction.

Tile geometry (one thread block computes a BM x BN tile of out[M, N] = sum_K A[M, K] B[K, N]):

    threads       T = (BM / TM) * (BN / TN); thread (tm, tn) owns a TM x TN register fragment
    fragment      rows  g * GM * NT_M + tm * GM + v   (g < TM / GM, v < GM, GM = min(4, TM))
                  cols  g * GN * NT_N + tn * GN + v   (so each group of 4 is one 128-bit shared load)
    shared        As[2][BK][BM + PAD], Bs[2][BK][BN + PAD]  (k-major, double-buffered, PAD = 4 keeps rows
                  16-byte aligned and makes the k-fastest stores of the loaders conflict-free)
    warp layout   a warp is LM x (32 / LM) threads (m x n); LM chosen per kernel (see ``lanes_m``)

The split-K plan cuts the reduction (K of the GEMM) into ``splits`` chunks of ``chunk`` (a multiple of BK)
when the M x N tiles alone would leave the GPU idle; each chunk writes its partial output to a workspace
slice, and the block finishing a tile last (an atomic counter per tile) sums that tile's slices in the
fixed order z = 0, 1, ... (``store_tile``): one launch, bit-for-bit deterministic.
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass

import numpy as np

from convlab import runtime
from convlab.runtime import cuda

if not runtime.SIMULATOR:
    from llvmlite import ir
    from numba import types

    intrinsic = cuda.extending.intrinsic  # through runtime's cuda: no second numba.cuda import site

PAD = 4  # floats of padding per shared row
SHARED_ALIGN = None if runtime.SIMULATOR else 16  # the simulator rejects alignment=
MAX_INDEX = 2**31 - 1  # every flat index must fit a signed 32-bit int


@dataclass(frozen=True)
class Tile:
    """Block tile (bm x bn), reduction slice bk, thread fragment (tm x tn)."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def nt_m(self) -> int:
        return self.bm // self.tm

    @property
    def nt_n(self) -> int:
        return self.bn // self.tn

    @property
    def threads(self) -> int:
        return self.nt_m * self.nt_n

    @property
    def gm(self) -> int:
        return min(4, self.tm)

    @property
    def gn(self) -> int:
        return min(4, self.tn)

    @property
    def shared_bytes(self) -> int:
        return 2 * self.bk * (self.bm + PAD + self.bn + PAD) * 4

    def lanes_m(self, prefer: tuple[int, ...]) -> int:
        """Threads of a warp along m: the first of ``prefer`` that tiles the thread grid."""
        for lm in prefer:
            if self.nt_m % lm == 0 and self.nt_n % (32 // lm) == 0:
                return lm
        raise ValueError(f"no warp layout fits a {self.nt_m} x {self.nt_n} thread grid")

    def validate(self) -> None:
        """ValueError naming the broken rule; loaders add their own rules."""
        for name in ("bm", "bn", "bk", "tm", "tn"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"tile {name}={value} must be a power of two")
        if self.bk % 8:
            raise ValueError(f"tile bk={self.bk} must be a multiple of 8")
        if self.bm % self.tm or self.bn % self.tn or self.tm > 8 or self.tn > 8:
            raise ValueError(f"fragment {self.tm}x{self.tn} must divide the tile {self.bm}x{self.bn} "
                             "and be at most 8x8")
        if self.threads % 32 or not 32 <= self.threads <= 512:
            raise ValueError(f"{self.threads} threads per block: need a multiple of 32 in 32..512")
        if self.shared_bytes > 48 * 1024:
            raise ValueError(f"{self.shared_bytes} bytes of shared memory exceed 48 KiB")


if runtime.SIMULATOR:
    def lds4(arr, i):
        """Four consecutive floats arr[i:i+4] (the simulator's stand-in for one 128-bit load)."""
        return arr[i], arr[i + 1], arr[i + 2], arr[i + 3]
else:
    @intrinsic
    def lds4(typingctx, arr, idx):
        """arr[idx:idx+4] as one 128-bit load (idx a multiple of 4 of a 16-byte aligned array)."""
        sig = types.UniTuple(types.float32, 4)(arr, idx)

        def codegen(context, builder, signature, args):
            ary = context.make_array(signature.args[0])(context, builder, args[0])
            index = builder.zext(args[1], ir.IntType(64)) if args[1].type.width < 64 else args[1]
            ptr = builder.gep(ary.data, [index])
            vec_ptr = builder.bitcast(ptr, ir.VectorType(ir.FloatType(), 4).as_pointer(
                getattr(ptr.type, "addrspace", 0)))
            vec = builder.load(vec_ptr, align=16)
            items = [builder.extract_element(vec, ir.Constant(ir.IntType(32), v)) for v in range(4)]
            return context.make_tuple(builder, signature.return_type, items)

        return sig, codegen


@functools.cache
def slice_fma(bk: int, tm: int, tn: int, lda: int, ldb: int, span_m: int, span_n: int):
    """Device function ``slice_fma(As, Bs, oa, ob, acc, fa, fb)``: acc[i*tn + j] += A[kk, row i] *
    B[kk, col j] over one BK slice, the kk loop unrolled in generated source so that every shared offset
    is a literal and each group of 4 fragment values is one 128-bit load (``lds4``).

    Row i of the fragment is As[oa + kk*lda + (i // 4) * span_m + i % 4]; likewise for columns and Bs.
    """
    gm, gn = min(4, tm), min(4, tn)
    lines = ["def slice_fma(As, Bs, oa, ob, acc, fa, fb):"]
    for kk in range(bk):
        for arr, frag, base, ld, t, g_len, span in (("As", "fa", "oa", lda, tm, gm, span_m),
                                                     ("Bs", "fb", "ob", ldb, tn, gn, span_n)):
            for g in range(t // g_len):
                off = kk * ld + g * span
                if g_len == 4:
                    lines.append(f"    t0, t1, t2, t3 = lds4({arr}, {base} + u32({off}))")
                    lines += [f"    {frag}[{g * 4 + v}] = t{v}" for v in range(4)]
                else:
                    lines += [f"    {frag}[{g * g_len + v}] = {arr}[{base} + u32({off + v})]"
                              for v in range(g_len)]
        lines += [f"    for i in range({tm}):", f"        for j in range({tn}):",
                  f"            acc[i * {tn} + j] += fa[i] * fb[j]"]
    namespace = {"lds4": lds4, "u32": np.uint32}
    exec(compile("\n".join(lines), f"<slice_fma {bk}x{tm}x{tn}>", "exec"), namespace)
    return runtime.jit(device=True, forceinline=True)(namespace["slice_fma"])


@functools.cache
def zero_fill(size: int):
    """Device function ``zero_fill(arr)`` setting arr[0:size] = 0 with literal indices (a loop of 64
    stores is not unrolled by NVVM, which would move a register accumulator to local memory)."""
    lines = ["def zero_fill(arr):"] + [f"    arr[{i}] = f32(0)" for i in range(size)]
    namespace = {"f32": np.float32}
    exec(compile("\n".join(lines), f"<zero_fill {size}>", "exec"), namespace)
    return runtime.jit(device=True, forceinline=True)(namespace["zero_fill"])


def register_cap(threads: int) -> int:
    """Registers per thread that keep 2 blocks of 256, 3 of 128 or 4 of 64 threads on one SM."""
    return {256: 128, 128: 168}.get(threads, 255)


@functools.cache
def sm_count() -> int:
    """Streaming multiprocessors of the current device (2 on the simulator, to exercise split-K)."""
    if runtime.SIMULATOR:
        return 2
    return int(cuda.get_current_device().MULTIPROCESSOR_COUNT)


def split_plan(tiles: int, k_len: int, bk: int, threads: int, out_elems: int, limit: int,
               itemsize: int = 4, min_tiles_per_split: int = 8) -> tuple[int, int]:
    """(splits, chunk) for a GEMM of ``tiles`` output tiles and reduction length ``k_len``.

    Aims at about 16 warps per SM (at least 2 blocks each); every chunk is a multiple of ``bk`` holding
    at least ``min_tiles_per_split`` slices; the workspace ((splits * out_elems + tiles) * itemsize bytes,
    none when splits == 1) stays within ``limit`` and below 2**31 elements.
    """
    target = sm_count() * max(2, 512 // threads)
    k_tiles = k_len // bk
    splits = 1
    if tiles < target:
        splits = min(math.ceil(target / tiles), max(1, k_tiles // min_tiles_per_split))
    fit = min((limit // itemsize - tiles) // max(1, out_elems), (MAX_INDEX - tiles) // max(1, out_elems))
    splits = min(splits, fit)
    if splits < 2:
        return 1, k_len
    chunk = math.ceil(k_tiles / splits) * bk
    return math.ceil(k_len / chunk), chunk


if runtime.SIMULATOR:
    def load_cg(arr, i):
        """arr[i] read from L2 (the simulator has no caches)."""
        return arr[i]
else:
    load_cg = cuda.ldcg


@functools.cache
def store_tile(tm: int, tn: int, bm: int, bn: int, span_m: int, span_n: int, threads: int, nchw: bool):
    """Device function writing a block's output tile, deterministically when the K loop is split.

    ``store(acc, rows, cols, fb, out, ws, bias, splits, z, tile, local, m0, n0, M, N, ohw, out_img,
    has_bias, flag)``: unsplit, thread element (i, j) goes to out[rows[i] + cols[j]] + fb[j] (NONE marks
    rows/columns outside the problem). Split, partial z of the tile goes tile-major to
    ws[(z * tiles + tile) * bm * bn + local + c(i, j)] (local: the fragment's offset in the tile, c a
    literal); the block that finishes a tile last (an atomic counter per tile after the partials, reset
    to 0 afterwards) sums the tile's partials in the fixed order z = 0, 1, ... with all its threads
    along the tile (coalesced) and writes out (m, n) = out[img * out_img + n * ohw + pq] for NCHW outputs
    (m = img * ohw + pq), out[m * N + n] otherwise, plus bias[n]: the bits never depend on scheduling.
    """
    NONE = np.uint32(0xFFFFFFFF)
    gm, gn = min(4, tm), min(4, tn)
    TILE, T, BN, ONE = np.uint32(bm * bn), np.uint32(threads), np.uint32(bn), np.uint32(1)
    PER_THREAD = bm * bn // threads
    NCHW = nchw

    @runtime.jit(device=True, forceinline=True)
    def store(acc, rows, cols, fb, out, ws, bias, splits, z, tile, local, m0, n0, M, N, ohw, out_img,
              has_bias, flag):
        out = out.flat  # out: the C-contiguous output tensor
        if splits == 1:
            for i in range(tm):
                for j in range(tn):
                    if rows[i] != NONE and cols[j] != NONE:
                        out[np.int64(rows[i] + cols[j])] = acc[i * tn + j] + fb[j]
            return
        tiles = np.uint32(cuda.gridDim.x)
        at = (z * tiles + tile) * TILE + local
        for i in range(tm):
            for j in range(tn):
                ws[at + np.uint32(((i // gm) * span_m + i % gm) * bn + (j // gn) * span_n + j % gn)] = \
                    acc[i * tn + j]
        cuda.threadfence()
        cuda.syncthreads()
        tid = np.uint32(cuda.threadIdx.x)
        counter = splits * tiles * TILE + tile
        if tid == 0:
            flag[0] = cuda.atomic.add(ws, counter, np.float32(1)) == np.float32(splits - ONE)
        cuda.syncthreads()
        if flag[0]:
            cuda.threadfence()
            for e in range(PER_THREAD):
                el = tid + np.uint32(e) * T
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
                    if NCHW:
                        img = m // ohw
                        out[np.int64(img * out_img + n * ohw + (m - img * ohw))] = total
                    else:
                        out[np.int64(m * N + n)] = total
            if tid == 0:
                ws[counter] = np.float32(0)

    return store


def np_u32(value: int) -> np.uint32:
    """A compile-time unsigned constant for kernel closures (keeps index math unsigned)."""
    return np.uint32(value)


_workspace_cache: dict[tuple[int, int], object] = {}
_WORKSPACE_KEEP = 4  # buffers kept (a training step alternates forward, dgrad and wgrad sizes)


@contextlib.contextmanager
def workspace(partial: int, tiles: int):
    """``with workspace(partial, tiles) as ws``: float32 device buffer of ``partial`` split-K partials,
    then ``tiles`` zeroed counters. Kernels return every counter to zero, so the last few buffers are kept
    for repeated shapes; a buffer is in no cache while checked out (two uses never share one) and goes
    back only when its launch returned normally (one that raised may leave counters non-zero).
    """
    key = (partial, tiles)
    buf = _workspace_cache.pop(key, None)
    if buf is None:
        buf = runtime.empty((partial + tiles,), np.float32)
        buf[partial:].copy_to_device(np.zeros(tiles, np.float32))
    yield buf
    while len(_workspace_cache) >= _WORKSPACE_KEEP:
        _workspace_cache.pop(next(iter(_workspace_cache)))
    _workspace_cache[key] = buf  # most recent last


@functools.cache
def dummy():
    """A 1-element float32 device array standing in for an absent bias or workspace."""
    return runtime.empty((1,), np.float32)
