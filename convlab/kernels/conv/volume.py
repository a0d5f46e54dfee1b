"""The 3D column kernels: vol2col (unfold of a volume) and col2vol (its fold), for the explicit-GEMM
plugins on NCDHW problems. Column layout, per image n (C' = C/groups, the 2D layout with a depth tap t
and an output depth o):

    cols[n][(g*C' + c, t, r, s), (o, p, q)] = x[n, g*C' + c, o*sd - pd + t*dd, p*sh - ph + r*dh,
                                                q*sw - pw + s*dw]          (0 outside x)

so image n, group g is a (C'TRS x DoPQ) matrix and the GEMMs of convlab.kernels.conv.columns hold with
RS -> TRS and PQ -> DoPQ. Both kernels are grid-stride launches of one thread per (row, pixel) pair
(:func:`convlab.kernels.conv.columns.flat_launches`) with 32-bit indices:

    vol2col  row = (n, c), pixel = (o, p, q):  for t, r, s: cols[...] = x[...] or 0
    col2vol  row = (n, c), pixel = (z, h, w):  dx[...] = bias[c] + its taps' column entries, summed in a
             fixed order (no atomics: deterministic)

Geometry arguments: C, D, H, W, T, R, S, Do, P, Q, then strides, paddings, dilations (depth first).
"""
from __future__ import annotations

import functools

import numpy as np

from convlab import runtime
from convlab.kernels.arch.intrinsics import u32
from convlab.kernels.conv.columns import flat_launches
from convlab.problem import Problem
from convlab.runtime import cuda


@functools.cache
def _vol2col_kernel(dtype: str):
    zero = np.dtype(dtype).type(0)

    @runtime.jit
    def vol2col(x, cols, x_off, pairs, C, D, H, W, T, R, S, O, P, Q, sd, sh, sw, pd, ph, pw, dd, dh, dw):
        """For pairs i = row*O*P*Q + opq < ``pairs`` (row = n*C + c counted from x_off): the T*R*S column
        entries of (row, opq) at cols[n*C*T*R*S*OPQ + ((c*T + t)*R + r)*S + s)*OPQ + opq]."""
        i = u32(u32(u32(cuda.blockIdx.x) * u32(cuda.blockDim.x)) + u32(cuda.threadIdx.x))
        step = u32(u32(cuda.gridDim.x) * u32(cuda.blockDim.x))
        npx = u32(u32(O * P) * Q)
        while i < pairs:
            row = u32(i // npx)
            opq = u32(i - u32(row * npx))
            o = u32(opq // u32(P * Q))
            pq = u32(opq - u32(o * u32(P * Q)))
            p = u32(pq // Q)
            q = u32(pq - u32(p * Q))
            src = u32(x_off + u32(row * u32(u32(D * H) * W)))
            dst = u32(u32(row * u32(u32(T * R) * S)) * npx + opq)
            t = u32(0)
            while t < T:
                z = u32(u32(o * sd) + u32(t * dd))  # z + pd
                r = u32(0)
                while r < R:
                    h = u32(u32(p * sh) + u32(r * dh))
                    s = u32(0)
                    while s < S:
                        w = u32(u32(q * sw) + u32(s * dw))
                        v = zero
                        if z >= pd and u32(z - pd) < D and h >= ph and u32(h - ph) < H and w >= pw \
                                and u32(w - pw) < W:
                            v = x[u32(src + u32(u32(u32(u32(z - pd) * H) + u32(h - ph)) * W) + u32(w - pw))]
                        cols[dst] = v
                        dst = u32(dst + npx)
                        s = u32(s + 1)
                    r = u32(r + 1)
                t = u32(t + 1)
            if u32(pairs - i) <= step:  # this thread's last pair (i + step could wrap past 2**32)
                break
            i = u32(i + step)

    return vol2col


@functools.cache
def _col2vol_kernel(dtype: str):
    zero = np.dtype(dtype).type(0)

    @runtime.jit
    def col2vol(cols, dx, bias, dx_off, cols_off, pairs, C, D, H, W, T, R, S, O, P, Q, sd, sh, sw, pd, ph,
                pw, dd, dh, dw, has_bias):
        """For pairs i = row*D*H*W + zhw < ``pairs`` (row = n*C + c counted from dx_off and cols_off):
        dx[dx_off + i] = (bias[c]) + the column entries of its taps (vol2col's layout)."""
        i = u32(u32(u32(cuda.blockIdx.x) * u32(cuda.blockDim.x)) + u32(cuda.threadIdx.x))
        step = u32(u32(cuda.gridDim.x) * u32(cuda.blockDim.x))
        npx = u32(u32(O * P) * Q)
        nvox = u32(u32(D * H) * W)
        while i < pairs:
            row = u32(i // nvox)
            zhw = u32(i - u32(row * nvox))
            z = u32(zhw // u32(H * W))
            hw = u32(zhw - u32(z * u32(H * W)))
            h = u32(hw // W)
            zp = u32(z + pd)  # = o*sd + t*dd for a contributing tap
            hp = u32(h + ph)
            wp = u32(u32(hw - u32(h * W)) + pw)
            src = u32(cols_off + u32(u32(row * u32(u32(T * R) * S)) * npx))
            acc = zero
            t = u32(0)
            while t < T and u32(t * dd) <= zp:
                zz = u32(zp - u32(t * dd))
                o = u32(zz // sd)
                if u32(o * sd) == zz and o < O:
                    r = u32(0)
                    while r < R and u32(r * dh) <= hp:
                        hh = u32(hp - u32(r * dh))
                        p = u32(hh // sh)
                        if u32(p * sh) == hh and p < P:
                            s = u32(0)
                            while s < S and u32(s * dw) <= wp:
                                ww = u32(wp - u32(s * dw))
                                q = u32(ww // sw)
                                if u32(q * sw) == ww and q < Q:
                                    tap = u32(u32(u32(u32(t * R) + r) * S) + s)
                                    acc += cols[u32(src + u32(tap * npx) + u32(u32(u32(o * P) + p) * Q) + q)]
                                s = u32(s + 1)
                        r = u32(r + 1)
                t = u32(t + 1)
            if has_bias:
                acc += bias[u32(row % C)]
            dx[u32(dx_off + i)] = acc
            if u32(pairs - i) <= step:
                break
            i = u32(i + step)

    return col2vol


def _geometry(pr: Problem) -> tuple:
    return tuple(u32(v) for v in (pr.c, pr.d, pr.h, pr.w, pr.t, pr.r, pr.s, pr.do, pr.p, pr.q,
                                  *pr.strides, *pr.paddings, *pr.dilations))


def vol2col(problem: Problem, x, cols, n0: int, nb: int) -> None:
    """Write the column buffer cols[n - n0, (c, t, r, s), (o, p, q)] of images n0 .. n0+nb-1 of ``x``
    (N, C, D, H, W)."""
    pr = problem
    kernel = _vol2col_kernel(pr.dtype)
    flat_x = x.reshape((x.size,))
    npx, vox, taps = pr.do * pr.p * pr.q, pr.d * pr.h * pr.w, pr.t * pr.r * pr.s
    for r0, rows, blocks, threads in flat_launches(nb * pr.c, npx * taps, whole=pr.c):
        kernel[blocks, threads](flat_x, cols[r0 * taps * npx:], u32((n0 * pr.c + r0) * vox), u32(rows * npx),
                                *_geometry(pr))


def col2vol(problem: Problem, cols, dx, bias, n0: int, nb: int) -> None:
    """Gather vol2col-layout columns of images n0 .. n0+nb-1 into ``dx`` (N, C, D, H, W), adding
    ``bias`` (C,) when given."""
    pr = problem
    kernel = _col2vol_kernel(pr.dtype)
    flat_dx = dx.reshape((dx.size,))
    npx, vox, taps = pr.do * pr.p * pr.q, pr.d * pr.h * pr.w, pr.t * pr.r * pr.s
    has_bias = bias is not None
    for r0, rows, blocks, threads in flat_launches(nb * pr.c, vox, whole=pr.c):
        kernel[blocks, threads](cols, flat_dx, bias if has_bias else flat_dx, u32((n0 * pr.c + r0) * vox),
                                u32(r0 * taps * npx), u32(rows * vox), *_geometry(pr), u32(has_bias))
