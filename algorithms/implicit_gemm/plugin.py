"""Implicit GEMM: the convolution as a GEMM whose operand tiles are gathered straight from the tensors
into shared memory (no column buffer), one BM x BN output tile per block, fp32 register fragments.

    op        GEMM M    GEMM N   GEMM K (reduction)   kernel
    forward   N*P*Q     K        C*R*S                forward.py  (A gathered from x, bias and any fused
                                                                  epilogue (convlab.epilogue) in the store)
    dgrad     N*H*W     C        K*R*S                forward.py  (A gathered from dy, flipped filter)
    wgrad     K         C*R*S    N*P*Q                wgrad.py    (split-K over blocks + ordered 2nd pass)

3D problems (NCDHW, KCTRS) run natively: the gathers are N-d index maps (gathers.py) and both kernels
are specialised at compile time for 2 or 3 spatial dimensions (M = N*Do*P*Q, K = C*T*R*S forward;
dgrad's stride phases over the three axes; wgrad's reduction over N*Do*P*Q). 1D problems run as 2D
ones of height 1. The host side of every launch (parameter tables, grids, workspaces) is launches.py.

Applicability: every tensor within 32-bit indexing. Any M, N, K (remainders masked or zero-filled),
any groups (one launch: the groups' tiles along blockIdx.x, each group its own GEMM of the sizes above
with C, K per group), padding, dilation and stride for every op (backward-data with stride runs one
launch per stride phase, gathers.py), and the bias of forward and of conv_transpose2d (dgrad). The
kernels of forward.py and wgrad.py come in two variants per tile: the aligned one (groups 1, a
reduction that is a multiple of BK, stride-1 dgrad) and the general one, picked
per problem in ``run``. When the output tiles alone would leave SMs idle, the
reduction is split over blocks into a workspace (``workspace_bytes``, shrunk to fit the limit); the
block finishing a tile last sums its partials in a fixed order (same launch), so results are
deterministic. fp32 FMA throughout (no TF32). Small per-shape int32 tables (kk offsets, parameters) are
cached on the device beside the workspace, a few KiB each.
"""
from __future__ import annotations

import functools
import math

from convlab.epilogue import Epilogue
from convlab.kernels.epilogue import EpilogueOperands
from convlab.plugin.contract import Algorithm, Config, Verdict
from convlab.plugin.registry import register
from convlab.problem import Problem, make_problem, make_problem_nd

from convlab.kernels.data.splitk import MAX_INDEX
from convlab.kernels.simt.tile import Tile
from convlab.runtime.targets import Target

from . import common, cost, forward, gathers, launches, wgrad

#: (BM, BN, BK, TM, TN) per op family; GPU sizes, then the tiny simulator ones.
GATHER_TILES_GPU = ((128, 128, 8, 8, 8), (128, 128, 16, 8, 8), (128, 64, 8, 8, 8), (128, 32, 16, 8, 4),
                    (256, 16, 16, 8, 4), (64, 64, 16, 4, 4), (256, 8, 8, 8, 4))  # last: narrow N per group
WGRAD_TILES_GPU = ((128, 128, 8, 8, 8), (64, 128, 8, 8, 8), (128, 64, 8, 8, 8), (32, 128, 8, 4, 8),
                   (16, 64, 8, 4, 4))
GATHER_TILES_SIM = ((16, 16, 8, 2, 2), (32, 16, 8, 4, 2), (16, 32, 16, 2, 4))
WGRAD_TILES_SIM = ((16, 16, 8, 2, 2), (16, 32, 8, 2, 4), (32, 16, 8, 4, 2))


@functools.lru_cache(maxsize=256)
def tile_of(config: Config) -> Tile:
    """The Tile a config names (ValueError for a malformed one)."""
    return Tile.from_config(config)


def _config(t: tuple[int, int, int, int, int]) -> Config:
    return Config(Tile(*t).config())


def _preference(problem: Problem, t: tuple[int, int, int, int, int]) -> tuple:
    """Sort key: least padding waste in N and M first, then the larger tile (more reuse per load)."""
    m, n, _ = problem.gemm_shape()
    waste_n = math.ceil(n / t[1]) * t[1] / n
    waste_m = math.ceil(m / t[0]) * t[0] / m
    return (round(waste_n * waste_m, 2), -(t[0] * t[1]), t[2])


@register
class ImplicitGemm(Algorithm):
    """Implicit GEMM with double-buffered shared tiles and register fragments, fp32 FMA."""

    name = "implicit_gemm"
    ops = frozenset({"forward", "dgrad", "wgrad"})
    dtypes = frozenset({"float32"})
    ndims = (2, 3)
    priority = 20
    deterministic = True
    description = ("implicit GEMM: operand tiles gathered into shared memory, register fragments, "
                   "split-K with an ordered second pass; any sizes, groups and strides")
    cost_features = cost.features  # the GEMMs, splits and tiles run plans (cost.py)

    def check(self, problem: Problem, target: Target) -> Verdict:
        for tensor, shape in zip(("x", "w", "y"), (problem.x_shape, problem.w_shape, problem.y_shape)):
            if math.prod(shape) > MAX_INDEX:
                return Verdict.no(f"{tensor} {shape} has 2**31 elements or more (32-bit indexing)")
        return Verdict.yes()

    def configs(self, problem: Problem, target: Target) -> list[Config]:
        if problem.op == "wgrad":
            tiles = WGRAD_TILES_SIM if target.simulator else WGRAD_TILES_GPU
        else:
            tiles = GATHER_TILES_SIM if target.simulator else GATHER_TILES_GPU
        return [_config(t) for t in sorted(tiles, key=lambda t: _preference(problem, t))]

    def sample_problems(self, op: str) -> list[Problem]:
        """Cases the random draws reach rarely: a 3-channel stem, a 1x1 stride-2 dgrad whose odd
        phases have no taps (bias only), a transposed 4x4 stride 2 (DCGAN), depthwise with multiplier 2,
        and a grouped layer whose reduction splits over blocks; in 3D an aligned forward and wgrad and a
        dgrad strided on two axes (phases with and without taps)."""
        cases = {"forward": [dict(n=1, c=3, h=9, w=9, k=5, r=3, s=3, stride=2, padding=1, bias=True),
                             dict(n=1, c=8, h=6, w=6, k=12, r=3, s=3, padding=1, groups=4)],
                 "dgrad": [dict(n=1, c=6, h=7, w=8, k=5, r=1, s=1, stride=2, bias=True),
                           dict(n=1, c=3, h=8, w=8, k=4, r=4, s=4, p=4, q=4, stride=2, padding=1,
                                bias=True),
                           dict(n=1, c=3, h=5, w=5, k=6, r=3, s=3, stride=2, padding=1, groups=3)],
                 "wgrad": [dict(n=2, c=4, h=7, w=7, k=4, r=3, s=3, padding=1, groups=2),
                           dict(n=1, c=3, h=9, w=9, k=5, r=3, s=3, stride=2, padding=1)]}[op]
        volumes = {"forward": make_problem_nd("forward", 1, 8, (3, 4, 4), 8, (2, 2, 2), padding=(1, 0, 1), bias=True),
                   "dgrad": make_problem_nd("dgrad", 1, 3, (4, 5, 4), 4, (3, 3, 1), stride=(2, 1, 2), padding=1,
                                            bias=True),
                   "wgrad": make_problem_nd("wgrad", 2, 4, (3, 4, 4), 4, (2, 2, 2), padding=1)}
        return [make_problem(op, **kw) for kw in cases] + [volumes[op]]

    def workspace_bytes(self, problem: Problem, config: Config, workspace_limit: int,
                        target: Target) -> int:
        """A BM x BN partial per (split, output tile) plus one counter per tile; 0 when unsplit (the
        largest of a strided dgrad's phases, which run one after another)."""
        tile = tile_of(config)
        if problem.op != "wgrad":
            forward.check_tile(tile)
            return gathers.workspace_elements(problem, tile, workspace_limit, target) * problem.itemsize
        wgrad.check_tile(tile)
        splits, _, n_tiles = common.plan(problem, tile, workspace_limit, target=target)
        shape = common.workspace_shape(problem, tile, splits, n_tiles)
        return 0 if shape is None else sum(shape) * problem.itemsize

    def fuses(self, problem: Problem, epilogue: Epilogue) -> str:
        """The forward kernel (2D and 3D) applies any epilogue in its store; dgrad and wgrad do not."""
        if problem.op != "forward":
            return f"fuses epilogues into its forward kernel only, not {problem.op}"
        return ""

    def run_fused(self, problem: Problem, config: Config, a, b, bias, out, epilogue: EpilogueOperands, *,
                  workspace_limit: int) -> None:
        launches.launch(problem, tile_of(config), a, b, bias, out, workspace_limit, epilogue)

    def run(self, problem: Problem, config: Config, a, b, bias, out, *, workspace_limit: int) -> None:
        tile = tile_of(config)  # the kernel factories validate the tile (ValueError naming the rule)
        if problem.op == "wgrad":
            launches.wgrad_launch(problem, tile, a, b, out, workspace_limit)
        else:
            launches.launch(problem, tile, a, b, bias, out, workspace_limit)
