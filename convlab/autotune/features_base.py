"""The :class:`Features` of a candidate and the arithmetic the extractors share (tiles, waves,
occupancy): what :mod:`.features` and :mod:`.families` build on. Units: FLOPs, bytes, counts.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from convlab.problem import Problem
from convlab.runtime.targets import Target

#: arithmetic -> the Target.tflops entry it runs at and the share of it one product gets (3xTF32: three
#: TF32 mma a product)
ARITH_CEILING = {"fp32": ("fp32", 1.0), "fp64": ("fp64", 1.0), "tf32": ("tf32", 1.0),
                 "tf32x3": ("tf32", 1 / 3), "f16": ("f16", 1.0)}
#: blocks per SM that count as a full wave: two resident blocks keep an SM busy; more hide latency but
#: do not make a tail cheaper. Held-out geomean regret (worst): 1.3 % (79 %) with 2, 2.3 % (404 %)
#: with 1, 1.8 % (133 %) with 4 or with the occupancy itself (python -m convlab.autotune.fit at 66078f8:
#: results/autotune_model/sm90/66078f8/report.md has the table for 2)
WAVE_BLOCKS_PER_SM = 2
#: the fields a plugin's ``cost_hints`` may return (each replaces the generic or built-in value)
HINT_FIELDS = ("family", "arith", "flops", "bytes", "aux_bytes", "launches", "blocks", "passes",
               "threads", "blocks_per_sm", "l2_bytes")


@dataclass(frozen=True)
class Features:
    """One candidate as the cost model sees it (see :mod:`.costmodel` for the formula).

    ``blocks`` is the block count of one launch of the main kernel, ``passes`` how many such launches
    run one after another (stride phases, sub-batches: their work is in ``flops`` / ``bytes``, their
    launches in ``launches``, so the formula does not read it); ``blocks_per_sm`` the blocks resident on
    an SM at once (threads, shared memory and an estimate of registers).
    """

    family: str  # efficiency group: the plugin family ("implicit_gemm", "tensor_core", ...)
    arith: str  # a key of ARITH_CEILING
    flops: float  # executed by the main kernel, tile and channel padding included
    bytes: float  # DRAM bytes of the main kernel: its operands read once, its output written once
    aux_bytes: float  # DRAM bytes of the auxiliary kernels: layout copies, unfold / fold, split sums
    launches: int  # kernel launches of one call
    blocks: int
    passes: int
    threads: int
    blocks_per_sm: int
    l2_bytes: float = 0.0  # operand bytes the main kernel's tiles load (A and B re-read per tile)

    def wave_efficiency(self, sm_count: int) -> float:
        """Share of the block slots busy over all waves (1: no tail, full SMs):
        ``blocks / (ceil(blocks / slots) * slots)``, ``slots = sm_count * min(blocks_per_sm,
        WAVE_BLOCKS_PER_SM)``."""
        slots = max(1, sm_count * min(WAVE_BLOCKS_PER_SM, max(1, self.blocks_per_sm)))
        blocks = max(1, self.blocks)
        return blocks / (math.ceil(blocks / slots) * slots)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def default_arith(problem: Problem) -> str:
    return "fp64" if problem.dtype == "float64" else "fp32"


def blocks_per_sm(target: Target, threads: int, shared: int = 0, registers: int = 64) -> int:
    """Resident blocks per SM: the least of the thread, shared-memory and register limits (at least 1)."""
    by_threads = target.threads_per_sm // max(1, threads)
    by_shared = target.smem_per_sm // shared if shared else 32
    by_regs = target.regs_per_sm // max(1, threads * registers)
    return max(1, min(by_threads, by_shared, by_regs, 32))


def gemm_tiles(m: int, n: int, bm: int, bn: int) -> tuple[int, float]:
    """(output tiles, padded / real output elements) of an M x N GEMM in bm x bn tiles."""
    tm, tn = math.ceil(m / bm), math.ceil(n / bn)
    return tm * tn, (tm * bm * tn * bn) / max(1, m * n)


def operand_loads(m: int, n: int, k: int, bm: int, bn: int, itemsize: int) -> float:
    """Bytes the tiles of an M x N x K GEMM load: A once per tile column, B once per tile row."""
    return float(itemsize) * k * (m * math.ceil(n / bn) + n * math.ceil(m / bm))
