def conv(X, Bt, Y, bias, M, N, K, Cin, H, W, S, Q, PQ, HWC, sh, sw, ph, pw, phn, pwn, dh, dw, vec):
    As = cuda.shared.array(0, stype, alignment=align)
    Bs = As
    Cs = cuda.shared.array(0, c_float16, alignment=align)
    tid = U(cuda.threadIdx.x)
    lane = U(tid % 32)
    warp = U(tid // 32)
    wg = U(warp // 4)  # this warpgroup, its tile, and this warp's first row in it (the epilogue's)
    wgm0 = U(U(wg // 1) * 64)
    wn0 = U(U(wg % 1) * 64)
    wm0 = U(wgm0 + U(U(warp % 4) * 16))
    nblk = U(U(N + 63) // 64)
    bid = U(cuda.blockIdx.x)
    m0 = U(U(bid // nblk) * 128)
    n0 = U(U(bid % nblk) * 64)
    ktiles = U(U(K + 63) // 64)
    cc = U(tid % 8)  # this thread's chunk of a row (global), and its copies' rows:
    ck = U(cc * 8)
    ar0 = U(U(tid // 8) + 0)
    as0 = U(U(U(ar0 * 64) + U(U(cc ^ U(U(ar0 // 1) % 8)) * 8)) + 0)
    aok0 = U(m0 + ar0) < M
    mm = U(m0 + ar0) if aok0 else U(0)
    pq = U(mm % PQ)
    ah0 = U(U(U(U(pq // Q) * sh) + phn) - ph)
    aw0 = U(U(U(U(pq % Q) * sw) + pwn) - pw)
    ab0 = U(U(U(mm // PQ) * HWC) + U(U(U(ah0 * W) + aw0) * Cin))
    ar1 = U(U(tid // 8) + 32)
    as1 = U(U(U(ar1 * 64) + U(U(cc ^ U(U(ar1 // 1) % 8)) * 8)) + 0)
    aok1 = U(m0 + ar1) < M
    mm = U(m0 + ar1) if aok1 else U(0)
    pq = U(mm % PQ)
    ah1 = U(U(U(U(pq // Q) * sh) + phn) - ph)
    aw1 = U(U(U(U(pq % Q) * sw) + pwn) - pw)
    ab1 = U(U(U(mm // PQ) * HWC) + U(U(U(ah1 * W) + aw1) * Cin))
    ar2 = U(U(tid // 8) + 64)
    as2 = U(U(U(ar2 * 64) + U(U(cc ^ U(U(ar2 // 1) % 8)) * 8)) + 0)
    aok2 = U(m0 + ar2) < M
    mm = U(m0 + ar2) if aok2 else U(0)
    pq = U(mm % PQ)
    ah2 = U(U(U(U(pq // Q) * sh) + phn) - ph)
    aw2 = U(U(U(U(pq % Q) * sw) + pwn) - pw)
    ab2 = U(U(U(mm // PQ) * HWC) + U(U(U(ah2 * W) + aw2) * Cin))
    ar3 = U(U(tid // 8) + 96)
    as3 = U(U(U(ar3 * 64) + U(U(cc ^ U(U(ar3 // 1) % 8)) * 8)) + 0)
    aok3 = U(m0 + ar3) < M
    mm = U(m0 + ar3) if aok3 else U(0)
    pq = U(mm % PQ)
    ah3 = U(U(U(U(pq // Q) * sh) + phn) - ph)
    aw3 = U(U(U(U(pq % Q) * sw) + pwn) - pw)
    ab3 = U(U(U(mm // PQ) * HWC) + U(U(U(ah3 * W) + aw3) * Cin))
    br0 = U(U(tid // 8) + 0)
    bs0 = U(U(U(br0 * 64) + U(U(cc ^ U(U(br0 // 1) % 8)) * 8)) + 40960)
    bok0 = U(n0 + br0) < N
    bg0 = U(U(n0 + br0) * K) if bok0 else U(0)
    br1 = U(U(tid // 8) + 32)
    bs1 = U(U(U(br1 * 64) + U(U(cc ^ U(U(br1 // 1) % 8)) * 8)) + 40960)
    bok1 = U(n0 + br1) < N
    bg1 = U(U(n0 + br1) * K) if bok1 else U(0)
    sa = shared_addr(As, 0)
    da0 = U64(U64(U(U(U(sa + U(wgm0 * 128)) >> 4) & U(0x3FFF))) | DHI)
    db0 = U64(U64(U(U(U(sa + U(U(wn0 * 128) + 81920)) >> 4) & U(0x3FFF))) | DHI)
    a0 = ZEROS
    kl = U(0)
    ci = U(U(U(kl * 64) + ck) % Cin)  # this thread's first chunk: channel, filter column and row
    rs = U(U(U(kl * 64) + ck) // Cin)
    si = U(rs % S)
    ds = U(si * dw)
    dr = U(U(rs // S) * dh)
    ls = U(0)
    if kl < ktiles:
        k0 = U(kl * 64)
        kk = U(k0 + ck)
        kok = kk < K
        koff = U(U(U(U(dr * W) + ds) * Cin) + ci)
        ok = aok0 and kok and U(ah0 + dr) < H and U(aw0 + ds) < W
        cp_async16(As, U(U(ls * 8192) + as0), X, U(ab0 + koff) if ok else U(0), 16 if ok else 0)
        ok = aok1 and kok and U(ah1 + dr) < H and U(aw1 + ds) < W
        cp_async16(As, U(U(ls * 8192) + as1), X, U(ab1 + koff) if ok else U(0), 16 if ok else 0)
        ok = aok2 and kok and U(ah2 + dr) < H and U(aw2 + ds) < W
        cp_async16(As, U(U(ls * 8192) + as2), X, U(ab2 + koff) if ok else U(0), 16 if ok else 0)
        ok = aok3 and kok and U(ah3 + dr) < H and U(aw3 + ds) < W
        cp_async16(As, U(U(ls * 8192) + as3), X, U(ab3 + koff) if ok else U(0), 16 if ok else 0)
        ok = bok0 and kok
        cp_async16(Bs, U(U(ls * 4096) + bs0), Bt, U(bg0 + kk) if ok else U(0), 16 if ok else 0)
        ok = bok1 and kok
        cp_async16(Bs, U(U(ls * 4096) + bs1), Bt, U(bg1 + kk) if ok else U(0), 16 if ok else 0)
        ci = U(ci + 64)  # the next k tile: carry into s, then r
        while ci >= Cin:
            ci = U(ci - Cin)
            si = U(si + 1)
            ds = U(ds + dw)
            if si == S:
                si = U(0)
                ds = U(0)
                dr = U(dr + dh)
    cp_async_commit()
    kl = U(kl + 1)
    ls = U(1)
    if kl < ktiles:
        k0 = U(kl * 64)
        kk = U(k0 + ck)
        kok = kk < K
        koff = U(U(U(U(dr * W) + ds) * Cin) + ci)
        ok = aok0 and kok and U(ah0 + dr) < H and U(aw0 + ds) < W
        cp_async16(As, U(U(ls * 8192) + as0), X, U(ab0 + koff) if ok else U(0), 16 if ok else 0)
        ok = aok1 and kok and U(ah1 + dr) < H and U(aw1 + ds) < W
        cp_async16(As, U(U(ls * 8192) + as1), X, U(ab1 + koff) if ok else U(0), 16 if ok else 0)
        ok = aok2 and kok and U(ah2 + dr) < H and U(aw2 + ds) < W
        cp_async16(As, U(U(ls * 8192) + as2), X, U(ab2 + koff) if ok else U(0), 16 if ok else 0)
        ok = aok3 and kok and U(ah3 + dr) < H and U(aw3 + ds) < W
        cp_async16(As, U(U(ls * 8192) + as3), X, U(ab3 + koff) if ok else U(0), 16 if ok else 0)
        ok = bok0 and kok
        cp_async16(Bs, U(U(ls * 4096) + bs0), Bt, U(bg0 + kk) if ok else U(0), 16 if ok else 0)
        ok = bok1 and kok
        cp_async16(Bs, U(U(ls * 4096) + bs1), Bt, U(bg1 + kk) if ok else U(0), 16 if ok else 0)
        ci = U(ci + 64)  # the next k tile: carry into s, then r
        while ci >= Cin:
            ci = U(ci - Cin)
            si = U(si + 1)
            ds = U(ds + dw)
            if si == S:
                si = U(0)
                ds = U(0)
                dr = U(dr + dh)
    cp_async_commit()
    kl = U(kl + 1)
    ls = U(2)
    if kl < ktiles:
        k0 = U(kl * 64)
        kk = U(k0 + ck)
        kok = kk < K
        koff = U(U(U(U(dr * W) + ds) * Cin) + ci)
        ok = aok0 and kok and U(ah0 + dr) < H and U(aw0 + ds) < W
        cp_async16(As, U(U(ls * 8192) + as0), X, U(ab0 + koff) if ok else U(0), 16 if ok else 0)
        ok = aok1 and kok and U(ah1 + dr) < H and U(aw1 + ds) < W
        cp_async16(As, U(U(ls * 8192) + as1), X, U(ab1 + koff) if ok else U(0), 16 if ok else 0)
        ok = aok2 and kok and U(ah2 + dr) < H and U(aw2 + ds) < W
        cp_async16(As, U(U(ls * 8192) + as2), X, U(ab2 + koff) if ok else U(0), 16 if ok else 0)
        ok = aok3 and kok and U(ah3 + dr) < H and U(aw3 + ds) < W
        cp_async16(As, U(U(ls * 8192) + as3), X, U(ab3 + koff) if ok else U(0), 16 if ok else 0)
        ok = bok0 and kok
        cp_async16(Bs, U(U(ls * 4096) + bs0), Bt, U(bg0 + kk) if ok else U(0), 16 if ok else 0)
        ok = bok1 and kok
        cp_async16(Bs, U(U(ls * 4096) + bs1), Bt, U(bg1 + kk) if ok else U(0), 16 if ok else 0)
        ci = U(ci + 64)  # the next k tile: carry into s, then r
        while ci >= Cin:
            ci = U(ci - Cin)
            si = U(si + 1)
            ds = U(ds + dw)
            if si == S:
                si = U(0)
                ds = U(0)
                dr = U(dr + dh)
    cp_async_commit()
    kl = U(kl + 1)
    ls = U(3)
    cs = U(0)
    kt = U(0)
    while kt < ktiles:
        wait()
        fence_proxy_async()  # this thread's landed copies, visible to the async proxy (wgmma)
        cuda.syncthreads()
        if kl < ktiles:
            k0 = U(kl * 64)
            kk = U(k0 + ck)
            kok = kk < K
            koff = U(U(U(U(dr * W) + ds) * Cin) + ci)
            ok = aok0 and kok and U(ah0 + dr) < H and U(aw0 + ds) < W
            cp_async16(As, U(U(ls * 8192) + as0), X, U(ab0 + koff) if ok else U(0), 16 if ok else 0)
            ok = aok1 and kok and U(ah1 + dr) < H and U(aw1 + ds) < W
            cp_async16(As, U(U(ls * 8192) + as1), X, U(ab1 + koff) if ok else U(0), 16 if ok else 0)
            ok = aok2 and kok and U(ah2 + dr) < H and U(aw2 + ds) < W
            cp_async16(As, U(U(ls * 8192) + as2), X, U(ab2 + koff) if ok else U(0), 16 if ok else 0)
            ok = aok3 and kok and U(ah3 + dr) < H and U(aw3 + ds) < W
            cp_async16(As, U(U(ls * 8192) + as3), X, U(ab3 + koff) if ok else U(0), 16 if ok else 0)
            ok = bok0 and kok
            cp_async16(Bs, U(U(ls * 4096) + bs0), Bt, U(bg0 + kk) if ok else U(0), 16 if ok else 0)
            ok = bok1 and kok
            cp_async16(Bs, U(U(ls * 4096) + bs1), Bt, U(bg1 + kk) if ok else U(0), 16 if ok else 0)
            ci = U(ci + 64)  # the next k tile: carry into s, then r
            while ci >= Cin:
                ci = U(ci - Cin)
                si = U(si + 1)
                ds = U(ds + dw)
                if si == S:
                    si = U(0)
                    ds = U(0)
                    dr = U(dr + dh)
        cp_async_commit()
        kl = U(kl + 1)
        ls = U(ls + 1) if ls < 4 else U(0)
        a0 = wgmma_fence(a0)
        da = U64(da0 + U64(U(cs * 1024)))
        db = U64(db0 + U64(U(cs * 512)))
        a0 = mma(U64(da + U64(0)), U64(db + U64(0)), 1, a0)
        a0 = mma(U64(da + U64(2)), U64(db + U64(2)), 1, a0)
        a0 = mma(U64(da + U64(4)), U64(db + U64(4)), 1, a0)
        a0 = mma(U64(da + U64(6)), U64(db + U64(6)), 1, a0)
        wgmma_commit()
        a0 = wgmma_wait(a0)
        cs = U(cs + 1) if cs < 4 else U(0)
        kt = U(kt + 1)
    a0 = wgmma_wait_all(a0)
    c0_0_0, c0_0_1, c0_0_2, c0_0_3, c0_1_0, c0_1_1, c0_1_2, c0_1_3, c0_2_0, c0_2_1, c0_2_2, c0_2_3, c0_3_0, c0_3_1, c0_3_2, c0_3_3, c0_4_0, c0_4_1, c0_4_2, c0_4_3, c0_5_0, c0_5_1, c0_5_2, c0_5_3, c0_6_0, c0_6_1, c0_6_2, c0_6_3, c0_7_0, c0_7_1, c0_7_2, c0_7_3, = a0
    wait_all()
    cuda.syncthreads()  # every warp is done with the stages: Cs may overwrite them
    g = U(lane // 4)
    t2 = U(U(lane % 4) * 2)
    bmax = U(N - 1)
    rw = U(U(wm0 - 0) + g)
    cl = U(U(wn0 + t2) + 0)
    c0 = U(n0 + cl)
    c0 = c0 if c0 < N else bmax
    c1 = U(c0 + 1)
    c1 = c1 if c1 < N else bmax
    Cs[U(U(U(rw + 0) * 72) + U(cl + 0))] = c0_0_0
    Cs[U(U(U(rw + 0) * 72) + U(cl + 1))] = c0_0_1
    Cs[U(U(U(rw + 8) * 72) + U(cl + 0))] = c0_0_2
    Cs[U(U(U(rw + 8) * 72) + U(cl + 1))] = c0_0_3
    cl = U(U(wn0 + t2) + 8)
    c0 = U(n0 + cl)
    c0 = c0 if c0 < N else bmax
    c1 = U(c0 + 1)
    c1 = c1 if c1 < N else bmax
    Cs[U(U(U(rw + 0) * 72) + U(cl + 0))] = c0_1_0
    Cs[U(U(U(rw + 0) * 72) + U(cl + 1))] = c0_1_1
    Cs[U(U(U(rw + 8) * 72) + U(cl + 0))] = c0_1_2
    Cs[U(U(U(rw + 8) * 72) + U(cl + 1))] = c0_1_3
    cl = U(U(wn0 + t2) + 16)
    c0 = U(n0 + cl)
    c0 = c0 if c0 < N else bmax
    c1 = U(c0 + 1)
    c1 = c1 if c1 < N else bmax
    Cs[U(U(U(rw + 0) * 72) + U(cl + 0))] = c0_2_0
    Cs[U(U(U(rw + 0) * 72) + U(cl + 1))] = c0_2_1
    Cs[U(U(U(rw + 8) * 72) + U(cl + 0))] = c0_2_2
    Cs[U(U(U(rw + 8) * 72) + U(cl + 1))] = c0_2_3
    cl = U(U(wn0 + t2) + 24)
    c0 = U(n0 + cl)
    c0 = c0 if c0 < N else bmax
    c1 = U(c0 + 1)
    c1 = c1 if c1 < N else bmax
    Cs[U(U(U(rw + 0) * 72) + U(cl + 0))] = c0_3_0
    Cs[U(U(U(rw + 0) * 72) + U(cl + 1))] = c0_3_1
    Cs[U(U(U(rw + 8) * 72) + U(cl + 0))] = c0_3_2
    Cs[U(U(U(rw + 8) * 72) + U(cl + 1))] = c0_3_3
    cl = U(U(wn0 + t2) + 32)
    c0 = U(n0 + cl)
    c0 = c0 if c0 < N else bmax
    c1 = U(c0 + 1)
    c1 = c1 if c1 < N else bmax
    Cs[U(U(U(rw + 0) * 72) + U(cl + 0))] = c0_4_0
    Cs[U(U(U(rw + 0) * 72) + U(cl + 1))] = c0_4_1
    Cs[U(U(U(rw + 8) * 72) + U(cl + 0))] = c0_4_2
    Cs[U(U(U(rw + 8) * 72) + U(cl + 1))] = c0_4_3
    cl = U(U(wn0 + t2) + 40)
    c0 = U(n0 + cl)
    c0 = c0 if c0 < N else bmax
    c1 = U(c0 + 1)
    c1 = c1 if c1 < N else bmax
    Cs[U(U(U(rw + 0) * 72) + U(cl + 0))] = c0_5_0
    Cs[U(U(U(rw + 0) * 72) + U(cl + 1))] = c0_5_1
    Cs[U(U(U(rw + 8) * 72) + U(cl + 0))] = c0_5_2
    Cs[U(U(U(rw + 8) * 72) + U(cl + 1))] = c0_5_3
    cl = U(U(wn0 + t2) + 48)
    c0 = U(n0 + cl)
    c0 = c0 if c0 < N else bmax
    c1 = U(c0 + 1)
    c1 = c1 if c1 < N else bmax
    Cs[U(U(U(rw + 0) * 72) + U(cl + 0))] = c0_6_0
    Cs[U(U(U(rw + 0) * 72) + U(cl + 1))] = c0_6_1
    Cs[U(U(U(rw + 8) * 72) + U(cl + 0))] = c0_6_2
    Cs[U(U(U(rw + 8) * 72) + U(cl + 1))] = c0_6_3
    cl = U(U(wn0 + t2) + 56)
    c0 = U(n0 + cl)
    c0 = c0 if c0 < N else bmax
    c1 = U(c0 + 1)
    c1 = c1 if c1 < N else bmax
    Cs[U(U(U(rw + 0) * 72) + U(cl + 0))] = c0_7_0
    Cs[U(U(U(rw + 0) * 72) + U(cl + 1))] = c0_7_1
    Cs[U(U(U(rw + 8) * 72) + U(cl + 0))] = c0_7_2
    Cs[U(U(U(rw + 8) * 72) + U(cl + 1))] = c0_7_3
    cuda.syncthreads()
    if vec:
        for e in range(4):
            vi = U(tid + U(e * 256))
            rl = U(vi // 8)
            cl = U(U(vi % 8) * 8)
            row = U(U(m0 + 0) + rl)
            col = U(n0 + cl)
            if row < M and col < N:
                yb = U(row * N)
                copy16(Y, U(yb + col), Cs, U(U(rl * 72) + cl))
    else:
        for e in range(32):
            vi = U(tid + U(e * 256))
            rl = U(vi // 64)
            cl = U(U(vi % 64) * 1)
            row = U(U(m0 + 0) + rl)
            col = U(n0 + cl)
            if row < M and col < N:
                yb = U(row * N)
                Y[U(yb + col)] = Cs[U(U(rl * 72) + cl)]
