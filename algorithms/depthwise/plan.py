"""The depthwise plugin's tiles and launch plans: which configs a problem gets, how many blocks each
launches, wgrad's splits, and the configured kernels of one call.

Configs: the plain tiles (PL = 1, planes of any size) and, when a plane (its largest stride phase) fits
one tile of 8, 16 or 32 (GPU; 4 or 8 on the simulator), plane tiles with PL = 256 / threads per plane
(7x7 and 14x14 layers: one block per PL whole planes instead of many tiny blocks). A config is
(TH, TW, VH, PL): TH x TW outputs of PL consecutive planes per block, VH rows per thread, so a block
has TW * TH / VH * PL threads. wgrad's configs may cap its splits (SPLIT=1: one launch, never split).
"""
from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

from convlab.epilogue import Epilogue
from convlab.plugin.contract import Config
from convlab.problem import Problem
from convlab.runtime.targets import Target

from convlab.kernels.conv.axes import kernel_ndim
from convlab.kernels.conv.depthwise_common import MAX_SHARED, axis, compute_itemsize, shared_bytes
from convlab.kernels.conv.depthwise_conv import conv_kernel
from convlab.kernels.conv.depthwise_wgrad import wgrad_kernel
from convlab.kernels.data.convert import half_kind
from convlab.kernels.data.splitk import MAX_INDEX
from convlab.kernels.epilogue import register_cache

#: (TH, TW, VH): output tile rows x columns, rows per thread (threads = TW * TH / VH, a power of two);
#: the H200's best on MobileNetV2's large planes first
TILES_GPU = ((16, 32, 4), (16, 16, 4), (32, 32, 4), (16, 32, 2), (16, 16, 2), (8, 16, 2), (8, 16, 1),
             (16, 16, 1), (8, 8, 2), (8, 8, 1))
#: the same tiles in wgrad's order (its H200 best on MobileNetV2's large planes first)
TILES_WGRAD_GPU = ((8, 8, 1), (16, 16, 4), (32, 32, 4), (16, 16, 2), (8, 16, 2), (8, 8, 2), (16, 32, 2),
                   (8, 16, 1), (16, 32, 4), (16, 16, 1))
TILES_SIM = ((4, 4, 2), (8, 4, 1), (8, 8, 2))
#: plane tiles {size: (VH, ...)}: a size x size tile covering a whole plane, PL = PLANE_THREADS / threads
PLANES_GPU = {8: (2, 4), 16: (4, 8), 32: (8, 16)}
PLANES_SIM = {4: (2,), 8: (4,)}
PLANE_THREADS_GPU, PLANE_THREADS_SIM = 256, 32
#: 1D windows (TH, TW, VH) of one output row: the 2D tiles' thread counts, not yet timed on a GPU (widest
#: first); plane windows {width: PL} of PL whole rows, PLANE_THREADS threads
TILES_1D_GPU, TILES_1D_SIM = ((1, 128, 1), (1, 256, 1), (1, 64, 1), (1, 32, 1)), ((1, 8, 1), (1, 16, 1))
PLANES_1D_GPU, PLANES_1D_SIM = {32: 8, 64: 4, 128: 2}, {8: 4, 16: 2}
MAX_WASTE = 1.5  # computed outputs per useful output beyond which a plain tile ranks last


def tile_of(config: Config) -> tuple[int, int, int, int]:
    """(TH, TW, VH, PL) of a config."""
    try:
        return int(config["TH"]), int(config["TW"]), int(config["VH"]), int(config.get("PL", 1))
    except KeyError as exc:
        raise ValueError(f"depthwise config {config!r} lacks {exc}") from None


def geometry(problem: Problem):
    """(axis_h, axis_w, out extent, in extent, in channels, out channels) of the kernel ``problem``
    runs (wgrad: forward's)."""
    dgrad = problem.op == "dgrad"
    (sh, sw), (ph, pw), (dh, dw) = problem.stride, problem.padding, problem.dilation
    ah, aw = axis(dgrad, problem.r, sh, ph, dh), axis(dgrad, problem.s, sw, pw, dw)
    pq, hw = (problem.p, problem.q), (problem.h, problem.w)
    if dgrad:
        return ah, aw, hw, pq, problem.k, problem.c
    return ah, aw, pq, hw, problem.c, problem.k


def depth_sizes(problem: Problem) -> tuple[int, ...]:
    """The kernels' depth geometry (T, sd, pd, dd, in depth, out depth) of a 3D problem (dgrad: dy's
    depth in, dx's out), () otherwise."""
    if problem.ndim != 3:
        return ()
    pr = problem
    ends = (pr.do, pr.d) if pr.op == "dgrad" else (pr.d, pr.do)
    return (pr.t, pr.stride_d, pr.padding_d, pr.dilation_d, *ends)


def taps(problem: Problem) -> int:
    """Filter taps per channel: R*S, 3D T*R*S."""
    return math.prod(problem.kernel_size)


def blocks(problem: Problem, tile: tuple[int, int, int, int]) -> tuple[int, int, int]:
    """(tiles along h, tiles along w, grid x of the conv launch (phases x output depths x tiles) or
    wgrad's units per filter group (images x output depths x tiles))."""
    ah, aw, (oh, ow), *_ = geometry(problem)
    tiles_h, tiles_w = ah.tiles(tile[0], oh), aw.tiles(tile[1], ow)
    depths = depth_sizes(problem)[-1] if problem.ndim == 3 else 1
    if problem.op == "wgrad":
        return tiles_h, tiles_w, problem.n * depths * tiles_h * tiles_w
    return tiles_h, tiles_w, len(ah.phases) * len(aw.phases) * depths * tiles_h * tiles_w


def fits(problem: Problem, tile: tuple[int, int, int, int]) -> bool:
    """Whether ``tile``'s kernel fits MAX_SHARED bytes of shared memory and 32-bit grid indexing."""
    ah, aw, *_ = geometry(problem)
    wgrad = problem.op == "wgrad"
    staged = taps(problem) if wgrad else problem.r * problem.s  # the conv kernels stage one depth tap
    return (shared_bytes(ah, aw, *tile, staged, compute_itemsize(problem.dtype), wgrad) <= MAX_SHARED
            and blocks(problem, tile)[2] <= MAX_INDEX)


def waste(problem: Problem, tile: tuple[int, int, int, int]) -> float:
    """Computed outputs per useful output (tiles over the edges, idle phases, empty planes)."""
    ah, aw, (oh, ow), _, _, out_c = geometry(problem)
    th, tw, _, pl = tile
    planes = math.ceil(out_c / pl) * pl / out_c
    along_h = ah.tiles(th, oh) * th * len(ah.phases) / oh
    return planes * along_h * (aw.tiles(tw, ow) * tw * len(aw.phases) / ow)


def wgrad_plan(problem: Problem, config: Config, workspace_limit: int, target: Target) -> tuple[int, int]:
    """(splits, chunk) of wgrad's N * tiles units per filter group: about four waves of blocks over the
    target's SMs (shorter serial chains per block), at least 4 units per block, at most the config's
    SPLIT (0: no cap), the partials (fp16 / bf16: float32) within the workspace limit and 32-bit indexing."""
    tile = tile_of(config)
    units = blocks(problem, tile)[2]
    threads = tile[1] * tile[0] // tile[2] * tile[3]
    wanted = 4 * target.sm_count * max(1, 2048 // threads)
    splits = min(math.ceil(wanted / math.ceil(problem.k / tile[3])), max(1, units // 4))
    out_elems = problem.k * taps(problem)
    splits = min(splits, workspace_limit // (out_elems * compute_itemsize(problem.dtype)), MAX_INDEX // out_elems)
    if int(config.get("SPLIT", 0)):
        splits = min(splits, int(config["SPLIT"]))
    if splits < 2:
        return 1, units
    chunk = math.ceil(units / splits)
    return math.ceil(units / chunk), chunk


def plane_tiles(problem: Problem, target: Target) -> list[tuple[int, int, int, int]]:
    """The plane tiles of the smallest size covering the largest phase of an output plane (1D: row),
    none for larger planes."""
    ah, aw, (oh, ow), *_ = geometry(problem)
    if kernel_ndim(problem) == 1:
        rows = PLANES_1D_SIM if target.simulator else PLANES_1D_GPU
        return [(1, size, 1, pl) for size, pl in rows.items() if aw.extent(ow) <= size][:1]
    planes, threads = ((PLANES_SIM, PLANE_THREADS_SIM) if target.simulator
                       else (PLANES_GPU, PLANE_THREADS_GPU))
    for size, vhs in planes.items():
        if ah.extent(oh) <= size and aw.extent(ow) <= size:
            return [(size, size, vh, threads * vh // (size * size)) for vh in vhs]
    return []


@functools.lru_cache(maxsize=1024)
def configs_for(problem: Problem, target: Target) -> tuple[Config, ...]:
    """The plane tiles that fit (wgrad: each also with SPLIT=1), then the plain tiles that fit in TILES
    order, those wasting more than MAX_WASTE last (cached: the ops ask per call)."""
    planes = [t for t in plane_tiles(problem, target) if fits(problem, t)]
    configs = [Config(TH=t[0], TW=t[1], VH=t[2], PL=t[3]) for t in planes]
    if problem.op == "wgrad":
        configs += [Config(TH=t[0], TW=t[1], VH=t[2], PL=t[3], SPLIT=1) for t in planes]
    order = TILES_SIM if target.simulator else TILES_WGRAD_GPU if problem.op == "wgrad" else TILES_GPU
    if kernel_ndim(problem) == 1:
        order = TILES_1D_SIM if target.simulator else TILES_1D_GPU
    tiles = [t + (1,) for t in order if fits(problem, t + (1,))]
    tiles.sort(key=lambda t: (waste(problem, t) > MAX_WASTE, order.index(t[:3])))
    return tuple(configs) + tuple(Config(TH=t[0], TW=t[1], VH=t[2], PL=1) for t in tiles)


class Plan(NamedTuple):
    """One call's launch: the configured kernels (without and with bias), wgrad splits."""

    launch: Any
    launch_bias: Any
    splits: int


@functools.lru_cache(maxsize=1024)
def launch_plan(problem: Problem, config: Config, workspace_limit: int, target: Target,
                epi: Epilogue | None = None) -> Plan:
    """The configured kernel launches of one call on ``target`` (cached: replays skip this, the first
    call of a shape and the simulator do not); ``epi``: forward's kernels fused with that epilogue
    (launched with the epilogue's residual, scale and shift after the output)."""
    tile = tile_of(config)
    th, tw, vh, pl = tile
    threads = tw * th // vh * pl
    filt = (problem.r, problem.s, *problem.stride, *problem.padding, *problem.dilation)
    tiles_h, tiles_w, units = blocks(problem, tile)
    mult = problem.k // problem.c
    if problem.op == "wgrad":
        splits, chunk = wgrad_plan(problem, config, workspace_limit, target)
        sizes = (problem.h, problem.w, problem.p, problem.q, problem.c, problem.k, mult, tiles_h, tiles_w,
                 units, chunk)
        kernel = wgrad_kernel(problem.dtype, tile, filt, sizes, depth_sizes(problem),
                              half_kind(problem.dtype) if splits == 1 else None)  # else float32 partials
        return Plan(kernel[(splits, math.ceil(problem.k / pl)), threads], None, splits)
    _, _, (out_h, out_w), (in_h, in_w), in_c, out_c = geometry(problem)
    sizes = (in_h, in_w, out_h, out_w, in_c, out_c, mult, tiles_h, tiles_w)  # N: grid z only
    grid = (units, math.ceil(out_c / pl), problem.n)
    return Plan(*(conv_kernel(problem.dtype, problem.op == "dgrad", tile, filt, sizes, b, depth_sizes(problem),
                              epi)[grid, threads] for b in (False, True)), 1)


register_cache(launch_plan.cache_clear)  # its fused plans hold kernels built from the epilogue's code
