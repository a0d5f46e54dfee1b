def conv(X, Bt, Y, bias, M, N, K, Cin, H, W, S, Q, PQ, HWC, sh, sw, ph, pw, phn, pwn, dh, dw, vec):
    As = cuda.shared.array(0, stype, alignment=align)
    Bs = As
    Cs = cuda.shared.array(0, c_float16, alignment=align)
    tid = U(cuda.threadIdx.x)
    lane = U(tid % 32)
    warp = U(tid // 32)
    wm0 = U(U(warp // 2) * 32)
    wn0 = U(U(warp % 2) * 32)
    nblk = U(U(N + 63) // 64)
    bid = U(cuda.blockIdx.x)
    m0 = U(U(bid // nblk) * 64)
    n0 = U(U(bid % nblk) * 64)
    ktiles = U(U(K + 31) // 32)
    cc = U(tid % 4)  # this thread's chunk of a row (global), and its copies' rows:
    ck = U(cc * 8)
    ar0 = U(U(tid // 4) + 0)
    as0 = U(U(U(ar0 * 32) + U(U(cc ^ U(U(ar0 // 2) % 4)) * 8)) + 0)
    aok0 = U(m0 + ar0) < M
    mm = U(m0 + ar0) if aok0 else U(0)
    pq = U(mm % PQ)
    ah0 = U(U(U(U(pq // Q) * sh) + phn) - ph)
    aw0 = U(U(U(U(pq % Q) * sw) + pwn) - pw)
    ab0 = U(U(U(mm // PQ) * HWC) + U(U(U(ah0 * W) + aw0) * Cin))
    ar1 = U(U(tid // 4) + 32)
    as1 = U(U(U(ar1 * 32) + U(U(cc ^ U(U(ar1 // 2) % 4)) * 8)) + 0)
    aok1 = U(m0 + ar1) < M
    mm = U(m0 + ar1) if aok1 else U(0)
    pq = U(mm % PQ)
    ah1 = U(U(U(U(pq // Q) * sh) + phn) - ph)
    aw1 = U(U(U(U(pq % Q) * sw) + pwn) - pw)
    ab1 = U(U(U(mm // PQ) * HWC) + U(U(U(ah1 * W) + aw1) * Cin))
    br0 = U(U(tid // 4) + 0)
    bs0 = U(U(U(br0 * 32) + U(U(cc ^ U(U(br0 // 2) % 4)) * 8)) + 8192)
    bok0 = U(n0 + br0) < N
    bg0 = U(U(n0 + br0) * K) if bok0 else U(0)
    br1 = U(U(tid // 4) + 32)
    bs1 = U(U(U(br1 * 32) + U(U(cc ^ U(U(br1 // 2) % 4)) * 8)) + 8192)
    bok1 = U(n0 + br1) < N
    bg1 = U(U(n0 + br1) * K) if bok1 else U(0)
    sw = U(U(U(lane % 8) // 2) % 4)
    a_ld = U(U(wm0 + U(lane % 16)) * 32)
    b_ld = U(U(U(U(wn0 + U(lane % 8)) + U(U(lane // 16) * 8)) * 32) + 8192)
    a_c0 = U(U(U(0 + U(lane // 16)) ^ sw) * 8)
    a_c1 = U(U(U(2 + U(lane // 16)) ^ sw) * 8)
    b_c0 = U(U(U(0 + U(U(lane // 8) % 2)) ^ sw) * 8)
    b_c1 = U(U(U(2 + U(U(lane // 8) % 2)) ^ sw) * 8)
    c0_0_0 = c0_0_1 = c0_0_2 = c0_0_3 = zero
    c0_1_0 = c0_1_1 = c0_1_2 = c0_1_3 = zero
    c0_2_0 = c0_2_1 = c0_2_2 = c0_2_3 = zero
    c0_3_0 = c0_3_1 = c0_3_2 = c0_3_3 = zero
    c1_0_0 = c1_0_1 = c1_0_2 = c1_0_3 = zero
    c1_1_0 = c1_1_1 = c1_1_2 = c1_1_3 = zero
    c1_2_0 = c1_2_1 = c1_2_2 = c1_2_3 = zero
    c1_3_0 = c1_3_1 = c1_3_2 = c1_3_3 = zero
    kl = U(0)
    ci = U(U(U(kl * 32) + ck) % Cin)  # this thread's first chunk: channel, filter column and row
    rs = U(U(U(kl * 32) + ck) // Cin)
    si = U(rs % S)
    ds = U(si * dw)
    dr = U(U(rs // S) * dh)
    ls = U(0)
    if kl < ktiles:
        k0 = U(kl * 32)
        kk = U(k0 + ck)
        kok = kk < K
        koff = U(U(U(U(dr * W) + ds) * Cin) + ci)
        ok = aok0 and kok and U(ah0 + dr) < H and U(aw0 + ds) < W
        cp_async16(As, U(U(ls * 2048) + as0), X, U(ab0 + koff) if ok else U(0), 16 if ok else 0)
        ok = aok1 and kok and U(ah1 + dr) < H and U(aw1 + ds) < W
        cp_async16(As, U(U(ls * 2048) + as1), X, U(ab1 + koff) if ok else U(0), 16 if ok else 0)
        ok = bok0 and kok
        cp_async16(Bs, U(U(ls * 2048) + bs0), Bt, U(bg0 + kk) if ok else U(0), 16 if ok else 0)
        ok = bok1 and kok
        cp_async16(Bs, U(U(ls * 2048) + bs1), Bt, U(bg1 + kk) if ok else U(0), 16 if ok else 0)
        ci = U(ci + 32)  # the next k tile: carry into s, then r
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
        k0 = U(kl * 32)
        kk = U(k0 + ck)
        kok = kk < K
        koff = U(U(U(U(dr * W) + ds) * Cin) + ci)
        ok = aok0 and kok and U(ah0 + dr) < H and U(aw0 + ds) < W
        cp_async16(As, U(U(ls * 2048) + as0), X, U(ab0 + koff) if ok else U(0), 16 if ok else 0)
        ok = aok1 and kok and U(ah1 + dr) < H and U(aw1 + ds) < W
        cp_async16(As, U(U(ls * 2048) + as1), X, U(ab1 + koff) if ok else U(0), 16 if ok else 0)
        ok = bok0 and kok
        cp_async16(Bs, U(U(ls * 2048) + bs0), Bt, U(bg0 + kk) if ok else U(0), 16 if ok else 0)
        ok = bok1 and kok
        cp_async16(Bs, U(U(ls * 2048) + bs1), Bt, U(bg1 + kk) if ok else U(0), 16 if ok else 0)
        ci = U(ci + 32)  # the next k tile: carry into s, then r
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
        k0 = U(kl * 32)
        kk = U(k0 + ck)
        kok = kk < K
        koff = U(U(U(U(dr * W) + ds) * Cin) + ci)
        ok = aok0 and kok and U(ah0 + dr) < H and U(aw0 + ds) < W
        cp_async16(As, U(U(ls * 2048) + as0), X, U(ab0 + koff) if ok else U(0), 16 if ok else 0)
        ok = aok1 and kok and U(ah1 + dr) < H and U(aw1 + ds) < W
        cp_async16(As, U(U(ls * 2048) + as1), X, U(ab1 + koff) if ok else U(0), 16 if ok else 0)
        ok = bok0 and kok
        cp_async16(Bs, U(U(ls * 2048) + bs0), Bt, U(bg0 + kk) if ok else U(0), 16 if ok else 0)
        ok = bok1 and kok
        cp_async16(Bs, U(U(ls * 2048) + bs1), Bt, U(bg1 + kk) if ok else U(0), 16 if ok else 0)
        ci = U(ci + 32)  # the next k tile: carry into s, then r
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
        cuda.syncthreads()
        if kl < ktiles:
            k0 = U(kl * 32)
            kk = U(k0 + ck)
            kok = kk < K
            koff = U(U(U(U(dr * W) + ds) * Cin) + ci)
            ok = aok0 and kok and U(ah0 + dr) < H and U(aw0 + ds) < W
            cp_async16(As, U(U(ls * 2048) + as0), X, U(ab0 + koff) if ok else U(0), 16 if ok else 0)
            ok = aok1 and kok and U(ah1 + dr) < H and U(aw1 + ds) < W
            cp_async16(As, U(U(ls * 2048) + as1), X, U(ab1 + koff) if ok else U(0), 16 if ok else 0)
            ok = bok0 and kok
            cp_async16(Bs, U(U(ls * 2048) + bs0), Bt, U(bg0 + kk) if ok else U(0), 16 if ok else 0)
            ok = bok1 and kok
            cp_async16(Bs, U(U(ls * 2048) + bs1), Bt, U(bg1 + kk) if ok else U(0), 16 if ok else 0)
            ci = U(ci + 32)  # the next k tile: carry into s, then r
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
        ls = U(ls + 1) if ls < 3 else U(0)
        a_st = U(U(cs * 2048) + a_ld)
        b_st = U(U(cs * 2048) + b_ld)
        a0_0, a0_1, a0_2, a0_3 = ldmatrix_x4(As, U(a_st + 0) + a_c0)
        a1_0, a1_1, a1_2, a1_3 = ldmatrix_x4(As, U(a_st + 512) + a_c0)
        b0_0, b0_1, b1_0, b1_1 = ldmatrix_x4(Bs, U(b_st + 0) + b_c0)
        b2_0, b2_1, b3_0, b3_1 = ldmatrix_x4(Bs, U(b_st + 512) + b_c0)
        c0_0_0, c0_0_1, c0_0_2, c0_0_3 = mma(a0_0, a0_1, a0_2, a0_3, b0_0, b0_1, c0_0_0, c0_0_1, c0_0_2, c0_0_3)
        c0_1_0, c0_1_1, c0_1_2, c0_1_3 = mma(a0_0, a0_1, a0_2, a0_3, b1_0, b1_1, c0_1_0, c0_1_1, c0_1_2, c0_1_3)
        c0_2_0, c0_2_1, c0_2_2, c0_2_3 = mma(a0_0, a0_1, a0_2, a0_3, b2_0, b2_1, c0_2_0, c0_2_1, c0_2_2, c0_2_3)
        c0_3_0, c0_3_1, c0_3_2, c0_3_3 = mma(a0_0, a0_1, a0_2, a0_3, b3_0, b3_1, c0_3_0, c0_3_1, c0_3_2, c0_3_3)
        c1_0_0, c1_0_1, c1_0_2, c1_0_3 = mma(a1_0, a1_1, a1_2, a1_3, b0_0, b0_1, c1_0_0, c1_0_1, c1_0_2, c1_0_3)
        c1_1_0, c1_1_1, c1_1_2, c1_1_3 = mma(a1_0, a1_1, a1_2, a1_3, b1_0, b1_1, c1_1_0, c1_1_1, c1_1_2, c1_1_3)
        c1_2_0, c1_2_1, c1_2_2, c1_2_3 = mma(a1_0, a1_1, a1_2, a1_3, b2_0, b2_1, c1_2_0, c1_2_1, c1_2_2, c1_2_3)
        c1_3_0, c1_3_1, c1_3_2, c1_3_3 = mma(a1_0, a1_1, a1_2, a1_3, b3_0, b3_1, c1_3_0, c1_3_1, c1_3_2, c1_3_3)
        a0_0, a0_1, a0_2, a0_3 = ldmatrix_x4(As, U(a_st + 0) + a_c1)
        a1_0, a1_1, a1_2, a1_3 = ldmatrix_x4(As, U(a_st + 512) + a_c1)
        b0_0, b0_1, b1_0, b1_1 = ldmatrix_x4(Bs, U(b_st + 0) + b_c1)
        b2_0, b2_1, b3_0, b3_1 = ldmatrix_x4(Bs, U(b_st + 512) + b_c1)
        c0_0_0, c0_0_1, c0_0_2, c0_0_3 = mma(a0_0, a0_1, a0_2, a0_3, b0_0, b0_1, c0_0_0, c0_0_1, c0_0_2, c0_0_3)
        c0_1_0, c0_1_1, c0_1_2, c0_1_3 = mma(a0_0, a0_1, a0_2, a0_3, b1_0, b1_1, c0_1_0, c0_1_1, c0_1_2, c0_1_3)
        c0_2_0, c0_2_1, c0_2_2, c0_2_3 = mma(a0_0, a0_1, a0_2, a0_3, b2_0, b2_1, c0_2_0, c0_2_1, c0_2_2, c0_2_3)
        c0_3_0, c0_3_1, c0_3_2, c0_3_3 = mma(a0_0, a0_1, a0_2, a0_3, b3_0, b3_1, c0_3_0, c0_3_1, c0_3_2, c0_3_3)
        c1_0_0, c1_0_1, c1_0_2, c1_0_3 = mma(a1_0, a1_1, a1_2, a1_3, b0_0, b0_1, c1_0_0, c1_0_1, c1_0_2, c1_0_3)
        c1_1_0, c1_1_1, c1_1_2, c1_1_3 = mma(a1_0, a1_1, a1_2, a1_3, b1_0, b1_1, c1_1_0, c1_1_1, c1_1_2, c1_1_3)
        c1_2_0, c1_2_1, c1_2_2, c1_2_3 = mma(a1_0, a1_1, a1_2, a1_3, b2_0, b2_1, c1_2_0, c1_2_1, c1_2_2, c1_2_3)
        c1_3_0, c1_3_1, c1_3_2, c1_3_3 = mma(a1_0, a1_1, a1_2, a1_3, b3_0, b3_1, c1_3_0, c1_3_1, c1_3_2, c1_3_3)
        cs = U(cs + 1) if cs < 3 else U(0)
        kt = U(kt + 1)
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
    Cs[U(U(U(cl + 0) * 72) + U(rw + 0))] = c0_0_0 + f32(bias[c0])
    Cs[U(U(U(cl + 1) * 72) + U(rw + 0))] = c0_0_1 + f32(bias[c1])
    Cs[U(U(U(cl + 0) * 72) + U(rw + 8))] = c0_0_2 + f32(bias[c0])
    Cs[U(U(U(cl + 1) * 72) + U(rw + 8))] = c0_0_3 + f32(bias[c1])
    Cs[U(U(U(cl + 0) * 72) + U(rw + 16))] = c1_0_0 + f32(bias[c0])
    Cs[U(U(U(cl + 1) * 72) + U(rw + 16))] = c1_0_1 + f32(bias[c1])
    Cs[U(U(U(cl + 0) * 72) + U(rw + 24))] = c1_0_2 + f32(bias[c0])
    Cs[U(U(U(cl + 1) * 72) + U(rw + 24))] = c1_0_3 + f32(bias[c1])
    cl = U(U(wn0 + t2) + 8)
    c0 = U(n0 + cl)
    c0 = c0 if c0 < N else bmax
    c1 = U(c0 + 1)
    c1 = c1 if c1 < N else bmax
    Cs[U(U(U(cl + 0) * 72) + U(rw + 0))] = c0_1_0 + f32(bias[c0])
    Cs[U(U(U(cl + 1) * 72) + U(rw + 0))] = c0_1_1 + f32(bias[c1])
    Cs[U(U(U(cl + 0) * 72) + U(rw + 8))] = c0_1_2 + f32(bias[c0])
    Cs[U(U(U(cl + 1) * 72) + U(rw + 8))] = c0_1_3 + f32(bias[c1])
    Cs[U(U(U(cl + 0) * 72) + U(rw + 16))] = c1_1_0 + f32(bias[c0])
    Cs[U(U(U(cl + 1) * 72) + U(rw + 16))] = c1_1_1 + f32(bias[c1])
    Cs[U(U(U(cl + 0) * 72) + U(rw + 24))] = c1_1_2 + f32(bias[c0])
    Cs[U(U(U(cl + 1) * 72) + U(rw + 24))] = c1_1_3 + f32(bias[c1])
    cl = U(U(wn0 + t2) + 16)
    c0 = U(n0 + cl)
    c0 = c0 if c0 < N else bmax
    c1 = U(c0 + 1)
    c1 = c1 if c1 < N else bmax
    Cs[U(U(U(cl + 0) * 72) + U(rw + 0))] = c0_2_0 + f32(bias[c0])
    Cs[U(U(U(cl + 1) * 72) + U(rw + 0))] = c0_2_1 + f32(bias[c1])
    Cs[U(U(U(cl + 0) * 72) + U(rw + 8))] = c0_2_2 + f32(bias[c0])
    Cs[U(U(U(cl + 1) * 72) + U(rw + 8))] = c0_2_3 + f32(bias[c1])
    Cs[U(U(U(cl + 0) * 72) + U(rw + 16))] = c1_2_0 + f32(bias[c0])
    Cs[U(U(U(cl + 1) * 72) + U(rw + 16))] = c1_2_1 + f32(bias[c1])
    Cs[U(U(U(cl + 0) * 72) + U(rw + 24))] = c1_2_2 + f32(bias[c0])
    Cs[U(U(U(cl + 1) * 72) + U(rw + 24))] = c1_2_3 + f32(bias[c1])
    cl = U(U(wn0 + t2) + 24)
    c0 = U(n0 + cl)
    c0 = c0 if c0 < N else bmax
    c1 = U(c0 + 1)
    c1 = c1 if c1 < N else bmax
    Cs[U(U(U(cl + 0) * 72) + U(rw + 0))] = c0_3_0 + f32(bias[c0])
    Cs[U(U(U(cl + 1) * 72) + U(rw + 0))] = c0_3_1 + f32(bias[c1])
    Cs[U(U(U(cl + 0) * 72) + U(rw + 8))] = c0_3_2 + f32(bias[c0])
    Cs[U(U(U(cl + 1) * 72) + U(rw + 8))] = c0_3_3 + f32(bias[c1])
    Cs[U(U(U(cl + 0) * 72) + U(rw + 16))] = c1_3_0 + f32(bias[c0])
    Cs[U(U(U(cl + 1) * 72) + U(rw + 16))] = c1_3_1 + f32(bias[c1])
    Cs[U(U(U(cl + 0) * 72) + U(rw + 24))] = c1_3_2 + f32(bias[c0])
    Cs[U(U(U(cl + 1) * 72) + U(rw + 24))] = c1_3_3 + f32(bias[c1])
    cuda.syncthreads()
    if vec:
        rl = U(U(tid % 8) * 8)
        row = U(U(m0 + 0) + rl)
        if row < M:
            yb = U(U(U(row // PQ) * U(N * PQ)) + U(row % PQ))
            for e in range(4):
                cl = U(U(tid // 8) + U(e * 16))
                col = U(n0 + cl)
                if col < N:
                    copy16(Y, U(yb + U(col * PQ)), Cs, U(U(cl * 72) + rl))
    else:
        rl = U(U(tid % 64) * 1)
        row = U(U(m0 + 0) + rl)
        if row < M:
            yb = U(U(U(row // PQ) * U(N * PQ)) + U(row % PQ))
            for e in range(32):
                cl = U(U(tid // 64) + U(e * 2))
                col = U(n0 + cl)
                if col < N:
                    Y[U(yb + U(col * PQ))] = Cs[U(U(cl * 72) + rl)]
