"""Warp-level tensor-core intrinsics as inline PTX: ``mma.sync``, ``ldmatrix``, ``cp.async``.

numba-cuda has no MMA API (numba-cuda#309); on a GPU these are the ``cuda.extending.intrinsic``s of
:mod:`convlab.kernels.arch.mma_ptx`, which emit llvmlite ``ir.InlineAsm``. On the simulator the same names
are Python stand-ins with the same per-lane semantics (:mod:`convlab.kernels.arch.mma_sim`); they exchange
fragments through a block-shared staging buffer and ``syncthreads``, so there **every thread of the
block must call them together** (block-uniform control flow), where the GPU only needs the warp
converged. This module picks one of the two and holds the one-warp probes of each intrinsic.

Intrinsics (all arguments scalars unless said; offsets are element offsets from the array's data start,
of a C-contiguous array of any rank):

    mma_f16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3) -> (d0, d1, d2, d3)
        mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32: D[16x8] = A[16x16] @ B[16x8] + C, a*/b* uint32
        holding two packed halves (the lower column/row index in the low 16 bits), c*/d* float32.
    mma_bf16(...)                 the same with .bf16 inputs (bf16 bits packed like the halves).
    mma_tf32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3) -> (d0, d1, d2, d3)
        mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: D[16x8] = A[16x8] @ B[8x8] + C, a*/b* uint32
        tf32 bits (fp32 bits; the hardware ignores the low 13 mantissa bits).
    mma_tf32x3(s0..s3, a0..a3, t0, t1, b0, b1, c0..c3) -> (d0..d3)
        three m16n8k8 TF32 mma in one asm block, small parts first: D = As @ B + A @ Bs + A @ B + C with
        A / As the big / small parts of A (a*, s*), B / Bs those of B (b*, t*), from split_tf32.
    to_tf32(x) -> uint32          cvt.rna.tf32.f32 (x float32, or uint32 fp32 bits): round to nearest,
                                  ties away, to 10 mantissa bits.
    split_tf32(x) -> (big, small) uint32 TF32 bits: big = to_tf32(x), small = to_tf32(x - big) (x - big
                                  is exact). x = big + small + r, |r| <= 2**-22 |x| for finite x: the
                                  3xTF32 product a*b ~ a_s*b_b + a_b*b_s + a_b*b_b (three mma_tf32,
                                  a_s*b_s <= 2**-22 |ab| dropped), fp32-class (itype 'tf32x3'). An inf
                                  gives a NaN small part (inf - inf).
    f32_to_bf16(x) -> uint16      cvt.rn.bf16.f32: bf16 bits of x, round to nearest even.
    bf16_to_f32(bits) -> float32  the float32 value of bf16 bits (exact: bits << 16)
    ldmatrix_x4(arr, off) -> (r0, r1, r2, r3)   ldmatrix.sync.aligned.m8n8.x4.shared.b16
    ldmatrix_x2(arr, off) -> (r0, r1)           .x2;  ldmatrix_x4_trans / ldmatrix_x2_trans: .trans
        arr a shared array (any element type; rows are 16 bytes = 8 b16), off this lane's row start,
        16-byte aligned. Lanes 8i..8i+7 give the 8 row addresses of matrix i (x2: lanes 0..15 count).
        Lane l receives in r_i the b16 pair (row l//4, elements 2(l%4), 2(l%4)+1) of matrix i; with
        .trans, (rows 2(l%4), 2(l%4)+1 of column l//4), i.e. the pair of the transposed matrix.
    cp_async16(sarr, soff, garr, goff, src_bytes)   cp.async.cg.shared.global [s], [g], 16, src_bytes:
        16 bytes global -> shared, asynchronously; bytes past src_bytes (0..16) are zero-filled, so
        src_bytes = 0 writes 16 zero bytes and reads nothing (padding and remainders without branches;
        keep goff valid anyway). Both addresses 16-byte aligned.
    cp_async_commit()             cp.async.commit_group
    cp_async_wait(n)              the intrinsic for ``cp.async.wait_group n`` (n = 0..7, compile time:
                                  call it in a factory, bind the result as a global of the kernel).

Fragment layouts (PTX ISA "Matrix Fragments for mma.m16n8k16 / m16n8k8"), lane = 4*g + t, g = lane // 4
in 0..7, t = lane % 4 in 0..3:

    m16n8k16 f16/bf16:  a0 = A[g, 2t:2t+2]    a1 = A[g+8, 2t:2t+2]
                        a2 = A[g, 2t+8:2t+10] a3 = A[g+8, 2t+8:2t+10]
                        b0 = B[2t:2t+2, g]    b1 = B[2t+8:2t+10, g]
    m16n8k8 tf32:       a0 = A[g, t]   a1 = A[g+8, t]   a2 = A[g, t+4]   a3 = A[g+8, t+4]
                        b0 = B[t, g]   b1 = B[t+4, g]
    C and D (both):     c0, c1 = C[g, 2t], C[g, 2t+1]    c2, c3 = C[g+8, 2t], C[g+8, 2t+1]

How ldmatrix feeds them (A row-major in shared, B stored as B^T, i.e. [n][k], both k-contiguous): an
x4 whose lane l addresses row l % 16, k chunk kc + l // 16 (a chunk = 16 bytes = 8 halves or 4 fp32)
returns (a0, a1, a2, a3) of a 16 x 16 (f16) or 16 x 8 (tf32) A tile; an x4 whose lane l addresses
n row (l % 8) + 8 (l // 16), chunk kc + (l // 8) % 2 returns (b0, b1) of two adjacent n8 tiles. The
32-bit case works because one b16 pair is one fp32 element. A [k][n] B needs ``.trans`` (16-bit only).
"""
from __future__ import annotations

import functools

from convlab import runtime
from convlab.runtime import cuda

__all__ = ["mma_f16", "mma_bf16", "mma_tf32", "mma_tf32x3", "to_tf32", "split_tf32", "f32_to_bf16", "bf16_to_f32",
           "ldmatrix_x4", "ldmatrix_x2", "ldmatrix_x4_trans", "ldmatrix_x2_trans", "cp_async16", "cp_async_commit",
           "cp_async_wait"]

if runtime.SIMULATOR:  # the stand-ins: the simulator has no inline PTX
    from convlab.kernels.arch.mma_sim import (bf16_to_f32, cp_async16, cp_async_commit, cp_async_wait,
                                              f32_to_bf16, ldmatrix_x2, ldmatrix_x2_trans, ldmatrix_x4,
                                              ldmatrix_x4_trans, mma_bf16, mma_f16, mma_tf32, mma_tf32x3,
                                              split_tf32, to_tf32)
else:
    from convlab.kernels.arch.mma_ptx import (bf16_to_f32, cp_async16, cp_async_commit, cp_async_wait,
                                              f32_to_bf16, ldmatrix_x2, ldmatrix_x2_trans, ldmatrix_x4,
                                              ldmatrix_x4_trans, mma_bf16, mma_f16, mma_tf32, mma_tf32x3,
                                              split_tf32, to_tf32)


# --- one-warp probes: each intrinsic on its own, against the PTX spec (tests/kernels)

_ALIGN = None if runtime.SIMULATOR else 16  # shared arrays feeding ldmatrix / cp.async: 16-byte aligned


@functools.cache
def _mma_probe(itype: str):
    """Kernel (A32, B32, C, D), one warp: D = A @ B + C with fragments read per the layout above.

    A32 = A.view(uint32) [16, 8] (A 16 x 16 halves, or 16 x 8 fp32), B32 = Bt.view(uint32) [8, 8]
    (Bt = B^T, 8 x 16 halves or 8 x 8 fp32): both layouts index a0..a3 and b0, b1 the same way.
    """
    mma = {"f16": mma_f16, "bf16": mma_bf16, "tf32": mma_tf32, "tf32x3": mma_tf32}[itype]
    tf32, x3 = itype == "tf32", itype == "tf32x3"

    def probe(A32, B32, C, D):
        lane = cuda.threadIdx.x
        g, t = lane // 4, lane % 4
        a0, a1, a2, a3 = A32[g, t], A32[g + 8, t], A32[g, t + 4], A32[g + 8, t + 4]
        b0, b1 = B32[g, t], B32[g, t + 4]
        c0, c1, c2, c3 = C[g, 2 * t], C[g, 2 * t + 1], C[g + 8, 2 * t], C[g + 8, 2 * t + 1]
        if tf32:
            a0, a1, a2, a3, b0, b1 = to_tf32(a0), to_tf32(a1), to_tf32(a2), to_tf32(a3), to_tf32(b0), \
                to_tf32(b1)
        if x3:  # big and small parts, three mma
            (a0, e0), (a1, e1), (a2, e2), (a3, e3) = split_tf32(a0), split_tf32(a1), split_tf32(a2), \
                split_tf32(a3)
            (b0, f0), (b1, f1) = split_tf32(b0), split_tf32(b1)
            d0, d1, d2, d3 = mma_tf32x3(e0, e1, e2, e3, a0, a1, a2, a3, f0, f1, b0, b1, c0, c1, c2, c3)
        else:
            d0, d1, d2, d3 = mma(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)
        D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1] = d0, d1, d2, d3

    return runtime.jit(probe)


def warp_mma(itype: str, A, Bt, C):
    """One ``mma_<itype>`` by one warp: A [16, K], Bt [8, K] (B^T), C [16, 8] float32 -> D [16, 8].

    K = 16 for 'f16' (float16 arrays) and 'bf16' (uint16 bf16 bits), K = 8 for 'tf32' (float32, rounded
    with ``to_tf32`` in the kernel) and 'tf32x3' (float32, ``split_tf32``, three mma). Numpy in, numpy out.
    """
    import numpy as np
    A32 = np.ascontiguousarray(A).view(np.uint32)
    B32 = np.ascontiguousarray(Bt).view(np.uint32)
    D = cuda.to_device(np.full((16, 8), np.nan, np.float32))
    _mma_probe(itype)[1, 32](cuda.to_device(A32), cuda.to_device(B32),
                             cuda.to_device(np.ascontiguousarray(C, np.float32)), D)
    return D.copy_to_host()


@functools.cache
def _ldmatrix_probe(count: int, trans: bool):
    """Kernel (src uint16 [32 * 8], rows int32 [32], out uint32 [32, count]): shared <- src (32 rows of
    8 halves), then lane l calls ldmatrix with the address of row rows[l]."""
    load = {(4, False): ldmatrix_x4, (2, False): ldmatrix_x2, (4, True): ldmatrix_x4_trans,
            (2, True): ldmatrix_x2_trans}[count, trans]
    import numpy as np

    def probe(src, rows, out):
        sh = cuda.shared.array(256, np.uint16, alignment=_ALIGN)
        lane = cuda.threadIdx.x
        for e in range(8):
            sh[lane * 8 + e] = src[lane * 8 + e]
        cuda.syncthreads()
        regs = load(sh, rows[lane] * 8)
        for i in range(count):
            out[lane, i] = regs[i]

    return runtime.jit(probe)


def warp_ldmatrix(count: int, trans: bool, src, rows):
    """One ldmatrix .x{count}(.trans) by one warp: src uint16 [256] (32 rows of 8), rows int32 [32] (lane
    l addresses row rows[l]) -> uint32 [32, count] as received by each lane."""
    import numpy as np
    out = cuda.to_device(np.zeros((32, count), np.uint32))
    _ldmatrix_probe(count, trans)[1, 32](cuda.to_device(np.ascontiguousarray(src, np.uint16)),
                                         cuda.to_device(np.ascontiguousarray(rows, np.int32)), out)
    return out.copy_to_host()


@functools.cache
def _cp_async_probe():
    import numpy as np
    wait0 = cp_async_wait(0)

    def probe(src, chunks, nbytes, out):
        sh = cuda.shared.array(128, np.uint32, alignment=_ALIGN)  # 32 chunks of 16 bytes
        lane = cuda.threadIdx.x
        sh[lane * 4], sh[lane * 4 + 1], sh[lane * 4 + 2], sh[lane * 4 + 3] = 7, 7, 7, 7
        cuda.syncthreads()
        cp_async16(sh, lane * 4, src, chunks[lane] * 4, nbytes[lane])
        cp_async_commit()
        wait0()
        cuda.syncthreads()
        for e in range(4):
            out[lane * 4 + e] = sh[lane * 4 + e]

    return runtime.jit(probe)


def warp_cp_async(src, chunks, nbytes):
    """Lane l copies 16-byte chunk chunks[l] of src (uint32, 4 per chunk) with src_bytes nbytes[l] into
    shared chunk l (pre-filled with 7s): returns the 32 shared chunks as uint32 [128]."""
    import numpy as np
    out = cuda.to_device(np.zeros(128, np.uint32))
    _cp_async_probe()[1, 32](cuda.to_device(np.ascontiguousarray(src, np.uint32)),
                             cuda.to_device(np.asarray(chunks, np.int32)),
                             cuda.to_device(np.asarray(nbytes, np.int32)), out)
    return out.copy_to_host()
