"""Where this process's kernels came from: the kernel store, the disk cache, or a compile.

    counts                      kernels this process obtained, by where from: {"store", "disk", "compiled"}
    count(where)                one more (convlab.runtime.kernel_cache; convlab.runtime.launch counts the
                                kernels Numba compiles on its own launch path)
    running(problem, label)     ``with running(...):`` the launches inside are recorded for that candidate
                                (convlab.call.candidate.run_candidate)
    launched(dispatcher, where) one launch's kernel and where it came from, for the running candidate
    of(problem, label)          [(kernel, where)] of a candidate that has run in this process, else None
    describe(problem, label)    one line for convlab.explain

Where a launched kernel came from: "store" (a prebuilt cubin, convlab.runtime.kernel_store), "disk" (the
kernel cache, ``CONVLAB_KERNEL_CACHE=1``), "compiled" (Numba compiled it in this process) or "simulated"
(the CUDA simulator runs Python: no binary).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Hashable, Iterator

counts = {"store": 0, "disk": 0, "compiled": 0}
_records: dict[Hashable, dict[int, tuple[Any, str]]] = {}  # (problem, label) -> {id: (dispatcher, where)}
_KEEP = 4096  # candidates remembered (oldest dropped): a tuned ResNet-50 runs about 500
_state = threading.local()
_WORDS = {"store": "from the kernel store", "disk": "from the disk cache", "compiled": "compiled in this process",
          "simulated": "simulated (no binary)"}


def count(where: str) -> None:
    """One more kernel obtained from ``where`` ("store", "disk" or "compiled")."""
    counts[where] += 1


@contextlib.contextmanager
def running(problem: Hashable, label: str) -> Iterator[None]:
    """Record the launches of the block for candidate ``label`` on ``problem``."""
    previous = getattr(_state, "key", None)
    _state.key = (problem, label)
    try:
        yield
    finally:
        _state.key = previous


def launched(dispatcher: Any, where: str) -> None:
    """Note that ``dispatcher``'s kernel, from ``where``, was launched (recorded when a candidate runs;
    on every launch of a call, so the kernel's name is made only when :func:`of` asks)."""
    key = getattr(_state, "key", None)
    if key is None:
        return
    record = _records.get(key)
    if record is None:
        if len(_records) >= _KEEP:
            _records.pop(next(iter(_records)))
        record = _records[key] = {}
    record[id(dispatcher)] = (dispatcher, where)


def of(problem: Hashable, label: str) -> list[tuple[str, str]] | None:
    """[(kernel, where it came from)] of candidate ``label`` on ``problem``, one pair a kernel; None when it
    has not run here."""
    found = _records.get((problem, label))
    return None if found is None else [(kernel_label(dispatcher), where) for dispatcher, where in found.values()]


def describe(problem: Hashable, label: str) -> str:
    """'2 kernels: 2 from the kernel store', or 'not yet launched in this process'."""
    found = of(problem, label)
    if not found:
        return "not yet launched in this process"
    wheres = [where for _, where in found]
    by = {w: wheres.count(w) for w in dict.fromkeys(wheres)}
    parts = ", ".join(f"{n} {_WORDS.get(w, w)}" for w, n in by.items())
    return f"{len(found)} kernel{'s' if len(found) != 1 else ''}: {parts}"


def kernel_label(dispatcher: Any) -> str:
    """A kernel's name for messages: its Python function's module and qualified name without
    ``<locals>`` (e.g. 'implicit_gemm.forward.make_forward.kernel'), since many factories name their
    kernel ``kernel``; 'unnamed' when the dispatcher has no Python function."""
    fn = getattr(dispatcher, "py_func", None) or getattr(dispatcher, "fn", None)
    qualname = getattr(fn, "__qualname__", None) or getattr(dispatcher, "__name__", None)
    if not qualname:
        return "unnamed"
    module = (getattr(fn, "__module__", None) or "").removeprefix("convlab.").removeprefix("algorithms.")
    module = module.removeprefix("kernels.")
    return ".".join(p for p in [module, *qualname.split(".")] if p and p != "<locals>")
