"""The epilogue pass: one elementwise kernel that applies a :class:`convlab.epilogue.Epilogue` to a
convolution's output in place, after any plugin wrote it (so every epilogue works with every plugin).

Loop nest (grid-stride over the logical (N, K, S) index, S the product of the spatial sizes, 1D-3D):

    for i in range(N * K * S):                          # one element per thread per stride
        k = (i // S) % K
        t = float(y[at(i)]) * scale[k] + shift[k]       # at(): NCHW (i itself) or channels-last memory
        t = act(t + r[at_r(i)])  or  act(t) + r[at_r(i)]  # the residual before or after act
        y[at(i)] = t                                     # rounded to y's dtype

``y`` and the residual are flat views of dense memory, each C-contiguous or channels-last (its own);
they share the output dtype. The arithmetic is float32 for float16, bfloat16 (uint16 bits) and float32,
float64 for float64; scale and shift are arrays of that compute type.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np

from convlab import runtime
from convlab.epilogue import Epilogue
from convlab.kernels.data.convert import from_f32, half_kind, to_f32
from convlab.runtime import cuda


def compute_dtype(dtype: str) -> np.dtype:
    """The dtype the pass computes in (and holds scale / shift in) for an output ``dtype``."""
    return np.dtype(np.float64 if dtype == "float64" else np.float32)


def _activation(name: str, slope: float, ct: Any) -> Callable:
    """The device function of activation ``name`` on values of the compute type ``ct``."""
    zero, one, half, three, six = ct(0.0), ct(1.0), ct(0.5), ct(3.0), ct(6.0)
    leak, inv_sqrt2 = ct(slope), ct(1.0 / math.sqrt(2.0))
    tanh_a, tanh_b = ct(math.sqrt(2.0 / math.pi)), ct(0.044715)

    def identity(t):
        return t

    def relu(t):
        return t if t > zero else zero

    def relu6(t):
        return zero if t < zero else six if t > six else t

    def leaky_relu(t):
        return t if t >= zero else leak * t

    def gelu(t):
        return half * t * (one + ct(math.erf(t * inv_sqrt2)))

    def gelu_tanh(t):
        return half * t * (one + ct(math.tanh(tanh_a * (t + tanh_b * t * t * t))))

    def sigmoid(t):
        return one / (one + ct(math.exp(-t)))

    def silu(t):
        return t / (one + ct(math.exp(-t)))

    def hardswish(t):
        u = t + three
        return t * (zero if u < zero else six if u > six else u) / six

    functions = {"identity": identity, "relu": relu, "relu6": relu6, "leaky_relu": leaky_relu, "gelu": gelu,
                 "gelu_tanh": gelu_tanh, "sigmoid": sigmoid, "silu": silu, "hardswish": hardswish}
    return runtime.jit(device=True)(functions[name])


@functools.cache
def _kernel(dtype: str, epi: Epilogue, y_channels_last: bool, r_channels_last: bool) -> Callable:
    """The pass for one output dtype, epilogue and pair of layouts (each a compile-time constant)."""
    ct = compute_dtype(dtype).type
    kind = half_kind(dtype)
    read, write = to_f32(kind), from_f32(kind)
    act = _activation(epi.activation, epi.negative_slope, ct)
    has_scale, has_shift, residual = epi.scale, epi.shift, epi.residual
    before, after = residual == "before", residual == "after"

    def apply(y, r, scale, shift, total, channels, inner):
        i = cuda.grid(1)
        while i < total:
            k = (i // inner) % channels
            nk = i // inner
            cl = (nk // channels) * channels * inner + (i % inner) * channels + k  # channels-last offset
            at = cl if y_channels_last else i
            t = ct(read(y[at]))
            if has_scale:
                t = t * scale[k]
            if has_shift:
                t = t + shift[k]
            if before:
                t = t + ct(read(r[cl if r_channels_last else i]))
            t = act(t)
            if after:
                t = t + ct(read(r[cl if r_channels_last else i]))
            y[at] = write(t)
            i += cuda.gridsize(1)
    return runtime.jit(apply)


def apply_epilogue(y: Any, epi: Epilogue, dtype: str, *, y_channels_last: bool = False, residual: Any = None,
                   residual_channels_last: bool = False, scale: Any = None, shift: Any = None) -> None:
    """Apply ``epi`` in place to the device array ``y`` (N, K, *spatial) of ``dtype``, dense,
    channels-last when ``y_channels_last``. ``residual``: a dense device array of y's shape and dtype
    (channels-last when ``residual_channels_last``); ``scale`` / ``shift``: device arrays (K,) of
    :func:`compute_dtype`. Each one present exactly when ``epi`` says so (ValueError otherwise)."""
    for name, value, wanted in (("residual", residual, epi.residual is not None), ("scale", scale, epi.scale),
                                ("shift", shift, epi.shift)):
        if (value is not None) != wanted:
            raise ValueError(f"{name} must be given exactly when the epilogue has one ({epi})")
    shape = tuple(int(s) for s in y.shape)
    total = int(np.prod(shape, dtype=np.int64))
    if epi.is_identity or total == 0:
        return
    channels, inner = shape[1], int(np.prod(shape[2:], dtype=np.int64))
    flat_y = runtime.kernel_view(runtime.flat_view(y))
    placeholder = None
    if scale is None or shift is None:
        placeholder = runtime.to_device(np.zeros(1, compute_dtype(dtype)))
    flat_r = flat_y if residual is None else runtime.kernel_view(runtime.flat_view(residual))
    kernel = _kernel(dtype, epi, y_channels_last, residual is not None and residual_channels_last)
    sim = runtime.target().simulator  # the simulator: few threads and blocks (each thread is Python)
    threads = 64 if sim else 256
    blocks = max(1, min((total + threads - 1) // threads, 2 if sim else 8192))
    kernel[blocks, threads](flat_y, flat_r, placeholder if scale is None else scale,
                            placeholder if shift is None else shift, total, channels, inner)
