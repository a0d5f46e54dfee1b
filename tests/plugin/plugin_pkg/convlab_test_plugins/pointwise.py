"""Pointwise (1x1) forward convolution: one thread per output element, a plain channel dot product.

    y[n, k, p, q] = bias[k] + sum_{c < C'} x[n, g*C' + c, p*sh - ph, q*sw - pw] * w[k, c, 0, 0]

(C' = C/groups, g = k // (K/groups); the input term is 0 where (h, w) falls into the padding). Accepts
1x1 filters with any stride, padding, dilation (meaningless for 1x1) and groups.
"""
from __future__ import annotations

import functools
import math

import numpy as np

import convlab
from convlab import Algorithm, Config, Problem, Verdict, runtime
from convlab.runtime import cuda


@functools.cache
def pointwise_kernel(dtype: str):
    zero = np.dtype(dtype).type(0)

    @runtime.jit
    def kernel(x, w, bias, y, sh, sw, ph, pw, has_bias):
        idx = cuda.grid(1)
        n_, k_, p_, q_ = y.shape
        if idx >= n_ * k_ * p_ * q_:
            return
        q = idx % q_
        rest = idx // q_
        p = rest % p_
        rest = rest // p_
        k = rest % k_
        n = rest // k_
        cpg = w.shape[1]
        c0 = (k // (k_ // (x.shape[1] // cpg))) * cpg
        h, ww = p * sh - ph, q * sw - pw
        acc = zero
        if 0 <= h < x.shape[2] and 0 <= ww < x.shape[3]:
            for c in range(cpg):
                acc += x[n, c0 + c, h, ww] * w[k, c, 0, 0]
        if has_bias:
            acc += bias[k]
        y[n, k, p, q] = acc

    return kernel


class Pointwise(Algorithm):
    """1x1 convolutions as a per-pixel channel dot product."""

    name = "example_pointwise"
    ops = frozenset({"forward"})
    priority = 1
    description = "1x1 forward convolution (example third-party plugin)"

    def check(self, problem: Problem) -> Verdict:
        if (problem.r, problem.s) != (1, 1):
            return Verdict.no(f"needs a 1x1 filter, got {problem.r}x{problem.s}")
        return Verdict.yes()

    def configs(self, problem: Problem) -> list[Config]:
        return [Config(threads=128), Config(threads=32)]

    def sample_problems(self, op: str) -> list[Problem]:
        return [convlab.make_problem(op, 2, 6, 5, 4, 4, 1, 1, groups=2, bias=True),
                convlab.make_problem(op, 1, 3, 7, 7, 5, 1, 1, stride=2, padding=1, dtype="float64")]

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        kernel = pointwise_kernel(problem.dtype)
        has_bias = bias is not None
        if not has_bias:
            bias = runtime.empty((1,), problem.dtype)
        threads = config["threads"]
        blocks = math.ceil(int(np.prod(out.shape)) / threads)
        kernel[blocks, threads](a, b, bias, out, *problem.stride, *problem.padding, has_bias)
