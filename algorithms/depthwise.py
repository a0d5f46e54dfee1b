"""Depthwise convolution (groups == C, channel multiplier M = K / C >= 1) in 1D, 2D and 3D: forward, dgrad
and wgrad with tiled kernels (convlab.kernels.conv.depthwise_conv, depthwise_wgrad): each block owns a
TH x TW tile of PL output planes (consecutive channels of one image), stages the PL input halo tiles and
filters in shared memory, and each thread keeps VH output rows in registers.

    forward  y[n, k, p, q]  = bias[k] + sum_{r, s} x[n, k // M, p*sh - ph + r*dh, q*sw - pw + s*dw]
                                                  * w[k, 0, r, s]
    dgrad    dx[n, c, h, w] = bias[c] + sum_{m < M, r, s : h + ph - r*dh = p*sh, w + pw - s*dw = q*sw}
                                         dy[n, c*M + m, p, q] * w[c*M + m, 0, r, s]
    wgrad    dw[k, 0, r, s] = sum_{z < splits} sum_{(n, tile) in chunk z} sum_{(p, q) in tile}
                                         x[n, k // M, p*sh - ph + r*dh, q*sw - pw + s*dw] * dy[n, k, p, q]

Configs: the plain tiles (PL = 1, planes of any size) and, when a plane (its largest stride phase) fits
one tile of 8, 16 or 32 (GPU; 4 or 8 on the simulator), plane tiles with PL = 256 / threads per plane
(7x7 and 14x14 layers: one block per PL whole planes instead of many tiny blocks). dgrad runs one
stride-1 correlation per output residue class (h + ph) mod sh, (w + pw) mod sw, with only the filter taps
that reach it. wgrad reduces in a fixed order: each block sums its chunk of units in sequence, then a
shared-memory tree per filter; with splits > 1 the partials go to a workspace and are summed in split
order by ``convlab.kernels.data.splitk.sum_partials`` (plane tiles offer SPLIT=1: never split, one launch).
No atomics: every result is deterministic. Every layer size is a compile-time constant of its kernels,
so a launch passes the arrays only (host time per call counts on small layers).

3D: a block's tile lies at one output depth (grid x counts the depths too) and loops over the depth
taps whose input plane exists, staging each plane's halo and taps in turn (dgrad: the taps with
z + pd - t*dd = o*sd); wgrad's units are (n, output depth, tile) and its T*R*S accumulators take every
depth tap of a unit. 1D (the 2D embedding, H = 1): windows of one output row (TH = VH = 1) and, for
short rows, plane windows of PL whole rows.

fp16 / bf16 natively (no widening passes): operands stay half in memory, each read widens to float32;
tiles, filters, accumulators and wgrad's split partials are float32; the store rounds to the output type.

Applicability: groups == C; at most MAX_TAPS filter taps (the per-thread code is unrolled over them);
the halo tile of some config fits 48 KiB of shared memory; every tensor within 32-bit indexing; at most
65535 images and channels (grid y and z).
"""
from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

from convlab import runtime
from convlab.dtypes import unit_roundoff
from convlab.plugin.contract import Algorithm, Config, Verdict
from convlab.plugin.cost import Features, blocks_per_sm, default_arith
from convlab.plugin.registry import register
from convlab.problem import Problem, make_problem, make_problem_nd
from convlab.kernels.data.splitk import MAX_INDEX, sum_partials  # the ordered split sum
from convlab.runtime.scratch import scratch
from convlab.runtime.targets import Target

from convlab.kernels.conv.axes import kernel_ndim
from convlab.kernels.conv.depthwise_common import MAX_SHARED, axis, compute_itemsize, shared_bytes
from convlab.kernels.conv.depthwise_conv import conv_kernel
from convlab.kernels.conv.depthwise_wgrad import wgrad_kernel
from convlab.kernels.data.convert import half_kind
from convlab.kernels.epilogue import compute_dtype

MAX_GRID_YZ = 65535  # grid y and z: channel groups and images (wgrad: filter groups)
MAX_TAPS = 121  # R*S (3D: T*R*S): up to 11x11 (the unrolled per-thread code and wgrad's accumulators grow)
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


def _tile(config: Config) -> tuple[int, int, int, int]:
    """(TH, TW, VH, PL) of a config."""
    try:
        return int(config["TH"]), int(config["TW"]), int(config["VH"]), int(config.get("PL", 1))
    except KeyError as exc:
        raise ValueError(f"depthwise config {config!r} lacks {exc}") from None


def _geometry(problem: Problem):
    """(axis_h, axis_w, out extent, in extent, in channels, out channels) of the kernel ``problem``
    runs (wgrad: forward's)."""
    dgrad = problem.op == "dgrad"
    (sh, sw), (ph, pw), (dh, dw) = problem.stride, problem.padding, problem.dilation
    ah, aw = axis(dgrad, problem.r, sh, ph, dh), axis(dgrad, problem.s, sw, pw, dw)
    pq, hw = (problem.p, problem.q), (problem.h, problem.w)
    if dgrad:
        return ah, aw, hw, pq, problem.k, problem.c
    return ah, aw, pq, hw, problem.c, problem.k


def _depth(problem: Problem) -> tuple[int, ...]:
    """The kernels' depth geometry (T, sd, pd, dd, in depth, out depth) of a 3D problem (dgrad: dy's
    depth in, dx's out), () otherwise."""
    if problem.ndim != 3:
        return ()
    pr = problem
    ends = (pr.do, pr.d) if pr.op == "dgrad" else (pr.d, pr.do)
    return (pr.t, pr.stride_d, pr.padding_d, pr.dilation_d, *ends)


def _taps(problem: Problem) -> int:
    """Filter taps per channel: R*S, 3D T*R*S."""
    return math.prod(problem.kernel_size)


def _blocks(problem: Problem, tile: tuple[int, int, int, int]) -> tuple[int, int, int]:
    """(tiles along h, tiles along w, grid x of the conv launch (phases x output depths x tiles) or
    wgrad's units per filter group (images x output depths x tiles))."""
    ah, aw, (oh, ow), *_ = _geometry(problem)
    tiles_h, tiles_w = ah.tiles(tile[0], oh), aw.tiles(tile[1], ow)
    depths = _depth(problem)[-1] if problem.ndim == 3 else 1
    if problem.op == "wgrad":
        return tiles_h, tiles_w, problem.n * depths * tiles_h * tiles_w
    return tiles_h, tiles_w, len(ah.phases) * len(aw.phases) * depths * tiles_h * tiles_w


def _fits(problem: Problem, tile: tuple[int, int, int, int]) -> bool:
    ah, aw, *_ = _geometry(problem)
    wgrad = problem.op == "wgrad"
    taps = _taps(problem) if wgrad else problem.r * problem.s  # the conv kernels stage one depth tap
    return (shared_bytes(ah, aw, *tile, taps, compute_itemsize(problem.dtype), wgrad) <= MAX_SHARED
            and _blocks(problem, tile)[2] <= MAX_INDEX)


def _waste(problem: Problem, tile: tuple[int, int, int, int]) -> float:
    """Computed outputs per useful output (tiles over the edges, idle phases, empty planes)."""
    ah, aw, (oh, ow), _, _, out_c = _geometry(problem)
    th, tw, _, pl = tile
    planes = math.ceil(out_c / pl) * pl / out_c
    along_h = ah.tiles(th, oh) * th * len(ah.phases) / oh
    return planes * along_h * (aw.tiles(tw, ow) * tw * len(aw.phases) / ow)


def wgrad_plan(problem: Problem, config: Config, workspace_limit: int, target: Target) -> tuple[int, int]:
    """(splits, chunk) of wgrad's N * tiles units per filter group: about four waves of blocks over the
    target's SMs (shorter serial chains per block), at least 4 units per block, at most the config's
    SPLIT (0: no cap), the partials (fp16 / bf16: float32) within the workspace limit and 32-bit indexing."""
    tile = _tile(config)
    units = _blocks(problem, tile)[2]
    threads = tile[1] * tile[0] // tile[2] * tile[3]
    wanted = 4 * target.sm_count * max(1, 2048 // threads)
    splits = min(math.ceil(wanted / math.ceil(problem.k / tile[3])), max(1, units // 4))
    out_elems = problem.k * _taps(problem)
    splits = min(splits, workspace_limit // (out_elems * compute_itemsize(problem.dtype)), MAX_INDEX // out_elems)
    if int(config.get("SPLIT", 0)):
        splits = min(splits, int(config["SPLIT"]))
    if splits < 2:
        return 1, units
    chunk = math.ceil(units / splits)
    return math.ceil(units / chunk), chunk


def _plane_tiles(problem: Problem, target: Target) -> list[tuple[int, int, int, int]]:
    """The plane tiles of the smallest size covering the largest phase of an output plane (1D: row),
    none for larger planes."""
    ah, aw, (oh, ow), *_ = _geometry(problem)
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
def _configs(problem: Problem, target: Target) -> tuple[Config, ...]:
    """The plane tiles that fit (wgrad: each also with SPLIT=1), then the plain tiles that fit in TILES
    order, those wasting more than MAX_WASTE last (cached: the ops ask per call)."""
    planes = [t for t in _plane_tiles(problem, target) if _fits(problem, t)]
    configs = [Config(TH=t[0], TW=t[1], VH=t[2], PL=t[3]) for t in planes]
    if problem.op == "wgrad":
        configs += [Config(TH=t[0], TW=t[1], VH=t[2], PL=t[3], SPLIT=1) for t in planes]
    order = TILES_SIM if target.simulator else TILES_WGRAD_GPU if problem.op == "wgrad" else TILES_GPU
    if kernel_ndim(problem) == 1:
        order = TILES_1D_SIM if target.simulator else TILES_1D_GPU
    tiles = [t + (1,) for t in order if _fits(problem, t + (1,))]
    tiles.sort(key=lambda t: (_waste(problem, t) > MAX_WASTE, order.index(t[:3])))
    return tuple(configs) + tuple(Config(TH=t[0], TW=t[1], VH=t[2], PL=1) for t in tiles)


class _Plan(NamedTuple):
    """One call's launch: the configured kernels (without and with bias), wgrad splits."""

    launch: Any
    launch_bias: Any
    splits: int


@functools.lru_cache(maxsize=1024)
def _launch(problem: Problem, config: Config, workspace_limit: int, target: Target) -> _Plan:
    """The configured kernel launches of one call on ``target`` (cached: replays skip this, the first
    call of a shape and the simulator do not)."""
    tile = _tile(config)
    th, tw, vh, pl = tile
    threads = tw * th // vh * pl
    geometry = (problem.r, problem.s, *problem.stride, *problem.padding, *problem.dilation)
    tiles_h, tiles_w, blocks = _blocks(problem, tile)
    mult = problem.k // problem.c
    if problem.op == "wgrad":
        splits, chunk = wgrad_plan(problem, config, workspace_limit, target)
        sizes = (problem.h, problem.w, problem.p, problem.q, problem.c, problem.k, mult, tiles_h, tiles_w,
                 blocks, chunk)
        kernel = wgrad_kernel(problem.dtype, tile, geometry, sizes, _depth(problem),
                              half_kind(problem.dtype) if splits == 1 else None)  # else float32 partials
        return _Plan(kernel[(splits, math.ceil(problem.k / pl)), threads], None, splits)
    _, _, (out_h, out_w), (in_h, in_w), in_c, out_c = _geometry(problem)
    sizes = (in_h, in_w, out_h, out_w, in_c, out_c, mult, tiles_h, tiles_w)  # N: grid z only
    grid = (blocks, math.ceil(out_c / pl), problem.n)
    return _Plan(*(conv_kernel(problem.dtype, problem.op == "dgrad", tile, geometry, sizes, b,
                               _depth(problem))[grid, threads] for b in (False, True)), 1)


@register
class Depthwise(Algorithm):
    """Tiled depthwise convolution with shared halo tiles and register rows; any multiplier K/C."""

    name = "depthwise"
    ops = frozenset({"forward", "dgrad", "wgrad"})
    dtypes = frozenset({"float32", "float64", "float16", "bfloat16"})
    priority = 30  # above implicit_gemm (20), im2col/col2im (10), direct (0)
    deterministic = True
    compiles_per_shape = True  # layer sizes are literals of its generated kernels
    ndims = (2, 3)
    description = ("depthwise (groups == C, any K/C): halo tile + filter in shared memory, rows per "
                   "thread in registers; dgrad by stride phases; wgrad ordered tree + split sum; 1D "
                   "row windows, 3D by depth taps")

    def check(self, problem: Problem, target: Target) -> Verdict:
        if problem.groups != problem.c:
            return Verdict.no(f"groups={problem.groups} != C={problem.c}: not depthwise")
        if _taps(problem) > MAX_TAPS:
            size = "x".join(map(str, problem.kernel_size))
            return Verdict.no(f"filter {size} has more than {MAX_TAPS} taps")
        for tensor, shape in (("x", problem.x_shape), ("w", problem.w_shape), ("y", problem.y_shape)):
            if math.prod(shape) > MAX_INDEX:
                return Verdict.no(f"{tensor} {shape} has 2**31 elements or more (32-bit indexing)")
        if max(problem.n, problem.c, problem.k) > MAX_GRID_YZ:
            return Verdict.no(f"N={problem.n}, C={problem.c}, K={problem.k}: the grid takes at most "
                              f"{MAX_GRID_YZ} images and channels")
        if not self.configs(problem, target):
            return Verdict.no(f"no tile fits: the halo of the smallest tile exceeds {MAX_SHARED} bytes of "
                              f"shared memory (filter {problem.r}x{problem.s}, stride {problem.stride}, "
                              f"dilation {problem.dilation})")
        return Verdict.yes()

    def configs(self, problem: Problem, target: Target) -> list[Config]:
        return list(_configs(problem, target))

    def workspace_bytes(self, problem: Problem, config: Config, workspace_limit: int,
                        target: Target) -> int:
        if problem.op != "wgrad":
            return 0
        splits, _ = wgrad_plan(problem, config, workspace_limit, target)
        return 0 if splits == 1 else splits * problem.k * _taps(problem) * compute_itemsize(problem.dtype)

    def cost_features(self, problem: Problem, config: Config, target: Target, workspace_limit: int) -> Features:
        """The tiles' computed outputs (edges, idle phases, empty planes: ``_waste``), the halo re-read
        from L2, wgrad's split sum (float32 partials for halves); operand bytes in their dtype, fp32 FMA."""
        pr, tile, part_size = problem, _tile(config), compute_itemsize(problem.dtype)
        threads = tile[1] * tile[0] // tile[2] * tile[3]
        splits = wgrad_plan(pr, config, workspace_limit, target)[0] if pr.op == "wgrad" else 1
        blocks = (splits * math.ceil(pr.k / tile[3]) if pr.op == "wgrad"
                  else _blocks(pr, tile)[2] * math.ceil(max(pr.c, pr.k) / tile[3]) * max(pr.n, 1))
        halo = (tile[0] + pr.r - 1) * (tile[1] + pr.s - 1) / (tile[0] * tile[1])
        return Features("depthwise", default_arith(pr), pr.flops * _waste(pr, tile), float(pr.bytes),
                        2.0 * splits * pr.k * pr.r * pr.s * part_size if splits > 1 else 0.0, 1 + (splits > 1),
                        blocks, 1, threads, blocks_per_sm(target, threads, 0, 48), float(pr.bytes) * halo,
                        kind="stencil")

    def compute_eps(self, dtype: str, config: Config | None = None) -> float:
        """fp16 / bf16: float32 products and sums (measure.tolerance adds the output's rounding)."""
        return unit_roundoff("float32" if half_kind(dtype) else dtype)

    def sample_problems(self, op: str) -> list[Problem]:
        bias = op != "wgrad"
        mk = make_problem
        return [mk(op, 2, 3, 7, 6, 3, 3, 3, padding=1, groups=3, bias=bias),  # M = 1, odd sizes
                mk(op, 1, 2, 9, 8, 4, 3, 3, stride=2, padding=1, groups=2, bias=bias,  # M = 2, stride 2
                   dtype="float64"),
                mk(op, 1, 2, 8, 9, 2, 3, 5, padding=(2, 3), dilation=2, groups=2),  # dilation 2, 3x5
                mk(op, 1, 1, 11, 10, 2, 5, 5, stride=(2, 3), padding=2, groups=1, bias=bias),  # 5x5
                mk(op, 1, 2, 7, 7, 2, 3, 3, p=4 if op == "dgrad" else None, padding=1, dilation=2,
                   groups=2, bias=bias),  # dgrad: the shortened dy of conv_transpose2d's output_padding
                make_problem_nd(op, 2, 2, (13,), 4, (3,), stride=2, padding=1, groups=2,  # 1D, M = 2
                                bias=bias).lowered(),
                make_problem_nd(op, 1, 2, (4, 5, 6), 2, (3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1),
                                dilation=(1, 2, 1), groups=2, bias=bias),  # 3D
                mk(op, 1, 2, 7, 6, 4, 3, 3, stride=2, padding=1, groups=2, bias=bias,  # fp16, plane tiles
                   dtype="float16"),  # (wgrad: unsplit, rounded as stored)
                mk(op, 2, 2, 9, 8, 2, 3, 3, padding=1, groups=2, bias=bias,  # bf16 (wgrad: split on the
                   dtype="bfloat16")]  # simulator's smaller tiles, unsplit on its 8x8)

    def run(self, problem: Problem, config: Config, a, b, bias, out, *, workspace_limit: int) -> None:
        plan = _launch(problem, config, workspace_limit, runtime.target())
        a, b, bias, out = (None if t is None else runtime.kernel_view(t) for t in (a, b, bias, out))  # bf16 bits
        if problem.op != "wgrad":
            if bias is None:
                plan.launch(a, b, out, out)  # no bias: the kernel never reads its bias argument
            else:
                plan.launch_bias(a, b, bias, out)
        elif plan.splits == 1:
            plan.launch(a, b, out)
        else:
            with scratch(plan.splits * out.size, compute_dtype(problem.dtype)) as part:
                plan.launch(a, b, part)
                sum_partials(part, out, plan.splits, out_kind=half_kind(problem.dtype))
