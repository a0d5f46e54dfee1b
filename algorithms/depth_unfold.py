"""3D convolutions on the 2D plugins: unfold the depth axis into channels, run a 2D plugin, fold back.

With the depth windows of x (convlab.kernels.conv.depth),

    x'(N*Do, C*T, H, W)[n*Do + o, c*T + t] = x[n, c, o*sd - pd + t*dd]       (0 outside x)
    w'(K, C'*T, R, S) = w (K, C', T, R, S) viewed (no copy)

a 3D problem is a 2D one of batch N*Do and C*T channels (the groups stay contiguous in the channel
axis, so grouped and depthwise layers stay grouped):

    forward  y'(N*Do, K, P, Q) = conv2d(x', w') (+ bias)      y = y' with (Do, K) swapped
    dgrad    dy' = dy with (K, Do) swapped; dx' = conv2d_backward_data(dy', w')
             dx = the depth fold of dx' (+ the transpose's bias), summed over (o, t) in a fixed order
    wgrad    dw' = conv2d_backward_weight(x', dy') is dw exactly (the same sums over n, o, p, q)

The inner 2D candidate is any registered plugin that runs 2D only and accepts the inner problem
through its registry guards (implicit_gemm, tensor_core, tf32x3, depthwise for a T = 1 depthwise
layer, ...); each config names it (``via``) and its config, tuned like any other candidate. So the
implicit-GEMM and tensor-core families reach 3D through this depth unfold, not through a native 3D
gather of their own: it costs x' (T times the input, over the depth stride) and one permute pass over
the output (dy for dgrad) in scratch memory. float64 has no 2D-only plugin and runs on the native 3D
ones (direct, im2col / col2im); half-precision dgrad is declined (its fold would sum in half) and runs
on ``widen``.
"""
from __future__ import annotations

import contextlib

import numpy as np

from convlab import runtime
from convlab.kernels.conv.depth import depth_fold, depth_unfold, swap_axes
from convlab.plugin import registry
from convlab.plugin.contract import Algorithm, Config, Verdict
from convlab.plugin.registry import register
from convlab.problem import Problem, make_problem, make_problem_nd, np_dtype
from convlab.runtime.scratch import scratch
from convlab.runtime.settings import get_deterministic
from convlab.runtime.targets import Target

VIA_CONFIGS = 2  # configs tried per inner plugin (its preferred ones)


def inner_problem(problem: Problem) -> Problem:
    """The 2D problem of the unfolded operands: batch N*Do, channels C*T, the height/width geometry."""
    pr = problem
    return make_problem(pr.op, pr.n * pr.do, pr.c * pr.t, pr.h, pr.w, pr.k, pr.r, pr.s, p=pr.p, q=pr.q,
                        stride=pr.stride, padding=pr.padding, dilation=pr.dilation, groups=pr.groups,
                        dtype=pr.dtype, bias=pr.bias and pr.op == "forward")


def _inner(config: Config) -> tuple[str, Config]:
    return config["via"], Config({k: v for k, v in config.items() if k != "via"})


def _sizes(pr: Problem) -> tuple[int, int]:
    """Elements of the scratch x' (dx') and y' (dy')."""
    return pr.n * pr.do * pr.c * pr.t * pr.h * pr.w, pr.n * pr.do * pr.k * pr.p * pr.q


@contextlib.contextmanager
def _lend(n: int, dtype: str):
    """A scratch array of ``n`` elements of ``dtype`` (bfloat16: the pool's uint16 bits viewed back)."""
    kind = np_dtype(dtype)
    bits = runtime.kernel_dtype(kind)
    with scratch(n, bits) as buf:
        yield buf if bits == kind else buf.view(kind)


@register
class DepthUnfold(Algorithm):
    """3D problems as 2D ones over depth windows, on any 2D-only plugin."""

    name = "depth_unfold"
    ops = frozenset({"forward", "dgrad", "wgrad"})
    dtypes = frozenset({"float32", "float16", "bfloat16"})
    ndims = (3,)
    priority = 5
    simulator_examples = 2  # convlab.testing.suite.examples_for: its inner plugins are checked on their own
    description = ("3D as 2D over depth windows: x (N,C,D,H,W) -> x' (N*Do, C*T, H, W), a 2D plugin, "
                   "the output permuted (dgrad: depth fold)")

    def _via(self, problem: Problem, target: Target) -> list:
        inner = inner_problem(problem)
        return [p for p in registry.plugins(problem.op)
                if p is not self and 2 in p.ndims and 3 not in p.ndims
                and (p.deterministic or not get_deterministic()) and registry.verdict(p, inner, target=target)]

    def check(self, problem: Problem, target: Target) -> Verdict:
        if problem.op == "dgrad" and problem.dtype != "float32":
            return Verdict.no(f"the depth fold of dgrad sums in the operand dtype: {problem.dtype} dgrad "
                              f"runs on widen")
        if max(_sizes(problem)) >= 2**31:
            return Verdict.no("the unfolded operands pass 2**31 elements (the depth kernels' indices)")
        if not self._via(problem, target):
            return Verdict.no("no 2D-only plugin accepts the depth-unfolded 2D problem "
                              f"{inner_problem(problem).describe()}")
        return Verdict.yes()

    def configs(self, problem: Problem, target: Target) -> list[Config]:
        inner = inner_problem(problem)
        return [Config(cfg, via=p.name) for p in self._via(problem, target)
                for cfg in registry.safe_configs(p, inner, target)[:VIA_CONFIGS]]

    def workspace_bytes(self, problem: Problem, config: Config, workspace_limit: int,
                        target: Target) -> int:
        """x' (or dx') and y' (or dy') in scratch, plus the inner plugin's own workspace."""
        name, cfg = _inner(config)
        own = sum(_sizes(problem)) * problem.itemsize
        inner = registry.workspace(registry.get(name), inner_problem(problem), cfg,
                                   max(0, workspace_limit - own), target)
        return own + inner

    def compute_eps(self, dtype: str, config: Config | None = None) -> float:
        """The inner plugin's, for the config it runs (``via``): it does the arithmetic; the unfold and
        permute are exact and the fold's sums are float32 (dgrad is float32 only). With no config, the
        largest of the 2D-only plugins that take ``dtype``."""
        if config is not None:
            name, inner = _inner(config)
            return registry.get(name).compute_eps(dtype, inner)
        found = [p.compute_eps(dtype) for p in registry.plugins()
                 if dtype in p.dtypes and 2 in p.ndims and 3 not in p.ndims and p is not self]
        return max(found, default=float(np.finfo(np.float32).eps))

    def sample_problems(self, op: str) -> list[Problem]:
        return [make_problem_nd(op, 1, 4, (3, 4, 3), 4, (2, 2, 1), stride=(2, 1, 1), padding=(1, 1, 0),
                                groups=2, bias=op != "wgrad"),
                make_problem_nd(op, 2, 3, (4, 3, 3), 3, (1, 3, 3), padding=(0, 1, 1), groups=3,
                                dtype="float32" if op == "dgrad" else "float16")]

    def run(self, problem: Problem, config: Config, a, b, bias, out, *, workspace_limit: int) -> None:
        pr, (name, cfg) = problem, _inner(config)
        plugin, inner = registry.get(name), inner_problem(problem)
        x_size, y_size = _sizes(pr)
        w2 = (pr.k, pr.c_per_group * pr.t, pr.r, pr.s)
        limit = max(0, workspace_limit - (x_size + y_size) * pr.itemsize)
        with _lend(x_size, pr.dtype) as xu, _lend(y_size, pr.dtype) as yu:
            xs, ys = xu[:x_size].reshape(inner.x_shape), yu[:y_size].reshape(inner.y_shape)
            if pr.op == "forward":
                depth_unfold(pr, a, xs)
                registry.run(plugin, inner, cfg, xs, b.reshape(w2), bias, ys, workspace_limit=limit)
                swap_axes(ys, out, pr.n, pr.do, pr.k, pr.p * pr.q)
            elif pr.op == "dgrad":
                swap_axes(a, ys, pr.n, pr.k, pr.do, pr.p * pr.q)
                registry.run(plugin, inner, cfg, ys, b.reshape(w2), None, xs, workspace_limit=limit)
                depth_fold(pr, xs, out, bias)
            else:
                depth_unfold(pr, a, xs)
                swap_axes(b, ys, pr.n, pr.k, pr.do, pr.p * pr.q)
                registry.run(plugin, inner, cfg, xs, ys, None, out.reshape(w2), workspace_limit=limit)
