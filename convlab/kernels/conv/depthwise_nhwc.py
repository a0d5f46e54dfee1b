"""Channels-last forward kernel of the depthwise plugin (NHWC memory; 3D NDHWC; 1D as H = 1): no shared
memory, each thread sums a strip of VQ outputs x V channels in registers; generated per layer shape and
tile, every size a literal (as ``depthwise_conv``).

Memory, each operand read as a flat 1-D view:

    x    [n, iz, ih, iw, c]     (2D: no iz)          out  [n, oz, oh, ow, k]     k < K = C * M
    w    [k, 0, dt, r, s]       (KCTRS with C/groups = 1: the same memory in either layout)

Block: CB x ROWS threads, thread (row, lane) = divmod(tid, CB). Grid: x = strips / ROWS, y = channel
chunks of CB * V, z = image n. The thread owns channels k_v = k0 + v (v < V), k0 = (y * CB + lane) * V,
and strip x * ROWS + row = (oz, oh, qb): outputs ow = ow0 + q, ow0 = qb * VQ, q < VQ, of row oh (depth oz):

    acc[q][v] = 0
    for dt < T with iz = oz*sd - pd + dt*dd inside the input (2D: T = 1, no test):
        for r < R with ih = oh*sh - ph + r*dh inside the input (unrolled, as everything below):
            wv[s][v] = w[k_v, 0, dt, r, s]
            xv[j][v] = x[n, iz, ih, ow0*sw - pw + j, k_v // M]   each column j = q*sw + s*dw the strip
                                                                  uses, once (0 outside: the padding)
            acc[q][v] += xv[q*sw + s*dw][v] * wv[s][v]
    out[n, oz, oh, ow0 + q, k_v] = acc[q][v] + bias[k_v]        for ow0 + q < Q, k_v < K
        (fused: epilogue(acc + bias, k_v, residual at the same offset), convlab.kernels.epilogue.fused_store)

A warp's lanes take consecutive channel vectors, so every load and store is coalesced along C (the
contiguous axis). A strip's row of (VQ-1)*sw + (S-1)*dw + 1 inputs serves its VQ outputs (stride 1, 3
taps, VQ = 4: 1.5 loads per output and filter row instead of 3); reuse across threads (neighbouring
strips, filter rows) is left to L1 / L2. A tail thread (K not a multiple of V) reads channel K - 1 for
its missing channels and stores only k_v < K. fp16 / bf16 (bf16 as uint16 bits): each read widens to
float32, the sums are float32, the store rounds (``depthwise_common``).
"""
from __future__ import annotations

import contextlib
import functools
from typing import Callable, Iterator

import numpy as np
from numba import uint32

from convlab import runtime
from convlab.epilogue import Epilogue
from convlab.runtime import cuda

from convlab.kernels.conv.depthwise_common import device, entry_kernel
from convlab.kernels.data.convert import from_f32, half_kind, to_f32
from convlab.kernels.epilogue import compute_dtype, fused_store, register_cache
from convlab.kernels.source import Writer


def columns(vq: int, s_: int, sw: int, dw: int) -> list[int]:
    """The input columns j (from ow0*sw - pw) a strip of ``vq`` outputs reads: q*sw + s*dw."""
    return sorted({q * sw + s * dw for q in range(vq) for s in range(s_)})


def stored_channel(w: Writer, v: int, v_: int, out_c: int) -> None:
    """k{v}, the stored channel k0 + v of a thread's V, and kl{v}, the channel its loads use: K - 1 for a
    missing channel of a tail thread (K = ``out_c`` not a multiple of V), in bounds."""
    w(f"k{v} = u32(k0 + u32({v}))")
    tail = out_c % v_ != 0 and v > 0
    w(f"kl{v} = k{v} if k{v} < u32({out_c}) else u32({out_c - 1})" if tail else f"kl{v} = k{v}")


def channel_lines(w: Writer, v_: int, out_c: int, mult: int, taps: int) -> None:
    """k{v} and kl{v} (:func:`stored_channel`), c{v} (input channel), wb{v} (its filter's first tap)."""
    for v in range(v_):
        stored_channel(w, v, v_, out_c)
        w(f"c{v} = kl{v}" if mult == 1 else f"c{v} = u32(kl{v} // u32({mult}))")
        w(f"wb{v} = u32(kl{v} * u32({taps}))")


def strip_origin(w: Writer, filt: tuple, vq: int, in_w: int) -> None:
    """iw0, ih0: the input origin of the strip at (oh, ow0) of filter ``filt`` (R, S, sh, sw, ph, pw, dh,
    dw); ok{j}: whether its input column j lies inside the row."""
    s_, sh, sw, ph, pw, dw = filt[1], filt[2], filt[3], filt[4], filt[5], filt[7]
    w(f"iw0 = i32(i32(i32(ow0) * i32({sw})) - i32({pw}))")
    w(f"ih0 = i32(i32(i32(oh) * i32({sh})) - i32({ph}))")
    for j in columns(vq, s_, sw, dw):
        w(f"ok{j} = u32(i32(iw0 + i32({j}))) < u32({in_w})")


def guarded_loads(w: Writer, dst: str, v_: int, cond: str, at: str, array: str, chan: str, rd: str) -> None:
    """{dst}_{v} = rd(array[at + {chan}{v}]) for v < V where ``cond`` holds, else 0 (``at``: the pixel's
    first element, computed only where it is read; ``rd``: the widening of a half type, or '')."""
    for v in range(v_):
        w(f"{dst}_{v} = zero")
    with w.block(f"if {cond}:"):
        w(f"pix = {at}")
        for v in range(v_):
            w(f"{dst}_{v} = {rd}({array}[i64(u32(pix + {chan}{v}))])")


def column_loads(w: Writer, cols: list[int], v_: int, in_c: int, rd: str) -> None:
    """x{j}_{v} = x[row rowb, column iw0 + j, channel c{v}] for each column j (0 unless ok{j}), read
    through ``rd`` (the widening of a half type, or '')."""
    for j in cols:
        guarded_loads(w, f"x{j}", v_, f"ok{j}", f"u32(u32(rowb + u32(iw0 + i32({j}))) * u32({in_c}))", "x", "c", rd)


def _filter_row(w: Writer, tile: tuple, filt: tuple, in_c: int, r: int, tap0: str, rd: str, flip: bool) -> None:
    """One filter row r: its S*V taps (``flip``: tap (R-1-r, S-1-s)), the strip's input columns of row
    ``rowb`` and the products."""
    _, vq, _, v_ = tile
    r_, s_, sw, dw = filt[0], filt[1], filt[3], filt[7]
    for s in range(s_):
        tap = (r_ - 1 - r) * s_ + s_ - 1 - s if flip else r * s_ + s
        for v in range(v_):
            w(f"w{s}_{v} = {rd}(wt[i64(u32(wb{v} + {tap0}u32({tap})))])")
    column_loads(w, columns(vq, s_, sw, dw), v_, in_c, rd)
    for q in range(vq):
        for s in range(s_):
            for v in range(v_):
                w(f"a{q}_{v} += x{q * sw + s * dw}_{v} * w{s}_{v}")


@functools.cache
def strip_function(dtype: str, tile: tuple[int, int, int, int], filt: tuple[int, ...], sizes: tuple[int, ...],
                   depth: tuple[int, ...], has_bias: bool, epi: Epilogue | None, flip: bool = False):
    """``strip(x, wt, bias, out, ep, n, oz, oh, ow0, k0)``: one thread's strip (module docstring), stored
    (through the epilogue's ``put`` when ``epi``); arguments as :func:`nhwc_kernel`'s."""
    _, vq, _, v_ = tile
    r_, s_, sh, sw, ph, pw, dh, dw = filt
    in_h, in_w, out_h, out_w, in_c, out_c, mult = sizes
    dt_, sd, pd, dd, in_d, out_d = depth or (1, 1, 0, 1, 1, 1)
    w, rd = open_strip(dtype, tile, lambda w: channel_lines(w, v_, out_c, mult, dt_ * r_ * s_))
    strip_origin(w, filt, vq, in_w)
    position = f"iz = i32(i32(i32(i32(oz) * i32({sd})) - i32({pd})) + i32(i32(dt) * i32({dd})))"
    first_tap = f"u32(u32(u32({dt_ - 1}) - dt) * u32({r_ * s_}))" if flip else f"u32(dt * u32({r_ * s_}))"
    with planes(w, depth, position, f"u32(iz) < u32({in_d})", "u32(iz)", first_tap):
        for r in range(r_):
            w(f"ih = i32(ih0 + i32({r * dh}))")
            with w.block(f"if u32(ih) < u32({in_h}):"):
                w(f"rowb = u32(u32(u32(plane * u32({in_h})) + u32(ih)) * u32({in_w}))")
                _filter_row(w, tile, filt, in_c, r, "tap0 + " if depth else "", rd, flip)
    return finish_strip(w, dtype, tile, (out_h, out_w, out_c, out_d if depth else 0), has_bias, epi)


@contextlib.contextmanager
def planes(w: Writer, depth: tuple[int, ...], position: str, inside: str, plane_index: str,
           first_tap: str) -> Iterator[None]:
    """The frame of a strip's unrolled filter rows: 2D, ``plane = n``; 3D, a loop over the depth taps dt
    whose plane exists: ``position`` (a line), then where ``inside`` holds, ``plane`` = n * D_in +
    ``plane_index`` and ``tap0`` = ``first_tap`` (the tap index of (dt, 0, 0))."""
    if not depth:
        w("plane = n")
        yield
        return
    w("dt = u32(0)")
    w(f"while dt < u32({depth[0]}):")
    w.indent()
    w(position)
    w(f"if {inside}:")
    w.indent()
    w(f"plane = u32(u32(n * u32({depth[4]})) + {plane_index})")
    w(f"tap0 = {first_tap}")
    yield
    w.indent(-1)
    w("dt = u32(dt + u32(1))")
    w.indent(-1)


def finish_strip(w: Writer, dtype: str, tile: tuple, out: tuple[int, int, int, int], has_bias: bool,
                 epi: Epilogue | None):
    """The strip's store (``out``: H, W, C of the output and its depth, 0 in 2D) and its device function."""
    kind = half_kind(dtype)
    _store(w, tile, *out, has_bias, "rd" if kind else "", kind, epi is not None)
    return device(w, "strip", {"i32": np.int32, "zero": compute_dtype(dtype).type(0), "rd": to_f32(kind),
                               "wr": from_f32(kind), "put": None if epi is None else fused_store(dtype, epi)})


def open_strip(dtype: str, tile: tuple, channels: Callable[[Writer], None]) -> tuple[Writer, str]:
    """A strip's header, its channel lines (``channels``) and its VQ x V accumulators at zero; and the name
    of its reads' widening (``rd``, '' for float32 / float64)."""
    _, vq, _, v_ = tile
    w = Writer("def strip(x, wt, bias, out, ep, n, oz, oh, ow0, k0):")
    w.indent()
    channels(w)
    for q in range(vq):
        w(f"{names_of(q, v_)} = {', '.join(['zero'] * v_)}")
    return w, "rd" if half_kind(dtype) else ""


def names_of(q: int, v_: int) -> str:
    return ", ".join(f"a{q}_{v}" for v in range(v_))


def _store(w: Writer, tile: tuple, out_h: int, out_w: int, out_c: int, out_d: int, has_bias: bool, rd: str,
           kind: str | None, fused: bool) -> None:
    """out[n, oz, oh, ow0 + q, k_v] = acc + bias (or the epilogue's put) for the outputs inside."""
    _, vq, _, v_ = tile
    for v in range(v_):
        w(f"b{v} = {rd}(bias[kl{v}])" if has_bias else f"b{v} = zero")
    plane = f"u32(u32(n * u32({out_d})) + oz)" if out_d else "n"
    w(f"obase = u32(u32(u32({plane} * u32({out_h})) + oh) * u32({out_w}))")
    for q in range(vq):
        with w.block(f"if u32(ow0 + u32({q})) < u32({out_w}):"):
            w(f"oi = u32(u32(obase + u32(ow0 + u32({q}))) * u32({out_c}))")
            for v in range(v_):
                with w.block(None if v == 0 or out_c % v_ == 0 else f"if k{v} < u32({out_c}):"):
                    at = f"i64(u32(oi + k{v}))"
                    if fused:
                        w(f"put(out, {at}, a{q}_{v} + b{v}, k{v}, ep)")
                    else:
                        w(f"out[{at}] = {'wr' if kind else ''}(a{q}_{v} + b{v})")


@functools.cache
def nhwc_kernel(dtype: str, tile: tuple[int, int, int, int], filt: tuple[int, ...], sizes: tuple[int, ...],
                has_bias: bool, depth: tuple[int, ...] = (), epi: Epilogue | None = None, flip: bool = False):
    """The channels-last forward kernel ``kernel(x, w, bias, out)`` of one tile (CB, VQ, ROWS, V), filter
    (R, S, sh, sw, ph, pw, dh, dw) and layer ``sizes`` (in_h, in_w, out_h, out_w, C, K, M); ``depth`` (3D:
    T, sd, pd, dd, in_d, out_d; 2D: empty). Arguments: flat 1-D views of x (NHWC / NDHWC memory), w,
    bias ((K,); read only when ``has_bias``, else any array) and out (NHWC / NDHWC memory), of ``dtype``
    (bfloat16: uint16 bits). ``epi``: fused, ``kernel(x, w, bias, out, r, scale, shift)`` (r: the flat
    residual in out's memory order). ``flip``: the filter read flipped in every spatial axis, w[k, 0,
    T-1-dt, R-1-r, S-1-s] (the stride-1, M = 1 dgrad: dx is dy correlated with the flipped filter, padding
    dil*(taps-1) - pad). Launch: :func:`grid` blocks of CB * ROWS threads."""
    strip = strip_function(dtype, tile, filt, sizes, depth, has_bias, epi, flip)
    return strip_kernel(strip, tile, sizes, depth, epi is not None)


def strip_kernel(strip, tile: tuple[int, int, int, int], sizes: tuple[int, ...], depth: tuple[int, ...],
                 fused: bool):
    """The kernel around a device ``strip(x, wt, bias, out, ep, n, oz, oh, ow0, k0)``: thread (row, lane)
    of block (x, y, z) runs strip x * ROWS + row = (oz, oh, ow0 / VQ) of the output's ``sizes`` (as
    :func:`nhwc_kernel`'s; ``depth``'s last entry the output depth, 2D: empty) at channels k0 = (y * CB +
    lane) * V of image z (module docstring)."""
    cb, vq, rows, v_ = tile
    out_h, out_w, out_c = sizes[2], sizes[3], sizes[5]
    q_blocks = -(-out_w // vq)
    uCB, uROWS, uV, uVQ, uK = (np.uint32(v) for v in (cb, rows, v_, vq, out_c))
    uQB, uPQB = np.uint32(q_blocks), np.uint32(out_h * q_blocks)
    uSTRIPS = np.uint32((depth[5] if depth else 1) * out_h * q_blocks)
    DEEP = bool(depth)

    @runtime.jit(device=True, inline="always")
    def body(x, wt, bias, out, ep):
        tid = uint32(cuda.threadIdx.x)
        row = uint32(tid // uCB)
        k0 = uint32(uint32(uint32(uint32(cuda.blockIdx.y) * uCB) + uint32(tid - uint32(row * uCB))) * uV)
        s = uint32(uint32(uint32(cuda.blockIdx.x) * uROWS) + row)
        if k0 < uK and s < uSTRIPS:
            oz = uint32(s // uPQB) if DEEP else uint32(0)
            rem = uint32(s - uint32(oz * uPQB))
            oh = uint32(rem // uQB)
            strip(x, wt, bias, out, ep, uint32(cuda.blockIdx.z), oz, oh,
                  uint32(uint32(rem - uint32(oh * uQB)) * uVQ), k0)

    return entry_kernel(body, fused)


def grid(tile: tuple[int, int, int, int], out_h: int, out_w: int, out_c: int, out_d: int, n: int) -> tuple:
    """(blocks along strips, channel chunks, images) of :func:`nhwc_kernel` (2D: ``out_d`` 1)."""
    cb, vq, rows, v_ = tile
    strips = out_d * out_h * -(-out_w // vq)
    return -(-strips // rows), -(-out_c // (cb * v_)), n


register_cache(nhwc_kernel.cache_clear)  # its fused kernels are built from the epilogue's code
register_cache(strip_function.cache_clear)
