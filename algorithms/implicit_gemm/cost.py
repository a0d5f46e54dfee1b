"""What the implicit-GEMM plugin tells the cost model (``ImplicitGemm.cost_features``), from the plans its
``run`` follows: the GEMMs of :mod:`.gathers` (one forward, a stride phase each for dgrad) or wgrad's one
GEMM, each split over blocks by :func:`.common.plan`.

    flops     2 * M * N * ceil(K / BK) * BK per GEMM and group, the output tiles' padding included
    l2_bytes  A re-read per tile column, B per tile row (convlab.plugin.cost.operand_loads)
    aux       the split-K partials, written and read (fp32)
    launches  one per GEMM, and wgrad's ordered sum of the partials when split
    blocks    the largest GEMM's tiles x groups x splits, occupancy at the family's register cap
"""
from __future__ import annotations

import math

from convlab.kernels.simt.tile import Tile
from convlab.plugin.contract import Algorithm, Config
from convlab.plugin.cost import Features, blocks_per_sm, default_arith, gemm_tiles, operand_loads
from convlab.problem import Problem
from convlab.runtime.targets import Target

from . import common, gathers


def features(plugin: Algorithm, problem: Problem, config: Config, target: Target, workspace_limit: int) -> Features:
    """The features of the implicit GEMM (``plugin``: its ``cost_features``) with ``config``'s tile on
    ``problem`` (module docstring)."""
    pr, tile = problem, Tile.from_config(config)
    shapes = [pr.gemm_shape()] if pr.op == "wgrad" else [(g.m, g.n, g.k) for g in gathers.gathers(pr)]
    flops = l2 = aux = 0.0
    blocks = 0
    for m, n, k in shapes:
        splits, _, _ = common.plan(pr, tile, workspace_limit, (m, n, k), target=target)
        tiles, pad = gemm_tiles(m, n, tile.bm, tile.bn)
        flops += 2.0 * m * n * math.ceil(k / tile.bk) * tile.bk * pad * pr.groups
        l2 += operand_loads(m, n, k, tile.bm, tile.bn, pr.itemsize) * pr.groups
        blocks = max(blocks, tiles * pr.groups * splits)
        if splits > 1:
            aux += 2.0 * splits * tiles * pr.groups * tile.bm * tile.bn * 4
    split_pass = pr.op == "wgrad" and aux > 0
    occupancy = blocks_per_sm(target, tile.threads, tile.shared_bytes(pr.itemsize),
                              common.register_cap(tile.threads))
    return Features(plugin.name, default_arith(pr), flops, float(pr.bytes), aux, len(shapes) + split_pass,
                    blocks, len(shapes), tile.threads, occupancy, l2, kind="simt_gemm")
