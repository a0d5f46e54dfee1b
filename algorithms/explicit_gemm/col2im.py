"""GEMM + col2im: backward-data convolution (and so conv_transpose2d) through a column buffer.

With C' = C/groups, K' = K/groups and the column layout of convlab.kernels.conv.columns (shared with
im2col):

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
needs no column buffer: the GEMM writes dx directly, bias included. A 3D problem's columns are
[n, (c, t, r, s), (o, p, q)], folded by the same kernel with a depth axis.
"""
from __future__ import annotations

from convlab.kernels.conv.fold import fold
from convlab.kernels.simt.gemm import Strided, Tile, gemm
from convlab.plugin.registry import register
from convlab.problem import Problem

from . import cost
from .common import ColumnGemmAlgorithm, Plan, lend_columns, pixels, taps


@register
class Col2im(ColumnGemmAlgorithm):
    """One GEMM into columns, then a deterministic gather back into dx."""

    name = "col2im"
    ops = frozenset({"dgrad"})
    priority = 10
    description = "tiled GEMM W^T x dy into columns (sub-batched to the workspace limit) + col2im gather"
    cost_features = cost.features  # the column plan's GEMM, unfold / fold and split sum (cost.py)

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
    kg, pq = pr.k_per_group, pixels(pr)
    crs = pr.c_per_group * taps(pr)
    per_image = pr.c * taps(pr) * pq
    if plan.pointwise:  # dx[n, g] (C' x HW) directly, with the transpose's bias
        out = Strided(dst, pq, offset=n0 * per_image, outer=per_image, inner=crs * pq)
        row_bias = None if bias is None else Strided(bias, 1, inner=crs)
    else:
        out, row_bias = Strided(dst, pq, outer=per_image, inner=crs * pq), None
    gemm(Strided(w, crs, inner=kg * crs), Strided(dy, pq, offset=n0 * pr.k * pq, outer=pr.k * pq,
                                                  inner=kg * pq),
         out, crs, pq, kg, trans_a=True, batch=nb * pr.groups, split=pr.groups, tile=tile,
         bias=row_bias)
