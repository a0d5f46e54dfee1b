"""Float64 numpy references for the canonical problems (vectorized: a loop over the R x S taps only).

Each tap (r, s) of the filter sees a strided window of the zero-padded input:

    window(r, s)[n, c, p, q] = x_pad[n, c, r*dh + p*sh, s*dw + q*sw]

so forward is a sum over taps of a grouped channel contraction, dgrad scatters the same contraction back
into the padded input, and wgrad contracts the window with dy over (n, p, q).
"""
from __future__ import annotations

import numpy as np

from .problem import Problem


def _window(x_pad: np.ndarray, prob: Problem, r: int, s: int) -> tuple[slice, slice]:
    (sh, sw), (dh, dw) = prob.stride, prob.dilation
    return (slice(r * dh, r * dh + (prob.p - 1) * sh + 1, sh),
            slice(s * dw, s * dw + (prob.q - 1) * sw + 1, sw))


def _grouped(prob: Problem, x: np.ndarray, w: np.ndarray, dy: np.ndarray | None = None):
    g = prob.groups
    xg = x.reshape(prob.n, g, prob.c_per_group, prob.h, prob.w)
    wg = w.reshape(g, prob.k_per_group, prob.c_per_group, prob.r, prob.s)
    dyg = None if dy is None else dy.reshape(prob.n, g, prob.k_per_group, prob.p, prob.q)
    return xg, wg, dyg


def _pad(x: np.ndarray, prob: Problem) -> np.ndarray:
    (ph, pw) = prob.padding
    return np.pad(x, ((0, 0), (0, 0), (0, 0), (ph, ph), (pw, pw)))


def forward(prob: Problem, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """y (N, K, P, Q) from x (N, C, H, W) and w (K, C/groups, R, S), in float64."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    xg, wg, _ = _grouped(prob, x, w)
    xp = _pad(xg, prob)
    y = np.zeros((prob.n, prob.groups, prob.k_per_group, prob.p, prob.q))
    for r in range(prob.r):
        for s in range(prob.s):
            hs, ws = _window(xp, prob, r, s)
            y += np.einsum("ngcpq,gkc->ngkpq", xp[..., hs, ws], wg[..., r, s], optimize=True)
    y = y.reshape(prob.y_shape)
    if bias is not None:
        y += np.asarray(bias, np.float64)[None, :, None, None]
    return y


def dgrad(prob: Problem, dy: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """dx (N, C, H, W) from dy (N, K, P, Q) and w; ``bias`` (C,) is added (conv_transpose2d)."""
    dy, w = np.asarray(dy, np.float64), np.asarray(w, np.float64)
    (ph, pw) = prob.padding
    _, wg, dyg = _grouped(prob, np.zeros(prob.x_shape), w, dy)
    dxp = np.zeros((prob.n, prob.groups, prob.c_per_group, prob.h + 2 * ph, prob.w + 2 * pw))
    for r in range(prob.r):
        for s in range(prob.s):
            hs, ws = _window(dxp, prob, r, s)
            dxp[..., hs, ws] += np.einsum("ngkpq,gkc->ngcpq", dyg, wg[..., r, s], optimize=True)
    dx = dxp[..., ph:ph + prob.h, pw:pw + prob.w].reshape(prob.x_shape)
    if bias is not None:
        dx = dx + np.asarray(bias, np.float64)[None, :, None, None]
    return np.ascontiguousarray(dx)


def wgrad(prob: Problem, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dw (K, C/groups, R, S) from x (N, C, H, W) and dy (N, K, P, Q)."""
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    xg, _, dyg = _grouped(prob, x, np.zeros(prob.w_shape), dy)
    xp = _pad(xg, prob)
    dw = np.zeros((prob.groups, prob.k_per_group, prob.c_per_group, prob.r, prob.s))
    for r in range(prob.r):
        for s in range(prob.s):
            hs, ws = _window(xp, prob, r, s)
            dw[..., r, s] = np.einsum("ngcpq,ngkpq->gkc", xp[..., hs, ws], dyg, optimize=True)
    return dw.reshape(prob.w_shape)


def solve(prob: Problem, a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """The reference output of ``prob`` for operands (a, b) in the plugin order of problem.py."""
    if prob.op == "forward":
        return forward(prob, a, b, bias)
    if prob.op == "dgrad":
        return dgrad(prob, a, b, bias)
    return wgrad(prob, a, b)


def transpose_output_size(size: int, kernel: int, stride: int, padding: int, output_padding: int,
                          dilation: int) -> int:
    """Output length of conv_transpose2d along one axis (PyTorch's formula)."""
    return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


# ---- naive loops: the reference's own reference (tiny shapes only) -------------------------------
def forward_naive(prob: Problem, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Seven nested Python loops, straight from the definition."""
    (sh, sw), (ph, pw), (dh, dw) = prob.stride, prob.padding, prob.dilation
    y = np.zeros(prob.y_shape)
    kpg, cpg = prob.k_per_group, prob.c_per_group
    for n in range(prob.n):
        for k in range(prob.k):
            g = k // kpg
            for p in range(prob.p):
                for q in range(prob.q):
                    acc = 0.0
                    for c in range(cpg):
                        for r in range(prob.r):
                            for s in range(prob.s):
                                h, ww = p * sh - ph + r * dh, q * sw - pw + s * dw
                                if 0 <= h < prob.h and 0 <= ww < prob.w:
                                    acc += float(x[n, g * cpg + c, h, ww]) * float(w[k, c, r, s])
                    y[n, k, p, q] = acc
    return y

