"""Implicit-GEMM kernel whose A operand is gathered along M: forward and backward-data (any stride), over
2 or 3 spatial dimensions (a compile-time constant of the kernel; 3D adds the depth axis d, T, Do).

    forward  out = y  (N, K, P, Q):  M = N*P*Q (n, p, q),  N = K',  K = C'*R*S (c, r, s)   per group
             A[m, kk] = x[n, g*C' + c, p*sh - ph + r*dh, q*sw - pw + s*dw]   B[kk, k] = w[g*K' + k, kk]
             (3D: m = (n, o, p, q), kk = (c, t, r, s), x's depth o*sd - pd + t*dd)
    dgrad    out = dx (N, C, H, W), one GEMM per stride phase (gathers.py): M = N*H*W / phases,
             N = C', K = K' * taps (k, r, s); A[m, kk] = dy[n, g*K' + k, i + rd(r), j + sd(s)]

Both read A[m, kk] = a[base(m) + off(kk)] when 0 <= hb(m) + rd(kk) < LH and 0 <= wb(m) + sd(kk) < LW
(and 0 <= db(m) + td(kk) < LD in 3D; zero otherwise): base/db/hb/wb are computed once per thread,
off/rd/sd/td come from a small int32 table built on the host (gathers.py, the N-d index map) and cached
on the device (forward rd = r*dh, dgrad the flipped filter's taps).
B[kk, n] = b[boff(kk) + n * b_ncol], with boff(kk) = kk for forward (no table read). The scalar
parameters (the ParamTable PARAMS, GENERAL_PARAMS for the general kernel; read by name as tab[at.M])
head the same int32 array, so a launch passes six arrays and no scalars. Two variants per tile,
chosen per problem (``is_aligned``): the aligned kernel (one group, stride-1 dgrad, K % BK == 0; M and
N remainders are masked in both) and the general one (zero-filled last K slice, groups folded into
blockIdx.x, a phase's output pixel map).

Loop nest of one block (tile m0 + [0, BM) x n0 + [0, BN), split z: kk in [z*chunk, z*chunk + chunk)):

    for j in 0 .. slices:                       # software pipeline, one barrier per BK slice
        if j < slices: registers <- A, B slice j  (A coalesced along m, B along kk; 0 past k_hi)
        if j > 0:      for kk < BK: fa <- As[(j-1) & 1], fb <- Bs[(j-1) & 1] (128-bit); acc += fa x fb
        if j < slices: As[j & 1], Bs[j & 1] <- registers
        syncthreads
    out[m, n] = put(acc (+ bias[n]))   (NCHW addressing; with splits > 1 see common.store_tile; put: the
                                       fused epilogue's element store, or a plain one)
"""
from __future__ import annotations

from numba import float32, int32, int64, uint32

from convlab import runtime
from convlab.epilogue import Epilogue
from convlab.kernels.arch.intrinsics import SHARED_ALIGN, u32
from convlab.kernels.epilogue import fused_store, register_cache
from convlab.kernels.simt.tile import Tile
from convlab.runtime import cuda

from .common import (DepthMap, OutMap, capped, factory, layout, register_cap, slice_fma, store_tile,
                     tile_origin, validate, zero_fill)
from .gathers import DEPTH_PARAMS, GENERAL_PARAMS, PARAMS

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


@factory
def gather_kernel(bm: int, bn: int, bk: int, tm: int, tn: int, b_identity: bool, general: bool = False,
                  nd: int = 2, epi: Epilogue | None = None):
    """The kernel for one tile shape and ``nd`` = 2 or 3 spatial dimensions (all compile-time
    constants). ``general`` adds what the aligned kernel (groups 1, K % BK == 0, plain NCHW output)
    leaves out: a zero-filled last K slice, groups along blockIdx.x and the output pixel map of a
    strided-dgrad phase (GENERAL_PARAMS); 3D adds the depth axis (DEPTH_PARAMS, the table's td column).
    ``epi`` (an Epilogue): the kernel fused with it, ``kernel(a4, b4, tab, bias, out, ws, r, scale,
    shift)`` (convlab.kernels.epilogue.EpilogueOperands' arrays), the same body with the epilogue's
    element store (convlab.kernels.epilogue.fused_store) in store_tile."""
    if nd not in (2, 3):
        raise ValueError(f"the gather kernel takes 2 or 3 spatial dimensions, got {nd}")
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
    B_IDENT, GENERAL, THREE = b_identity, general, nd == 3
    u0, u1, u4, u8, c32 = u32(0), u32(1), u32(4), u32(8), u32(32)
    NONE = u32(0xFFFFFFFF)  # row/column outside the problem
    uBM, uBN, uBK, uMSPAN = u32(bm), u32(bn), u32(bk), u32(MSPAN)
    uLM, uLN, uWGM = u32(LM), u32(32 // LM), u32(NT_M // LM)
    uGM, uGN, uLDA, uLDB = u32(GM), u32(GN), u32(LDA), u32(LDB)
    uABUF, uBBUF, uTB8 = u32(bk * LDA), u32(bk * LDB), u32(T // 8)
    # the kk table follows the parameters (3D: DEPTH_PARAMS, whose head is GENERAL_PARAMS)
    uTB = u32(len(DEPTH_PARAMS if nd == 3 else GENERAL_PARAMS if general else PARAMS))
    at = DEPTH_PARAMS.at  # field positions (the aligned 2D kernel reads PARAMS' only)
    store = store_tile(tm, tn, bm, bn, SPAN_M, SPAN_N, T, True, general, nd == 3,
                       None if epi is None else fused_store("float32", epi))
    origin = tile_origin(bm, bn, general)

    @runtime.jit(device=True, forceinline=True)
    def body(a4, b4, tab, bias, out, ws, ep):
        a, b = a4.flat, b4.flat  # C-contiguous: plain pointer arithmetic
        M, N, Kg, OHW, OW = tab[at.M], tab[at.N], tab[at.Kg], tab[at.OHW], tab[at.OW]
        a_img, a_row, lim_h, lim_w = tab[at.a_img], tab[at.a_row], tab[at.lim_h], tab[at.lim_w]
        sh, sw, ph, pw, b_ncol = tab[at.sh], tab[at.sw], tab[at.ph], tab[at.pw], tab[at.b_ncol]
        out_img, chunk, n_tiles = tab[at.out_img], tab[at.chunk], tab[at.n_tiles]
        splits, has_bias = tab[at.splits], tab[at.has_bias]
        if THREE:
            plane, a_dep, lim_d, st_d, pad_d = tab[at.plane], tab[at.a_dep], tab[at.lim_d], tab[at.st_d], tab[at.pad_d]
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
        dbs = cuda.local.array(A_M, int32)  # 3D: the depth start of each row
        noff = cuda.local.array(B_PER, uint32)
        bkk = cuda.local.array(B_PER, uint32)
        bst = cuda.local.array(B_PER, uint32)
        flag = cuda.shared.array(1, int32)
        rows = cuda.local.array(tm, uint32)
        cols = cuda.local.array(tn, uint32)

        tid = uint32(cuda.threadIdx.x)
        bid = uint32(cuda.blockIdx.x)
        z = uint32(cuda.blockIdx.y)
        g, m0, n0 = origin(tab, at.tiles_per_group, n_tiles)
        uM, uN, ukg = uint32(M), uint32(N), uint32(Kg)
        uohw, uow = uint32(OHW), uint32(OW)
        ulh, ulw = uint32(lim_h), uint32(lim_w)

        # rows of A this thread loads: m = m0 + tid % MSPAN + j * MSPAN
        for j in range(A_M):
            m = m0 + tid % uMSPAN + uint32(j * MSPAN)
            if m < uM:
                img = m // uohw
                rem = m - img * uohw
                if THREE:  # the depth slice, then the (row, column) within it
                    od = rem // uint32(plane)
                    rem = rem - od * uint32(plane)
                    dbs[j] = int32(od) * st_d - pad_d
                oh = rem // uow
                hb = int32(oh) * sh - ph
                wb = int32(rem - oh * uow) * sw - pw
                base[j] = int32(img) * a_img + hb * a_row + wb
                if THREE:
                    base[j] += dbs[j] * a_dep
                if GENERAL:
                    base[j] += int32(g) * tab[at.a_grp]
                hbs[j] = hb
                wbs[j] = wb
            else:
                base[j] = 0
                hbs[j] = FAR
                wbs[j] = 0
                dbs[j] = 0
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
                noff[i] += g * uint32(tab[at.b_grp])
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
                    if THREE:
                        td = tab[uTB + u4 * ukg + kk]
                    if GENERAL:
                        if not live:
                            rd = FAR  # every bounds test fails: zeros
                    for jj in range(A_M):
                        v = float32(0)  # one unsigned compare per axis tests 0 <= h < LH
                        if uint32(hbs[jj] + rd) < ulh and uint32(wbs[jj] + sd) < ulw:
                            if THREE:
                                if uint32(dbs[jj] + td) < uint32(lim_d):
                                    v = a[int64(uint32(base[jj] + off))]
                            else:
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
        M, N, OHW, out_img = tab[at.M], tab[at.N], tab[at.OHW], tab[at.out_img]
        n_tiles, splits, has_bias = tab[at.n_tiles], tab[at.splits], tab[at.has_bias]
        uM, uN, uohw = uint32(M), uint32(N), uint32(OHW)
        g, m0, n0 = origin(tab, at.tiles_per_group, n_tiles)
        if GENERAL:  # group g's columns start at g * n_grp; omap places a phase's pixels (store_tile)
            cg = g * uint32(tab[at.n_grp])
            omap = OutMap(uint32(tab[at.o0]), uint32(tab[at.OW]), uint32(tab[at.sth]), uint32(tab[at.stw]),
                          uint32(tab[at.och]))
            if THREE:
                dmap = DepthMap(uint32(tab[at.plane]), uint32(tab[at.o_std]))
        for i in range(tm):
            m = m0 + fr_a + uint32((i // GM) * SPAN_M + i % GM)
            rows[i] = NONE
            if m < uM:
                img = m // uohw
                if GENERAL:
                    pq = m - img * uohw
                    if THREE:  # the depth slice of the pixel
                        dz = pq // dmap.plane
                        pq = pq - dz * dmap.plane
                    row = pq // omap.ow
                    rows[i] = img * uint32(out_img) + omap.o0 + row * omap.sth + (pq - row * omap.ow) * omap.stw
                    if THREE:
                        rows[i] += dz * dmap.std
                else:
                    rows[i] = img * uint32(out_img) + (m - img * uohw)
        for jj in range(tn):
            col = n0 + fr_b + uint32((jj // GN) * SPAN_N + jj % GN)
            cols[jj] = NONE
            fb[jj] = float32(0)
            if col < uN:
                if GENERAL:
                    cols[jj] = (cg + col) * omap.och
                    if has_bias:
                        fb[jj] = bias[cg + col]
                else:
                    cols[jj] = col * uohw
                    if has_bias:
                        fb[jj] = bias[col]
        if GENERAL:
            if THREE:
                store(acc, rows, cols, fb, out, ws, bias, uint32(splits), z, bid, fr_a * uBN + fr_b, m0, cg + n0,
                      uM, cg + uN, uohw, uint32(out_img), has_bias, flag, omap, dmap, ep)
            else:
                store(acc, rows, cols, fb, out, ws, bias, uint32(splits), z, bid, fr_a * uBN + fr_b, m0, cg + n0,
                      uM, cg + uN, uohw, uint32(out_img), has_bias, flag, omap, None, ep)
        else:
            store(acc, rows, cols, fb, out, ws, bias, uint32(splits), z, bid, fr_a * uBN + fr_b, m0, n0, uM,
                  uN, uohw, uint32(out_img), has_bias, flag, None, None, ep)

    if epi is None:
        @runtime.jit(max_registers=register_cap(T))
        def kernel(a4, b4, tab, bias, out, ws):
            body(a4, b4, tab, bias, out, ws, ws)
    else:
        @runtime.jit(max_registers=register_cap(T))
        def kernel(a4, b4, tab, bias, out, ws, r, scale, shift):
            body(a4, b4, tab, bias, out, ws, (r, scale, shift))
    return capped(kernel, T)


register_cache(gather_kernel.cache_clear)  # its fused kernels are built from the epilogue's code


