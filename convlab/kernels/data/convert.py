"""Element type conversions on the device: half (fp16, or bf16 held as uint16 bits) <-> float32.

    widen   dst[i] = float32(src[i])               fp16 -> fp32 exactly; bf16 bits << 16
    narrow  dst[i] = half(src[i])                  round to nearest even (fp16 cast, cvt.rn.bf16.f32)

One grid-stride loop per direction and kind; bf16 goes through the tensor-core layer's intrinsics
(:func:`convlab.kernels.arch.mma.bf16_to_f32`, :func:`~convlab.kernels.arch.mma.f32_to_bf16`), so the conversions
match the tensor-core epilogue bit for bit. Used by the ``widen`` plugin (half-precision problems on
the float32 kernels).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from convlab import runtime
from convlab.kernels.arch import mma
from convlab.runtime import cuda

KINDS = ("float16", "bfloat16")


@runtime.jit(device=True)
def _to_f32(x):
    return np.float32(x)


@runtime.jit(device=True)
def _same(x):
    return x


def half_kind(dtype: str) -> str | None:
    """``dtype`` when it is one of the half kinds (float16, bfloat16), else None (float32 and wider)."""
    return dtype if dtype in KINDS else None


def to_f32(kind: str | None) -> Callable:
    """The device function reading a value of ``kind`` ("float16", "bfloat16" bits, or None: already
    float32 / the caller's own type) as float32."""
    return mma.bf16_to_f32 if kind == "bfloat16" else _to_f32 if kind else _same


def from_f32(kind: str | None) -> Callable:
    """The device function turning a float32 into what a ``kind`` array stores (bf16: its bits rounded to
    nearest even; float16 and None: the value itself, which a float16 store rounds to nearest even)."""
    return mma.f32_to_bf16 if kind == "bfloat16" else _same


@functools.cache
def _kernel(kind: str, direction: str) -> Callable:
    """The conversion kernel (src, dst) of one half kind ("float16" / "bfloat16") and direction."""
    if kind not in KINDS or direction not in ("widen", "narrow"):
        raise ValueError(f"kind must be one of {KINDS} and direction widen/narrow, got {kind!r}, {direction!r}")
    conv = to_f32(kind) if direction == "widen" else from_f32(kind)

    def convert(src, dst):
        i = cuda.grid(1)
        while i < dst.size:
            dst[i] = conv(src[i])
            i += cuda.gridsize(1)
    return runtime.jit(convert)


def _launch(kernel: Callable, src: Any, dst: Any) -> None:
    sim = runtime.target().simulator  # the simulator: few threads and blocks (each thread is Python)
    threads = 64 if sim else 256
    blocks = max(1, min((dst.size + threads - 1) // threads, 4 if sim else 8192))
    kernel[blocks, threads](src, dst)


def widen(src: Any, dst: Any, kind: str) -> None:
    """dst (float32, flat) <- src (flat float16, or uint16 bf16 bits), same length."""
    if src.size != dst.size:
        raise ValueError(f"src and dst must have the same length, got {src.size} and {dst.size}")
    _launch(_kernel(kind, "widen"), src, dst)


def narrow(src: Any, dst: Any, kind: str) -> None:
    """dst (flat float16, or uint16 bf16 bits) <- src (float32, flat), rounded to nearest even."""
    if src.size != dst.size:
        raise ValueError(f"src and dst must have the same length, got {src.size} and {dst.size}")
    _launch(_kernel(kind, "narrow"), src, dst)
