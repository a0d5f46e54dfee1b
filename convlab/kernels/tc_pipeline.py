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
            threads on consecutive addresses either way (bounds-checked)

Where A's 16-byte chunks come from and where C goes are the two hooks: an :class:`ALoader` (a dense
row-major A, or the convolution's gather from an NHWC tensor) and a :class:`Store` (a dense C, or
the convolution's NCHW or NHWC output with bias). Bt is always dense [N, K] (k-contiguous). Two optional
loader attributes use grid z: ``b_offset`` (a batch of GEMMs) or ``k_split`` (split-K: block z runs
only its range of k tiles, the store writing partial z; the caller sums the partials).

Shared rows are BK elements = CH 16-byte chunks (CH = 2, 4 or 8), unpadded; chunk c of row r is stored
at chunk c ^ ((r // (8 // CH)) % CH), an XOR swizzle that makes the 8 row reads of one ldmatrix (and the
cp.async writes) hit distinct banks. 16-byte ``cp.async`` per thread: thread tid copies chunk tid % CH of
rows tid // CH + e * (threads / CH); a chunk outside the operand is zero-filled (src_bytes = 0). One
dynamic shared array holds A's stages then B's, and after the loop the staged C tile (in one pass, or
one per row of warps when the tile is larger than the stages: :func:`epilogue_plan`); over 48 KiB the
launcher (:mod:`convlab.kernels.tc_launch`) raises the kernel's dynamic shared-memory limit first.
Accumulators and fragments are scalars so they stay in registers; index math is uint32.
"""
from __future__ import annotations

import os
import warnings
from typing import Callable, Protocol

import numpy as np

from convlab import runtime
from convlab.kernels.tc_config import ITYPES, TcConfig
from convlab.kernels.tc_epilogue import CTYPE, Store, staged_epilogue

OUT_CONVERT = {"f32": "{}", "in": "{}", "bf16": "f32_to_bf16({})"}  # output kind -> store conversion
#: how fp32 fragment registers become TF32 (tests/kernels/test_tc_gemm.py): "cvt" is ``cvt.rna.tf32.f32``
#: (round to nearest, ties away from zero); "add" adds half a TF32 ulp (0x1000) to the bits of a finite
#: value and lets the mma ignore the low 13 mantissa bits (CUTLASS's round_half_ulp_truncate), the same
#: bits as "cvt", passing inf and NaN unchanged; "trunc" gives the mma the fp32 bits as they are and it
#: reads the top 19: truncation toward zero (PTX documents it for wgmma; Triton's tf32 dot relies on it
#: for mma.sync; on the H200 the 4096^3 product has truncation's error, and test_tc_gemm checks the
#: bits). Unit roundoff 2**-10 instead of 2**-11, which the TF32 tolerance already allows; NaN and inf
#: are kept, but not a signalling NaN whose payload is only in the low 13 bits.
#: H200, 4096^3 against cuBLAS TF32: session 8 (results/h200/session8) a bare add 0.49 against cvt's
#: 0.43, but it carries CUDA's NaN 0x7FFFFFFF into -0; the NaN-safe add (compare and select) 0.34 against
#: cvt's 0.41. Session 9 (session9/call1): "trunc" 0.535, "cvt" 0.393, "add" 0.352 (relative error of
#: the product 7.8e-4 truncated, 2.9e-4 rounded). Default "trunc": the conversion instructions cost a
#: quarter of the TF32 GEMM's speed; "cvt" (CONVLAB_TF32_ROUND=cvt) when the extra bit matters.
TF32_ROUND = {"add": "(U({0} + U(4096)) if U({0} & U(0x7F800000)) != U(0x7F800000) else {0})",
              "cvt": "to_tf32({0})", "trunc": "{0}"}
#: the rounding kernels compile with unless a caller names one (CONVLAB_TF32_ROUND, read at import)
DEFAULT_TF32_ROUND = os.environ.get("CONVLAB_TF32_ROUND", "trunc")
if DEFAULT_TF32_ROUND not in TF32_ROUND:
    raise ValueError(f"CONVLAB_TF32_ROUND={DEFAULT_TF32_ROUND!r}: expected one of {sorted(TF32_ROUND)}")


def km_tile_ok(bm: int, size: int) -> bool:
    """Whether an m-contiguous A (``a_km``) of BM rows of ``size``-byte elements can be swizzled in its
    row: the chunks per k row (BM * size / 16) XOR with values below min(chunks, 8) (16-bit) or below 8
    (TF32's 2 * (k % 4)), so they must be a power of two up to 8 or a multiple of 8 (TF32: a multiple
    of 8)."""
    chunks = bm * size // 16
    if size == 4:
        return chunks % 8 == 0
    return chunks % 8 == 0 or chunks in (1, 2, 4)


class ALoader(Protocol):
    """Where the A chunks come from. ``params``: the kernel's parameters (A first, then Bt, C ...);
    ``rows(w, e, m)``: lines defining copy e's row state (m: the expression of its global row);
    ``ktile(w, d)``: lines run once per k tile (k0 and kk = k0 + this thread's chunk start known);
    ``chunk(e)``: (in-bounds expression, flat element offset expression) of copy e's chunk.
    Optional ``b_offset``: a batched kernel (grid z = batch, ``bz`` its index): the expression added
    to every Bt offset (e.g. ``U(bz * sB)``); the loader and the store add their own.
    Optional ``b_stride``: the name of Bt's row length when it is not K (a batched loader that runs
    a slice of each row: tc_gemm's parted GEMM).
    Optional ``a_km``: A is stored [K][M], m contiguous (a 1x1 convolution's NCHW input): each thread
    copies chunk ``acm`` of k rows ``akr<e>`` (k0 + akr<e> global), with ``km_cols(w, m)`` (lines for
    the thread's chunk of rows m..m+EPC-1) and ``km_chunk(e)`` (as ``chunk``) in place of ``rows`` and
    ``chunk``; the fragments come through ``ldmatrix .trans`` (16-bit), or 32-bit shared loads (TF32:
    each k row's chunks XOR 2 * (k % 4), so the 4 k rows of one load hit distinct banks; BM a multiple
    of 32: :func:`km_tile_ok`).
    Optional ``start(w, kk)`` and ``advance(w, d, bk)``: lines run once before the first k tile (kk: this
    thread's first chunk column) and after each issued k tile (the k tiles are issued in order), for a
    loader that tracks its position incrementally instead of dividing per k tile.
    Optional ``k_split``: split-K (grid z = split; not with ``b_offset``): the name of the kernel
    parameter tps (k tiles per split); block z runs k tiles [z*tps, min((z+1)*tps, ktiles)) only and
    the store writes split z's partial (its ``row`` reads ``cuda.blockIdx.z``)."""

    params: str

    def rows(self, w: Callable, e: int, m: str) -> None: ...
    def ktile(self, w: Callable, d: int) -> None: ...
    def chunk(self, e: int) -> tuple[str, str]: ...


def pipeline_source(cfg: TcConfig, itype: str, loader: ALoader, store: Store, name: str,
                    tf32_round: str | None = None) -> str:
    """Source of the kernel ``name(<loader.params>, vec)`` for one config (M, N, K among the params;
    ``vec``: ``tc_epilogue.vector_ok`` of the output);
    ``tf32_round``: a key of TF32_ROUND (None: DEFAULT_TF32_ROUND)."""
    rnd = TF32_ROUND[tf32_round or DEFAULT_TF32_ROUND].format
    BM, BN, BK, WM, WN, S = cfg[:6]
    T = cfg.threads
    size, kstep = ITYPES[itype][1], ITYPES[itype][2]
    EPC, CH = 16 // size, BK * size // 16  # elements per chunk, chunks per row
    per = 8 // CH  # rows sharing one swizzle value
    MI, NI = WM // 16, WN // 8
    L = [f"def {name}({loader.params}, vec):"]  # vec: the staged epilogue's 16-byte stores allowed
    w = lambda line, d=1: L.append("    " * d + line)  # noqa: E731
    # one dynamic shared array: A's stages, then B's; the staged epilogue reuses it (Cs, the output type)
    w("As = cuda.shared.array(0, stype, alignment=align)")
    w("Bs = As")
    w(f"Cs = cuda.shared.array(0, {CTYPE[np.dtype(store.dtype).name]}, alignment=align)")
    B0 = S * BM * BK
    w("tid = U(cuda.threadIdx.x)")
    w("lane = U(tid % 32)")
    w("warp = U(tid // 32)")
    w(f"wm0 = U(U(warp // {BN // WN}) * {WM})")
    w(f"wn0 = U(U(warp % {BN // WN}) * {WN})")
    # output tiles along blockIdx.x, N tiles fastest (neighbouring blocks share A rows in L2); one
    # grid dimension of up to 2**31 - 1 blocks (grid y stops at 65535: 4M rows of 64)
    w(f"nblk = U(U(N + {BN - 1}) // {BN})")
    w("bid = U(cuda.blockIdx.x)")
    w(f"m0 = U(U(bid // nblk) * {BM})")
    w(f"n0 = U(U(bid % nblk) * {BN})")
    b_offset = getattr(loader, "b_offset", None)  # a batched loader: grid z = batch, Bt's offset per z
    if b_offset is not None:
        w("bz = U(cuda.blockIdx.z)")
    w(f"ktiles = U(U(K + {BK - 1}) // {BK})")
    k_split = getattr(loader, "k_split", None)  # split-K: grid z = split, k tiles [kb, ktiles)
    if k_split is not None:
        if b_offset is not None:
            raise ValueError("a loader cannot be both batched (b_offset) and split-K (k_split): grid z")
        w(f"kb = U(U(cuda.blockIdx.z) * {k_split})  # split-K: this block's first k tile and its end")
        w(f"ke = U(kb + {k_split})")
        w("ktiles = ke if ke < ktiles else ktiles")
    k_first = "U(0)" if k_split is None else "kb"
    w(f"cc = U(tid % {CH})  # this thread's chunk of a row (global), and its copies' rows:")
    w(f"ck = U(cc * {EPC})")
    # copies per thread of each operand's k tile: rows * CH chunks over T threads; a tile of fewer
    # chunks than threads (a narrow BN) is copied by threads tid < rows * CH (guarded in ``issue``)
    copies = {op: max(1, rows * CH // T) for op, rows in (("a", BM), ("b", BN))}
    a_km = getattr(loader, "a_km", False)  # A stored [K][M] (m contiguous): its own copy rows and swizzle
    lds_a = a_km and size == 4  # TF32: no .trans for 32-bit elements, the fragments come by 32-bit loads
    if a_km:
        CHA = BM * size // 16  # chunks along a k row of A's tile
        if not km_tile_ok(BM, size):
            raise ValueError(f"an m-contiguous A of {BM} rows of {size}-byte elements has {CHA} chunks a k row: "
                             "its swizzle needs a power of two up to 8 or a multiple of 8 (TF32: of 8)")
        per_a, xor_a = max(1, 8 // CHA), min(CHA, 8)
        copies["a"] = max(1, BK * CHA // T)
        w(f"acm = U(tid % {CHA})  # this thread's m chunk of A's k rows, and its copies' k rows:")
        loader.km_cols(w, f"U(m0 + U(acm * {EPC}))")
        for e in range(copies["a"]):
            w(f"akr{e} = U(U(tid // {CHA}) + {e * T // CHA})")
            # the 32-bit loads read 8 m of k rows t = 0..3 at once: rows XOR their chunks with 2 * (k % 4)
            swz = f"U(U(akr{e} % 4) * 2)" if lds_a else f"U(U(akr{e} // {per_a}) % {xor_a})"
            w(f"as{e} = U(U(akr{e} * {BM}) + U(U(acm ^ {swz}) * {EPC}))")
    for op, rows in (("b", BN),) if a_km else (("a", BM), ("b", BN)):
        for e in range(copies[op]):
            w(f"{op}r{e} = U(U(tid // {CH}) + {e * T // CH})")
            w(f"{op}s{e} = U(U(U({op}r{e} * {BK}) + U(U(cc ^ U(U({op}r{e} // {per}) % {CH})) * {EPC}))"
              f" + {B0 if op == 'b' else 0})")
            if op == "a":
                loader.rows(w, e, f"U(m0 + ar{e})")
            else:
                w(f"bok{e} = U(n0 + br{e}) < N")
                base = f"U(U(n0 + br{e}) * {getattr(loader, 'b_stride', 'K')})"
                if b_offset is not None:
                    base = f"U({base} + {b_offset})"
                w(f"bg{e} = {base} if bok{e} else U(0)")
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

    def issue(d):  # cp.async of k tile `kl` into stage offset `ls`
        w(f"k0 = U(kl * {BK})", d)
        w("kk = U(k0 + ck)", d)
        w("kok = kk < K", d)
        loader.ktile(w, d)
        da = d
        a_chunks = BK * CHA if a_km else BM * CH
        if a_chunks < T:
            w(f"if tid < {a_chunks}:", d)
            da = d + 1
        for e in range(copies["a"]):
            ok, off = loader.km_chunk(e) if a_km else loader.chunk(e)
            w(f"ok = {ok}", da)
            w(f"cp_async16(As, U(U(ls * {BM * BK}) + as{e}), {loader.params.split(',')[0]}, "
              f"{off} if ok else U(0), 16 if ok else 0)", da)
        db = d
        if BN * CH < T:
            w(f"if tid < {BN * CH}:", d)
            db = d + 1
        for e in range(copies["b"]):
            w(f"ok = bok{e} and kok", db)
            w(f"cp_async16(Bs, U(U(ls * {BN * BK}) + bs{e}), Bt, U(bg{e} + kk) if ok else U(0), "
              "16 if ok else 0)", db)
        if hasattr(loader, "advance"):
            loader.advance(w, d, BK)

    w(f"kl = {k_first}")
    if hasattr(loader, "start"):
        loader.start(w, f"U(U(kl * {BK}) + ck)")
    for s in range(S - 1):
        w(f"ls = U({s})")
        w("if kl < ktiles:")
        issue(2)
        w("cp_async_commit()")
        w("kl = U(kl + 1)")
    w(f"ls = U({S - 1})")
    w("cs = U(0)")
    w(f"kt = {k_first}")
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
            if lds_a:
                rows = (f"U(a_st + {kk * 8 * BM})", f"U(a_st + {kk * 8 * BM + 4 * BM})")
                w(f"a{i}_0, a{i}_1, a{i}_2, a{i}_3 = " + ", ".join(
                    f"Au[U({rows[r >> 1]} + a_{('lo', 'hi')[r & 1]}{i})]" for r in range(4)), 2)
            elif a_km:
                w(f"a{i}_0, a{i}_1, a{i}_2, a{i}_3 = ldmatrix_x4_trans(As, U(U(a_st + {kk * 16 * BM}) + a_m{i}))",
                  2)
            else:
                w(f"a{i}_0, a{i}_1, a{i}_2, a{i}_3 = ldmatrix_x4(As, U(a_st + {i * 16 * BK}) + a_c{kk})", 2)
        for j in range(0, NI, 2):
            w(f"b{j}_0, b{j}_1, b{j + 1}_0, b{j + 1}_1 = ldmatrix_x4(Bs, U(b_st + {j * 8 * BK}) "
              f"+ b_c{kk})", 2)
        if itype == "tf32":
            for i in range(MI):
                w(", ".join(f"a{i}_{r}" for r in range(4)) + " = "
                  + ", ".join(rnd(f"a{i}_{r}") for r in range(4)), 2)
            for j in range(NI):
                w(f"b{j}_0, b{j}_1 = {rnd(f'b{j}_0')}, {rnd(f'b{j}_1')}", 2)
        if itype == "tf32x3":  # a{i}_{r} / b{j}_{r} become the big parts, a{i}_{r}s / b{j}_{r}s the small
            for name in [f"a{i}_{r}" for i in range(MI) for r in range(4)] + \
                    [f"b{j}_{r}" for j in range(NI) for r in range(2)]:
                w(f"{name}, {name}s = split_tf32({name})", 2)
        for i in range(MI):
            for j in range(NI):
                acc = ", ".join(f"c{i}_{j}_{r}" for r in range(4))
                if itype == "tf32x3":  # small parts, big parts (a: 4 registers, b: 2), accumulators
                    w(f"{acc} = mma_tf32x3(a{i}_0s, a{i}_1s, a{i}_2s, a{i}_3s, a{i}_0, a{i}_1, a{i}_2, a{i}_3, "
                      f"b{j}_0s, b{j}_1s, b{j}_0, b{j}_1, {acc})", 2)
                else:
                    w(f"{acc} = mma(a{i}_0, a{i}_1, a{i}_2, a{i}_3, b{j}_0, b{j}_1, {acc})", 2)
    w(f"cs = U(cs + 1) if cs < {S - 1} else U(0)", 2)
    w("kt = U(kt + 1)", 2)
    staged_epilogue(w, cfg, itype, store)
    return "\n".join(L) + "\n"


if runtime.SIMULATOR:  # numpy scalars warn where the uint32 index math wraps on purpose, as on the GPU
    warnings.filterwarnings("ignore", r"overflow encountered in scalar (add|subtract|multiply)", RuntimeWarning)
