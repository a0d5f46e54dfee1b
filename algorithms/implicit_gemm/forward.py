"""Implicit-GEMM kernel whose A operand is gathered along M: forward and backward-data (any stride).

    forward  out = y  (N, K, P, Q):  M = N*P*Q (n, p, q),  N = K',  K = C'*R*S (c, r, s)   per group
             A[m, kk] = x[n, g*C' + c, p*sh - ph + r*dh, q*sw - pw + s*dw]   B[kk, k] = w[g*K' + k, kk]
    dgrad    out = dx (N, C, H, W), one GEMM per stride phase (gathers.py): M = N*H*W / phases,
             N = C', K = K' * taps (k, r, s); A[m, kk] = dy[n, g*K' + k, i + rd(r), j + sd(s)]

Both read A[m, kk] = a[base(m) + off(kk)] when 0 <= hb(m) + rd(kk) < LH and 0 <= wb(m) + sd(kk) < LW
(zero otherwise): base/hb/wb are computed once per thread, off/rd/sd come from a small int32 table built
on the host (gathers.py) and cached on the device (forward rd = r*dh, dgrad the flipped filter's taps).
B[kk, n] = b[boff(kk) + n * b_ncol], with boff(kk) = kk for forward (no table read). The scalar
parameters (PARAMS, then EXTRA for the general kernel) head the same int32 array, so a launch passes six
arrays and no scalars. Two variants per tile, chosen per problem (``is_aligned``): the aligned kernel
(one group, stride-1 dgrad, K % BK == 0; M and N remainders are masked in both) and the general one
(zero-filled last K slice, groups folded into blockIdx.x, a phase's output pixel map).

Loop nest of one block (tile m0 + [0, BM) x n0 + [0, BN), split z: kk in [z*chunk, z*chunk + chunk)):

    for j in 0 .. slices:                       # software pipeline, one barrier per BK slice
        if j < slices: registers <- A, B slice j  (A coalesced along m, B along kk; 0 past k_hi)
        if j > 0:      for kk < BK: fa <- As[(j-1) & 1], fb <- Bs[(j-1) & 1] (128-bit); acc += fa x fb
        if j < slices: As[j & 1], Bs[j & 1] <- registers
        syncthreads
    out[m, n] = acc (+ bias[n])      (NCHW addressing; with splits > 1 see common.store_tile)
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from numba import float32, int32, int64, uint32

from convlab import runtime
from convlab.runtime import context
from convlab.problem import Problem
from convlab.kernels.arch.intrinsics import SHARED_ALIGN, u32
from convlab.kernels.simt.tile import Tile
from convlab.runtime import cuda

from .common import (capped, dummy, layout, lend_workspace, plan, register_cap, slice_fma, store_tile,
                     tile_origin, validate, workspace_shape, zero_fill)
from .gathers import gathers, is_aligned

FAR = -(1 << 30)  # hb of rows past M: every bounds test fails


def check_tile(tile: Tile) -> None:
    """The loaders' rules on top of the family's (common.validate; ValueError naming the rule)."""
    validate(tile)
    t = tile.threads
    if not ((t % tile.bm == 0 and tile.bk % (t // tile.bm) == 0) or tile.bm % t == 0):
        raise ValueError(f"A loader: {t} threads must divide bm={tile.bm}, or be a multiple of it "
                         f"whose quotient divides bk={tile.bk}")
    if (tile.bn * tile.bk) % t:
        raise ValueError(f"B loader: bn*bk={tile.bn * tile.bk} must be a multiple of {t} threads")


@functools.cache
def gather_kernel(bm: int, bn: int, bk: int, tm: int, tn: int, b_identity: bool, general: bool = False):
    """The kernel for one tile shape (all sizes compile-time constants). ``general`` adds what the
    aligned kernel (groups 1, K % BK == 0, plain NCHW output) leaves out: a zero-filled last K slice,
    groups along blockIdx.x and the output pixel map of a strided-dgrad phase (EXTRA parameters)."""
    tile = Tile(bm, bn, bk, tm, tn)
    check_tile(tile)
    T = tile.threads
    MSPAN = min(T, bm)
    A_M, KSTEP = bm // MSPAN, T // MSPAN
    A_K = bk // KSTEP
    B_PER = bn * bk // T
    RA = A_K * A_M
    GM, GN, NT_M = tile.gm, tile.gn, tile.nt_m
    LDA, LDB, SPAN_M, SPAN_N, A_SIZE, B_SIZE, LM = layout(tile, (8, 16, 4, 32, 2, 1))
    ALIGN = SHARED_ALIGN
    step = slice_fma(bk, tm, tn, LDA, LDB, SPAN_M, SPAN_N)
    ACC = tm * tn
    zero = zero_fill(ACC)
    B_IDENT, GENERAL = b_identity, general
    u0, u1, u8, c32 = u32(0), u32(1), u32(8), u32(32)
    NONE = u32(0xFFFFFFFF)  # row/column outside the problem
    uBM, uBN, uBK, uMSPAN = u32(bm), u32(bn), u32(bk), u32(MSPAN)
    uLM, uLN, uWGM = u32(LM), u32(32 // LM), u32(NT_M // LM)
    uGM, uGN, uLDA, uLDB = u32(GM), u32(GN), u32(LDA), u32(LDB)
    uABUF, uBBUF, uTB8 = u32(bk * LDA), u32(bk * LDB), u32(T // 8)
    uTB = u32(len(PARAMS) + (len(EXTRA) if general else 0))  # the kk table follows the parameters
    TPG, AGRP, BGRP, NGRP = (len(PARAMS) + i for i in range(4))  # EXTRA's indices
    store = store_tile(tm, tn, bm, bn, SPAN_M, SPAN_N, T, True, general)
    origin = tile_origin(bm, bn, general)

    @runtime.jit(max_registers=register_cap(T))
    def kernel(a4, b4, tab, bias, out, ws):
        a, b = a4.flat, b4.flat  # C-contiguous: plain pointer arithmetic
        M, N, Kg, OHW, OW, a_img, a_row = tab[0], tab[1], tab[2], tab[3], tab[4], tab[5], tab[6]
        lim_h, lim_w, sh, sw, ph, pw, b_ncol = tab[7], tab[8], tab[9], tab[10], tab[11], tab[12], tab[13]
        out_img, chunk, n_tiles, splits, has_bias = tab[14], tab[15], tab[16], tab[17], tab[18]
        As = cuda.shared.array(A_SIZE, float32, alignment=ALIGN)
        Bs = cuda.shared.array(B_SIZE, float32, alignment=ALIGN)
        ra = cuda.local.array(RA, float32)
        rb = cuda.local.array(B_PER, float32)
        acc = cuda.local.array(ACC, float32)
        fa = cuda.local.array(tm, float32)
        fb = cuda.local.array(tn, float32)
        base = cuda.local.array(A_M, int32)
        hbs = cuda.local.array(A_M, int32)
        wbs = cuda.local.array(A_M, int32)
        noff = cuda.local.array(B_PER, uint32)
        bkk = cuda.local.array(B_PER, uint32)
        bst = cuda.local.array(B_PER, uint32)
        flag = cuda.shared.array(1, int32)
        rows = cuda.local.array(tm, uint32)
        cols = cuda.local.array(tn, uint32)

        tid = uint32(cuda.threadIdx.x)
        bid = uint32(cuda.blockIdx.x)
        z = uint32(cuda.blockIdx.y)
        g, m0, n0 = origin(tab, TPG, n_tiles)
        uM, uN, ukg = uint32(M), uint32(N), uint32(Kg)
        uohw, uow = uint32(OHW), uint32(OW)
        ulh, ulw = uint32(lim_h), uint32(lim_w)

        # rows of A this thread loads: m = m0 + tid % MSPAN + j * MSPAN
        for j in range(A_M):
            m = m0 + tid % uMSPAN + uint32(j * MSPAN)
            if m < uM:
                img = m // uohw
                rem = m - img * uohw
                oh = rem // uow
                hb = int32(oh) * sh - ph
                wb = int32(rem - oh * uow) * sw - pw
                base[j] = int32(img) * a_img + hb * a_row + wb
                if GENERAL:
                    base[j] += int32(g) * tab[AGRP]
                hbs[j] = hb
                wbs[j] = wb
            else:
                base[j] = 0
                hbs[j] = FAR
                wbs[j] = 0
        akk0 = tid // uMSPAN
        a_st = akk0 * uLDA + tid % uMSPAN
        # B elements: kk = k0 + (rest // BN) * 8 + tid % 8, n = n0 + rest % BN, rest = tid // 8 + i*T/8
        for i in range(B_PER):
            rest = tid // u8 + uint32(i) * uTB8
            nl = rest % uBN
            col = n0 + nl
            if col >= uN:
                col = uN - u1
            noff[i] = col * uint32(b_ncol)
            if GENERAL:
                noff[i] += g * uint32(tab[BGRP])
            bkk[i] = (rest // uBN) * u8 + tid % u8
            bst[i] = bkk[i] * uLDB + nl
        lane = tid % c32
        warp = tid // c32
        fr_a = ((warp % uWGM) * uLM + lane % uLM) * uGM
        fr_b = ((warp // uWGM) * uLN + lane // uLM) * uGN
        zero(acc)

        k_lo = z * uint32(chunk)
        k_hi = min(k_lo + uint32(chunk), ukg)
        if GENERAL:  # the last slice is zero-filled past k_hi
            slices = (k_hi - k_lo + uBK - u1) // uBK
        else:
            slices = (k_hi - k_lo) // uBK
        j = u0
        while j <= slices:
            if j < slices:
                k0 = k_lo + j * uBK
                for q in range(A_K):
                    kk = k0 + akk0 + uint32(q * KSTEP)
                    if GENERAL:
                        live = kk < k_hi
                        kk = min(kk, ukg - u1)
                    off = tab[uTB + kk]
                    rd = tab[uTB + ukg + kk]
                    sd = tab[uTB + ukg + ukg + kk]
                    if GENERAL:
                        if not live:
                            rd = FAR  # every bounds test fails: zeros
                    for jj in range(A_M):
                        v = float32(0)  # one unsigned compare per axis tests 0 <= h < LH
                        if uint32(hbs[jj] + rd) < ulh and uint32(wbs[jj] + sd) < ulw:
                            v = a[int64(uint32(base[jj] + off))]
                        ra[q * A_M + jj] = v
                for i in range(B_PER):
                    kk = k0 + bkk[i]
                    if GENERAL:
                        live = kk < k_hi
                        kk = min(kk, ukg - u1)
                    if B_IDENT:
                        bo = kk
                    else:
                        bo = uint32(tab[uTB + ukg + ukg + ukg + kk])
                    rb[i] = b[int64(bo + noff[i])]
                    if GENERAL:
                        if not live:
                            rb[i] = float32(0)
            if j > u0:
                oa = ((j - u1) & u1) * uABUF + fr_a
                ob = ((j - u1) & u1) * uBBUF + fr_b
                step(As, Bs, oa, ob, acc, fa, fb)
            if j < slices:
                sa = (j & u1) * uABUF + a_st
                for q in range(A_K):
                    for jj in range(A_M):
                        As[sa + uint32(q * KSTEP * LDA + jj * MSPAN)] = ra[q * A_M + jj]
                sb = (j & u1) * uBBUF
                for i in range(B_PER):
                    Bs[sb + bst[i]] = rb[i]
            cuda.syncthreads()
            j += u1

        # epilogue: parameters re-read after the last barrier (not kept live through the loop), then row
        # bases and column offsets, so that the store loops are small enough to unroll
        M, N, OHW, out_img, n_tiles, splits, has_bias = tab[0], tab[1], tab[3], tab[14], tab[16], \
            tab[17], tab[18]
        uM, uN, uohw = uint32(M), uint32(N), uint32(OHW)
        g, m0, n0 = origin(tab, TPG, n_tiles)
        if GENERAL:  # group g's columns start at g * n_grp; omap places a phase's pixels (store_tile)
            cg = g * uint32(tab[NGRP])
            omap = (uint32(tab[NGRP + 1]), uint32(tab[4]), uint32(tab[NGRP + 2]), uint32(tab[NGRP + 3]),
                    uint32(tab[NGRP + 4]))
        for i in range(tm):
            m = m0 + fr_a + uint32((i // GM) * SPAN_M + i % GM)
            rows[i] = NONE
            if m < uM:
                img = m // uohw
                if GENERAL:
                    pq = m - img * uohw
                    row = pq // omap[1]
                    rows[i] = img * uint32(out_img) + omap[0] + row * omap[2] + (pq - row * omap[1]) * omap[3]
                else:
                    rows[i] = img * uint32(out_img) + (m - img * uohw)
        for jj in range(tn):
            col = n0 + fr_b + uint32((jj // GN) * SPAN_N + jj % GN)
            cols[jj] = NONE
            fb[jj] = float32(0)
            if col < uN:
                if GENERAL:
                    cols[jj] = (cg + col) * omap[4]
                    if has_bias:
                        fb[jj] = bias[cg + col]
                else:
                    cols[jj] = col * uohw
                    if has_bias:
                        fb[jj] = bias[col]
        if GENERAL:
            store(acc, rows, cols, fb, out, ws, bias, uint32(splits), z, bid, fr_a * uBN + fr_b, m0, cg + n0,
                  uM, cg + uN, uohw, uint32(out_img), has_bias, flag, omap)
        else:
            store(acc, rows, cols, fb, out, ws, bias, uint32(splits), z, bid, fr_a * uBN + fr_b, m0, n0, uM,
                  uN, uohw, uint32(out_img), has_bias, flag)

    return capped(kernel, T)


PARAMS = ("M", "N", "Kg", "OHW", "OW", "a_img", "a_row", "lim_h", "lim_w", "sh", "sw", "ph", "pw",
          "b_ncol", "out_img", "chunk", "n_tiles", "splits", "has_bias")
EXTRA = ("tiles_per_group", "a_grp", "b_grp", "n_grp", "o0", "sth", "stw", "och")  # general kernel only


def _params(problem: Problem, index: int, tile: Tile, splits: int, chunk: int, n_tiles: int,
            general: bool):
    """Device int32 array: the PARAMS values (the general kernel: and EXTRA's), then the kk table of
    GEMM ``index`` of ``gathers(problem)``."""
    ga = gathers(problem)[index]
    values = (ga.m, ga.n, ga.k) + ga.geo + (ga.out_img, chunk, n_tiles, splits, int(problem.bias))
    if general:
        values += (math.ceil(ga.m / tile.bm) * n_tiles,) + ga.extra
    return runtime.to_device(np.concatenate([np.array(values, np.int64), ga.table]).astype(np.int32))


def _prepared(problem: Problem, tile: Tile, workspace_limit: int, target: Any):
    """[(kernel, grid, params, workspace or None)] of one (problem, tile, limit, target), one per GEMM
    (dgrad: per stride phase), kept in the device's context (the parameter tables live on the device:
    one upload per shape, one lookup per call; convlab.reset drops them).

    The grid is configured at each launch, not cached: the simulator's ``kernel[grid, block]`` sets the
    grid on the one kernel object of this tile and returns it, so a cached configured kernel would launch
    with the grid of whichever problem configured that tile last."""
    return context.current().cached("implicit_gemm.forward", (problem, tile, workspace_limit, target),
                                    lambda: _prepare(problem, tile, workspace_limit, target), limit=256)


def _prepare(problem: Problem, tile: Tile, workspace_limit: int, target: Any) -> list:
    general = not is_aligned(problem, tile)
    kern = gather_kernel(tile.bm, tile.bn, tile.bk, tile.tm, tile.tn, problem.op == "forward", general)
    launches = []
    for index, ga in enumerate(gathers(problem)):
        splits, chunk, n_tiles = plan(problem, tile, workspace_limit, (ga.m, ga.n, ga.k), target)
        grid = (math.ceil(ga.m / tile.bm) * n_tiles * problem.groups, splits)
        params = _params(problem, index, tile, splits, chunk, n_tiles, general)
        launches.append((kern, grid, params, workspace_shape(problem, tile, splits, n_tiles, ga.m)))
    return launches


def launch(problem: Problem, tile: Tile, a, b, bias, out, workspace_limit: int) -> None:
    """Run forward or dgrad of ``problem``: a = x or dy, b = w, out = y or dx (device, C-contiguous;
    flattened inside the kernel, so no host-side views are built per call); one launch per GEMM."""
    bias = dummy() if bias is None else bias
    for kern, grid, params, ws in _prepared(problem, tile, workspace_limit, runtime.target()):
        if grid[0] == 0:  # no rows (batch 0)
            continue
        with lend_workspace(ws) as buf:
            kern[grid, tile.threads](a, b, params, bias, out, buf)
