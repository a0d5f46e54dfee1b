"""Memory layouts of the public ops' 4-D device operands: C-contiguous (NCHW) and channels-last.

Rule: a 4-D device operand (x, grad_out, weight, out) of shape (A, B, C, D) is accepted when it is
C-contiguous, or exactly channels-last: element strides (B*C*D, 1, D*B, B), i.e. NHWC memory viewed
as NCHW (torch's ``memory_format=torch.channels_last``; detected by
:func:`convlab.call.is_channels_last`, C-contiguous wins when both match). Any other layout is
refused before any launch. A plugin declares the layouts its ``run`` takes (``Plugin.layouts``); one
that takes ``"nhwc"`` (``tensor_core``) gets channels-last operands as they are; for the others
:func:`operands_for` hands them NCHW copies:

    each channels-last input      -> transposed into an NCHW buffer lent by convlab.runtime.scratch
    a channels-last ``out``       <- the plugin writes an NCHW scratch buffer, transposed back after

Each transpose is the shared tiled kernel :func:`convlab.kernels.data.transpose.to_channels_last` on flat
views: NHWC -> NCHW is [A, C*D, B] -> [A, B, C*D] (batch A, channels C*D, spatial B), and back
NCHW -> NHWC is [A, B, C*D] -> [A, C*D, B] (batch A, channels B, spatial C*D). When the op's first
input is channels-last and no ``out`` is given, the output is allocated channels-last too
(convlab.call.operands.empty_like_kind). Calls with channels-last operands are planned like others
(convlab.call.plan): the strides are part of the key, and the copies are recorded with the plugin's launches.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np

from convlab import runtime
from convlab.runtime.scratch import scratch


def is_torch(obj: Any) -> bool:
    """True for a torch.Tensor (by its class's module; torch is not imported)."""
    return type(obj).__module__.startswith("torch")


def is_channels_last(obj: Any) -> bool:
    """True for a 4-D torch tensor or Numba device array of shape (N, C, H, W) whose element strides
    are exactly channels-last, (H*W*C, 1, W*C, C), and not also C-contiguous (C-contiguous wins, e.g.
    when C == 1 or H == W == 1); strides of size-1 dimensions are ignored, as torch does. Likewise a
    5-D (N, C, D, H, W) one with channels-last-3d strides (D*H*W*C, 1, H*W*C, W*C, C)."""
    if is_torch(obj):
        shape, strides = tuple(obj.shape), tuple(obj.stride())
    elif runtime.is_device_array(obj):
        shape = tuple(obj.shape)
        strides = tuple(s // obj.dtype.itemsize for s in runtime.strides_of(obj))
    else:
        return False
    if len(shape) not in (4, 5) or 0 in shape:
        return False

    def matches(want: tuple) -> bool:
        return all(s == r for d, s, r in zip(shape, strides, want) if d > 1)
    return matches(channels_last_strides(shape)) and not matches(_c_strides(shape))


def _c_strides(shape: tuple) -> tuple[int, ...]:
    out, run = [], 1
    for d in reversed(shape):
        out.append(run)
        run *= d
    return tuple(reversed(out))


def channels_last_strides(shape: tuple) -> tuple[int, ...]:
    """Element strides of channels-last memory for an (N, C, *spatial) shape: (N, *spatial, C) in C
    order, e.g. (H*W*C, 1, W*C, C) for 4-D."""
    n, c, *spatial = shape
    inner = _c_strides(tuple(spatial) + (c,))
    return (inner[0] * spatial[0] if spatial else c, 1) + inner[:-1]


def channels_last_view(base: Any, shape: tuple, dtype: Any) -> Any:
    """The dense device array ``base`` (N*C*H*W elements, NHWC memory) viewed as (N, C, H, W) with
    channels-last strides (torch's ``memory_format=torch.channels_last``); 5-D: NDHWC memory viewed as
    (N, C, D, H, W) (``torch.channels_last_3d``)."""
    shape = tuple(int(s) for s in shape)
    item = np.dtype(dtype).itemsize
    return runtime.view_at(base, 0, shape, tuple(s * item for s in channels_last_strides(shape)), dtype)



def _transpose(src: Any, dst: Any, shape: tuple, to_nchw: bool) -> None:
    """dst <- src (both dense device arrays of ``shape`` (A, B, *spatial), read as flat memory):
    NHWC memory -> NCHW memory when ``to_nchw``, else NCHW -> NHWC (5-D: NDHWC <-> NCDHW, the same
    transpose with C*D the product of the spatial sizes)."""
    from convlab.kernels.data.transpose import to_channels_last

    a, b = shape[:2]
    c, d = int(np.prod(shape[2:-1], dtype=np.int64)), shape[-1]
    flat_src = runtime.kernel_view(runtime.flat_view(src))
    flat_dst = runtime.kernel_view(runtime.flat_view(dst))
    if to_nchw:
        to_channels_last(flat_src, flat_dst, a, c * d, b, c * d)
    else:
        to_channels_last(flat_src, flat_dst, a, b, c * d, b)


def to_nchw(src: Any, dst: Any) -> None:
    """Write the channels-last device array ``src`` into the C-contiguous ``dst`` of the same shape."""
    _transpose(src, dst, tuple(src.shape), True)


def to_nhwc(src: Any, dst: Any) -> None:
    """Write the C-contiguous device array ``src`` into the channels-last ``dst`` of the same shape."""
    _transpose(src, dst, tuple(src.shape), False)


@contextlib.contextmanager
def _borrowed(shape: tuple, dtype: Any) -> Iterator[Any]:
    """A C-contiguous device array of ``shape`` lent by the scratch pool (bfloat16 as its uint16
    bits in the pool, viewed back)."""
    bits = runtime.kernel_dtype(dtype)
    with scratch(int(np.prod(shape)), bits) as buf:
        view = buf.reshape(tuple(int(s) for s in shape))
        yield view if bits == np.dtype(dtype) else view.view(np.dtype(dtype))


@contextlib.contextmanager
def operands_for(taken: frozenset, arrays: tuple, out_index: int | None = 3) -> Iterator[tuple]:
    """``arrays`` (device arrays or None; ``arrays[out_index]`` is the output; ``out_index`` None: no
    output) as a plugin whose ``layouts`` are ``taken`` runs on them: as they are when it takes
    ``"nhwc"`` or none is channels-last, else with every channels-last one replaced by a C-contiguous
    scratch copy (inputs) or buffer (the output, transposed into the caller's array when the block
    ends without an error). Run the block on the call's stream."""
    nhwc = [a is not None and is_channels_last(a) for a in arrays]
    if "nhwc" in taken or not any(nhwc):
        yield arrays
        return
    with contextlib.ExitStack() as stack:
        result, back = list(arrays), None
        for i, a in enumerate(arrays):
            if not nhwc[i]:
                continue
            result[i] = stack.enter_context(_borrowed(a.shape, a.dtype))
            if i == out_index:
                back = (result[i], a)
            else:
                to_nchw(a, result[i])
        yield tuple(result)
        if back is not None:
            to_nhwc(*back)


def channels_last_copy(host: np.ndarray) -> Any:
    """A new device array holding the 4-D ``host`` (N, C, H, W) in NHWC memory, viewed as NCHW with
    channels-last strides (what torch's ``memory_format=torch.channels_last`` gives)."""
    nhwc = runtime.to_device(np.ascontiguousarray(np.moveaxis(host, 1, -1)))
    return channels_last_view(nhwc, host.shape, host.dtype)


def copy_host_into(dev: Any, host: np.ndarray) -> None:
    """``runtime.copy_into(dev, host)`` for a C-contiguous or channels-last 4-D ``dev``."""
    if is_channels_last(dev):
        nhwc = np.ascontiguousarray(np.moveaxis(host, 1, -1))
        runtime.copy_into(runtime.flat_view(dev), nhwc.reshape(-1))
    else:
        runtime.copy_into(dev, host)
