"""The batched GEMM of transform-domain convolutions: one GEMM per transform point (a Winograd tile point,
an FFT frequency bin) and group, on the existing GEMM kernels.

    C[z] (+)= A[z] @ Bt[z]^T        for z < Z:  A [Z, M, K], Bt [Z, N, K], C [Z, M, N], flat and dense

Both operands are k-contiguous (what the tensor-core GEMM's ``Bt`` wants, and the SIMT GEMM reads B
transposed), so a transform kernel writes one layout for either engine. Engines (``kind``):

    "simt"     convlab.kernels.simt.gemm: fp32 (or fp64) operands and accumulators, exact FMA arithmetic
    "tf32x3"   convlab.kernels.tensor_core.gemm, float32 operands split into two TF32 parts each (3 mma a
               product, < 2**-20 error a product: fp32-class)
    "f16", "bf16"  the tensor-core GEMM on operands rounded to the half type, fp32 accumulators

More than GRID_Z GEMMs (an FFT's bins times many groups) take several launches. ``ksplit`` > 1 (SIMT
only) cuts the reduction over blocks into partials that :func:`convlab.kernels.data.splitk.sum_partials`
adds in order (deterministic), into C or onto it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from convlab import runtime
from convlab.kernels.data.splitk import sum_partials
from convlab.kernels.simt.gemm import Strided, Tile, gemm, pick_tiles
from convlab.kernels.tensor_core import gemm as tc_gemm
from convlab.kernels.tensor_core.config import ITYPES, TcConfig

KINDS = ("simt", "tf32x3", "f16", "bf16")
GRID_Z = 65535  # GEMMs (times k-splits) a launch takes at most: the grid's z limit
#: the storage dtype of the operands of each engine (simt: the caller's float32 or float64)
OPERAND_DTYPE = {"tf32x3": np.float32, "f16": np.float16, "bf16": np.uint16}


def k_align(kind: str) -> int:
    """The reduction length must be a multiple of this (16-byte chunks on tensor cores, 1 on SIMT)."""
    return 1 if kind == "simt" else 16 // ITYPES[kind][1]


def padded(length: int, kind: str) -> int:
    """``length`` rounded up to :func:`k_align` (the transform kernels write the padding as zeros)."""
    step = k_align(kind)
    return -(-length // step) * step


def tc_config(kind: str, m: int, target: Any) -> TcConfig:
    """The tensor-core config of the batched GEMM: the simulator's tiny one; on a GPU the 128 x 128 tile,
    or the 64-row one (tf32x3) / 128 x 64 (f16, bf16) when M is small (a Winograd GEMM's M is the output
    channels of a group, often 64)."""
    if target.simulator:
        return tc_gemm.SIM_CONFIG[kind]
    configs = tc_gemm.CONFIGS[kind]
    if m <= 64:
        return configs[2] if kind == "tf32x3" else configs[1]
    return configs[0]


def simt_tile(m: int, n: int, k: int, z: int, dtype: str, target: Any) -> Tile:
    """The SIMT GEMM's tile preset for this shape (convlab.kernels.simt.gemm.pick_tiles' first)."""
    return pick_tiles(m, n, k, z, dtype, target)[0]


def batched_gemm(kind: str, a: Any, bt: Any, c: Any, z: int, m: int, n: int, k: int, *,
                 accumulate: bool = False, ksplit: int = 1, part: Any = None, tile: Tile | None = None,
                 config: TcConfig | None = None) -> None:
    """C[z] (+)= A[z] @ Bt[z]^T (module docstring) on 1-D device arrays of at least Z*M*K, Z*N*K and
    Z*M*N elements. ``part`` (Z*M*N*ksplit float elements) holds the SIMT k-split partials."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    step = GRID_Z // ksplit
    if z > step:  # the grid's z limit: launches of at most ``step`` GEMMs each
        for z0 in range(0, z, step):
            zz = min(step, z - z0)
            batched_gemm(kind, a[z0 * m * k:], bt[z0 * n * k:], c[z0 * m * n:], zz, m, n, k, accumulate=accumulate,
                         ksplit=ksplit, part=part, tile=tile, config=config)
        return
    if kind != "simt":
        if accumulate or ksplit != 1:
            raise ValueError("the tensor-core batched GEMM neither accumulates nor splits k")
        if k % k_align(kind):
            raise ValueError(f"K={k} must be a multiple of {k_align(kind)} for {kind}")
        cfg = config or tc_config(kind, m, runtime.target())
        tc_gemm.batched_launcher(kind, cfg, a[:z * m * k].reshape((z, m, k)), bt[:z * n * k].reshape((z, n, k)),
                                 c[:z * m * n].reshape((z, m, n)))()
        return
    tile = tile or simt_tile(m, n, k, z, str(np.dtype(c.dtype)), runtime.target())
    sa, sb = Strided(a, k, outer=m * k), Strided(bt, k, outer=n * k)
    if ksplit == 1:
        gemm(sa, sb, Strided(c, n, outer=m * n), m, n, k, trans_b=True, accumulate=accumulate, batch=z,
             tile=tile)
        return
    size = z * m * n
    gemm(sa, sb, Strided(part, n, outer=m * n, red=size), m, n, k, trans_b=True, batch=z, tile=tile,
         ksplit=ksplit)
    sum_partials(part[:ksplit * size], c[:size], ksplit, accumulate=accumulate)
