"""Backward-data with stride > 1 by stride phases (2D and 1D): each phase of dx is a stride-1 convolution of
dy with the filter taps that reach it, run by the gather kernel of the forward and stride-1 dgrad and
stored straight into its pixels of dx.

    phase (h0, w0), h0 < sh, w0 < sw:  the dx pixels (h0 + sh*i, w0 + sw*j), i < Hf, j < Wf
    dx[n, c, h0 + sh*i, w0 + sw*j] = bias[c] + sum_{k, th < Th, tw < Tw}
        dy[n, k, i - pad_h + th*dil_h, j - pad_w + tw*dil_w] * w[k, c, r0 - th*rstep, s0 - tw*sstep]

    GEMM per phase  M = N*Hf*Wf,  N = C,  K = Th*Tw*Kp          (the gather's: dy NHWC, K padded)

Per axis (``axis_phases``, from the depthwise kernels' phase split, convlab.kernels.conv.depthwise_common
``axis``): the taps r with (h0 + pad - r*dil) % stride == 0 read dy row i + (h0 + pad - r*dil) / stride,
one dilation dil / gcd(stride, dil) apart in dy, r descending (rstep = stride / gcd); a phase without taps
(a 1x1 filter's odd rows at stride 2) holds the bias alone, written first over all of dx
(convlab.kernels.data.phases.fill_bias). dy goes to NHWC scratch, channels padded (read as it is when it
is channels-last and needs no padding), each phase's filter to [C, Th, Tw, Kp]
(convlab.kernels.data.phases.sub_filter); dx is written in its own layout, NCHW or NHWC, by the phase
stores of convlab.kernels.tensor_core.stores. Every dx pixel belongs to one phase: written once, no
atomics, no columns. No split-K and no fused epilogue on this route.

Route (``applies``): C >= PHASE_MIN_CHANNELS. A phase's GEMM N is C: at 16 channels it fills the
narrowest tile; a stem's 3 channels would leave 13/16 of it idle, where the column route's N = C*R*S
(strided.py) keeps tiles full. The traffic it saves is the columns': for a 3x3 stride-2 layer with C = K
the column route writes and reads 9 * 2 fp32 values a dy element, this route reads dy once a phase
and writes dx once. 3D strided dgrads stay on the column route.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from convlab import runtime
from convlab.kernels.conv.depthwise_common import axis
from convlab.kernels.data import layouts, phases as phase_data, transpose
from convlab.kernels.data.splitk import MAX_INDEX
from convlab.kernels.tensor_core import conv as tc_conv
from convlab.kernels.tensor_core.config import TcConfig
from convlab.problem import Problem, np_dtype
from convlab.runtime.scratch import scratch

from .gather import NCHW, padded

PHASE_MIN_CHANNELS = 16


@dataclass(frozen=True)
class AxisPhase:
    """One phase along one axis: dx indices start + stride*i (i < count), its taps (``taps``; the first
    the filter index ``first``, then ``step`` lower each) and the gather's padding and dilation in dy."""

    start: int
    count: int
    taps: int
    first: int
    step: int
    pad: int
    dil: int


def axis_phases(size: int, kernel: int, stride: int, pad: int, dil: int) -> list[AxisPhase]:
    """The ``stride`` phases of a dx axis of ``size`` (module docstring)."""
    out = []
    for ph in axis(True, kernel, stride, pad, dil).phases:
        start = ph.o0 + stride * ph.t_lo
        count = max(0, -(-(size - start) // stride))
        taps = sorted(ph.taps, key=lambda tap: tap[1])  # dy offsets ascending: r descending
        first, step = (taps[0][0], taps[0][0] - taps[1][0]) if len(taps) > 1 else (taps[0][0] if taps else 0, 1)
        gap = taps[1][1] - taps[0][1] if len(taps) > 1 else 1
        out.append(AxisPhase(start, count, len(taps), first, step, -(ph.t_lo + ph.min_off), gap))
    return out


def plan(problem: Problem) -> list[tuple[AxisPhase, AxisPhase]]:
    """Every (height, width) phase of dx that holds pixels."""
    pr = problem
    (sh, sw), (ph, pw), (dh, dw) = pr.stride, pr.padding, pr.dilation
    rows = axis_phases(pr.h, pr.r, sh, ph, dh)
    cols = axis_phases(pr.w, pr.s, sw, pw, dw)
    return [(a, b) for a in rows for b in cols if a.count and b.count]


def applies(problem: Problem) -> bool:
    """Whether a strided dgrad takes this route (module docstring)."""
    return problem.ndim == 2 and problem.c >= PHASE_MIN_CHANNELS


def _dy_elements(pr: Problem) -> int:
    return pr.n * pr.p * pr.q * padded(pr.k, pr.dtype)


def filter_elements(pr: Problem) -> int:
    """Every phase's filter: each tap belongs to one phase, so C*R*S*Kp in all."""
    return pr.c * pr.r * pr.s * padded(pr.k, pr.dtype)


def fits(pr: Problem) -> bool:
    """Whether dy's padded NHWC copy, the filters and dx stay within 32-bit indexing."""
    return max(_dy_elements(pr), filter_elements(pr), pr.n * pr.c * pr.h * pr.w) <= MAX_INDEX


def workspace_bytes(pr: Problem) -> int:
    """dy's NHWC copy (the most: a channels-last dy needing no padding is read as it is) and the filters."""
    return pr.itemsize * (_dy_elements(pr) + filter_elements(pr))


def gemm_shape(pr: Problem) -> tuple[int, int, int]:
    """(M, N, K) of the largest phase's GEMM."""
    rows, cols = (max(axis_phases(*a), key=lambda p: p.count * p.taps) for a in (
        (pr.h, pr.r, pr.stride[0], pr.padding[0], pr.dilation[0]),
        (pr.w, pr.s, pr.stride[1], pr.padding[1], pr.dilation[1])))
    return pr.n * rows.count * cols.count, pr.c, max(1, rows.taps * cols.taps) * padded(pr.k, pr.dtype)


def gemms(pr: Problem) -> list[tuple[int, int, int]]:
    """(M, N, K) of each phase's GEMM that has taps."""
    kp = padded(pr.k, pr.dtype)
    return [(pr.n * a.count * b.count, pr.c, a.taps * b.taps * kp) for a, b in plan(pr) if a.taps and b.taps]


def empty(pr: Problem) -> bool:
    """Whether some phase holds pixels but no taps (then dx is filled with the bias first)."""
    return any(not (a.taps and b.taps) for a, b in plan(pr))


def run_phases(pr: Problem, cfg: TcConfig, itype: str, dy, w, bias, dx) -> None:
    """dx [N, C, H, W] (+ bias) from dy [N, K, P, Q] and w [K, C, R, S]: device arrays of the problem's
    dtype, C-contiguous or channels-last (dx written in its own layout), bias [C] or None."""
    kp = padded(pr.k, pr.dtype)
    dy_last = layouts.is_channels_last(dy)
    dy_as_is = dy_last and kp == pr.k and runtime.is_aligned(dy)  # cp.async reads 16 aligned bytes
    copy_dy = (dy,) if dy_last and not dy_as_is else ()
    copy_w = (w,) if layouts.is_channels_last(w) else ()
    nhwc_out = layouts.is_channels_last(dx)
    n_dy = 0 if dy_as_is else _dy_elements(pr)
    store = runtime.kernel_dtype(np_dtype(pr.dtype))
    flat = lambda t: runtime.kernel_view(runtime.flat_view(t))  # noqa: E731  (memory order)
    with layouts.operands_for(NCHW, copy_dy, out_index=None) as nchw_dy, \
            layouts.operands_for(NCHW, copy_w, out_index=None) as nchw_w, \
            scratch(n_dy + filter_elements(pr), store) as buf:
        src_dy, src_w = (nchw_dy or (dy,))[0], flat((nchw_w or (w,))[0])
        dyh = flat(dy) if dy_as_is else buf[:n_dy]
        if not dy_as_is:
            transpose.to_channels_last(flat(src_dy), dyh, pr.n, pr.k, pr.p * pr.q, kp)
        y, b = flat(dx), None if bias is None else runtime.kernel_view(bias)
        if empty(pr):
            phase_data.fill_bias(y, b, 1 if nhwc_out else pr.h * pr.w, pr.c)
        at = n_dy
        for rows, cols in plan(pr):
            if not (rows.taps and cols.taps):
                continue
            size = pr.c * rows.taps * cols.taps * kp
            wt = buf[at:at + size]
            at += size
            phase_data.sub_filter(src_w, wt, pr.k, pr.c, pr.r, pr.s, kp, (rows.taps, rows.first, rows.step),
                                  (cols.taps, cols.first, cols.step))
            tc_conv.conv_launcher(itype, cfg, dyh, wt, y, b, n=pr.n, c=kp, k=pr.c, spatial=(pr.p, pr.q),
                                  kernel=(rows.taps, cols.taps), out=(rows.count, cols.count), stride=(1, 1),
                                  padding=(rows.pad, cols.pad), dilation=(rows.dil, cols.dil),
                                  nhwc_out=nhwc_out, phase=(pr.h, pr.w, *pr.stride, rows.start, cols.start))()


def flops_and_blocks(pr: Problem, cfg: TcConfig) -> tuple[float, int]:
    """(tensor-core FLOPs with the K tiles' and output tiles' padding, blocks of the largest launch)."""
    total, most = 0.0, 0
    for m, n, k in gemms(pr):
        tiles = math.ceil(m / cfg.BM) * math.ceil(n / cfg.BN)
        total += 2.0 * tiles * cfg.BM * cfg.BN * math.ceil(k / cfg.BK) * cfg.BK
        most = max(most, tiles)
    return total, most
