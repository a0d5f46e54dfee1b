"""Backward-weight kernel of the depthwise plugin: PL filters per block, each summing its chunk of (image,
tile) units with all R*S taps in registers per thread, then a fixed-order tree per filter; generated per
layer shape and config (geometry in ``_depthwise_common``).

Grid: x = split z, y = filter group (PL filters k0 .. k0+PL-1). Thread (l, ty, tx) works for filter
k = k0 + l; units u = (n, bh, bw) in [z*chunk, z*chunk + chunk), the same for every filter of the block:

    for u: tile[l] <- x[n, (k0 + l) // M] halo (l < PL); g[v] <- dy[n, k, t0h + ty*VH + v, t0w + tx]
           syncthreads
           acc[r, s] += tile[l][row(v, r)][col(tx, s)] * g[v]  for v, r, s;  syncthreads
    part[z, k, r, s] = tree sum of acc[r, s] over the TP threads of filter k (fixed pairing, up to
                       16 KiB of taps per tree: log2(TP) + 2 barriers per group of taps; k < K)
    (splits > 1: dw = sum over z of part[z], in order z = 0, 1, ...: convlab.kernels.data.splitk.sum_partials)

With small planes one unit is a whole image plane and PL filters share the block: few blocks, each with
a long serial chain, and usually no split (no workspace, no second launch).

fp16 / bf16: x and dy widen to float32 as they are read, the tiles, accumulators and tree are float32;
the partials are float32 (sum_partials rounds their sum into dw), an unsplit kernel rounds as it stores.
"""
from __future__ import annotations

import functools

import numpy as np
from numba import from_dtype, int32, uint32

from convlab import runtime
from convlab.runtime import cuda

from convlab.kernels.conv.depthwise_common import (axis, device, halo_loader, halving_tree, names, reads, reduce_group,
                                                   tile_products)
from convlab.kernels.data.convert import from_f32, half_kind, to_f32
from convlab.kernels.epilogue import compute_dtype
from convlab.kernels.source import Writer


@functools.cache
def wgrad_compute(ah, aw, vh: int, hw: int, s_: int, r_: int, first: int = 0, taps: int = 0):
    """``acc = compute(tile, base, g, acc)``: acc[first + r*S + s] += tile[base + literal] * g[v] (``acc``
    of ``taps`` entries, default R*S; 3D: T*R*S, the taps of depth tap dt from first = dt*R*S)."""
    accs, gs = names("a", taps or r_ * s_), names("g", vh)
    w = Writer("def compute(tile, base, g, acc):")
    w.indent()
    w(f"{accs}= acc")
    w(f"{gs}= g")
    tile_products(w, reads(ah, aw, 0, 0, vh, hw), lambda v, r, s: f"a{first + r * s_ + s} += x * g{v}")
    w(f"return ({accs})")
    return device(w, "compute", {})


@functools.cache
def depth_taps(taps: int, stride: int, pad: int, dil: int, in_d: int, load, computes: tuple):
    """``acc = step(x, nbase, k0, od, org_h, org_w, tile, tid, base, g, acc)``, 3D: for each depth tap
    dt < ``taps`` whose input depth iz = od*stride - pad + dt*dil lies in [0, in_d) (the same for the
    whole block): the halo of plane iz into tile, then acc's taps of depth dt += its products with g
    (``computes[dt]``)."""
    w = Writer("def step(x, nbase, k0, od, org_h, org_w, tile, tid, base, g, acc):")
    w.indent()
    w(f"z0 = i32(i32(od) * i32({stride}))")
    for dt in range(taps):
        w(f"iz = i32(z0 + i32({dt * dil - pad}))")
        with w.block(f"if iz >= i32(0) and iz < i32({in_d}):"):
            w("load(x, nbase, k0, u32(0), org_h, org_w, tile, tid, u32(iz))")
            w("cuda.syncthreads()")
            w(f"acc = compute{dt}(tile, base, g, acc)")
            w("cuda.syncthreads()")
    w("return acc")
    return device(w, "step", {"cuda": cuda, "i32": np.int32, "load": load,
                              **{f"compute{dt}": c for dt, c in enumerate(computes)}})


@functools.cache
def dy_loader(vh: int, out_h: int, out_w: int, kind: str | None = None):
    """``g = load(dy, at, p0, ok, zero)``: g[v] = dy[at + v*out_w] if ``ok`` (column and filter inside)
    and row p0 + v < out_h, else 0; ``kind`` "float16" / "bfloat16": dy holds that half type (bf16:
    uint16 bits), each value widened to float32."""
    value = "read(dy[{}])" if kind else "dy[{}]"
    w = Writer("def load(dy, at, p0, ok, zero):")
    w.indent()
    for v in range(vh):
        w(f"g{v} = zero")
        with w.block(f"if ok and u32(p0 + u32({v})) < u32({out_h}):"):
            w(f"g{v} = {value.format(f'i64(u32(at + u32({v * out_w})))')}")
    w(f"return ({names('g', vh)})")
    return device(w, "load", {"read": to_f32(kind)})


@functools.cache
def block_reduce(taps: int, tp: int, pl: int, group: int, out_kind: str | None = None):
    """``reduce(acc, red, tid, lane, ok, out, at)``: out[at + i] = sum of acc[i] over the TP threads
    of the caller's plane (threads tid - lane .. tid - lane + TP - 1, lane = tid % TP), written when
    ``ok``. ``group`` taps at a time go to red[g * T + tid], then one tree per plane for all of them
    (fixed pairing: deterministic; log2(TP) + 2 barriers per group); lane g of each plane writes tap g.
    ``out_kind`` "float16" / "bfloat16": out holds that half type (bf16: uint16 bits), each float32 sum
    rounded to nearest even as it is stored."""
    value = "write({})" if out_kind else "{}"
    t = tp * pl
    w = Writer("def reduce(acc, red, tid, lane, ok, out, at):")
    w.indent()
    w(f"{names('a', taps)}= acc")
    for i0 in range(0, taps, group):
        size = min(group, taps - i0)
        for g in range(size):
            w(f"red[u32({g * t}) + tid] = a{i0 + g}")
        w("cuda.syncthreads()")
        halving_tree(w, tp // 2, "lane", [(f"u32({g * t}) + tid", f"u32({g * t}) + tid + h") for g in range(size)])
        w("g = lane")
        with w.block(f"while ok and g < u32({size}):"):
            w(f"out[i64(u32(at + u32({i0}) + g))] = "
              f"{value.format(f'red[u32(u32(g * u32({t})) + tid) - lane]')}")
            w(f"g += u32({tp})")
        w("cuda.syncthreads()")
    return device(w, "reduce", {"cuda": cuda, "write": from_f32(out_kind)})


@functools.cache
def wgrad_kernel(dtype: str, tile: tuple[int, int, int, int], geometry: tuple[int, ...],
                 sizes: tuple[int, ...], depth: tuple[int, ...] = (), out_kind: str | None = None):
    """The backward-weight kernel ``kernel(x, dy, part)`` of one tile (TH, TW, VH, PL; TP = TW*TH/VH a
    power of two), filter geometry (R, S, sh, sw, ph, pw, dh, dw) and layer ``sizes`` (in_h, in_w, out_h,
    out_w, C, K, M, tiles_h, tiles_w, units, chunk); ``depth`` (3D: T, sd, pd, dd, in_d, out_d; 2D:
    empty) adds the depth taps: units (n, od, bh, bw), T*R*S accumulators. Grid: x = split, y = filter
    group of PL. x and dy hold ``dtype`` (bfloat16: uint16 bits; fp16 / bf16 compute in float32);
    ``part`` holds the compute type (the split partials, or dw of a float32 / float64 problem) or, with
    ``out_kind`` "float16" / "bfloat16", dw's half type (an unsplit half problem)."""
    th, tw, vh, pl = tile
    r_, s_, sh, sw, ph, pw, dh, dw = geometry
    in_h, in_w, out_h, out_w, c_n, k_n, mult, tiles_h, tiles_w, units, chunk = sizes
    ah, aw = axis(False, r_, sh, ph, dh), axis(False, s_, sw, pw, dw)
    HH, HW, TP, RS = ah.halo(th), aw.halo(tw), tw * (th // vh), r_ * s_
    T, HALO, NT, zero = TP * pl, HH * HW, from_dtype(compute_dtype(dtype)), compute_dtype(dtype).type(0)
    DEEP = bool(depth)
    DT, SD, PD, DD, IN_D, OUT_D = depth or (1, 1, 0, 1, 0, 1)
    TAPS = DT * RS
    load = halo_loader(dtype, HH, HW, T, pl, in_h, in_w, k_n, mult, 1, IN_D)
    compute = wgrad_compute(ah, aw, vh, HW, s_, r_)
    step = depth_taps(DT, SD, PD, DD, IN_D, load, tuple(wgrad_compute(ah, aw, vh, HW, s_, r_, dt * RS, TAPS)
                                                        for dt in range(DT))) if DEEP else None
    load_dy = dy_loader(vh, out_h, out_w, half_kind(dtype))
    GROUP = reduce_group(TAPS, T, compute_dtype(dtype).itemsize)
    reduce = block_reduce(TAPS, TP, pl, GROUP, out_kind)
    RED = GROUP * T
    u0, u1, uTAPS, uTH, uTW, uVH, uTP, uPL = (np.uint32(v) for v in (0, 1, TAPS, th, tw, vh, TP, pl))
    uC, uK, uOUT_W, uOUT_HW, uHALO = (np.uint32(v) for v in (c_n, k_n, out_w, out_h * out_w, HALO))
    uTILES_H, uTILES_W, uTHW = (np.uint32(v) for v in (tiles_h, tiles_w, tiles_h * tiles_w))
    uOUT_D, uUPI = np.uint32(OUT_D), np.uint32(tiles_h * tiles_w * OUT_D)  # UPI: units an image
    uUNITS, uCHUNK = np.uint32(units), np.uint32(chunk)
    SH, SW, PH, PW = (np.int32(v) for v in (sh, sw, ph, pw))
    ROWSTEP, uSW = np.uint32(vh * sh * HW), np.uint32(sw)
    ZEROS, ONE, TILE_N = (zero,) * TAPS, pl == 1, pl * HALO  # shared size: a literal

    @runtime.jit
    def kernel(x4, dy4, part):
        x, dy, part = x4.flat, dy4.flat, part.flat  # C-contiguous: flat indexing (part: dw or 1-D)
        tile = cuda.shared.array(TILE_N, NT)
        red = cuda.shared.array(RED, NT)
        tid = uint32(cuda.threadIdx.x)
        z = uint32(cuda.blockIdx.x)
        k0 = uint32(uint32(cuda.blockIdx.y) * uPL)
        lp = u0 if ONE else uint32(tid // uTP)
        t = uint32(tid - uint32(lp * uTP))
        k = uint32(k0 + lp)
        ty = uint32(t // uTW)
        tx = uint32(t - uint32(ty * uTW))
        base = uint32(uint32(lp * uHALO) + uint32(uint32(ty * ROWSTEP) + uint32(tx * uSW)))
        acc = ZEROS
        u = uint32(z * uCHUNK)
        stop = min(uint32(u + uCHUNK), uUNITS)
        n = uint32(u // uUPI)  # unit u = (n, (od,) bh, bw), advanced without division below
        rem = uint32(u - uint32(n * uUPI))
        od = u0
        if DEEP:
            od = uint32(rem // uTHW)
            rem = uint32(rem - uint32(od * uTHW))
        bh = uint32(rem // uTILES_W)
        bw = uint32(rem - uint32(bh * uTILES_W))
        while u < stop:
            t0h = uint32(bh * uTH)
            t0w = uint32(bw * uTW)
            org_h = int32(int32(t0h) * SH - PH)
            org_w = int32(int32(t0w) * SW - PW)
            if not DEEP:
                load(x, uint32(n * uC), k0, u0, org_h, org_w, tile, tid, u0)
            p0 = uint32(t0h + uint32(ty * uVH))
            q = uint32(t0w + tx)
            plane = uint32(uint32(n * uK) + k)
            if DEEP:
                plane = uint32(uint32(plane * uOUT_D) + od)
            at = uint32(uint32(plane * uOUT_HW) + uint32(uint32(p0 * uOUT_W) + q))
            g = load_dy(dy, at, p0, q < uOUT_W and k < uK, zero)
            if DEEP:
                acc = step(x, uint32(n * uC), k0, od, org_h, org_w, tile, tid, base, g, acc)
            else:
                cuda.syncthreads()
                acc = compute(tile, base, g, acc)
                cuda.syncthreads()
            u = uint32(u + u1)
            bw = uint32(bw + u1)
            if bw == uTILES_W:
                bw = u0
                bh = uint32(bh + u1)
                if bh == uTILES_H:
                    bh = u0
                    if DEEP:
                        od = uint32(od + u1)
                        if od == uOUT_D:
                            od = u0
                            n = uint32(n + u1)
                    else:
                        n = uint32(n + u1)
        reduce(acc, red, tid, t, k < uK, part, uint32(uint32(uint32(z * uK) + k) * uTAPS))

    return kernel
