"""The direct convolution's 3D kernels: one thread per output element (NCDHW x KCTRS), the loop nests
of algorithms/direct.py with a depth axis (T taps, stride sd, padding pd, dilation dd):

    forward  y[n,k,o,p,q]  = bias[k] + sum_{c<C', t, r, s} x[n, g*C'+c, o*sd-pd+t*dd, p*sh-ph+r*dh,
                                                             q*sw-pw+s*dw] * w[k,c,t,r,s]
    dgrad    dx[n,c,z,h,w] = bias[c] + sum over (k < K', t, r, s) whose tap lands on (z, h, w) of
                             dy[n, g*K'+k, o, p, q] * w[g*K'+k, c mod C', t, r, s]
    wgrad    part[j,k,c,t,r,s] = sum over (n, o, p, q) in chunk j of x[n, g*C'+c, z, h, w] * dy[n,k,o,p,q]

Geometry travels as one int tuple per launch, ``geo`` = (sd, sh, sw, pd, ph, pw, dd, dh, dw).
"""
from __future__ import annotations

import functools

import numpy as np

from convlab import runtime
from convlab.runtime import cuda


@functools.cache
def kernels3d(dtype: str):
    """(forward, dgrad, wgrad_partial) for values of ``dtype`` (the accumulator's zero a constant)."""
    zero = np.dtype(dtype).type(0)

    @runtime.jit
    def forward(x, w, bias, y, sd, sh, sw, pd, ph, pw, dd, dh, dw, has_bias):
        idx = cuda.grid(1)
        n_, k_, o_, p_, q_ = y.shape
        if idx >= n_ * k_ * o_ * p_ * q_:
            return
        q = idx % q_
        i = idx // q_
        p = i % p_
        i = i // p_
        o = i % o_
        i = i // o_
        k = i % k_
        n = i // k_
        cpg, t_, r_, s_ = w.shape[1], w.shape[2], w.shape[3], w.shape[4]
        c0 = (k // (k_ // (x.shape[1] // cpg))) * cpg
        acc = zero
        for c in range(cpg):
            for t in range(t_):
                z = o * sd - pd + t * dd
                if 0 <= z < x.shape[2]:
                    for r in range(r_):
                        h = p * sh - ph + r * dh
                        if 0 <= h < x.shape[3]:
                            for s in range(s_):
                                ww = q * sw - pw + s * dw
                                if 0 <= ww < x.shape[4]:
                                    acc += x[n, c0 + c, z, h, ww] * w[k, c, t, r, s]
        if has_bias:
            acc += bias[k]
        y[n, k, o, p, q] = acc

    @runtime.jit
    def dgrad(dy, w, bias, dx, sd, sh, sw, pd, ph, pw, dd, dh, dw, has_bias):
        idx = cuda.grid(1)
        n_, c_, z_, h_, w_ = dx.shape
        if idx >= n_ * c_ * z_ * h_ * w_:
            return
        x_w = idx % w_
        i = idx // w_
        x_h = i % h_
        i = i // h_
        x_z = i % z_
        i = i // z_
        c = i % c_
        n = i // c_
        k_, cpg, t_, r_, s_ = w.shape
        kpg = k_ // (c_ // cpg)
        g = c // cpg
        cl = c - g * cpg
        acc = zero
        for t in range(t_):
            zz = x_z + pd - t * dd
            if zz >= 0 and zz % sd == 0 and zz // sd < dy.shape[2]:
                o = zz // sd
                for r in range(r_):
                    hh = x_h + ph - r * dh
                    if hh >= 0 and hh % sh == 0 and hh // sh < dy.shape[3]:
                        p = hh // sh
                        for s in range(s_):
                            wq = x_w + pw - s * dw
                            if wq >= 0 and wq % sw == 0 and wq // sw < dy.shape[4]:
                                q = wq // sw
                                for kk in range(kpg):
                                    k = g * kpg + kk
                                    acc += dy[n, k, o, p, q] * w[k, cl, t, r, s]
        if has_bias:
            acc += bias[c]
        dx[n, c, x_z, x_h, x_w] = acc

    @runtime.jit
    def wgrad_partial(x, dy, part, sd, sh, sw, pd, ph, pw, dd, dh, dw, chunk):
        idx = cuda.grid(1)
        splits, k_, cpg, t_, r_, s_ = part.shape
        if idx >= splits * k_ * cpg * t_ * r_ * s_:
            return
        s = idx % s_
        i = idx // s_
        r = i % r_
        i = i // r_
        t = i % t_
        i = i // t_
        c = i % cpg
        i = i // cpg
        k = i % k_
        j = i // k_
        n_, o_, p_, q_ = dy.shape[0], dy.shape[2], dy.shape[3], dy.shape[4]
        ci = (k // (k_ // (x.shape[1] // cpg))) * cpg + c
        acc = zero
        stop = min((j + 1) * chunk, n_ * o_ * p_ * q_)
        for m in range(j * chunk, stop):
            q = m % q_
            p = (m // q_) % p_
            o = (m // (q_ * p_)) % o_
            n = m // (q_ * p_ * o_)
            z = o * sd - pd + t * dd
            h = p * sh - ph + r * dh
            ww = q * sw - pw + s * dw
            if 0 <= z < x.shape[2] and 0 <= h < x.shape[3] and 0 <= ww < x.shape[4]:
                acc += x[n, ci, z, h, ww] * dy[n, k, o, p, q]
        part[j, k, c, t, r, s] = acc

    return forward, dgrad, wgrad_partial
