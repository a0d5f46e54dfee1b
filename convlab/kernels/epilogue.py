"""The epilogue pass: one elementwise kernel that applies a :class:`convlab.epilogue.Epilogue` to a
convolution's output in place, after any plugin wrote it (so every epilogue works with every plugin).

Loop nest (over y's memory order, S the product of the spatial sizes, 1D-3D; P the channel period of
y's layout: K * S for NCHW, K for channels-last; ``step`` a multiple of P chosen at launch):

    for g in range(step):                               # one thread each, consecutive on consecutive i
        k = (g // S) % K  (NCHW)  or  g % K  (channels-last)   # once: i = g + j * step keeps the channel
        for i in range(g, N * K * S, step):
            t = float(y[i]) * scale[k] + shift[k]
            t = act(t + r[ri])  or  act(t) + r[ri]      # the residual before or after act; ri = i in y's
            y[i] = t                                    # layout, else the other layout's offset; rounded

Index math is uint32 (int64 for tensors of 2**31 elements or more), with no division per element unless
the residual's layout differs from y's: the pass stays bound by memory, not by 64-bit divisions.

``y`` and the residual are flat views of dense memory, each C-contiguous or channels-last (its own);
they share the output dtype. The arithmetic is float32 for float16, bfloat16 (uint16 bits) and float32,
float64 for float64; scale and shift are arrays of that compute type.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from numba import int64

from convlab import runtime
from convlab.epilogue import Epilogue
from convlab.kernels.arch.intrinsics import store_vector, vector_load
from convlab.kernels.arch.intrinsics import u32 as U
from convlab.kernels.data.convert import from_f32, half_kind, to_f32
from convlab.kernels.source import Writer, compile_source
from convlab.runtime import context, cuda

#: threads a pass launches at most (each then walks its channel's elements ``step`` apart): 2**20 is
#: 4096 blocks of 256, about four waves of 8 resident blocks on a 132-SM H200; chosen, not yet timed
WAVE = 1 << 20


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


#: the clear functions of every cache holding kernels or device functions built from :func:`compose`
_CACHES: list[Callable[[], None]] = []


def epilogue_cache(fn: Callable) -> Callable:
    """``functools.cache`` of ``fn``, cleared by :func:`clear_caches` (for builders of epilogue code)."""
    cached = functools.cache(fn)
    _CACHES.append(cached.cache_clear)
    return cached


def register_cache(clear: Callable[[], None]) -> None:
    """Have :func:`clear_caches` call ``clear`` (a cache of fused kernels kept elsewhere)."""
    _CACHES.append(clear)


def clear_caches() -> None:
    """Drop every cached epilogue device function and the kernels built from them, so that the next
    build calls :func:`compose` again (mutation testing patches it: convlab.testing.kernel_mutants)."""
    for clear in _CACHES:
        clear()


def compose(act: Callable, has_scale: bool, has_shift: bool, before: bool, after: bool) -> Callable:
    """The Python function ``finish(t, k, rv, scale, shift)``: the epilogue's terms in the order of the
    module docstring (scale, shift, residual before, ``act``, residual after; absent terms are
    compile-time constants that drop out)."""
    def finish(t, k, rv, scale, shift):
        if has_scale:
            t = t * scale[k]
        if has_shift:
            t = t + shift[k]
        if before:
            t = t + rv
        t = act(t)
        if after:
            t = t + rv
        return t
    return finish


@epilogue_cache
def device_epilogue(dtype: str, epi: Epilogue) -> Callable:
    """The device function ``finish(t, k, rv, scale, shift)`` of ``epi`` for an output ``dtype``: ``t`` the
    convolution's value (bias included) and ``rv`` the residual's, both of :func:`compute_dtype`, ``k``
    the output channel; the epilogue's value in the compute type (the pass and fused stores share it)."""
    act = _activation(epi.activation, epi.negative_slope, compute_dtype(dtype).type)
    finish = compose(act, epi.scale, epi.shift, epi.residual == "before", epi.residual == "after")
    return runtime.jit(device=True)(finish)


@epilogue_cache
def fused_store(dtype: str, epi: Epilogue | None) -> Callable:
    """The write-out of one output element, the part a fused kernel swaps at its store (the kernel's
    main loop stays as it is): device function ``put(out, at, v, k, ep)`` stores into ``out`` (flat,
    C-contiguous; kernel dtype) at ``at`` the accumulator value ``v`` (bias included) of output channel
    ``k``: ``v`` itself for ``epi`` None (``ep`` unused), else ``epi`` applied to ``v`` with
    ``ep = (residual, scale, shift)`` (the flat residual read at ``at``, C-contiguous like ``out``),
    rounded to ``dtype``. The activation and the terms present are compile-time constants."""
    if epi is None:
        def plain(out, at, v, k, ep):
            out[at] = v
        return runtime.jit(device=True, forceinline=True)(plain)
    ct = compute_dtype(dtype).type
    kind = half_kind(dtype)
    read, write = to_f32(kind), from_f32(kind)
    finish = device_epilogue(dtype, epi)
    has_residual, zero = epi.residual is not None, ct(0.0)

    def put(out, at, v, k, ep):
        r, scale, shift = ep
        rv = ct(read(r[at])) if has_residual else zero
        out[at] = write(finish(ct(v), k, rv, scale, shift))
    return runtime.jit(device=True, forceinline=True)(put)


@epilogue_cache
def fused_store_vector(dtype: str, epi: Epilogue, width: int, channel_step: int) -> Callable:
    """:func:`fused_store`'s write-out of ``width`` consecutive output elements as one vector store (and the
    residual's as one vector load): device function ``putv(out, at, cs, s, k, ep)`` stores ``epi``
    applied to ``cs[s + e]`` (float32 staged values, bias included) of output channel ``k + e *
    channel_step`` at ``out[at + e]``, e < ``width`` (0: an NCHW run of pixels shares its channel; 1: a
    channels-last run of channels). Element ``at`` of ``out`` and of the residual is aligned to
    ``width`` elements (the caller's check); each value is :func:`fused_store`'s, bit for bit."""
    ct = compute_dtype(dtype).type
    kind = half_kind(dtype)
    w = Writer("def putv(out, at, cs, s, k, ep):")
    w.indent()
    w("r, scale, shift = ep")
    if epi.residual is not None:
        w("rr = load(r, at)")
    for e in range(width):
        rv = f"ct(read(rr[{e}]))" if epi.residual is not None else "zero"
        w(f"v{e} = write(finish(ct(cs[s + {e}]), k + {e * channel_step}, {rv}, scale, shift))")
    w(f"store_vector(out, at, ({', '.join(f'v{e}' for e in range(width))},))")
    space = compile_source(w.source, f"<convlab.kernels.epilogue putv {dtype} {epi} {width}x{channel_step}>",
                           {"ct": ct, "read": to_f32(kind), "write": from_f32(kind), "zero": ct(0.0),
                            "finish": device_epilogue(dtype, epi), "load": vector_load(width),
                            "store_vector": store_vector})
    return runtime.jit(device=True, forceinline=True)(space["putv"])


@epilogue_cache
def _kernel(dtype: str, epi: Epilogue, y_channels_last: bool, r_channels_last: bool, wide: bool) -> Callable:
    """The pass for one output dtype, epilogue, pair of layouts and index width (each a compile-time
    constant; ``wide``: int64 indices, else uint32)."""
    ct = compute_dtype(dtype).type
    kind = half_kind(dtype)
    read, write = to_f32(kind), from_f32(kind)
    finish = device_epilogue(dtype, epi)
    has_residual, zero = epi.residual is not None, ct(0.0)
    moved = has_residual and r_channels_last != y_channels_last
    I = int64 if wide else U

    def apply(y, r, scale, shift, total, channels, inner, step):
        g = I(cuda.grid(1))
        end, kk, s, st = I(total), I(channels), I(inner), I(step)
        if g >= st:
            return
        k = I(g % kk) if y_channels_last else I(I(g // s) % kk)
        plane = I(kk * s)
        i = g
        while i < end:
            rv = zero
            if has_residual:
                ri = i
                if moved:
                    n = I(i // plane)
                    if y_channels_last:  # y (n, s, k), r (n, k, s)
                        ri = I(I(I(n * kk) + k) * s + I(I(i // kk) % s))
                    else:  # y (n, k, s), r (n, s, k)
                        ri = I(I(I(n * s) + I(i % s)) * kk + k)
                rv = ct(read(r[ri]))
            y[i] = write(finish(ct(read(y[i])), k, rv, scale, shift))
            i = I(i + st)
    return runtime.jit(apply)


@dataclass(frozen=True)
class EpilogueOperands:
    """An epilogue with its device operands, as plugins and the pass take them: ``residual`` a flat view
    of its dense memory (kernel dtype: bfloat16 as uint16 bits; None when there is none),
    ``residual_channels_last`` its layout, ``scale`` and ``shift`` (K,) arrays of :func:`compute_dtype`
    (a one-element placeholder where the epilogue has none)."""

    epilogue: Epilogue
    dtype: str
    residual: Any
    residual_channels_last: bool
    scale: Any
    shift: Any


def operands(epi: Epilogue, dtype: str, *, residual: Any = None, residual_channels_last: bool = False,
             scale: Any = None, shift: Any = None) -> EpilogueOperands:
    """:class:`EpilogueOperands` from device arrays: ``residual`` dense (N, K, *spatial) of the output
    dtype, ``scale`` / ``shift`` (K,) of :func:`compute_dtype`, each present exactly when ``epi`` says
    so (ValueError otherwise)."""
    for name, value, wanted in (("residual", residual, epi.residual is not None), ("scale", scale, epi.scale),
                                ("shift", shift, epi.shift)):
        if (value is not None) != wanted:
            raise ValueError(f"{name} must be given exactly when the epilogue has one ({epi})")
    placeholder = None
    if scale is None or shift is None:  # one per device and compute dtype: no copy to the device per call
        ct = compute_dtype(dtype)
        placeholder = context.current().cached("epilogue placeholders", ct.str,
                                               lambda: runtime.to_device(np.zeros(1, ct)))
    flat_r = None if residual is None else runtime.kernel_view(runtime.flat_view(residual))
    return EpilogueOperands(epi, dtype, flat_r, residual is not None and residual_channels_last,
                            placeholder if scale is None else scale, placeholder if shift is None else shift)


def run_pass(y: Any, ops: EpilogueOperands, y_channels_last: bool = False) -> None:
    """Apply ``ops`` in place to the dense device array ``y`` (N, K, *spatial) of ``ops.dtype``
    (channels-last when ``y_channels_last``)."""
    shape = tuple(int(s) for s in y.shape)
    total = int(np.prod(shape, dtype=np.int64))
    if ops.epilogue.is_identity or total == 0:
        return
    channels, inner = shape[1], int(np.prod(shape[2:], dtype=np.int64))
    period = channels if y_channels_last else channels * inner  # the channel repeats every period elements
    sim = runtime.target().simulator  # the simulator: few threads (each thread is Python)
    threads, target = (64, 128) if sim else (256, WAVE)
    step = period * max(1, min(total // period, target // period))
    flat_y = runtime.kernel_view(runtime.flat_view(y))
    kernel = _kernel(ops.dtype, ops.epilogue, y_channels_last, ops.residual_channels_last,
                     total + step >= 2 ** 31)
    kernel[-(-step // threads), threads](flat_y, flat_y if ops.residual is None else ops.residual, ops.scale,
                                         ops.shift, total, channels, inner, step)


def apply_epilogue(y: Any, epi: Epilogue, dtype: str, *, y_channels_last: bool = False, residual: Any = None,
                   residual_channels_last: bool = False, scale: Any = None, shift: Any = None) -> None:
    """Apply ``epi`` in place to the device array ``y`` (N, K, *spatial) of ``dtype``, dense,
    channels-last when ``y_channels_last``; the operands as :func:`operands` takes them."""
    run_pass(y, operands(epi, dtype, residual=residual, residual_channels_last=residual_channels_last,
                         scale=scale, shift=shift), y_channels_last)
