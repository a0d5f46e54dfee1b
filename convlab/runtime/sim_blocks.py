"""A block runner for Numba's CUDA simulator: threads kept between blocks, woken one at a time, waited
for instead of polled.

numba-cuda 0.30.4's ``BlockManager.run`` starts one new Python thread per CUDA thread of every block,
then loops without pause over the live threads (``syncthreads_blocked``, ``is_alive``) until all are
blocked at a barrier (it releases them all at once) or done: the loop holds the GIL against the very
threads it waits for, and each barrier wakes every thread of the block together to fight for the GIL
(futex calls were nearly all of the system time: 12.4 million in one conformance case). Here:

- each thread reports under one condition variable when it reaches a barrier and when it ends, and the
  runner sleeps on that condition between reports (woken only by a barrier's last arrival, a thread's
  end or an exception);
- the threads are kept in a pool and handed the next block's indices and body (a lock released per
  job) instead of being started anew;
- a relay wakes them: the runner starts the first thread of a block, or opens the barrier for the first
  thread waiting at it, and each thread, once woken, wakes the next before it runs on. Every thread is
  still woken at once (a thread that then waits on an mbarrier or a named barrier,
  convlab.kernels.arch.sm90_sim, does not hold the others back), but only about two want the GIL at a
  time. Between barriers the threads run one after another, as numba's threads mostly did (each holds the
  GIL until it blocks): the simulator finds no data race; compute-sanitizer's racecheck on a GPU does
  (tools/gpu_check.py's step ``sanitize``).

The semantics are numba's: a barrier opens when every live thread waits at it (threads that returned
early do not hold it), the first exception found aborts the block's other threads and is raised with its
traceback; a thread sees its block's ``blockIdx``, ``threadIdx`` and ``thread_id`` through
``threading.current_thread()`` as numba's threads do. The threads of a block that raised are not
reused: they stop at their next barrier or at the end of their body, as numba's aborted threads do, and
then exit. A forked child starts with an empty pool (the parent's threads do not exist there). A launch in debug mode runs each body under ``np.errstate(divide="raise")``, restored after it.

Measured on this 2-core machine (``pytest -n 2 -p no:cacheprovider`` of the whole suite, simulator):
1051 s with the waiting runner that started new threads and woke a barrier's threads all at once, 403 s
with this one; a kernel of 8 blocks of 128 threads and 40 barriers each took 2.2 s and 0.84 s. Before
that, the waiting runner had taken 62.9 and 89.2 CPU s on five tiny cases against 131.3 and 131.4 s with
numba's runner (``BlockManager.numba_run``, kept for comparisons).

    install(kernel_module)   replace ``BlockManager.run`` of numba's ``numba.cuda.simulator.kernel``
    stats()                  {"started": threads started, "jobs": thread bodies run, "idle": threads waiting}
"""
from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

#: idle threads kept between blocks (the largest block a CUDA launch may have)
MAX_IDLE = 1024


class _Block:
    """One block's bookkeeping: live threads, threads waiting at the barrier, the first thread that
    raised, the condition (the runner is woken only when one of them decides something)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.live = 0
        self.blocked = 0
        self.failed: Any = None


def _worker_class(base: type, dim3: type) -> type:
    """A thread of ``base`` (numba's BlockThread) that runs one body per job, reports its barriers and
    the end of each body to the job's block, and waits for its next job between them."""

    class Worker(base):
        def __init__(self) -> None:
            threading.Thread.__init__(self, daemon=True)  # the per-job fields are set by assign()
            self.syncthreads_blocked = False
            self._gate = threading.Lock()
            self._gate.acquire()  # released by the runner when the barrier this thread waits at opens
            self.exception = None
            self.abort = False
            self.retired = False
            self._block: _Block | None = None
            self._go = threading.Lock()
            self._go.acquire()  # released once per job by the runner
            self._next = None  # the thread whose gate this one opens once past its own

        def assign(self, body: Any, manager: Any, block_idx: Any, thread_idx: Any, block: _Block) -> None:
            """The next job: BlockThread.__init__'s fields for this block and thread."""
            self._target, self._args, self._kwargs = body, (), {}
            self._manager, self.debug, self._block = manager, manager._debug, block
            self.blockIdx, self.threadIdx = dim3(*block_idx), dim3(*thread_idx)
            bx, by, _ = manager._block_dim
            self.thread_id = thread_idx[0] + bx * (thread_idx[1] + by * thread_idx[2])
            self.exception, self.abort, self.syncthreads_blocked = None, False, False

        def start_job(self) -> None:
            try:
                self._go.release()
            except RuntimeError:  # retired meanwhile (its block failed): retire() released it
                pass

        def open_gate(self) -> None:
            try:
                self._gate.release()
            except RuntimeError:  # opened already, not passed yet (an abort after a barrier opened)
                pass

        def retire(self) -> None:
            """Stop after the current job (or at once, when waiting for one)."""
            self.retired = True
            try:
                self._go.release()
            except RuntimeError:  # a job handed over and not taken yet: it is skipped
                pass

        def run(self) -> None:
            while True:
                self._go.acquire()
                if self.retired:
                    return
                following, self._next = self._next, None
                if following is not None:  # the relay, as at a barrier: the next thread's start
                    following.start_job()
                block = self._block
                try:
                    base.run(self)  # numba's run: the body, an exception recorded in self.exception
                finally:
                    with block.cond:
                        block.live -= 1
                        if self.exception and block.failed is None:
                            block.failed = self
                        if block.failed is not None or block.live == 0 or block.blocked == block.live:
                            block.cond.notify()
                if self.retired:
                    return

        def syncthreads(self) -> None:
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            block = self._block
            with block.cond:
                self.syncthreads_blocked = True
                block.blocked += 1
                if block.blocked == block.live:  # the last one in wakes the runner
                    block.cond.notify()
            self._gate.acquire()
            following, self._next = self._next, None
            if following is not None:  # the relay: one woken thread at a time wants the GIL
                following.open_gate()
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads clear")

    return Worker


class _Pool:
    """Idle worker threads; ``take`` hands out distinct ones (starting new ones when short), ``give``
    takes back the threads of a block that finished."""

    def __init__(self, worker_class: type) -> None:
        self._worker_class = worker_class
        self._lock = threading.Lock()
        self._idle: list[Any] = []
        self.started = 0
        self.jobs = 0

    def take(self, n: int) -> list[Any]:
        with self._lock:
            got = self._idle[-n:] if n else []
            del self._idle[len(self._idle) - len(got):]
            self.jobs += n
            missing = n - len(got)
            self.started += missing
        for _ in range(missing):
            worker = self._worker_class()
            worker.start()
            got.append(worker)
        return got

    def give(self, workers: list[Any]) -> None:
        with self._lock:
            room = max(0, MAX_IDLE - len(self._idle))
            self._idle.extend(workers[:room])
        for worker in workers[room:]:
            worker.retire()

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"started": self.started, "jobs": self.jobs, "idle": len(self._idle)}


_POOL: _Pool | None = None


def stats() -> dict[str, int]:
    """The pool's counters (all zero before :func:`install`)."""
    return _POOL.stats() if _POOL is not None else {"started": 0, "jobs": 0, "idle": 0}


def _forget_threads() -> None:
    """In a forked child: the parent's threads do not exist there, so the pool starts empty."""
    global _POOL
    if _POOL is not None:
        _POOL = _Pool(_POOL._worker_class)


def install(kernel_module: Any) -> None:
    """Replace ``kernel_module.BlockManager.run`` (module docstring); idempotent."""
    global _POOL
    manager = kernel_module.BlockManager
    if getattr(manager, "_convlab_waits", False):
        return
    _POOL = _Pool(_worker_class(kernel_module.BlockThread, kernel_module.Dim3))
    os.register_at_fork(after_in_child=_forget_threads)

    def run(self: Any, grid_point: Any, *args: Any) -> None:
        block = _Block()
        if self._debug:
            def body() -> None:
                with np.errstate(divide="raise"):  # numba's debug launches raise on a division by zero
                    self._f(*args)
        else:
            def body() -> None:
                self._f(*args)

        pool = _POOL
        points = list(np.ndindex(*self._block_dim))
        threads = pool.take(len(points))
        for t, point in zip(threads, points):
            t.assign(body, self, grid_point, point, block)
        block.live = len(threads)
        for t, following in zip(threads, threads[1:] + [None]):
            t._next = following
        if threads:
            threads[0].start_job()
        with block.cond:
            while True:
                failed = block.failed
                if failed is not None:
                    for t in threads:  # abort the others, as numba does; none of them is reused
                        t.abort = True
                        t.syncthreads_blocked = False
                        t.retire()
                        t.open_gate()
                    raise failed.exception[0].with_traceback(failed.exception[1])
                if block.live == 0:
                    break
                if block.blocked and block.blocked == block.live:
                    block.blocked = 0
                    waiting = [t for t in threads if t.syncthreads_blocked]
                    for t, following in zip(waiting, waiting[1:] + [None]):
                        t.syncthreads_blocked = False
                        t._next = following
                    waiting[0].open_gate()
                block.cond.wait()
        pool.give(threads)

    manager.numba_run = manager.run  # numba's runner, kept for comparisons
    manager.run = run
    manager._convlab_waits = True
