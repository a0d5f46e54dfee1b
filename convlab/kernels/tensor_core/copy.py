"""The loading half of the tensor-core main loops (warp's mma.sync warps, warpgroup's wgmma
warpgroups): where a block's tile and k range are, each thread's 16-byte ``cp.async`` copies of a k
tile into the swizzled shared stages, the prologue and the in-loop prefetch, and the :class:`ALoader`
interface that says where A's chunks come from. The layout they write is warp's module doc's;
one dynamic shared array holds A's stages, then B's (:func:`shared_arrays`).
"""
from __future__ import annotations

import contextlib
from typing import Iterator, NamedTuple, Sequence

import numpy as np

from convlab.kernels.source import Writer
from convlab.kernels.tensor_core.config import ITYPES, TcConfig
from convlab.kernels.tensor_core.epilogue import BATCH, CTYPE, Store


def km_tile_ok(bm: int, size: int) -> bool:
    """Whether an m-contiguous A (``a_km``) of BM rows of ``size``-byte elements can be swizzled in its
    row: the chunks per k row (BM * size / 16) XOR with values below min(chunks, 8) (16-bit) or below 8
    (TF32's 2 * (k % 4)), so they must be a power of two up to 8 or a multiple of 8 (TF32: a multiple
    of 8)."""
    chunks = bm * size // 16
    if size == 4:
        return chunks % 8 == 0
    return chunks % 8 == 0 or chunks in (1, 2, 4)


class ALoader:
    """Where A's 16-byte chunks come from: the interface between a loader and the pipeline.

    Attributes (class defaults: a dense, unbatched, unsplit, k-contiguous A):
        ``params``   the kernel's parameters, A first, then Bt and the output (the loader's and the
                     store's expressions read them by name)
        ``batched``  grid z = batch: the pipeline defines the batch index and passes its name
                     (``batch``) to ``rows`` and ``b_offset``
        ``b_stride`` the name of Bt's row length ("K"; a loader running a slice of each row: ``ld``)
        ``k_split``  split-K (grid z = split; not with ``batched``): the name of the parameter tps (k tiles
                     per split); block z runs k tiles [z*tps, min((z+1)*tps, ktiles)) and the store
                     writes split z's partial
        ``a_km``     A stored [K][M], m contiguous (a 1x1 convolution's NCHW input): the ``km_*``
                     methods replace ``rows`` and ``chunk``; the fragments come through
                     ``ldmatrix .trans`` (16-bit) or 32-bit shared loads (TF32; :func:`km_tile_ok`)

    Methods write lines with ``w`` (a :class:`~convlab.kernels.source.Writer` at the depth where they
    go) or return expressions. Their inputs are the pipeline's names, passed as arguments; a loader's own
    state lives in locals it writes itself (``rows`` writes per-copy state read back by ``chunk``):
        ``rows(w, e, m, batch)``   copy e's row state (m: the expression of its global row)   required
        ``chunk(e, kk, k_ok)``     (in-bounds, flat element offset) expressions of copy e's chunk at
                                   chunk column ``kk``, ``k_ok`` the name of ``kk < K``         required
        ``km_cols(w, m)``          a_km: the thread's chunk of rows m .. m+EPC-1               a_km
        ``km_chunk(e, k0, k_row)`` a_km: as ``chunk`` for k row ``k0 + k_row``                  a_km
        ``km_rows(w, e, k0, k_row)`` a_km: lines before copy e's ``km_chunk`` in each k tile (state that
                                   depends on the k row: a gather along the reduction)
        ``b_offset(batch)``        batched: the expression added to every Bt offset           batched
        ``start(w, kk)``           once before the first k tile (kk: this thread's first chunk column)
        ``ktile(w, k0, kk)``       once per issued k tile, before its copies (k0: its first column)
        ``advance(w, bk)``         after each issued k tile (issued in order; a loader that tracks its
                                   position incrementally instead of dividing per k tile)
    The last three write nothing unless a loader overrides them."""

    params: str
    batched = False
    b_stride = "K"
    k_split: str | None = None
    a_km = False

    @property
    def array(self) -> str:
        """The name of the A parameter (the first of ``params``)."""
        return self.params.split(",")[0]

    def rows(self, w: Writer, e: int, m: str, batch: str | None) -> None:
        raise NotImplementedError(f"{type(self).__name__} reads a k-contiguous A: it must define rows")

    def chunk(self, e: int, kk: str, k_ok: str) -> tuple[str, str]:
        raise NotImplementedError(f"{type(self).__name__} reads a k-contiguous A: it must define chunk")

    def km_cols(self, w: Writer, m: str) -> None:
        raise NotImplementedError(f"{type(self).__name__} sets a_km: it must define km_cols")

    def km_chunk(self, e: int, k0: str, k_row: str) -> tuple[str, str]:
        raise NotImplementedError(f"{type(self).__name__} sets a_km: it must define km_chunk")

    def km_rows(self, w: Writer, e: int, k0: str, k_row: str) -> None:
        pass

    def b_offset(self, batch: str) -> str:
        raise NotImplementedError(f"{type(self).__name__} is batched: it must define b_offset")

    def start(self, w: Writer, kk: str) -> None:
        pass

    def ktile(self, w: Writer, k0: str, kk: str) -> None:
        pass

    def advance(self, w: Writer, bk: int) -> None:
        pass


class Copies(NamedTuple):
    """What :func:`copy_setup` decided: chunk geometry, copies per thread, the m-contiguous A's layout."""

    EPC: int  # elements per 16-byte chunk
    CH: int  # chunks per row of a k tile
    B0: int  # element offset of B's stages in the dynamic shared array
    copies: dict  # "a" / "b" -> cp.async copies per thread of one k tile
    a_km: bool  # A stored [K][M] (loader.a_km)
    CHA: int  # a_km: chunks along a k row of A's tile (else 0)


def block_tiles(w: Writer, cfg: TcConfig, loader: ALoader) -> str:
    """Lines placing the block: its output tile (m0, n0), batch ``bz``, k tiles [k_first, ktiles); returns
    the expression of the first k tile."""
    BM, BN, BK = cfg.BM, cfg.BN, cfg.BK
    # output tiles along blockIdx.x, N tiles fastest (neighbouring blocks share A rows in L2); one
    # grid dimension of up to 2**31 - 1 blocks (grid y stops at 65535: 4M rows of 64)
    w(f"nblk = U(U(N + {BN - 1}) // {BN})")
    w("bid = U(cuda.blockIdx.x)")
    w(f"m0 = U(U(bid // nblk) * {BM})")
    w(f"n0 = U(U(bid % nblk) * {BN})")
    if loader.batched:  # grid z = batch
        w(f"{BATCH} = U(cuda.blockIdx.z)")
    w(f"ktiles = U(U(K + {BK - 1}) // {BK})")
    k_split = loader.k_split  # split-K: grid z = split, k tiles [kb, ktiles)
    if k_split is not None:
        if loader.batched:
            raise ValueError("a loader cannot be both batched and split-K (k_split): grid z")
        w(f"kb = U(U(cuda.blockIdx.z) * {k_split})  # split-K: this block's first k tile and its end")
        w(f"ke = U(kb + {k_split})")
        w("ktiles = ke if ke < ktiles else ktiles")
    return "U(0)" if k_split is None else "kb"


def copy_setup(w: Writer, cfg: TcConfig, itype: str, loader: ALoader) -> Copies:
    """Lines fixing each thread's cp.async copies of a k tile (rows, swizzled shared offsets, row state)."""
    BM, BN, BK, S, T = cfg.BM, cfg.BN, cfg.BK, cfg.STAGES, cfg.threads
    size = ITYPES[itype][1]
    EPC, CH = 16 // size, BK * size // 16  # elements per chunk, chunks per row
    per = 8 // CH  # rows sharing one swizzle value
    B0 = S * BM * BK
    batch = BATCH if loader.batched else None
    w(f"cc = U(tid % {CH})  # this thread's chunk of a row (global), and its copies' rows:")
    w(f"ck = U(cc * {EPC})")
    # copies per thread of each operand's k tile: rows * CH chunks over T threads; a tile of fewer
    # chunks than threads (a narrow BN) is copied by threads tid < rows * CH (guarded in ``issue``)
    copies = {op: max(1, rows * CH // T) for op, rows in (("a", BM), ("b", BN))}
    a_km = loader.a_km  # A stored [K][M] (m contiguous): its own copy rows and swizzle
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
                loader.rows(w, e, f"U(m0 + ar{e})", batch)
            else:
                w(f"bok{e} = U(n0 + br{e}) < N")
                base = f"U(U(n0 + br{e}) * {loader.b_stride})"
                if batch is not None:
                    base = f"U({base} + {loader.b_offset(batch)})"
                w(f"bg{e} = {base} if bok{e} else U(0)")
    return Copies(EPC, CH, B0, copies, a_km, CHA)


def issue_tile(w: Writer, cfg: TcConfig, loader: ALoader, cp: Copies) -> None:
    """Lines issuing the cp.async of k tile ``kl`` into stage ``ls``."""
    BM, BN, BK, T = cfg.BM, cfg.BN, cfg.BK, cfg.threads
    w(f"k0 = U(kl * {BK})")
    w("kk = U(k0 + ck)")
    w("kok = kk < K")
    loader.ktile(w, "k0", "kk")
    a_chunks = BK * cp.CHA if cp.a_km else BM * cp.CH
    with w.block(f"if tid < {a_chunks}:" if a_chunks < T else None):
        for e in range(cp.copies["a"]):
            if cp.a_km:
                loader.km_rows(w, e, "k0", f"akr{e}")
            ok, off = loader.km_chunk(e, "k0", f"akr{e}") if cp.a_km else loader.chunk(e, "kk", "kok")
            w(f"ok = {ok}")
            w(f"cp_async16(As, U(U(ls * {BM * BK}) + as{e}), {loader.array}, {off} if ok else U(0), "
              "16 if ok else 0)")
    with w.block(f"if tid < {BN * cp.CH}:" if BN * cp.CH < T else None):
        for e in range(cp.copies["b"]):
            w(f"ok = bok{e} and kok")
            w(f"cp_async16(Bs, U(U(ls * {BN * BK}) + bs{e}), Bt, U(bg{e} + kk) if ok else U(0), "
              "16 if ok else 0)")
    loader.advance(w, BK)


def prologue(w: Writer, cfg: TcConfig, loader: ALoader, cp: Copies, k_first: str) -> None:
    """Lines issuing the first ``cfg.depth`` k tiles into stages 0..depth-1 (one group each), leaving ``kl``
    (the next k tile to issue) and ``ls`` (its stage)."""
    w(f"kl = {k_first}")
    loader.start(w, f"U(U(kl * {cfg.BK}) + ck)")
    for s in range(cfg.depth):
        w(f"ls = U({s})")
        with w.block("if kl < ktiles:"):
            issue_tile(w, cfg, loader, cp)
        w("cp_async_commit()")
        w("kl = U(kl + 1)")
    w(f"ls = U({cfg.depth})")


def issue_next(w: Writer, cfg: TcConfig, loader: ALoader, cp: Copies) -> None:
    """Lines of the loop's prefetch: k tile ``kl`` (if any) into stage ``ls``, one group."""
    with w.block("if kl < ktiles:"):
        issue_tile(w, cfg, loader, cp)
    w("cp_async_commit()")
    w("kl = U(kl + 1)")
    w(f"ls = U(ls + 1) if ls < {cfg.STAGES - 1} else U(0)")


@contextlib.contextmanager
def k_loop(w: Writer, cfg: TcConfig, loader: ALoader, cp: Copies, k_first: str,
           landed: Sequence[str] = ()) -> Iterator[None]:
    """The pipelined loop over k tiles kt = k_first .. ktiles - 1, tile kt in stage ``cs``: the
    :func:`prologue`, then in each iteration the wait for tile kt's group, the ``landed`` lines, the
    barrier and :func:`issue_next`; the with-block's lines compute on stage cs, then cs and kt advance."""
    prologue(w, cfg, loader, cp, k_first)
    w("cs = U(0)")
    w(f"kt = {k_first}")
    with w.block("while kt < ktiles:"):
        w("wait()")
        for line in landed:
            w(line)
        w("cuda.syncthreads()")
        issue_next(w, cfg, loader, cp)
        yield
        w(f"cs = U(cs + 1) if cs < {cfg.STAGES - 1} else U(0)")
        w("kt = U(kt + 1)")


def shared_arrays(w: Writer, store: Store) -> None:
    """One dynamic shared array: A's stages, then B's; the staged epilogue reuses it (Cs, the output type)."""
    w("As = cuda.shared.array(0, stype, alignment=align)")
    w("Bs = As")
    w(f"Cs = cuda.shared.array(0, {CTYPE[np.dtype(store.dtype).name]}, alignment=align)")
