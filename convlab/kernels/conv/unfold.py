"""The unfold (im2col) kernel: im2col's column buffer and the tensor-core wgrad's split-major operands.

    cols[(n // ipb)*s1 + (n % ipb)*s2 + ((c*R + r)*S + s)*s3 + pq] = x[n, c, p*sh - ph + r*dh, q*sw - pw + s*dw]
        for pq = p*Q + q < PQo (0 outside x and for pq >= P*Q), images n0 .. n0+nb-1 (n counted from n0)

    for each (row = (n, c), chunk of E consecutive pq) pair, grid-stride over the threads:
        (p, q) of the chunk's first pq: two divisions; the next E-1 by carrying q into p
        (the loop stops at a thread's last pair before t + stride could wrap past 2**32)
        for r < R, s < S:
            v[e] = x[...] or 0, e < E;  one store of the E values (E > 1: a 16-byte vector)

E = 1 is the scalar kernel (any layout: im2col's unpadded rows). E = 16 / itemsize (8 halves, 4 floats)
needs rows of whole 16-byte chunks: PQo, s1, s2 and s3 multiples of E, ``cols`` 16-byte aligned (the
wgrad's padded operands); its values move as bits (uint16 / uint32) and leave as ``store4`` of packed
uint32. One generator writes both (tile sizes as literals, so the E values stay in registers).
"""
from __future__ import annotations

import functools

import numpy as np

from convlab import runtime
from convlab.problem import Problem
from convlab.kernels.arch.intrinsics import store4
from convlab.kernels.arch.intrinsics import u32 as U
from convlab.kernels.source import Writer, compile_source
from convlab.kernels.tensor_core.epilogue import vector_ok
from convlab.runtime import cuda

from convlab.kernels.conv.columns import flat_launches

PARAMS = "x, cols, x_off, n_first, pairs, C, H, W, R, S, P, Q, sh, sw, ph, pw, dh, dw, PQo, ips, s1, s2, s3"


def unfold_source(ept: int) -> str:
    """Source of ``unfold(PARAMS)`` writing ``ept`` consecutive pq per thread and tap (module doc): 1, or
    the elements of a 16-byte store (4 of 4 bytes, 8 of 2 bytes)."""
    if ept not in (1, 4, 8):
        raise ValueError(f"ept must be 1, 4 or 8 (a 16-byte store of 4- or 2-byte elements), got {ept}")
    w = Writer(f"def unfold({PARAMS}):")
    w.indent()
    w("t = U(U(U(cuda.blockIdx.x) * U(cuda.blockDim.x)) + U(cuda.threadIdx.x))")
    w("step = U(U(cuda.gridDim.x) * U(cuda.blockDim.x))")
    w("npq = U(P * Q)")
    w(f"cpr = U(PQo // {ept})  # chunks per row")
    w("while t < pairs:")
    w.indent()
    w("row = U(t // cpr)")
    w(f"pq = U(U(t - U(row * cpr)) * {ept})")
    w("p = U(pq // Q)")
    w("q = U(pq - U(p * Q))")
    for e in range(ept):  # element e of the chunk: its (p, q) by carrying, h + ph and w + pw of tap (0, 0)
        if e:
            w("q = U(q + 1)")
            w("if q == Q:")
            w("    q = U(0)")
            w("    p = U(p + 1)")
        w(f"in{e} = U(pq + {e}) < npq")
        w(f"h{e} = U(p * sh)")
        w(f"w{e} = U(q * sw)")
    w("i = U(row // C)  # image i of this launch, n = n_first + i of the call")
    w("n = U(n_first + i)")
    w("src = U(x_off + U(row * U(H * W)))")
    w("dst = U(U(U(U(n // ips) * s1) + U(U(n % ips) * s2)) + U(U(U(U(row - U(i * C)) * U(R * S)) * s3) + pq))")
    w("r = U(0)")
    w("while r < R:")
    w("    s = U(0)")
    w("    while s < S:")
    w.indent(2)
    for e in range(ept):
        w(f"hh = U(h{e} + U(r * dh))")
        w(f"ww = U(w{e} + U(s * dw))")
        w(f"v{e} = zero")
        w(f"if in{e} and hh >= ph and U(hh - ph) < H and ww >= pw and U(ww - pw) < W:")
        w(f"    v{e} = x[U(src + U(U(hh - ph) * W) + U(ww - pw))]")
    if ept == 1:
        w("cols[dst] = v0")
    elif ept == 4:  # 4-byte bits
        w("store4(cols, U(dst), U(v0), U(v1), U(v2), U(v3))")
    else:  # 8 halves: packed in pairs, cols is the uint32 view
        packed = ", ".join(f"U(U(v{2 * u}) | U(U(v{2 * u + 1}) << U(16)))" for u in range(4))
        w(f"store4(cols, U(dst // 2), {packed})")
    w("dst = U(dst + s3)")
    w("s = U(s + 1)")
    w.indent(-2)
    w("    r = U(r + 1)")
    w("if U(pairs - t) <= step:  # the last pair of this thread (t + step would pass 2**32 near the top)")
    w("    break")
    w("t = U(t + step)")
    return w.source


@functools.cache
def _unfold_kernel(dtype: str, ept: int):
    """The unfold kernel of ``ept`` elements per thread for values of ``dtype`` (E > 1: their bits)."""
    namespace = {"cuda": cuda, "U": U, "store4": store4, "zero": np.dtype(dtype).type(0)}
    return runtime.jit(compile_source(unfold_source(ept), f"<unfold {dtype} x{ept}>", namespace)["unfold"])


def _vector_width(cols, pq_out: int, strides: tuple[int, int, int]) -> int:
    """Elements per 16-byte store when the layout allows them (module doc: tc_epilogue.vector_ok, the
    epilogue's rule for the same stores), else 1."""
    size = np.dtype(cols.dtype).itemsize
    return 16 // size if size in (2, 4) and vector_ok(cols, pq_out, *strides) else 1


def unfold_into(problem: Problem, x, cols, n0: int, nb: int, *, pq_out: int | None = None,
                images_per_block: int = 1, strides: tuple[int, int, int] | None = None,
                dtype: str | None = None) -> None:
    """Unfold images n0 .. n0+nb-1 of ``x`` (N, C, H, W, any element type: ``dtype`` names it when
    it is not the problem's, e.g. uint16 for bf16 bits) into flat ``cols``: entry (n, c, r, s, pq)
    at (n // ipb)*s1 + (n % ipb)*s2 + ((c*R + r)*S + s)*s3 + pq for pq < ``pq_out`` (default P*Q;
    entries past P*Q are 0), with ``strides`` = (s1, s2, s3) (default im2col's [n, CRS, PQ]) and
    ipb = ``images_per_block``. 16-byte stores where the layout allows them (module doc)."""
    pr = problem
    (sh, sw), (ph, pw), (dh, dw) = pr.stride, pr.padding, pr.dilation
    npq = pr.p * pr.q
    pq_out = npq if pq_out is None else pq_out
    strides = strides or (pr.c * pr.r * pr.s * npq, 0, npq)
    ept = _vector_width(cols, pq_out, strides)
    dtype = np.dtype(dtype or pr.dtype)
    if ept > 1:  # bits: uint16 / uint32 values, packed into the uint32 view of cols
        bits = np.dtype(f"uint{8 * dtype.itemsize}")
        x, cols, dtype = x.view(bits), cols.view(np.uint32), bits
    kernel = _unfold_kernel(dtype.name, ept)
    flat_x = x.reshape((x.size,))
    for r0, rows, blocks, threads in flat_launches(nb * pr.c, pq_out // ept, whole=pr.c):  # whole images
        i0 = r0 // pr.c
        kernel[blocks, threads](flat_x, cols, U((n0 + i0) * pr.c * pr.h * pr.w), U(i0), U(rows * pq_out // ept),
                                U(pr.c), U(pr.h), U(pr.w), U(pr.r), U(pr.s), U(pr.p), U(pr.q), U(sh), U(sw),
                                U(ph), U(pw), U(dh), U(dw), U(pq_out), U(images_per_block), *map(U, strides))


def unfold(problem: Problem, x, cols, n0: int, nb: int) -> None:
    """Write im2col's column buffer cols[n - n0, (c, r, s), (p, q)] of images n0 .. n0+nb-1 of ``x``."""
    unfold_into(problem, x, cols, n0, nb)
