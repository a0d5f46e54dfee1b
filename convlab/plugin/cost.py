"""What a plugin tells the autotuner's cost model about one candidate: the :class:`Features` of a
(plugin, config) on a problem and a target, declared by the plugin itself.

    plugin.cost_features(problem, config, target, workspace_limit) -> Features    the declaration
    plugin.cost_hints(problem, config, target)                      -> dict        its simple form
    features_of(plugin, problem, config, target, workspace_limit)   -> Features    what the model reads:
        the plugin's cost_features (the generic view below when it raises or returns no Features),
        then its cost_hints' entries (HINT_FIELDS) in place of those fields

Generic view (the default of ``Algorithm.cost_features``: a plugin that declares nothing): the dense
FLOPs and fewest bytes of the problem (``Problem.flops`` / ``Problem.bytes``), its scratch written and
read once (2 x ``workspace_bytes``) by one auxiliary kernel when it has any, the GEMM view's output
tiled by the config's ``BM`` x ``BN`` (128 x 128 when it has none) over the groups, 256 threads a
block, fp32 FMA arithmetic (fp64 for float64), kind "other".

The helpers (:func:`blocks_per_sm`, :func:`gemm_tiles`, :func:`operand_loads`, :func:`default_arith`)
are the arithmetic the built-in plugins' declarations share. Units: FLOPs, bytes, counts; nothing here
compiles or runs a kernel. The formula that turns Features into milliseconds is
``convlab.autotune.costmodel``'s.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping

from convlab.problem import Problem
from convlab.runtime.targets import Target

#: arithmetic -> the Target.tflops entry it runs at and the share of it one product gets (3xTF32: three
#: TF32 mma a product)
ARITH_CEILING = {"fp32": ("fp32", 1.0), "fp64": ("fp64", 1.0), "tf32": ("tf32", 1.0),
                 "tf32x3": ("tf32", 1 / 3), "f16": ("f16", 1.0)}
#: the arithmetics that run on tensor cores (the cost model's "tensor" kind, whatever the declared kind)
TENSOR_ARITHS = ("tf32", "tf32x3", "f16")
#: kinds of main kernel, whose typical efficiencies the cost model starts from where no fitted constant
#: speaks for a family: tensor-core MMA tiles, SIMT GEMM tiles (register fragments, shared operand
#: tiles), a stencil over shared halo tiles, one thread per output element with no data reuse, other
KINDS = ("tensor", "simt_gemm", "stencil", "per_output", "other")
#: blocks per SM that count as a full wave: two resident blocks keep an SM busy; more hide latency but
#: do not make a tail cheaper. Held-out geomean regret (worst): 1.3 % (79 %) with 2, 2.3 % (404 %)
#: with 1, 1.8 % (133 %) with 4 or with the occupancy itself (python -m convlab.autotune.fit at 66078f8:
#: results/autotune_model/sm90/66078f8/report.md has the table for 2)
WAVE_BLOCKS_PER_SM = 2
#: the fields a plugin's ``cost_hints`` may return (each replaces the declared or generic value)
HINT_FIELDS = ("family", "arith", "flops", "bytes", "aux_bytes", "launches", "blocks", "passes",
               "threads", "blocks_per_sm", "l2_bytes", "kind")


@dataclass(frozen=True)
class Features:
    """One candidate as the cost model sees it (``convlab.autotune.costmodel`` has the formula).

    ``blocks`` is the block count of one launch of the main kernel, ``passes`` how many such launches
    run one after another (stride phases, sub-batches: their work is in ``flops`` / ``bytes``, their
    launches in ``launches``, so the formula does not read it); ``blocks_per_sm`` the blocks resident on
    an SM at once (threads, shared memory and an estimate of registers).
    """

    family: str  # efficiency group the fit learns: the plugin family ("implicit_gemm", "tensor_core", ...)
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
    kind: str = "other"  # a key of KINDS: the efficiencies a family without fitted constants starts from

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
    """The arithmetic of a plain FMA kernel: fp64 for float64, else fp32."""
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


def generic(plugin: Any, problem: Problem, config: Mapping[str, Any], target: Target,
            workspace_limit: int) -> Features:
    """The generic view of the module docstring (``plugin``: an Algorithm; its ``workspace_bytes``
    raising counts as no scratch)."""
    try:
        scratch = int(plugin.workspace_bytes(problem, config, workspace_limit, target=target))
    except Exception:
        scratch = 0
    m, n, k = problem.gemm_shape()
    bm, bn = int(config.get("BM", 128)), int(config.get("BN", 128))
    tiles, pad = gemm_tiles(m, n, bm, bn)
    return Features(plugin.name, default_arith(problem), problem.flops * pad, float(problem.bytes),
                    2.0 * scratch, 1 + (scratch > 0), tiles * problem.groups, 1, 256,
                    blocks_per_sm(target, 256),
                    operand_loads(m, n, k, bm, bn, problem.itemsize) * problem.groups)


def _hints(plugin: Any, problem: Problem, config: Mapping[str, Any], target: Target) -> Mapping[str, Any]:
    """The plugin's ``cost_hints`` (only those of HINT_FIELDS); {} when it declares none or raises."""
    hook = getattr(plugin, "cost_hints", None)
    if hook is None:
        return {}
    try:
        hints = hook(problem, config, target)
    except Exception:  # a broken hint must not break tuning: the declared or generic view stands
        return {}
    if not isinstance(hints, Mapping):
        return {}
    return {k: v for k, v in hints.items() if k in HINT_FIELDS}


def features_of(plugin: Any, problem: Problem, config: Mapping[str, Any], target: Target,
                workspace_limit: int) -> Features:
    """The candidate's features (module docstring); never raises for a plugin whose methods raise."""
    try:
        base = plugin.cost_features(problem, config, target, workspace_limit)
    except Exception:  # a config the declaration cannot read: the generic view
        base = None
    if not isinstance(base, Features):
        base = generic(plugin, problem, config, target, workspace_limit)
    hints = _hints(plugin, problem, config, target)
    if not hints:
        return base
    fields = base.as_dict()
    for key, value in hints.items():
        fields[key] = str(value) if key in ("family", "arith", "kind") else type(fields[key])(value)
    if fields["arith"] not in ARITH_CEILING:
        fields["arith"] = base.arith
    if fields["kind"] not in KINDS:
        fields["kind"] = base.kind
    return Features(**fields)
