"""The direct 2D forward kernel fused with an epilogue (convlab.epilogue): each output summed by one
thread, then ``epi`` applied in registers before its store.

    for idx in grid (one thread per y[n, k, p, q], C order):
        acc = sum over (c, r, s) in group(k) of x[n, c, p*sh - ph + r*dh, q*sw - pw + s*dw] * w[k, c, r, s]
        y[n, k, p, q] = epilogue(acc + bias[k], k, residual[idx])     (kernels.epilogue.device_epilogue)

The unfused direct kernels are the N-d generated ones of convlab.kernels.conv.direct; this one is 2D
(a 1D problem's embedding included) and serves ``Direct.run_fused``.
"""
from __future__ import annotations

import functools

import numpy as np

from convlab import runtime
from convlab.epilogue import Epilogue
from convlab.kernels.epilogue import compute_dtype, device_epilogue, epilogue_cache
from convlab.runtime import cuda


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


@epilogue_cache
def forward_fused(dtype: str, epi: Epilogue):
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
