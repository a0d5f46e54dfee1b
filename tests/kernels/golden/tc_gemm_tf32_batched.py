def gemm(A, Bt, C, M, N, K, sA, sB, sC, vec):
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
    bz = U(cuda.blockIdx.z)
    ktiles = U(U(K + 15) // 16)
    cc = U(tid % 4)  # this thread's chunk of a row (global), and its copies' rows:
    ck = U(cc * 4)
    ar0 = U(U(tid // 4) + 0)
    as0 = U(U(U(ar0 * 16) + U(U(cc ^ U(U(ar0 // 2) % 4)) * 4)) + 0)
    aok0 = U(m0 + ar0) < M
    ag0 = U(U(bz * sA) + U(U(m0 + ar0) * K)) if aok0 else U(0)
    ar1 = U(U(tid // 4) + 32)
    as1 = U(U(U(ar1 * 16) + U(U(cc ^ U(U(ar1 // 2) % 4)) * 4)) + 0)
    aok1 = U(m0 + ar1) < M
    ag1 = U(U(bz * sA) + U(U(m0 + ar1) * K)) if aok1 else U(0)
    br0 = U(U(tid // 4) + 0)
    bs0 = U(U(U(br0 * 16) + U(U(cc ^ U(U(br0 // 2) % 4)) * 4)) + 4096)
    bok0 = U(n0 + br0) < N
    bg0 = U(U(U(n0 + br0) * K) + U(bz * sB)) if bok0 else U(0)
    br1 = U(U(tid // 4) + 32)
    bs1 = U(U(U(br1 * 16) + U(U(cc ^ U(U(br1 // 2) % 4)) * 4)) + 4096)
    bok1 = U(n0 + br1) < N
    bg1 = U(U(U(n0 + br1) * K) + U(bz * sB)) if bok1 else U(0)
    sw = U(U(U(lane % 8) // 2) % 4)
    a_ld = U(U(wm0 + U(lane % 16)) * 16)
    b_ld = U(U(U(U(wn0 + U(lane % 8)) + U(U(lane // 16) * 8)) * 16) + 4096)
    a_c0 = U(U(U(0 + U(lane // 16)) ^ sw) * 4)
    a_c1 = U(U(U(2 + U(lane // 16)) ^ sw) * 4)
    b_c0 = U(U(U(0 + U(U(lane // 8) % 2)) ^ sw) * 4)
    b_c1 = U(U(U(2 + U(U(lane // 8) % 2)) ^ sw) * 4)
    c0_0_0 = c0_0_1 = c0_0_2 = c0_0_3 = zero
    c0_1_0 = c0_1_1 = c0_1_2 = c0_1_3 = zero
    c0_2_0 = c0_2_1 = c0_2_2 = c0_2_3 = zero
    c0_3_0 = c0_3_1 = c0_3_2 = c0_3_3 = zero
    c1_0_0 = c1_0_1 = c1_0_2 = c1_0_3 = zero
    c1_1_0 = c1_1_1 = c1_1_2 = c1_1_3 = zero
    c1_2_0 = c1_2_1 = c1_2_2 = c1_2_3 = zero
    c1_3_0 = c1_3_1 = c1_3_2 = c1_3_3 = zero
    kl = U(0)
    ls = U(0)
    if kl < ktiles:
        k0 = U(kl * 16)
        kk = U(k0 + ck)
        kok = kk < K
        ok = aok0 and kok
        cp_async16(As, U(U(ls * 1024) + as0), A, U(ag0 + kk) if ok else U(0), 16 if ok else 0)
        ok = aok1 and kok
        cp_async16(As, U(U(ls * 1024) + as1), A, U(ag1 + kk) if ok else U(0), 16 if ok else 0)
        ok = bok0 and kok
        cp_async16(Bs, U(U(ls * 1024) + bs0), Bt, U(bg0 + kk) if ok else U(0), 16 if ok else 0)
        ok = bok1 and kok
        cp_async16(Bs, U(U(ls * 1024) + bs1), Bt, U(bg1 + kk) if ok else U(0), 16 if ok else 0)
    cp_async_commit()
    kl = U(kl + 1)
    ls = U(1)
    if kl < ktiles:
        k0 = U(kl * 16)
        kk = U(k0 + ck)
        kok = kk < K
        ok = aok0 and kok
        cp_async16(As, U(U(ls * 1024) + as0), A, U(ag0 + kk) if ok else U(0), 16 if ok else 0)
        ok = aok1 and kok
        cp_async16(As, U(U(ls * 1024) + as1), A, U(ag1 + kk) if ok else U(0), 16 if ok else 0)
        ok = bok0 and kok
        cp_async16(Bs, U(U(ls * 1024) + bs0), Bt, U(bg0 + kk) if ok else U(0), 16 if ok else 0)
        ok = bok1 and kok
        cp_async16(Bs, U(U(ls * 1024) + bs1), Bt, U(bg1 + kk) if ok else U(0), 16 if ok else 0)
    cp_async_commit()
    kl = U(kl + 1)
    ls = U(2)
    if kl < ktiles:
        k0 = U(kl * 16)
        kk = U(k0 + ck)
        kok = kk < K
        ok = aok0 and kok
        cp_async16(As, U(U(ls * 1024) + as0), A, U(ag0 + kk) if ok else U(0), 16 if ok else 0)
        ok = aok1 and kok
        cp_async16(As, U(U(ls * 1024) + as1), A, U(ag1 + kk) if ok else U(0), 16 if ok else 0)
        ok = bok0 and kok
        cp_async16(Bs, U(U(ls * 1024) + bs0), Bt, U(bg0 + kk) if ok else U(0), 16 if ok else 0)
        ok = bok1 and kok
        cp_async16(Bs, U(U(ls * 1024) + bs1), Bt, U(bg1 + kk) if ok else U(0), 16 if ok else 0)
    cp_async_commit()
    kl = U(kl + 1)
    ls = U(3)
    cs = U(0)
    kt = U(0)
    while kt < ktiles:
        wait()
        cuda.syncthreads()
        if kl < ktiles:
            k0 = U(kl * 16)
            kk = U(k0 + ck)
            kok = kk < K
            ok = aok0 and kok
            cp_async16(As, U(U(ls * 1024) + as0), A, U(ag0 + kk) if ok else U(0), 16 if ok else 0)
            ok = aok1 and kok
            cp_async16(As, U(U(ls * 1024) + as1), A, U(ag1 + kk) if ok else U(0), 16 if ok else 0)
            ok = bok0 and kok
            cp_async16(Bs, U(U(ls * 1024) + bs0), Bt, U(bg0 + kk) if ok else U(0), 16 if ok else 0)
            ok = bok1 and kok
            cp_async16(Bs, U(U(ls * 1024) + bs1), Bt, U(bg1 + kk) if ok else U(0), 16 if ok else 0)
        cp_async_commit()
        kl = U(kl + 1)
        ls = U(ls + 1) if ls < 3 else U(0)
        a_st = U(U(cs * 1024) + a_ld)
        b_st = U(U(cs * 1024) + b_ld)
        a0_0, a0_1, a0_2, a0_3 = ldmatrix_x4(As, U(a_st + 0) + a_c0)
        a1_0, a1_1, a1_2, a1_3 = ldmatrix_x4(As, U(a_st + 256) + a_c0)
        b0_0, b0_1, b1_0, b1_1 = ldmatrix_x4(Bs, U(b_st + 0) + b_c0)
        b2_0, b2_1, b3_0, b3_1 = ldmatrix_x4(Bs, U(b_st + 256) + b_c0)
        a0_0, a0_1, a0_2, a0_3 = a0_0, a0_1, a0_2, a0_3
        a1_0, a1_1, a1_2, a1_3 = a1_0, a1_1, a1_2, a1_3
        b0_0, b0_1 = b0_0, b0_1
        b1_0, b1_1 = b1_0, b1_1
        b2_0, b2_1 = b2_0, b2_1
        b3_0, b3_1 = b3_0, b3_1
        c0_0_0, c0_0_1, c0_0_2, c0_0_3 = mma(a0_0, a0_1, a0_2, a0_3, b0_0, b0_1, c0_0_0, c0_0_1, c0_0_2, c0_0_3)
        c0_1_0, c0_1_1, c0_1_2, c0_1_3 = mma(a0_0, a0_1, a0_2, a0_3, b1_0, b1_1, c0_1_0, c0_1_1, c0_1_2, c0_1_3)
        c0_2_0, c0_2_1, c0_2_2, c0_2_3 = mma(a0_0, a0_1, a0_2, a0_3, b2_0, b2_1, c0_2_0, c0_2_1, c0_2_2, c0_2_3)
        c0_3_0, c0_3_1, c0_3_2, c0_3_3 = mma(a0_0, a0_1, a0_2, a0_3, b3_0, b3_1, c0_3_0, c0_3_1, c0_3_2, c0_3_3)
        c1_0_0, c1_0_1, c1_0_2, c1_0_3 = mma(a1_0, a1_1, a1_2, a1_3, b0_0, b0_1, c1_0_0, c1_0_1, c1_0_2, c1_0_3)
        c1_1_0, c1_1_1, c1_1_2, c1_1_3 = mma(a1_0, a1_1, a1_2, a1_3, b1_0, b1_1, c1_1_0, c1_1_1, c1_1_2, c1_1_3)
        c1_2_0, c1_2_1, c1_2_2, c1_2_3 = mma(a1_0, a1_1, a1_2, a1_3, b2_0, b2_1, c1_2_0, c1_2_1, c1_2_2, c1_2_3)
        c1_3_0, c1_3_1, c1_3_2, c1_3_3 = mma(a1_0, a1_1, a1_2, a1_3, b3_0, b3_1, c1_3_0, c1_3_1, c1_3_2, c1_3_3)
        a0_0, a0_1, a0_2, a0_3 = ldmatrix_x4(As, U(a_st + 0) + a_c1)
        a1_0, a1_1, a1_2, a1_3 = ldmatrix_x4(As, U(a_st + 256) + a_c1)
        b0_0, b0_1, b1_0, b1_1 = ldmatrix_x4(Bs, U(b_st + 0) + b_c1)
        b2_0, b2_1, b3_0, b3_1 = ldmatrix_x4(Bs, U(b_st + 256) + b_c1)
        a0_0, a0_1, a0_2, a0_3 = a0_0, a0_1, a0_2, a0_3
        a1_0, a1_1, a1_2, a1_3 = a1_0, a1_1, a1_2, a1_3
        b0_0, b0_1 = b0_0, b0_1
        b1_0, b1_1 = b1_0, b1_1
        b2_0, b2_1 = b2_0, b2_1
        b3_0, b3_1 = b3_0, b3_1
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
    Cs[U(U(U(rw + 0) * 68) + U(cl + 0))] = c0_0_0
    Cs[U(U(U(rw + 0) * 68) + U(cl + 1))] = c0_0_1
    Cs[U(U(U(rw + 8) * 68) + U(cl + 0))] = c0_0_2
    Cs[U(U(U(rw + 8) * 68) + U(cl + 1))] = c0_0_3
    Cs[U(U(U(rw + 16) * 68) + U(cl + 0))] = c1_0_0
    Cs[U(U(U(rw + 16) * 68) + U(cl + 1))] = c1_0_1
    Cs[U(U(U(rw + 24) * 68) + U(cl + 0))] = c1_0_2
    Cs[U(U(U(rw + 24) * 68) + U(cl + 1))] = c1_0_3
    cl = U(U(wn0 + t2) + 8)
    c0 = U(n0 + cl)
    c0 = c0 if c0 < N else bmax
    c1 = U(c0 + 1)
    c1 = c1 if c1 < N else bmax
    Cs[U(U(U(rw + 0) * 68) + U(cl + 0))] = c0_1_0
    Cs[U(U(U(rw + 0) * 68) + U(cl + 1))] = c0_1_1
    Cs[U(U(U(rw + 8) * 68) + U(cl + 0))] = c0_1_2
    Cs[U(U(U(rw + 8) * 68) + U(cl + 1))] = c0_1_3
    Cs[U(U(U(rw + 16) * 68) + U(cl + 0))] = c1_1_0
    Cs[U(U(U(rw + 16) * 68) + U(cl + 1))] = c1_1_1
    Cs[U(U(U(rw + 24) * 68) + U(cl + 0))] = c1_1_2
    Cs[U(U(U(rw + 24) * 68) + U(cl + 1))] = c1_1_3
    cl = U(U(wn0 + t2) + 16)
    c0 = U(n0 + cl)
    c0 = c0 if c0 < N else bmax
    c1 = U(c0 + 1)
    c1 = c1 if c1 < N else bmax
    Cs[U(U(U(rw + 0) * 68) + U(cl + 0))] = c0_2_0
    Cs[U(U(U(rw + 0) * 68) + U(cl + 1))] = c0_2_1
    Cs[U(U(U(rw + 8) * 68) + U(cl + 0))] = c0_2_2
    Cs[U(U(U(rw + 8) * 68) + U(cl + 1))] = c0_2_3
    Cs[U(U(U(rw + 16) * 68) + U(cl + 0))] = c1_2_0
    Cs[U(U(U(rw + 16) * 68) + U(cl + 1))] = c1_2_1
    Cs[U(U(U(rw + 24) * 68) + U(cl + 0))] = c1_2_2
    Cs[U(U(U(rw + 24) * 68) + U(cl + 1))] = c1_2_3
    cl = U(U(wn0 + t2) + 24)
    c0 = U(n0 + cl)
    c0 = c0 if c0 < N else bmax
    c1 = U(c0 + 1)
    c1 = c1 if c1 < N else bmax
    Cs[U(U(U(rw + 0) * 68) + U(cl + 0))] = c0_3_0
    Cs[U(U(U(rw + 0) * 68) + U(cl + 1))] = c0_3_1
    Cs[U(U(U(rw + 8) * 68) + U(cl + 0))] = c0_3_2
    Cs[U(U(U(rw + 8) * 68) + U(cl + 1))] = c0_3_3
    Cs[U(U(U(rw + 16) * 68) + U(cl + 0))] = c1_3_0
    Cs[U(U(U(rw + 16) * 68) + U(cl + 1))] = c1_3_1
    Cs[U(U(U(rw + 24) * 68) + U(cl + 0))] = c1_3_2
    Cs[U(U(U(rw + 24) * 68) + U(cl + 1))] = c1_3_3
    cuda.syncthreads()
    if vec:
        for e in range(8):
            vi = U(tid + U(e * 128))
            rl = U(vi // 16)
            cl = U(U(vi % 16) * 4)
            row = U(U(m0 + 0) + rl)
            col = U(n0 + cl)
            if row < M and col < N:
                cb = U(U(bz * sC) + U(row * N))
                copy16(C, U(cb + col), Cs, U(U(rl * 68) + cl))
    else:
        for e in range(32):
            vi = U(tid + U(e * 128))
            rl = U(vi // 64)
            cl = U(U(vi % 64) * 1)
            row = U(U(m0 + 0) + rl)
            col = U(n0 + cl)
            if row < M and col < N:
                cb = U(U(bz * sC) + U(row * N))
                C[U(cb + col)] = Cs[U(U(rl * 68) + cl)]
