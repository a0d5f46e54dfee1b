"""The unfold (im2col) kernel: the explicit-GEMM plugins' column buffer and the tensor-core wgrad's
split-major operands, for N = 1, 2 or 3 spatial axes (convlab.kernels.conv.axes; 2D shown, 3D adds a
depth tap t and an output depth o, 1D keeps the width):

    cols[(n // ipb)*s1 + (n % ipb)*s2 + ((c*R + r)*S + s)*s3 + pq] = x[n, c, p*sh - ph + r*dh, q*sw - pw + s*dw]
        for pq = p*Q + q < PQo (0 outside x and for pq >= P*Q), images n0 .. n0+nb-1 (n counted from n0)

    for each (row = (n, c), chunk of E consecutive pq) pair, grid-stride over the threads:
        (p, q) of the chunk's first pq: divisions; the next E-1 by carrying q into p (3D: p into o)
        (the loop stops at a thread's last pair before its index plus the stride could pass 2**32)
        for r < R, s < S:
            v[e] = x[...] or 0, e < E;  one store of the E values (E > 1: a 16-byte vector)

E = 1 is the scalar kernel (any layout: im2col's unpadded rows). E = 16 / itemsize (8 halves, 4 floats)
needs rows of whole 16-byte chunks: PQo, s1, s2 and s3 multiples of E, ``cols`` 16-byte aligned (the
wgrad's padded operands); its values move as bits (uint16 / uint32) and leave as ``store_vector`` of packed
uint32. One generator writes every N and E (tile sizes as literals, so the E values stay in registers).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from convlab import runtime
from convlab.problem import Problem
from convlab.kernels.arch.intrinsics import store_vector
from convlab.kernels.arch.intrinsics import u32 as U
from convlab.kernels.conv.axes import geometry, names, u32_product
from convlab.kernels.source import Writer, compile_source
from convlab.kernels.tensor_core.epilogue import vector_ok
from convlab.runtime import cuda

from convlab.kernels.conv.columns import flat_launches, geometry_params


def params(nd: int) -> str:
    """The kernel's parameters for ``nd`` axes (2D: x, cols, x_off, n_first, pairs, C, H, W, R, S, P, Q,
    sh, sw, ph, pw, dh, dw, PQo, ips, s1, s2, s3)."""
    return f"x, cols, x_off, n_first, pairs, C, {geometry_params(nd)}, PQo, ips, s1, s2, s3"


def _decode(w: Writer, outs: tuple[str, ...], extents: tuple[str, ...]) -> None:
    """The output coordinates of ``pq`` (a flat output pixel)."""
    rest = "pq"
    for a in range(len(outs) - 1):
        inner = u32_product(extents[a + 1:])
        w(f"{outs[a]} = U({rest} // {inner})")
        if a + 1 < len(outs) - 1:
            w(f"rem{a} = U({rest} - U({outs[a]} * {inner}))")
            rest = f"rem{a}"
        else:
            w(f"{outs[-1]} = U({rest} - U({outs[a]} * {inner}))")
    if len(outs) == 1:
        w(f"{outs[0]} = U(pq)")


def _carry(w: Writer, outs: tuple[str, ...], extents: tuple[str, ...]) -> None:
    """Advance the output coordinates by one pixel, carrying into the outer axes."""
    w(f"{outs[-1]} = U({outs[-1]} + 1)")
    for a in range(len(outs) - 1, 0, -1):
        w(f"if {outs[a]} == {extents[a]}:")
        w.indent()
        w(f"{outs[a]} = U(0)")
        w(f"{outs[a - 1]} = U({outs[a - 1]} + 1)")
    w.indent(-(len(outs) - 1))


def unfold_source(ept: int, nd: int = 2) -> str:
    """Source of ``unfold(params(nd))`` writing ``ept`` consecutive pq per thread and tap (module doc): 1,
    or the elements of a 16-byte store (4 of 4 bytes, 8 of 2 bytes)."""
    if ept not in (1, 4, 8):
        raise ValueError(f"ept must be 1, 4 or 8 (a 16-byte store of 4- or 2-byte elements), got {ept}")
    outs, taps = names(nd, "out"), names(nd, "tap")
    sizes, kernel, extents = names(nd, "size"), names(nd, "kernel"), names(nd, "extent")
    st, pd, dl = names(nd, "stride"), names(nd, "pad"), names(nd, "dil")
    base = ("z", "h", "w")[3 - nd:]  # element e's input coordinate + padding at tap 0: base{e}
    coord = ("zz", "hh", "ww")[3 - nd:]
    w = Writer(f"def unfold({params(nd)}):")
    w.indent()
    w("pair = U(U(U(cuda.blockIdx.x) * U(cuda.blockDim.x)) + U(cuda.threadIdx.x))")
    w("step = U(U(cuda.gridDim.x) * U(cuda.blockDim.x))")
    w(f"npq = {u32_product(extents)}")
    w(f"cpr = U(PQo // {ept})  # chunks per row")
    w("while pair < pairs:")
    w.indent()
    w("row = U(pair // cpr)")
    w(f"pq = U(U(pair - U(row * cpr)) * {ept})")
    _decode(w, outs, extents)
    for e in range(ept):  # element e of the chunk: its output coordinates by carrying, its tap-0 inputs
        if e:
            _carry(w, outs, extents)
        w(f"in{e} = U(pq + {e}) < npq")
        for a in range(nd):
            w(f"{base[a]}{e} = U({outs[a]} * {st[a]})")
    w("i = U(row // C)  # image i of this launch, n = n_first + i of the call")
    w("n = U(n_first + i)")
    w(f"src = U(x_off + U(row * {u32_product(sizes)}))")
    per_channel = u32_product(kernel)  # column rows of one channel
    w(f"dst = U(U(U(U(n // ips) * s1) + U(U(n % ips) * s2)) + U(U(U(U(row - U(i * C)) * {per_channel}) * s3) + pq))")
    for a in range(nd):
        w(f"{taps[a]} = U(0)")
        w(f"while {taps[a]} < {kernel[a]}:")
        w.indent()
    for e in range(ept):
        for a in range(nd):
            w(f"{coord[a]} = U({base[a]}{e} + U({taps[a]} * {dl[a]}))")
        w(f"v{e} = zero")
        inside = " and ".join(f"{coord[a]} >= {pd[a]} and U({coord[a]} - {pd[a]}) < {sizes[a]}"
                              for a in range(nd))
        w(f"if in{e} and {inside}:")
        w(f"    v{e} = x[U(src + {_offset(nd, coord, pd, sizes)})]")
    if ept == 1:
        w("cols[dst] = v0")
    elif ept == 4:  # 4-byte bits
        w("store_vector(cols, U(dst), (U(v0), U(v1), U(v2), U(v3)))")
    else:  # 8 halves: packed in pairs, cols is the uint32 view
        packed = ", ".join(f"U(U(v{2 * u}) | U(U(v{2 * u + 1}) << U(16)))" for u in range(4))
        w(f"store_vector(cols, U(dst // 2), ({packed}))")
    w("dst = U(dst + s3)")
    for a in range(nd - 1, -1, -1):
        w(f"{taps[a]} = U({taps[a]} + 1)")
        w.indent(-1)
    w("if U(pairs - pair) <= step:  # this thread's last pair (pair + step would pass 2**32 near the top)")
    w("    break")
    w("pair = U(pair + step)")
    return w.source


def _offset(nd: int, coord, pads, sizes) -> str:
    """The element offset of an input point in its (row's) plane or volume: the rows' part, then the
    width (2D: U(U(hh - ph) * W) + U(ww - pw))."""
    last = f"U({coord[-1]} - {pads[-1]})"
    if nd == 1:
        return last
    rows = f"U({coord[0]} - {pads[0]})"
    for a in range(1, nd - 1):
        rows = f"U(U({rows} * {sizes[a]}) + U({coord[a]} - {pads[a]}))"
    return f"U({rows} * {sizes[-1]}) + {last}"


@functools.cache
def _unfold_kernel(dtype: str, ept: int, nd: int = 2):
    """The unfold kernel of ``ept`` elements per thread for values of ``dtype`` (E > 1: their bits)."""
    namespace = {"cuda": cuda, "U": U, "store_vector": store_vector, "zero": np.dtype(dtype).type(0)}
    source = unfold_source(ept, nd)
    return runtime.jit(compile_source(source, f"<unfold {dtype} x{ept} {nd}d>", namespace)["unfold"])


def _vector_width(cols, pq_out: int, strides: tuple[int, int, int]) -> int:
    """Elements per 16-byte store when the layout allows them (module doc: tc_epilogue.vector_ok, the
    epilogue's rule for the same stores), else 1."""
    size = np.dtype(cols.dtype).itemsize
    return 16 // size if size in (2, 4) and vector_ok(cols, pq_out, *strides) else 1


def unfold_into(problem: Problem, x, cols, n0: int, nb: int, *, pq_out: int | None = None,
                images_per_block: int = 1, strides: tuple[int, int, int] | None = None,
                dtype: str | None = None) -> None:
    """Unfold images n0 .. n0+nb-1 of ``x`` (N, C, H, W) or (N, C, D, H, W), any element type: ``dtype``
    names it when it is not the problem's, e.g. uint16 for bf16 bits) into flat ``cols``: entry
    (n, c, taps, pq) at (n // ipb)*s1 + (n % ipb)*s2 + (c*taps + tap)*s3 + pq for pq < ``pq_out``
    (default: the output pixels P*Q or Do*P*Q; entries past them are 0), with ``strides`` = (s1, s2, s3)
    (default im2col's [n, C*taps, pixels]) and ipb = ``images_per_block``. 16-byte stores where the
    layout allows them (module doc)."""
    pr, geo = problem, geometry(problem)
    npq, taps = math.prod(geo.out), math.prod(geo.kernel)
    pq_out = npq if pq_out is None else pq_out
    strides = strides or (pr.c * taps * npq, 0, npq)
    ept = _vector_width(cols, pq_out, strides)
    dtype = np.dtype(dtype or pr.dtype)
    if ept > 1:  # bits: uint16 / uint32 values, packed into the uint32 view of cols
        bits = np.dtype(f"uint{8 * dtype.itemsize}")
        x, cols, dtype = x.view(bits), cols.view(np.uint32), bits
    kernel = _unfold_kernel(dtype.name, ept, geo.nd)
    flat_x = x.reshape((x.size,))
    shape = tuple(U(v) for v in (*geo.size, *geo.kernel, *geo.out, *geo.stride, *geo.padding, *geo.dilation))
    plane = math.prod(geo.size)
    for r0, rows, blocks, threads in flat_launches(nb * pr.c, pq_out // ept, whole=pr.c):  # whole images
        i0 = r0 // pr.c
        kernel[blocks, threads](flat_x, cols, U((n0 + i0) * pr.c * plane), U(i0), U(rows * pq_out // ept),
                                U(pr.c), *shape, U(pq_out), U(images_per_block), *map(U, strides))


def unfold(problem: Problem, x, cols, n0: int, nb: int) -> None:
    """Write the column buffer cols[n - n0, (c, taps), pixels] of images n0 .. n0+nb-1 of ``x``."""
    unfold_into(problem, x, cols, n0, nb)
