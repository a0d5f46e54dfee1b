"""How the transform kernels address an operand: its flat memory and element strides, so NCHW and
channels-last (NHWC memory viewed as NCHW) operands are read and written as they are.

    element (n, c, h, w) of ``arr`` = flat(arr)[n*sN + c*sC + h*sH + w*sW],  (sN, sC, sH, sW) = strides(arr)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from convlab import runtime


def strides(arr: Any) -> tuple[int, ...]:
    """Element strides of a device array (any dense layout)."""
    item = np.dtype(arr.dtype).itemsize
    return tuple(s // item for s in runtime.strides_of(arr))


def flat(arr: Any) -> Any:
    """The flat memory of a dense device array as kernels read it (bfloat16 as its uint16 bits)."""
    return runtime.kernel_view(runtime.flat_view(arr))
