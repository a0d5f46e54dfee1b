"""The fold (col2im) kernel: the column buffer of a GEMM gathered back into dx, with the bias, for N = 1,
2 or 3 spatial axes (convlab.kernels.conv.axes; 2D shown, 3D adds a depth tap t and an output depth o,
1D keeps the width):

    dx[n, c, h, w] = bias[c] + sum over (r, s) with h = p*sh - ph + r*dh, w = q*sw - pw + s*dw of
                     cols[n][(c, r, s), (p, q)]          (p, q integer and inside the output)

    for each (row = (n, c), pixel (h, w) of dx) pair, grid-stride over the threads:
        for r < R while r*dh <= h + ph:  p = (h + ph - r*dh) / sh, a tap when it divides and p < P
            for s < S while s*dw <= w + pw:  q likewise
                acc += cols[tap (c, r, s), pixel (p, q)]
        dx[n, c, h, w] = acc (+ bias[c])

One thread per (row, pixel) of dx in grid-stride launches (convlab.kernels.conv.columns.flat_launches),
summing its taps in a fixed order (no atomics: deterministic). ``pixel_major`` columns are [(p, q),
(c, r, s)] per image (the tensor-core plugin's strided dgrad: dy's NHWC rows times the filter).

A float16 / bfloat16 dx (the tensor-core plugin's, bf16 as uint16 bits) folds float32 columns: the sum and
the bias (read as float32) in float32, one rounding at the store (:mod:`convlab.kernels.data.convert`).
float32 and float64 fold columns of their own type, with no conversion in the source.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from convlab import runtime
from convlab.kernels.arch.intrinsics import u32 as U
from convlab.kernels.conv.axes import geometry, names, u32_product
from convlab.kernels.conv.columns import flat_launches, geometry_params
from convlab.kernels.data import convert
from convlab.kernels.source import Writer, compile_source
from convlab.problem import Problem
from convlab.runtime import cuda


def fold_source(nd: int = 2, half: bool = False) -> str:
    """Source of ``fold(cols, dx, bias, dx_off, cols_off, pairs, C, <geometry>, has_bias, cst, tst,
    pst)`` for ``nd`` axes: for pairs i = row*pixels + pixel < ``pairs`` (row = n*C + c counted from
    dx_off and cols_off), dx[dx_off + i] = (bias[c]) + the sum of its taps in cols, the tap (c, taps)
    of output pixel ``out`` of image n at cols_off + n*C*taps*outs + c*cst + tap*tst + out*pst.
    ``half``: dx and bias of a half kind, read through ``load`` and written through ``store`` (names the
    namespace binds: convert.to_f32 / from_f32), the columns and the sum float32."""
    outs, taps = names(nd, "out"), names(nd, "tap")
    sizes, kernel, extents = names(nd, "size"), names(nd, "kernel"), names(nd, "extent")
    st, pd, dl = names(nd, "stride"), names(nd, "pad"), names(nd, "dil")
    ins, rel = ("z", "h", "w")[3 - nd:], ("zz", "hh", "ww")[3 - nd:]
    padded = ("zp", "hp", "wp")[3 - nd:]  # input coordinate + padding = output * stride + tap * dilation
    w = Writer(f"def fold(cols, dx, bias, dx_off, cols_off, pairs, C, {geometry_params(nd)}, has_bias, cst, "
               "tst, pst):")
    w.indent()
    w("pair = U(U(U(cuda.blockIdx.x) * U(cuda.blockDim.x)) + U(cuda.threadIdx.x))")
    w("step = U(U(cuda.gridDim.x) * U(cuda.blockDim.x))")
    w(f"npq = {u32_product(extents) if nd > 1 else 'U(Q)'}")
    plane = u32_product(sizes)
    with w.block("while pair < pairs:"):
        w(f"row = U(pair // {plane})")
        rest = "hw"
        w(f"{rest} = U(pair - U(row * {plane}))")
        for a in range(nd - 1):
            inner = u32_product(sizes[a + 1:])
            w(f"{ins[a]} = U({rest} // {inner})")
            w(f"{padded[a]} = U({ins[a]} + {pd[a]})")
            if a < nd - 2:
                w(f"rem{a} = U({rest} - U({ins[a]} * {inner}))")
                rest = f"rem{a}"
        last = f"U({rest} - U({ins[-2]} * {sizes[-1]}))" if nd > 1 else rest
        w(f"{padded[-1]} = U({last} + {pd[-1]})")
        w("acc = zero")
        w("n = U(row // C)")
        w(f"src = U(cols_off + U(U(U(n * U({' * '.join(('C',) + kernel)})) * npq) + U(U(row - U(n * C)) * cst)))")
        for a in range(nd):
            w(f"{taps[a]} = U(0)")
            w(f"while {taps[a]} < {kernel[a]} and U({taps[a]} * {dl[a]}) <= {padded[a]}:")
            w.indent()
            w(f"{rel[a]} = U({padded[a]} - U({taps[a]} * {dl[a]}))")
            w(f"{outs[a]} = U({rel[a]} // {st[a]})")
            w(f"if U({outs[a]} * {st[a]}) == {rel[a]} and {outs[a]} < {extents[a]}:")
            w.indent()
        w(f"tap = U({_flat(taps, kernel)} * tst)")
        w(f"acc += cols[U(src + tap + U({_flat(outs, extents)} * pst))]")
        for a in range(nd - 1, -1, -1):
            w.indent(-1)
            w(f"{taps[a]} = U({taps[a]} + 1)")
            w.indent(-1)
        with w.block("if has_bias:"):
            w("acc += load(bias[U(row % C)])" if half else "acc += bias[U(row % C)]")
        w("dx[U(dx_off + pair)] = store(acc)" if half else "dx[U(dx_off + pair)] = acc")
        with w.block("if U(pairs - pair) <= step:  # this thread's last pair (pair + step could pass 2**32)"):
            w("break")
        w("pair = U(pair + step)")
    return w.source


def _flat(index: tuple[str, ...], extents: tuple[str, ...]) -> str:
    """The row-major flat index of ``index`` over ``extents`` in uint32 (2D: U(U(r * S) + s))."""
    text = index[0]
    for i, e in zip(index[1:], extents[1:]):
        text = f"U(U({text} * {e}) + {i})"
    return text


@functools.cache
def _fold_kernel(dtype: str, nd: int = 2):
    """The fold of a ``dtype`` dx (float16 / bfloat16: from float32 columns) over ``nd`` axes."""
    kind = convert.half_kind(dtype)
    namespace = {"cuda": cuda, "U": U, "zero": np.dtype("float32" if kind else dtype).type(0)}
    if kind:
        namespace.update(load=convert.to_f32(kind), store=convert.from_f32(kind))
    source = fold_source(nd, half=kind is not None)
    return runtime.jit(compile_source(source, f"<fold {dtype} {nd}d>", namespace)["fold"])


def fold(problem: Problem, cols, dx, bias, n0: int, nb: int, pixel_major: bool = False) -> None:
    """Gather the column buffer of images n0 .. n0+nb-1 into ``dx`` (N, C, H, W) or (N, C, D, H, W),
    adding ``bias``. ``cols`` per image: [(c, taps), pixels] (the explicit-GEMM plugins' GEMM), or
    ``pixel_major`` [pixels, (c, taps)] (the tensor-core plugin's strided dgrad: dy's channels-last rows
    times the filter). ``cols`` in dx's dtype, or float32 for a float16 / bfloat16 dx (dx and bias as
    kernels hold them: bfloat16 as uint16 bits)."""
    pr, geo = problem, geometry(problem)
    has_bias = bias is not None
    flat_dx = dx.reshape((dx.size,))
    kernel = _fold_kernel(pr.dtype, geo.nd)
    taps, pq, plane = math.prod(geo.kernel), math.prod(geo.out), math.prod(geo.size)
    strides = (U(taps), U(1), U(pr.c * taps)) if pixel_major else (U(taps * pq), U(pq), U(1))  # c, tap, pixel
    shape = tuple(U(v) for v in (*geo.size, *geo.kernel, *geo.out, *geo.stride, *geo.padding, *geo.dilation))
    for r0, rows, blocks, threads in flat_launches(nb * pr.c, plane, whole=pr.c):  # whole images
        kernel[blocks, threads](cols, flat_dx, bias if has_bias else flat_dx, U((n0 * pr.c + r0) * plane),
                                U(r0 * taps * pq), U(rows * plane), U(pr.c), *shape, U(has_bias), *strides)
