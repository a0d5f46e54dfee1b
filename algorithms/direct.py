"""Direct convolution: one thread per output element, straight from the definition.

Loop nests (C' = C/groups, K' = K/groups, g = the element's group):

    forward  y[n,k,p,q]  = bias[k] + sum_{c<C', r<R, s<S} x[n, g*C'+c, p*sh-ph+r*dh, q*sw-pw+s*dw] * w[k,c,r,s]
    dgrad    dx[n,c,h,w] = bias[c] + sum_{k<K', r, s : h+ph-r*dh = p*sh, w+pw-s*dw = q*sw, p<P, q<Q}
                                     dy[n, g*K'+k, p, q] * w[g*K'+k, c mod C', r, s]
    wgrad    dw[k,c,r,s] = sum over splits j of  sum_{(n,p,q) in chunk j} x[n, g*C'+c, h, w] * dy[n,k,p,q]

Every option (stride, padding, dilation, groups, bias) is supported, in 2D and in 3D (the same nests
with a depth axis: convlab.kernels.conv.direct3d), so this plugin is the fallback that accepts every
valid problem (1D runs as its 2D embedding). wgrad's long reduction (N*P*Q) is split into chunks summed in order by a
second kernel (``convlab.kernels.data.splitk.sum_partials``: deterministic) when the split buffer fits the
workspace limit; otherwise one thread sums it all. The 2D forward kernel also comes fused with an
epilogue (convlab.epilogue), applied to each output in registers before its store (``run_fused``).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from convlab import runtime
from convlab.epilogue import Epilogue
from convlab.plugin.contract import Algorithm, Config, Verdict
from convlab.plugin.cost import Features, blocks_per_sm, default_arith
from convlab.plugin.registry import register
from convlab.problem import Problem, make_problem_nd
from convlab.kernels.conv.direct3d import kernels3d
from convlab.kernels.data.splitk import sum_partials
from convlab.kernels.epilogue import EpilogueOperands, compute_dtype, device_epilogue
from convlab.runtime import cuda
from convlab.runtime.targets import Target

THREADS = 128  # threads per block, every kernel
_WGRAD_CHUNK = 256  # target products per thread in split wgrad


@runtime.jit(device=True)
def output_at(idx, k_, p_, q_):
    """(n, k, p, q) of the forward output element at C-order linear index ``idx``."""
    q = idx % q_
    t = idx // q_
    p = t % p_
    t = t // p_
    return t // k_, t % k_, p, q


@functools.cache
def _forward_sum(dtype: str):
    """The device function summing one forward output y[n, k, p, q] (without the bias)."""
    zero = np.dtype(dtype).type(0)

    @runtime.jit(device=True)
    def forward_sum(x, w, n, k, p, q, k_, sh, sw, ph, pw, dh, dw):
        cpg, r_, s_ = w.shape[1], w.shape[2], w.shape[3]
        c0 = (k // (k_ // (x.shape[1] // cpg))) * cpg
        acc = zero
        for c in range(cpg):
            for r in range(r_):
                h = p * sh - ph + r * dh
                if 0 <= h < x.shape[2]:
                    for s in range(s_):
                        ww = q * sw - pw + s * dw
                        if 0 <= ww < x.shape[3]:
                            acc += x[n, c0 + c, h, ww] * w[k, c, r, s]
        return acc
    return forward_sum


@functools.cache
def _forward_fused(dtype: str, epi: Epilogue):
    """forward with ``epi`` applied to each output in registers before its store; the residual (flat,
    C-contiguous like y) is read at the output's linear index."""
    forward_sum, finish = _forward_sum(dtype), device_epilogue(dtype, epi)
    ct, has_residual = compute_dtype(dtype).type, epi.residual is not None

    @runtime.jit
    def forward(x, w, bias, y, r, scale, shift, sh, sw, ph, pw, dh, dw, has_bias):
        idx = cuda.grid(1)
        n_, k_, p_, q_ = y.shape
        if idx >= n_ * k_ * p_ * q_:
            return
        n, k, p, q = output_at(idx, k_, p_, q_)
        acc = forward_sum(x, w, n, k, p, q, k_, sh, sw, ph, pw, dh, dw)
        if has_bias:
            acc += bias[k]
        rv = ct(r[idx]) if has_residual else ct(0)
        y[n, k, p, q] = finish(ct(acc), k, rv, scale, shift)
    return forward


@functools.cache
def _kernels(dtype: str):
    """The three kernels for one dtype (the accumulator's zero is a compile-time constant)."""
    zero = np.dtype(dtype).type(0)
    forward_sum = _forward_sum(dtype)

    @runtime.jit
    def forward(x, w, bias, y, sh, sw, ph, pw, dh, dw, has_bias):
        idx = cuda.grid(1)
        n_, k_, p_, q_ = y.shape
        if idx >= n_ * k_ * p_ * q_:
            return
        n, k, p, q = output_at(idx, k_, p_, q_)
        acc = forward_sum(x, w, n, k, p, q, k_, sh, sw, ph, pw, dh, dw)
        if has_bias:
            acc += bias[k]
        y[n, k, p, q] = acc

    @runtime.jit
    def dgrad(dy, w, bias, dx, sh, sw, ph, pw, dh, dw, has_bias):
        idx = cuda.grid(1)
        n_, c_, h_, w_ = dx.shape
        if idx >= n_ * c_ * h_ * w_:
            return
        x_w = idx % w_
        t = idx // w_
        x_h = t % h_
        t = t // h_
        c = t % c_
        n = t // c_
        k_, cpg, r_, s_ = w.shape
        kpg = k_ // (c_ // cpg)
        g = c // cpg
        cl = c - g * cpg
        acc = zero
        for r in range(r_):
            hh = x_h + ph - r * dh
            if hh >= 0 and hh % sh == 0 and hh // sh < dy.shape[2]:
                p = hh // sh
                for s in range(s_):
                    wq = x_w + pw - s * dw
                    if wq >= 0 and wq % sw == 0 and wq // sw < dy.shape[3]:
                        q = wq // sw
                        for kk in range(kpg):
                            k = g * kpg + kk
                            acc += dy[n, k, p, q] * w[k, cl, r, s]
        if has_bias:
            acc += bias[c]
        dx[n, c, x_h, x_w] = acc

    @runtime.jit
    def wgrad_partial(x, dy, part, sh, sw, ph, pw, dh, dw, chunk):
        """part[j, k, c, r, s] = sum over (n, p, q) in [j*chunk, (j+1)*chunk) of x * dy."""
        idx = cuda.grid(1)
        splits, k_, cpg, r_, s_ = part.shape
        if idx >= splits * k_ * cpg * r_ * s_:
            return
        s = idx % s_
        t = idx // s_
        r = t % r_
        t = t // r_
        c = t % cpg
        t = t // cpg
        k = t % k_
        j = t // k_
        n_, p_, q_ = dy.shape[0], dy.shape[2], dy.shape[3]
        ci = (k // (k_ // (x.shape[1] // cpg))) * cpg + c
        acc = zero
        stop = min((j + 1) * chunk, n_ * p_ * q_)
        for m in range(j * chunk, stop):
            q = m % q_
            p = (m // q_) % p_
            n = m // (q_ * p_)
            h = p * sh - ph + r * dh
            ww = q * sw - pw + s * dw
            if 0 <= h < x.shape[2] and 0 <= ww < x.shape[3]:
                acc += x[n, ci, h, ww] * dy[n, k, p, q]
        part[j, k, c, r, s] = acc

    return forward, dgrad, wgrad_partial


def _blocks(total: int) -> int:
    return max(1, math.ceil(total / THREADS))


def wgrad_splits(problem: Problem, workspace_limit: int) -> int:
    """Chunks of the N*(Do)*P*Q reduction: about 256 products per thread, within the workspace limit."""
    length = problem.n * problem.do * problem.p * problem.q
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
    description = "one thread per output element; every stride/padding/dilation/groups/bias, 2D and 3D"

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
        forward = _forward_fused(problem.dtype, epilogue.epilogue)
        has_bias = bias is not None
        bias = bias if has_bias else runtime.empty((1,), problem.dtype)
        residual = runtime.flat_view(out) if epilogue.residual is None else epilogue.residual
        (sh, sw), (ph, pw), (dh, dw) = problem.stride, problem.padding, problem.dilation
        forward[_blocks(int(np.prod(out.shape))), THREADS](a, b, bias, out, residual, epilogue.scale,
                                                           epilogue.shift, sh, sw, ph, pw, dh, dw, has_bias)

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        if problem.ndim == 3:
            _run3d(problem, a, b, bias, out, workspace_limit)
            return
        forward, dgrad, wgrad_partial = _kernels(problem.dtype)
        (sh, sw), (ph, pw), (dh, dw) = problem.stride, problem.padding, problem.dilation
        has_bias = bias is not None
        if not has_bias:
            bias = runtime.empty((1,), problem.dtype)
        total = int(np.prod(out.shape))
        if problem.op == "forward":
            forward[_blocks(total), THREADS](a, b, bias, out, sh, sw, ph, pw, dh, dw, has_bias)
        elif problem.op == "dgrad":
            dgrad[_blocks(total), THREADS](a, b, bias, out, sh, sw, ph, pw, dh, dw, has_bias)
        else:
            splits = wgrad_splits(problem, workspace_limit)
            length = problem.n * problem.p * problem.q
            chunk = math.ceil(length / splits)
            if splits == 1:
                part = out.reshape((1,) + tuple(out.shape))
                wgrad_partial[_blocks(total), THREADS](a, b, part, sh, sw, ph, pw, dh, dw, chunk)
            else:
                part = runtime.empty((splits,) + tuple(out.shape), problem.dtype)
                wgrad_partial[_blocks(total * splits), THREADS](a, b, part, sh, sw, ph, pw, dh, dw,
                                                                chunk)
                sum_partials(part, out, splits)


def _run3d(problem: Problem, a, b, bias, out, workspace_limit: int) -> None:
    """The 3D kernels on 5-D operands (NCDHW, KCTRS), split like the 2D wgrad."""
    forward, dgrad, wgrad_partial = kernels3d(problem.dtype)
    geo = (*problem.strides, *problem.paddings, *problem.dilations)
    has_bias = bias is not None
    if not has_bias:
        bias = runtime.empty((1,), problem.dtype)
    total = int(np.prod(out.shape))
    if problem.op in ("forward", "dgrad"):
        kernel = forward if problem.op == "forward" else dgrad
        kernel[_blocks(total), THREADS](a, b, bias, out, *geo, has_bias)
        return
    splits = wgrad_splits(problem, workspace_limit)
    chunk = math.ceil(problem.n * problem.do * problem.p * problem.q / splits)
    if splits == 1:
        wgrad_partial[_blocks(total), THREADS](a, b, out.reshape((1,) + tuple(out.shape)), *geo, chunk)
        return
    part = runtime.empty((splits,) + tuple(out.shape), problem.dtype)
    wgrad_partial[_blocks(total * splits), THREADS](a, b, part, *geo, chunk)
    sum_partials(part, out, splits)
