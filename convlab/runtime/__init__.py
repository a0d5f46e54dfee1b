"""The machine: the device and its runtime state, the targets, the settings, launches and device memory.

    device.py        the device API (re-exported here: ``runtime.empty``): the runtime's state (state.py:
                     GPU, simulator or compile-only, and the one import of ``numba.cuda``, made on first
                     use) and device arrays, copies, events (arrays.py)
    targets.py       Target: a device's limits, features and ceilings; named targets; the current one
    kernel.py        ``jit``: Numba kernels that launch through launch.py
    launch.py        the one entry of every launch: streams, plan recording and replay, the thin path
    thin.py, driver.py   the thin launch path (parameters packed once, ``cuLaunchKernel``)
    kernel_cache.py  the disk cache of compiled kernels, keyed by target
    scratch.py       scratch buffers and the op outputs' pool
    offline.py       the compile-only runtime's device-array stand-ins and launch collector
    context.py       the per-device context: every table of state, and ``reset``
    settings.py      process-wide settings (the one place that reads CONVLAB_* variables)
    fileio.py        atomic writes and locked JSON files
"""
from typing import Any

from .device import *  # noqa: F401,F403  (the device API: runtime.empty, runtime.SIMULATOR, ...)
from .kernel import intrinsic, jit  # noqa: F401
from . import device as _device, targets  # noqa: F401


def __getattr__(name: str) -> Any:
    """``runtime.cuda`` and ``runtime.numba`` (a kernel module's ``from convlab.runtime import cuda``): the
    modules, imported on first read (convlab.runtime.state.load_numba_cuda)."""
    if name in ("cuda", "numba"):
        return getattr(_device, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
