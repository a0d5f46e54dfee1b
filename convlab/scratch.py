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

``scratch(n, dtype, zeroed=z)`` also guarantees that the last ``z`` elements of the view are zero on
entry, and the caller promises to leave them zero when the block ends normally (the split-K counters
of the implicit GEMM, which its kernels reset). The pool remembers which buffers hold such a zeroed
range, so a repeated shape zeroes nothing; after any other use, or a block that raised (a failed launch
may leave counters non-zero), the range is zeroed again before it is lent.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import numpy as np

from . import runtime

KEEP = 2  # idle buffers kept per dtype (im2col's wgrad lends two at once)
_idle: dict[str, list[Any]] = {}
_zeroed: dict[int, tuple[int, int]] = {}  # id of an idle buffer -> a range [lo, hi) known to be zero
_lock = threading.Lock()


@contextlib.contextmanager
def scratch(n: int, dtype: Any, *, zeroed: int = 0) -> Iterator[Any]:
    """Lend a device array of ``n`` elements of ``dtype`` (contents undefined, except the last
    ``zeroed`` ones: zero, see above) for the ``with`` block."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 0 <= zeroed <= n:
        raise ValueError(f"zeroed must be in 0..n={n}, got {zeroed}")
    key = np.dtype(dtype).str
    with _lock:
        idle = _idle.setdefault(key, [])
        fits = [i for i, b in enumerate(idle) if b.size >= n]  # by index: arrays compare elementwise
        buf = idle.pop(min(fits, key=lambda i: idle[i].size)) if fits else None
        known = _zeroed.pop(id(buf), None)  # in use now: whatever was zero may be overwritten
    if buf is None:
        buf = runtime.empty((max(int(n), 1),), dtype)
    zero = (n - zeroed, n)
    if zeroed and not (known and known[0] <= zero[0] and zero[1] <= known[1]):
        buf[zero[0]:zero[1]].copy_to_device(np.zeros(zeroed, dtype))
    clean = False
    try:
        yield buf[:n]
        clean = zeroed > 0
    finally:
        with _lock:
            if clean:
                _zeroed[id(buf)] = zero
            idle = _idle.setdefault(key, [])
            idle.append(buf)
            while len(idle) > KEEP:
                _zeroed.pop(id(idle.pop(min(range(len(idle)), key=lambda i: idle[i].size))), None)


def held_bytes() -> int:
    """Bytes held by idle buffers."""
    with _lock:
        return sum(b.size * b.dtype.itemsize for idle in _idle.values() for b in idle)


def release() -> None:
    """Drop every idle buffer (their device memory is freed by Numba's deallocation queue)."""
    with _lock:
        _idle.clear()
        _zeroed.clear()
