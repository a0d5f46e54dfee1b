"""What the fft plugin tells the cost model (``cost_features``), from the plan its ``run`` follows:

    flops     every FLOP executed: 2.5 N log2 N a real transform of N points (half a complex one's 5 N log2 N)
              for the filter, input and output patches, and 8 a complex product summed (4 multiplies and
              4 additions) at every bin of every tile, output and input channel (GEMM padding aside)
    bytes     the operands read once and the output written once (the problem's fewest bytes)
    aux       the spectra and the GEMM's output written once and read once, a pass
    launches  the filter transform, then per pass the input transform, the GEMM (and its split sum) and the
              inverse (product=inline: no GEMM)
    blocks    the GEMM's grid (product=inline: the inverse transform's)
"""
from __future__ import annotations

import math

from convlab.kernels.fft.spectrum import block_threads, patches_per_block
from convlab.kernels.transform import gemm as tgemm
from convlab.plugin.contract import Algorithm, Config
from convlab.plugin.cost import Features, blocks_per_sm, gemm_tiles, operand_loads
from convlab.problem import Problem
from convlab.runtime.targets import Target

from .plan import Plan, make_plan


def transform_flops(nf: tuple[int, int]) -> float:
    points = nf[0] * nf[1]
    return 2.5 * points * math.log2(max(points, 2))


def wgrad_ksplit(problem: Problem, plan: Plan, target: Target) -> int:
    """k-splits of wgrad's SIMT GEMM (reduction: twice a pass's tiles): two blocks per SM, each split at least
    8 k tiles long (2 on the simulator, at most 3 splits there), within the grid's z limit."""
    t = 2 * plan.nb * plan.t_img
    tile = tgemm.simt_tile(2 * plan.k_out, plan.c_in, t, plan.z, "float32", target)
    blocks = math.ceil(2 * plan.k_out / tile.bm) * math.ceil(plan.c_in / tile.bn) * plan.z
    least, cap = (2, 3) if target.simulator else (8, 256)
    want = min(math.ceil(2 * target.sm_count / blocks), t // (least * tile.bk), cap, tgemm.GRID_Z // plan.z)
    return max(1, want)


def features(plugin: Algorithm, problem: Problem, config: Config, target: Target, workspace_limit: int) -> Features:
    """The features of ``config`` on ``problem`` (module docstring)."""
    pr = problem
    plan = make_plan(pr, config, workspace_limit)
    passes = math.ceil(max(pr.n, 1) / plan.nb)
    tiles = max(pr.n, 1) * plan.t_img
    g, ci, ko = plan.groups, plan.c_in, plan.k_out
    patches = g * (ko * ci + tiles * (ci + ko))  # filters (wgrad: the gradient's inverse) and the tiles' two
    products = 8.0 * plan.bins * g * ko * ci * tiles
    flops = patches * transform_flops(plan.nf) + products
    aux = 2.0 * 4 * plan.buffers(pr) * passes
    t = plan.nb * plan.t_img
    if plan.inline:
        pb = patches_per_block(*plan.nf, target.simulator)
        threads = block_threads(target.simulator)
        blocks = math.ceil(g * ko * t / pb)
        return Features(plugin.name, "fp32", flops, float(pr.bytes), aux, 1 + 2 * passes, blocks, passes, threads,
                        blocks_per_sm(target, threads, 16 * pb * plan.nf[0] * plan.nf[1], 64), kind="other")
    m, n, k = (2 * ko, ci, 2 * t) if pr.op == "wgrad" else (2 * ko, t, 2 * ci)
    ks = wgrad_ksplit(pr, plan, target) if pr.op == "wgrad" else 1
    tile = tgemm.simt_tile(m, n, k, plan.z, "float32", target)
    out_tiles, _ = gemm_tiles(m, n, tile.bm, tile.bn)
    launches = 1 + passes * (3 + (ks > 1))
    return Features(plugin.name, "fp32", flops, float(pr.bytes), aux, launches, out_tiles * plan.z * ks, passes,
                    tile.threads, blocks_per_sm(target, tile.threads, tile.shared_bytes(4), 64),
                    operand_loads(m, n, k, tile.bm, tile.bn, 4) * plan.z * passes, kind="simt_gemm")
