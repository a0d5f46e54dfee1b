"""CUDA graphs of launch plans: a plan's launches issued as one ``cuGraphLaunch`` when a call's
operands lie where the previous calls' did.

A planned call (:mod:`convlab.call.plan`) on the GPU re-issues each recorded launch through the thin path,
a driver call of about 5 us of host time each (:mod:`convlab.runtime.driver`). A plan of several
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
- a capture or graph launch that fails is logged, and that plan keeps the thin path;
- a call on a stream that is itself being captured (``torch.cuda.graph``) takes the thin path, whose
  launches the caller's capture records;
- the capture stream is one per thread, made in the context current at its first capture (a plan of
  another device then fails its capture and keeps the thin path);
- ``CONVLAB_GRAPHS=0``, :func:`set_enabled` (False) or ``with disabled():`` turns graphs off (the
  benchmarks time both).
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from typing import Any, Iterator, Sequence

from convlab.runtime.driver import check as _check
from convlab.runtime.driver import cu_stream

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


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """``with disabled():`` plan graphs off inside the block, then as they were (the benchmarks' "no
    graph" timings)."""
    was = _enabled[0]
    _enabled[0] = False
    try:
        yield
    finally:
        _enabled[0] = was


def _driver() -> Any:
    from cuda.bindings import driver

    return driver


def _capturing(stream: int) -> bool:
    """True when ``stream`` is being captured (a torch.cuda.graph around the call, say) or when the
    driver cannot say: a graph launch or a capture of ours then stays out of the way."""
    drv = _driver()
    try:
        status = _check(drv.cuStreamIsCapturing(cu_stream(stream)), "cuStreamIsCapturing")
    except Exception:  # noqa: BLE001  (e.g. the legacy stream during another thread's global capture)
        return True
    return status != drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


def _capture_stream() -> Any:
    stream = getattr(_local, "stream", None)
    if stream is None:
        drv = _driver()
        stream = _local.stream = _check(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING),
                                        "cuStreamCreate")
    return stream


class Graphs:
    """The graph of one plan's thin launches (:class:`convlab.runtime.thin._ThinLaunch`), if any."""

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
        True; False when this call takes the thin path (see the module rules). A graph-side failure
        turns graphs off for this plan only (with a warning), never the thin launches."""
        if not (self.usable and _enabled[0]):
            return False
        key = tuple(bases)
        with self.lock:
            fresh = self.exec is None or key != self.bases
            if fresh:
                self.repeats = self.repeats + 1 if key == self.last else 1
                self.last = key
                if self.repeats < CAPTURE_AFTER or self.captures >= MAX_CAPTURES:
                    return False
            if _capturing(stream):  # the caller's own capture records the thin launches instead
                return False
            if fresh and not self._capture(key):
                return False
            try:
                _check(_driver().cuGraphLaunch(self.exec, cu_stream(stream)), "cuGraphLaunch")
            except Exception as exc:  # noqa: BLE001  (the thin path still works)
                self._give_up("launch", exc)
                return False
            stats["launched"] += 1
            return True

    def _give_up(self, what: str, exc: BaseException) -> None:
        self.usable = False
        stats["failed"] += 1
        log.warning("convlab: CUDA graph %s failed, the plan keeps its launches: %s", what, exc)

    def _capture(self, key: tuple) -> bool:
        """Capture every launch at operand addresses ``key`` into a new graph (replacing the old one).
        A capture that was begun is always ended (also on KeyboardInterrupt), and what it returns
        destroyed unless instantiated."""
        drv = _driver()
        self.captures += 1
        locks = [t.lock for t in self.thins]
        new = graph = None
        began = False
        for lock in locks:
            lock.acquire()
        try:
            cap = _capture_stream()
            mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
            _check(drv.cuStreamBeginCapture(cap, mode), "cuStreamBeginCapture")
            began = True
            for thin in self.thins:
                thin.issue(key, int(cap))
            began = False
            graph = _check(drv.cuStreamEndCapture(cap), "cuStreamEndCapture")
            new = _check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        except Exception as exc:  # noqa: BLE001  (the thin path still works)
            self._give_up("capture", exc)
        finally:
            if began:  # an error between begin and end: end the capture, drop its graph
                ended = drv.cuStreamEndCapture(cap)
                graph = ended[1] if isinstance(ended, tuple) and len(ended) > 1 else None
            if graph is not None:
                drv.cuGraphDestroy(graph)
            for lock in locks:
                lock.release()
        if new is None:
            return False
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

    def __del__(self, _finalizing: Any = sys.is_finalizing) -> None:
        # at interpreter exit the driver and the kernels' modules may already be gone
        if not _finalizing():
            self.release()
