"""The tensor-core kernels' epilogue: the accumulators through shared memory to the output.

    wait_group(0); __syncthreads()                # every warp is done with the main loop's stages
    for each pass (one, or one per row of warps when the C tile is larger than the stages):
        acc (+ bias, converted to the output type) -> Cs, the pass's C tile in shared memory, laid out
            along the output's contiguous dimension, rows padded by 16 bytes (conflict-free fragment writes
            for 16-bit outputs and NCHW fp32; 2-way for a row-major fp32 tile, whose lanes write even banks)
        __syncthreads()
        Cs -> C: 16-byte vectors (``vec``, the launcher's :func:`vector_ok`: aligned, whole runs), else
            element by element; consecutive threads on consecutive addresses either way; bounds-checked

A :class:`Store` says where C goes: a row-major C (the GEMM, an NHWC output: columns contiguous) or an
NCHW output (its pixels, the GEMM's rows, contiguous). Staged through shared memory because the
fragments' own stores write 2-byte elements at best in 16-byte runs (results/tc_conv/h200/0654894).

A store with a fused epilogue (``put``, a compile-time specialisation: a store without one generates
none of its lines) stages Cs in float32 (acc + bias, not rounded) and writes out through ``put``
(convlab.kernels.epilogue.fused_store: the epilogue of its channel, the GEMM column, and the residual
read at its own offset, rounded once to the output type): with ``vec`` (the output and the residual
aligned) ``put_width`` elements at a time (``put_vector``: one 16-byte residual load and output store),
else element by element; consecutive threads on consecutive addresses either way.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from convlab import runtime
from convlab.kernels.source import Writer

STATIC_LIMIT = 48 * 1024  # static shared memory per block (more needs the opt-in attribute)
#: the kernel local holding the batch index (grid z) of a batched kernel, passed to loaders and stores
BATCH = "bz"


class Store:
    """Where C goes: the interface between a store and the epilogue.

    Attributes:
        ``contig`` the GEMM dimension contiguous in memory ("n": row-major C, NHWC; "m": NCHW, whose
                   pixels are the rows)
        ``dtype``  the output's numpy dtype (its staging type too)
        ``array``  the output parameter's name (a flat array)
    Methods (inputs: the epilogue's names, passed as arguments; a store's own state lives in locals it
    writes in ``row`` and reads in ``addr``):
        ``row(w, row, batch)`` lines run once the global row ``row`` (< M) is known (batch: the name of
                               the batch index of a batched kernel, else None)
        ``addr(col)``          the flat offset of (row, col) after them
        ``value(col, v)``      the stored expression for the float32 accumulator ``v`` of column
                               ``col`` (< N; bias, conversion)
    Fused epilogue (optional):
        ``params``  what the kernel's parameters add after the loader's (", ep_r, ep_scale, ep_shift"; "" none)
        ``put``     None, or the write-out statement of one element: its ``{}`` the global offset, then
                    the staged one, the column in the local ``col`` (then ``dtype`` is float32)
        ``put_vector``  None, or ``put``'s statement for ``put_width`` elements along the contiguous
                    dimension (16 bytes of the output), run where ``vec`` holds
    ``vectors``: False where the staged tile's contiguous runs are not contiguous in the output (no 16-byte
    write-out is generated; ``vec`` is then ignored)"""

    contig: str
    dtype: Any
    array: str
    params: str = ""
    put: str | None = None
    put_vector: str | None = None
    put_width: int = 1
    vectors: bool = True

    def row(self, w: Writer, row: str, batch: str | None) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define row")

    def addr(self, col: str) -> str:
        raise NotImplementedError(f"{type(self).__name__} must define addr")

    def value(self, col: str, v: str) -> str:
        raise NotImplementedError(f"{type(self).__name__} must define value")


def epilogue_plan(cfg: Any, itype: str, out_dtype: Any, contig: str) -> tuple[int, int, int]:
    """(passes, staged rows per pass, leading dimension) of the staged epilogue: the block's C tile (BM x
    BN, in the output type) goes through shared memory, ``contig``-major with rows padded by 16 bytes
    (see the module doc), in one pass when it fits the main loop's shared memory (or 48 KiB),
    else one pass per row of warps."""
    size = np.dtype(out_dtype).itemsize
    pad = 16 // size
    warps_m = cfg.BM // cfg.WM
    for passes in (1, warps_m):
        rows = cfg.BM // passes
        ld = rows + pad if contig == "m" else cfg.BN + pad
        elems = cfg.BN * ld if contig == "m" else rows * ld
        if elems * size <= max(cfg.shared_bytes(itype), STATIC_LIMIT) or passes == warps_m:
            return passes, rows, ld
    raise AssertionError("unreachable")


def dynamic_bytes(cfg: Any, itype: str, out_dtype: Any, contig: str) -> int:
    """Dynamic shared memory of one block: the main loop's stages or the staged C tile, the larger."""
    passes, rows, ld = epilogue_plan(cfg, itype, out_dtype, contig)
    staged = (cfg.BN if contig == "m" else rows) * ld * np.dtype(out_dtype).itemsize
    return max(cfg.shared_bytes(itype), staged)


#: the output dtype -> the name of its numba type in the kernel's namespace (Cs, the staged tile)
CTYPE = {"float32": "c_float32", "float16": "c_float16", "uint16": "c_uint16", "int16": "c_uint16"}


def staged_epilogue(w: Writer, cfg: Any, itype: str, store: Store, batched: bool = False) -> None:
    """acc -> Cs (shared, the output type, bias added) -> the output in 16-byte vectors along the
    contiguous dimension (``vec``, a kernel parameter: the launcher's alignment verdict), or element by
    element with consecutive threads on consecutive addresses (a store's fused epilogue, ``put``: Cs
    float32, element by element always).

    The kernel defines ``wm0`` / ``wn0`` (this warp's first row and column in the tile) and the
    accumulators ``c{i}_{j}_{r}``: mma.sync's m16n8 C fragment (r = 0..3) of the warp's row block i
    (``cfg.frag_rows`` rows apart: 16 for mma.sync, 64 for a wgmma warpgroup's m64 slices, whose warp w
    owns rows 16 (w % 4) of each) and column block j (8 columns); ``batched``: the batch index
    :data:`BATCH` too."""
    WN = cfg.WN
    MI, NI = cfg.WM // cfg.frag_rows, WN // 8  # a warp's accumulator blocks: rows frag_rows apart
    passes, RP, LD = epilogue_plan(cfg, itype, store.dtype, store.contig)
    EPV = 16 // np.dtype(store.dtype).itemsize
    m_major = store.contig == "m"
    batch = BATCH if batched else None
    w("wait_all()")
    w("cuda.syncthreads()  # every warp is done with the stages: Cs may overwrite them")
    w("g = U(lane // 4)")
    w("t2 = U(U(lane % 4) * 2)")
    w("bmax = U(N - 1)")
    for p in range(passes):
        with w.block(f"if U(warp // {cfg.warps_n}) == {p}:" if passes > 1 else None):
            w(f"rw = U(U(wm0 - {p * RP}) + g)")
            for j in range(NI):
                w(f"cl = U(U(wn0 + t2) + {8 * j})")
                w("c0 = U(n0 + cl)")
                w("c0 = c0 if c0 < N else bmax")
                w("c1 = U(c0 + 1)")
                w("c1 = c1 if c1 < N else bmax")
                for i in range(MI):
                    for h in range(2):
                        rl = f"U(rw + {cfg.frag_rows * i + 8 * h})"
                        for u in range(2):
                            at = f"U(U(U(cl + {u}) * {LD}) + {rl})" if m_major else f"U(U({rl} * {LD}) + U(cl + {u}))"
                            w(f"Cs[{at}] = {store.value(f'c{u}', f'c{i}_{j}_{2 * h + u}')}")
        w("cuda.syncthreads()")
        element = store.put or f"{store.array}[{{}}] = Cs[{{}}]"
        if store.put is not None:  # a fused epilogue, from the float32 Cs: 16 bytes of the output at a time
            width, vector = store.put_width, store.put_vector
        else:
            width, vector = EPV, f"copy16({store.array}, {{}}, Cs, {{}})"
        if vector is None or not store.vectors:  # a store whose contiguous runs are not the output's
            _write_out(w, cfg, p * RP, RP, LD, store, batch, 1, element)
        else:
            with w.block("if vec:"):
                _write_out(w, cfg, p * RP, RP, LD, store, batch, width, vector)
            with w.block("else:"):
                _write_out(w, cfg, p * RP, RP, LD, store, batch, 1, element)
        if p < passes - 1:
            w("cuda.syncthreads()")


def _write_out(w: Writer, cfg: Any, row0: int, RP: int, LD: int, store: Store, batch: str | None, width: int,
               statement: str) -> None:
    """Lines copying the staged RP x BN tile (rows from ``row0``) out in items of ``width`` elements along
    the contiguous dimension, consecutive threads on consecutive items: ``statement`` with the global
    offset and the staged offset in its two ``{}``; items outside C are skipped. When the rows are the
    contiguous dimension (NCHW) and the threads a multiple of a column's items, each thread's row is
    fixed: its global offset base (a division by P*Q) is computed once."""
    T, BN = cfg.threads, cfg.BN
    m_major = store.contig == "m"
    if (RP if m_major else BN) % width:
        raise ValueError(f"the staged tile's runs ({RP if m_major else BN}) are not whole items of {width}")
    run = (RP if m_major else BN) // width  # items along one contiguous run of the tile
    items = BN * RP // width
    major, minor = ("cl", "rl") if m_major else ("rl", "cl")
    staged = f"U(U({major} * {LD}) + {minor})"
    if m_major and T % run == 0 and items % T == 0:
        w(f"rl = U(U(tid % {run}) * {width})")
        w(f"row = U(U(m0 + {row0}) + rl)")
        with w.block("if row < M:"):
            store.row(w, "row", batch)
            with w.block(f"for e in range({items // T}):"):
                w(f"cl = U(U(tid // {run}) + U(e * {T // run}))")
                w("col = U(n0 + cl)")
                with w.block("if col < N:"):
                    w(statement.format(store.addr("col"), staged))
        return
    with w.block(f"for e in range({-(-items // T)}):"):
        w(f"vi = U(tid + U(e * {T}))")
        with w.block(f"if vi < {items}:" if items % T else None):
            w(f"{major} = U(vi // {run})")
            w(f"{minor} = U(U(vi % {run}) * {width})")
            w(f"row = U(U(m0 + {row0}) + rl)")
            w("col = U(n0 + cl)")
            with w.block("if row < M and col < N:"):
                store.row(w, "row", batch)
                w(statement.format(store.addr("col"), staged))


def vector_ok(out: Any, *extents: int) -> bool:
    """Whether the staged epilogue may store ``out`` (a device array) in 16-byte vectors: its data is
    16-byte aligned and every extent (the contiguous runs: N for a row-major C, P*Q for NCHW, a batch
    stride) is a whole number of vectors."""
    epv = 16 // np.dtype(out.dtype).itemsize
    return runtime.is_aligned(out) and all(e % epv == 0 for e in extents)
