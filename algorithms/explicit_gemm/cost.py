"""What the explicit-GEMM plugins (im2col, col2im) tell the cost model (their ``cost_features``), from the column plan their ``run`` follows
(:func:`.common.column_plan`: images per sub-batch, wgrad's k-splits):

    flops     2 * M * N * K per image and group (:func:`.common.gemm_shape`), the tiles' padding included
    l2_bytes  A re-read per tile column, B per tile row, per image and group
    aux       the column buffer written and read (none for a pointwise layer), the k-split partials
    launches  per sub-batch: the GEMM, the unfold or fold (not pointwise), wgrad's ordered split sum
    blocks    one sub-batch GEMM's tiles x its batch (images x groups; wgrad: groups x k-splits)

Known limit: ``aux`` counts a 3D problem's column buffer as C*R*S x P*Q per image, T*Do times less than
the 3D unfold writes; it changes together with the 3D GEMM plugins' features once 3D times are measured
to fit on.
"""
from __future__ import annotations

import math

from convlab.kernels.simt.tile import Tile
from convlab.plugin.contract import Algorithm, Config
from convlab.plugin.cost import Features, blocks_per_sm, default_arith, gemm_tiles, operand_loads
from convlab.problem import Problem
from convlab.runtime.targets import Target

from . import common


def features(plugin: Algorithm, problem: Problem, config: Config, target: Target, workspace_limit: int) -> Features:
    """The features of ``plugin`` (im2col or col2im: its ``cost_features``) with ``config``'s tile
    (module docstring)."""
    pr, tile = problem, Tile.from_config(config)
    plan = common.column_plan(pr, tile, workspace_limit, target)
    m, n, k = common.gemm_shape(pr)
    subs = max(1, math.ceil(pr.n / max(1, plan.nb)))
    images = max(1, min(pr.n, plan.nb))
    tiles, pad = gemm_tiles(m, n, tile.bm, tile.bn)
    ksplit = plan.ksplit if pr.op == "wgrad" else 1
    gemm_batch = pr.groups * (1 if pr.op == "wgrad" else images)
    per_image = pr.c * pr.r * pr.s * pr.p * pr.q
    aux = 0.0 if plan.pointwise else 2.0 * pr.n * per_image * pr.itemsize  # columns written, read
    aux += 2.0 * plan.part * pr.itemsize * subs
    per_sub = 1 + (not plan.pointwise) + (pr.op == "wgrad" and ksplit > 1)
    return Features(plugin.name, default_arith(pr), 2.0 * m * n * k * pad * pr.groups * max(pr.n, 1),
                    float(pr.bytes), aux, subs * per_sub, tiles * gemm_batch * ksplit, subs,
                    tile.threads, blocks_per_sm(target, tile.threads, tile.shared_bytes(pr.itemsize), 64),
                    operand_loads(m, n, k, tile.bm, tile.bn, pr.itemsize) * pr.groups * max(pr.n, 1),
                    kind="simt_gemm")
