"""The depthwise forward on channels-last operands (convlab.kernels.conv.depthwise_nhwc): its tile, its
launch, and which kernel a call's layouts take.

Routing (a Problem carries no layout, so the configs are the NCHW tiles' and the route follows the
operands' strides): a 4-D / 5-D forward whose ``out`` is channels-last runs the channels-last kernel,
its x copied to channels-last scratch first if it is C-contiguous (the filter (K, 1, [T,] R, S) has one
memory order in either layout); any other call runs the NCHW kernels, channels-last operands copied to
C-contiguous scratch (convlab.kernels.data.layouts.operands_for). The kernel follows ``out`` so that a
fused epilogue's residual, which has out's layout, is read at the output's offset.

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


def nhwc_tile(problem: Problem, target: Target) -> tuple[int, int, int, int]:
    """(CB, VQ, ROWS, V) of ``problem``'s channels-last kernel on ``target`` (module docstring)."""
    v = 2 if half_kind(problem.dtype) else 1
    narrow = problem.q <= NARROW_Q
    vq = min(VQ_SIM if target.simulator else VQ_NARROW if narrow else VQ_GPU, problem.q)
    threads = THREADS_SIM if target.simulator else THREADS_NARROW if narrow else THREADS_GPU
    cb = min(4 if target.simulator else WARP, _pow2_at_least(math.ceil(problem.k / v)))
    depth = problem.do if problem.ndim == 3 else 1
    strips = depth * problem.p * math.ceil(problem.q / vq)
    rows = max(1, min(threads // cb, _pow2_at_least(strips)))

    def blocks(rows: int) -> int:
        return math.prod(grid((cb, vq, rows, v), problem.p, problem.q, problem.k, depth, problem.n))
    while rows > 1 and cb * rows > MIN_THREADS and blocks(rows) < 2 * target.sm_count:
        rows //= 2
    return cb, vq, rows, v


@functools.lru_cache(maxsize=1024)
def nhwc_launch(problem: Problem, target: Target, has_bias: bool, epi: Epilogue | None = None) -> Any:
    """The configured channels-last kernel of one forward call (cached: replays skip this)."""
    tile = nhwc_tile(problem, target)
    filt = (problem.r, problem.s, *problem.stride, *problem.padding, *problem.dilation)
    sizes = (problem.h, problem.w, problem.p, problem.q, problem.c, problem.k, problem.k // problem.c)
    depth = depth_sizes(problem)
    kernel = nhwc_kernel(problem.dtype, tile, filt, sizes, has_bias, depth, epi)
    blocks = grid(tile, problem.p, problem.q, problem.k, depth[-1] if depth else 1, problem.n)
    return kernel[blocks, tile[0] * tile[2]]


register_cache(nhwc_launch.cache_clear)  # its fused launches hold kernels built from the epilogue's code


def takes_channels_last(problem: Problem, out: Any) -> bool:
    """Whether the call runs the channels-last kernel: a forward into a channels-last ``out``."""
    return problem.op == "forward" and layouts.is_channels_last(out)


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
    """The forward into the channels-last ``out`` (``takes_channels_last``); ``epilogue``: the
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
