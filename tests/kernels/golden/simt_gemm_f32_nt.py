def gemm(A, B, C, bias, M, N, K, lda, ldb, ldc, a_off, a_outer, a_inner, a_red, b_off, b_outer,
         b_inner, b_red, c_off, c_outer, c_inner, c_ks, nbatch, split, nred, tps, bias_off,
         bias_inner, has_bias, accumulate):
    As = cuda.shared.array(A_SMEM, nbtype, alignment=align)
    Bs = cuda.shared.array(B_SMEM, nbtype, alignment=align)
    tid = u32(cuda.threadIdx.x)
    tx = u32(tid % 16)
    ty = u32(tid // 16)
    m0 = u32(u32(cuda.blockIdx.y) * 128)
    n0 = u32(u32(cuda.blockIdx.x) * 64)
    z = u32(cuda.blockIdx.z)
    ks = u32(z // nbatch)  # k-split index
    zb = u32(z - u32(ks * nbatch))  # batch index
    zo = u32(zb // split)
    zi = u32(zb - u32(zo * split))
    ktiles = u32(u32(K + 7) // 8)
    t_lo = u32(min(u32(ks * tps), u32(ktiles * nred)))  # this k-split's tiles: [t_lo, t_hi)
    t_hi = u32(min(u32(t_lo + tps), u32(ktiles * nred)))
    r0 = u32(0)
    if t_lo > 0:
        r0 = u32(t_lo // ktiles)
    k0 = u32(u32(t_lo - u32(r0 * ktiles)) * 8)  # k offset of the next tile to load, in matrix r
    a_pos = u32(a_off + u32(zo * a_outer) + u32(zi * a_inner) + u32(r0 * a_red))  # matrix (z, r) in A
    b_pos = u32(b_off + u32(zo * b_outer) + u32(zi * b_inner) + u32(r0 * b_red))
    a_frag = u32(ty * 4)
    b_frag = u32(tx * 4)
    c0_0 = c0_1 = c0_2 = c0_3 = zero
    c1_0 = c1_1 = c1_2 = c1_3 = zero
    c2_0 = c2_1 = c2_2 = c2_3 = zero
    c3_0 = c3_1 = c3_2 = c3_3 = zero
    c4_0 = c4_1 = c4_2 = c4_3 = zero
    c5_0 = c5_1 = c5_2 = c5_3 = zero
    c6_0 = c6_1 = c6_2 = c6_3 = zero
    c7_0 = c7_1 = c7_2 = c7_3 = zero
    a_f0 = u32(tid % 8)
    a_s0 = u32(tid // 8)
    a_k0 = a_f0
    a_x0 = u32(a_s0 + 0)
    a_ok0 = u32(m0 + a_x0) < M
    a_o0 = u32(u32(u32(m0 + a_x0) * lda) + a_k0)
    a_sh0 = u32(u32(a_k0 * 132) + a_x0)
    a_k1 = a_f0
    a_x1 = u32(a_s0 + 32)
    a_ok1 = u32(m0 + a_x1) < M
    a_o1 = u32(u32(u32(m0 + a_x1) * lda) + a_k1)
    a_sh1 = u32(u32(a_k1 * 132) + a_x1)
    a_k2 = a_f0
    a_x2 = u32(a_s0 + 64)
    a_ok2 = u32(m0 + a_x2) < M
    a_o2 = u32(u32(u32(m0 + a_x2) * lda) + a_k2)
    a_sh2 = u32(u32(a_k2 * 132) + a_x2)
    a_k3 = a_f0
    a_x3 = u32(a_s0 + 96)
    a_ok3 = u32(m0 + a_x3) < M
    a_o3 = u32(u32(u32(m0 + a_x3) * lda) + a_k3)
    a_sh3 = u32(u32(a_k3 * 132) + a_x3)
    b_f0 = u32(tid % 8)
    b_s0 = u32(tid // 8)
    b_k0 = b_f0
    b_x0 = u32(b_s0 + 0)
    b_ok0 = u32(n0 + b_x0) < N
    b_o0 = u32(u32(u32(n0 + b_x0) * ldb) + b_k0)
    b_sh0 = u32(u32(b_k0 * 68) + b_x0)
    b_k1 = b_f0
    b_x1 = u32(b_s0 + 32)
    b_ok1 = u32(n0 + b_x1) < N
    b_o1 = u32(u32(u32(n0 + b_x1) * ldb) + b_k1)
    b_sh1 = u32(u32(b_k1 * 68) + b_x1)
    t = t_lo
    while True:
        if t < t_hi:  # global -> registers: tile t
            a_t = u32(a_pos + k0)
            ga0 = zero
            if a_ok0 and u32(k0 + a_k0) < K:
                ga0 = A[u32(a_t + a_o0)]
            ga1 = zero
            if a_ok1 and u32(k0 + a_k1) < K:
                ga1 = A[u32(a_t + a_o1)]
            ga2 = zero
            if a_ok2 and u32(k0 + a_k2) < K:
                ga2 = A[u32(a_t + a_o2)]
            ga3 = zero
            if a_ok3 and u32(k0 + a_k3) < K:
                ga3 = A[u32(a_t + a_o3)]
            b_t = u32(b_pos + k0)
            gb0 = zero
            if b_ok0 and u32(k0 + b_k0) < K:
                gb0 = B[u32(b_t + b_o0)]
            gb1 = zero
            if b_ok1 and u32(k0 + b_k1) < K:
                gb1 = B[u32(b_t + b_o1)]
            k0 = u32(k0 + 8)
            if k0 >= K:  # the next matrix of the batch-reduce
                k0 = u32(0)
                a_pos = u32(a_pos + a_red)
                b_pos = u32(b_pos + b_red)
        if t > t_lo:  # tile t - 1: shared -> fragments -> FMAs
            a_at = u32(u32(u32(t - 1) & 1) * 1056 + a_frag)
            b_at = u32(u32(u32(t - 1) & 1) * 544 + b_frag)
            a_end = u32(a_at + 1056)
            while a_at < a_end:  # 2 of the BK=8 steps per iteration
                a0, a1, a2, a3 = load4(As, a_at + 0)
                a4, a5, a6, a7 = load4(As, a_at + 64)
                b0, b1, b2, b3 = load4(Bs, b_at + 0)
                c0_0 += a0 * b0
                c0_1 += a0 * b1
                c0_2 += a0 * b2
                c0_3 += a0 * b3
                c1_0 += a1 * b0
                c1_1 += a1 * b1
                c1_2 += a1 * b2
                c1_3 += a1 * b3
                c2_0 += a2 * b0
                c2_1 += a2 * b1
                c2_2 += a2 * b2
                c2_3 += a2 * b3
                c3_0 += a3 * b0
                c3_1 += a3 * b1
                c3_2 += a3 * b2
                c3_3 += a3 * b3
                c4_0 += a4 * b0
                c4_1 += a4 * b1
                c4_2 += a4 * b2
                c4_3 += a4 * b3
                c5_0 += a5 * b0
                c5_1 += a5 * b1
                c5_2 += a5 * b2
                c5_3 += a5 * b3
                c6_0 += a6 * b0
                c6_1 += a6 * b1
                c6_2 += a6 * b2
                c6_3 += a6 * b3
                c7_0 += a7 * b0
                c7_1 += a7 * b1
                c7_2 += a7 * b2
                c7_3 += a7 * b3
                a0, a1, a2, a3 = load4(As, a_at + 132)
                a4, a5, a6, a7 = load4(As, a_at + 196)
                b0, b1, b2, b3 = load4(Bs, b_at + 68)
                c0_0 += a0 * b0
                c0_1 += a0 * b1
                c0_2 += a0 * b2
                c0_3 += a0 * b3
                c1_0 += a1 * b0
                c1_1 += a1 * b1
                c1_2 += a1 * b2
                c1_3 += a1 * b3
                c2_0 += a2 * b0
                c2_1 += a2 * b1
                c2_2 += a2 * b2
                c2_3 += a2 * b3
                c3_0 += a3 * b0
                c3_1 += a3 * b1
                c3_2 += a3 * b2
                c3_3 += a3 * b3
                c4_0 += a4 * b0
                c4_1 += a4 * b1
                c4_2 += a4 * b2
                c4_3 += a4 * b3
                c5_0 += a5 * b0
                c5_1 += a5 * b1
                c5_2 += a5 * b2
                c5_3 += a5 * b3
                c6_0 += a6 * b0
                c6_1 += a6 * b1
                c6_2 += a6 * b2
                c6_3 += a6 * b3
                c7_0 += a7 * b0
                c7_1 += a7 * b1
                c7_2 += a7 * b2
                c7_3 += a7 * b3
                a_at = u32(a_at + 264)
                b_at = u32(b_at + 136)
        if t < t_hi:  # registers -> shared buffer t % 2
            a_at = u32(u32(t & 1) * 1056)
            b_at = u32(u32(t & 1) * 544)
            As[a_at + a_sh0] = ga0
            As[a_at + a_sh1] = ga1
            As[a_at + a_sh2] = ga2
            As[a_at + a_sh3] = ga3
            Bs[b_at + b_sh0] = gb0
            Bs[b_at + b_sh1] = gb1
        cuda.syncthreads()
        if t >= t_hi:
            break
        t = u32(t + 1)
    c_pos = u32(c_off + u32(zo * c_outer) + u32(zi * c_inner) + u32(ks * c_ks))
    bias_pos = u32(bias_off + u32(zi * bias_inner))
    col0 = u32(n0 + b_frag + 0)
    col1 = u32(n0 + b_frag + 1)
    col2 = u32(n0 + b_frag + 2)
    col3 = u32(n0 + b_frag + 3)
    row = u32(m0 + a_frag + 0)
    if row < M:
        extra = zero
        if has_bias:
            extra = bias[u32(bias_pos + row)]
        at = u32(c_pos + u32(row * ldc))
        store(C, at, col0, N, c0_0 + extra, accumulate)
        store(C, at, col1, N, c0_1 + extra, accumulate)
        store(C, at, col2, N, c0_2 + extra, accumulate)
        store(C, at, col3, N, c0_3 + extra, accumulate)
    row = u32(m0 + a_frag + 1)
    if row < M:
        extra = zero
        if has_bias:
            extra = bias[u32(bias_pos + row)]
        at = u32(c_pos + u32(row * ldc))
        store(C, at, col0, N, c1_0 + extra, accumulate)
        store(C, at, col1, N, c1_1 + extra, accumulate)
        store(C, at, col2, N, c1_2 + extra, accumulate)
        store(C, at, col3, N, c1_3 + extra, accumulate)
    row = u32(m0 + a_frag + 2)
    if row < M:
        extra = zero
        if has_bias:
            extra = bias[u32(bias_pos + row)]
        at = u32(c_pos + u32(row * ldc))
        store(C, at, col0, N, c2_0 + extra, accumulate)
        store(C, at, col1, N, c2_1 + extra, accumulate)
        store(C, at, col2, N, c2_2 + extra, accumulate)
        store(C, at, col3, N, c2_3 + extra, accumulate)
    row = u32(m0 + a_frag + 3)
    if row < M:
        extra = zero
        if has_bias:
            extra = bias[u32(bias_pos + row)]
        at = u32(c_pos + u32(row * ldc))
        store(C, at, col0, N, c3_0 + extra, accumulate)
        store(C, at, col1, N, c3_1 + extra, accumulate)
        store(C, at, col2, N, c3_2 + extra, accumulate)
        store(C, at, col3, N, c3_3 + extra, accumulate)
    row = u32(m0 + a_frag + 64)
    if row < M:
        extra = zero
        if has_bias:
            extra = bias[u32(bias_pos + row)]
        at = u32(c_pos + u32(row * ldc))
        store(C, at, col0, N, c4_0 + extra, accumulate)
        store(C, at, col1, N, c4_1 + extra, accumulate)
        store(C, at, col2, N, c4_2 + extra, accumulate)
        store(C, at, col3, N, c4_3 + extra, accumulate)
    row = u32(m0 + a_frag + 65)
    if row < M:
        extra = zero
        if has_bias:
            extra = bias[u32(bias_pos + row)]
        at = u32(c_pos + u32(row * ldc))
        store(C, at, col0, N, c5_0 + extra, accumulate)
        store(C, at, col1, N, c5_1 + extra, accumulate)
        store(C, at, col2, N, c5_2 + extra, accumulate)
        store(C, at, col3, N, c5_3 + extra, accumulate)
    row = u32(m0 + a_frag + 66)
    if row < M:
        extra = zero
        if has_bias:
            extra = bias[u32(bias_pos + row)]
        at = u32(c_pos + u32(row * ldc))
        store(C, at, col0, N, c6_0 + extra, accumulate)
        store(C, at, col1, N, c6_1 + extra, accumulate)
        store(C, at, col2, N, c6_2 + extra, accumulate)
        store(C, at, col3, N, c6_3 + extra, accumulate)
    row = u32(m0 + a_frag + 67)
    if row < M:
        extra = zero
        if has_bias:
            extra = bias[u32(bias_pos + row)]
        at = u32(c_pos + u32(row * ldc))
        store(C, at, col0, N, c7_0 + extra, accumulate)
        store(C, at, col1, N, c7_1 + extra, accumulate)
        store(C, at, col2, N, c7_2 + extra, accumulate)
        store(C, at, col3, N, c7_3 + extra, accumulate)
