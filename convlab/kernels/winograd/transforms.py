"""The transform kernels of the non-fused Winograd convolution, generated with every matrix entry a
compile-time constant (two kernel families; :mod:`convlab.kernels.transform.codegen` writes the products).

``patch_transform(Mh, Mw)``: gather one patch per (group g, item t, channel c), apply Mh on its rows and
Mw on its columns, scatter the transformed values, one per transform point xi = (i, j):

    for each thread (g, t, c)  [c fastest: c_fast; else t fastest]:
        n, th, tw = n0 + t // (TH*TW), (t // TW) % TH, t % TW
        d[a, b] = src[g*s_g + n*s_n + c*s_c + y*s_y + x*s_x + off],  y = th*step_h + oh + a, x = tw*step_w + ow + b
                  (0 outside 0 <= y < Y, 0 <= x < X, and for the padding threads t >= t_real, c >= c_real)
        v = Mh d Mw^T                                           (fp32)
        dst[(xi*G + g)*sz + t*st + c*sc] = v[xi]                (converted to dst's type)

It serves every gather of the three ops: an input tile (B^T, patch alpha x alpha), a filter (G, patch
r x s, items = output channels; the dgrad's rotated, channel-swapped filter through negative strides),
and wgrad's dy tile (G of F(r, m), patch m x m). ``tile_inverse(Ah, Aw)`` is the way back:

    for each thread (g, o, t)  [t fastest]:
        m[xi] = src[(xi*G + g)*sz + o*so + t]                   (fp32, one GEMM output per point)
        y = Ah m Aw^T (+ bias[g*Og + o])
        dst[(g*Og + o)*d_o + n*d_n + (th*MH + i)*d_y + (tw*MW + j)*d_x] = y[i, j]   (where within Ylim x Xlim)

with n, th, tw from t as above (wgrad's filter gradient: items are input channels, one "tile").
Operands are flat views with element strides, so NCHW and channels-last memory are read and written as
they are. Loads of fp16 / bf16 widen to fp32 (convlab.kernels.data.convert), stores round to nearest
even. Index arithmetic is signed 64-bit (offsets and the flipped filter's strides are negative); the
kernels are memory-bound gathers and scatters.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np

from convlab import runtime
from convlab.kernels.data import convert
from convlab.kernels.source import Writer, compile_source
from convlab.kernels.transform.codegen import Constants, apply_2d
from convlab.runtime import cuda

Matrix = tuple[tuple[float, ...], ...]


def frozen(matrix: np.ndarray) -> Matrix:
    """A matrix as nested tuples of floats: a cache key of the kernel factories."""
    return tuple(tuple(float(v) for v in row) for row in np.atleast_2d(matrix))


def threads_per_block() -> int:
    """64 on the simulator (each thread is a Python thread), 128 on a GPU."""
    return 64 if runtime.target().simulator else 128


def _kernel_source(signature: str) -> Writer:
    """The source of a kernel of one thread an index ``idx`` below ``total`` (a parameter named in
    ``signature``), opened: its ``def`` line and the return of the threads past the end."""
    w = Writer(signature)
    w.indent()
    w("idx = cuda.grid(1)")
    with w.block("if idx >= total:"):
        w("return")
    return w


def _compiled(w: Writer, function: str, name: str, consts: Constants, in_kind: str | None,
              out_kind: str | None) -> Callable:
    """The kernel ``function`` of the source ``w`` (``name``: its file name in tracebacks), loading
    ``in_kind`` and storing ``out_kind`` values (convlab.kernels.data.convert)."""
    namespace = {"cuda": cuda, "zero": np.float32(0), "load": convert.to_f32(in_kind),
                 "store": convert.from_f32(out_kind), **consts.namespace}
    return runtime.jit(compile_source(w.source, name, namespace)[function])


def _point_offsets(w: Writer, at: str, nh: int, nw: int) -> dict[tuple[int, int], str]:
    """The transform domain's addressing (module docstring: point xi = (i, j) of group g at (xi*G + g)*sz):
    lines setting ``at`` (this thread's element for point 0, an expression of g) and ``zs`` (G*sz); the
    offset expression of each of the nh x nw points, rows first."""
    w(f"at = {at}")
    w("zs = groups * sz")
    return {(i, j): f"at + {i * nw + j} * zs" for i in range(nh) for j in range(nw)}


@functools.cache
def patch_kernel(mh: Matrix, mw: Matrix, in_kind: str | None, out_kind: str | None, c_fast: bool) -> Callable:
    """The ``patch_transform`` kernel for one pair of matrices (module docstring)."""
    ah, aw = len(mh[0]), len(mw[0])  # patch rows, columns
    nh, nw = len(mh), len(mw)  # transformed rows, columns
    consts = Constants()
    w = _kernel_source("def patch_transform(src, dst, n0, total, groups, c_real, c_all, t_real, t_all, th_n, "
                       "tw_n, step_h, step_w, oh, ow, y_n, x_n, s_g, s_n, s_c, s_y, s_x, off, sz, st, sc):")
    inner, outer = ("c", "t") if c_fast else ("t", "c")
    w(f"{inner} = idx % {inner}_all")
    w(f"rest = idx // {inner}_all")
    w(f"{outer} = rest % {outer}_all")
    w("g = rest // " + f"{outer}_all")
    w("ok = c < c_real and t < t_real")
    w("per = th_n * tw_n")
    w("n = n0 + t // per")
    w("th = (t % per) // tw_n")
    w("tw = t % tw_n")
    w("y0 = th * step_h + oh")
    w("x0 = tw * step_w + ow")
    w("base = g * s_g + n * s_n + c * s_c + off")
    for b in range(aw):
        w(f"cx{b} = 0 <= x0 + {b} < x_n")
    for a in range(ah):
        w(f"ry = ok and 0 <= y0 + {a} < y_n")
        w(f"row = base + (y0 + {a}) * s_y")
        for b in range(aw):
            w(f"d_{a}_{b} = load(src[row + (x0 + {b}) * s_x]) if ry and cx{b} else zero")
    apply_2d(w, consts, np.array(mh), np.array(mw), "d", "v")
    for (i, j), at in _point_offsets(w, "g * sz + t * st + c * sc", nh, nw).items():
        w(f"dst[{at}] = store(v_{i}_{j})")
    name = f"<convlab.kernels.winograd.transforms patch {nh}x{nw}<-{ah}x{aw} {in_kind}->{out_kind}>"
    return _compiled(w, "patch_transform", name, consts, in_kind, out_kind)


@functools.cache
def inverse_kernel(ah_: Matrix, aw_: Matrix, out_kind: str | None) -> Callable:
    """The ``tile_inverse`` kernel for one pair of output matrices (module docstring)."""
    nh, nw = len(ah_[0]), len(aw_[0])  # transform points per axis
    mh, mw = len(ah_), len(aw_)  # outputs per axis
    consts = Constants()
    w = _kernel_source("def tile_inverse(src, dst, bias, n0, total, groups, o_n, t_n, th_n, tw_n, sz, so, y_lim, "
                       "x_lim, d_o, d_n, d_y, d_x, has_bias):")
    w("t = idx % t_n")
    w("rest = idx // t_n")
    w("o = rest % o_n")
    w("g = rest // o_n")
    w("per = th_n * tw_n")
    w("n = n0 + t // per")
    w("y0 = ((t % per) // tw_n) * " + str(mh))
    w("x0 = (t % tw_n) * " + str(mw))
    for (i, j), at in _point_offsets(w, "g * sz + o * so + t", nh, nw).items():
        w(f"m_{i}_{j} = src[{at}]")
    apply_2d(w, consts, np.array(ah_), np.array(aw_), "m", "y")
    w("bv = load(bias[g * o_n + o]) if has_bias else zero")
    w("base = (g * o_n + o) * d_o + n * d_n")
    for i in range(mh):
        with w.block(f"if y0 + {i} < y_lim:"):
            w(f"row = base + (y0 + {i}) * d_y")
            for j in range(mw):
                with w.block(f"if x0 + {j} < x_lim:"):
                    w(f"dst[row + (x0 + {j}) * d_x] = store(y_{i}_{j} + bv)")
    name = f"<convlab.kernels.winograd.transforms inverse {mh}x{mw}<-{nh}x{nw} {out_kind}>"
    return _compiled(w, "tile_inverse", name, consts, out_kind, out_kind)


def patch_transform(mh: np.ndarray, mw: np.ndarray, src: Any, dst: Any, *, in_kind: str | None,
                    out_kind: str | None, c_fast: bool, groups: int, c_real: int, c_all: int, t_real: int,
                    t_all: int, tiles: tuple[int, int], step: tuple[int, int], origin: tuple[int, int],
                    bounds: tuple[int, int], src_strides: tuple[int, int, int, int, int], off: int,
                    dst_strides: tuple[int, int, int], n0: int = 0) -> None:
    """Launch ``patch_transform`` (module docstring) over groups x t_all x c_all threads; ``src`` and
    ``dst`` 1-D device arrays (``runtime.kernel_view`` of a bf16 one), ``src_strides`` (s_g, s_n, s_c,
    s_y, s_x), ``dst_strides`` (sz, st, sc) in elements."""
    total = groups * t_all * c_all
    if total == 0:
        return
    kernel = patch_kernel(frozen(mh), frozen(mw), in_kind, out_kind, c_fast)
    threads = threads_per_block()
    kernel[math.ceil(total / threads), threads](
        src, dst, n0, total, groups, c_real, c_all, t_real, t_all, tiles[0], tiles[1], step[0], step[1],
        origin[0], origin[1], bounds[0], bounds[1], *src_strides, off, *dst_strides)


def tile_inverse(ah: np.ndarray, aw: np.ndarray, src: Any, dst: Any, bias: Any, *, out_kind: str | None,
                 groups: int, o_n: int, t_n: int, tiles: tuple[int, int], src_strides: tuple[int, int],
                 limits: tuple[int, int], dst_strides: tuple[int, int, int, int], n0: int = 0) -> None:
    """Launch ``tile_inverse`` (module docstring) over groups x o_n x t_n threads: ``src_strides``
    (sz, so), ``dst_strides`` (d_o, d_n, d_y, d_x) in elements; ``bias`` None or a 1-D device array."""
    total = groups * o_n * t_n
    if total == 0:
        return
    kernel = inverse_kernel(frozen(ah), frozen(aw), out_kind)
    threads = threads_per_block()
    has_bias = bias is not None
    kernel[math.ceil(total / threads), threads](
        src, dst, dst if bias is None else bias, n0, total, groups, o_n, t_n, tiles[0], tiles[1],
        *src_strides, limits[0], limits[1], *dst_strides, has_bias)
