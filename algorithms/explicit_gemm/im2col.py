"""im2col + GEMM: forward and backward-weight convolution through an explicit column buffer.

With C' = C/groups, K' = K/groups, the column matrix of image n and group g is

    cols[n, g][(c, r, s), (p, q)] = x[n, g*C' + c, p*sh - ph + r*dh, q*sw - pw + s*dw]   (0 outside x)

(stored as cols[n, (g*C' + c, r, s), (p, q)]), and the ops are GEMMs of the shared kernel family
(:mod:`convlab.kernels.simt.gemm`):

    forward  y[n, g*K':(g+1)*K', :, :]  = W_g (K' x C'RS) @ cols[n, g] (C'RS x PQ)   (+ bias)
    wgrad    dW_g (K' x C'RS)           = sum_n dy[n, g*K':(g+1)*K'] (K' x PQ) @ cols[n, g]^T

Loop nest of ``run``:

    for each sub-batch of nb images (so that the column buffer fits the workspace limit):
        unfold: one thread per (n, c) and chunk of (p, q) writes its R*S column entries
                (convlab.kernels.conv.unfold)
        forward: one batched GEMM over (n, g)
        wgrad: one batch-reduce GEMM over g summing the nb images, its reduction split over k-splits
               whose partial products a second kernel adds in order into dw (accumulating after the
               first sub-batch)

A 1x1 kernel with stride 1 and no padding needs no column buffer: x[n, g] already is the (C' x HW)
column matrix. A 3D problem's columns hold its depth taps and output depths too (RS -> TRS, PQ -> DoPQ,
the same GEMMs); a 1D problem's 2D embedding unfolds along its width only. The column geometry and
workspace planning are shared with the col2im plugin (convlab.kernels.conv.columns).
"""
from __future__ import annotations

from convlab.kernels.conv.unfold import unfold
from convlab.kernels.data.splitk import sum_partials
from convlab.kernels.simt.gemm import Strided, Tile, gemm
from convlab.plugin.registry import register
from convlab.problem import Problem

from . import cost
from .common import ColumnGemmAlgorithm, Plan, lend_columns, pixels, taps


@register
class Im2col(ColumnGemmAlgorithm):
    """Unfold the input into columns, then one tiled GEMM per sub-batch."""

    name = "im2col"
    ops = frozenset({"forward", "wgrad"})
    priority = 10
    description = "im2col column buffer (sub-batched to the workspace limit) + tiled GEMM"
    cost_features = cost.features  # the column plan's GEMM, unfold / fold and split sum (cost.py)

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        tile, plan = self.plan(problem, config, workspace_limit)
        pr = problem
        with lend_columns(plan.cols, pr.dtype) as cols, lend_columns(plan.part, pr.dtype) as part:
            if pr.op == "wgrad" and pr.n == 0:
                _wgrad(pr, tile, plan, a, b, None, out, part, 0, 0)  # sum over no images: zeros
            n0 = 0
            while n0 < pr.n:
                nb = min(plan.nb, pr.n - n0)
                if not plan.pointwise:
                    unfold(pr, a, cols, n0, nb)
                if pr.op == "forward":
                    _forward(pr, tile, plan, b, bias, out, a if plan.pointwise else cols, n0, nb)
                else:
                    _wgrad(pr, tile, plan, a, b, cols, out, part, n0, nb)
                n0 += nb


def _forward(pr: Problem, tile: Tile, plan: Plan, w, bias, y, src, n0: int, nb: int) -> None:
    """y[n0:n0+nb] = W_g @ columns, batched over (image, group); ``src`` is x when pointwise."""
    kg, cg, pq = pr.k_per_group, pr.c_per_group, pixels(pr)
    crs = cg * taps(pr)
    per_image = pr.c * taps(pr) * pq
    cols = (Strided(src, pq, offset=n0 * per_image, outer=per_image, inner=crs * pq) if plan.pointwise
            else Strided(src, pq, outer=per_image, inner=crs * pq))
    gemm(Strided(w, crs, inner=kg * crs), cols,
         Strided(y, pq, offset=n0 * pr.k * pq, outer=pr.k * pq, inner=kg * pq), kg, pq, crs,
         batch=nb * pr.groups, split=pr.groups, tile=tile,
         bias=None if bias is None else Strided(bias, 1, inner=kg))


def _wgrad(pr: Problem, tile: Tile, plan: Plan, x, dy, cols, dw, part, n0: int, nb: int) -> None:
    """dw (+)= sum over images n0 .. n0+nb-1 of dy_g @ columns_g^T (accumulating after image 0)."""
    kg, pq = pr.k_per_group, pixels(pr)
    crs = pr.c_per_group * taps(pr)
    per_image = pr.c * taps(pr) * pq
    if plan.pointwise:
        src = Strided(x, pq, offset=n0 * per_image, inner=crs * pq, red=per_image)
    else:
        src = Strided(cols if cols is not None else x, pq, inner=crs * pq, red=per_image)
    grad = Strided(dy, pq, offset=n0 * pr.k * pq, inner=kg * pq, red=pr.k * pq)
    if plan.ksplit == 1:
        gemm(grad, src, Strided(dw, crs, inner=kg * crs), kg, crs, pq, trans_b=True,
             accumulate=n0 > 0, batch=pr.groups, split=pr.groups, nred=nb, tile=tile)
        return
    size = pr.k * crs
    gemm(grad, src, Strided(part, crs, inner=kg * crs, red=size), kg, crs, pq, trans_b=True,
         batch=pr.groups, split=pr.groups, nred=nb, tile=tile, ksplit=plan.ksplit)
    sum_partials(part, dw, plan.ksplit, accumulate=n0 > 0)
