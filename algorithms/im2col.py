"""im2col + GEMM: forward and backward-weight convolution through an explicit column buffer.

With C' = C/groups, K' = K/groups, the column matrix of image n and group g is

    cols[n, g][(c, r, s), (p, q)] = x[n, g*C' + c, p*sh - ph + r*dh, q*sw - pw + s*dw]   (0 outside x)

(stored as cols[n, (g*C' + c, r, s), (p, q)]), and the ops are GEMMs of the shared kernel family
(:mod:`convlab.gemm`):

    forward  y[n, g*K':(g+1)*K', :, :]  = W_g (K' x C'RS) @ cols[n, g] (C'RS x PQ)   (+ bias)
    wgrad    dW_g (K' x C'RS)           = sum_n dy[n, g*K':(g+1)*K'] (K' x PQ) @ cols[n, g]^T

Loop nest of ``run``:

    for each sub-batch of nb images (so that the column buffer fits the workspace limit):
        unfold: one thread per (n, c, p, q) writes its R*S column entries
        forward: one batched GEMM over (n, g)
        wgrad: one batch-reduce GEMM over g summing the nb images, its reduction split over k-splits
               whose partial products a second kernel adds in order into dw (accumulating after the
               first sub-batch)

A 1x1 kernel with stride 1 and no padding needs no column buffer: x[n, g] already is the (C' x HW)
column matrix. The column geometry and workspace planning are shared with the col2im plugin.
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass

import numpy as np

from convlab import Algorithm, Config, Problem, Verdict, register, runtime
from convlab.gemm import TILES, Strided, Tile, gemm, pick_tiles, sum_partials
from convlab.runtime import cuda
from convlab.scratch import scratch

U = np.uint32
THREADS = 32 if runtime.SIMULATOR else 256  # threads per block of the unfold / fold kernels
_GRID_Y = 65535
_U32 = 2 ** 32


@functools.cache
def _unfold_kernel(dtype: str):
    zero = np.dtype(dtype).type(0)

    @runtime.jit
    def unfold(x, cols, x_off, rows, C, H, W, R, S, P, Q, sh, sw, ph, pw, dh, dw):
        """cols[row, r, s, p, q] = x[x_off + row*H*W + h*W + w] for rows row = n*C + c < ``rows``."""
        pq = U(U(U(cuda.blockIdx.x) * U(cuda.blockDim.x)) + U(cuda.threadIdx.x))
        npq = U(P * Q)
        if pq >= npq:
            return
        p = U(pq // Q)
        hp = U(p * sh)  # h + ph of tap r = 0
        wq = U(U(pq - U(p * Q)) * sw)
        row = U(cuda.blockIdx.y)
        while row < rows:
            src = U(x_off + U(row * U(H * W)))
            dst = U(U(U(row * U(R * S)) * npq) + pq)
            hh = hp
            r = U(0)
            while r < R:
                h_ok = hh >= ph and U(hh - ph) < H
                ww = wq
                s = U(0)
                while s < S:
                    v = zero
                    if h_ok and ww >= pw and U(ww - pw) < W:
                        v = x[U(src + U(U(hh - ph) * W) + U(ww - pw))]
                    cols[dst] = v
                    dst = U(dst + npq)
                    ww = U(ww + dw)
                    s = U(s + 1)
                hh = U(hh + dh)
                r = U(r + 1)
            row = U(row + U(cuda.gridDim.y))

    return unfold


def launch_grid(pixels: int, rows: int) -> tuple[int, int]:
    """Grid of the unfold / fold kernels: x over pixel blocks, y over (image, channel) rows."""
    return (max(1, math.ceil(pixels / THREADS)), max(1, min(rows, _GRID_Y)))


def unfold(problem: Problem, x, cols, n0: int, nb: int) -> None:
    """Write the column buffer of images n0 .. n0+nb-1 of ``x`` (N, C, H, W) into flat ``cols``."""
    pr = problem
    (sh, sw), (ph, pw), (dh, dw) = pr.stride, pr.padding, pr.dilation
    u = U
    _unfold_kernel(pr.dtype)[launch_grid(pr.p * pr.q, nb * pr.c), THREADS](
        x.reshape((x.size,)), cols, u(n0 * pr.c * pr.h * pr.w), u(nb * pr.c), u(pr.c), u(pr.h),
        u(pr.w), u(pr.r), u(pr.s), u(pr.p), u(pr.q), u(sh), u(sw), u(ph), u(pw), u(dh), u(dw))


# ---- planning shared with col2im ------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """How ``run`` splits a problem: ``nb`` images per sub-batch, ``ksplit`` k-splits (wgrad), and the
    elements of the column buffer and of the wgrad partial-product buffer it allocates."""

    pointwise: bool
    nb: int
    ksplit: int
    cols: int
    part: int

    def workspace_bytes(self, itemsize: int) -> int:
        return (self.cols + self.part) * itemsize


def pointwise(problem: Problem) -> bool:
    """1x1 kernel, stride 1, no padding, full output: the input (or dx) already is the column matrix."""
    return ((problem.r, problem.s, problem.stride, problem.padding) == (1, 1, (1, 1), (0, 0))
            and (problem.p, problem.q) == (problem.h, problem.w))


def gemm_shape(problem: Problem) -> tuple[int, int, int]:
    """(M, N, K) of one GEMM per image and group: forward K' x PQ x C'RS, dgrad C'RS x PQ x K',
    wgrad K' x C'RS x PQ (summed over images)."""
    crs, pq = problem.c_per_group * problem.r * problem.s, problem.p * problem.q
    kg = problem.k_per_group
    return {"forward": (kg, pq, crs), "dgrad": (crs, pq, kg), "wgrad": (kg, crs, pq)}[problem.op]


def tile_of(config: Config) -> Tile:
    return Tile(config["BM"], config["BN"], config["BK"], config["TM"], config["TN"])


def tile_configs(problem: Problem, count: int = 3) -> list[Config]:
    """The best ``count`` tile presets for the problem's GEMM, as Configs."""
    m, n, k = gemm_shape(problem)
    batch = problem.groups * (1 if problem.op == "wgrad" else max(problem.n, 1))
    return [Config(t._asdict()) for t in pick_tiles(m, n, k, batch, problem.dtype)[:count]]


def _wgrad_ksplit(problem: Problem, tile: Tile, images: int) -> int:
    """k-splits of the wgrad GEMM: enough blocks to fill the GPU, each split >= a few k tiles."""
    m, n, k = gemm_shape(problem)
    blocks = math.ceil(m / tile.BM) * math.ceil(n / tile.BN) * problem.groups
    tiles = math.ceil(k / tile.BK) * images
    min_tiles, cap = (2, 3) if runtime.SIMULATOR else (8, 256)
    want = min(math.ceil(4 * 132 / blocks), tiles // min_tiles, cap, _GRID_Y // problem.groups)
    return max(1, want)


def column_plan(problem: Problem, tile: Tile, workspace_limit: int) -> Plan:
    """The sub-batch and buffers for ``problem`` (im2col's forward/wgrad, col2im's dgrad).

    When even one image's columns exceed the limit, ``nb`` is 1 and the plan's workspace is over it
    (the plugins then decline)."""
    pr = problem
    is_pointwise = pointwise(pr)
    per_image = pr.c * pr.r * pr.s * pr.p * pr.q  # column elements of one image
    z_cap = max(1, _GRID_Y // pr.groups)
    ksplit, part = 1, 0
    if pr.op == "wgrad":
        ksplit = _wgrad_ksplit(pr, tile, max(pr.n, 1))
        part = ksplit * int(np.prod(pr.w_shape)) if ksplit > 1 else 0
    if pr.n == 0:
        return Plan(is_pointwise, 0, 1, 0, 0)
    if is_pointwise:
        return Plan(True, min(pr.n, z_cap), ksplit, 0, part)
    room = max(0, workspace_limit // pr.itemsize - part)
    nb = max(1, min(pr.n, room // per_image, (_U32 - 1) // per_image, z_cap))
    if pr.op == "wgrad" and nb < pr.n:  # fewer images per GEMM: maybe fewer k-splits
        ksplit = _wgrad_ksplit(pr, tile, nb)
        part = ksplit * int(np.prod(pr.w_shape)) if ksplit > 1 else 0
    return Plan(False, nb, ksplit, nb * per_image, part)


def check_indexing(problem: Problem) -> Verdict:
    """Decline problems the 32-bit index arithmetic of the kernels or the grid limits cannot reach."""
    pr = problem
    sizes = {"a": int(np.prod(pr.operand_shapes[0])), "b": int(np.prod(pr.operand_shapes[1])),
             "out": int(np.prod(pr.operand_shapes[2])),
             "one image's column matrix": pr.c * pr.r * pr.s * pr.p * pr.q}
    for name, size in sizes.items():
        if size >= _U32:
            return Verdict.no(f"{name} has {size} elements; the GEMM kernels index with 32 bits")
    m, rows = gemm_shape(pr)[0], min(t.BM for t in TILES) * _GRID_Y
    if m > rows:
        return Verdict.no(f"GEMM M={m} is over {rows}: more than {_GRID_Y} row tiles")
    return Verdict.yes()


class ColumnGemmAlgorithm(Algorithm):
    """What im2col and col2im share: the predicate, the tile configs, and the column-buffer plan that
    sub-batches images so the workspace stays under the limit."""

    def check(self, problem: Problem) -> Verdict:
        return check_indexing(problem)

    def configs(self, problem: Problem) -> list[Config]:
        return tile_configs(problem)

    def workspace_bytes(self, problem: Problem, config: Config, workspace_limit: int) -> int:
        return column_plan(problem, tile_of(config), workspace_limit).workspace_bytes(problem.itemsize)

    def plan(self, problem: Problem, config: Config, workspace_limit: int) -> tuple[Tile, Plan]:
        """The tile and the sub-batch plan; ValueError if even one image exceeds the limit."""
        tile = tile_of(config)
        plan = column_plan(problem, tile, workspace_limit)
        need = plan.workspace_bytes(problem.itemsize)
        if need > workspace_limit:
            raise ValueError(f"{self.name} needs {need} bytes of workspace, over the limit of "
                             f"{workspace_limit}")
        return tile, plan


@register
class Im2col(ColumnGemmAlgorithm):
    """Unfold the input into columns, then one tiled GEMM per sub-batch."""

    name = "im2col"
    ops = frozenset({"forward", "wgrad"})
    priority = 10
    description = "im2col column buffer (sub-batched to the workspace limit) + tiled GEMM"

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


def lend_columns(n: int, dtype: str):
    """A column buffer of ``n`` elements lent for the call (convlab.scratch), or None when the plan
    needs none."""
    return scratch(n, dtype) if n else contextlib.nullcontext(None)


def _forward(pr: Problem, tile: Tile, plan: Plan, w, bias, y, src, n0: int, nb: int) -> None:
    """y[n0:n0+nb] = W_g @ columns, batched over (image, group); ``src`` is x when pointwise."""
    kg, cg, pq = pr.k_per_group, pr.c_per_group, pr.p * pr.q
    crs = cg * pr.r * pr.s
    per_image = pr.c * pr.r * pr.s * pq
    cols = (Strided(src, pq, offset=n0 * per_image, outer=per_image, inner=crs * pq) if plan.pointwise
            else Strided(src, pq, outer=per_image, inner=crs * pq))
    gemm(Strided(w, crs, inner=kg * crs), cols,
         Strided(y, pq, offset=n0 * pr.k * pq, outer=pr.k * pq, inner=kg * pq), kg, pq, crs,
         batch=nb * pr.groups, split=pr.groups, tile=tile,
         bias=None if bias is None else Strided(bias, 1, inner=kg))


def _wgrad(pr: Problem, tile: Tile, plan: Plan, x, dy, cols, dw, part, n0: int, nb: int) -> None:
    """dw (+)= sum over images n0 .. n0+nb-1 of dy_g @ columns_g^T (accumulating after image 0)."""
    kg, pq = pr.k_per_group, pr.p * pr.q
    crs = pr.c_per_group * pr.r * pr.s
    per_image = pr.c * pr.r * pr.s * pq
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
