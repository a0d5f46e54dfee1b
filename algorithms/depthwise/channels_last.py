"""The depthwise forward and stride-1 dgrad on channels-last operands (convlab.kernels.conv.depthwise_nhwc):
their tile, their launch, and which kernel a call's layouts take.

Routing (a Problem carries no layout, so the configs are the NCHW tiles' and the route follows the
operands' strides): a forward, or a dgrad of stride 1 and M = 1, whose ``out`` is channels-last runs the
channels-last kernel, its input (x, dy) copied to channels-last scratch first if it is C-contiguous (the
filter (K, 1, [T,] R, S) has one memory order in either layout); any other call (wgrad, strided or M > 1
dgrad, an NCHW ``out``) runs the NCHW kernels, channels-last operands copied to C-contiguous scratch
(convlab.kernels.data.layouts.operands_for). The kernel follows ``out`` so that a fused epilogue's
residual, which has out's layout, is read at the output's offset. The stride-1 M = 1 dgrad is the
forward correlation of dy with the filter flipped in every axis, padding dil*(taps-1) - pad.

Tile (CB, VQ, ROWS, V): V = 2 channels a thread for fp16 / bf16 (a warp's loads then span 128 bytes),
else 1; CB threads along channel vectors, at most a warp and no more than K / V needs; VQ outputs a strip
and ROWS strips a block: VQ = 4 and 256 threads, or on narrow planes (Q <= NARROW_Q) VQ = 8 and 128
threads (the simulator: VQ = 2, 8 threads); ROWS halved (down to MIN_THREADS threads) while the grid
has fewer than two blocks an SM. Measured on an H100, MobileNetV2's depthwise layers at batch 32, fp16
(kernel times): VQ = 8 with 128 threads 3-20% faster than VQ = 4 with 256 on its 28 / 14 / 7-wide
outputs, up to 15% slower on the 56 / 112-wide ones; VQ = 2 slower everywhere.
"""
from __future__ import annotations

import contextlib
import functools
import math
from typing import Any, Iterator

from convlab import runtime
from convlab.epilogue import Epilogue
from convlab.problem import Problem
from convlab.runtime.scratch import scratch
from convlab.runtime.targets import Target

from convlab.kernels.conv.depthwise_nhwc import grid, nhwc_kernel
from convlab.kernels.data import layouts
from convlab.kernels.data.convert import half_kind
from convlab.kernels.epilogue import register_cache

from .plan import depth_sizes

THREADS_GPU, THREADS_NARROW, THREADS_SIM = 256, 128, 8
NARROW_Q = 28  # output widths up to this take strips of VQ_NARROW outputs
VQ_GPU, VQ_NARROW, VQ_SIM = 4, 8, 2
MIN_THREADS = 64
WARP = 32


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def kernel_geometry(problem: Problem) -> tuple[tuple, tuple, tuple, bool]:
    """(filter, sizes, depth, flip) of :func:`convlab.kernels.conv.depthwise_nhwc.nhwc_kernel` for a
    forward, or a stride-1 M = 1 dgrad: dy correlated with the flipped filter, padding dil*(taps-1) - pad."""
    pr = problem
    if pr.op == "forward":
        filt = (pr.r, pr.s, *pr.stride, *pr.padding, *pr.dilation)
        return filt, (pr.h, pr.w, pr.p, pr.q, pr.c, pr.k, pr.k // pr.c), depth_sizes(pr), False
    (ph, pw), (dh, dw) = pr.padding, pr.dilation
    filt = (pr.r, pr.s, 1, 1, dh * (pr.r - 1) - ph, dw * (pr.s - 1) - pw, dh, dw)
    depth = (pr.t, 1, pr.dilation_d * (pr.t - 1) - pr.padding_d, pr.dilation_d, pr.do, pr.d) if pr.ndim == 3 else ()
    return filt, (pr.p, pr.q, pr.h, pr.w, pr.k, pr.c, 1), depth, True


def nhwc_tile(problem: Problem, target: Target) -> tuple[int, int, int, int]:
    """(CB, VQ, ROWS, V) of ``problem``'s channels-last kernel on ``target`` (module docstring)."""
    _, (_, _, out_h, out_w, _, out_c, _), depth, _ = kernel_geometry(problem)
    out_d = depth[-1] if depth else 1
    v = 2 if half_kind(problem.dtype) else 1
    narrow = out_w <= NARROW_Q
    vq = min(VQ_SIM if target.simulator else VQ_NARROW if narrow else VQ_GPU, out_w)
    threads = THREADS_SIM if target.simulator else THREADS_NARROW if narrow else THREADS_GPU
    cb = min(4 if target.simulator else WARP, _pow2_at_least(math.ceil(out_c / v)))
    strips = out_d * out_h * math.ceil(out_w / vq)
    rows = max(1, min(threads // cb, _pow2_at_least(strips)))

    def blocks(rows: int) -> int:
        return math.prod(grid((cb, vq, rows, v), out_h, out_w, out_c, out_d, problem.n))
    while rows > 1 and cb * rows > MIN_THREADS and blocks(rows) < 2 * target.sm_count:
        rows //= 2
    return cb, vq, rows, v


@functools.lru_cache(maxsize=1024)
def nhwc_launch(problem: Problem, target: Target, has_bias: bool, epi: Epilogue | None = None) -> Any:
    """The configured channels-last kernel of one forward or dgrad call (cached: replays skip this)."""
    tile = nhwc_tile(problem, target)
    filt, sizes, depth, flip = kernel_geometry(problem)
    kernel = nhwc_kernel(problem.dtype, tile, filt, sizes, has_bias, depth, epi, flip)
    blocks = grid(tile, sizes[2], sizes[3], sizes[5], depth[-1] if depth else 1, problem.n)
    return kernel[blocks, tile[0] * tile[2]]


register_cache(nhwc_launch.cache_clear)  # its fused launches hold kernels built from the epilogue's code


def takes_channels_last(problem: Problem, out: Any) -> bool:
    """Whether the call runs the channels-last kernel: a forward, or a stride-1 dgrad with M = 1, into a
    channels-last ``out``."""
    pr = problem
    stride_1 = pr.stride == (1, 1) and (pr.ndim != 3 or pr.stride_d == 1)
    return (pr.op == "forward" or (pr.op == "dgrad" and stride_1 and pr.k == pr.c)) and layouts.is_channels_last(out)


@contextlib.contextmanager
def channels_last_input(a: Any) -> Iterator[Any]:
    """``a`` as it is when channels-last, else a channels-last scratch copy of it."""
    if layouts.is_channels_last(a):
        yield a
        return
    with scratch(int(a.size), runtime.kernel_dtype(a.dtype)) as buf:
        copy = layouts.channels_last_view(buf, tuple(a.shape), buf.dtype)
        layouts.to_nhwc(a, copy)
        yield copy


def run_channels_last(problem: Problem, a: Any, b: Any, bias: Any, out: Any, epilogue: Any = None) -> None:
    """The forward or dgrad into the channels-last ``out`` (``takes_channels_last``); ``epilogue``: the
    EpilogueOperands fused into its store (residual flat, in out's memory order)."""
    launch = nhwc_launch(problem, runtime.target(), bias is not None,
                         None if epilogue is None else epilogue.epilogue)
    with channels_last_input(a) as x:
        flat = [runtime.kernel_view(runtime.flat_view(t)) for t in (x, b, out)]
        args = (flat[0], flat[1], flat[2] if bias is None else runtime.kernel_view(bias), flat[2])
        if epilogue is None:
            launch(*args)
        else:
            launch(*args, flat[2] if epilogue.residual is None else epilogue.residual, epilogue.scale,
                   epilogue.shift)  # no residual: out stands in, never read
