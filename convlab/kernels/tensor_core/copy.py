"""The loading half of the tensor-core main loops (tc_pipeline's mma.sync warps, tc_wgmma's wgmma
warpgroups): where a block's tile and k range are, each thread's 16-byte ``cp.async`` copies of a k
tile into the swizzled shared stages, the prologue and the in-loop prefetch, and the :class:`ALoader`
hooks that say where A's chunks come from. The layout they write is tc_pipeline's module doc's; one dynamic
shared array holds A's stages, then B's (:func:`shared_arrays`).
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Protocol

import numpy as np

from convlab.kernels.tensor_core.config import ITYPES, TcConfig
from convlab.kernels.tensor_core.epilogue import CTYPE, Store


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


class Copies(NamedTuple):
    """What :func:`copy_setup` decided: chunk geometry, copies per thread, the m-contiguous A's layout."""

    EPC: int  # elements per 16-byte chunk
    CH: int  # chunks per row of a k tile
    B0: int  # element offset of B's stages in the dynamic shared array
    copies: dict  # "a" / "b" -> cp.async copies per thread of one k tile
    a_km: bool  # A stored [K][M] (loader.a_km)
    CHA: int  # a_km: chunks along a k row of A's tile (else 0)


def block_tiles(w: Callable, cfg: TcConfig, loader: ALoader) -> str:
    """Lines placing the block: its output tile (m0, n0), batch ``bz``, k tiles [k_first, ktiles); returns
    the expression of the first k tile."""
    BM, BN, BK = cfg.BM, cfg.BN, cfg.BK
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
    return "U(0)" if k_split is None else "kb"


def copy_setup(w: Callable, cfg: TcConfig, itype: str, loader: ALoader) -> Copies:
    """Lines fixing each thread's cp.async copies of a k tile (rows, swizzled shared offsets, row state)."""
    BM, BN, BK, S, T = cfg.BM, cfg.BN, cfg.BK, cfg.STAGES, cfg.threads
    size = ITYPES[itype][1]
    EPC, CH = 16 // size, BK * size // 16  # elements per chunk, chunks per row
    per = 8 // CH  # rows sharing one swizzle value
    B0 = S * BM * BK
    b_offset = getattr(loader, "b_offset", None)
    w(f"cc = U(tid % {CH})  # this thread's chunk of a row (global), and its copies' rows:")
    w(f"ck = U(cc * {EPC})")
    # copies per thread of each operand's k tile: rows * CH chunks over T threads; a tile of fewer
    # chunks than threads (a narrow BN) is copied by threads tid < rows * CH (guarded in ``issue``)
    copies = {op: max(1, rows * CH // T) for op, rows in (("a", BM), ("b", BN))}
    a_km = getattr(loader, "a_km", False)  # A stored [K][M] (m contiguous): its own copy rows and swizzle
    lds_a = a_km and size == 4  # TF32: no .trans for 32-bit elements, the fragments come by 32-bit loads
    CHA = 0
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
    return Copies(EPC, CH, B0, copies, a_km, CHA)


def issue_tile(w: Callable, d: int, cfg: TcConfig, loader: ALoader, cp: Copies) -> None:
    """Lines (at depth d) issuing the cp.async of k tile ``kl`` into stage ``ls``."""
    BM, BN, BK, T = cfg.BM, cfg.BN, cfg.BK, cfg.threads
    w(f"k0 = U(kl * {BK})", d)
    w("kk = U(k0 + ck)", d)
    w("kok = kk < K", d)
    loader.ktile(w, d)
    da = d
    a_chunks = BK * cp.CHA if cp.a_km else BM * cp.CH
    if a_chunks < T:
        w(f"if tid < {a_chunks}:", d)
        da = d + 1
    for e in range(cp.copies["a"]):
        ok, off = loader.km_chunk(e) if cp.a_km else loader.chunk(e)
        w(f"ok = {ok}", da)
        w(f"cp_async16(As, U(U(ls * {BM * BK}) + as{e}), {loader.params.split(',')[0]}, "
          f"{off} if ok else U(0), 16 if ok else 0)", da)
    db = d
    if BN * cp.CH < T:
        w(f"if tid < {BN * cp.CH}:", d)
        db = d + 1
    for e in range(cp.copies["b"]):
        w(f"ok = bok{e} and kok", db)
        w(f"cp_async16(Bs, U(U(ls * {BN * BK}) + bs{e}), Bt, U(bg{e} + kk) if ok else U(0), "
          "16 if ok else 0)", db)
    if hasattr(loader, "advance"):
        loader.advance(w, d, BK)


def prologue(w: Callable, cfg: TcConfig, loader: ALoader, cp: Copies, k_first: str) -> None:
    """Lines issuing the first ``cfg.depth`` k tiles into stages 0..depth-1 (one group each), leaving ``kl``
    (the next k tile to issue) and ``ls`` (its stage)."""
    w(f"kl = {k_first}")
    if hasattr(loader, "start"):
        loader.start(w, f"U(U(kl * {cfg.BK}) + ck)")
    for s in range(cfg.depth):
        w(f"ls = U({s})")
        w("if kl < ktiles:")
        issue_tile(w, 2, cfg, loader, cp)
        w("cp_async_commit()")
        w("kl = U(kl + 1)")
    w(f"ls = U({cfg.depth})")


def issue_next(w: Callable, d: int, cfg: TcConfig, loader: ALoader, cp: Copies) -> None:
    """Lines (at depth d) of the loop's prefetch: k tile ``kl`` (if any) into stage ``ls``, one group."""
    w("if kl < ktiles:", d)
    issue_tile(w, d + 1, cfg, loader, cp)
    w("cp_async_commit()", d)
    w("kl = U(kl + 1)", d)
    w(f"ls = U(ls + 1) if ls < {cfg.STAGES - 1} else U(0)", d)


def shared_arrays(w: Callable, store: Store) -> None:
    """One dynamic shared array: A's stages, then B's; the staged epilogue reuses it (Cs, the output type)."""
    w("As = cuda.shared.array(0, stype, alignment=align)")
    w("Bs = As")
    w(f"Cs = cuda.shared.array(0, {CTYPE[np.dtype(store.dtype).name]}, alignment=align)")
