"""What the tensor-core plugins (tensor_core, tf32x3) tell the cost model (``TensorCore.cost_features``),
from the plan their ``run`` follows on each route:

    route                 GEMM M x N x K                    auxiliary kernels (aux bytes, launches)
    forward, dgrad s=1    N*P*Q x K x R*S*Cpad of the       NHWC copy of x (dy) and KRSC filter, channels
                          gathered forward (plugin.py)      padded (none read as they are), split-K sum
    dgrad, stride > 1     N*P*Q x C*R*S x Kpad              dy / filter copies, a GEMM and a fold per pass
                          (strided.py), passes of images    of images (fp32 columns)
    dgrad, stride > 1,    per phase N*Hf*Wf x C x Th*Tw*Kp  dy's NHWC copy, a filter per phase, the bias
    C >= 16 (phases.py)   (the phases' sums)                fill when a phase has no taps
    wgrad, 1x1, small     K x C*R*S x N*PQp (wgrad.py)      the unfolds of dy and x (none read as they
    planes, stems                                           are), the split and part partials' sum
    wgrad, more taps on   T*R*S*Cp x K x N*PQp (taps.py)    dy's split-major copy (none when dense), x's
    large planes, 3D                                        NHWC copy (an NCHW x: the layout the cost
                                                            model prices), the partials' ordered sum
                                                            (and a 1x1 one whose x is channels-last:
                                                            priced as the 1x1 route, the model sees no
                                                            layout)

``flops`` counts the K tiles (BK) and the output tiles' padding; ``l2_bytes`` the operands the tiles load;
occupancy at the config's register cap (168 for wgmma, 128 for mma.sync, when it sets none). The
warpgroup configs (``MMA=wgmma``) are the family ``<plugin>_wgmma``: no results file the fit reads times
them, so no fitted constant of the mma.sync kernels speaks for them and they start from the physics
defaults until such a file does.
"""
from __future__ import annotations

import math

from convlab.kernels.tensor_core.config import TcConfig
from convlab.plugin.contract import Algorithm
from convlab.plugin.cost import Features, blocks_per_sm, gemm_tiles, operand_loads
from convlab.problem import Problem
from convlab.runtime.targets import Target

from . import phases, strided, wgrad

#: the kernels' input type -> the arithmetic the cost model prices
ARITH = {"f16": "f16", "bf16": "f16", "tf32": "tf32", "tf32x3": "tf32x3"}


def features(plugin: Algorithm, problem: Problem, cfg: TcConfig, target: Target, workspace_limit: int,
             align: int, gathered: tuple[dict, int] | None) -> Features:
    """The features of ``plugin`` (its ``cost_features``) with tile ``cfg``: ``align`` channels per 16-byte
    chunk; ``gathered``: (the gathered forward geometry, split-K splits) of a forward or stride-1 dgrad,
    None on the other routes (module docstring)."""
    pr, size = problem, problem.itemsize
    regs = cfg.REGS or (168 if cfg.wgmma else 128)
    occupancy = blocks_per_sm(target, cfg.threads, cfg.shared_bytes(plugin.itype(pr.dtype)), regs)
    passes = 1
    if pr.op == "wgrad":
        plan = wgrad.plan(pr, cfg, align, target)
        (m, n), k = wgrad.gemm_mn(pr, align), pr.n * plan.pqp
        dense, x_too = wgrad.as_is(pr, plan.splits, align, plan.pqp)
        parts = plan.splits * plan.parts
        if wgrad.tap_gather(pr):  # dy's copy, x to NHWC (read C channels, written Cp), partials summed
            vox, cp = math.prod(pr.spatial_in), wgrad.padded(pr.c, align)
            copies = (0 if dense else 2 * pr.n * plan.pqp * pr.k) + pr.n * vox * (pr.c + cp)
            aux = float(copies * size) + 2.0 * 4 * parts * m * n
            launches = 3 + (not dense)
        else:
            unfold = (0 if dense else pr.n * plan.pqp * pr.k) + (0 if x_too else pr.n * plan.pqp * n)
            aux = 2.0 * unfold * size + (2.0 * 4 * parts * m * n if parts > 1 else 0.0)
            launches = 1 + (not dense) + (not x_too) + (parts > 1)
        blocks = gemm_tiles(m, n, cfg.BM, cfg.BN)[0] * parts
    elif gathered is None and phases.applies(pr):  # the phase route of a strided dgrad
        flops, blocks = phases.flops_and_blocks(pr, cfg)
        gemms, fill = phases.gemms(pr), phases.empty(pr)
        copies = 2 * pr.n * pr.p * pr.q * (pr.k + wgrad.padded(pr.k, align)) + 2 * phases.filter_elements(pr)
        aux = float(copies * size) + (float(pr.n * pr.c * pr.h * pr.w * size) if fill else 0.0)
        family = plugin.name + ("_wgmma" if cfg.wgmma else "")
        return Features(family, ARITH[plugin.itype(pr.dtype)], flops, float(pr.bytes), aux, 1 + 2 * len(gemms) + fill,
                        blocks, 1, cfg.threads, occupancy,
                        sum(operand_loads(*g, cfg.BM, cfg.BN, size) for g in gemms), kind="tensor")
    elif gathered is None:  # the column route of a strided dgrad
        m, n, k = strided.gemm_shape(pr)
        passes = math.ceil(pr.n / strided.images_per_pass(pr, workspace_limit))
        aux = 2.0 * (size * strided.operand_elements(pr) + 4 * m * n)  # operands in dtype, fp32 columns
        launches = 2 + 2 * passes  # the two copies, then a GEMM and a fold per pass
        blocks = gemm_tiles(math.ceil(m / passes), n, cfg.BM, cfg.BN)[0]
    else:
        geo, splits = gathered
        cp = wgrad.padded(geo["c"], align)
        m, n, k = geo["n"] * geo["p"] * geo["q"], geo["k"], geo["r"] * geo["s"] * cp
        one = (geo["r"], geo["s"], tuple(geo["stride"]), tuple(geo["padding"])) == (1, 1, (1, 1), (0, 0))
        x_read = one and not cfg.wgmma and (geo["h"] * geo["w"]) % (16 // size) == 0 and cp == geo["c"]
        w_read = pr.op == "forward" and cp == geo["c"] and geo["r"] * geo["s"] == 1
        copies = (0 if x_read else geo["n"] * geo["h"] * geo["w"] * (geo["c"] + cp)) + \
            (0 if w_read else geo["k"] * geo["r"] * geo["s"] * (geo["c"] + cp))
        aux = float(copies * size) + (2.0 * 4 * splits * m * n if splits > 1 else 0.0)
        launches = 1 + (not x_read) + (not w_read) + (splits > 1)
        blocks = gemm_tiles(m, n, cfg.BM, cfg.BN)[0] * splits
    _, pad = gemm_tiles(m, n, cfg.BM, cfg.BN)
    family = plugin.name + ("_wgmma" if cfg.wgmma else "")
    return Features(family, ARITH[plugin.itype(pr.dtype)], 2.0 * m * n * math.ceil(k / cfg.BK) * cfg.BK * pad,
                    float(pr.bytes), aux, launches, blocks, passes, cfg.threads, occupancy,
                    operand_loads(m, n, k, cfg.BM, cfg.BN, size), kind="tensor")
