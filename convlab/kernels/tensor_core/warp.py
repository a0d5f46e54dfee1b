"""The tensor-core main loop shared by the GEMM (tc_gemm) and the implicit-GEMM convolution (tc_conv).

One block computes a BM x BN tile of C[M, N] = A[M, K] @ Bt[N, K]^T with warps WARPS_M x WARPS_N, each a
WM x WN tile of (WM/16) x (WN/8) mma tiles; S = STAGES shared buffers of A (BM x BK) and Bt (BN x BK):

    for s < S-1: cp.async k tile s -> stage s;  commit
    for kt < ceil(K/BK):
        wait_group(S-2); __syncthreads()          # tile kt landed; everyone is done with tile kt-1
        cp.async k tile kt+S-1 -> stage (kt+S-1) % S  (if it exists);  commit
        for each k step of the mma (16 halves or 8 tf32) in stage kt % S:
            A fragments: WM/16 ldmatrix.x4 (an m-contiguous A: .trans; TF32: 4 32-bit loads each)
            B fragments: WN/16 ldmatrix.x4 (two n8 tiles each)
            (tf32: the fragment registers made TF32 by TF32_ROUND: truncated by the mma by default)
            acc[i][j] = mma(a[i], b[j], acc[i][j])
            (tf32x3: each fragment register split into TF32 parts big + small (mma.split_tf32), then
             acc = mma_tf32x3(a_s, a_b, b_s, b_b, acc): a_s b_b + a_b b_s + a_b b_b, three mma)
    epilogue (staged): wait_group(0); __syncthreads()
        acc (+ bias, converted to the output type) -> Cs, the C tile in shared memory, laid out along the
            output's contiguous dimension (rows padded by 16 bytes); __syncthreads()
        Cs -> C: 16-byte vectors (``vec``: aligned, whole runs), else element by element, consecutive
            threads on consecutive addresses either way (bounds-checked); a store's fused epilogue: Cs
            float32, element by element through it (:mod:`convlab.kernels.tensor_core.epilogue`)

A wgmma config (``TcConfig.MMA``) gets :mod:`convlab.kernels.tensor_core.warpgroup`'s warpgroup loop instead, on the
same loads (:mod:`convlab.kernels.tensor_core.copy`: tile placement, copies, prologue, prefetch) and epilogue.

Where A's 16-byte chunks come from and where C goes are two interfaces: an :class:`ALoader` (a dense
row-major A, or the convolution's gather from an NHWC tensor) and a :class:`Store` (a dense C, or
the convolution's NCHW or NHWC output with bias); the pipeline passes them the names of its locals
they read (copy.ALoader, epilogue.Store list them). Bt is always dense [N, K] (k-contiguous). Two
loader attributes use grid z: ``batched`` (a batch of GEMMs, Bt offset by ``b_offset``) or ``k_split``
(split-K: block z runs only its range of k tiles, the store writing partial z; the caller sums the
partials).

Shared rows are BK elements = CH 16-byte chunks (CH = 2, 4 or 8), unpadded; chunk c of row r is stored
at chunk c ^ ((r // (8 // CH)) % CH), an XOR swizzle that makes the 8 row reads of one ldmatrix (and the
cp.async writes) hit distinct banks (and, for 128-, 64- and 32-byte rows, wgmma's K-major 128B / 64B /
32B swizzle: :mod:`convlab.kernels.arch.wgmma_desc`). 16-byte ``cp.async`` per thread: thread tid copies chunk tid % CH of
rows tid // CH + e * (threads / CH); a chunk outside the operand is zero-filled (src_bytes = 0). One
dynamic shared array holds A's stages then B's, and after the loop the staged C tile (in one pass, or
one per row of warps when the tile is larger than the stages: :func:`epilogue_plan`); over 48 KiB the
launcher (:mod:`convlab.kernels.tensor_core.launch`) raises the kernel's dynamic shared-memory limit first.
Accumulators and fragments are scalars so they stay in registers; index math is uint32.
"""
from __future__ import annotations

import os
import warnings
from typing import Callable

from convlab import runtime
from convlab.kernels.source import Writer
from convlab.kernels.tensor_core.config import ITYPES, TcConfig
from convlab.kernels.tensor_core.epilogue import Store, staged_epilogue
from convlab.kernels.tensor_core.copy import ALoader, block_tiles, copy_setup, k_loop, km_tile_ok, shared_arrays

OUT_CONVERT = {"f32": "{}", "in": "{}", "bf16": "f32_to_bf16({})"}  # output kind -> store conversion
#: how fp32 fragment registers become TF32 (tests/kernels/test_tc_gemm.py): "cvt" is ``cvt.rna.tf32.f32``
#: (round to nearest, ties away from zero); "add" adds half a TF32 ulp (0x1000) to the bits of a finite
#: value and lets the mma ignore the low 13 mantissa bits (CUTLASS's round_half_ulp_truncate), the same
#: bits as "cvt", passing inf and NaN unchanged; "trunc" gives the mma the fp32 bits as they are and it
#: reads the top 19: truncation toward zero (PTX documents it for wgmma; Triton's tf32 dot relies on it
#: for mma.sync; on the H200 the 4096^3 product has truncation's error, and test_tc_gemm checks the
#: bits). Unit roundoff 2**-10 instead of 2**-11, which the TF32 tolerance already allows; NaN and inf
#: are kept, but not a signalling NaN whose payload is only in the low 13 bits.
#: H200, 4096^3 against cuBLAS TF32 (results/tc_gemm/h200/b8e5c2e, f6abda4): a bare add 0.49 against cvt's
#: 0.43, but it carries CUDA's NaN 0x7FFFFFFF into -0; the NaN-safe add (compare and select) 0.34 against
#: cvt's 0.41; results/tc_gemm/h200/96f3335: "trunc" 0.535, "cvt" 0.393, "add" 0.352 (relative error of
#: the product 7.8e-4 truncated, 2.9e-4 rounded). Default "trunc": the conversion instructions cost a
#: quarter of the TF32 GEMM's speed; "cvt" (CONVLAB_TF32_ROUND=cvt) when the extra bit matters.
TF32_ROUND = {"add": "(U({0} + U(4096)) if U({0} & U(0x7F800000)) != U(0x7F800000) else {0})",
              "cvt": "to_tf32({0})", "trunc": "{0}"}
#: the rounding kernels compile with unless a caller names one (CONVLAB_TF32_ROUND, read at import)
DEFAULT_TF32_ROUND = os.environ.get("CONVLAB_TF32_ROUND", "trunc")
if DEFAULT_TF32_ROUND not in TF32_ROUND:
    raise ValueError(f"CONVLAB_TF32_ROUND={DEFAULT_TF32_ROUND!r}: expected one of {sorted(TF32_ROUND)}")


def pipeline_source(cfg: TcConfig, itype: str, loader: ALoader, store: Store, name: str,
                    tf32_round: str | None = None) -> str:
    """Source of the kernel ``name(<loader.params><store.params>, vec)`` for one config (M, N, K among the params;
    ``vec``: ``tc_epilogue.vector_ok`` of the output);
    ``tf32_round``: a key of TF32_ROUND (None: DEFAULT_TF32_ROUND). A wgmma config (``cfg.wgmma``) gets
    :func:`convlab.kernels.tensor_core.warpgroup.wgmma_source`'s warpgroup loop on the same loaders and epilogue."""
    if cfg.wgmma:
        from convlab.kernels.tensor_core.warpgroup import wgmma_source
        return wgmma_source(cfg, itype, loader, store, name, tf32_round)
    rnd = TF32_ROUND[tf32_round or DEFAULT_TF32_ROUND].format
    BM, BN, BK, WM, WN = cfg[:5]
    size, kstep = ITYPES[itype][1], ITYPES[itype][2]
    EPC, CH = 16 // size, BK * size // 16  # elements per chunk, chunks per row
    per = 8 // CH  # rows sharing one swizzle value
    MI, NI = WM // 16, WN // 8
    w = Writer(f"def {name}({loader.params}{store.params}, vec):")  # vec: the staged epilogue's 16-byte stores allowed
    w.indent()
    shared_arrays(w, store)
    w("tid = U(cuda.threadIdx.x)")
    w("lane = U(tid % 32)")
    w("warp = U(tid // 32)")
    w(f"wm0 = U(U(warp // {BN // WN}) * {WM})")
    w(f"wn0 = U(U(warp % {BN // WN}) * {WN})")
    k_first = block_tiles(w, cfg, loader)
    cp = copy_setup(w, cfg, itype, loader)
    a_km, B0 = cp.a_km, cp.B0
    lds_a = a_km and size == 4
    if a_km:
        CHA = cp.CHA
        per_a, xor_a = max(1, 8 // CHA), min(CHA, 8)
    # ldmatrix addresses: A rows wm0 + lane % 16, chunk 2kk + lane // 16; B rows wn0 + lane % 8 +
    # 8 (lane // 16), chunk 2kk + (lane // 8) % 2; the swizzle of both is that of lane % 8.
    w(f"sw = U(U(U(lane % 8) // {per}) % {CH})")
    if lds_a:  # a0 A[m g, k t], a1 m g+8, a2 k t+4, a3 both; chunk (m // 4) ^ 2t of k row t (t + 4 alike)
        w("Au = cuda.shared.array(0, c_uint32, alignment=align)  # the A stages as bits")
        w(f"a_ld = U(U(lane % 4) * {BM})")
        w("xo = U(U(lane % 4) * 2)")
        for i in range(MI):
            for half, dm in (("lo", 0), ("hi", 8)):
                w(f"a_{half}{i} = U(U(U(U(U(U(wm0 + {16 * i + dm}) // 4) + U(U(lane // 4) // 4)) ^ xo) * 4)"
                  " + U(U(lane // 4) % 4))")
    elif a_km:  # .trans x4: lanes 0-7 / 8-15 k rows 0-7 of m chunks 0 / 1, lanes 16-31 k rows 8-15
        w("akl = U(U(lane % 8) + U(U(lane // 16) * 8))")
        w(f"a_ld = U(akl * {BM})")
        w(f"swa = U(U(akl // {per_a}) % {xor_a})")
        for i in range(MI):
            w(f"a_m{i} = U(U(U(U(U(wm0 // 8) + {2 * i}) + U(U(lane // 8) % 2)) ^ swa) * {EPC})")
    else:
        w(f"a_ld = U(U(wm0 + U(lane % 16)) * {BK})")
    w(f"b_ld = U(U(U(U(wn0 + U(lane % 8)) + U(U(lane // 16) * 8)) * {BK}) + {B0})")
    for kk in range(0 if a_km else BK // kstep):
        w(f"a_c{kk} = U(U(U({2 * kk} + U(lane // 16)) ^ sw) * {EPC})")
    for kk in range(BK // kstep):
        w(f"b_c{kk} = U(U(U({2 * kk} + U(U(lane // 8) % 2)) ^ sw) * {EPC})")
    for i in range(MI):
        for j in range(NI):
            w(" = ".join(f"c{i}_{j}_{r}" for r in range(4)) + " = zero")
    with k_loop(w, cfg, loader, cp, k_first):
        w(f"a_st = U(U(cs * {BM * BK}) + a_ld)")
        w(f"b_st = U(U(cs * {BN * BK}) + b_ld)")
        for kk in range(BK // kstep):
            _mma_step(w, cfg, itype, kk, lds_a, a_km, rnd)
    staged_epilogue(w, cfg, itype, store, loader.batched)
    return w.source


def _mma_step(w: Writer, cfg: TcConfig, itype: str, kk: int, lds_a: bool, a_km: bool, rnd: Callable) -> None:
    """Lines of k step ``kk`` of a k tile: the A and B fragments from stage ``cs`` (``a_st``, ``b_st``),
    TF32 rounding or splitting, and the warp's mma.sync."""
    BM, BK = cfg.BM, cfg.BK
    MI, NI = cfg.WM // 16, cfg.WN // 8
    for i in range(MI):
        if lds_a:
            rows = (f"U(a_st + {kk * 8 * BM})", f"U(a_st + {kk * 8 * BM + 4 * BM})")
            w(f"a{i}_0, a{i}_1, a{i}_2, a{i}_3 = " + ", ".join(
                f"Au[U({rows[r >> 1]} + a_{('lo', 'hi')[r & 1]}{i})]" for r in range(4)))
        elif a_km:
            w(f"a{i}_0, a{i}_1, a{i}_2, a{i}_3 = ldmatrix_x4_trans(As, U(U(a_st + {kk * 16 * BM}) + a_m{i}))")
        else:
            w(f"a{i}_0, a{i}_1, a{i}_2, a{i}_3 = ldmatrix_x4(As, U(a_st + {i * 16 * BK}) + a_c{kk})")
    for j in range(0, NI, 2):
        w(f"b{j}_0, b{j}_1, b{j + 1}_0, b{j + 1}_1 = ldmatrix_x4(Bs, U(b_st + {j * 8 * BK}) + b_c{kk})")
    if itype == "tf32":
        for i in range(MI):
            w(", ".join(f"a{i}_{r}" for r in range(4)) + " = " + ", ".join(rnd(f"a{i}_{r}") for r in range(4)))
        for j in range(NI):
            w(f"b{j}_0, b{j}_1 = {rnd(f'b{j}_0')}, {rnd(f'b{j}_1')}")
    if itype == "tf32x3":  # a{i}_{r} / b{j}_{r} become the big parts, a{i}_{r}s / b{j}_{r}s the small
        for name in [f"a{i}_{r}" for i in range(MI) for r in range(4)] + \
                [f"b{j}_{r}" for j in range(NI) for r in range(2)]:
            w(f"{name}, {name}s = split_tf32({name})")
    for i in range(MI):
        for j in range(NI):
            acc = ", ".join(f"c{i}_{j}_{r}" for r in range(4))
            if itype == "tf32x3":  # small parts, big parts (a: 4 registers, b: 2), accumulators
                w(f"{acc} = mma_tf32x3(a{i}_0s, a{i}_1s, a{i}_2s, a{i}_3s, a{i}_0, a{i}_1, a{i}_2, a{i}_3, "
                  f"b{j}_0s, b{j}_1s, b{j}_0, b{j}_1, {acc})")
            else:
                w(f"{acc} = mma(a{i}_0, a{i}_1, a{i}_2, a{i}_3, b{j}_0, b{j}_1, {acc})")


if runtime.SIMULATOR:  # numpy scalars warn where the uint32 index math wraps on purpose, as on the GPU
    warnings.filterwarnings("ignore", r"overflow encountered in scalar (add|subtract|multiply)", RuntimeWarning)
