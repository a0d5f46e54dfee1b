"""How the transform kernels address an operand: its flat memory and element strides, so NCHW and
channels-last (NHWC memory viewed as NCHW) operands are read and written as they are.

    element (n, c, h, w) of ``arr`` = flat(arr)[n*sN + c*sC + h*sH + w*sW],  (sN, sC, sH, sW) = strides(arr)

and which images one pass of their kernels covers (:func:`image_batches`).
"""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from convlab import runtime


def strides(arr: Any) -> tuple[int, ...]:
    """Element strides of a device array (any dense layout)."""
    item = np.dtype(arr.dtype).itemsize
    return tuple(s // item for s in runtime.strides_of(arr))


def flat(arr: Any) -> Any:
    """The flat memory of a dense device array as kernels read it (bfloat16 as its uint16 bits)."""
    return runtime.kernel_view(runtime.flat_view(arr))


def image_batches(n: int, per_batch: int, tiles_per_image: int) -> Iterator[tuple[int, int]]:
    """(first image n0, tiles t) of each pass over the ``n`` images, ``per_batch`` images a pass (the
    last one the rest), ``tiles_per_image`` tiles an image."""
    for n0 in range(0, n, per_batch):
        yield n0, min(per_batch, n - n0) * tiles_per_image
