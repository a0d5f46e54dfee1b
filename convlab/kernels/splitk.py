"""Split-K: cutting a GEMM's reduction over blocks, and the ordered sum of the partial results.

When the output tiles alone leave SMs idle, the reduction (K of the GEMM) is cut into ``splits``
chunks; chunk z writes a partial result, and the partials are added in the fixed order z = 0, 1, ...,
so the bits never depend on scheduling:

    split_plan(tiles, K, ...)     -> (splits, chunk): how far to split, within a workspace limit
    sum_partials(part, out, S)    out[i] (+)= part[0][i] + part[1][i] + ... + part[S-1][i]  (a kernel)
                                  (+ bias[(i // inner) % channels]: a per-channel bias of an NCHW
                                  (inner = H*W) or NHWC (inner = 1) output, added after the sum)

``sum_partials`` is the second pass of the direct and im2col backward-weight kernels, of the tiled
GEMM's ``ksplit`` and of the tensor-core convolution's split-K (forward, dgrad, wgrad); the implicit
GEMM sums in the same launch (its last block per tile) with the same order. :func:`sm_count` is the
device's SM count, queried once (2 on the simulator, so that small test problems split).
"""
from __future__ import annotations

import functools
import math
from typing import Any

from convlab import runtime
from convlab.runtime import cuda

from .intrinsics import u32

MAX_INDEX = 2**31 - 1  # every flat index of a split workspace must fit a signed 32-bit int
_U32 = 2**32


@functools.cache
def sm_count() -> int:
    """Streaming multiprocessors of the current device (2 on the simulator, to exercise split-K)."""
    if runtime.SIMULATOR:
        return 2
    return int(cuda.get_current_device().MULTIPROCESSOR_COUNT)


def split_plan(tiles: int, k_len: int, bk: int, threads: int, out_elems: int, limit: int,
               itemsize: int = 4, min_tiles_per_split: int = 8) -> tuple[int, int]:
    """(splits, chunk) for a GEMM of ``tiles`` output tiles and reduction length ``k_len``.

    Aims at about 16 warps per SM (at least 2 blocks each); every chunk is a multiple of ``bk`` holding
    at least ``min_tiles_per_split`` slices; the workspace ((splits * out_elems + tiles) * itemsize bytes,
    none when splits == 1) stays within ``limit`` and below 2**31 elements.
    """
    target = sm_count() * max(2, 512 // threads)
    k_tiles = k_len // bk
    splits = 1
    if tiles < target:
        splits = min(math.ceil(target / tiles), max(1, k_tiles // min_tiles_per_split))
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


@runtime.jit
def sum_splits(part, out, splits, size, accumulate, bias, inner, channels):
    """out[i] (+)= sum_{s < splits} part[s * size + i], summed in order s = 0, 1, ... (deterministic),
    then + bias[(i // inner) % channels] when channels > 0, then + out[i] when accumulating."""
    i = u32(cuda.grid(1))
    if i < size:
        acc = part[i]
        s = u32(1)
        while s < splits:
            acc += part[u32(u32(s * size) + i)]
            s = u32(s + 1)
        if channels > 0:
            acc += bias[u32(u32(i // inner) % channels)]
        if accumulate:
            acc += out[i]
        out[i] = acc


def sum_partials(part: Any, out: Any, splits: int, *, accumulate: bool = False, bias: Any = None,
                 inner: int = 1) -> None:
    """out (+)= sum over s < splits of part[s] (in order s = 0, 1, ...: deterministic) (+ bias).

    ``part`` holds ``splits`` consecutive blocks of ``out.size`` elements (any C-contiguous shapes,
    e.g. (splits, *out.shape)), of out's dtype. ``bias``: None, or a 1-D device array of out's dtype
    added once per element after the sum, channel (i // inner) % bias.size for flat index i (an NCHW
    output: inner = H*W; NHWC: inner = 1); with ``accumulate`` out's old value is added last.
    Launches on the default stream; does not synchronise.
    """
    dpart, dout = flat(part, "part"), flat(out, "out")
    dbias = dout if bias is None else flat(bias, "bias")
    if dpart.dtype != dout.dtype or dbias.dtype != dout.dtype:
        raise TypeError(f"part has dtype {dpart.dtype}, out has {dout.dtype}, bias {dbias.dtype}")
    if isinstance(splits, bool) or splits < 1 or dpart.size < splits * dout.size or dpart.size >= _U32:
        raise ValueError(f"part ({dpart.size} elements) must hold splits={splits} >= 1 blocks of "
                         f"{dout.size} elements, within 32-bit indexing")
    if bias is not None and (dbias.size < 1 or not 1 <= inner < _U32):
        raise ValueError(f"bias must be non-empty and inner >= 1, got {dbias.size} elements, inner {inner}")
    if dout.size == 0:
        return
    threads = 64 if runtime.SIMULATOR else 256
    sum_splits[math.ceil(dout.size / threads), threads](
        dpart, dout, u32(splits), u32(dout.size), u32(bool(accumulate)), dbias, u32(inner),
        u32(0 if bias is None else dbias.size))
