"""Tensor-core GEMM: C[M, N] = A[M, K] @ B[K, N], with B given transposed as Bt[N, K] (both k-contiguous).

Inputs fp16 ('f16', float16 arrays), bf16 ('bf16', uint16/int16 arrays of bf16 bits) or fp32 ('tf32',
float32 arrays, cut to TF32 in the kernel: warp.TF32_ROUND; 'tf32x3', float32 arrays split into
two TF32 parts, three mma a product); fp32 accumulators; C float32 or the input type. Bt[N, K] is
what ``ldmatrix`` (no .trans) turns into B fragments for both 16- and 32-bit inputs (a [K, N] B would
need ``.trans``, 16-bit only); it is also the conv forward's weight layout [K_out, C*R*S]. K must be a
multiple of 8 (16-bit) or 4 (32-bit): rows of 16-byte chunks; M, N and K are otherwise free (zero-filled
copies and a bounds-checked epilogue).

The loop nest, shared layout, pipeline and epilogue are :mod:`convlab.kernels.tensor_core.warp`'s (a wgmma
config's, ``TcConfig.MMA``: :mod:`convlab.kernels.tensor_core.warpgroup`'s, Hopper only, f16 / bf16 / tf32 with TF32
truncation); this module gives it the dense A loader (chunk kk of row m at m * K + kk) and the dense
store (C[row, col]).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from convlab import runtime
from convlab.kernels.arch.intrinsics import u32 as U
from convlab.kernels.source import Writer
from convlab.kernels.tensor_core.config import ITYPES, TcConfig
from convlab.kernels.tensor_core.copy import ALoader
from convlab.kernels.tensor_core.epilogue import Store, vector_ok
from convlab.kernels.tensor_core.launch import compile_kernel, configure
from convlab.kernels.tensor_core.warp import DEFAULT_TF32_ROUND, OUT_CONVERT, pipeline_source

#: configs for the GPU (the first three static, 48 KiB or less); the simulator uses SIM_CONFIG.
CONFIGS = {"f16": [TcConfig(128, 128, 32, 64, 64, 3), TcConfig(128, 64, 32, 64, 32, 4),
                   TcConfig(128, 128, 32, 64, 32, 2), TcConfig(128, 256, 32, 64, 64, 3),
                   TcConfig(128, 128, 64, 64, 64, 3)],
           "tf32": [TcConfig(128, 128, 16, 64, 64, 3), TcConfig(128, 64, 16, 64, 32, 4),
                    TcConfig(64, 128, 16, 32, 64, 4), TcConfig(128, 128, 32, 64, 64, 3),
                    TcConfig(128, 256, 16, 64, 64, 4), TcConfig(128, 128, 32, 64, 64, 4)]}
CONFIGS["bf16"], CONFIGS["tf32x3"] = CONFIGS["f16"], CONFIGS["tf32"]
SIM_CONFIG = {"f16": TcConfig(32, 32, 16, 16, 32, 3), "bf16": TcConfig(32, 32, 16, 16, 32, 2),
              "tf32": TcConfig(32, 32, 8, 16, 32, 3), "tf32x3": TcConfig(32, 32, 8, 16, 32, 3)}
#: wgmma configs (Hopper, sm_90a; warpgroup) for 4096^3-class GEMMs: 128-byte rows (the 128B swizzle),
#: two warpgroups of m64n256 / m64n128 (one of two m64n128 slices: 256x128), or four of m64n128 (the last
#: f16 one); one wgmma group in flight ("wgmma") or none ("wgmma0"). ptxas 13.5 (sm_90a): 225 registers
#: for the n256 ones, 118 for 128x128, 200 for 256x128, 100 for the four-warpgroup tile; no spills
#: (tools/wgmma_ptx_check.py --configs all)
WGMMA_CONFIGS = {"f16": [TcConfig(128, 256, 64, 64, 256, 4, 0, "wgmma"),
                         TcConfig(128, 128, 64, 64, 128, 5, 0, "wgmma"),
                         TcConfig(256, 128, 64, 128, 128, 4, 0, "wgmma"),
                         TcConfig(128, 256, 64, 64, 256, 3, 0, "wgmma0"),
                         TcConfig(128, 256, 64, 64, 128, 4, 0, "wgmma")],
                 "tf32": [TcConfig(128, 256, 32, 64, 256, 4, 0, "wgmma"),
                          TcConfig(128, 128, 32, 64, 128, 5, 0, "wgmma"),
                          TcConfig(256, 128, 32, 128, 128, 4, 0, "wgmma")]}
WGMMA_CONFIGS["bf16"] = WGMMA_CONFIGS["f16"]
#: the simulator's wgmma configs: one warpgroup, 32-byte rows (the 32B swizzle), narrow N
SIM_WGMMA = {"f16": TcConfig(64, 32, 16, 64, 32, 3, 0, "wgmma"), "bf16": TcConfig(64, 16, 16, 64, 16, 2, 0, "wgmma0"),
             "tf32": TcConfig(64, 32, 8, 64, 32, 3, 0, "wgmma")}


class DenseA(ALoader):
    """A[M, K] row-major: chunk kk of row m at element m * K + kk."""

    params = "A, Bt, C, M, N, K"

    def rows(self, w: Writer, e: int, m: str, batch: str | None) -> None:
        w(f"aok{e} = {m} < M")
        w(f"ag{e} = U({m} * K) if aok{e} else U(0)")

    def chunk(self, e: int, kk: str, k_ok: str) -> tuple[str, str]:
        return f"aok{e} and {k_ok}", f"U(ag{e} + {kk})"


class BatchedA(DenseA):
    """A[z, M, K] flat, Bt[z, N, K] and C[z, M, N] flat too: grid z = the batch (one matrix each)."""

    params = "A, Bt, C, M, N, K, sA, sB, sC"
    batched = True

    def matrix_offset(self, batch: str, stride: str) -> str:
        """The offset of block ``batch``'s operand in A or Bt (``stride``: sA, sB, elements a matrix)."""
        return f"U({batch} * {stride})"

    def b_offset(self, batch: str) -> str:
        return self.matrix_offset(batch, "sB")

    def rows(self, w: Writer, e: int, m: str, batch: str | None) -> None:
        """A's rows are Bt's length (``b_stride``)."""
        w(f"aok{e} = {m} < M")
        w(f"ag{e} = U({self.matrix_offset(batch, 'sA')} + U({m} * {self.b_stride})) if aok{e} else U(0)")


class PartedA(BatchedA):
    """A batch of GEMMs whose reductions are cut in ``parts`` slices of K: block z runs slice z % parts
    of matrix z // parts, A[z // parts][:, (z % parts)*K : +K] and the same slice of Bt (rows ``ld``
    long), into C[z] (grid z = batch * parts: a split-K inside each matrix of a batch)."""

    params = "A, Bt, C, M, N, K, sA, sB, sC, ld, parts"
    b_stride = "ld"

    def matrix_offset(self, batch: str, stride: str) -> str:
        return f"U(U(U({batch} // parts) * {stride}) + U(U({batch} % parts) * K))"


class DenseStore(Store):
    """C[row, col] (row-major, flat) = value, converted to the output kind."""

    contig, array = "n", "C"

    def __init__(self, out: str, itype: str) -> None:
        self.convert = OUT_CONVERT[out]
        self.dtype = {"f32": np.float32, "bf16": np.uint16, "in": ITYPES[itype][0]}[out]

    def row(self, w: Writer, row: str, batch: str | None) -> None:
        w(f"cb = U({row} * N)")

    def addr(self, col: str) -> str:
        return f"U(cb + {col})"

    def value(self, col: str, v: str) -> str:
        return self.convert.format(v)


class BatchedStore(DenseStore):
    """C[z, row, col] of a flat C, matrices sC elements apart."""

    def row(self, w: Writer, row: str, batch: str | None) -> None:
        w(f"cb = U(U({batch} * sC) + U({row} * N))")


def _source(cfg: TcConfig, itype: str, out: str, batched: bool = False, parted: bool = False,
            tf32_round: str | None = None) -> str:
    loader, store = (PartedA(), BatchedStore(out, itype)) if parted else \
        (BatchedA(), BatchedStore(out, itype)) if batched else (DenseA(), DenseStore(out, itype))
    return pipeline_source(cfg, itype, loader, store, "gemm", tf32_round)


def _out_kind(itype: str, out_dtype: Any) -> str:
    out = np.dtype(out_dtype)
    if out == np.float32:
        return "f32"
    if itype == "f16" and out == np.float16:
        return "in"
    if itype == "bf16" and out in (np.uint16, np.int16):
        return "bf16"
    raise ValueError(f"out_dtype for {itype} must be float32 or the input type, got {out}")


@functools.cache
def make_tc_gemm(itype: str, cfg: TcConfig, out_dtype: str = "float32", batched: bool = False,
                 parted: bool = False, tf32_round: str | None = None) -> Callable:
    """The kernel (A, Bt, C, M, N, K) for one input type, config and output dtype (cached).

    A [M, K], Bt [N, K], C [M * N] (flat) C-contiguous device arrays; M, N, K uint32; then ``vec``
    (tc_epilogue.vector_ok of C). Grid (ceil(M/BM) * ceil(N/BN), 1, batch) (tc_launch.configure),
    ``cfg.threads`` threads per block. ``batched``: (A, Bt, C, M, N, K, sA, sB, sC, vec) on flat arrays,
    matrix z at z * sA, z * sB, z * sC; grid z = the batch. ``parted``: (..., sC, ld, parts, vec),
    :class:`PartedA`'s slices of rows ``ld`` long. ``tf32_round``: warp.TF32_ROUND's key.
    """
    cfg = TcConfig(*cfg).validate(itype)
    out = _out_kind(itype, out_dtype)
    kind = " parted" if parted else " batched" if batched else ""
    filename = f"<convlab.kernels.tensor_core.gemm {itype} {cfg.name} {out}{kind}" + \
        (f" tf32 {tf32_round or DEFAULT_TF32_ROUND}>" if itype == "tf32" else ">")
    return compile_kernel(_source(cfg, itype, out, batched, parted, tf32_round), "gemm", filename, cfg,
                          itype)


def kernel_source(itype: str, cfg: TcConfig, out_dtype: str = "float32", batched: bool = False) -> str:
    """The generated source of one kernel (for reading and debugging)."""
    return _source(TcConfig(*cfg).validate(itype), itype, _out_kind(itype, out_dtype), batched)


def to_storage(itype: str, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(array in ``itype``'s storage type, its exact float64 values) for float ``values``.

    f16: float16; bf16: uint16 bits rounded to nearest even; tf32 and tf32x3: float32 (the kernel cuts
    it to TF32, or splits it into two TF32 parts).
    """
    v32 = np.ascontiguousarray(values, np.float32)
    if itype == "f16":
        stored = v32.astype(np.float16)
        return stored, stored.astype(np.float64)
    if itype == "bf16":
        bits = v32.view(np.uint32).astype(np.uint64)
        stored = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        return stored, (stored.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if itype in ("tf32", "tf32x3"):
        return v32, v32.astype(np.float64)
    raise ValueError(f"itype must be one of {sorted(ITYPES)}, got {itype!r}")


def default_config(itype: str, target: Any = None) -> TcConfig:
    """The config ``tc_matmul`` takes by default on ``target`` (default: the current one): the first
    warpgroup config where the target has wgmma (not for tf32x3), else the first warp config; the
    simulator's tiny warp config there."""
    target = runtime.target() if target is None else target
    if target.simulator:
        return SIM_CONFIG[itype]
    if target.has("wgmma") and itype in WGMMA_CONFIGS:
        return WGMMA_CONFIGS[itype][0]
    return CONFIGS[itype][0]


def tc_matmul(itype: str, A: Any, Bt: Any, C: Any, cfg: TcConfig | None = None) -> Any:
    """C[M, N] = A[M, K] @ Bt[N, K]^T on tensor cores (device arrays); returns C."""
    if itype not in ITYPES:
        raise ValueError(f"itype must be one of {sorted(ITYPES)}, got {itype!r}")
    cfg = cfg or default_config(itype)
    if len(A.shape) != 2 or len(Bt.shape) != 2 or A.shape[1] != Bt.shape[1]:
        raise ValueError(f"A must be [M, K] and Bt [N, K], got {tuple(A.shape)} and {tuple(Bt.shape)}")
    (M, K), N = A.shape, Bt.shape[0]
    if tuple(C.shape) != (M, N):
        raise ValueError(f"C must be [{M}, {N}], got {tuple(C.shape)}")
    if K % (16 // ITYPES[itype][1]) or K == 0:
        raise ValueError(f"K={K} must be a positive multiple of {16 // ITYPES[itype][1]} for {itype}")
    launcher(itype, cfg, A, Bt, C)()
    return C


def launcher(itype: str, cfg: TcConfig, A: Any, Bt: Any, C: Any,
             tf32_round: str | None = None) -> Callable[[], None]:
    """A no-argument function that launches the kernel on these (checked) device arrays."""
    cfg = TcConfig(*cfg).validate(itype)
    (M, K), N = A.shape, Bt.shape[0]
    kernel = make_tc_gemm(itype, cfg, np.dtype(C.dtype).name, tf32_round=tf32_round)
    C = C.reshape(M * N)
    args = (A, Bt, C, U(M), U(N), U(K), vector_ok(C, N))
    configured = configure(kernel, cfg, itype, args, M, N, out_dtype=C.dtype, contig="n")
    return lambda: configured(*args)


def batched_launcher(itype: str, cfg: TcConfig, A: Any, Bt: Any, C: Any) -> Callable[[], None]:
    """One launch of ``Z`` GEMMs C[z] = A[z] @ Bt[z]^T: A [Z, M, K] (or [M, K]: one A for every z),
    Bt [Z, N, K], C [Z, M, N] C-contiguous device arrays (grid z = Z: a split-K's splits side by side,
    not one launch each)."""
    cfg = TcConfig(*cfg).validate(itype)
    shared = len(A.shape) == 2
    (Z, N, K), M = Bt.shape, A.shape[0 if shared else 1]
    if tuple(A.shape) != ((M, K) if shared else (Z, M, K)) or tuple(C.shape) != (Z, M, N):
        raise ValueError(f"A [Z, M, K] (or [M, K]), Bt [Z, N, K] and C [Z, M, N] must agree, got {tuple(A.shape)}, "
                         f"{tuple(Bt.shape)} and {tuple(C.shape)}")
    kernel = make_tc_gemm(itype, cfg, np.dtype(C.dtype).name, batched=True)
    C = C.reshape(Z * M * N)
    args = (A.reshape(A.size), Bt.reshape(Z * N * K), C, U(M), U(N), U(K), U(0 if shared else M * K), U(N * K),
            U(M * N), vector_ok(C, N, M * N))
    configured = configure(kernel, cfg, itype, args, M, N, Z, out_dtype=C.dtype, contig="n")
    return lambda: configured(*args)


def parted_launcher(itype: str, cfg: TcConfig, A: Any, Bt: Any, C: Any, parts: int) -> Callable[[], None]:
    """One launch of Z GEMMs, each reduction cut in ``parts`` slices: C[z * parts + p] = A[z][:, sl] @
    Bt[z][:, sl]^T, sl = slice p of L / parts; A [Z, M, L], Bt [Z, N, L], C [Z * parts, M, N]
    C-contiguous device arrays, L / parts a whole number of 16-byte chunks (the caller sums C over z, p)."""
    cfg = TcConfig(*cfg).validate(itype)
    (Z, M, L), N = A.shape, Bt.shape[1]
    epc = 16 // ITYPES[itype][1]
    if tuple(Bt.shape) != (Z, N, L) or tuple(C.shape) != (Z * parts, M, N) or L % (parts * epc):
        raise ValueError(f"A [Z, M, L], Bt [Z, N, L] and C [Z * parts, M, N] must agree and L split in "
                         f"{parts} parts of whole {epc}-element chunks, got {tuple(A.shape)}, "
                         f"{tuple(Bt.shape)}, {tuple(C.shape)}")
    kernel = make_tc_gemm(itype, cfg, np.dtype(C.dtype).name, parted=True)
    C = C.reshape(Z * parts * M * N)
    args = (A.reshape(Z * M * L), Bt.reshape(Z * N * L), C, U(M), U(N), U(L // parts), U(M * L), U(N * L),
            U(M * N), U(L), U(parts), vector_ok(C, N, M * N))
    configured = configure(kernel, cfg, itype, args, M, N, Z * parts, out_dtype=C.dtype, contig="n")
    return lambda: configured(*args)
