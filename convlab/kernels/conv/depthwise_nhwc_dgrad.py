"""Channels-last dgrad kernel of the depthwise plugin for any stride and channel multiplier M = K / C
(NHWC memory; 3D NDHWC; 1D as H = 1): no shared memory, each thread sums a strip of VQ inputs' gradients
x V channels in registers; generated per layer shape and tile, every size a literal (as ``depthwise_nhwc``,
whose kernel frame, loads and store it shares).

    dx[n, z, h, w, c] = bias[c] + sum_{m < M, dt, r, s}  dy[n, oz, oh, ow, c*M + m] * w[c*M + m, 0, dt, r, s]
        over the taps with  z + pd - dt*dd = oz*sd,  h + ph - r*dh = oh*sh,  w + pw - s*dw = ow*sw
        and 0 <= oz < OD, 0 <= oh < P, 0 <= ow < Q            (2D: no z, dt; the bias is the transpose's)

Memory, each operand read as a flat 1-D view: dy [n, oz, oh, ow, k] (K = C * M channels), w [k, 0, dt, r, s],
dx [n, z, h, w, c].

Thread: channels c_v = c0 + v (v < V) of dx columns w0 + q (q < VQ) of one row h (depth z). VQ is a
multiple of sw and w0 = qb * VQ, so a column's residue (w0 + q + pw - s*dw) mod sw equals (q + pw - s*dw)
mod sw: which taps s reach column q and the dy column they read, jb + (q + pw - s*dw) // sw with
jb = w0 / sw, are literals, and each dy column j a strip reads is loaded once per filter row and m. Rows
(and depths) test their residue at run time, the same for every lane of a strip (lanes take consecutive
channels of one pixel): a row h reads dy row (h + ph - r*dh) / sh for the r where that is a whole number
inside dy, no zero is multiplied. With M > 1 the lanes' dy and filter reads step by M channels.

Stride 1 and M = 1 would also run here; the plugin keeps that case on the forward kernel of the flipped
filter (``depthwise_nhwc``), whose strips reuse each input column across outputs.
"""
from __future__ import annotations

import functools

from convlab.kernels.conv.depthwise_nhwc import (finish_strip, guarded_loads, open_strip, planes, stored_channel,
                                                 strip_kernel)
from convlab.kernels.epilogue import register_cache
from convlab.kernels.source import Writer


def column_taps(vq: int, s_: int, sw: int, pw: int, dw: int) -> dict[int, list[tuple[int, int]]]:
    """{dy column j (from jb): [(q, s), ...]}: the strip's columns q that tap s reaches through column j,
    j = (q + pw - s*dw) // sw for the (q, s) whose residue is 0."""
    out: dict[int, list[tuple[int, int]]] = {}
    for q in range(vq):
        for s in range(s_):
            if (q + pw - s * dw) % sw == 0:
                out.setdefault((q + pw - s * dw) // sw, []).append((q, s))
    return out


def _channels(w: Writer, v_: int, out_c: int, mult: int, taps: int) -> None:
    """k{v}, kl{v}: the stored dx channel and the one its loads use (``depthwise_nhwc.stored_channel``);
    e{m}_{v}: dy's channel kl{v} * M + m, wb{m}_{v}: its filter's first tap."""
    for v in range(v_):
        stored_channel(w, v, v_, out_c)
        for m in range(mult):
            w(f"e{m}_{v} = kl{v}" if mult == 1 else f"e{m}_{v} = u32(u32(kl{v} * u32({mult})) + u32({m}))")
            w(f"wb{m}_{v} = u32(e{m}_{v} * u32({taps}))")


def _row(w: Writer, tile: tuple, filt: tuple, in_c: int, mult: int, r: int, tap0: str, rd: str) -> None:
    """Filter row r of a dy row ``rowb`` that it reaches: per m, the row's taps, the dy columns the strip
    reads (0 outside dy) and the products."""
    _, vq, _, v_ = tile
    s_, sw, pw, dw = filt[1], filt[3], filt[5], filt[7]
    by_column = column_taps(vq, s_, sw, pw, dw)
    used = sorted({s for uses in by_column.values() for _, s in uses})
    low = min(by_column)
    for m in range(mult):
        for s in used:
            for v in range(v_):
                w(f"w{s}_{v} = {rd}(wt[i64(u32(wb{m}_{v} + {tap0}u32({r * s_ + s})))])")
        for j, uses in sorted(by_column.items()):
            at = f"u32(u32(rowb + u32(i32(jb) + i32({j}))) * u32({in_c}))"
            guarded_loads(w, f"d{j - low}", v_, f"ok{j - low}", at, "x", f"e{m}_", rd)
            for q, s in uses:
                for v in range(v_):
                    w(f"a{q}_{v} += d{j - low}_{v} * w{s}_{v}")


@functools.cache
def dgrad_strip_function(dtype: str, tile: tuple[int, int, int, int], filt: tuple[int, ...],
                         sizes: tuple[int, ...], depth: tuple[int, ...], has_bias: bool):
    """``strip(x, wt, bias, out, ep, n, oz, oh, ow0, k0)``: one thread's dx strip (module docstring);
    ``x`` is dy, ``out`` dx, arguments as :func:`nhwc_dgrad_kernel`'s."""
    _, vq, _, v_ = tile
    r_, s_, sh, sw, ph, pw, dh, dw = filt
    in_h, in_w, out_h, out_w, in_c, out_c, mult = sizes
    dt_, sd, pd, dd, in_d, out_d = depth or (1, 1, 0, 1, 1, 1)
    if vq % sw:
        raise ValueError(f"the strip's VQ ({vq}) must be a multiple of the stride along W ({sw})")
    w, rd = open_strip(dtype, tile, lambda w: _channels(w, v_, out_c, mult, dt_ * r_ * s_))
    w(f"jb = u32(ow0 // u32({sw}))")
    by_column = column_taps(vq, s_, sw, pw, dw)
    low = min(by_column)
    for j in by_column:
        w(f"ok{j - low} = u32(i32(jb) + i32({j})) < u32({in_w})")

    def divides(var: str, step: int, limit: int) -> str:
        """var (i32) >= 0, a multiple of ``step`` and var / step < ``limit``."""
        inside = f"u32({var}) < u32({limit * step})"
        return inside if step == 1 else f"{inside} and u32(u32({var}) % u32({step})) == u32(0)"

    position = f"tz = i32(i32(i32(oz) + i32({pd})) - i32(i32(dt) * i32({dd})))"
    first_tap = f"u32(dt * u32({r_ * s_}))"
    with planes(w, depth, position, divides("tz", sd, in_d), f"u32(u32(tz) // u32({sd}))", first_tap):
        for r in range(r_):
            w(f"th = i32(i32(oh) + i32({ph - r * dh}))")
            with w.block(f"if {divides('th', sh, in_h)}:"):
                w(f"rowb = u32(u32(u32(plane * u32({in_h})) + u32(u32(th) // u32({sh}))) * u32({in_w}))")
                _row(w, tile, filt, in_c, mult, r, "tap0 + " if depth else "", rd)
    return finish_strip(w, dtype, tile, (out_h, out_w, out_c, out_d if depth else 0), has_bias, None)

@functools.cache
def nhwc_dgrad_kernel(dtype: str, tile: tuple[int, int, int, int], filt: tuple[int, ...], sizes: tuple[int, ...],
                      has_bias: bool, depth: tuple[int, ...] = ()):
    """The channels-last dgrad kernel ``kernel(dy, w, bias, dx)`` of one tile (CB, VQ, ROWS, V; VQ a
    multiple of sw), the forward's filter (R, S, sh, sw, ph, pw, dh, dw), ``sizes`` (P, Q, H, W, K, C, M):
    dy's and dx's sizes, and ``depth`` (3D: T, sd, pd, dd, OD, D; 2D: empty). Arguments: flat 1-D views of
    dy (NHWC / NDHWC memory), w, bias ((C,); read only when ``has_bias``, else any array) and dx, of
    ``dtype`` (bfloat16: uint16 bits). Launch: ``depthwise_nhwc.grid`` over dx, CB * ROWS threads."""
    strip = dgrad_strip_function(dtype, tile, filt, sizes, depth, has_bias)
    return strip_kernel(strip, tile, sizes, depth, False)


register_cache(nhwc_dgrad_kernel.cache_clear)
register_cache(dgrad_strip_function.cache_clear)
