"""Complex-to-real FFTs of half spectra back to convolution outputs in shared memory, the way back of
:mod:`.spectrum` (same blocks of PB patches of NH x NW, two real rows a complex transform):

    for the block's patches p = (g, o, t) (t fastest; thread items spread over each step, barriers between):
        S[p, bitrev(u), v] = Y[z = (u*(NW/2+1) + v)*G + g]        Y: the GEMM's output (Re at z*sz + o*so + t,
                                                                  Im im_off further), or with ``inline``
                                                                  sum_ci X[z, t, ci] conj(W[z, o, ci])
        inverse DIT passes over S's columns (NH > 1)
        Z[j][bitrev(x)] = Xa[x] + i Xb[x]                          rows 2j, 2j+1 of S, Xa[NW - x] = conj Xa[x]
        inverse DIT passes over the rows Z
        row 2j = Re Z[j] / (NH*NW), row 2j+1 = Im Z[j] / (NH*NW)
        element (a, b) of patch p, a < LH, b < LW, at y = th*LH + a, x = tw*LW + b:
            dst[(g*O + o)*d_o + n*d_n + (y/sh)*d_y + (x/sw)*d_x] = value (+ bias[g*O + o])
            where y, x are multiples of (sh, sw) and y/sh < Y, x/sw < X

The inverse uses the conjugate twiddles. ``select`` (sh, sw) keeps every sh-th lag (the taps of a dilated
filter's gradient); outputs are rounded to the operand type as they are stored.
"""
from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from convlab import runtime
from convlab.kernels.source import Writer, compile_source

from .spectrum import _column_passes, _namespace, _opened, _row_passes, block_threads, patches_per_block
from .stages import emit_bitrev


def _load(w: Writer, inline: bool) -> None:
    """vr, vi of bin z for patch (g, o, t)."""
    if inline:  # src: the plain spectra [z][t][2ci]; spec: the filter's conj block [z][2o][2ci]
        with w.block("for ci in range(ci_n):"):
            w("xa = z * sz + t * so + ci")
            w("wa = z * a_sz + o * a_so + ci")
            w("xr = src[xa]")
            w("xi = src[xa + ci_n]")
            w("wr = spec[wa]")
            w("wi = spec[wa + ci_n]")
            w("vr += xr * wr + xi * wi")
            w("vi += xi * wr - xr * wi")
    else:
        w("at = z * sz + o * so + t")
        w("vr = src[at]")
        w("vi = src[at + im_off]")


@functools.cache
def inverse_kernel(nh: int, nw: int, pb: int, threads: int, inline: bool, kind: str | None) -> Callable:
    """The ``inverse`` kernel (module docstring) for one patch size and block."""
    w, half, rows = _opened("def inverse(src, spec, dst, bias, n0, total, o_n, t_n, th_n, tw_n, groups, sz, so, "
                            "im_off, ci_n, a_sz, a_so, lh, lw, sh, sw, y_lim, x_lim, d_o, d_n, d_y, d_x, scale, "
                            "has_bias):", nh, nw, pb)
    w("item = cuda.threadIdx.x")
    with w.block(f"while item < {pb * nh * half}:"):  # the bins, rows bit-reversed per patch
        w(f"p = p0 + item // {nh * half}")
        w(f"u = (item % {nh * half}) // {half}")
        w(f"v = item % {half}")
        w("vr = zero")
        w("vi = zero")
        with w.block("if p < total:"):
            w("t = p % t_n")
            w("o = (p // t_n) % o_n")
            w("g = p // (t_n * o_n)")
            w(f"z = (u * {half} + v) * groups + g")
            _load(w, inline)
        if nh > 1:
            emit_bitrev(w, nh, "u", "ur")
            w(f"row = (item // {nh * half}) * {nh} + ur")
        else:
            w(f"row = item // {half}")
        w(f"s2r[row * {half} + v] = vr")
        w(f"s2i[row * {half} + v] = vi")
        w(f"item += {threads}")
    _column_passes(w, nh, half, pb, threads, True)
    w("item = cuda.threadIdx.x")
    with w.block(f"while item < {rows * nw}:"):  # Z = Xa + i Xb from the Hermitian halves, bit-reversed
        w(f"j = item // {nw}")
        w(f"x = item % {nw}")
        w(f"xm = x if x < {half} else {nw} - x")
        w(f"cj = f32(1) if x < {half} else f32(-1)")
        w(f"ar = s2r[(2 * j) * {half} + xm]")
        w(f"ai = cj * s2i[(2 * j) * {half} + xm]")
        w(f"br = s2r[(2 * j + 1) * {half} + xm]")
        w(f"bi = cj * s2i[(2 * j + 1) * {half} + xm]")
        emit_bitrev(w, nw, "x", "xr")
        w(f"s1r[j * {nw} + xr] = ar - bi")
        w(f"s1i[j * {nw} + xr] = ai + br")
        w(f"item += {threads}")
    _row_passes(w, nw, rows, threads, True)
    w("item = cuda.threadIdx.x")
    with w.block(f"while item < {rows * nw}:"):  # the kept outputs of each real row
        w(f"j = item // {nw}")
        w(f"x = item % {nw}")
        for q in range(2):
            w(f"p = p0 + (2 * j + {q}) // {nh}")
            w(f"a = (2 * j + {q}) % {nh}")
            with w.block("if p < total and a < lh and x < lw:"):
                w("t = p % t_n")
                w("o = (p // t_n) % o_n")
                w("g = p // (t_n * o_n)")
                w("per = th_n * tw_n")
                w("n = n0 + t // per")
                w("y = ((t % per) // tw_n) * lh + a")
                w("xx = (t % tw_n) * lw + x")
                with w.block("if y % sh == 0 and xx % sw == 0 and y // sh < y_lim and xx // sw < x_lim:"):
                    w(f"val = s1{'ri'[q]}[item] * scale")
                    with w.block("if has_bias:"):
                        w("val += load(bias[g * o_n + o])")
                    w("dst[(g * o_n + o) * d_o + n * d_n + (y // sh) * d_y + (xx // sw) * d_x] = store(val)")
        w(f"item += {threads}")
    name = f"<convlab.kernels.fft.inverse {nh}x{nw} pb{pb} {'inline' if inline else 'gemm'} {kind}>"
    return runtime.jit(compile_source(w.source, name, _namespace(nh, nw, kind))["inverse"])


def inverse(src, spec, dst, bias, *, nf: tuple[int, int], inline: bool, kind: str | None, groups: int, o_n: int,
            t_n: int, tiles: tuple[int, int], src_strides: tuple[int, int], im_off: int, ci_n: int,
            spec_strides: tuple[int, int], tile: tuple[int, int], select: tuple[int, int],
            limits: tuple[int, int], dst_strides: tuple[int, int, int, int], n0: int = 0) -> None:
    """Launch ``inverse`` over groups x o_n x t_n patches (module docstring): ``src_strides`` (sz, so) of
    the GEMM output (inline: of the plain spectra, ``spec`` the filter's with ``spec_strides``), ``tile``
    (LH, LW) outputs a patch, ``select`` (sh, sw) the kept positions' steps, ``dst_strides`` (d_o, d_n,
    d_y, d_x); ``bias`` None or a 1-D device array."""
    total = groups * o_n * t_n
    if total == 0:
        return
    sim = runtime.target().simulator
    pb, threads = patches_per_block(*nf, sim), block_threads(sim)
    kernel = inverse_kernel(nf[0], nf[1], pb, threads, inline, kind)
    has_bias = bias is not None
    kernel[-(-total // pb), threads](src, spec, dst, dst if bias is None else bias, n0, total, o_n, t_n, tiles[0],
                                     tiles[1], groups, *src_strides, im_off, ci_n, *spec_strides, tile[0], tile[1],
                                     select[0], select[1], limits[0], limits[1], *dst_strides,
                                     np.float32(1.0 / (nf[0] * nf[1])), has_bias)
