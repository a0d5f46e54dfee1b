"""GEMM + col2im: backward-data convolution (and so conv_transpose2d) through a column buffer.

With C' = C/groups, K' = K/groups and the column layout of ``_columns`` (shared with im2col):

    cols[n, g] (C'RS x PQ)   = W_g^T (C'RS x K') @ dy[n, g*K':(g+1)*K'] (K' x PQ)     (one GEMM)
    dx[n, c, h, w]           = bias[c] + sum over taps (r, s) with h + ph - r*dh = p*sh, w + pw - s*dw
                               = q*sw, 0 <= p < P, 0 <= q < Q of cols[n, (c, r, s), (p, q)]   (fold)

Loop nest of ``run``:

    for each sub-batch of nb images (so that the column buffer fits the workspace limit):
        GEMM: one batched launch over (n, g), W read transposed
        fold: one thread per (n, c, h, w) gathers its <= R*S contributions in a fixed order (no
              atomics: deterministic) and adds the transpose's bias

P and Q are dy's sizes, which for a conv_transpose2d with output_padding >= stride may be smaller than
the forward formula gives; the fold checks p < P and q < Q. A 1x1 kernel with stride 1 and no padding
needs no column buffer: the GEMM writes dx directly, bias included.
"""
from __future__ import annotations

import functools

import numpy as np

from convlab import Problem, register, runtime
from convlab.kernels.gemm import Strided, Tile, gemm
from convlab.kernels.intrinsics import u32
from convlab.runtime import cuda

from ._columns import ColumnGemmAlgorithm, Plan, flat_launches, lend_columns


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


@register
class Col2im(ColumnGemmAlgorithm):
    """One GEMM into columns, then a deterministic gather back into dx."""

    name = "col2im"
    ops = frozenset({"dgrad"})
    priority = 10
    description = "tiled GEMM W^T x dy into columns (sub-batched to the workspace limit) + col2im gather"

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        tile, plan = self.plan(problem, config, workspace_limit)
        with lend_columns(plan.cols, problem.dtype) as cols:
            n0 = 0
            while n0 < problem.n:
                nb = min(plan.nb, problem.n - n0)
                _columns(problem, tile, plan, a, b, bias, out if plan.pointwise else cols, n0, nb)
                if not plan.pointwise:
                    fold(problem, cols, out, bias, n0, nb)
                n0 += nb


def _columns(pr: Problem, tile: Tile, plan: Plan, dy, w, bias, dst, n0: int, nb: int) -> None:
    """dst = W_g^T @ dy[n, g] for images n0 .. n0+nb-1: the column buffer, or dx when pointwise."""
    kg, pq = pr.k_per_group, pr.p * pr.q
    crs = pr.c_per_group * pr.r * pr.s
    per_image = pr.c * pr.r * pr.s * pq
    if plan.pointwise:  # dx[n, g] (C' x HW) directly, with the transpose's bias
        out = Strided(dst, pq, offset=n0 * per_image, outer=per_image, inner=crs * pq)
        row_bias = None if bias is None else Strided(bias, 1, inner=crs)
    else:
        out, row_bias = Strided(dst, pq, outer=per_image, inner=crs * pq), None
    gemm(Strided(w, crs, inner=kg * crs), Strided(dy, pq, offset=n0 * pr.k * pq, outer=pr.k * pq,
                                                  inner=kg * pq),
         out, crs, pq, kg, trans_a=True, batch=nb * pr.groups, split=pr.groups, tile=tile,
         bias=row_bias)
