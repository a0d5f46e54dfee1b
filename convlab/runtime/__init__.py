"""The machine: the device and its runtime state, the targets, the settings, launches and device memory.

    device.py        the device API (re-exported here: ``runtime.empty``): the runtime's state (state.py:
                     GPU, simulator or compile-only, and the one import of ``numba.cuda``) and device
                     arrays, copies, events (arrays.py)
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
from .device import *  # noqa: F401,F403  (the device API: runtime.empty, runtime.SIMULATOR, ...)
from .kernel import intrinsic, jit  # noqa: F401
from . import targets  # noqa: F401
