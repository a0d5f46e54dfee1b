"""Data movement of a strided backward-data run by stride phases: one phase's filter in the layout the
tensor-core gather reads, and the fill of the outputs no phase writes.

    sub_filter   dst[c, th, tw, k] = w[k, c, r0 - th*rstep, s0 - tw*sstep]   (k < K; 0 for K <= k < Kp)
                 src w [K, C, R, S] (KCRS, flat), dst [C, Th, Tw, Kp] (flat): the phase's taps, the filter
                 K <-> C transposed, its taps in the order of the dy offsets they read (r descending)
    fill_bias    y[i] = bias[(i // inner) % channels], or 0 without a bias: every element of y [n, C, H, W]
                 (inner = H*W) or [n, H, W, C] (inner = 1)

Both one thread an output element, consecutive threads on consecutive outputs; arrays as the kernels see
them (``runtime.kernel_view``), 16-bit ones moved as uint16 bits (nothing is converted). 32-bit indices.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from convlab import runtime
from convlab.kernels.arch.intrinsics import u32 as U
from convlab.runtime import cuda

THREADS_GPU, THREADS_SIM = 256, 32


@functools.cache
def _sub_filter_kernel(dtype: str) -> Callable:
    zero = np.dtype(dtype).type(0)

    def sub_filter(src, dst, k_, c_, r_, s_, kp, th_, tw_, r0, rstep, s0, sstep):
        t = U(U(U(cuda.blockIdx.x) * U(cuda.blockDim.x)) + U(cuda.threadIdx.x))
        if t >= U(U(U(c_ * th_) * tw_) * kp):
            return
        k = U(t % kp)
        tap = U(t // kp)
        tw = U(tap % tw_)
        th = U(U(tap // tw_) % th_)
        c = U(U(tap // tw_) // th_)
        r, s = U(r0 - U(th * rstep)), U(s0 - U(tw * sstep))
        dst[t] = src[U(U(U(U(U(k * c_) + c) * r_) + r) * s_) + s] if k < k_ else zero

    return runtime.jit(sub_filter)


@functools.cache
def _fill_kernel(dtype: str, has_bias: bool) -> Callable:
    zero = np.dtype(dtype).type(0)

    def fill_bias(y, bias, total, inner, channels):
        t = U(U(U(cuda.blockIdx.x) * U(cuda.blockDim.x)) + U(cuda.threadIdx.x))
        if t < total:
            y[t] = bias[U(U(t // inner) % channels)] if has_bias else zero

    return runtime.jit(fill_bias)


def _blocks(count: int) -> tuple[int, int]:
    threads = THREADS_SIM if runtime.target().simulator else THREADS_GPU
    return max(1, -(-count // threads)), threads


def _bits(arr: Any) -> Any:
    """A 16-bit array as its uint16 bits (NVVM rejects a select of half values), others as they are."""
    return arr.view(np.uint16) if np.dtype(arr.dtype).itemsize == 2 else arr


def sub_filter(w: Any, dst: Any, k: int, c: int, r: int, s: int, kp: int, taps_h: tuple[int, int, int],
               taps_w: tuple[int, int, int]) -> None:
    """dst [C, Th, Tw, Kp] (flat) from w [K, C, R, S] (flat, module doc); ``taps_h`` (Th, r0, rstep) and
    ``taps_w`` (Tw, s0, sstep): the phase's taps along each axis."""
    (th, r0, rstep), (tw, s0, sstep) = taps_h, taps_w
    total = c * th * tw * kp
    if total >= 2**32 or k * c * r * s >= 2**32:
        raise ValueError(f"sub_filter takes fewer than 2**32 elements a side, got {total} and {k * c * r * s}")
    grid, threads = _blocks(total)
    w, dst = _bits(w), _bits(dst)
    _sub_filter_kernel(np.dtype(w.dtype).name)[grid, threads](
        w, dst, U(k), U(c), U(r), U(s), U(kp), U(th), U(tw), U(r0), U(rstep), U(s0), U(sstep))


def fill_bias(y: Any, bias: Any | None, inner: int, channels: int) -> None:
    """Every element of the flat ``y`` set to its channel's bias (``bias`` [channels], or 0 when None);
    channel (i // inner) % channels (module doc)."""
    total = int(y.size)
    if total >= 2**32:
        raise ValueError(f"fill_bias takes fewer than 2**32 elements, got {total}")
    grid, threads = _blocks(total)
    y, bias = _bits(y), None if bias is None else _bits(bias)
    _fill_kernel(np.dtype(y.dtype).name, bias is not None)[grid, threads](
        y, y if bias is None else bias, U(total), U(inner), U(channels))
