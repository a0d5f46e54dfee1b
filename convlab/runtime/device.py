"""The device API of convlab: the runtime's state and the device arrays, read as one module.

Everything else in convlab (kernels included) reaches CUDA through here (``convlab.runtime`` re-exports
it: ``runtime.empty``, ``runtime.SIMULATOR``), so switching between a real GPU and Numba's CUDA
simulator, or moving to a successor of numba-cuda, touches the runtime package only:

    state.py    the runtime's state (GPU, simulator, compile-only), decided once at import, and the one
                import of ``numba.cuda``, made on first use; the device's name, compute capability and
                versions
    arrays.py   device arrays (pointers, strides, views), host copies, allocation, events and timing

``device.cuda`` and ``device.numba`` are the modules, imported on first read (:func:`__getattr__`, so
they are not in ``__all__``: a star import does not load them).
"""
from __future__ import annotations

from typing import Any

__all__ = ["driver_gpu_count", "MODES", "MODE", "SIMULATOR", "COMPILE_ONLY", "HAS_DEVICE",
           "SIM_UNSUPPORTED_JIT_KWARGS", "target", "lower_kernel", "RuntimeFault", "is_out_of_memory",
           "OfflineArray", "device_name", "compute_capability", "total_memory", "versions", "is_device_array",
           "is_cuda_array_like", "as_device_array", "device_pointer", "is_aligned", "strides_of", "view_at",
           "flat_view", "is_stream", "kernel_dtype", "kernel_view", "to_device", "to_host", "copy_into", "empty",
           "full", "synchronize", "event", "time_ms"]

from convlab.runtime import state
from convlab.runtime.state import (COMPILE_ONLY, HAS_DEVICE, MODE, MODES, SIM_UNSUPPORTED_JIT_KWARGS,  # noqa: F401
                                   SIMULATOR, OfflineArray, RuntimeFault, _driver_has_gpu, compute_capability,
                                   device_name, driver_gpu_count, is_out_of_memory, load_numba_cuda,
                                   lower_kernel, simulator_kernel_context, target, total_memory,
                                   versions)
from convlab.runtime.arrays import (as_device_array, copy_into, device_pointer, empty, event,  # noqa: F401
                                    flat_view, full, is_aligned, is_cuda_array_like, is_device_array, is_stream,
                                    kernel_dtype, kernel_view, strides_of, synchronize, time_ms, to_device,
                                    to_host, view_at)


def __getattr__(name: str) -> Any:
    """``cuda`` and ``numba``: the modules, imported on first read (:func:`state.load_numba_cuda`)."""
    if name in ("cuda", "numba"):
        return getattr(state, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
