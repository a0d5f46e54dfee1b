"""The tiled GEMM kernel family: one kernel per (dtype, tile, transposes), generated and compiled by a
cached factory so that every tile size is a compile-time constant. Launch it through
:mod:`convlab.kernels.simt.gemm`.

Each matrix lives in a flat (1-D) device array. Matrix (z, r) of an operand X starts at

    X.base(z, r) = X.off + (z // split) * X.outer + (z % split) * X.inner + r * X.red

and has rows ``ld`` apart. For every batch index z < nbatch the kernel computes

    C(z)[i, j] = sum_{r < nred} sum_{k < K} opA(z, r)[i, k] * opB(z, r)[k, j]
                 (+ bias[bias_off + (z % split) * bias_inner + i]  if has_bias)
                 (+ C(z)[i, j]                                      if accumulate)

with opA[i, k] = A[base + i*lda + k] (or A[base + k*lda + i] when trans_a) and
opB[k, j] = B[base + k*ldb + j] (or B[base + j*ldb + k] when trans_b). The ``r`` sum (a batch-reduce
GEMM) adds several products into one accumulator, e.g. the images of a sub-batch in wgrad. With k
splits (grid z = ksplit * nbatch, z = ks * nbatch + batch index), split ks sums only the k tiles
[ks * tps, (ks + 1) * tps) of the r-major sequence of all nred * ceil(K / BK) tiles and writes its
partial C at ``C.base + ks * c_ks``; :func:`convlab.kernels.data.splitk.sum_partials` adds them in a fixed order.

Loop nest of one block (BM x BN tile of C, THREADS = (BM/TM) * (BN/TN) threads, thread (ty, tx)):

    for t in t_lo .. t_hi:                # k tiles of the split; the r matrices one after another
        registers <- global tile t of opA (BM x BK) and opB (BK x BN)     (bounds-checked, 0 outside)
        if t > t_lo: for q < BK:              # tile t-1, from shared buffer (t-1) % 2
            a[TM] <- As[q, rows of ty];  b[TN] <- Bs[q, columns of tx];  acc[TM, TN] += a (outer) b
        shared buffer t % 2 <- registers;  __syncthreads()
    C tile <- acc (+ bias) (+ C)                                          (bounds-checked)

Shared tiles are k-major (As[q, i], Bs[q, j]) with rows padded by 4 elements and double-buffered. A
thread's rows are runs of VA = min(4, TM) consecutive rows, ty*VA + c*(BM/TM)*VA + u, and likewise its
columns, so that fragment loads are 128-bit shared loads on the GPU (arrays aligned to 16 bytes).

Why the kernel's source is generated: numba unrolls nothing itself, and LLVM keeps a local array in
registers only when every loop touching it is fully unrolled, which it declined to do for the
accumulator's initialisation and epilogue. The factory therefore writes the unrolled code out, with the
accumulator, fragments and prefetch registers as scalars. Index arithmetic is uint32, wrapped in ``u32``
(numba widens integer results to 64 bits otherwise); the launcher guarantees all addresses fit in 32
bits. The accumulator has the operands' dtype (fp32 or fp64); no TF32 or other reduced precision.
"""
from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np
from numba import float32, float64

from convlab import runtime
from convlab.runtime import cuda

from convlab.kernels.arch.intrinsics import SHARED_ALIGN, u32, vector_load
from convlab.kernels.resources import allow_spills
from convlab.kernels.source import Writer, compile_source
from convlab.kernels.simt.tile import PAD, Tile

UNROLL = 2  # steps of the BK loop per iteration: more compiles much slower (BK=8 fully: ~9 s)
MAX_BK = 32


def check_tile(tile: Tile, itemsize: int = 4) -> Tile:
    """``tile`` as a Tile, after the family's rules (Tile.validate with bk <= 32): ValueError naming
    the broken rule."""
    return Tile(*tile).validate(itemsize, max_bk=MAX_BK)


@runtime.jit(device=True)
def _store(C, at, col, n, value, accumulate):
    """C[at + col] = value (+ C[at + col] if accumulate), when col < n (the epilogue of one element)."""
    if col < n:
        if accumulate:
            value += C[u32(at + col)]
        C[u32(at + col)] = value


def _load_setup(w: Writer, op: str, trans: bool, length: int, threads: int, bk: int) -> int:
    """Emit, before the k loop, what the global loads of one operand's tile need; return their count.

    The tile of opA is BM x BK (length = BM), of opB BK x BN (length = BN). In storage order the
    contiguous index is k for A (unless trans_a) and j for B (unless trans_b): consecutive threads read
    consecutive addresses of it. Load e of a thread reads the tile's element (k = {op}_k{e},
    x = {op}_x{e}) from offset {op}_o{e} (+ the tile's k offset), when {op}_ok{e} (its row or column
    exists) and k is in range, and stores it at {op}_sh{e} of a shared buffer.
    """
    size = length * bk
    count = -(-size // threads)
    k_fast = (op == "a") != trans  # is k the contiguous (fast) index of the stored tile?
    fast = bk if k_fast else length
    even = threads % fast == 0
    if even:
        w(f"{op}_f0 = u32(tid % {fast})")
        w(f"{op}_s0 = u32(tid // {fast})")
    bound, ld, lim = ("M", "lda", "m0") if op == "a" else ("N", "ldb", "n0")
    row = length + PAD
    for e in range(count):
        if even:
            fast_e, slow_e = f"{op}_f0", f"u32({op}_s0 + {e * threads // fast})"
        else:
            w(f"{op}_fl = u32(tid + {e * threads})")
            fast_e, slow_e = f"u32({op}_fl % {fast})", f"u32({op}_fl // {fast})"
        k_e, x_e = (fast_e, slow_e) if k_fast else (slow_e, fast_e)
        w(f"{op}_k{e} = {k_e}")
        w(f"{op}_x{e} = {x_e}")
        w(f"{op}_ok{e} = u32({lim} + {op}_x{e}) < {bound}")
        if (e + 1) * threads > size:  # the last load of a tile not a multiple of the block
            w(f"{op}_ok{e} = {op}_ok{e} and tid + {e * threads} < {size}")
        w(f"{op}_o{e} = " + (f"u32(u32(u32({lim} + {op}_x{e}) * {ld}) + {op}_k{e})" if k_fast
                             else f"u32(u32({op}_k{e} * {ld}) + u32({lim} + {op}_x{e}))"))
        w(f"{op}_sh{e} = u32(u32({op}_k{e} * {row}) + {op}_x{e})")
    return count


def _load_tile(w: Writer, op: str, trans: bool, count: int) -> None:
    """Emit the global loads of one operand's tile (at k offset k0) into scalars g{op}{e}."""
    k_fast = (op == "a") != trans
    pos, ld = ("a_pos", "lda") if op == "a" else ("b_pos", "ldb")
    w(f"{op}_t = u32({pos} + k0)" if k_fast else f"{op}_t = u32({pos} + u32(k0 * {ld}))")
    for e in range(count):
        w(f"g{op}{e} = zero")
        w(f"if {op}_ok{e} and u32(k0 + {op}_k{e}) < K:")
        w(f"    g{op}{e} = {op.upper()}[u32({op}_t + {op}_o{e})]")


def _source(tile: Tile, trans_a: bool, trans_b: bool, unroll: int) -> str:
    """Python source of the kernel ``gemm`` for one tile and pair of transposes; the q loop over BK is
    unrolled ``unroll`` times."""
    BM, BN, BK, TM, TN = tile
    KU = unroll
    threads = tile.threads
    TX, TY = BN // TN, BM // TM
    VA, VB = min(4, TM), min(4, TN)
    SA, SB = BM + PAD, BN + PAD
    rows = [c * TY * VA + u for c in range(TM // VA) for u in range(VA)]  # offsets from ty*VA
    cols = [c * TX * VB + u for c in range(TN // VB) for u in range(VB)]  # offsets from tx*VB
    w = Writer()
    w("def gemm(A, B, C, bias, M, N, K, lda, ldb, ldc, a_off, a_outer, a_inner, a_red, b_off, b_outer,")
    w("         b_inner, b_red, c_off, c_outer, c_inner, c_ks, nbatch, split, nred, tps, bias_off,")
    w("         bias_inner, has_bias, accumulate):")
    w.indent()
    w("As = cuda.shared.array(A_SMEM, nbtype, alignment=align)")
    w("Bs = cuda.shared.array(B_SMEM, nbtype, alignment=align)")
    w("tid = u32(cuda.threadIdx.x)")
    w(f"tx = u32(tid % {TX})")
    w(f"ty = u32(tid // {TX})")
    w(f"m0 = u32(u32(cuda.blockIdx.y) * {BM})")
    w(f"n0 = u32(u32(cuda.blockIdx.x) * {BN})")
    w("z = u32(cuda.blockIdx.z)")
    w("ks = u32(z // nbatch)  # k-split index")
    w("zb = u32(z - u32(ks * nbatch))  # batch index")
    w("zo = u32(zb // split)")
    w("zi = u32(zb - u32(zo * split))")
    w(f"ktiles = u32(u32(K + {BK - 1}) // {BK})")
    w("t_lo = u32(min(u32(ks * tps), u32(ktiles * nred)))  # this k-split's tiles: [t_lo, t_hi)")
    w("t_hi = u32(min(u32(t_lo + tps), u32(ktiles * nred)))")
    w("r0 = u32(0)")
    w("if t_lo > 0:")
    w("    r0 = u32(t_lo // ktiles)")
    w(f"k0 = u32(u32(t_lo - u32(r0 * ktiles)) * {BK})  # k offset of the next tile to load, in matrix r")
    w("a_pos = u32(a_off + u32(zo * a_outer) + u32(zi * a_inner) + u32(r0 * a_red))  # matrix (z, r) in A")
    w("b_pos = u32(b_off + u32(zo * b_outer) + u32(zi * b_inner) + u32(r0 * b_red))")
    w(f"a_frag = u32(ty * {VA})")
    w(f"b_frag = u32(tx * {VB})")
    for i in range(TM):
        w(" = ".join(f"c{i}_{j}" for j in range(TN)) + " = zero")
    la = _load_setup(w, "a", trans_a, BM, threads, BK)
    lb = _load_setup(w, "b", trans_b, BN, threads, BK)
    w("t = t_lo")
    w("while True:")
    w.indent()
    w("if t < t_hi:  # global -> registers: tile t")
    w.indent()
    _load_tile(w, "a", trans_a, la)
    _load_tile(w, "b", trans_b, lb)
    w(f"k0 = u32(k0 + {BK})")
    w("if k0 >= K:  # the next matrix of the batch-reduce")
    w("    k0 = u32(0)")
    w("    a_pos = u32(a_pos + a_red)")
    w("    b_pos = u32(b_pos + b_red)")
    w.indent(-1)
    w("if t > t_lo:  # tile t - 1: shared -> fragments -> FMAs")
    w.indent()
    w(f"a_at = u32(u32(u32(t - 1) & 1) * {BK * SA} + a_frag)")
    w(f"b_at = u32(u32(u32(t - 1) & 1) * {BK * SB} + b_frag)")
    w(f"a_end = u32(a_at + {BK * SA})")
    w(f"while a_at < a_end:  # {KU} of the BK={BK} steps per iteration")
    w.indent()
    for q in range(KU):
        for frag, at, vec, offsets, row in (("a", "a_at", VA, rows, SA), ("b", "b_at", VB, cols, SB)):
            arr = frag.upper() + "s"
            for first in range(0, len(offsets), vec):  # runs of vec consecutive, aligned elements
                names = ", ".join(f"{frag}{first + u}" for u in range(vec))
                index = f"{at} + {q * row + offsets[first]}"
                w(f"{names} = {arr}[{index}]" if vec == 1 else f"{names} = load{vec}({arr}, {index})")
        for i in range(TM):
            for j in range(TN):
                w(f"c{i}_{j} += a{i} * b{j}")
    w(f"a_at = u32(a_at + {KU * SA})")
    w(f"b_at = u32(b_at + {KU * SB})")
    w.indent(-2)
    w("if t < t_hi:  # registers -> shared buffer t % 2")
    w.indent()
    w(f"a_at = u32(u32(t & 1) * {BK * SA})")
    w(f"b_at = u32(u32(t & 1) * {BK * SB})")
    for op, count, size in (("a", la, BM * BK), ("b", lb, BN * BK)):
        for e in range(count):
            guard = (e + 1) * threads > size
            prefix = "    " if guard else ""
            if guard:
                w(f"if tid + {e * threads} < {size}:")
            w(f"{prefix}{op.upper()}s[{op}_at + {op}_sh{e}] = g{op}{e}")
    w.indent(-1)
    w("cuda.syncthreads()")
    w("if t >= t_hi:")
    w("    break")
    w("t = u32(t + 1)")
    w.indent(-1)
    w("c_pos = u32(c_off + u32(zo * c_outer) + u32(zi * c_inner) + u32(ks * c_ks))")
    w("bias_pos = u32(bias_off + u32(zi * bias_inner))")
    for j, off in enumerate(cols):
        w(f"col{j} = u32(n0 + b_frag + {off})")
    for i, off in enumerate(rows):
        w(f"row = u32(m0 + a_frag + {off})")
        w("if row < M:")
        w.indent()
        w("extra = zero")
        w("if has_bias:")
        w("    extra = bias[u32(bias_pos + row)]")
        w("at = u32(c_pos + u32(row * ldc))")
        for j in range(TN):
            w(f"store(C, at, col{j}, N, c{i}_{j} + extra, accumulate)")
        w.indent(-1)
    return w.source


@functools.cache
def make_gemm_kernel(dtype: str, tile: Tile, trans_a: bool, trans_b: bool, unroll: int = UNROLL,
                     max_registers: int | None = None) -> Callable:
    """The kernel for ``dtype`` ('float32'/'float64'), ``tile`` and the operand transposes (cached).

    Arguments: (A, B, C, bias, M, N, K, lda, ldb, ldc, a_off, a_outer, a_inner, a_red, b_off, b_outer,
    b_inner, b_red, c_off, c_outer, c_inner, c_ks, nbatch, split, nred, tps, bias_off, bias_inner,
    has_bias, accumulate): arrays 1-D of ``dtype``, scalars uint32. Grid (ceil(N/BN), ceil(M/BM),
    ksplit * nbatch), ``tile.threads`` threads per block. ``max_registers`` defaults to 128 (64 for
    1024 threads): two 256-thread blocks per SM, and 512-thread tiles launchable at all.
    """
    tile = check_tile(tile, np.dtype(dtype).itemsize)
    BM, BN, BK = tile.bm, tile.bn, tile.bk
    namespace = {
        "cuda": cuda, "u32": u32, "store": _store, "load2": vector_load(2), "load4": vector_load(4),
        "zero": np.dtype(dtype).type(0),
        "nbtype": {"float32": float32, "float64": float64}[dtype],
        "align": SHARED_ALIGN,
        "A_SMEM": 2 * BK * (BM + PAD), "B_SMEM": 2 * BK * (BN + PAD),
    }
    source = _source(tile, trans_a, trans_b, math.gcd(unroll, BK))
    filename = f"<convlab.kernels.simt.gemm {dtype} {tile.name} ta={int(trans_a)} tb={int(trans_b)}>"
    compile_source(source, filename, namespace)
    if max_registers is None:
        max_registers = 65536 // max(tile.threads, 512)
    kernel = runtime.jit(fastmath=False, max_registers=max_registers)(namespace["gemm"])
    # the 128-register cap of a 256-thread 8x8 tile spills 8 bytes stored and 8 loaded on sm_90
    # (convlab compile, results/compile): two blocks an SM over them
    return allow_spills(kernel, 32, f"the {max_registers}-register cap (two 256-thread blocks an SM)")


def kernel_source(dtype: str, tile: Tile, trans_a: bool, trans_b: bool, unroll: int = UNROLL) -> str:
    """The generated source of one kernel (for reading and debugging)."""
    tile = check_tile(tile, np.dtype(dtype).itemsize)
    return _source(tile, trans_a, trans_b, math.gcd(unroll, tile.bk))
