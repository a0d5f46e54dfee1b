"""Split-K's ordered sum of partials with an epilogue (convlab.epilogue) fused: the last pass of a split
convolution applies the epilogue as it rounds, instead of a rounding pass and then the epilogue pass.

    for i < size:                                          # one thread per output element
        t = part[0][i] + part[1][i] + ... + part[S-1][i]   # float32, in split order (deterministic)
        k = (i // inner) % channels                        # NCHW: inner = P*Q; NHWC: inner = 1
        t += bias[k]                                       # when there is a bias
        out[i] = epilogue(t, k, residual[i])               # rounded once to out's dtype

The sum is :func:`convlab.kernels.data.splitk.sum_partials`' (same order, float32); the epilogue is
:func:`convlab.kernels.epilogue.fused_store`'s, the residual read at i (out's layout).
"""
from __future__ import annotations

import math
from typing import Any, Callable

from convlab import runtime
from convlab.epilogue import Epilogue
from convlab.kernels.arch.intrinsics import u32
from convlab.kernels.data.convert import half_kind, to_f32
from convlab.kernels.data.splitk import ordered_sum
from convlab.kernels.epilogue import EpilogueOperands, epilogue_cache, fused_store
from convlab.runtime import cuda


@epilogue_cache
def _sum_kernel(dtype: str, epi: Epilogue) -> Callable:
    """``sum_splits(part, out, splits, size, bias, inner, channels, has_bias, r, scale, shift)`` for an
    output ``dtype`` ("float16", "bfloat16" as uint16 bits, "float32") and epilogue ``epi``."""
    load = to_f32(half_kind(dtype))
    put = fused_store(dtype, epi)

    def sum_splits(part, out, splits, size, bias, inner, channels, has_bias, r, scale, shift):
        i = u32(cuda.grid(1))
        if i < size:
            acc = ordered_sum(part, i, splits, size)
            k = u32(u32(i // inner) % channels)
            if has_bias:
                acc += load(bias[k])
            put(out, i, acc, k, (r, scale, shift))

    return runtime.jit(sum_splits)


def sum_partials_fused(part: Any, out: Any, splits: int, epilogue: EpilogueOperands, *, channels: int,
                       inner: int = 1, bias: Any = None) -> None:
    """out = epilogue(sum over s < splits of part[s] (+ bias)): ``part`` float32 [splits * out.size]
    (flat), ``out`` flat of ``epilogue.dtype`` (bf16 as uint16 bits) holding ``channels`` channels,
    channel (i // inner) % channels of flat index i; ``bias`` None or (channels,) of out's dtype; the
    residual flat in out's layout. Launches on the ambient stream; does not synchronise."""
    size = int(out.size)
    if size == 0:
        return
    threads = 64 if runtime.target().simulator else 256
    r = out if epilogue.residual is None else epilogue.residual  # no residual: out stands in (never read)
    _sum_kernel(epilogue.dtype, epilogue.epilogue)[math.ceil(size / threads), threads](
        part, out, u32(splits), u32(size), out if bias is None else bias, u32(inner), u32(channels),
        bias is not None, r, epilogue.scale, epilogue.shift)
