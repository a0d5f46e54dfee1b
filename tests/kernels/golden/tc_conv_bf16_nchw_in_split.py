def conv(X, Bt, Y, bias, M, N, K, PQ, CPQ, tps, vec):
    As = cuda.shared.array(0, stype, alignment=align)
    Bs = As
    Cs = cuda.shared.array(0, c_float32, alignment=align)
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
    kb = U(U(cuda.blockIdx.z) * tps)  # split-K: this block's first k tile and its end
    ke = U(kb + tps)
    ktiles = ke if ke < ktiles else ktiles
    cc = U(tid % 4)  # this thread's chunk of a row (global), and its copies' rows:
    ck = U(cc * 8)
    acm = U(tid % 8)  # this thread's m chunk of A's k rows, and its copies' k rows:
    amok = U(m0 + U(acm * 8)) < M
    mm = U(m0 + U(acm * 8)) if amok else U(0)
    ax = U(U(U(mm // PQ) * CPQ) + U(mm % PQ))  # x[n, 0, pq] of the chunk's first pixel
    akr0 = U(U(tid // 8) + 0)
    as0 = U(U(akr0 * 64) + U(U(acm ^ U(U(akr0 // 1) % 8)) * 8))
    akr1 = U(U(tid // 8) + 16)
    as1 = U(U(akr1 * 64) + U(U(acm ^ U(U(akr1 // 1) % 8)) * 8))
    br0 = U(U(tid // 4) + 0)
    bs0 = U(U(U(br0 * 32) + U(U(cc ^ U(U(br0 // 2) % 4)) * 8)) + 6144)
    bok0 = U(n0 + br0) < N
    bg0 = U(U(n0 + br0) * K) if bok0 else U(0)
    br1 = U(U(tid // 4) + 32)
    bs1 = U(U(U(br1 * 32) + U(U(cc ^ U(U(br1 // 2) % 4)) * 8)) + 6144)
    bok1 = U(n0 + br1) < N
    bg1 = U(U(n0 + br1) * K) if bok1 else U(0)
    sw = U(U(U(lane % 8) // 2) % 4)
    akl = U(U(lane % 8) + U(U(lane // 16) * 8))
    a_ld = U(akl * 64)
    swa = U(U(akl // 1) % 8)
    a_m0 = U(U(U(U(U(wm0 // 8) + 0) + U(U(lane // 8) % 2)) ^ swa) * 8)
    a_m1 = U(U(U(U(U(wm0 // 8) + 2) + U(U(lane // 8) % 2)) ^ swa) * 8)
    b_ld = U(U(U(U(wn0 + U(lane % 8)) + U(U(lane // 16) * 8)) * 32) + 6144)
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
    kl = kb
    ls = U(0)
    if kl < ktiles:
        k0 = U(kl * 32)
        kk = U(k0 + ck)
        kok = kk < K
        ok = amok and U(k0 + akr0) < K
        cp_async16(As, U(U(ls * 2048) + as0), X, U(ax + U(U(k0 + akr0) * PQ)) if ok else U(0), 16 if ok else 0)
        ok = amok and U(k0 + akr1) < K
        cp_async16(As, U(U(ls * 2048) + as1), X, U(ax + U(U(k0 + akr1) * PQ)) if ok else U(0), 16 if ok else 0)
        ok = bok0 and kok
        cp_async16(Bs, U(U(ls * 2048) + bs0), Bt, U(bg0 + kk) if ok else U(0), 16 if ok else 0)
        ok = bok1 and kok
        cp_async16(Bs, U(U(ls * 2048) + bs1), Bt, U(bg1 + kk) if ok else U(0), 16 if ok else 0)
    cp_async_commit()
    kl = U(kl + 1)
    ls = U(1)
    if kl < ktiles:
        k0 = U(kl * 32)
        kk = U(k0 + ck)
        kok = kk < K
        ok = amok and U(k0 + akr0) < K
        cp_async16(As, U(U(ls * 2048) + as0), X, U(ax + U(U(k0 + akr0) * PQ)) if ok else U(0), 16 if ok else 0)
        ok = amok and U(k0 + akr1) < K
        cp_async16(As, U(U(ls * 2048) + as1), X, U(ax + U(U(k0 + akr1) * PQ)) if ok else U(0), 16 if ok else 0)
        ok = bok0 and kok
        cp_async16(Bs, U(U(ls * 2048) + bs0), Bt, U(bg0 + kk) if ok else U(0), 16 if ok else 0)
        ok = bok1 and kok
        cp_async16(Bs, U(U(ls * 2048) + bs1), Bt, U(bg1 + kk) if ok else U(0), 16 if ok else 0)
    cp_async_commit()
    kl = U(kl + 1)
    ls = U(2)
    cs = U(0)
    kt = kb
    while kt < ktiles:
        wait()
        cuda.syncthreads()
        if kl < ktiles:
            k0 = U(kl * 32)
            kk = U(k0 + ck)
            kok = kk < K
            ok = amok and U(k0 + akr0) < K
            cp_async16(As, U(U(ls * 2048) + as0), X, U(ax + U(U(k0 + akr0) * PQ)) if ok else U(0), 16 if ok else 0)
            ok = amok and U(k0 + akr1) < K
            cp_async16(As, U(U(ls * 2048) + as1), X, U(ax + U(U(k0 + akr1) * PQ)) if ok else U(0), 16 if ok else 0)
            ok = bok0 and kok
            cp_async16(Bs, U(U(ls * 2048) + bs0), Bt, U(bg0 + kk) if ok else U(0), 16 if ok else 0)
            ok = bok1 and kok
            cp_async16(Bs, U(U(ls * 2048) + bs1), Bt, U(bg1 + kk) if ok else U(0), 16 if ok else 0)
        cp_async_commit()
        kl = U(kl + 1)
        ls = U(ls + 1) if ls < 2 else U(0)
        a_st = U(U(cs * 2048) + a_ld)
        b_st = U(U(cs * 2048) + b_ld)
        a0_0, a0_1, a0_2, a0_3 = ldmatrix_x4_trans(As, U(U(a_st + 0) + a_m0))
        a1_0, a1_1, a1_2, a1_3 = ldmatrix_x4_trans(As, U(U(a_st + 0) + a_m1))
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
        a0_0, a0_1, a0_2, a0_3 = ldmatrix_x4_trans(As, U(U(a_st + 1024) + a_m0))
        a1_0, a1_1, a1_2, a1_3 = ldmatrix_x4_trans(As, U(U(a_st + 1024) + a_m1))
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
        cs = U(cs + 1) if cs < 2 else U(0)
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
    Cs[U(U(U(cl + 0) * 68) + U(rw + 0))] = c0_0_0
    Cs[U(U(U(cl + 1) * 68) + U(rw + 0))] = c0_0_1
    Cs[U(U(U(cl + 0) * 68) + U(rw + 8))] = c0_0_2
    Cs[U(U(U(cl + 1) * 68) + U(rw + 8))] = c0_0_3
    Cs[U(U(U(cl + 0) * 68) + U(rw + 16))] = c1_0_0
    Cs[U(U(U(cl + 1) * 68) + U(rw + 16))] = c1_0_1
    Cs[U(U(U(cl + 0) * 68) + U(rw + 24))] = c1_0_2
    Cs[U(U(U(cl + 1) * 68) + U(rw + 24))] = c1_0_3
    cl = U(U(wn0 + t2) + 8)
    c0 = U(n0 + cl)
    c0 = c0 if c0 < N else bmax
    c1 = U(c0 + 1)
    c1 = c1 if c1 < N else bmax
    Cs[U(U(U(cl + 0) * 68) + U(rw + 0))] = c0_1_0
    Cs[U(U(U(cl + 1) * 68) + U(rw + 0))] = c0_1_1
    Cs[U(U(U(cl + 0) * 68) + U(rw + 8))] = c0_1_2
    Cs[U(U(U(cl + 1) * 68) + U(rw + 8))] = c0_1_3
    Cs[U(U(U(cl + 0) * 68) + U(rw + 16))] = c1_1_0
    Cs[U(U(U(cl + 1) * 68) + U(rw + 16))] = c1_1_1
    Cs[U(U(U(cl + 0) * 68) + U(rw + 24))] = c1_1_2
    Cs[U(U(U(cl + 1) * 68) + U(rw + 24))] = c1_1_3
    cl = U(U(wn0 + t2) + 16)
    c0 = U(n0 + cl)
    c0 = c0 if c0 < N else bmax
    c1 = U(c0 + 1)
    c1 = c1 if c1 < N else bmax
    Cs[U(U(U(cl + 0) * 68) + U(rw + 0))] = c0_2_0
    Cs[U(U(U(cl + 1) * 68) + U(rw + 0))] = c0_2_1
    Cs[U(U(U(cl + 0) * 68) + U(rw + 8))] = c0_2_2
    Cs[U(U(U(cl + 1) * 68) + U(rw + 8))] = c0_2_3
    Cs[U(U(U(cl + 0) * 68) + U(rw + 16))] = c1_2_0
    Cs[U(U(U(cl + 1) * 68) + U(rw + 16))] = c1_2_1
    Cs[U(U(U(cl + 0) * 68) + U(rw + 24))] = c1_2_2
    Cs[U(U(U(cl + 1) * 68) + U(rw + 24))] = c1_2_3
    cl = U(U(wn0 + t2) + 24)
    c0 = U(n0 + cl)
    c0 = c0 if c0 < N else bmax
    c1 = U(c0 + 1)
    c1 = c1 if c1 < N else bmax
    Cs[U(U(U(cl + 0) * 68) + U(rw + 0))] = c0_3_0
    Cs[U(U(U(cl + 1) * 68) + U(rw + 0))] = c0_3_1
    Cs[U(U(U(cl + 0) * 68) + U(rw + 8))] = c0_3_2
    Cs[U(U(U(cl + 1) * 68) + U(rw + 8))] = c0_3_3
    Cs[U(U(U(cl + 0) * 68) + U(rw + 16))] = c1_3_0
    Cs[U(U(U(cl + 1) * 68) + U(rw + 16))] = c1_3_1
    Cs[U(U(U(cl + 0) * 68) + U(rw + 24))] = c1_3_2
    Cs[U(U(U(cl + 1) * 68) + U(rw + 24))] = c1_3_3
    cuda.syncthreads()
    if vec:
        rl = U(U(tid % 16) * 4)
        row = U(U(m0 + 0) + rl)
        if row < M:
            yb = U(U(U(row // PQ) * U(N * PQ)) + U(row % PQ))
            yb = U(yb + U(U(cuda.blockIdx.z) * U(M * N)))
            for e in range(8):
                cl = U(U(tid // 16) + U(e * 8))
                col = U(n0 + cl)
                if col < N:
                    copy16(Y, U(yb + U(col * PQ)), Cs, U(U(cl * 68) + rl))
    else:
        rl = U(U(tid % 64) * 1)
        row = U(U(m0 + 0) + rl)
        if row < M:
            yb = U(U(U(row // PQ) * U(N * PQ)) + U(row % PQ))
            yb = U(yb + U(U(cuda.blockIdx.z) * U(M * N)))
            for e in range(32):
                cl = U(U(tid // 64) + U(e * 2))
                col = U(n0 + cl)
                if col < N:
                    Y[U(yb + U(col * PQ))] = Cs[U(U(cl * 68) + rl)]
