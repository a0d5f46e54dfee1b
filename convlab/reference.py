"""Float64 numpy references for the canonical problems of 1, 2 or 3 spatial dimensions (vectorized: a
loop over the filter taps only).

Each tap (t, r, s) of the filter (2D: (r, s); 1D: (s,)) sees a strided window of the zero-padded input:

    window(r, s)[n, c, p, q] = x_pad[n, c, r*dh + p*sh, s*dw + q*sw]       (likewise per axis in N-d)

so forward is a sum over taps of a grouped channel contraction, dgrad scatters the same contraction back
into the padded input, and wgrad contracts the window with dy over (n, p, q).
"""
from __future__ import annotations

import itertools

import numpy as np

from .epilogue import Epilogue
from .problem import Problem


def _window(prob: Problem, tap: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(i * dl, i * dl + (o - 1) * st + 1, st)
                 for i, dl, st, o in zip(tap, prob.dilations, prob.strides, prob.spatial_out))


def _taps(prob: Problem):
    return itertools.product(*(range(k) for k in prob.kernel_size))


def _grouped(prob: Problem, x: np.ndarray, w: np.ndarray, dy: np.ndarray | None = None):
    g = prob.groups
    xg = x.reshape((prob.n, g, prob.c_per_group) + prob.spatial_in)
    wg = w.reshape((g, prob.k_per_group, prob.c_per_group) + prob.kernel_size)
    dyg = None if dy is None else dy.reshape((prob.n, g, prob.k_per_group) + prob.spatial_out)
    return xg, wg, dyg


def _pad(x: np.ndarray, prob: Problem) -> np.ndarray:
    return np.pad(x, ((0, 0), (0, 0), (0, 0)) + tuple((p, p) for p in prob.paddings))


def _bias_view(bias: np.ndarray, prob: Problem) -> np.ndarray:
    return np.asarray(bias, np.float64).reshape((1, -1) + (1,) * prob.ndim)


def forward(prob: Problem, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """y (N, K, *out) from x (N, C, *spatial) and w (K, C/groups, *kernel), in float64."""
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    xg, wg, _ = _grouped(prob, x, w)
    xp = _pad(xg, prob)
    y = np.zeros((prob.n, prob.groups, prob.k_per_group) + prob.spatial_out)
    for tap in _taps(prob):
        y += np.einsum("ngc...,gkc->ngk...", xp[(Ellipsis,) + _window(prob, tap)], wg[(Ellipsis,) + tap],
                       optimize=True)
    y = y.reshape(prob.y_shape)
    if bias is not None:
        y += _bias_view(bias, prob)
    return y


def dgrad(prob: Problem, dy: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """dx (N, C, *spatial) from dy (N, K, *out) and w; ``bias`` (C,) is added (the transpose)."""
    dy, w = np.asarray(dy, np.float64), np.asarray(w, np.float64)
    _, wg, dyg = _grouped(prob, np.zeros(prob.x_shape), w, dy)
    padded = tuple(s + 2 * p for s, p in zip(prob.spatial_in, prob.paddings))
    dxp = np.zeros((prob.n, prob.groups, prob.c_per_group) + padded)
    for tap in _taps(prob):
        dxp[(Ellipsis,) + _window(prob, tap)] += np.einsum("ngk...,gkc->ngc...", dyg, wg[(Ellipsis,) + tap],
                                                           optimize=True)
    inner = tuple(slice(p, p + s) for s, p in zip(prob.spatial_in, prob.paddings))
    dx = dxp[(Ellipsis,) + inner].reshape(prob.x_shape)
    if bias is not None:
        dx = dx + _bias_view(bias, prob)
    return np.ascontiguousarray(dx)


def wgrad(prob: Problem, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dw (K, C/groups, *kernel) from x (N, C, *spatial) and dy (N, K, *out)."""
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    xg, _, dyg = _grouped(prob, x, np.zeros(prob.w_shape), dy)
    xp = _pad(xg, prob)
    dw = np.zeros((prob.groups, prob.k_per_group, prob.c_per_group) + prob.kernel_size)
    for tap in _taps(prob):
        dw[(Ellipsis,) + tap] = np.einsum("ngc...,ngk...->gkc", xp[(Ellipsis,) + _window(prob, tap)], dyg,
                                          optimize=True)
    return dw.reshape(prob.w_shape)


def solve(prob: Problem, a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """The reference output of ``prob`` for operands (a, b) in the plugin order of convlab.problem."""
    if prob.op == "forward":
        return forward(prob, a, b, bias)
    if prob.op == "dgrad":
        return dgrad(prob, a, b, bias)
    return wgrad(prob, a, b)


def activate(t: np.ndarray, epilogue: Epilogue) -> np.ndarray:
    """An epilogue's activation of ``t`` (float64), by its definition in convlab.epilogue."""
    name = epilogue.activation
    if name == "relu":
        return np.maximum(t, 0.0)
    if name == "relu6":
        return np.clip(t, 0.0, 6.0)
    if name == "leaky_relu":
        return np.where(t >= 0, t, epilogue.negative_slope * t)
    if name == "gelu":
        from math import erf, sqrt

        return 0.5 * t * (1.0 + np.vectorize(erf, otypes=[np.float64])(t / sqrt(2.0)))
    if name == "gelu_tanh":
        return 0.5 * t * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (t + 0.044715 * t**3)))
    if name == "silu":
        return t / (1.0 + np.exp(-t))
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-t))
    if name == "hardswish":
        return t * np.clip(t + 3.0, 0.0, 6.0) / 6.0
    return t


def epilogue(y: np.ndarray, epi: Epilogue, scale: np.ndarray | None = None, shift: np.ndarray | None = None,
             residual: np.ndarray | None = None) -> np.ndarray:
    """The epilogue ``epi`` applied to y (N, K, *spatial) (the convolution plus any bias), in float64:
    scale and shift (K,) per channel, the residual (y's shape) before or after the activation."""
    t = np.asarray(y, np.float64)
    per_channel = (1, -1) + (1,) * (t.ndim - 2)
    if epi.scale:
        t = t * np.asarray(scale, np.float64).reshape(per_channel)
    if epi.shift:
        t = t + np.asarray(shift, np.float64).reshape(per_channel)
    r = None if epi.residual is None else np.asarray(residual, np.float64)
    if epi.residual == "before":
        t = t + r
    t = activate(t, epi)
    return t + r if epi.residual == "after" else t


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

