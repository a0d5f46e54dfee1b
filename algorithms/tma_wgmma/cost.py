"""What the tma_wgmma plugin tells the cost model (``TmaWgmma.cost_features``), from the plan ``run``
follows:

    main kernel   GEMM M x N x K of the forward form (geometry.py; wgrad: K x T*R*S*C x N*P*Q), the
                  executed FLOPs counting the tile padding of M and N and the channel blocks of each tap
                  (C padded to BK); bytes: the problem's operands once and the output once
    aux kernels   the channels-last copies of operands the copy engine cannot read as they are (NCHW
                  ones, unaligned channel counts, dgrad's flipped filter) and the NCHW output's copy back;
                  split-K: the fp32 partials written and read once by the ordered sum (one launch)
    grid          persistent: blocks = the schedule's units at one CTA per SM (blocks_per_sm 1), so the
                  wave efficiency is that of the units over the SMs

Family ``tma_wgmma``: no results file the fit reads times it, so until a GPU run is fitted the model
prices it with the physics defaults of a "tensor" kernel (convlab.autotune.costmodel.DEFAULT_EFFICIENCY:
0.35 of the f16 / tf32 peak, 0.6 of the DRAM bandwidth, L2 ratio 3).
"""
from __future__ import annotations

import math

from convlab.kernels.arch.wgmma import ITEMSIZE
from convlab.kernels.hopper.config import HopperConfig
from convlab.plugin.cost import Features, operand_loads
from convlab.problem import Problem
from convlab.runtime.targets import Target

ARITH = {"f16": "f16", "bf16": "f16", "tf32": "tf32"}


def features(problem: Problem, cfg: HopperConfig, itype: str, target: Target, gemm: tuple[int, int, int, int],
             units: int, splits: int, copied: int, copies: int) -> Features:
    """``gemm``: (M, N, reduction channels, taps) of the main kernel; ``units``: its persistent schedule's
    units; ``copied``: elements the ``copies`` layout copies write (each read once too)."""
    m, n, c, taps = gemm
    size = ITEMSIZE[itype]
    flops = 2.0 * math.ceil(m / cfg.BM) * cfg.BM * math.ceil(n / cfg.BN) * cfg.BN * taps * math.ceil(c / cfg.BK) * cfg.BK
    aux = 2.0 * copied * problem.itemsize + (2.0 * 4 * splits * m * n if splits > 1 else 0.0)
    launches = 1 + (splits > 1) + copies
    return Features("tma_wgmma", ARITH[itype], flops, float(problem.bytes), aux, launches, units, 1,
                    cfg.threads(target.simulator), 1, operand_loads(m, n, taps * c, cfg.BM, cfg.BN, size),
                    kind="tensor")
