"""``compile_corpus``: every kernel of a corpus compiled for named targets, on worker processes.

The calling process may be in any runtime state (the simulator, a GPU): the work runs in ``jobs``
worker processes (``python -m convlab.compile.worker``) in the compile-only runtime, which need no
device. One worker's collected plan gives the kernel list; the kernels are then handed out one at a
time, slowest first (by the size of their bytecode, which lowering time follows), so the workers
finish together.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from typing import Any

from convlab.problem import DTYPES, OPS
from convlab.runtime.targets import GPU_TARGETS, get

from .report import Report


class _Worker:
    """One ``python -m convlab.compile.worker`` process: JSON requests on stdin, one JSON line back each."""

    def __init__(self, spec: dict) -> None:
        env = dict(os.environ, CONVLAB_RUNTIME="compile", NUMBA_ENABLE_CUDASIM="0")
        self.proc = subprocess.Popen([sys.executable, "-m", "convlab.compile.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, text=True, bufsize=1)
        self.send({"op": "start", "spec": spec})  # every worker collects at once; the caller reads the replies

    def ask(self, request: dict) -> Any:
        self.send(request)
        return self.reply(request)

    def send(self, request: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()

    def reply(self, request: dict) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"compile worker exited with status {self.proc.wait()} on {request['op']}")
        reply = json.loads(line)
        if "failure" in reply:
            raise RuntimeError(f"compile worker failed on {request['op']}: {reply['failure']}")
        return reply["value"]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def make_spec(targets: Any = ("sm_80", "sm_90"), *, samples: bool = True, suites: Any = (), shapes: Any = (),
              plugins: Any = None, ops: Any = OPS, dtypes: Any = DTYPES, configs: int | None = None,
              workspace_limit: int | None = None, cover: bool = False, imports: Any = (),
              keep_ptx: bool = False, store: Any = None, picks: bool = False) -> dict:
    """A validated corpus spec (see :mod:`convlab.compile.worker`; ``store``: a kernel store directory the
    cubins are written into, :mod:`convlab.compile.store`); ValueError naming what is wrong."""
    targets = [targets] if isinstance(targets, str) else list(targets)
    for name in targets:
        if get(name).simulator:
            raise ValueError(f"target {name!r} runs Python, not PTX: compile for one of {list(GPU_TARGETS)}")
    if not targets:
        raise ValueError(f"targets must name at least one of {list(GPU_TARGETS)}")
    bad_ops = set(ops) - set(OPS)
    if bad_ops:
        raise ValueError(f"ops must be among {list(OPS)}, got {sorted(bad_ops)}")
    bad_dtypes = set(dtypes) - set(DTYPES)
    if bad_dtypes:
        raise ValueError(f"dtypes must be among {list(DTYPES)}, got {sorted(bad_dtypes)}")
    if configs is not None and (isinstance(configs, bool) or not isinstance(configs, int) or configs < 1):
        raise ValueError(f"configs must be None (every config) or a count >= 1, got {configs!r}")
    if not (samples or suites or shapes):
        raise ValueError("the corpus is empty: give samples, suites or shapes")
    if store is not None:
        if not isinstance(store, (str, os.PathLike)) or not str(store).strip():
            raise ValueError(f"store must be a directory path, got {store!r}")
        store = os.path.abspath(os.path.expanduser(os.fspath(store)))
        if os.path.exists(store) and not os.path.isdir(store):
            raise ValueError(f"store must be a directory, {store!r} is a file")
    return {"store": store, "targets": [get(t).name for t in targets], "samples": bool(samples), "suites": list(suites),
            "shapes": list(shapes), "plugins": None if plugins is None else sorted(plugins),
            "ops": list(ops), "dtypes": list(dtypes), "configs": configs, "workspace_limit": workspace_limit,
            "cover": bool(cover), "picks": bool(picks), "imports": list(imports), "keep_ptx": bool(keep_ptx)}


def compile_corpus(spec: dict, jobs: int | None = None, progress: Any = None) -> Report:
    """Compile every kernel of ``spec``'s corpus (:func:`make_spec`) on ``jobs`` workers (default: the
    CPU count); ``progress(done, total, result)`` is called after each kernel. Raises
    :class:`convlab.compile.toolchain.ToolchainError` before any work when numba-cuda cannot find its
    CUDA compiler libraries."""
    from .toolchain import require

    require()
    if spec.get("store"):
        os.makedirs(spec["store"], exist_ok=True)
    jobs = max(1, int(jobs or os.cpu_count() or 1))
    start = time.perf_counter()
    workers: list[_Worker] = []
    try:
        workers = [_Worker(spec) for _ in range(jobs)]
        for worker in workers:
            worker.reply({"op": "start"})
        corpus = workers[0].ask({"op": "corpus"})
        collected = time.perf_counter() - start
        todo: queue.Queue = queue.Queue()
        for kid in sorted(corpus["kernels"], key=lambda k: (-corpus["costs"].get(k, 0), k)):
            todo.put(kid)
        total, results, failures, lock = todo.qsize(), [], [], threading.Lock()

        def serve(worker: _Worker) -> None:
            while True:
                try:
                    kid = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    result = worker.ask({"op": "compile", "id": kid})
                except Exception as exc:  # noqa: BLE001  (the worker died: reported, the others go on)
                    with lock:
                        failures.append(f"{kid}: {exc}")
                    return
                with lock:
                    results.append(result)
                    if progress is not None:
                        progress(len(results), total, result)

        threads = [threading.Thread(target=serve, args=(w,), daemon=True) for w in workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for worker in workers:
            worker.close()
    corpus["errors"] += [{"target": "-", "case": "-", "error": f} for f in failures]
    return Report(spec, corpus, results, wall_seconds=time.perf_counter() - start, collect_seconds=collected,
                  jobs=jobs)
