"""Warpgroup tensor-core intrinsics (Hopper, sm_90a): ``wgmma.mma_async`` with both operands in shared
memory, its fences and groups, and the shared address that descriptors start from.

On a GPU these are the inline-PTX intrinsics of :mod:`convlab.kernels.arch.wgmma_ptx`; on the simulator the
stand-ins of :mod:`convlab.kernels.arch.wgmma_sim`, which compute each thread's fragment from the shared bytes
the descriptors point at (swizzle included) and check the asynchronous ordering rules. A warpgroup is 4
consecutive warps starting at a warp index divisible by 4; every ``.sync.aligned`` call below must be
made by all 128 of its threads together (warpgroup-uniform control flow).

    mma = wgmma_async(itype, n)      itype 'f16', 'bf16' or 'tf32', n a multiple of 8 in 8..256 (factory);
          wgmma_async(itype, n, trans_a, trans_b): A / B MN-major (imm-trans, f16 / bf16 only;
          wgmma_desc.mn_desc_hi and mn_addresses give their layout)
    acc = mma(desc_a, desc_b, scale_d, acc)
        wgmma.mma_async.sync.aligned.m64n{n}k{16|8}.f32.{itype}.{itype}: D[64, n] = A[64, k] @ B[k, n]
        (+ acc when scale_d != 0; scale_d 0 ignores acc, NaN included), A and B K-major (B given as its
        n rows of k: Bt, like mma.sync's .col), k = 16 (f16, bf16) or 8 (tf32: the ISA truncates the
        low 13 bits of each fp32 operand); desc_* uint64 matrix descriptors (wgmma_desc), acc a tuple
        of n/2 float32 in the layout below. Asynchronous: acc is only valid after a wgmma_wait that
        covers its group; the shared bytes it reads must not change until then.
    acc = wgmma_fence(acc)           wgmma.fence.sync.aligned: before the first wgmma and after any
                                     other access to acc (ISA 9.7.15.7.1); acc (a tuple, or a tuple of
                                     one tuple per m64 slice) tied through it
    wgmma_commit()                   wgmma.commit_group.sync.aligned: the uncommitted wgmma -> a group
    wait = wgmma_wait(n); acc = wait(acc)
                                     wgmma.wait_group.sync.aligned n (0..7, factory): at most the n
                                     newest groups pending; acc (every accumulator of the pending
                                     wgmma, as one tuple) tied through it, so no use moves above it
    fence_proxy_async()              fence.proxy.async.shared::cta: this thread's shared-memory writes
                                     (cp.async after its wait_group, plain stores) visible to the async
                                     proxy that wgmma reads through; then a barrier for other threads
    shared_addr(arr, off) -> uint32  the shared-window byte address of element off of a shared array
                                     (cvta.to.shared; the simulator: the offset in dynamic shared memory)

Accumulator layout (m64nNk16 and m64nNk8 alike, PTX ISA 9.7.15.5.1.1, Figures 149 and 151; CUTLASS
``CLayout_64xN``): thread t of the warpgroup, warp w = t // 32 (rows 16w..16w+15), lane = 4g + q,
holds d[4j + 2h + u] = D[16w + g + 8h, 8j + 2q + u], j < n/8: warp w's 16 x n slice is mma.sync's
m16n8 C fragment (c0, c1 = row g, cols 2q, 2q+1; c2, c3 = row g+8) repeated over n/8 column blocks,
d[4j:4j+4] being block j's c0..c3. So the staged epilogue of :mod:`convlab.kernels.tensor_core.epilogue` takes a
warpgroup's accumulators as 4 warps of 16-row tiles (:mod:`convlab.kernels.tensor_core.warpgroup`).

Descriptors: :mod:`convlab.kernels.arch.wgmma_desc` (bit layout, addressing, the warp pipeline's
layout it matches); a descriptor is ``U64(desc_hi(R)) | U64((shared_addr(..) >> 4) & 0x3FFF)``, and a k step of
32 bytes inside a row adds 2 to it. The shared tiles start on their swizzle repeat: dynamic shared memory
declared ``alignment=1024`` (``.extern .shared .align 1024``; the probes report the address).

Compiling without a GPU: numba-cuda targets compute_90a on a 9.0 device (``codegen._ensure_cc``), but
``cuda.compile_ptx(..., cc=(9, 0))`` emits ``.target sm_90``, which ptxas refuses wgmma for: pass
``cc=(9, 0, "a")`` (tools/wgmma_ptx_check.py).

Probes (``warpgroup_mma``): one warpgroup, one call each of the above, against numpy; the first thing a
GPU run checks (tests/kernels/test_wgmma.py).
"""
from __future__ import annotations

import functools

import numpy as np
from numba.np.numpy_support import from_dtype as numba_from_dtype

from convlab import runtime
from convlab.kernels.arch.intrinsics import u32 as U
from convlab.kernels.source import Writer, compile_source
from convlab.kernels.arch.wgmma_desc import desc_hi
from convlab.runtime import cuda

__all__ = ["wgmma_async", "wgmma_fence", "wgmma_commit", "wgmma_wait", "fence_proxy_async", "shared_addr",
           "warpgroup_mma", "ITEMSIZE", "KSTEP"]

if runtime.SIMULATOR:
    from convlab.kernels.arch.wgmma_sim import (fence_proxy_async, shared_addr, wgmma_async, wgmma_commit,
                                                wgmma_fence, wgmma_wait)
else:
    from convlab.kernels.arch.wgmma_ptx import (fence_proxy_async, shared_addr, wgmma_async, wgmma_commit,
                                                wgmma_fence, wgmma_wait)

ITEMSIZE = {"f16": 2, "bf16": 2, "tf32": 4}  # bytes per operand element
KSTEP = {"f16": 16, "bf16": 16, "tf32": 8}  # k of one wgmma (32 bytes of each row)
ALIGN = None if runtime.SIMULATOR else 1024  # dynamic shared memory on the 128B swizzle's repeat
STATIC_LIMIT = 48 * 1024  # the probes' dynamic shared memory stays below the opt-in limit


def _probe_source(itype: str, n: int, row_bytes: int) -> str:
    """Kernel (A, Bt, C, D, info, a_row0, b_row0, scale0), one warpgroup: A [a_rows, k] and Bt [b_rows, k]
    as uint32 words -> dynamic shared memory in the warp pipeline's swizzled layout (B after A); then
    K / KSTEP wgmma of the 64 rows of A from a_row0 and n rows of Bt from b_row0, the first with scale_d
    = scale0, one group, wait 0; D [64, n] = the fragments (C [64, n] their start); info[0] = the
    shared address of the dynamic array."""
    ch, kstep, size = row_bytes // 16, KSTEP[itype], ITEMSIZE[itype]
    words = row_bytes // 4
    nacc = n // 2
    acc = ", ".join(f"d{i}" for i in range(nacc))
    w = Writer("def probe(A, Bt, C, D, info, a_rows, a_row0, b_row0, scale0):")
    w.indent()
    w("sh = cuda.shared.array(0, c_uint32, alignment=align)")
    w("tid = U(cuda.threadIdx.x)")
    w("base = shared_addr(sh, 0)")
    with w.block("if tid == 0:"):
        w("info[0] = base")
    w(f"b_word0 = U(a_rows * {words})")
    for src, dst0, rows in (("A", "U(0)", "a_rows"), ("Bt", "b_word0", f"U(Bt.size // {words})")):
        w("e = tid")
        with w.block(f"while e < U({rows} * {ch}):"):
            w(f"r = U(e // {ch})")
            w(f"c = U(e % {ch})")
            w(f"s = U(U({dst0} + U(r * {words})) + U(U(c ^ U(U(r // {8 // ch}) % {ch})) * 4))")
            with w.block("for v in range(4):"):
                w(f"sh[U(s + v)] = {src}[U(U(U(r * {words}) + U(c * 4)) + v)]")
            w("e = U(e + 128)")
    w("fence_proxy_async()")
    w("cuda.syncthreads()")
    w("wq = U(tid // 32)")
    w("g = U(U(tid % 32) // 4)")
    w("q = U(tid % 4)")
    w(f"cb = U64(U(U(U(U(wq * 16) + g) * {n}) + U(q * 2)))  # 64-bit: the constant offsets fold into addresses")
    fragment = [(4 * j + 2 * h + u, 8 * h * n + 8 * j + u) for j in range(n // 8) for h in range(2) for u in range(2)]
    for reg, off in fragment:  # thread (g, q)'s d[4j + 2h + u] = D[16 wq + g + 8h, 8j + 2q + u]
        w(f"d{reg} = C[U64(cb + U64({off}))]")
    w(f"({acc},) = wgmma_fence(({acc},))")
    w(f"da = U64(U64(U(U(U(base + U(a_row0 * {row_bytes})) >> 4) & U(0x3FFF))) | DHI)")
    w(f"db = U64(U64(U(U(U(U(base + U(b_word0 * 4)) + U(b_row0 * {row_bytes})) >> 4) & U(0x3FFF))) | DHI)")
    for kk in range(row_bytes // (kstep * size)):
        scale = "scale0" if kk == 0 else "1"
        w(f"({acc},) = mma(U64(da + U64({2 * kk})), U64(db + U64({2 * kk})), {scale}, ({acc},))")
    w("wgmma_commit()")
    w(f"({acc},) = wait0(({acc},))")
    for reg, off in fragment:
        w(f"D[U64(cb + U64({off}))] = d{reg}")
    return w.source


@functools.cache
def _probe(itype: str, n: int, row_bytes: int):
    namespace = {"cuda": cuda, "U": U, "U64": np.uint64, "align": ALIGN, "DHI": np.uint64(desc_hi(row_bytes)),
                 "c_uint32": numba_from_dtype(np.dtype(np.uint32)), "mma": wgmma_async(itype, n),
                 "wait0": wgmma_wait(0), "wgmma_fence": wgmma_fence, "wgmma_commit": wgmma_commit,
                 "fence_proxy_async": fence_proxy_async, "shared_addr": shared_addr}
    src = _probe_source(itype, n, row_bytes)
    return runtime.jit(compile_source(src, f"<convlab.kernels.arch.wgmma probe {itype} n{n} {row_bytes}B>",
                                      namespace)["probe"])


def warpgroup_mma(itype: str, A: np.ndarray, Bt: np.ndarray, C: np.ndarray, n: int, *, scale0: int = 1,
                  a_row0: int = 0, b_row0: int = 0) -> tuple[np.ndarray, int]:
    """One warpgroup's ``wgmma_async(itype, n)`` chain over one tile row: (D [64, n] float32, the shared
    address of the probe's dynamic shared memory).

    A [a_rows, k] and Bt [b_rows, k] in the storage type (float16, uint16 bf16 bits, float32), k * its
    size = 32, 64 or 128 bytes (the 32B / 64B / 128B swizzle; k / 16 (tf32: k / 8) wgmma, the descriptor
    advanced 32 bytes each), rows multiples of 8; the wgmma read A[a_row0 : a_row0 + 64] and
    Bt[b_row0 : b_row0 + n] (a_row0, b_row0 multiples of 8: descriptors that start inside the tile).
    D = A_slice @ Bt_slice^T (+ C unless scale0 == 0: C may then be NaN). Numpy in, numpy out.
    """
    A, Bt = np.ascontiguousarray(A), np.ascontiguousarray(Bt)
    row_bytes = A.shape[1] * A.itemsize
    if A.itemsize != ITEMSIZE[itype] or Bt.shape[1] != A.shape[1] or row_bytes not in (32, 64, 128):
        raise ValueError(f"A [rows, k] and Bt [rows, k] of {itype} with k * {ITEMSIZE[itype]} in 32, 64, 128 bytes, "
                         f"got {A.shape} {A.dtype} and {Bt.shape}")
    if A.shape[0] % 8 or Bt.shape[0] % 8 or a_row0 % 8 or b_row0 % 8 or a_row0 + 64 > A.shape[0] \
            or b_row0 + n > Bt.shape[0]:
        raise ValueError(f"rows in multiples of 8 holding the 64 rows of A from {a_row0} and {n} rows of Bt from "
                         f"{b_row0}, got {A.shape[0]} and {Bt.shape[0]}")
    dyn = (A.shape[0] + Bt.shape[0]) * row_bytes
    if dyn > STATIC_LIMIT:
        raise ValueError(f"the probe's tiles take {dyn} bytes of shared memory, over {STATIC_LIMIT}")
    D = cuda.to_device(np.full((64 * n,), np.nan, np.float32))
    info = cuda.to_device(np.full(1, 0xFFFFFFFF, np.uint32))
    _probe(itype, n, row_bytes)[1, 128, 0, dyn](
        cuda.to_device(A.view(np.uint32).reshape(-1)), cuda.to_device(Bt.view(np.uint32).reshape(-1)),
        cuda.to_device(np.ascontiguousarray(C, np.float32).reshape(-1)), D, info, U(A.shape[0]), U(a_row0),
        U(b_row0), U(scale0))
    return D.copy_to_host().reshape(64, n), int(info.copy_to_host()[0])

