"""Reusable device scratch buffers (the column buffers of im2col and col2im), and the op outputs' pool.

``with scratch(n, dtype) as buf`` lends an uninitialised 1-D device array of ``n`` elements: a view of the
smallest idle cached buffer that is large enough, or a new one. Allocating per call would put
cuMemAlloc/cuMemFree (and Numba's deferred frees, which synchronise when flushed) inside every launch
and every timing, so a plugin's speed would depend on the allocator's state; PyTorch's caching
allocator gives cuDNN the same reuse.

Rules: a buffer is out of the pool while lent (two users never share one); it goes back when the
``with`` block ends, after the launches were queued. The next user's kernels run after the previous
user's when both calls run on one stream (the default, or the caller's: convlab.call.operands); calls
that overlap on different streams must not share this pool (not yet handled: see issue #12).
At most ``KEEP`` idle buffers per dtype are kept (the smallest are dropped first); :func:`release`
frees them all. The memory held is therefore at most KEEP x the largest request, itself bounded by
the workspace limit (convlab.runtime.settings).

A buffer lent while a launch plan is being recorded (convlab.runtime.launch.recording) does not go back: the
plan's replays use it without asking the pool, so lending it again would let another call overwrite
it between replays (and the pool's record of zeroed counters would be wrong). It is freed with the
plan (convlab.call.plan bounds the memory plans hold).

``scratch(n, dtype, zeroed=z)`` also guarantees that the last ``z`` elements of the view are zero on
entry, and the caller promises to leave them zero when the block ends normally (the split-K counters
of the implicit GEMM, which its kernels reset). The pool remembers which buffers hold such a zeroed
range, so a repeated shape zeroes nothing; after any other use, or a block that raised (a failed launch
may leave counters non-zero), the range is zeroed again before it is lent.
"""
from __future__ import annotations

import contextlib
import math
import threading
import weakref
from typing import Any, Iterator

import numpy as np

from convlab.runtime import context
from convlab.runtime import device as runtime

KEEP = 2  # idle buffers kept per dtype (im2col's wgrad lends two at once)
OUTPUT_KEEP = 4  # idle output buffers kept per (shape, dtype, stream)


class Pools:
    """The scratch and output pools of one device (the context's "scratch" store)."""

    def __init__(self) -> None:
        self.idle: dict[str, list[Any]] = {}
        self.zeroed: dict[int, tuple[int, int]] = {}  # id of an idle buffer -> a range [lo, hi) known zero
        self.views: dict[int, dict[int, Any]] = {}  # id of a pooled buffer -> {n: buf[:n]} (see _view)
        self.outputs: dict[tuple, list[Any]] = {}  # (shape, dtype, stream) -> idle output buffers
        self.lock = threading.Lock()

    def clear(self) -> None:
        """Drop every idle buffer (convlab.reset: their memory is freed by Numba's deallocation queue)."""
        with self.lock:
            self.idle.clear()
            self.zeroed.clear()
            self.views.clear()
            self.outputs.clear()


def _pools() -> Pools:
    return context.current().store("scratch", Pools)


@contextlib.contextmanager
def scratch(n: int, dtype: Any, *, zeroed: int = 0) -> Iterator[Any]:
    """Lend a device array of ``n`` elements of ``dtype`` (contents undefined, except the last
    ``zeroed`` ones: zero, see above) for the ``with`` block."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 0 <= zeroed <= n:
        raise ValueError(f"zeroed must be in 0..n={n}, got {zeroed}")
    key = np.dtype(dtype).str
    pools = _pools()
    with pools.lock:
        idle = pools.idle.setdefault(key, [])
        fits = [i for i, b in enumerate(idle) if b.size >= n]  # by index: arrays compare elementwise
        buf = idle.pop(min(fits, key=lambda i: idle[i].size)) if fits else None
        known = pools.zeroed.pop(id(buf), None)  # in use now: whatever was zero may be overwritten
    if buf is None:
        buf = runtime.empty((max(int(n), 1),), dtype)
    zero = (n - zeroed, n)
    if zeroed and not (known and known[0] <= zero[0] and zero[1] <= known[1]):
        buf[zero[0]:zero[1]].copy_to_device(np.zeros(zeroed, dtype))
    clean = False
    owned = _recording()
    try:
        yield _view(pools, buf, n)
        clean = zeroed > 0
    finally:
        with pools.lock:
            if owned:  # a launch plan keeps this buffer (convlab.call.plan): never lent again
                pools.views.pop(id(buf), None)
            else:
                _give_back_scratch(pools, key, buf, zero if clean else None)


def _give_back_scratch(pools: Pools, key: str, buf: Any, zero: tuple[int, int] | None) -> None:
    """Return ``buf`` to the idle list (``zero``: its range known to be zero); keep at most KEEP."""
    if zero is not None:
        pools.zeroed[id(buf)] = zero
    idle = pools.idle.setdefault(key, [])
    idle.append(buf)
    while len(idle) > KEEP:
        dropped = idle.pop(min(range(len(idle)), key=lambda i: idle[i].size))
        pools.zeroed.pop(id(dropped), None)
        pools.views.pop(id(dropped), None)


def _recording() -> bool:
    """True while convlab.runtime.launch records a plan on this thread."""
    from convlab.runtime.launch import is_recording

    return is_recording()


def _view(pools: Pools, buf: Any, n: int) -> Any:
    """``buf[:n]``, made once per (buffer, n): slicing a Numba device array costs tens of microseconds
    of host time on a GPU, which a per-call workspace would pay on every call (and event timings
    count, since the kernel launch waits for it)."""
    if buf.size == n:
        return buf
    with pools.lock:
        views = pools.views.setdefault(id(buf), {})
        view = views.get(n)
        if view is None:
            view = views[n] = buf[:n]
    return view


def _idle_bytes(pool: str) -> int:
    """Bytes of the idle buffers of one pool ("idle": scratch, "outputs": op outputs)."""
    pools = _pools()
    with pools.lock:
        return sum(b.size * b.dtype.itemsize for idle in getattr(pools, pool).values() for b in idle)


def _clear(*pool_names: str) -> None:
    """Empty these pools (the memory of the buffers they held is freed by Numba's deallocation queue)."""
    pools = _pools()
    with pools.lock:
        for name in pool_names:
            getattr(pools, name).clear()


def held_bytes() -> int:
    """Bytes held by idle scratch buffers."""
    return _idle_bytes("idle")


def release() -> None:
    """Drop every idle scratch buffer (their device memory is freed by Numba's deallocation queue)."""
    _clear("idle", "zeroed", "views")


# ---- op outputs ------------------------------------------------------------------------------------
def _give_back(pools: Pools, key: tuple, base: Any) -> None:
    with pools.lock:
        idle = pools.outputs.setdefault(key, [])
        if len(idle) < OUTPUT_KEEP:
            idle.append(base)


def output(shape: tuple[int, ...], dtype: Any, stream: int = 0) -> Any:
    """An uninitialised device array for an op's result, from a pool: its memory goes back to the
    pool when the caller drops the array, and is lent again only for the same shape, dtype and
    stream handle (stream-ordered reuse, as PyTorch's caching allocator does), so the steady state
    of a loop does no cuMemAlloc. Arrays that cannot be tracked are plain allocations."""
    shape = tuple(int(s) for s in shape)
    key = (shape, dtype if type(dtype) is str else np.dtype(dtype).name, int(stream))
    size = math.prod(shape)
    pools = _pools()
    with pools.lock:
        idle = pools.outputs.get(key)
        base = idle.pop() if idle else None
    if base is None:
        base = runtime.empty((max(size, 1),), dtype)
    view = base[:size].reshape(shape)
    try:
        weakref.finalize(view, _give_back, pools, key, base)
    except TypeError:  # pragma: no cover - an array type without weak references
        return view
    return view


def output_held_bytes() -> int:
    """Bytes held by idle output buffers."""
    return _idle_bytes("outputs")


def release_outputs() -> None:
    """Drop every idle output buffer."""
    _clear("outputs")
