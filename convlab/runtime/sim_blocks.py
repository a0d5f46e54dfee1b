"""A block runner for Numba's CUDA simulator that waits for its threads instead of polling them.

numba-cuda 0.30.4's ``BlockManager.run`` starts one Python thread per CUDA thread of a block, then loops
without pause over the live threads (``syncthreads_blocked``, ``is_alive``) until all are blocked at a
barrier (it releases them) or done: the loop holds the GIL against the very threads it waits for. Here
each thread reports under one condition variable when it reaches a barrier and when it ends, and the
runner sleeps on that condition between reports. The semantics are numba's: a barrier opens when every
live thread waits at it (threads that returned early do not hold it), the first exception found aborts
the block's other threads and is raised with its traceback.

Measured with os.times() on 2 loaded cores, two runs each of five cases (fft forward with sm_80's
blocks of 128 and 256 threads, fft dgrad, tf32x3 forward, tensor_core forward with sm_80's tile,
implicit_gemm wgrad; tiny problems): 62.9 and 89.2 CPU s against 131.3 and 131.4 s with numba's runner
(``BlockManager.numba_run``), alternating processes. The runner is woken only by a barrier's last
arrival, a thread's end or an exception: woken at every arrival, it scanned every thread each time and
made blocks of 256 threads slower than numba's.

    install(kernel_module)   replace ``BlockManager.run`` of numba's ``numba.cuda.simulator.kernel``
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np


def _thread_class(base: type) -> type:
    """``base`` (numba's BlockThread) reporting its barriers and its end to its block's condition."""

    class ReportingThread(base):
        def __init__(self, f: Any, manager: Any, block_idx: Any, thread_idx: Any, debug: bool,
                     block: "_Block") -> None:
            super().__init__(f, manager, block_idx, thread_idx, debug)
            self._block = block

        def run(self) -> None:
            try:
                super().run()  # numba's run records an exception in self.exception
            finally:
                block = self._block
                with block.cond:
                    block.live -= 1
                    if self.exception and block.failed is None:
                        block.failed = self
                    if block.failed is not None or block.live == 0 or block.blocked == block.live:
                        block.cond.notify()

        def syncthreads(self) -> None:
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            block = self._block
            with block.cond:
                self.syncthreads_blocked = True
                block.blocked += 1
                if block.blocked == block.live:  # the last one in wakes the runner
                    block.cond.notify()
            self.syncthreads_event.wait()
            self.syncthreads_event.clear()
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads clear")

    return ReportingThread


class _Block:
    """One block's bookkeeping: live threads, threads waiting at the barrier, the first thread that
    raised, the condition (the runner is woken only when one of them decides something)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.live = 0
        self.blocked = 0
        self.failed: Any = None


def install(kernel_module: Any) -> None:
    """Replace ``kernel_module.BlockManager.run`` (module docstring); idempotent."""
    manager = kernel_module.BlockManager
    if getattr(manager, "_convlab_waits", False):
        return
    thread_class = _thread_class(kernel_module.BlockThread)

    def run(self: Any, grid_point: Any, *args: Any) -> None:
        block = _Block()

        def target() -> None:
            self._f(*args)

        threads = [thread_class(target, self, grid_point, point, self._debug, block)
                   for point in np.ndindex(*self._block_dim)]
        block.live = len(threads)
        for t in threads:
            t.start()
        with block.cond:
            while True:
                failed = block.failed
                if failed is not None:
                    for t in threads:  # abort the others, as numba does (not joined: debugging)
                        t.abort = True
                        t.syncthreads_blocked = False
                        t.syncthreads_event.set()
                    raise failed.exception[0].with_traceback(failed.exception[1])
                if block.live == 0:
                    break
                if block.blocked and block.blocked == block.live:
                    block.blocked = 0
                    for t in threads:
                        if t.syncthreads_blocked:
                            t.syncthreads_blocked = False
                            t.syncthreads_event.set()
                block.cond.wait()
        for t in threads:
            t.join()

    manager.numba_run = manager.run  # numba's runner, kept for comparisons
    manager.run = run
    manager._convlab_waits = True
