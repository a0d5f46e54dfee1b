"""Simulator stand-ins for the tensor-core intrinsics of :mod:`convlab.kernels.arch.mma`, same per-lane semantics.

The simulator has no warp shuffles, so a warp-wide operation is: every lane writes its inputs into a
block-shared staging buffer (one row per thread), ``syncthreads``, every lane computes its own outputs
from its warp's 32 rows, ``syncthreads`` (so the buffer can be reused). Consequence: all threads of the
block must call the same stand-in together. The products are exact (float64 from inputs rounded to the
input type: fp16 through numpy float16, bf16 and tf32 by their bits), then rounded once to float32; the
hardware accumulates in fp32 in an unspecified order, so compare with a tolerance.

The warp-wide ones are device functions (``cuda.jit(device=True)``), so they see the simulator's per-thread
``cuda``; the per-lane conversions (``to_tf32``, ``split_tf32``, ``f32_to_bf16``, ``bf16_to_f32``) use no
``cuda`` and are plain functions, which the simulator calls without its device-function wrapper (cheaper:
they run once per fragment register); so are ``cp_async_commit`` and ``cp_async_wait``'s, which with
``cp_async16`` feed the wgmma ordering checks of :mod:`convlab.kernels.arch.wgmma_sim` (no-ops in a kernel
that never calls ``wgmma.shared_addr``).
Not for the GPU: :mod:`convlab.kernels.arch.mma` exports these names only on the simulator.
"""
from __future__ import annotations

import functools
import struct

import numpy as np

from convlab import runtime
from convlab.kernels.arch import wgmma_sim
from convlab.runtime import cuda

_F32, _F32_BITS = struct.Struct("<f"), struct.Struct("<I")  # a float32 and its bits
_MAX_THREADS = 1024
_WIDTH = 16  # staging columns: a0..a3, b0, b1, c0..c3 (mma_tf32x3: 12 fragment registers, c0..c3);
#: uint32 and float32 are both exact in float64


def _where() -> tuple[np.ndarray, int, int]:
    """(block's staging buffer, this thread's linear index, lane)."""
    stage = cuda.shared.array((_MAX_THREADS, _WIDTH), np.float64)  # the one buffer of the block
    tid = cuda.threadIdx.x + cuda.blockDim.x * (cuda.threadIdx.y + cuda.blockDim.y * cuda.threadIdx.z)
    return stage, tid, tid % 32


def _numpy(arr) -> np.ndarray:
    """The flat numpy array behind a simulator array (shared arrays are numpy already)."""
    arr = getattr(arr, "_item", arr)
    return np.asarray(getattr(arr, "_ary", arr)).reshape(-1)


def _decode(bits: np.ndarray, itype: str) -> np.ndarray:
    """uint32 registers -> float64 values: (..., 2) pairs for f16/bf16, (...) for tf32."""
    bits = np.ascontiguousarray(bits, dtype=np.uint32)
    if itype == "f16":
        return bits.view(np.uint16).reshape(bits.shape + (2,)).view(np.float16).astype(np.float64)
    if itype == "bf16":
        pairs = bits.view(np.uint16).reshape(bits.shape + (2,)).astype(np.uint32) << 16
        return pairs.view(np.float32).astype(np.float64)
    return (bits & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


def _operands(rows: np.ndarray, itype: str) -> tuple[np.ndarray, np.ndarray]:
    """A (16 x K) and B (K x 8) of one warp from its 32 staging rows, per the PTX fragment layouts."""
    g, t = np.arange(32) // 4, np.arange(32) % 4
    if itype == "tf32":
        a, b = _decode(rows[:, 0:4], itype), _decode(rows[:, 4:6], itype)
        A, B = np.zeros((16, 8)), np.zeros((8, 8))
        for r in range(4):  # a0 A[g, t], a1 A[g+8, t], a2 A[g, t+4], a3 A[g+8, t+4]
            A[g + 8 * (r & 1), t + 4 * (r >> 1)] = a[:, r]
        for r in range(2):  # b0 B[t, g], b1 B[t+4, g]
            B[t + 4 * r, g] = b[:, r]
        return A, B
    a, b = _decode(rows[:, 0:4], itype), _decode(rows[:, 4:6], itype)
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for r in range(4):  # a0 A[g, 2t:2t+2], a1 A[g+8, ..], a2 A[g, 2t+8:2t+10], a3 A[g+8, ..]
        for h in range(2):
            A[g + 8 * (r & 1), 2 * t + h + 8 * (r >> 1)] = a[:, r, h]
    for r in range(2):  # b0 B[2t:2t+2, g], b1 B[2t+8:2t+10, g]
        for h in range(2):
            B[2 * t + h + 8 * r, g] = b[:, r, h]
    return A, B


def _mma(itype, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    stage, tid, lane = _where()
    stage[tid, :10] = (a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)
    cuda.syncthreads()
    rows = stage[tid - lane:tid - lane + 32].copy()
    cuda.syncthreads()
    A, B = _operands(rows[:, :6], itype)
    g, t = lane // 4, lane % 4
    D = A @ B
    c = rows[lane, 6:10]
    return (np.float32(D[g, 2 * t] + c[0]), np.float32(D[g, 2 * t + 1] + c[1]),
            np.float32(D[g + 8, 2 * t] + c[2]), np.float32(D[g + 8, 2 * t + 1] + c[3]))


@runtime.jit(device=True)
def mma_tf32x3(s0, s1, s2, s3, a0, a1, a2, a3, t0, t1, b0, b1, c0, c1, c2, c3):
    stage, tid, lane = _where()
    stage[tid, :] = (s0, s1, s2, s3, a0, a1, a2, a3, t0, t1, b0, b1, c0, c1, c2, c3)
    cuda.syncthreads()
    rows = stage[tid - lane:tid - lane + 32].copy()
    cuda.syncthreads()
    As, Bs = _operands(rows[:, [0, 1, 2, 3, 8, 9]], "tf32")  # the small parts
    A, B = _operands(rows[:, [4, 5, 6, 7, 10, 11]], "tf32")  # the big parts
    D = As @ B + A @ Bs + A @ B
    g, t = lane // 4, lane % 4
    c = rows[lane, 12:16]
    return (np.float32(D[g, 2 * t] + c[0]), np.float32(D[g, 2 * t + 1] + c[1]),
            np.float32(D[g + 8, 2 * t] + c[2]), np.float32(D[g + 8, 2 * t + 1] + c[3]))


@runtime.jit(device=True)
def mma_f16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    return _mma("f16", a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)


@runtime.jit(device=True)
def mma_bf16(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    return _mma("bf16", a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)


@runtime.jit(device=True)
def mma_tf32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    return _mma("tf32", a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)


def to_tf32(x):
    return np.uint32(_rna_bits(_bits(x)))


def _rna_bits(bits: int) -> int:
    """cvt.rna.tf32.f32 on fp32 bits: ties away from zero (sign-magnitude); inf / nan unchanged."""
    return bits if bits & 0x7F800000 == 0x7F800000 else ((bits + 0x1000) & 0xFFFFE000) & 0xFFFFFFFF


def _bits(x) -> int:
    """fp32 bits of x (a float, or already bits: an integer)."""
    if isinstance(x, (int, np.integer)):
        return int(x) & 0xFFFFFFFF
    with np.errstate(over="ignore"):  # a float64 beyond float32's range is inf, as a conversion gives
        return _F32_BITS.unpack(_F32.pack(np.float32(x)))[0]


def split_tf32(x):
    bits = _bits(x)
    big = _rna_bits(bits)
    value, high = _F32.unpack(_F32_BITS.pack(bits))[0], _F32.unpack(_F32_BITS.pack(big))[0]
    rest = value - high if high - high == 0 else float("nan")  # exact in fp32 (inf - inf: NaN, as on the GPU)
    return np.uint32(big), np.uint32(_rna_bits(_F32_BITS.unpack(_F32.pack(rest))[0]))


def f32_to_bf16(x):
    bits = int(np.array(x, dtype=np.float32).view(np.uint32)[()])
    if (bits & 0x7F800000) == 0x7F800000 and bits & 0x7FFFFF:
        return np.uint16(0x7FC0 | (bits >> 16 & 0x8000))
    return np.uint16(((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF)


def bf16_to_f32(bits):
    return np.array(int(bits) << 16 & 0xFFFF0000, dtype=np.uint32).view(np.float32)[()]


def _ldmatrix(arr, off, count, trans):
    stage, tid, lane = _where()
    flat = _numpy(arr)
    half = flat.view(np.uint16)
    stage[tid, 0] = int(off) * flat.itemsize // 2  # this lane's row start in b16 units
    cuda.syncthreads()
    starts = stage[tid - lane:tid - lane + 32, 0].astype(np.int64)
    cuda.syncthreads()
    g, t = lane // 4, lane % 4
    out = []
    for i in range(count):
        if trans:  # rows 2t, 2t+1 of column g
            lo, hi = half[starts[8 * i + 2 * t] + g], half[starts[8 * i + 2 * t + 1] + g]
        else:  # row g, elements 2t, 2t+1
            lo, hi = half[starts[8 * i + g] + 2 * t], half[starts[8 * i + g] + 2 * t + 1]
        out.append(np.uint32(int(lo) | int(hi) << 16))
    return tuple(out)


def _make_ldmatrix(count: int, trans: bool):
    @runtime.jit(device=True)
    def ldmatrix(arr, off):
        return _ldmatrix(arr, off, count, trans)

    return ldmatrix


ldmatrix_x4 = _make_ldmatrix(4, False)
ldmatrix_x2 = _make_ldmatrix(2, False)
ldmatrix_x4_trans = _make_ldmatrix(4, True)
ldmatrix_x2_trans = _make_ldmatrix(2, True)


@runtime.jit(device=True)
def cp_async16(sarr, soff, garr, goff, src_bytes):
    shared, glob = _numpy(sarr), _numpy(garr)
    dst, src = shared.view(np.uint8), glob.view(np.uint8)
    d, s, n = int(soff) * shared.itemsize, int(goff) * glob.itemsize, int(src_bytes)
    if d % 16 or (n and s % 16) or not 0 <= n <= 16 or d + 16 > dst.size or s + n > src.size:
        raise IndexError(f"cp_async16: bad copy dst byte {d}, src byte {s}, {n} bytes")
    wgmma_sim.note_copy(shared, d)  # the wgmma ordering checks (a no-op outside wgmma kernels)
    dst[d:d + 16] = 0
    dst[d:d + n] = src[s:s + n]


def cp_async_commit():
    wgmma_sim.note_commit()


@functools.cache
def cp_async_wait(n: int):
    """The stand-in for ``cp.async.wait_group n``: the copies above are synchronous; the wgmma ordering
    checks (:mod:`convlab.kernels.arch.wgmma_sim`) learn which groups have landed."""
    if not 0 <= int(n) <= 7:
        raise ValueError(f"cp_async_wait n must be in 0..7, got {n!r}")
    return functools.partial(wgmma_sim.note_wait, int(n))
