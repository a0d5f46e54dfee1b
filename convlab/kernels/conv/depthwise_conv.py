"""Forward and backward-data kernels of the depthwise plugin: PL planes x one output tile per block, the
input halo tiles and the filters in shared memory, VH output rows per thread in registers; generated per
layer shape and config (geometry in ``_depthwise_common``).

Grid: x = (phase f, tile row bh, tile column bw), y = channel group (PL output channels co0 .. co0+PL-1),
z = image n. Thread (l, ty, tx) owns output channel co = co0 + l, rows ty*VH + v of column tx:

    for j < J (forward J = 1: ci = co // M, filter co;  dgrad J = M: ci = filter = co*M + j):
        ws[l][:] <- w[filter of co0 + l],  tile[l] <- in[n, ci(co0 + l), org_h + i, org_w + jj]  (l < PL;
                    0 outside the plane: the padding)
        syncthreads
        for v < VH, taps (r, s) of phase f: acc[v] += tile[l][row(v, r)][col(tx, s)] * ws[l][r, s]
        syncthreads
    out[n, co, (t0h + ty*VH + v)*OSTEP_H + o0h, (t0w + tx)*OSTEP_W + o0w] = acc[v] (+ bias[co])
        (fused: epilogue(acc[v] + bias[co], co, residual at the same index), convlab.kernels.epilogue)

Each tile value a thread needs is read from shared memory once (literal offsets in the generated code).
fp16 / bf16: the tiles, filters and accumulators are float32, the store rounds (``_depthwise_common``).
"""
from __future__ import annotations

import functools

import numpy as np
from numba import from_dtype, int32, int64, uint32

from convlab import runtime
from convlab.epilogue import Epilogue
from convlab.runtime import cuda

from convlab.kernels.conv.depthwise_common import (axis, device, entry_kernel, halo_loader, names, reads,
                                                   tile_products)
from convlab.kernels.data.convert import from_f32, half_kind, to_f32
from convlab.kernels.epilogue import compute_dtype, fused_store, register_cache
from convlab.kernels.source import Writer


@functools.cache
def conv_compute(ah, aw, vh: int, hw: int, s_: int):
    """``acc = compute(f, tile, ws, base, wb, acc)``: one thread's VH rows of phase f = fh * len(aw.phases)
    + fw, every tile value read once (acc[v] += tile[base + literal] * ws[wb + r*S + s])."""
    accs = names("a", vh)
    w = Writer("def compute(f, tile, ws, base, wb, acc):")
    w.indent()
    w(f"{accs}= acc")
    for f in range(len(ah.phases) * len(aw.phases)):
        fh, fw = divmod(f, len(aw.phases))
        with w.block(f"{'if' if f == 0 else 'elif'} f == {f}:"):
            uses_at = reads(ah, aw, fh, fw, vh, hw)
            taps = sorted({(r, s) for uses in uses_at.values() for _, r, s in uses})
            for r, s in taps:
                w(f"w{r}_{s} = ws[wb + u32({r * s_ + s})]")
            if not taps:
                w("pass")
            tile_products(w, uses_at, lambda v, r, s: f"a{v} += x * w{r}_{s}")
    w(f"return ({accs})")
    return device(w, "compute", {})


@functools.cache
def row_store(vh: int, ostep: int, out_h: int, out_w: int, kind: str | None = None, put=None):
    """``store(out, plane, oh0, ow, acc, b, k, ep)``: out[plane + (oh0 + v*ostep)*out_w + ow] = acc[v] + b
    for the rows and column inside the out_h x out_w output plane; ``kind`` "float16" / "bfloat16": out
    holds that half type (bf16: uint16 bits), each float32 sum rounded to nearest even as it is stored.
    ``put`` (a fused epilogue's element store, convlab.kernels.epilogue.fused_store): each value goes
    through ``put(out, at, value, k, ep)`` instead, with its output channel ``k`` and the epilogue's
    operands ``ep`` (``k`` and ``ep`` unused without it)."""
    value = "write(acc[{}] + b)" if kind else "acc[{}] + b"
    w = Writer("def store(out, plane, oh0, ow, acc, b, k, ep):")
    w.indent()
    with w.block(f"if u32(ow) < u32({out_w}):"):
        for v in range(vh):
            w(f"oh = u32(oh0 + i32({v * ostep}))")
            with w.block(f"if oh < u32({out_h}):"):
                at = f"i64(u32(plane + u32(oh * u32({out_w})) + u32(ow)))"
                w(f"put(out, {at}, acc[{v}] + b, k, ep)" if put else f"out[{at}] = {value.format(v)}")
    return device(w, "store", {"i32": np.int32, "write": from_f32(kind), "put": put})


def _consts(values) -> tuple:
    return tuple(np.int32(v) for v in values)


@functools.cache
def conv_kernel(dtype: str, dgrad: bool, tile: tuple[int, int, int, int], geometry: tuple[int, ...],
                sizes: tuple[int, ...], has_bias: bool, depth: tuple[int, ...] = (), epi: Epilogue | None = None):
    """The forward (``dgrad`` False) or backward-data kernel ``kernel(a, w, bias, out)`` of one tile
    (TH, TW, VH, PL), filter geometry (R, S, sh, sw, ph, pw, dh, dw) and layer ``sizes`` (in_h, in_w,
    out_h, out_w, in_c, out_c, M, tiles_h, tiles_w); ``bias`` is read only when ``has_bias``; ``depth``
    (3D: T, sd, pd, dd, in_d, out_d; 2D: empty) adds the depth taps. Grid: x = (phase, output depth,
    tile row, tile column), y = channel group of PL, z = image; TP * PL threads. ``dtype`` is the arrays'
    (bfloat16: uint16 bits); fp16 / bf16 compute in float32. ``epi`` (an Epilogue): the kernel fused with
    it, ``kernel(a, w, bias, out, r, scale, shift)`` (convlab.kernels.epilogue.EpilogueOperands' arrays; r
    flat, C-contiguous like out), the same body with each output stored through the epilogue's element
    store (convlab.kernels.epilogue.fused_store), output channel co: one store per output, after its
    whole sum (every phase, depth tap and multiplier slice of it is in the thread's registers)."""
    th, tw, vh, pl = tile
    r_, s_, sh, sw, ph, pw, dh, dw = geometry
    in_h, in_w, out_h, out_w, in_c, out_c, mult, tiles_h, tiles_w = sizes
    ah, aw = axis(dgrad, r_, sh, ph, dh), axis(dgrad, s_, sw, pw, dw)
    HH, HW, TP, RS = ah.halo(th), aw.halo(tw), tw * (th // vh), r_ * s_
    T, HALO, NT, zero = TP * pl, HH * HW, from_dtype(compute_dtype(dtype)), compute_dtype(dtype).type(0)
    read, WIDEN = to_f32(half_kind(dtype)), bool(half_kind(dtype))  # fp16 / bf16 values widen as read
    # dgrad: plane l of group co0 reads dy channel (co0 + l) * M + j; forward: x channel (co0 + l) // M
    load = halo_loader(dtype, HH, HW, T, pl, in_h, in_w, out_c, 1 if dgrad else mult,
                       mult if dgrad else 1, depth[4] if depth else 0)
    compute = conv_compute(ah, aw, vh, HW, s_)
    store = row_store(vh, ah.ostep, out_h, out_w, half_kind(dtype), None if epi is None else fused_store(dtype, epi))
    TLO_H, TLO_W = _consts(p.t_lo for p in ah.phases), _consts(p.t_lo for p in aw.phases)
    ORG_H, ORG_W = _consts(p.min_off for p in ah.phases), _consts(p.min_off for p in aw.phases)
    O0_H, O0_W = _consts(p.o0 for p in ah.phases), _consts(p.o0 for p in aw.phases)
    IST_H, IST_W, OST_H, OST_W = _consts((ah.istep, aw.istep, ah.ostep, aw.ostep))
    u0, u1, uT, uTP, uRS, uPL, uNPW = (np.uint32(v) for v in (0, 1, T, TP, RS, pl, len(aw.phases)))
    uTH, uTW, uVH, uTHW, uTILES_W = (np.uint32(v) for v in (th, tw, vh, tiles_h * tiles_w, tiles_w))
    uCA, uCO, uM, uOUT_HW, uPLRS = (np.uint32(v) for v in (in_c, out_c, mult, out_h * out_w, pl * RS))
    ROWSTEP, uISW, uHALO = np.uint32(vh * ah.istep * HW), np.uint32(aw.istep), np.uint32(HALO)
    ZEROS, DGRAD, PHASED = (zero,) * vh, dgrad, len(ah.phases) * len(aw.phases) > 1
    JN = np.uint32(mult if dgrad else 1)
    ONE, HAS_BIAS, TILE_N, WS_N = pl == 1, has_bias, pl * HALO, pl * RS  # shared sizes: literals
    DEEP = bool(depth)  # 3D: a block's outputs lie at one depth; its depth taps loop around the tile
    DT, SD, PD, DD, IN_D, OUT_D = depth or (1, 1, 0, 1, 1, 1)
    SD, PD, DD, IN_D = (np.int32(v) for v in (SD, PD, DD, IN_D))
    uDT, uOUT_D, uPHASE = (np.uint32(v) for v in (DT, OUT_D, tiles_h * tiles_w * OUT_D))  # PHASE: blocks

    # inlined in Numba's IR, not forceinline's NVVM inlining (which keeps the callee's environment global):
    # the kernel without an epilogue lowers to the same PTX as a kernel holding this body itself
    @runtime.jit(device=True, inline="always")
    def body(a4, wt4, bias, out4, ep):
        a, wt, out = a4.flat, wt4.flat, out4.flat  # C-contiguous: flat indexing
        tile = cuda.shared.array(TILE_N, NT)
        ws = cuda.shared.array(WS_N, NT)
        tid = uint32(cuda.threadIdx.x)
        rem = uint32(cuda.blockIdx.x)
        co0 = uint32(uint32(cuda.blockIdx.y) * uPL)
        n = uint32(cuda.blockIdx.z)
        lp = u0 if ONE else uint32(tid // uTP)
        t = uint32(tid - uint32(lp * uTP))
        f = u0
        if PHASED:
            f = uint32(rem // uPHASE)
            rem = uint32(rem - uint32(f * uPHASE))
        oz = u0
        if DEEP:  # output depth oz: the block's outputs lie at out[n, co, oz]
            oz = uint32(rem // uTHW)
            rem = uint32(rem - uint32(oz * uTHW))
        bh = uint32(rem // uTILES_W)
        fh = uint32(f // uNPW)
        fw = uint32(f - uint32(fh * uNPW))
        t0h = int32(int32(uint32(bh * uTH)) + TLO_H[fh])
        t0w = int32(int32(uint32(uint32(rem - uint32(bh * uTILES_W)) * uTW)) + TLO_W[fw])
        org_h = int32(int32(t0h * IST_H) + ORG_H[fh])
        org_w = int32(int32(t0w * IST_W) + ORG_W[fw])
        ty = uint32(t // uTW)
        tx = uint32(t - uint32(ty * uTW))
        base = uint32(uint32(lp * uHALO) + uint32(uint32(ty * ROWSTEP) + uint32(tx * uISW)))
        wb = uint32(lp * uRS)
        acc = ZEROS
        j = u0
        while j < JN:
            dt = u0
            while dt < uDT:  # 3D: every depth tap dt whose input plane iz exists (the same for the block)
                iz = int32(0)
                if DEEP:
                    iz = int32(int32(int32(oz) * SD) - PD + int32(int32(dt) * DD))  # forward: x depth
                    if DGRAD:  # dy depth iz with oz + pd - dt*dd = iz*sd
                        iz = int32(int32(int32(oz) + PD) - int32(int32(dt) * DD))
                        iz = int32(iz // SD) if iz >= 0 and iz % SD == 0 else int32(-1)
                if not DEEP or (iz >= 0 and iz < IN_D):
                    e = tid
                    while e < uPLRS:
                        le = u0 if ONE else uint32(e // uRS)
                        c = uint32(co0 + le)
                        if c < uCO:
                            fk = uint32(uint32(c * uM) + j) if DGRAD else c
                            if DEEP:
                                fk = uint32(uint32(fk * uDT) + dt)
                            at = int64(uint32(uint32(fk * uRS) + uint32(e - uint32(le * uRS))))
                            ws[e] = read(wt[at]) if WIDEN else wt[at]  # float32 / float64: read as is
                        e = uint32(e + uT)
                    load(a, uint32(n * uCA), co0, j, org_h, org_w, tile, tid, uint32(iz))
                    cuda.syncthreads()
                    acc = compute(f, tile, ws, base, wb, acc)
                    cuda.syncthreads()
                dt = uint32(dt + u1)
            j = uint32(j + u1)
        co = uint32(co0 + lp)
        if co < uCO:
            b = zero
            if HAS_BIAS:
                b = read(bias[co]) if WIDEN else bias[co]
            plane = uint32(uint32(n * uCO) + co)
            if DEEP:
                plane = uint32(uint32(plane * uOUT_D) + oz)
            store(out, uint32(plane * uOUT_HW),
                  int32(int32(int32(t0h + int32(ty * uVH)) * OST_H) + O0_H[fh]),
                  int32(int32(int32(t0w + int32(tx)) * OST_W) + O0_W[fw]), acc, b, co, ep)

    return entry_kernel(body, epi is not None)


register_cache(conv_kernel.cache_clear)  # its fused kernels are built from the epilogue's code
register_cache(row_store.cache_clear)
