"""Tensor-core GEMM: C[M, N] = A[M, K] @ B[K, N], with B given transposed as Bt[N, K] (both k-contiguous).

Inputs fp16 ('f16', float16 arrays), bf16 ('bf16', uint16/int16 arrays of bf16 bits) or fp32 ('tf32',
float32 arrays, rounded to TF32 in the kernel); fp32 accumulators; C float32 or the input type. Bt[N, K] is
what ``ldmatrix`` (no .trans) turns into B fragments for both 16- and 32-bit inputs (a [K, N] B would
need ``.trans``, 16-bit only); it is also the conv forward's weight layout [K_out, C*R*S]. K must be a
multiple of 8 (16-bit) or 4 (tf32): rows of 16-byte chunks; M, N and K are otherwise free (zero-filled
copies and a bounds-checked epilogue).

Loop nest of one block (BM x BN tile of C; warps WARPS_M x WARPS_N, each a WM x WN tile made of
(WM/16) x (WN/8) mma tiles; S = STAGES shared buffers of A (BM x BK) and Bt (BN x BK)):

    for s < S-1: cp.async k tile s -> stage s;  commit
    for kt < ceil(K/BK):
        wait_group(S-2); __syncthreads()          # tile kt landed; everyone is done with tile kt-1
        cp.async k tile kt+S-1 -> stage (kt+S-1) % S  (if it exists);  commit
        for each k step of the mma (16 halves or 8 tf32) in stage kt % S:
            A fragments: WM/16 ldmatrix.x4;  B fragments: WN/16 ldmatrix.x4 (two n8 tiles each)
            (tf32: cvt.rna on every fragment register)
            acc[i][j] = mma(a[i], b[j], acc[i][j])
    C <- acc (bounds-checked; converted to the output type)

Shared rows are BK elements = CH 16-byte chunks (CH = 2, 4 or 8), unpadded; chunk c of row r is stored
at chunk c ^ ((r // (8 // CH)) % CH), an XOR swizzle that makes the 8 row reads of one ldmatrix (and the
cp.async writes) hit distinct banks. 16-byte ``cp.async`` per thread: thread tid copies chunk tid % CH of
rows tid // CH + e * (threads / CH). Static shared memory up to 48 KiB; above that (or with
``dynamic=True``) one dynamic shared array holds A's stages then B's, and the launcher raises the
kernel's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES first (numba-cuda#94: no public API).
Generated source, as in :mod:`convlab.gemm_kernels`: the accumulators and fragments are scalars so they
stay in registers; index math is uint32.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import numpy as np
from numba.np.numpy_support import from_dtype as numba_from_dtype

from convlab import runtime
from convlab.kernels import mma
from convlab.kernels.intrinsics import u32 as U
from convlab.kernels.source import compile_source
from convlab.runtime import cuda

STATIC_LIMIT = 48 * 1024  # static shared memory per block
DYNAMIC_LIMIT = 227 * 1024  # dynamic shared memory per block on sm_80 / sm_90 (opt-in attribute)
ITYPES = {"f16": (np.float16, 2, 16), "bf16": (np.uint16, 2, 16), "tf32": (np.float32, 4, 8)}
#: itype -> (shared/storage dtype, bytes per element, k of one mma)


class TcConfig(NamedTuple):
    """Block tile BM x BN x BK, warp tile WM x WN, STAGES shared buffers."""

    BM: int
    BN: int
    BK: int
    WM: int
    WN: int
    STAGES: int = 3
    dynamic: bool = False  # dynamic shared memory even when 48 KiB of static would do

    @property
    def threads(self) -> int:
        return 32 * (self.BM // self.WM) * (self.BN // self.WN)

    def shared_bytes(self, itype: str) -> int:
        return self.STAGES * (self.BM + self.BN) * self.BK * ITYPES[itype][1]

    @property
    def name(self) -> str:
        return f"{self.BM}x{self.BN}x{self.BK}/{self.WM}x{self.WN}/s{self.STAGES}" + \
            ("/dyn" if self.dynamic else "")

    def uses_dynamic(self, itype: str) -> bool:
        return self.dynamic or self.shared_bytes(itype) > STATIC_LIMIT

    def validate(self, itype: str) -> "TcConfig":
        """Raise ValueError unless this config compiles for ``itype``."""
        if itype not in ITYPES:
            raise ValueError(f"itype must be one of {sorted(ITYPES)}, got {itype!r}")
        size, kstep = ITYPES[itype][1], ITYPES[itype][2]
        if any(not isinstance(v, int) or v < 1 for v in self[:6]):
            raise ValueError(f"config {self} must hold positive ints")
        if self.WM % 16 or self.WN % 16 or self.BM % self.WM or self.BN % self.WN:
            raise ValueError(f"config {self.name}: WM, WN must be multiples of 16 dividing BM, BN")
        if self.BK * size not in (32, 64, 128) or self.BK % kstep:
            raise ValueError(f"config {self.name}: BK * {size} bytes must be 32, 64 or 128")
        ch = self.BK * size // 16
        if (self.BM * ch) % self.threads or (self.BN * ch) % self.threads or self.threads > 1024:
            raise ValueError(f"config {self.name}: {self.threads} threads must divide the tiles' chunks")
        if self.STAGES < 2 or self.shared_bytes(itype) > DYNAMIC_LIMIT:
            raise ValueError(f"config {self.name}: needs 2+ stages and <= 227 KiB shared memory for "
                             f"{itype} ({self.shared_bytes(itype)} bytes)")
        return self


#: configs for the GPU (the first three static, 48 KiB or less); the simulator uses SIM_CONFIG.
CONFIGS = {"f16": [TcConfig(128, 128, 32, 64, 64, 3), TcConfig(128, 64, 32, 64, 32, 4),
                   TcConfig(128, 128, 32, 64, 32, 2), TcConfig(128, 256, 32, 64, 64, 3),
                   TcConfig(128, 128, 64, 64, 64, 3)],
           "tf32": [TcConfig(128, 128, 16, 64, 64, 3), TcConfig(128, 64, 16, 64, 32, 4),
                    TcConfig(64, 128, 16, 32, 64, 4), TcConfig(128, 128, 32, 64, 64, 3),
                    TcConfig(128, 256, 16, 64, 64, 4)]}
CONFIGS["bf16"] = CONFIGS["f16"]
SIM_CONFIG = {"f16": TcConfig(32, 32, 16, 16, 32, 3), "bf16": TcConfig(32, 32, 16, 16, 32, 2),
              "tf32": TcConfig(32, 32, 8, 16, 32, 3)}


def _source(cfg: TcConfig, itype: str, out: str) -> str:
    BM, BN, BK, WM, WN, S = cfg[:6]
    T = cfg.threads
    size, kstep = ITYPES[itype][1], ITYPES[itype][2]
    EPC, CH = 16 // size, BK * size // 16  # elements per chunk, chunks per row
    per = 8 // CH  # rows sharing one swizzle value
    MI, NI = WM // 16, WN // 8
    L = ["def gemm(A, Bt, C, M, N, K):"]
    w = lambda line, d=1: L.append("    " * d + line)  # noqa: E731
    B0 = 0  # B's stages start at element B0 of Bs
    if cfg.uses_dynamic(itype):
        w("As = cuda.shared.array(0, stype, alignment=align)  # dynamic: A's stages, then B's")
        w("Bs = As")
        B0 = S * BM * BK
    else:
        w("As = cuda.shared.array(A_SMEM, stype, alignment=align)")
        w("Bs = cuda.shared.array(B_SMEM, stype, alignment=align)")
    w("tid = U(cuda.threadIdx.x)")
    w("lane = U(tid % 32)")
    w("warp = U(tid // 32)")
    w(f"wm0 = U(U(warp // {BN // WN}) * {WM})")
    w(f"wn0 = U(U(warp % {BN // WN}) * {WN})")
    w(f"m0 = U(U(cuda.blockIdx.y) * {BM})")
    w(f"n0 = U(U(cuda.blockIdx.x) * {BN})")
    w(f"ktiles = U(U(K + {BK - 1}) // {BK})")
    w(f"cc = U(tid % {CH})  # this thread's chunk of a row (global), and its copies' rows:")
    w(f"ck = U(cc * {EPC})")
    for op, rows, base, lim in (("a", BM, "m0", "M"), ("b", BN, "n0", "N")):
        for e in range(rows * CH // T):
            w(f"{op}r{e} = U(U(tid // {CH}) + {e * T // CH})")
            w(f"{op}s{e} = U(U(U({op}r{e} * {BK}) + U(U(cc ^ U(U({op}r{e} // {per}) % {CH})) * {EPC}))"
              f" + {B0 if op == 'b' else 0})")
            w(f"{op}ok{e} = U({base} + {op}r{e}) < {lim}")
            w(f"{op}g{e} = U(U({base} + {op}r{e}) * K) if {op}ok{e} else U(0)")
    # ldmatrix addresses: A rows wm0 + lane % 16, chunk 2kk + lane // 16; B rows wn0 + lane % 8 +
    # 8 (lane // 16), chunk 2kk + (lane // 8) % 2; the swizzle of both is that of lane % 8.
    w(f"sw = U(U(U(lane % 8) // {per}) % {CH})")
    w(f"a_ld = U(U(wm0 + U(lane % 16)) * {BK})")
    w(f"b_ld = U(U(U(U(wn0 + U(lane % 8)) + U(U(lane // 16) * 8)) * {BK}) + {B0})")
    for kk in range(BK // kstep):
        w(f"a_c{kk} = U(U(U({2 * kk} + U(lane // 16)) ^ sw) * {EPC})")
        w(f"b_c{kk} = U(U(U({2 * kk} + U(U(lane // 8) % 2)) ^ sw) * {EPC})")
    for i in range(MI):
        for j in range(NI):
            w(" = ".join(f"c{i}_{j}_{r}" for r in range(4)) + " = zero")

    def issue(d):  # cp.async of k tile `kl` into stage offset `ls`
        w(f"k0 = U(kl * {BK})", d)
        w("kok = U(k0 + ck) < K", d)
        for op, rows in (("a", BM), ("b", BN)):
            src = "A" if op == "a" else "Bt"
            for e in range(rows * CH // T):
                w(f"ok = {op}ok{e} and kok", d)
                w(f"cp_async16({op.upper()}s, U(U(ls * {rows * BK}) + {op}s{e}), {src}, "
                  f"U(U({op}g{e} + k0) + ck) if ok else U(0), 16 if ok else 0)", d)

    w("kl = U(0)")
    for s in range(S - 1):
        w(f"ls = U({s})")
        w("if kl < ktiles:")
        issue(2)
        w("cp_async_commit()")
        w("kl = U(kl + 1)")
    w(f"ls = U({S - 1})")
    w("cs = U(0)")
    w("kt = U(0)")
    w("while kt < ktiles:")
    w("wait()", 2)
    w("cuda.syncthreads()", 2)
    w("if kl < ktiles:", 2)
    issue(3)
    w("cp_async_commit()", 2)
    w("kl = U(kl + 1)", 2)
    w(f"ls = U(ls + 1) if ls < {S - 1} else U(0)", 2)
    w(f"a_st = U(U(cs * {BM * BK}) + a_ld)", 2)
    w(f"b_st = U(U(cs * {BN * BK}) + b_ld)", 2)
    for kk in range(BK // kstep):
        for i in range(MI):
            w(f"a{i}_0, a{i}_1, a{i}_2, a{i}_3 = ldmatrix_x4(As, U(a_st + {i * 16 * BK}) + a_c{kk})", 2)
        for j in range(0, NI, 2):
            w(f"b{j}_0, b{j}_1, b{j + 1}_0, b{j + 1}_1 = ldmatrix_x4(Bs, U(b_st + {j * 8 * BK}) "
              f"+ b_c{kk})", 2)
        if itype == "tf32":
            for i in range(MI):
                w(", ".join(f"a{i}_{r}" for r in range(4)) + " = "
                  + ", ".join(f"to_tf32(a{i}_{r})" for r in range(4)), 2)
            for j in range(NI):
                w(f"b{j}_0, b{j}_1 = to_tf32(b{j}_0), to_tf32(b{j}_1)", 2)
        for i in range(MI):
            for j in range(NI):
                acc = ", ".join(f"c{i}_{j}_{r}" for r in range(4))
                w(f"{acc} = mma(a{i}_0, a{i}_1, a{i}_2, a{i}_3, b{j}_0, b{j}_1, {acc})", 2)
    w(f"cs = U(cs + 1) if cs < {S - 1} else U(0)", 2)
    w("kt = U(kt + 1)", 2)
    w("g = U(lane // 4)")
    w("t2 = U(U(lane % 4) * 2)")
    conv = {"f32": "{}", "in": "{}", "bf16": "f32_to_bf16({})"}[out]
    for i in range(MI):
        for h in range(2):
            w(f"row = U(U(U(m0 + wm0) + g) + {16 * i + 8 * h})")
            w("if row < M:")
            for j in range(NI):
                w(f"col = U(U(U(n0 + wn0) + t2) + {8 * j})", 2)
                w("if col < N:", 2)
                w("C[row, col] = " + conv.format(f"c{i}_{j}_{2 * h}"), 3)
                w("if U(col + 1) < N:", 2)
                w("C[row, U(col + 1)] = " + conv.format(f"c{i}_{j}_{2 * h + 1}"), 3)
    return "\n".join(L) + "\n"


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
def make_tc_gemm(itype: str, cfg: TcConfig, out_dtype: str = "float32") -> Callable:
    """The kernel (A, Bt, C, M, N, K) for one input type, config and output dtype (cached).

    A [M, K], Bt [N, K], C [M, N] C-contiguous device arrays; M, N, K uint32. Grid (ceil(N/BN),
    ceil(M/BM)), ``cfg.threads`` threads per block.
    """
    cfg = TcConfig(*cfg).validate(itype)
    out = _out_kind(itype, out_dtype)
    namespace = {"cuda": cuda, "U": U, "zero": np.float32(0),
                 "stype": numba_from_dtype(np.dtype(ITYPES[itype][0])),
                 "align": None if runtime.SIMULATOR else 16,
                 "A_SMEM": cfg.STAGES * cfg.BM * cfg.BK, "B_SMEM": cfg.STAGES * cfg.BN * cfg.BK,
                 "mma": {"f16": mma.mma_f16, "bf16": mma.mma_bf16, "tf32": mma.mma_tf32}[itype],
                 "ldmatrix_x4": mma.ldmatrix_x4, "to_tf32": mma.to_tf32, "f32_to_bf16": mma.f32_to_bf16,
                 "cp_async16": mma.cp_async16, "cp_async_commit": mma.cp_async_commit,
                 "wait": mma.cp_async_wait(cfg.STAGES - 2)}
    source = _source(cfg, itype, out)
    filename = f"<convlab.kernels.tc_gemm {itype} {cfg.name} {out}>"
    return runtime.jit(fastmath=False)(compile_source(source, filename, namespace)["gemm"])


def kernel_source(itype: str, cfg: TcConfig, out_dtype: str = "float32") -> str:
    """The generated source of one kernel (for reading and debugging)."""
    return _source(TcConfig(*cfg).validate(itype), itype, _out_kind(itype, out_dtype))


def to_storage(itype: str, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(array in ``itype``'s storage type, its exact float64 values) for float ``values``.

    f16: float16; bf16: uint16 bits rounded to nearest even; tf32: float32 (the kernel rounds to TF32).
    """
    v32 = np.ascontiguousarray(values, np.float32)
    if itype == "f16":
        stored = v32.astype(np.float16)
        return stored, stored.astype(np.float64)
    if itype == "bf16":
        bits = v32.view(np.uint32).astype(np.uint64)
        stored = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
        return stored, (stored.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if itype == "tf32":
        return v32, v32.astype(np.float64)
    raise ValueError(f"itype must be one of {sorted(ITYPES)}, got {itype!r}")


def tc_matmul(itype: str, A: Any, Bt: Any, C: Any, cfg: TcConfig | None = None) -> Any:
    """C[M, N] = A[M, K] @ Bt[N, K]^T on tensor cores (device arrays); returns C."""
    if itype not in ITYPES:
        raise ValueError(f"itype must be one of {sorted(ITYPES)}, got {itype!r}")
    cfg = cfg or (SIM_CONFIG[itype] if runtime.SIMULATOR else CONFIGS[itype][0])
    if len(A.shape) != 2 or len(Bt.shape) != 2 or A.shape[1] != Bt.shape[1]:
        raise ValueError(f"A must be [M, K] and Bt [N, K], got {tuple(A.shape)} and {tuple(Bt.shape)}")
    (M, K), N = A.shape, Bt.shape[0]
    if tuple(C.shape) != (M, N):
        raise ValueError(f"C must be [{M}, {N}], got {tuple(C.shape)}")
    if K % (16 // ITYPES[itype][1]) or K == 0:
        raise ValueError(f"K={K} must be a positive multiple of {16 // ITYPES[itype][1]} for {itype}")
    launcher(itype, cfg, A, Bt, C)()
    return C


def launcher(itype: str, cfg: TcConfig, A: Any, Bt: Any, C: Any) -> Callable[[], None]:
    """A no-argument function that launches the kernel on these (checked) device arrays."""
    cfg = TcConfig(*cfg).validate(itype)
    (M, K), N = A.shape, Bt.shape[0]
    kernel = make_tc_gemm(itype, cfg, np.dtype(C.dtype).name)
    args = (A, Bt, C, U(M), U(N), U(K))
    dyn = cfg.shared_bytes(itype) if cfg.uses_dynamic(itype) else 0
    if dyn > STATIC_LIMIT:
        _allow_dynamic_shared(kernel, args, dyn)
    configured = kernel[((N + cfg.BN - 1) // cfg.BN, (M + cfg.BM - 1) // cfg.BM), cfg.threads, 0, dyn]
    return lambda: configured(*args)


def _allow_dynamic_shared(kernel: Any, args: tuple, nbytes: int) -> None:
    """Compile ``kernel`` for ``args`` and let it use ``nbytes`` of dynamic shared memory (over 48 KiB
    needs CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES on the function: numba-cuda#94)."""
    if runtime.SIMULATOR:
        return
    compiled = kernel.compile(tuple(kernel.typeof_pyval(a) for a in args))
    cufunc = compiled.library.get_cufunc()
    drv = cuda.cudadrv.driver
    attr = drv.binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    drv.driver.cuKernelSetAttribute(attr, int(nbytes), cufunc.handle, cufunc.device.id)
