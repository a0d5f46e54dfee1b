"""The depth-unfold kernels: a 3D convolution as a 2D one over depth windows (the ``depth_unfold``
composite plugin), one thread per output element in grid-stride launches.

    unfold  x'[n*Do + o, c*T + t, h, w] = x[n, c, o*sd - pd + t*dd, h, w]      (0 outside x)
    fold    dx[n, c, z, h, w] = bias[c] + sum over (o, t) with z = o*sd - pd + t*dd, 0 <= o < Do of
                                dx'[n*Do + o, c*T + t, h, w]                    (a fixed order: deterministic)
    swap    dst[a, c, b, e] = src[a, b, c, e]       (y' (N, Do, K, PQ) <-> y (N, K, Do, PQ))

unfold and swap move values as bits (any element type: bfloat16 as uint16); fold adds in the operand
dtype (float32 / float64). Arrays are flat, sizes passed as ints.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from convlab import runtime
from convlab.runtime import cuda

THREADS = 128
_MAX_BLOCKS = 4096  # grid-stride beyond it


def _grid(total: int) -> int:
    blocks = max(1, math.ceil(total / THREADS))
    return min(blocks, 64 if runtime.target().simulator else _MAX_BLOCKS)


@functools.cache
def _unfold_kernel(dtype: str):
    zero = np.dtype(dtype).type(0)

    @runtime.jit
    def depth_unfold(x, xu, total, C, D, HW, T, O, sd, pd, dd):
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        while i < total:
            hw = i % HW
            j = i // HW
            t = j % T
            j = j // T
            c = j % C
            j = j // C
            o = j % O
            n = j // O
            z = o * sd - pd + t * dd
            v = zero
            if 0 <= z < D:
                v = x[((n * C + c) * D + z) * HW + hw]
            xu[i] = v
            i += step

    return depth_unfold


@functools.cache
def _fold_kernel(dtype: str):
    zero = np.dtype(dtype).type(0)

    @runtime.jit
    def depth_fold(xu, dx, bias, total, C, D, HW, T, O, sd, pd, dd, has_bias):
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        while i < total:
            hw = i % HW
            j = i // HW
            z = j % D
            j = j // D
            c = j % C
            n = j // C
            acc = zero
            for t in range(T):
                zz = z + pd - t * dd
                if zz >= 0 and zz % sd == 0 and zz // sd < O:
                    o = zz // sd
                    acc += xu[(((n * O + o) * C + c) * T + t) * HW + hw]
            if has_bias:
                acc += bias[c]
            dx[i] = acc
            i += step

    return depth_fold


@functools.cache
def _swap_kernel(dtype: str):
    @runtime.jit
    def swap(src, dst, total, B, C, E):
        i = cuda.grid(1)
        step = cuda.gridsize(1)
        while i < total:  # i indexes dst (A, C, B, E)
            e = i % E
            j = i // E
            b = j % B
            j = j // B
            c = j % C
            a = j // C
            dst[i] = src[((a * B + b) * C + c) * E + e]
            i += step

    return swap


def _flat(arr):
    return runtime.kernel_view(arr.reshape((arr.size,)))


def depth_unfold(problem, x, xu) -> None:
    """``xu`` (N*Do, C*T, H, W), flat or shaped) <- the depth windows of ``x`` (N, C, D, H, W)."""
    pr = problem
    src, dst = _flat(x), _flat(xu)
    total = pr.n * pr.do * pr.c * pr.t * pr.h * pr.w
    _unfold_kernel(src.dtype.name)[_grid(total), THREADS](src, dst, total, pr.c, pr.d, pr.h * pr.w, pr.t, pr.do,
                                                          pr.stride_d, pr.padding_d, pr.dilation_d)


def depth_fold(problem, xu, dx, bias) -> None:
    """``dx`` (N, C, D, H, W) <- the depth fold of ``xu`` (N*Do, C*T, H, W) (+ ``bias`` (C,))."""
    pr = problem
    src, dst = xu.reshape((xu.size,)), dx.reshape((dx.size,))
    total = pr.n * pr.c * pr.d * pr.h * pr.w
    has_bias = bias is not None
    _fold_kernel(pr.dtype)[_grid(total), THREADS](src, dst, bias if has_bias else dst, total, pr.c, pr.d,
                                                  pr.h * pr.w, pr.t, pr.do, pr.stride_d, pr.padding_d,
                                                  pr.dilation_d, has_bias)


def swap_axes(src, dst, a: int, b: int, c: int, e: int) -> None:
    """``dst`` (A, C, B, E) <- ``src`` (A, B, C, E) (flat or shaped, any element type)."""
    s, d = _flat(src), _flat(dst)
    total = a * b * c * e
    _swap_kernel(s.dtype.name)[_grid(total), THREADS](s, d, total, b, c, e)
