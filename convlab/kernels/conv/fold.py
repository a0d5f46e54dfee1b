"""The fold (col2im) kernel: the column buffer of a GEMM gathered back into dx, with the bias.

    dx[n, c, h, w] = bias[c] + sum over (r, s) with h = p*sh - ph + r*dh, w = q*sw - pw + s*dw of
                     cols[n][(c, r, s), (p, q)]          (p, q integer and inside the output)

One thread per (row, pixel) of dx in grid-stride launches (convlab.kernels.conv.columns.flat_launches),
summing its taps in a fixed order (deterministic). ``pixel_major`` columns are [(p, q), (c, r, s)] per
image (the tensor-core plugin's strided dgrad: dy's NHWC rows times the filter).
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
def _fold_kernel(dtype: str):
    zero = np.dtype(dtype).type(0)

    @runtime.jit
    def fold(cols, dx, bias, dx_off, cols_off, pairs, C, H, W, R, S, P, Q, sh, sw, ph, pw, dh, dw, has_bias,
             cst, tst, pst):
        """For pairs t = row*H*W + hw < ``pairs`` (row = n*C + c counted from dx_off and cols_off):
        dx[dx_off + t] = (bias[c]) + the sum of its taps in cols, the tap (c, r, s) of pixel (p, q) of
        image n at cols_off + n*C*R*S*P*Q + c*cst + (r*S + s)*tst + (p*Q + q)*pst."""
        t = u32(u32(u32(cuda.blockIdx.x) * u32(cuda.blockDim.x)) + u32(cuda.threadIdx.x))
        step = u32(u32(cuda.gridDim.x) * u32(cuda.blockDim.x))
        npq = u32(P * Q)
        while t < pairs:
            row = u32(t // u32(H * W))
            hw = u32(t - u32(row * u32(H * W)))
            h = u32(hw // W)
            hp = u32(h + ph)  # = p*sh + r*dh for a contributing tap
            wp = u32(u32(hw - u32(h * W)) + pw)
            acc = zero
            n = u32(row // C)
            src = u32(cols_off + u32(u32(u32(n * u32(C * R * S)) * npq) + u32(u32(row - u32(n * C)) * cst)))
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
                            tap = u32(u32(u32(r * S) + s) * tst)
                            acc += cols[u32(src + tap + u32(u32(u32(p * Q) + q) * pst))]
                        s = u32(s + 1)
                r = u32(r + 1)
            if has_bias:
                acc += bias[u32(row % C)]
            dx[u32(dx_off + t)] = acc
            if u32(pairs - t) <= step:  # this thread's last pair (t + step could wrap past 2**32)
                break
            t = u32(t + step)

    return fold


def fold(problem: Problem, cols, dx, bias, n0: int, nb: int, pixel_major: bool = False) -> None:
    """Gather the column buffer of images n0 .. n0+nb-1 into ``dx`` (N, C, H, W), adding ``bias``.
    ``cols`` per image: [(c, r, s), (p, q)] (this plugin's GEMM), or ``pixel_major`` [(p, q), (c, r, s)]
    (the tensor-core plugin's strided dgrad: dy's NHWC rows times the filter)."""
    pr = problem
    (sh, sw), (ph, pw), (dh, dw) = pr.stride, pr.padding, pr.dilation
    has_bias = bias is not None
    flat_dx = dx.reshape((dx.size,))
    u = u32
    kernel = _fold_kernel(pr.dtype)
    rs, pq = pr.r * pr.s, pr.p * pr.q
    strides = (u(rs), u(1), u(pr.c * rs)) if pixel_major else (u(rs * pq), u(pq), u(1))  # c, tap, pixel
    for r0, rows, blocks, threads in flat_launches(nb * pr.c, pr.h * pr.w, whole=pr.c):  # whole images
        kernel[blocks, threads](cols, flat_dx, bias if has_bias else flat_dx,
                                u((n0 * pr.c + r0) * pr.h * pr.w), u(r0 * pr.r * pr.s * pr.p * pr.q),
                                u(rows * pr.h * pr.w), u(pr.c), u(pr.h), u(pr.w), u(pr.r), u(pr.s), u(pr.p),
                                u(pr.q), u(sh), u(sw), u(ph), u(pw), u(dh), u(dw), u(has_bias), *strides)
