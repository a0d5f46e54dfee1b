"""Direct convolution: one thread per output element, straight from the definition (the kernels and
their loop nests: convlab.kernels.conv.direct, one generated loop per spatial axis).

    forward  y[n,k,p,q]  = bias[k] + sum_{c<C', r<R, s<S} x[n, g*C'+c, p*sh-ph+r*dh, q*sw-pw+s*dw] * w[k,c,r,s]
    dgrad    dx[n,c,h,w] = bias[c] + sum_{k<K', r, s : h+ph-r*dh = p*sh, w+pw-s*dw = q*sw, p<P, q<Q}
                                     dy[n, g*K'+k, p, q] * w[g*K'+k, c mod C', r, s]
    wgrad    dw[k,c,r,s] = sum over splits j of  sum_{(n,p,q) in chunk j} x[n, g*C'+c, h, w] * dy[n,k,p,q]

(2D shown; 3D adds a depth axis, and a 1D problem's 2D embedding runs the kernels of one axis on
(N, C, L) views of its operands.) Every option (stride, padding, dilation, groups, bias) is supported in
1D, 2D and 3D, so this plugin is the fallback that accepts every valid problem. wgrad's long reduction
(N*(Do)*P*Q) is split into chunks summed in order by a second kernel
(``convlab.kernels.data.splitk.sum_partials``: deterministic) when the split buffer fits the workspace
limit; otherwise one thread sums it all. The 2D forward also comes fused with an epilogue
(convlab.epilogue), applied to each output in registers before its store (``run_fused``:
convlab.kernels.conv.direct_fused).
"""
from __future__ import annotations

import math

import numpy as np

from convlab import runtime
from convlab.epilogue import Epilogue
from convlab.plugin.contract import Algorithm, Config, Verdict
from convlab.plugin.cost import Features, blocks_per_sm, default_arith
from convlab.plugin.registry import register
from convlab.problem import Problem, make_problem_nd
from convlab.kernels.conv.axes import geometry, kernel_ndim
from convlab.kernels.conv.direct import kernels
from convlab.kernels.conv.direct_fused import forward_fused
from convlab.kernels.data.splitk import sum_partials
from convlab.kernels.epilogue import EpilogueOperands
from convlab.runtime.targets import Target

THREADS = 128  # threads per block, every kernel
_WGRAD_CHUNK = 256  # target products per thread in split wgrad


def _blocks(total: int) -> int:
    return max(1, math.ceil(total / THREADS))


def wgrad_splits(problem: Problem, workspace_limit: int) -> int:
    """Chunks of the N*(Do)*P*Q reduction: about 256 products per thread, within the workspace limit."""
    length = problem.n * math.prod(problem.spatial_out)
    dw_size = int(np.prod(problem.w_shape))
    wanted = max(1, min(length // _WGRAD_CHUNK, (1 << 20) // max(dw_size, 1) + 1))
    if wanted > 1 and wanted * dw_size * problem.itemsize > workspace_limit:
        wanted = max(1, workspace_limit // (dw_size * problem.itemsize))
    return wanted if wanted > 1 else 1


@register
class Direct(Algorithm):
    """The reference-like kernel: always applicable, never fast."""

    name = "direct"
    ops = frozenset({"forward", "dgrad", "wgrad"})
    priority = 0
    ndims = (2, 3)
    description = "one thread per output element; every stride/padding/dilation/groups/bias, 1D, 2D and 3D"

    def check(self, problem: Problem, target: Target) -> Verdict:
        return Verdict.yes()

    def sample_problems(self, op: str) -> list[Problem]:
        """One 3D problem per op (2D ones come from every random draw): the 3D kernels in the corpus."""
        return [make_problem_nd(op, 1, 4, (3, 4, 3), 2, (2, 2, 2), stride=(2, 1, 1), padding=(1, 0, 1),
                                groups=2, bias=op != "wgrad")]

    def workspace_bytes(self, problem: Problem, config: Config, workspace_limit: int,
                        target: Target) -> int:
        if problem.op != "wgrad":
            return 0
        splits = wgrad_splits(problem, workspace_limit)
        return 0 if splits == 1 else splits * int(np.prod(problem.w_shape)) * problem.itemsize

    def cost_features(self, problem: Problem, config: Config, target: Target, workspace_limit: int) -> Features:
        """One thread per output (wgrad: per split), the split sum's partials written and read."""
        out, pr = math.prod(problem.operand_shapes[2]), problem
        splits = wgrad_splits(pr, workspace_limit) if pr.op == "wgrad" else 1
        blocks = math.ceil(out * splits / THREADS)
        return Features("direct", default_arith(pr), float(pr.flops), float(pr.bytes),
                        2.0 * splits * out * pr.itemsize if splits > 1 else 0.0, 1 + (splits > 1), blocks, 1,
                        THREADS, blocks_per_sm(target, THREADS), kind="per_output")

    def fuses(self, problem: Problem, epilogue: Epilogue) -> str:
        """The 2D forward kernel applies any epilogue before its store; dgrad, wgrad and 3D do not."""
        if problem.op != "forward" or problem.ndim != 2:
            return f"fuses epilogues into its 2D forward kernel only, not a {problem.ndim}D {problem.op}"
        return ""

    def run_fused(self, problem: Problem, config: Config, a, b, bias, out, epilogue: EpilogueOperands, *,
                  workspace_limit: int) -> None:
        forward = forward_fused(problem.dtype, epilogue.epilogue)
        has_bias = bias is not None
        bias = bias if has_bias else runtime.empty((1,), problem.dtype)
        residual = runtime.flat_view(out) if epilogue.residual is None else epilogue.residual
        (sh, sw), (ph, pw), (dh, dw) = problem.stride, problem.padding, problem.dilation
        forward[_blocks(int(np.prod(out.shape))), THREADS](a, b, bias, out, residual, epilogue.scale,
                                                           epilogue.shift, sh, sw, ph, pw, dh, dw, has_bias)

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        nd = kernel_ndim(problem)
        forward, dgrad, wgrad_partial = kernels(problem.dtype, nd)
        geo = geometry(problem, nd)
        scalars = (*geo.stride, *geo.padding, *geo.dilation)
        if nd != problem.ndim:  # a 1D embedding: (N, C, L) views of the unit-height operands
            a, b, out = (_without_height(t) for t in (a, b, out))
        has_bias = bias is not None
        if not has_bias:
            bias = runtime.empty((1,), problem.dtype)
        total = int(np.prod(out.shape))
        if problem.op in ("forward", "dgrad"):
            kernel = forward if problem.op == "forward" else dgrad
            kernel[_blocks(total), THREADS](a, b, bias, out, *scalars, has_bias)
            return
        splits = wgrad_splits(problem, workspace_limit)
        chunk = math.ceil(problem.n * math.prod(geo.out) / splits)
        if splits == 1:
            wgrad_partial[_blocks(total), THREADS](a, b, out.reshape((1,) + tuple(out.shape)), *scalars, chunk)
            return
        part = runtime.empty((splits,) + tuple(out.shape), problem.dtype)
        wgrad_partial[_blocks(total * splits), THREADS](a, b, part, *scalars, chunk)
        sum_partials(part, out, splits)


def _without_height(t):
    """An (N, C, 1, L) array (or (K, C', 1, S) filter) viewed as (N, C, L), sharing its memory."""
    shape, strides = tuple(t.shape), runtime.strides_of(t)
    return runtime.view_at(t, 0, shape[:2] + shape[3:], strides[:2] + strides[3:], t.dtype)
