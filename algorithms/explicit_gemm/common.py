"""What the explicit-GEMM plugins (im2col: forward and wgrad, col2im: dgrad) share: the GEMM view of a
problem over the column buffer (convlab.kernels.conv.columns has its layout), the tile configs, the
sub-batch plan that keeps the column buffer under the workspace limit, the predicate, one base class,
and the column buffer's loan. 3D problems' columns hold the depth taps and output depths too: the same
GEMMs with RS -> TRS and PQ -> DoPQ.

    op       M      N      K     (summed over images for wgrad, in k-splits added by sum_partials)
    forward  K'     PQ     C'RS
    dgrad    C'RS   PQ     K'
    wgrad    K'     C'RS   PQ
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np

from convlab import runtime
from convlab.kernels.simt.gemm import Tile, pick_tiles, tiles_for
from convlab.plugin.contract import Algorithm, Config, Verdict
from convlab.problem import Problem, make_problem_nd
from convlab.runtime.scratch import scratch
from convlab.runtime.targets import Target

_GRID_Y = 65535
_U32 = 2 ** 32


@dataclass(frozen=True)
class Plan:
    """How ``run`` splits a problem: ``nb`` images per sub-batch, ``ksplit`` k-splits (wgrad), and the
    elements of the column buffer and of the wgrad partial-product buffer it allocates."""

    pointwise: bool
    nb: int
    ksplit: int
    cols: int
    part: int

    def workspace_bytes(self, itemsize: int) -> int:
        return (self.cols + self.part) * itemsize


def pointwise(problem: Problem) -> bool:
    """1x1 kernel, stride 1, no padding, full output: the input (or dx) already is the column matrix."""
    nd = problem.ndim
    return (problem.kernel_size == (1,) * nd and problem.strides == (1,) * nd
            and problem.paddings == (0,) * nd and problem.spatial_out == problem.spatial_in)


def taps(problem: Problem) -> int:
    """Filter taps per channel: R*S (3D: T*R*S), the column rows of one channel."""
    return math.prod(problem.kernel_size)


def pixels(problem: Problem) -> int:
    """Output pixels per image: P*Q (3D: Do*P*Q), the column matrix's width."""
    return math.prod(problem.spatial_out)


def gemm_shape(problem: Problem) -> tuple[int, int, int]:
    """(M, N, K) of one GEMM per image and group: forward K' x PQ x C'RS, dgrad C'RS x PQ x K',
    wgrad K' x C'RS x PQ (summed over images; 3D: RS -> TRS, PQ -> DoPQ)."""
    crs, pq = problem.c_per_group * taps(problem), pixels(problem)
    kg = problem.k_per_group
    return {"forward": (kg, pq, crs), "dgrad": (crs, pq, kg), "wgrad": (kg, crs, pq)}[problem.op]


def tile_of(config: Config) -> Tile:
    """The Tile a config names (ValueError for a malformed one)."""
    return Tile.from_config(config)


def tile_configs(problem: Problem, target: Target, count: int = 3) -> list[Config]:
    """The best ``count`` tile presets of ``target`` for the problem's GEMM, as Configs."""
    m, n, k = gemm_shape(problem)
    batch = problem.groups * (1 if problem.op == "wgrad" else max(problem.n, 1))
    return [Config(t.config()) for t in pick_tiles(m, n, k, batch, problem.dtype, target)[:count]]


def _wgrad_ksplit(problem: Problem, tile: Tile, images: int, target: Target) -> int:
    """k-splits of the wgrad GEMM: enough blocks to fill the GPU, each split >= a few k tiles (the
    simulator: at most 3 splits of 2 k tiles or more, so that its small problems split)."""
    m, n, k = gemm_shape(problem)
    blocks = math.ceil(m / tile.bm) * math.ceil(n / tile.bn) * problem.groups
    tiles = math.ceil(k / tile.bk) * images
    min_tiles, cap = (2, 3) if target.simulator else (8, 256)
    want = min(math.ceil(4 * target.sm_count / blocks), tiles // min_tiles, cap, _GRID_Y // problem.groups)
    return max(1, want)


def column_plan(problem: Problem, tile: Tile, workspace_limit: int, target: Target) -> Plan:
    """The sub-batch and buffers for ``problem`` on ``target`` (im2col's forward/wgrad, col2im's dgrad).

    When even one image's columns exceed the limit, ``nb`` is 1 and the plan's workspace is over it
    (the plugins then decline)."""
    pr = problem
    is_pointwise = pointwise(pr)
    per_image = pr.c * taps(pr) * pixels(pr)  # column elements of one image
    z_cap = max(1, _GRID_Y // pr.groups)
    ksplit, part = 1, 0
    if pr.op == "wgrad":
        ksplit = _wgrad_ksplit(pr, tile, max(pr.n, 1), target)
        part = ksplit * int(np.prod(pr.w_shape)) if ksplit > 1 else 0
    if pr.n == 0:
        return Plan(is_pointwise, 0, 1, 0, 0)
    if is_pointwise:
        return Plan(True, min(pr.n, z_cap), ksplit, 0, part)
    room = max(0, workspace_limit // pr.itemsize - part)
    nb = max(1, min(pr.n, room // per_image, (_U32 - 1) // per_image, z_cap))
    if pr.op == "wgrad" and nb < pr.n:  # fewer images per GEMM: maybe fewer k-splits
        ksplit = _wgrad_ksplit(pr, tile, nb, target)
        part = ksplit * int(np.prod(pr.w_shape)) if ksplit > 1 else 0
    return Plan(False, nb, ksplit, nb * per_image, part)


def check_indexing(problem: Problem, target: Target) -> Verdict:
    """Decline problems the 32-bit index arithmetic of the kernels or the grid limits cannot reach."""
    pr = problem
    sizes = {"a": int(np.prod(pr.operand_shapes[0])), "b": int(np.prod(pr.operand_shapes[1])),
             "out": int(np.prod(pr.operand_shapes[2])),
             "one image's column matrix": pr.c * taps(pr) * pixels(pr)}
    for name, size in sizes.items():
        if size >= _U32:
            return Verdict.no(f"{name} has {size} elements; the GEMM kernels index with 32 bits")
    m, rows = gemm_shape(pr)[0], min(t.bm for t in tiles_for(target)) * _GRID_Y
    if m > rows:
        return Verdict.no(f"GEMM M={m} is over {rows}: more than {_GRID_Y} row tiles")
    return Verdict.yes()


class ColumnGemmAlgorithm(Algorithm):
    """What im2col and col2im share: the predicate, the tile configs, and the column-buffer plan that
    sub-batches images so the workspace stays under the limit."""

    ndims = (2, 3)

    def check(self, problem: Problem, target: Target) -> Verdict:
        return check_indexing(problem, target)

    def sample_problems(self, op: str) -> list[Problem]:
        """One 3D problem per op: the 3D unfold / fold kernels in the corpus."""
        return [make_problem_nd(op, 1, 4, (3, 4, 3), 2, (2, 2, 2), stride=(2, 1, 1), padding=(1, 0, 1),
                                groups=2, bias=op != "wgrad")]

    def configs(self, problem: Problem, target: Target) -> list[Config]:
        return tile_configs(problem, target)

    def workspace_bytes(self, problem: Problem, config: Config, workspace_limit: int,
                        target: Target) -> int:
        plan = column_plan(problem, tile_of(config), workspace_limit, target)
        return plan.workspace_bytes(problem.itemsize)

    def plan(self, problem: Problem, config: Config, workspace_limit: int) -> tuple[Tile, Plan]:
        """The tile and the sub-batch plan on the current target; ValueError if even one image
        exceeds the limit."""
        tile = tile_of(config)
        plan = column_plan(problem, tile, workspace_limit, runtime.target())
        need = plan.workspace_bytes(problem.itemsize)
        if need > workspace_limit:
            raise ValueError(f"{self.name} needs {need} bytes of workspace, over the limit of "
                             f"{workspace_limit}")
        return tile, plan


def lend_columns(n: int, dtype: str):
    """A column buffer of ``n`` elements lent for the call (convlab.runtime.scratch), or None when the plan
    needs none."""
    return scratch(n, dtype) if n else contextlib.nullcontext(None)
