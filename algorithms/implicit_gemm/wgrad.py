"""Implicit-GEMM kernel for backward-weight, its long reduction split over blocks, over 2 or 3 spatial
dimensions (a compile-time constant of the kernel).

    out = dw (K, C', R, S), group g's rows g*K' + m as [M = K', N = C'*R*S] row-major;
    reduction kk = (n, p, q) over N*P*Q
    A[m, kk]   = dy[n, g*K' + m, p, q]  = dy[n*K*P*Q + (g*K' + m)*P*Q + p*Q + q]
    B[kk, col] = x[n, g*C' + c, p*sh - ph + r*dh, q*sw - pw + s*dw]        col = (c, r, s)
    (3D: dw (K, C', T, R, S), kk = (n, o, p, q), col = (c, t, r, s), x's depth o*sd - pd + t*dd)

Both operands are contiguous along q, so both loaders run along kk: thread t loads kk = k0 + t % 8 of rows
(A) and columns (B) t // 8 + i * T/8. A thread's kk therefore moves by exactly BK = 8 per slice, and its
(n, (o,) p, q) is advanced incrementally (no division in the loop); its columns' (c, (t,) r, s) offsets
are decoded once per block. Two variants per tile, chosen per problem (``is_aligned``): the aligned kernel (one
group, N*P*Q % 8 == 0; M and N remainders are clamped on load and masked on store in both) and the
general one (a thread whose kk is past the reduction loads zeros; groups folded into blockIdx.x).

Loop nest of one block (tile m0.., n0.., split z: kk in [z*chunk, min(z*chunk + chunk, N*P*Q))):

    for j in 0 .. slices:                       # software pipeline, one barrier per slice
        if j < slices: registers <- dy, x slice j; (n, p, q) += 8
        if j > 0:      for kk < 8: fa <- As[(j-1) & 1], fb <- Bs[(j-1) & 1] (128-bit); acc += fa x fb
        if j < slices: As[j & 1], Bs[j & 1] <- registers
        syncthreads
    dw[m, col] = acc               (with splits > 1: partials + an ordered sum, common.store_tile)
"""
from __future__ import annotations

from numba import float32, int32, int64, uint32

from convlab import runtime
from convlab.problem import Problem
from convlab.kernels.arch.intrinsics import SHARED_ALIGN, u32
from convlab.kernels.params import ParamTable
from convlab.kernels.simt.tile import Tile
from convlab.runtime import cuda

from .common import capped, factory, layout, register_cap, slice_fma, store_tile, tile_origin, validate, zero_fill

BK = 8  # the incremental (n, p, q) walk assumes one kk per thread per slice


def check_tile(tile: Tile) -> None:
    """The loaders' rules on top of the family's (common.validate; ValueError naming the rule)."""
    validate(tile)
    if tile.bk != BK:
        raise ValueError(f"wgrad tiles need bk={BK}, got {tile.bk}")
    rows = tile.threads // 8
    if tile.bm % rows or tile.bn % rows:
        raise ValueError(f"wgrad loaders: threads/8 = {rows} must divide bm={tile.bm} and bn={tile.bn}")


@factory
def wgrad_kernel(bm: int, bn: int, tm: int, tn: int, general: bool = False, nd: int = 2):
    """The kernel for one tile shape and ``nd`` = 2 or 3 spatial dimensions (all compile-time
    constants). ``general`` adds what the aligned kernel (groups 1, N*P*Q % 8 == 0) leaves out: a
    zero-filled last slice and groups along blockIdx.x (GENERAL_PARAMS' fields after PARAMS'); 3D the
    depth axis (DEPTH_PARAMS' fields after those)."""
    if nd not in (2, 3):
        raise ValueError(f"the wgrad kernel takes 2 or 3 spatial dimensions, got {nd}")
    tile = Tile(bm, bn, BK, tm, tn)
    check_tile(tile)
    T = tile.threads
    ROWS = T // 8
    A_PER, B_PER = bm // ROWS, bn // ROWS
    GM, GN, NT_M = tile.gm, tile.gn, tile.nt_m
    LDA, LDB, SPAN_M, SPAN_N, A_SIZE, B_SIZE, LM = layout(tile, (4, 2, 8, 1, 16, 32))
    ALIGN = SHARED_ALIGN
    step = slice_fma(BK, tm, tn, LDA, LDB, SPAN_M, SPAN_N)
    ACC = tm * tn
    zero = zero_fill(ACC)
    u0, u1, u8, c32 = u32(0), u32(1), u32(8), u32(32)
    uBM, uBN, uROWS = u32(bm), u32(bn), u32(ROWS)
    uLM, uLN, uWGM = u32(LM), u32(32 // LM), u32(NT_M // LM)
    uGM, uGN, uLDA, uLDB = u32(GM), u32(GN), u32(LDA), u32(LDB)
    uABUF, uBBUF = u32(BK * LDA), u32(BK * LDB)
    NONE = u32(0xFFFFFFFF)  # row/column outside the problem
    store = store_tile(tm, tn, bm, bn, SPAN_M, SPAN_N, T, False)
    origin = tile_origin(bm, bn, general)
    GENERAL, THREE = general, nd == 3
    at = DEPTH_PARAMS.at  # field positions (the aligned 2D kernel reads PARAMS' only)

    @runtime.jit(max_registers=register_cap(T))
    def kernel(x4, dy4, prm, out, ws):
        x, dy = x4.flat, dy4.flat  # C-contiguous: plain pointer arithmetic
        M, N, k_len, P, Q = prm[at.M], prm[at.N], prm[at.k_len], prm[at.P], prm[at.Q]
        KPQ, CHW, H, W, RS, S = prm[at.KPQ], prm[at.CHW], prm[at.H], prm[at.W], prm[at.RS], prm[at.S]
        sh, sw, ph, pw, dh, dw = prm[at.sh], prm[at.sw], prm[at.ph], prm[at.pw], prm[at.dh], prm[at.dw]
        chunk, n_tiles, splits = prm[at.chunk], prm[at.n_tiles], prm[at.splits]
        if THREE:
            O, D, R_S = prm[at.O], prm[at.D], prm[at.R_S]
            st_d, pad_d, dil_d = prm[at.st_d], prm[at.pad_d], prm[at.dil_d]
        As = cuda.shared.array(A_SIZE, float32, alignment=ALIGN)
        Bs = cuda.shared.array(B_SIZE, float32, alignment=ALIGN)
        ra = cuda.local.array(A_PER, float32)
        rb = cuda.local.array(B_PER, float32)
        acc = cuda.local.array(ACC, float32)
        fa = cuda.local.array(tm, float32)
        fb = cuda.local.array(tn, float32)
        aoff = cuda.local.array(A_PER, uint32)
        coff = cuda.local.array(B_PER, int32)
        crd = cuda.local.array(B_PER, int32)
        csd = cuda.local.array(B_PER, int32)
        ctd = cuda.local.array(B_PER, int32)  # 3D: the columns' depth taps
        rows = cuda.local.array(tm, uint32)
        cols = cuda.local.array(tn, uint32)
        flag = cuda.shared.array(1, int32)

        tid = uint32(cuda.threadIdx.x)
        bid = uint32(cuda.blockIdx.x)
        z = uint32(cuda.blockIdx.y)
        g, m0, n0 = origin(prm, at.tiles_per_group, n_tiles)
        uM, uN, uP, uQ = uint32(M), uint32(N), uint32(P), uint32(Q)
        uPQ = uP * uQ
        if THREE:  # an image's output pixels, Do*P*Q
            uPQ = uint32(O) * uPQ
        uH, uW = uint32(H), uint32(W)
        urs, us = uint32(RS), uint32(S)
        kl = tid % u8
        row0 = tid // u8
        for i in range(A_PER):
            m = min(m0 + row0 + uint32(i) * uROWS, uM - u1)  # rows past M: loaded, never stored
            aoff[i] = m * uPQ
            if GENERAL:
                aoff[i] += g * uint32(prm[at.a_grp])
        for i in range(B_PER):
            col = min(n0 + row0 + uint32(i) * uROWS, uN - u1)
            c = col // urs
            rs = col - c * urs
            if THREE:  # col = (c, t, r, s): urs is T*R*S, the depth tap first
                t = rs // uint32(R_S)
                rs = rs - t * uint32(R_S)
                ctd[i] = int32(t) * dil_d
            r = rs // us
            crd[i] = int32(r) * dh
            csd[i] = int32(rs - r * us) * dw
            if THREE:
                coff[i] = (int32(c) * D + ctd[i]) * H * W + crd[i] * W + csd[i]
            else:
                coff[i] = int32(c) * H * W + crd[i] * W + csd[i]
            if GENERAL:
                coff[i] += int32(g) * prm[at.b_grp]
        lane = tid % c32
        warp = tid // c32
        fr_a = ((warp % uWGM) * uLM + lane % uLM) * uGM
        fr_b = ((warp // uWGM) * uLN + lane // uLM) * uGN
        zero(acc)

        k_lo = z * uint32(chunk)
        k_hi = min(k_lo + uint32(chunk), uint32(k_len))
        if GENERAL:  # the last slice is zero-filled past k_hi
            slices = (k_hi - k_lo + u8 - u1) // u8
        else:
            slices = (k_hi - k_lo) // u8
        kk = k_lo + kl
        img = kk // uPQ
        pq = kk - img * uPQ
        if THREE:  # uPQ is Do*P*Q: the output depth first
            o = pq // (uP * uQ)
            pq = pq - o * (uP * uQ)
        p = pq // uQ
        q = pq - p * uQ
        j = u0
        while j <= slices:
            if GENERAL and kk >= k_hi:  # this thread's kk is past the reduction: zeros
                for i in range(A_PER):
                    ra[i] = float32(0)
                for i in range(B_PER):
                    rb[i] = float32(0)
            elif j < slices:
                a_at = img * uint32(KPQ) + p * uQ + q
                if THREE:
                    a_at += o * (uP * uQ)
                for i in range(A_PER):
                    ra[i] = dy[int64(a_at + aoff[i])]
                hb = int32(p) * sh - ph
                wb = int32(q) * sw - pw
                xb = int32(img) * CHW + hb * W + wb
                if THREE:
                    db = int32(o) * st_d - pad_d
                    xb += db * H * W
                for i in range(B_PER):
                    v = float32(0)  # one unsigned compare per axis tests 0 <= h < H
                    if uint32(hb + crd[i]) < uH and uint32(wb + csd[i]) < uW:
                        if THREE:
                            if uint32(db + ctd[i]) < uint32(D):
                                v = x[int64(uint32(xb + coff[i]))]
                        else:
                            v = x[int64(uint32(xb + coff[i]))]
                    rb[i] = v
                q += u8
                while q >= uQ:
                    q -= uQ
                    p += u1
                    if p == uP:
                        p = u0
                        if THREE:  # carry into the output depth, then the image
                            o += u1
                            if o == uint32(O):
                                o = u0
                                img += u1
                        else:
                            img += u1
                if GENERAL:
                    kk += u8
            if j > u0:
                oa = ((j - u1) & u1) * uABUF + fr_a
                ob = ((j - u1) & u1) * uBBUF + fr_b
                step(As, Bs, oa, ob, acc, fa, fb)
            if j < slices:
                sa = (j & u1) * uABUF + kl * uLDA + row0
                for i in range(A_PER):
                    As[sa + uint32(i * ROWS)] = ra[i]
                sb = (j & u1) * uBBUF + kl * uLDB + row0
                for i in range(B_PER):
                    Bs[sb + uint32(i * ROWS)] = rb[i]
            cuda.syncthreads()
            j += u1

        # epilogue: parameters re-read after the last barrier (not kept live through the loop)
        M, N, n_tiles, splits = prm[at.M], prm[at.N], prm[at.n_tiles], prm[at.splits]
        uM, uN = uint32(M), uint32(N)
        g, m0, n0 = origin(prm, at.tiles_per_group, n_tiles)
        if GENERAL:  # group g writes dw rows g*m_grp ..
            mg = g * uint32(prm[at.m_grp])
        for i in range(tm):
            m = m0 + fr_a + uint32((i // GM) * SPAN_M + i % GM)
            if GENERAL:
                rows[i] = (mg + m) * uN if m < uM else NONE
            else:
                rows[i] = m * uN if m < uM else NONE
        for jj in range(tn):
            col = n0 + fr_b + uint32((jj // GN) * SPAN_N + jj % GN)
            cols[jj] = col if col < uN else NONE
            fb[jj] = float32(0)
        if GENERAL:
            store(acc, rows, cols, fb, out, ws, ws, uint32(splits), z, bid, fr_a * uBN + fr_b, mg + m0, n0,
                  mg + uM, uN, u1, u1, False, flag)
        else:
            store(acc, rows, cols, fb, out, ws, ws, uint32(splits), z, bid, fr_a * uBN + fr_b, m0, n0, uM,
                  uN, u1, u1, False, flag)

    return capped(kernel, T)


def is_aligned(problem: Problem) -> bool:
    """Whether the aligned kernel runs ``problem``: one group, N*P*Q a multiple of 8 (M and N
    remainders it handles itself)."""
    return problem.groups == 1 and problem.gemm_shape()[2] % BK == 0


#: the scalar parameters of both kernels: GEMM sizes (k_len = N*P*Q, the reduction), dy's P, Q and
#: image stride K*P*Q, x's image stride C*H*W and H, W, the filter's R*S and S, stride, padding,
#: dilation, and the split-K plan
PARAMS = ParamTable("M", "N", "k_len", "P", "Q", "KPQ", "CHW", "H", "W", "RS", "S", "sh", "sw", "ph", "pw",
                    "dh", "dw", "chunk", "n_tiles", "splits")
#: the general kernel's: PARAMS, then the tiles of one group and group g's offsets into dy (a_grp),
#: x (b_grp) and dw's rows (m_grp)
GENERAL_PARAMS = PARAMS + ParamTable("tiles_per_group", "a_grp", "b_grp", "m_grp")
#: both 3D kernels': GENERAL_PARAMS, then the depth axis (dy's Do, x's D, the taps of one filter slice
#: R*S, depth stride, padding, dilation); there PARAMS' KPQ, CHW and RS count whole volumes (K*Do*P*Q,
#: C*D*H*W, T*R*S)
DEPTH_PARAMS = GENERAL_PARAMS + ParamTable("O", "D", "R_S", "st_d", "pad_d", "dil_d")

