"""Channels-last backward-weight kernel of the depthwise plugin (x and dy NHWC; 3D NDHWC; 1D as H = 1): each
thread sums every filter tap of V channels in registers over a chunk of output strips, then a fixed-order
tree over the block's rows; generated per layer shape and tile, every size a literal (as ``depthwise_nhwc``).

Memory, each operand read as a flat 1-D view:

    x    [n, iz, ih, iw, c]     (2D: no iz)          dy   [n, oz, oh, ow, k]     k < K = C * M
    part [z, k, dt, r, s]       (split z < splits; splits = 1: dw itself, (K, 1, [T,] R, S) memory)

Block: CB x ROWS threads, thread (row, lane) = divmod(tid, CB). Grid: x = split z, y = channel chunk of
CB * V. The thread owns channels k_v = k0 + v (v < V), k0 = (y * CB + lane) * V (as the forward's), and the
units u = z*chunk + row + i*ROWS < min(z*chunk + chunk, units) in that order, a unit being a strip
(n, oz, oh, qb) of outputs ow = ow0 + q, ow0 = qb * VQ, q < VQ:

    acc[t][v] = 0                                                     t < T*R*S taps, all in registers
    for each unit:  g[q][v] = dy[n, oz, oh, ow0 + q, k_v]             (0 past Q)
        for dt, r with iz = oz*sd - pd + dt*dd, ih = oh*sh - ph + r*dh inside the input (unrolled):
            xv[j][v] = x[n, iz, ih, ow0*sw - pw + j, k_v // M]    each column j = q*sw + s*dw once (0 outside)
            acc[(dt, r, s)][v] += xv[q*sw + s*dw][v] * g[q][v]
    part[z, k_v, t] = sum over the block's rows of acc[t][v]          (tree: row i += row i + h, h = ROWS/2,
                                                                      ..., 1; GROUP taps at a time)
    (splits > 1: dw = sum over z of part[z], in order z = 0, 1, ...: convlab.kernels.data.splitk.sum_partials)

Every sum runs in a fixed order (each thread's units, the tree, the splits): the bits never depend on
scheduling, and no atomics. A strip's row of (VQ-1)*sw + (S-1)*dw + 1 inputs serves its VQ outputs' S taps
(stride 1, 3 taps, VQ = 4: 6 loads for 12 products per channel). Loads are coalesced along C (a warp's
lanes take consecutive channel vectors); a tail thread (K not a multiple of V) reads channel K - 1 for its
missing channels and writes only k_v < K. fp16 / bf16 (bf16 as uint16 bits): each read widens to float32;
accumulators, tree and partials are float32; an unsplit kernel rounds dw as it stores (``out_kind``).
"""
from __future__ import annotations

import functools

import numpy as np
from numba import from_dtype

from convlab import runtime
from convlab.runtime import cuda

from convlab.kernels.conv.depthwise_common import device, halving_tree, reduce_group
from convlab.kernels.conv.depthwise_nhwc import channel_lines, column_loads, columns, guarded_loads, strip_origin
from convlab.kernels.data.convert import from_f32, half_kind, to_f32
from convlab.kernels.epilogue import compute_dtype
from convlab.kernels.source import Writer


def _unit(w: Writer, tile: tuple, sizes: tuple, out_d: int, deep: bool, rd: str) -> None:
    """n, oz, oh, ow0 of unit u, and g{q}_{v} = dy[n, oz, oh, ow0 + q, k_v] (0 past Q)."""
    _, vq, _, v_ = tile
    out_h, out_w, out_c = sizes[2], sizes[3], sizes[5]
    q_blocks = -(-out_w // vq)
    w(f"n = u32(u // u32({out_d * out_h * q_blocks}))")
    w(f"rem = u32(u - u32(n * u32({out_d * out_h * q_blocks})))")
    if deep:
        w(f"oz = u32(rem // u32({out_h * q_blocks}))")
        w(f"rem = u32(rem - u32(oz * u32({out_h * q_blocks})))")
    w(f"oh = u32(rem // u32({q_blocks}))")
    w(f"ow0 = u32(u32(rem - u32(oh * u32({q_blocks}))) * u32({vq}))")
    plane = f"u32(u32(n * u32({out_d})) + oz)" if deep else "n"
    w(f"obase = u32(u32(u32({plane} * u32({out_h})) + oh) * u32({out_w}))")
    for q in range(vq):
        guarded_loads(w, f"g{q}", v_, f"u32(ow0 + u32({q})) < u32({out_w})",
                      f"u32(u32(obase + u32(ow0 + u32({q}))) * u32({out_c}))", "dy", "kl", rd)


def _rows(w: Writer, tile: tuple, filt: tuple, sizes: tuple, depth: tuple, rd: str) -> None:
    """For every depth tap and filter row inside the input: the strip's input columns and the products
    into each tap's accumulators (all unrolled: the accumulators are registers)."""
    _, vq, _, v_ = tile
    r_, s_, _, sw, _, _, dh, dw = filt
    in_h, in_w, in_c = sizes[0], sizes[1], sizes[4]
    dt_, sd, pd, dd, in_d, _ = depth or (1, 1, 0, 1, 1, 1)
    strip_origin(w, filt, vq, in_w)
    for dt in range(dt_):
        if depth:
            w(f"iz = i32(i32(i32(oz) * i32({sd})) + i32({dt * dd - pd}))")
            w(f"plane = u32(u32(n * u32({in_d})) + u32(iz))")
        with w.block(f"if u32(iz) < u32({in_d}):" if depth else None):
            for r in range(r_):
                w(f"ih = i32(ih0 + i32({r * dh}))")
                with w.block(f"if u32(ih) < u32({in_h}):"):
                    w(f"rowb = u32(u32(u32({'plane' if depth else 'n'} * u32({in_h})) + u32(ih)) * u32({in_w}))")
                    column_loads(w, columns(vq, s_, sw, dw), v_, in_c, rd)
                    for s in range(s_):
                        tap = (dt * r_ + r) * s_ + s
                        for q in range(vq):
                            for v in range(v_):
                                w(f"a{tap}_{v} += x{q * sw + s * dw}_{v} * g{q}_{v}")


def _reduce(w: Writer, tile: tuple, taps: int, out_c: int, group: int, wr: str) -> None:
    """part[z, kb + lane*V + v, t] = sum over rows of a{t}_{v}: GROUP taps at a time through
    red[(g*V + v)*T + tid], a tree over rows (fixed pairing), then the block's CB*V*GROUP sums written by
    consecutive threads (k < K only)."""
    cb, _, rows, v_ = tile
    t = cb * rows
    for i0 in range(0, taps, group):
        size = min(group, taps - i0)
        for g in range(size):
            for v in range(v_):
                w(f"red[u32({(g * v_ + v) * t}) + tid] = a{i0 + g}_{v}")
        w("cuda.syncthreads()")
        if rows > 1:
            halving_tree(w, rows // 2, "row", [(f"u32({i * t}) + tid", f"u32({i * t}) + up") for i in range(size * v_)],
                         (f"up = u32(tid + u32(h * u32({cb})))",))
        w("e = tid")
        with w.block(f"while e < u32({cb * v_ * size}):"):
            w(f"cv = u32(e // u32({size}))")
            w(f"gi = u32(e - u32(cv * u32({size})))")
            w(f"ln = u32(cv // u32({v_}))")
            w("k = u32(kb + cv)")
            with w.block(f"if k < u32({out_c}):"):
                w(f"at = u32(u32(u32(u32(z * u32({out_c})) + k) * u32({taps})) + u32(gi + u32({i0})))")
                w(f"part[i64(at)] = {wr}(red[u32(u32(u32(u32(gi * u32({v_})) + u32(cv - u32(ln * u32({v_})))) "
                  f"* u32({t})) + ln)])")
            w(f"e = u32(e + u32({t}))")
        w("cuda.syncthreads()")


@functools.cache
def nhwc_wgrad_kernel(dtype: str, tile: tuple[int, int, int, int], filt: tuple[int, ...], sizes: tuple[int, ...],
                      depth: tuple[int, ...], units: int, chunk: int, out_kind: str | None = None):
    """The channels-last backward-weight kernel ``kernel(x, dy, part)`` of one tile (CB, VQ, ROWS, V; ROWS
    a power of two), filter (R, S, sh, sw, ph, pw, dh, dw), layer ``sizes`` (in_h, in_w, out_h, out_w, C,
    K, M), ``depth`` (3D: T, sd, pd, dd, in_d, out_d; 2D: empty) and split chunks of ``chunk`` of the
    ``units`` strips. Arguments: flat 1-D views of x and dy (channels-last memory) of ``dtype`` (bfloat16:
    uint16 bits) and of part: [splits, K, taps] of the compute type (float32 for fp16 / bf16) or, with
    ``out_kind`` "float16" / "bfloat16", an unsplit half dw. Launch: :func:`wgrad_grid` blocks of
    CB * ROWS threads."""
    cb, vq, rows, v_ = tile
    r_, s_ = filt[0], filt[1]
    out_c, mult = sizes[5], sizes[6]
    taps = (depth[0] if depth else 1) * r_ * s_
    rd = "rd" if half_kind(dtype) else ""  # float32 / float64: read as is, no device call
    cdt = compute_dtype(dtype)
    group = reduce_group(taps, cb * rows * v_, cdt.itemsize)
    w = Writer("def body(x, dy, part, red):")
    w.indent()
    w("tid = u32(cuda.threadIdx.x)")
    w(f"row = u32(tid // u32({cb}))")
    w(f"ln0 = u32(tid - u32(row * u32({cb})))")
    w(f"kb = u32(u32(cuda.blockIdx.y) * u32({cb * v_}))")
    w(f"k0 = u32(kb + u32(ln0 * u32({v_})))")
    w("z = u32(cuda.blockIdx.x)")
    channel_lines(w, v_, out_c, mult, taps)
    for t in range(taps):
        w(f"{', '.join(f'a{t}_{v}' for v in range(v_))} = {', '.join(['zero'] * v_)}")
    w(f"u = u32(u32(z * u32({chunk})) + row)")
    w(f"stop = u32(u32(z * u32({chunk})) + u32({chunk}))")
    with w.block(f"if stop > u32({units}):"):
        w(f"stop = u32({units})")
    with w.block(f"while k0 < u32({out_c}) and u < stop:"):
        _unit(w, tile, sizes, depth[5] if depth else 1, bool(depth), rd)
        _rows(w, tile, filt, sizes, depth, rd)
        w(f"u = u32(u + u32({rows}))")
    _reduce(w, tile, taps, out_c, group, "wr" if out_kind else "")
    body = device(w, "body", {"cuda": cuda, "i32": np.int32, "zero": cdt.type(0),
                              "rd": to_f32(half_kind(dtype)), "wr": from_f32(out_kind)})
    red_n, red_t = group * v_ * cb * rows, from_dtype(cdt)

    @runtime.jit
    def kernel(x, dy, part):
        red = cuda.shared.array(red_n, red_t)
        body(x, dy, part, red)

    return kernel


def wgrad_grid(tile: tuple[int, int, int, int], out_c: int, splits: int) -> tuple[int, int]:
    """(splits, channel chunks of CB * V) of :func:`nhwc_wgrad_kernel`."""
    return splits, -(-out_c // (tile[0] * tile[3]))
