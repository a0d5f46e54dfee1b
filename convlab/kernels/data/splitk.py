"""Split-K: cutting a GEMM's reduction over blocks, and the ordered sum of the partial results.

When the output tiles alone leave SMs idle, the reduction (K of the GEMM) is cut into ``splits``
chunks; chunk z writes a partial result, and the partials are added in the fixed order z = 0, 1, ...,
so the bits never depend on scheduling:

    split_plan(tiles, K, ...)     -> (splits, chunk): how far to split, within a workspace limit
    sum_partials(part, out, S)    out[i] (+)= part[0][i] + part[1][i] + ... + part[S-1][i]  (a kernel)
                                  (+ bias[(i // inner) % channels]: a per-channel bias of an NCHW
                                  (inner = H*W) or NHWC (inner = 1) output, added after the sum;
                                  out_kind: float32 partials into an fp16 / bf16 out, rounded as stored)

``sum_partials`` is the second pass of the direct and im2col backward-weight kernels, of the tiled
GEMM's ``ksplit`` and of the tensor-core convolution's split-K (forward, dgrad, wgrad); the implicit
GEMM sums in the same launch (its last block per tile) with the same order. :func:`sm_count` is the
target's SM count (convlab.runtime.targets: 2 on the simulator, so that small test problems split).
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from convlab import runtime
from convlab.runtime import cuda

from convlab.kernels.arch.intrinsics import u32

MAX_INDEX = 2**31 - 1  # every flat index of a split workspace must fit a signed 32-bit int
_U32 = 2**32


def sm_count(target: Any = None) -> int:
    """Streaming multiprocessors of ``target`` (default: the current one; the simulator has 2, so that
    small test problems split)."""
    return (runtime.target() if target is None else target).sm_count


def split_plan(tiles: int, k_len: int, bk: int, threads: int, out_elems: int, limit: int,
               itemsize: int = 4, min_tiles_per_split: int = 8, target: Any = None) -> tuple[int, int]:
    """(splits, chunk) for a GEMM of ``tiles`` output tiles and reduction length ``k_len``.

    Aims at about 16 warps per SM (at least 2 blocks each); every chunk is a multiple of ``bk`` holding
    at least ``min_tiles_per_split`` slices; the workspace ((splits * out_elems + tiles) * itemsize bytes,
    none when splits == 1) stays within ``limit`` and below 2**31 elements.
    """
    wanted = sm_count(target) * max(2, 512 // threads)
    k_tiles = k_len // bk
    splits = 1
    if tiles < wanted:
        splits = min(math.ceil(wanted / tiles), max(1, k_tiles // min_tiles_per_split))
    fit = min((limit // itemsize - tiles) // max(1, out_elems), (MAX_INDEX - tiles) // max(1, out_elems))
    splits = min(splits, fit)
    if splits < 2:
        return 1, k_len
    chunk = math.ceil(k_tiles / splits) * bk
    return math.ceil(k_len / chunk), chunk


def flat(arr: Any, name: str) -> Any:
    """``arr`` as a 1-D device array (a view of a C-contiguous one); TypeError/ValueError naming
    ``name`` otherwise."""
    if not runtime.is_cuda_array_like(arr):
        raise TypeError(f"{name} must be a device array, got {type(arr).__name__}")
    arr = runtime.as_device_array(arr)
    if arr.ndim != 1:
        if not arr.is_c_contiguous():
            raise ValueError(f"{name} must be C-contiguous")
        arr = arr.reshape((arr.size,))
    return arr


@runtime.jit(device=True, inline="always")  # inlined in Numba's IR: the kernels' PTX as if written in place
def ordered_sum(part, i, splits, size):
    """part[i] + part[size + i] + ... + part[(splits - 1) * size + i], in split order (deterministic)."""
    acc = part[i]
    s = u32(1)
    while s < splits:
        acc += part[u32(u32(s * size) + i)]
        s = u32(s + 1)
    return acc


@functools.cache
def _sum_kernel(out_kind: str | None) -> Any:
    """``sum_splits(part, out, splits, size, accumulate, bias, inner, channels)``: out[i] (+)= sum_{s <
    splits} part[s * size + i], summed in order s = 0, 1, ... (deterministic), then + bias[(i // inner) %
    channels] when channels > 0, then + out[i] when accumulating. ``out_kind`` None: out and bias in
    part's type; "float16" / "bfloat16" (uint16 bits): the float32 sum rounded to nearest even as it is
    stored (bias in out's type, widened; no accumulate), the rounding of convlab.kernels.data.convert."""
    from convlab.kernels.data import convert

    load, store = convert.to_f32(out_kind), convert.from_f32(out_kind)

    def sum_splits(part, out, splits, size, accumulate, bias, inner, channels):
        i = u32(cuda.grid(1))
        if i < size:
            acc = ordered_sum(part, i, splits, size)
            if channels > 0:
                acc += load(bias[u32(u32(i // inner) % channels)])
            if accumulate:
                acc += load(out[i])
            out[i] = store(acc)

    return runtime.jit(sum_splits)


#: out's element type for each ``out_kind`` of :func:`sum_partials` (None: part's own)
OUT_TYPES = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(np.uint16)}


def sum_partials(part: Any, out: Any, splits: int, *, accumulate: bool = False, bias: Any = None,
                 inner: int = 1, out_kind: str | None = None) -> None:
    """out (+)= sum over s < splits of part[s] (in order s = 0, 1, ...: deterministic) (+ bias).

    ``part`` holds ``splits`` consecutive blocks of ``out.size`` elements (any C-contiguous shapes,
    e.g. (splits, *out.shape)), of out's dtype, or float32 with ``out_kind`` "float16" / "bfloat16"
    (out float16 or uint16 bf16 bits: the float32 sum rounded as stored, one pass instead of a sum and a
    convert.narrow). ``bias``: None, or a 1-D device array of out's dtype added once per element after
    the sum (in float32 for a half out), channel (i // inner) % bias.size for flat index i (an NCHW
    output: inner = H*W; NHWC: inner = 1); with ``accumulate`` out's old value is added last.
    Launches on the default stream; does not synchronise.
    """
    dpart, dout = flat(part, "part"), flat(out, "out")
    dbias = dout if bias is None else flat(bias, "bias")
    if out_kind is not None and out_kind not in OUT_TYPES:
        raise ValueError(f"out_kind must be None or one of {sorted(OUT_TYPES)}, got {out_kind!r}")
    want_part = np.dtype(np.float32) if out_kind else dout.dtype
    want_out = OUT_TYPES[out_kind] if out_kind else dpart.dtype
    if dpart.dtype != want_part or dout.dtype != want_out or dbias.dtype != dout.dtype:
        raise TypeError(f"part has dtype {dpart.dtype}, out has {dout.dtype}, bias {dbias.dtype} "
                        f"(out_kind {out_kind}: part {want_part}, out and bias {want_out})")
    if isinstance(splits, bool) or splits < 1 or dpart.size < splits * dout.size or dpart.size >= _U32:
        raise ValueError(f"part ({dpart.size} elements) must hold splits={splits} >= 1 blocks of "
                         f"{dout.size} elements, within 32-bit indexing")
    if bias is not None and (dbias.size < 1 or not 1 <= inner < _U32):
        raise ValueError(f"bias must be non-empty and inner >= 1, got {dbias.size} elements, inner {inner}")
    if accumulate and out_kind:
        raise ValueError("accumulate adds into a float32 out only (out_kind must be None)")
    if dout.size == 0:
        return
    threads = 64 if runtime.target().simulator else 256
    _sum_kernel(out_kind)[math.ceil(dout.size / threads), threads](
        dpart, dout, u32(splits), u32(dout.size), u32(bool(accumulate)), dbias, u32(inner),
        u32(0 if bias is None else dbias.size))
