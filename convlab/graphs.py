"""CUDA graphs of launch plans: a plan's launches issued as one ``cuGraphLaunch`` when a call's
operands lie where the previous calls' did.

A planned call (:mod:`convlab.plan`) on the GPU re-issues each recorded launch through the thin path,
a driver call of about 5 us of host time each (:mod:`convlab.driver_launch`). A plan of several
launches (layout copies, the kernel, a split-K sum) thus spends most of a small layer's time on the
host. Here a plan that has made the same call ``CAPTURE_AFTER`` times in a row (the same operand
addresses: a training or inference loop whose allocator hands each layer the same buffers) captures
its launches once, on a private stream, into a CUDA graph, and later calls with those addresses launch
the graph on the call's stream: one driver call, in the same stream order as the launches it holds.

Rules, one line each:
- only plans of two or more thin launches on a GPU (one launch gains nothing from a graph);
- a graph holds the operand addresses of the calls that made it; a call with other addresses takes the
  thin path, and the graph is rebuilt once those addresses repeat, at most ``MAX_CAPTURES`` times per
  plan (then the plan stays on the thin path);
- a graph reads its operands when it runs, like the launches it replaces: new values in the same
  buffers are seen;
- a capture that fails is logged, and that plan keeps the thin path;
- ``CONVLAB_GRAPHS=0``, or :func:`set_enabled` (False), turns graphs off (the benchmarks time both).
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Any, Sequence

from .driver_launch import cu_stream

log = logging.getLogger(__name__)
CAPTURE_AFTER = 2  # consecutive calls with the same operand addresses before a capture
MAX_CAPTURES = 4  # graphs built per plan at most (addresses that keep changing stay on the thin path)
_enabled = [os.environ.get("CONVLAB_GRAPHS", "1").strip() != "0"]
_local = threading.local()  # this thread's capture stream
stats = {"captured": 0, "launched": 0, "failed": 0}


def set_enabled(on: bool) -> None:
    """Turn plan graphs on or off for this process (graphs already built are kept but not used)."""
    _enabled[0] = bool(on)


def enabled() -> bool:
    return _enabled[0]


def _driver() -> Any:
    from cuda.bindings import driver

    return driver


def _check(result: Any, what: str) -> Any:
    """The value of a cuda.bindings call's ``(err, *values)``; RuntimeError naming the CUresult."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != _driver().CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: {getattr(err, 'name', err)}")
    return values[0] if len(values) == 1 else values


def _capture_stream() -> Any:
    stream = getattr(_local, "stream", None)
    if stream is None:
        drv = _driver()
        stream = _local.stream = _check(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING),
                                        "cuStreamCreate")
    return stream


class Graphs:
    """The graph of one plan's thin launches (:class:`convlab.thin._ThinLaunch`), if any."""

    def __init__(self, thins: Sequence[Any]) -> None:
        self.thins = list(thins)
        self.usable = len(self.thins) >= 2
        self.exec = None  # the instantiated graph of the launches at ``self.bases``
        self.bases: tuple | None = None
        self.last: tuple | None = None  # the previous call's operand addresses
        self.repeats = 0
        self.captures = 0
        self.lock = threading.Lock()

    def run(self, bases: Sequence[int], stream: int) -> bool:
        """Launch the graph of the call at ``bases`` on ``stream`` (a CUstream handle, int) and return
        True; False when this call takes the thin path (see the module rules)."""
        if not (self.usable and _enabled[0]):
            return False
        key = tuple(bases)
        with self.lock:
            if self.exec is None or key != self.bases:
                self.repeats = self.repeats + 1 if key == self.last else 1
                self.last = key
                if self.repeats < CAPTURE_AFTER or self.captures >= MAX_CAPTURES:
                    return False
                if not self._capture(key):
                    return False
            _check(_driver().cuGraphLaunch(self.exec, cu_stream(stream)), "cuGraphLaunch")
            stats["launched"] += 1
            return True

    def _capture(self, key: tuple) -> bool:
        """Capture every launch at operand addresses ``key`` into a new graph (replacing the old one)."""
        drv = _driver()
        self.captures += 1
        cap = _capture_stream()
        locks = [t.lock for t in self.thins]
        for lock in locks:
            lock.acquire()
        began = False
        try:
            mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
            _check(drv.cuStreamBeginCapture(cap, mode), "cuStreamBeginCapture")
            began = True
            for thin in self.thins:
                thin.issue(key, int(cap))
            began = False
            graph = _check(drv.cuStreamEndCapture(cap), "cuStreamEndCapture")
            try:
                new = _check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
            finally:
                drv.cuGraphDestroy(graph)
        except Exception as exc:  # noqa: BLE001  (the thin path still works)
            if began:
                drv.cuStreamEndCapture(cap)
            self.usable = False
            stats["failed"] += 1
            log.warning("convlab: CUDA graph capture failed, the plan keeps its launches: %s", exc)
            return False
        finally:
            for lock in locks:
                lock.release()
        self.release()
        self.exec, self.bases = new, key
        stats["captured"] += 1
        return True

    def release(self) -> None:
        """Destroy the instantiated graph (a plan dropped, or a new graph replacing it)."""
        if self.exec is not None:
            try:
                _driver().cuGraphExecDestroy(self.exec)
            except Exception:  # noqa: BLE001  (interpreter shutdown: the driver may be gone)
                pass
            self.exec = None

    def __del__(self) -> None:
        self.release()
