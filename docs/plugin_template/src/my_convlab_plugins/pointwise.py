"""A 1x1 (pointwise) forward convolution, one thread per output element: the smallest complete plugin.

    y[n, k, p, q] = bias[k] + sum_{c < C/groups} x[n, g*C/groups + c, p*sh - ph, q*sw - pw] * w[k, c, 0, 0]

with g = k // (K / groups) and input terms in the padding read as 0. Replace the kernel and ``check``
with your algorithm; keep the shape of the file (docstring with the loop nest, kernel, launcher class).
``cost_features`` tells the autotuner's cost model what each config launches and moves, as every
built-in plugin does (docs/ADDING_A_PLUGIN.md, section 5): count your own kernels there.
"""
from __future__ import annotations

import math

import convlab
from convlab import Algorithm, Config, Problem, Target, Verdict, runtime
from convlab.plugin.cost import Features, blocks_per_sm, default_arith
from convlab.runtime import cuda


@runtime.jit
def pointwise_forward(x, w, bias, y, sh, sw, ph, pw, has_bias):
    idx = cuda.grid(1)
    n_, k_, p_, q_ = y.shape
    if idx >= n_ * k_ * p_ * q_:
        return
    q = idx % q_
    p = (idx // q_) % p_
    k = (idx // (q_ * p_)) % k_
    n = idx // (q_ * p_ * k_)
    cg = w.shape[1]
    base = (k // (k_ // (x.shape[1] // cg))) * cg  # first input channel of k's group
    h, col = p * sh - ph, q * sw - pw
    acc = 0.0
    if has_bias:
        acc += bias[k]
    if 0 <= h < x.shape[2] and 0 <= col < x.shape[3]:
        for c in range(cg):
            acc += x[n, base + c, h, col] * w[k, c, 0, 0]
    y[n, k, p, q] = acc


class Pointwise(Algorithm):
    """1x1 forward convolution (any stride, padding, groups, bias); registered by the entry point."""

    name = "my_pointwise"
    ops = frozenset({"forward"})
    priority = 5
    description = "1x1 forward convolution, one thread per output (plugin template)"

    def check(self, problem: Problem, target: Target) -> Verdict:
        if (problem.r, problem.s) != (1, 1):
            return Verdict.no(f"needs a 1x1 kernel, got {problem.r}x{problem.s}")
        return Verdict.yes()

    def configs(self, problem: Problem, target: Target) -> list[Config]:
        return [Config(threads=64 if target.simulator else 256)]  # the simulator: few Python threads

    def sample_problems(self, op: str) -> list[Problem]:
        return [convlab.make_problem(op, 2, 4, 5, 3, 6, 1, 1, stride=2, padding=1, groups=2, bias=True),
                convlab.make_problem(op, 1, 3, 4, 4, 2, 1, 1, dtype="float64")]

    def cost_features(self, problem: Problem, config: Config, target: Target, workspace_limit: int) -> Features:
        """One launch of one thread per output, no scratch: the problem's FLOPs and bytes."""
        threads = config["threads"]
        return Features(self.name, default_arith(problem), flops=float(problem.flops),
                        bytes=float(problem.bytes), aux_bytes=0.0, launches=1,
                        blocks=math.ceil(math.prod(problem.operand_shapes[2]) / threads), passes=1,
                        threads=threads, blocks_per_sm=blocks_per_sm(target, threads), kind="per_output")

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        has_bias = bias is not None
        if not has_bias:  # kernels take real arrays: a 1-element stand-in
            bias = runtime.empty((1,), problem.dtype)
        threads = config["threads"]
        (sh, sw), (ph, pw) = problem.stride, problem.padding
        pointwise_forward[math.ceil(math.prod(out.shape) / threads), threads](a, b, bias, out, sh, sw, ph, pw,
                                                                             has_bias)
