"""Reusable device scratch buffers (the column buffers of im2col and col2im).

``with scratch(n, dtype) as buf`` lends an uninitialised 1-D device array of ``n`` elements: a view of the
smallest idle cached buffer that is large enough, or a new one. Allocating per call would put
cuMemAlloc/cuMemFree (and Numba's deferred frees, which synchronise when flushed) inside every launch
and every timing, so a plugin's speed would depend on the allocator's state; PyTorch's caching
allocator gives cuDNN the same reuse.

Rules: a buffer is out of the pool while lent (two users never share one); it goes back when the
``with`` block ends, after the launches were queued. Every convlab launch uses the default stream, so
the next user's kernels run after the previous user's. At most ``KEEP`` idle buffers per dtype are
kept (the smallest are dropped first); :func:`release` frees them all. The memory held is therefore at
most KEEP x the largest request, itself bounded by the workspace limit (convlab.settings).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import numpy as np

from . import runtime

KEEP = 2  # idle buffers kept per dtype (im2col's wgrad lends two at once)
_idle: dict[str, list[Any]] = {}
_lock = threading.Lock()


@contextlib.contextmanager
def scratch(n: int, dtype: Any) -> Iterator[Any]:
    """Lend a device array of ``n`` elements of ``dtype`` (contents undefined) for the ``with`` block."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    key = np.dtype(dtype).str
    with _lock:
        idle = _idle.setdefault(key, [])
        fits = [i for i, b in enumerate(idle) if b.size >= n]  # by index: arrays compare elementwise
        buf = idle.pop(min(fits, key=lambda i: idle[i].size)) if fits else None
    if buf is None:
        buf = runtime.empty((max(int(n), 1),), dtype)
    try:
        yield buf[:n]
    finally:
        with _lock:
            idle = _idle.setdefault(key, [])
            idle.append(buf)
            while len(idle) > KEEP:
                idle.pop(min(range(len(idle)), key=lambda i: idle[i].size))


def held_bytes() -> int:
    """Bytes held by idle buffers."""
    with _lock:
        return sum(b.size * b.dtype.itemsize for idle in _idle.values() for b in idle)


def release() -> None:
    """Drop every idle buffer (their device memory is freed by Numba's deallocation queue)."""
    with _lock:
        _idle.clear()
