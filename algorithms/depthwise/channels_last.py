"""The depthwise channels-last kernels (convlab.kernels.conv.depthwise_nhwc, depthwise_nhwc_dgrad,
depthwise_nhwc_wgrad): their tiles, their launches, and which kernel a call's layouts take.

Routing (a Problem carries no layout, so the configs are the NCHW tiles' and the route follows the
operands' strides): a forward or dgrad whose ``out`` is channels-last runs a channels-last kernel, its
input (x, dy) copied to channels-last scratch first if it is C-contiguous (the filter (K, 1, [T,] R, S) has
one memory order in either layout): the forward and the stride-1 M = 1 dgrad (dy correlated with the
filter flipped in every axis, padding dil*(taps-1) - pad) the forward kernel, any other dgrad the dgrad
kernel; a wgrad whose x and dy (``a``, ``b``; ``out`` is dw) are both channels-last runs the
channels-last wgrad when its accumulators fit MAX_WGRAD_WORDS registers; any other call (an NCHW
``out``, a mixed-layout or larger-filter wgrad) runs the NCHW kernels, channels-last operands copied to
C-contiguous scratch (convlab.kernels.data.layouts.operands_for). The forward kernel follows ``out`` so
that a fused epilogue's residual, which has out's layout, is read at the output's offset.

Tile (CB, VQ, ROWS, V): V = 2 channels a thread for fp16 / bf16 (a warp's loads then span 128 bytes),
else 1; CB threads along channel vectors, at most a warp and no more than K / V needs; VQ outputs a strip
and ROWS strips a block: VQ = 4 and 256 threads, or on narrow planes (Q <= NARROW_Q) VQ = 8 and 128
threads (the simulator: VQ = 2, 8 threads); ROWS halved (down to MIN_THREADS threads) while the grid
has fewer than two blocks an SM; the dgrad kernel's VQ rounded up to a multiple of the stride along W
(its strips start at whole strides). Measured on an H100, MobileNetV2's depthwise layers at batch 32, fp16
(kernel times): VQ = 8 with 128 threads 3-20% faster than VQ = 4 with 256 on its 28 / 14 / 7-wide
outputs, up to 15% slower on the 56 / 112-wide ones; VQ = 2 slower everywhere.

wgrad (``wgrad_tile``, ``wgrad_split``; not yet timed on a GPU): CB, VQ and V as the forward's on dy's
width, ROWS = WGRAD_THREADS / CB threads a block summing different strips; splits aim at two waves of
blocks, each thread at least MIN_UNITS strips, at most SPLITS_PER_SM splits an SM (the ordered sum reads
splits values serially per filter tap), the partials within the workspace limit (splits = 1 writes dw
directly, so any limit is met: no fallback to the NCHW route is needed).
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

from convlab.kernels.conv.depthwise_common import compute_itemsize
from convlab.kernels.conv.depthwise_nhwc import grid, nhwc_kernel
from convlab.kernels.conv.depthwise_nhwc_dgrad import nhwc_dgrad_kernel
from convlab.kernels.conv.depthwise_nhwc_wgrad import nhwc_wgrad_kernel, wgrad_grid
from convlab.kernels.data import layouts
from convlab.kernels.data.convert import half_kind
from convlab.kernels.data.splitk import MAX_INDEX, sum_partials
from convlab.kernels.epilogue import compute_dtype, register_cache

from .plan import depth_sizes, taps

THREADS_GPU, THREADS_NARROW, THREADS_SIM = 256, 128, 8
NARROW_Q = 28  # output widths up to this take strips of VQ_NARROW outputs
VQ_GPU, VQ_NARROW, VQ_SIM = 4, 8, 2
MIN_THREADS = 64
WARP = 32
WGRAD_THREADS_GPU, WGRAD_THREADS_SIM = 256, 8
MIN_UNITS = 4  # strips each thread of a split sums at least
SPLITS_PER_SM = 2  # at most this many splits an SM: the ordered sum reads splits x K x taps serially per output
#: wgrad's accumulator registers a thread (taps x V, float64 two each) at most: ptxas sm_90, 256 threads,
#: VQ = 8: 5x5 fp16 (50) 96 registers, 7x7 fp32 (49) 96, 3x3x3 fp16 (54) 123, 7x7 fp16 (98) 168, 7x7 float64
#: (98) 166, 11x11 fp32 (121) 168, none spilling; 9x9 fp16 (162) 240, at the 255 limit: NCHW copies
MAX_WGRAD_WORDS = 128


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def flipped(problem: Problem) -> bool:
    """Whether a dgrad runs as the forward kernel of the flipped filter: stride 1 and M = 1."""
    pr = problem
    return pr.stride == (1, 1) and (pr.ndim != 3 or pr.stride_d == 1) and pr.k == pr.c


def kernel_geometry(problem: Problem) -> tuple[tuple, tuple, tuple, str]:
    """(filter, sizes, depth, kernel) of a channels-last call: ``kernel`` "forward" or "flipped"
    (:func:`convlab.kernels.conv.depthwise_nhwc.nhwc_kernel`: a forward, or a stride-1 M = 1 dgrad as dy
    correlated with the flipped filter, padding dil*(taps-1) - pad), or "dgrad" (any other dgrad:
    :func:`convlab.kernels.conv.depthwise_nhwc_dgrad.nhwc_dgrad_kernel`, the forward's filter)."""
    pr = problem
    forward_filter = (pr.r, pr.s, *pr.stride, *pr.padding, *pr.dilation)
    if pr.op == "forward":
        return forward_filter, (pr.h, pr.w, pr.p, pr.q, pr.c, pr.k, pr.k // pr.c), depth_sizes(pr), "forward"
    if not flipped(pr):
        depth = (pr.t, pr.stride_d, pr.padding_d, pr.dilation_d, pr.do, pr.d) if pr.ndim == 3 else ()
        return forward_filter, (pr.p, pr.q, pr.h, pr.w, pr.k, pr.c, pr.k // pr.c), depth, "dgrad"
    (ph, pw), (dh, dw) = pr.padding, pr.dilation
    filt = (pr.r, pr.s, 1, 1, dh * (pr.r - 1) - ph, dw * (pr.s - 1) - pw, dh, dw)
    depth = (pr.t, 1, pr.dilation_d * (pr.t - 1) - pr.padding_d, pr.dilation_d, pr.do, pr.d) if pr.ndim == 3 else ()
    return filt, (pr.p, pr.q, pr.h, pr.w, pr.k, pr.c, 1), depth, "flipped"


def lanes(dtype: str, out_c: int, out_w: int, target: Target) -> tuple[int, int, int]:
    """(CB, VQ, V) of a channels-last kernel whose threads walk ``out_w``-wide rows of ``out_c`` channels:
    V channels a thread, CB threads along the channels, strips of VQ outputs (module docstring)."""
    v = 2 if half_kind(dtype) else 1
    vq = min(VQ_SIM if target.simulator else VQ_NARROW if out_w <= NARROW_Q else VQ_GPU, out_w)
    return min(4 if target.simulator else WARP, _pow2_at_least(math.ceil(out_c / v))), vq, v


def nhwc_tile(problem: Problem, target: Target) -> tuple[int, int, int, int]:
    """(CB, VQ, ROWS, V) of ``problem``'s channels-last kernel on ``target`` (module docstring; the
    strided dgrad's VQ rounded up to a multiple of its stride along W)."""
    filt, (_, _, out_h, out_w, _, out_c, _), depth, kernel = kernel_geometry(problem)
    out_d = depth[-1] if depth else 1
    cb, vq, v = lanes(problem.dtype, out_c, out_w, target)
    if kernel == "dgrad":
        vq = -(-vq // filt[3]) * filt[3]
    threads = THREADS_SIM if target.simulator else THREADS_NARROW if out_w <= NARROW_Q else THREADS_GPU
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
    filt, sizes, depth, route = kernel_geometry(problem)
    if route == "dgrad":
        kernel = nhwc_dgrad_kernel(problem.dtype, tile, filt, sizes, has_bias, depth)
    else:
        kernel = nhwc_kernel(problem.dtype, tile, filt, sizes, has_bias, depth, epi, route == "flipped")
    blocks = grid(tile, sizes[2], sizes[3], sizes[5], depth[-1] if depth else 1, problem.n)
    return kernel[blocks, tile[0] * tile[2]]


register_cache(nhwc_launch.cache_clear)  # its fused launches hold kernels built from the epilogue's code


def takes_channels_last(problem: Problem, a: Any, b: Any, out: Any) -> bool:
    """Whether the call runs a channels-last kernel: a forward or dgrad into a channels-last ``out``; a
    wgrad (``a`` x, ``b`` dy, ``out`` dw) of at most MAX_WGRAD_WORDS accumulator registers on a
    channels-last x and dy."""
    if problem.op == "wgrad":
        return (wgrad_words(problem) <= MAX_WGRAD_WORDS and layouts.is_channels_last(a)
                and layouts.is_channels_last(b))
    return layouts.is_channels_last(out)


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


def wgrad_words(problem: Problem) -> int:
    """Accumulator registers of a channels-last wgrad thread: taps x V (2 for fp16 / bf16), x 2 for float64."""
    return taps(problem) * (2 if half_kind(problem.dtype) or problem.dtype == "float64" else 1)


def wgrad_tile(problem: Problem, target: Target) -> tuple[int, int, int, int]:
    """(CB, VQ, ROWS, V) of the channels-last wgrad: CB, VQ and V as the forward's on dy's width, ROWS
    filling WGRAD_THREADS threads (a power of two, no more than the strips need)."""
    cb, vq, v = lanes(problem.dtype, problem.k, problem.q, target)
    units = wgrad_units(problem, vq)
    threads = WGRAD_THREADS_SIM if target.simulator else WGRAD_THREADS_GPU
    return cb, vq, max(1, min(threads // cb, _pow2_at_least(units))), v


def wgrad_units(problem: Problem, vq: int) -> int:
    """Strips of ``vq`` outputs along dy's rows: N * [OD *] P * ceil(Q / VQ)."""
    return problem.n * (problem.do if problem.ndim == 3 else 1) * problem.p * math.ceil(problem.q / vq)


@functools.lru_cache(maxsize=1024)
def wgrad_split(problem: Problem, target: Target, workspace_limit: int) -> tuple[int, int]:
    """(splits, chunk) of the channels-last wgrad's strips: about two waves of blocks of the target's SMs,
    MIN_UNITS strips a thread at least, SPLITS_PER_SM splits an SM at most, the float32 (float64)
    partials within ``workspace_limit`` and 32-bit indexing (splits = 1 needs none: dw is written)."""
    cb, vq, rows, v = wgrad_tile(problem, target)
    units, out_elems = wgrad_units(problem, vq), problem.k * taps(problem)
    blocks_per_sm = max(1, 2048 // (cb * rows))
    splits = min(math.ceil(2 * target.sm_count * blocks_per_sm / math.ceil(problem.k / (cb * v))),
                 units // (rows * MIN_UNITS), SPLITS_PER_SM * target.sm_count,
                 workspace_limit // (out_elems * compute_itemsize(problem.dtype)), MAX_INDEX // out_elems)
    if splits < 2:
        return 1, units
    chunk = math.ceil(units / splits)
    return math.ceil(units / chunk), chunk


def wgrad_workspace_bytes(problem: Problem, target: Target, workspace_limit: int) -> int:
    """The channels-last wgrad's split partials (0 unsplit)."""
    splits = wgrad_split(problem, target, workspace_limit)[0]
    return 0 if splits == 1 else splits * problem.k * taps(problem) * compute_itemsize(problem.dtype)


@functools.lru_cache(maxsize=1024)
def wgrad_launch(problem: Problem, target: Target, workspace_limit: int) -> tuple[Any, int]:
    """(configured kernel, splits) of one channels-last wgrad call (cached: replays skip this)."""
    tile = wgrad_tile(problem, target)
    splits, chunk = wgrad_split(problem, target, workspace_limit)
    pr = problem
    filt = (pr.r, pr.s, *pr.stride, *pr.padding, *pr.dilation)
    sizes = (pr.h, pr.w, pr.p, pr.q, pr.c, pr.k, pr.k // pr.c)
    units = wgrad_units(pr, tile[1])
    kernel = nhwc_wgrad_kernel(pr.dtype, tile, filt, sizes, depth_sizes(pr), units, chunk,
                               half_kind(pr.dtype) if splits == 1 else None)  # else float32 partials
    return kernel[wgrad_grid(tile, pr.k, splits), tile[0] * tile[2]], splits


def run_wgrad_channels_last(problem: Problem, x: Any, dy: Any, dw: Any, workspace_limit: int) -> None:
    """dw from the channels-last ``x`` and ``dy`` (``takes_channels_last``): one launch, or the split
    partials summed in split order into dw (``sum_partials``)."""
    launch, splits = wgrad_launch(problem, runtime.target(), workspace_limit)
    flat_x, flat_dy, flat_dw = (runtime.kernel_view(runtime.flat_view(t)) for t in (x, dy, dw))
    if splits == 1:
        launch(flat_x, flat_dy, flat_dw)
        return
    with scratch(splits * int(dw.size), compute_dtype(problem.dtype)) as part:
        launch(flat_x, flat_dy, part)
        sum_partials(part, flat_dw, splits, out_kind=half_kind(problem.dtype))
