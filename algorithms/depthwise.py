"""Depthwise convolution (groups == C, channel multiplier M = K / C >= 1): forward, dgrad and wgrad with
tiled kernels (``_depthwise_kernels``): each block owns a TH x TW tile of one output plane, stages the
input halo tile and the R x S filter in shared memory, and each thread keeps VH output rows in registers.

    forward  y[n, k, p, q]  = bias[k] + sum_{r, s} x[n, k // M, p*sh - ph + r*dh, q*sw - pw + s*dw]
                                                  * w[k, 0, r, s]
    dgrad    dx[n, c, h, w] = bias[c] + sum_{m < M, r, s : h + ph - r*dh = p*sh, w + pw - s*dw = q*sw}
                                         dy[n, c*M + m, p, q] * w[c*M + m, 0, r, s]
    wgrad    dw[k, 0, r, s] = sum_{z < splits} sum_{(n, tile) in chunk z} sum_{(p, q) in tile}
                                         x[n, k // M, p*sh - ph + r*dh, q*sw - pw + s*dw] * dy[n, k, p, q]

dgrad runs one stride-1 correlation per output residue class (h + ph) mod sh, (w + pw) mod sw, with only
the filter taps that reach it. wgrad reduces in a fixed order: each block sums its chunk of tiles in
sequence, then a shared-memory tree over its threads; with splits > 1 the partials go to a workspace and
are summed in split order by ``convlab.kernels.splitk.sum_partials``. No atomics: every result is deterministic.

Applicability: groups == C; at most MAX_TAPS filter taps (the per-thread code is unrolled over them);
the halo tile of some config fits 48 KiB of shared memory; every tensor within 32-bit indexing; at most
65535 images and channels (grid y and z).
"""
from __future__ import annotations

import functools
import math

import numpy as np

import convlab
from convlab import Algorithm, Config, Problem, Verdict, register, runtime
from convlab.kernels.splitk import sum_partials  # the ordered split sum
from convlab.scratch import scratch

from ._depthwise_kernels import MAX_SHARED, axis, conv_kernel, shared_bytes, wgrad_kernel
from convlab.kernels.splitk import MAX_INDEX, sm_count

MAX_GRID_YZ = 65535  # grid y and z: output channels and images (wgrad: filters)
MAX_TAPS = 121  # R*S: up to 11x11 (the unrolled per-thread code and wgrad's accumulators grow with it)
#: (TH, TW, VH): output tile rows x columns, rows per thread (threads = TW * TH / VH, a power of two)
TILES_GPU = ((16, 32, 2), (32, 32, 4), (16, 32, 4), (16, 16, 2), (16, 16, 4), (16, 16, 1), (8, 16, 1),
             (8, 16, 2), (8, 8, 1), (8, 8, 2))
TILES_SIM = ((4, 4, 2), (8, 4, 1), (8, 8, 2))


@functools.cache
def _dummy(dtype: str):
    """A 1-element device array standing in for an absent bias (allocated once per dtype)."""
    return runtime.empty((1,), dtype)


def _tile(config: Config) -> tuple[int, int, int]:
    try:
        return int(config["TH"]), int(config["TW"]), int(config["VH"])
    except KeyError as exc:
        raise ValueError(f"depthwise config {config!r} lacks {exc}") from None


def _geometry(problem: Problem):
    """(axis_h, axis_w, out extent, in extent) of the kernel ``problem`` runs (wgrad: forward's)."""
    dgrad = problem.op == "dgrad"
    (sh, sw), (ph, pw), (dh, dw) = problem.stride, problem.padding, problem.dilation
    ah, aw = axis(dgrad, problem.r, sh, ph, dh), axis(dgrad, problem.s, sw, pw, dw)
    pq, hw = (problem.p, problem.q), (problem.h, problem.w)
    return (ah, aw, hw, pq) if dgrad else (ah, aw, pq, hw)


def _blocks(problem: Problem, tile: tuple[int, int, int]) -> tuple[int, int, int]:
    """(tiles along h, tiles along w, grid x of the conv launch (phases x tiles) or wgrad's units per
    filter (images x tiles))."""
    ah, aw, (oh, ow), _ = _geometry(problem)
    th, tw, _ = tile
    tiles_h, tiles_w = ah.tiles(th, oh), aw.tiles(tw, ow)
    if problem.op == "wgrad":
        return tiles_h, tiles_w, problem.n * tiles_h * tiles_w
    return tiles_h, tiles_w, len(ah.phases) * len(aw.phases) * tiles_h * tiles_w


def _fits(problem: Problem, tile: tuple[int, int, int]) -> bool:
    ah, aw, _, _ = _geometry(problem)
    th, tw, vh = tile
    return (shared_bytes(ah, aw, th, tw, vh, problem.r * problem.s, problem.itemsize) <= MAX_SHARED
            and _blocks(problem, tile)[2] <= MAX_INDEX)


def _waste(problem: Problem, tile: tuple[int, int, int]) -> float:
    """Computed outputs per useful output (tiles over the edges, idle phases)."""
    ah, aw, (oh, ow), _ = _geometry(problem)
    th, tw, _ = tile
    return (ah.tiles(th, oh) * th * len(ah.phases) / oh) * (aw.tiles(tw, ow) * tw * len(aw.phases) / ow)


def wgrad_plan(problem: Problem, tile: tuple[int, int, int], workspace_limit: int) -> tuple[int, int]:
    """(splits, chunk) of wgrad's N * tiles units per filter: about four waves of blocks over the SMs
    (shorter serial chains per block), at least 4 units per block, the partials within the workspace
    limit and 32-bit indexing."""
    units = _blocks(problem, tile)[2]
    threads = tile[1] * tile[0] // tile[2]
    target = 4 * sm_count() * max(1, 2048 // threads)
    splits = min(math.ceil(target / problem.k), max(1, units // 4))
    out_elems = problem.k * problem.r * problem.s
    splits = min(splits, workspace_limit // (out_elems * problem.itemsize), MAX_INDEX // out_elems)
    if splits < 2:
        return 1, units
    chunk = math.ceil(units / splits)
    return math.ceil(units / chunk), chunk


@functools.lru_cache(maxsize=1024)
def _configs(problem: Problem) -> tuple[Config, ...]:
    """The tiles that fit ``problem``, least waste first, then the larger (cached: the ops ask per call)."""
    tiles = [t for t in (TILES_SIM if runtime.SIMULATOR else TILES_GPU) if _fits(problem, t)]
    tiles.sort(key=lambda t: (round(_waste(problem, t), 1), -t[0] * t[1], t[2]))
    return tuple(Config(TH=t[0], TW=t[1], VH=t[2]) for t in tiles)


@functools.lru_cache(maxsize=1024)
def _launch(problem: Problem, config: Config, workspace_limit: int):
    """(kernel, blocks, threads, scalar arguments, wgrad splits) of one call (cached: host time counts)."""
    th, tw, vh = tile = _tile(config)
    (sh, sw), (ph, pw), (dh, dw) = problem.stride, problem.padding, problem.dilation
    geometry = (problem.r, problem.s, sh, sw, ph, pw, dh, dw)
    tiles_h, tiles_w, blocks = _blocks(problem, tile)
    u, mult = np.uint32, problem.k // problem.c
    if problem.op == "wgrad":
        splits, chunk = wgrad_plan(problem, tile, workspace_limit)
        sizes = (u(problem.h), u(problem.w), u(problem.p), u(problem.q), u(problem.c), u(problem.k),
                 u(mult), u(tiles_h), u(tiles_w), u(blocks), u(chunk), u(splits))
        kernel = wgrad_kernel(problem.dtype, th, tw, vh, *geometry)
        return kernel, (splits, problem.k), tw * th // vh, sizes, splits
    dgrad = problem.op == "dgrad"
    (in_h, in_w), (out_h, out_w) = ((problem.p, problem.q), (problem.h, problem.w)) if dgrad else \
        ((problem.h, problem.w), (problem.p, problem.q))
    in_c, out_c = (problem.k, problem.c) if dgrad else (problem.c, problem.k)
    sizes = (u(in_h), u(in_w), u(out_h), u(out_w), u(in_c), u(out_c), u(mult), u(tiles_h), u(tiles_w))
    kernel = conv_kernel(problem.dtype, dgrad, th, tw, vh, *geometry)
    return kernel, (blocks, out_c, problem.n), tw * th // vh, sizes, 1


@register
class Depthwise(Algorithm):
    """Tiled depthwise convolution with shared halo tiles and register rows; any multiplier K/C."""

    name = "depthwise"
    ops = frozenset({"forward", "dgrad", "wgrad"})
    priority = 30  # above implicit_gemm (20), im2col/col2im (10), direct (0)
    deterministic = True
    description = ("depthwise (groups == C, any K/C): halo tile + filter in shared memory, rows per "
                   "thread in registers; dgrad by stride phases; wgrad ordered tree + split sum")

    def check(self, problem: Problem) -> Verdict:
        if problem.groups != problem.c:
            return Verdict.no(f"groups={problem.groups} != C={problem.c}: not depthwise")
        if problem.r * problem.s > MAX_TAPS:
            return Verdict.no(f"filter {problem.r}x{problem.s} has more than {MAX_TAPS} taps")
        for tensor, shape in (("x", problem.x_shape), ("w", problem.w_shape), ("y", problem.y_shape)):
            if math.prod(shape) > MAX_INDEX:
                return Verdict.no(f"{tensor} {shape} has 2**31 elements or more (32-bit indexing)")
        if max(problem.n, problem.c, problem.k) > MAX_GRID_YZ:
            return Verdict.no(f"N={problem.n}, C={problem.c}, K={problem.k}: the grid takes at most "
                              f"{MAX_GRID_YZ} images and channels")
        if not self.configs(problem):
            return Verdict.no(f"no tile fits: the halo of the smallest tile exceeds {MAX_SHARED} bytes of "
                              f"shared memory (filter {problem.r}x{problem.s}, stride {problem.stride}, "
                              f"dilation {problem.dilation})")
        return Verdict.yes()

    def configs(self, problem: Problem) -> list[Config]:
        return list(_configs(problem))

    def workspace_bytes(self, problem: Problem, config: Config, workspace_limit: int) -> int:
        if problem.op != "wgrad":
            return 0
        splits, _ = wgrad_plan(problem, _tile(config), workspace_limit)
        return 0 if splits == 1 else splits * problem.k * problem.r * problem.s * problem.itemsize

    def sample_problems(self, op: str) -> list[Problem]:
        bias = op != "wgrad"
        mk = convlab.make_problem
        return [mk(op, 2, 3, 7, 6, 3, 3, 3, padding=1, groups=3, bias=bias),  # M = 1, odd sizes
                mk(op, 1, 2, 9, 8, 4, 3, 3, stride=2, padding=1, groups=2, bias=bias,  # M = 2, stride 2
                   dtype="float64"),
                mk(op, 1, 2, 8, 9, 2, 3, 5, padding=(2, 3), dilation=2, groups=2),  # dilation 2, 3x5
                mk(op, 1, 1, 11, 10, 2, 5, 5, stride=(2, 3), padding=2, groups=1, bias=bias),  # 5x5
                mk(op, 1, 2, 7, 7, 2, 3, 3, p=4 if op == "dgrad" else None, padding=1, dilation=2,
                   groups=2, bias=bias)]  # dgrad: the shortened dy of conv_transpose2d's output_padding

    def run(self, problem: Problem, config: Config, a, b, bias, out, *, workspace_limit: int) -> None:
        kernel, blocks, threads, sizes, splits = _launch(problem, config, workspace_limit)
        if problem.op == "wgrad":
            if splits == 1:
                kernel[blocks, threads](a, b, out, *sizes)
                return
            with scratch(splits * out.size, problem.dtype) as part:
                kernel[blocks, threads](a, b, part, *sizes)
                sum_partials(part, out, splits)
            return
        has_bias = bias is not None
        if not has_bias:  # kernels take a real array; a 1-element dummy stands in
            bias = _dummy(problem.dtype)
        kernel[blocks, threads](a, b, bias, out, *sizes, np.uint32(has_bias))
