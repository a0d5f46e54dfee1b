"""The thin GPU launch path: a kernel's parameters packed once, relaunched with ``cuLaunchKernel``.

Numba's per-call launch re-marshals every argument (a 4-D array is 13 kernel parameters built through
ctypes, about 30 us for four arrays). Here Numba's own ``_Kernel._prepare_args`` packs the parameters
once (per array: meminfo, parent, nitems, itemsize, data, shape..., strides...; Python ints as
intptr_t and bools as one byte, as cuda.core does), the ctypes values and their ``void**`` array are
kept, and a relaunch only writes new data pointers into the patched slots and calls
``cuda.bindings.driver.cuLaunchKernel`` with the kernel's CUkernel/CUfunction handle. GPU only; used
by :mod:`convlab.launch` for replays and, with the disk cache on, for every launch.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Sequence

import numpy as np

from . import kernel_cache, runtime


def _as_ctype(value: Any) -> Any:
    """One kernel parameter as cuda.core passes it: ctypes as is, bool as 1 byte, int as intptr_t."""
    if isinstance(value, ctypes._SimpleCData):
        return value
    if isinstance(value, (bool, np.bool_)):
        return ctypes.c_bool(bool(value))
    if isinstance(value, (int, np.integer)):
        return ctypes.c_ssize_t(int(value))
    if isinstance(value, float):
        return ctypes.c_double(value)
    raise TypeError(f"unsupported kernel parameter {value!r}")


def dims3(value: Any) -> tuple[int, int, int]:
    """A grid or block argument (int or tuple of 1-3 ints) as (x, y, z)."""
    dims = (int(value),) if isinstance(value, (int, np.integer)) else tuple(int(v) for v in value)
    return (dims + (1, 1, 1))[:3]


class _ThinLaunch:
    """A packed ``void**`` argument array and the CUfunction of one compiled kernel overload."""

    def __init__(self, function: Any, values: list, patches: list[tuple[int, int, int]], dims: tuple,
                 shared: int) -> None:
        self.function, self.values, self.patches, self.dims = function, values, patches, dims
        self.shared = shared
        self.params = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
        self.address = ctypes.addressof(self.params)
        self.lock = threading.Lock()  # the patched values are shared: one launch at a time

    @classmethod
    def build(cls, rec: Any, args: Sequence[Any]) -> "_ThinLaunch | None":
        """From the launch just made with ``args`` (so the kernel is compiled and loaded); None when
        this kernel cannot take the thin path (debug or cooperative kernel, host arrays)."""
        target = _compiled_target(rec.dispatcher, args)
        if target is None:
            return None
        handle, argtypes = target
        packed = pack_args(argtypes, args)
        if packed is None:
            return None
        kernelargs, starts = packed
        patches = [(starts[i] + 4, slot, offset) for i, slot, offset, *_ in rec.views]  # data pointer
        return cls(driver_function(handle), [_as_ctype(v) for v in kernelargs], patches,
                   tuple(rec.grid) + tuple(rec.block), rec.shared)

    def launch(self, bases: Sequence[int], stream: Any) -> None:
        with self.lock:
            for index, slot, offset in self.patches:
                self.values[index].value = bases[slot] + offset
            cu_launch(self.function, self.dims, self.shared, stream, self.address)


def _compiled_target(dispatcher: Any, args: Sequence[Any]) -> tuple[Any, tuple] | None:
    """(launch handle, Numba argument types) of the kernel ``args`` launch: from the disk cache when it
    is on, else Numba's compiled overload; None for debug or cooperative kernels."""
    if kernel_cache.enabled():
        found = kernel_cache.compiled(dispatcher, tuple(args))
        return None if found is None else (found.handle, found.argtypes)
    try:
        overload = dispatcher.overloads[tuple(dispatcher.typeof_pyval(a) for a in args)]
    except Exception:
        return None
    if getattr(overload, "debug", False) or getattr(overload, "cooperative", False):
        return None
    return overload._codelibrary.get_cufunc().handle, tuple(overload.argument_types)


class _ArgPacker:
    """Numba's own ``_Kernel._prepare_args`` on a stand-in kernel without argument extensions."""

    extensions = ()

    def _prepare_args(self, *args: Any) -> None:
        runtime.cuda.dispatcher._Kernel._prepare_args(self, *args)


def pack_args(argtypes: Sequence[Any], args: Sequence[Any]) -> tuple[list, list[int]] | None:
    """(kernel parameters as Numba passes them, index of each argument's first parameter); None when
    an argument is a host array (Numba would copy it)."""
    kernelargs: list[Any] = []
    starts, retr = [], []
    packer = _ArgPacker()
    for ty, value in zip(argtypes, args):
        starts.append(len(kernelargs))
        packer._prepare_args(ty, value, 0, retr, kernelargs)
    return None if retr else (kernelargs, starts)


def _launch_cached(dispatcher: Any, grid: Any, block: Any, stream: Any, shared: int,
                   args: Sequence[Any]) -> bool:
    """Launch through the disk-cached kernel; False when it cannot (the caller launches via Numba)."""
    found = kernel_cache.compiled(dispatcher, tuple(args))
    packed = None if found is None else pack_args(found.argtypes, args)
    if packed is None:
        return False
    values = [_as_ctype(v) for v in packed[0]]
    params = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
    cu_launch(driver_function(found.handle), dims3(grid) + dims3(block), shared, stream_handle(stream),
              ctypes.addressof(params))
    return True


def driver_function(handle: Any) -> Any:
    """What ``cuLaunchKernel`` takes for a cuda.core kernel handle: a CUkernel or CUfunction as is."""
    from cuda.bindings import driver

    if isinstance(handle, (driver.CUkernel, driver.CUfunction)):
        return handle
    return driver.CUfunction(int(handle))


def stream_handle(stream: Any) -> int:
    """The CUstream handle (int) of a Numba stream or 0."""
    if not stream:
        return 0
    handle = getattr(stream, "handle", 0)
    try:
        return int(handle or 0)  # a cuda.bindings CUstream converts with int()
    except TypeError:
        return int(handle.value or 0)  # a ctypes handle


_cu_streams: dict[int, Any] = {}


def cu_launch(function: Any, dims: tuple, shared: int, stream: Any, params_address: int) -> None:
    """``cuLaunchKernel(function, grid, block, shared, stream, void** params)``."""
    from cuda.bindings import driver

    handle = stream if isinstance(stream, int) else stream_handle(stream)
    cu_stream = _cu_streams.get(handle)
    if cu_stream is None:
        cu_stream = _cu_streams[handle] = driver.CUstream(handle)
    err, = driver.cuLaunchKernel(function, *dims, int(shared), cu_stream, params_address, 0)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuLaunchKernel failed: {err}")
