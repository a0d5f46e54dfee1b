"""Device arrays, host copies and events on the runtime's state (:mod:`convlab.runtime.state`): what an
array is, its pointer, strides and views, copies between host and device (bfloat16 through its uint16
bits), allocation, synchronisation and CUDA-event timing. Read through :mod:`convlab.runtime.device`.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from convlab.runtime import state
from convlab.runtime.state import COMPILE_ONLY, MODE, SIMULATOR, OfflineArray


def is_device_array(obj: Any) -> bool:
    """True for a Numba device array (or the simulator's or the compile-only runtime's stand-in); none
    exists before ``numba.cuda`` is imported, so asking does not import it."""
    if not state.numba_cuda_imported():
        return isinstance(obj, OfflineArray)
    if SIMULATOR:
        return isinstance(obj, state.cuda.devicearray.FakeCUDAArray)
    if COMPILE_ONLY:  # its stand-ins, or device arrays a caller built over memory of its own
        return isinstance(obj, OfflineArray) or state.cuda.devicearray.is_cuda_ndarray(obj)
    return state.cuda.devicearray.is_cuda_ndarray(obj)


def is_cuda_array_like(obj: Any) -> bool:
    """True for any object exposing ``__cuda_array_interface__`` (CuPy, PyTorch CUDA tensors...)."""
    return hasattr(obj, "__cuda_array_interface__") or is_device_array(obj)


def as_device_array(obj: Any) -> Any:
    """A Numba device-array view of a CUDA-array-like object, without a copy."""
    if is_device_array(obj):
        return obj
    return state.cuda.as_cuda_array(obj)


def device_pointer(dev: Any) -> int:
    """Device address of a device array's first element (a host address on the simulator and when
    compiling only)."""
    if SIMULATOR or isinstance(dev, OfflineArray):
        return int(dev._ary.__array_interface__["data"][0])
    return int(dev.device_ctypes_pointer.value or 0)


def is_aligned(dev: Any, nbytes: int = 16) -> bool:
    """Whether a device array's data starts on an ``nbytes`` boundary (16: what ``cp.async`` and the
    16-byte vector loads and stores need)."""
    return device_pointer(dev) % nbytes == 0


def strides_of(dev: Any) -> tuple[int, ...]:
    """Byte strides of a device array."""
    return tuple(int(s) for s in (dev._ary.strides if SIMULATOR or isinstance(dev, OfflineArray)
                                  else dev.strides))


def view_at(base: Any, offset: int, shape: tuple, strides: tuple, dtype: Any) -> Any:
    """A device-array view into ``base``'s memory at byte ``offset`` with ``shape`` / byte ``strides``."""
    dtype = np.dtype(dtype)
    if SIMULATOR or COMPILE_ONLY:  # the base's memory in address order (channels-last: not C order)
        ary = base._ary
        mem = np.lib.stride_tricks.as_strided(ary, (int(ary.size),), (ary.dtype.itemsize,)) if ary.size \
            else ary.reshape(-1)
        raw = mem.view(np.uint8)[offset:]
        flat = np.ndarray((raw.size // dtype.itemsize,), dtype, buffer=raw) if raw.size else raw
        view = np.lib.stride_tricks.as_strided(flat, shape, strides)
        return OfflineArray(view) if COMPILE_ONLY else state.cuda.devicearray.FakeCUDAArray(view)
    return state.cuda.devicearray.DeviceNDArray(shape, strides, dtype, gpu_data=base.gpu_data.view(offset))


def flat_view(dev: Any) -> Any:
    """A 1-D view of the ``dev.size`` elements under a dense array (C-contiguous, or any permutation
    of it such as channels-last strides), in memory order from its first element."""
    dtype = np.dtype(dev.dtype)
    if SIMULATOR or COMPILE_ONLY:
        flat = np.lib.stride_tricks.as_strided(dev._ary, (int(dev.size),), (dtype.itemsize,))
        return OfflineArray(flat) if COMPILE_ONLY else state.cuda.devicearray.FakeCUDAArray(flat)
    return state.cuda.devicearray.DeviceNDArray((int(dev.size),), (dtype.itemsize,), dtype, gpu_data=dev.gpu_data)


def is_stream(obj: Any) -> bool:
    """True for a Numba stream (or the simulator's stand-in)."""
    if COMPILE_ONLY or not state.numba_cuda_imported():
        return False
    cuda = state.cuda
    return isinstance(obj, cuda.stream if SIMULATOR else cuda.cudadrv.driver.Stream)  # the simulator's class


def _bits_dtype(dtype: Any) -> np.dtype | None:
    """uint16 for dtypes numpy cannot export through the buffer protocol (ml_dtypes' bfloat16, whose
    typecode 'E' makes Numba's host copies fail on a GPU), else None."""
    dtype = np.dtype(dtype)
    return np.dtype(np.uint16) if dtype.kind == "V" and dtype.itemsize == 2 else None


def kernel_dtype(dtype: Any) -> np.dtype:
    """The dtype kernels hold ``dtype`` in: uint16 bits for bfloat16 (Numba cannot type it), else itself."""
    return _bits_dtype(dtype) or np.dtype(dtype)


def kernel_view(arr: Any) -> Any:
    """``arr`` as kernels read it: a bfloat16 array viewed as its uint16 bits, any other unchanged."""
    bits = _bits_dtype(arr.dtype)
    return arr if bits is None else arr.view(bits)


def to_device(host: np.ndarray) -> Any:
    """Copy a host array to a new device array (bfloat16 travels as its uint16 bits and is viewed back
    as bfloat16 on the device)."""
    host = np.ascontiguousarray(host)
    if COMPILE_ONLY:
        return OfflineArray(host.copy())
    bits = _bits_dtype(host.dtype)
    if bits is None or SIMULATOR:
        return state.cuda.to_device(host)
    return state.cuda.to_device(host.view(bits)).view(host.dtype)


def to_host(dev: Any) -> np.ndarray:
    """A host copy of a device array (``dev.copy_to_host()``; bfloat16 through its uint16 bits)."""
    bits = _bits_dtype(dev.dtype)
    if bits is None or SIMULATOR or COMPILE_ONLY:
        return dev.copy_to_host()
    return dev.view(bits).copy_to_host().view(dev.dtype)


def copy_into(dev: Any, host: np.ndarray) -> None:
    """``dev.copy_to_device(host)`` (bfloat16 through its uint16 bits)."""
    bits = _bits_dtype(dev.dtype)
    if bits is None or SIMULATOR or COMPILE_ONLY:
        dev.copy_to_device(host)
    else:
        dev.view(bits).copy_to_device(np.ascontiguousarray(host).view(bits))


def empty(shape: tuple[int, ...], dtype: Any) -> Any:
    """Uninitialised device array."""
    if COMPILE_ONLY:
        return OfflineArray.empty(shape, dtype)
    return state.cuda.device_array(tuple(int(s) for s in shape), dtype=np.dtype(dtype))


def full(shape: tuple[int, ...], value: float, dtype: Any) -> Any:
    """Device array filled with ``value`` (used to poison outputs with NaN in tests)."""
    return to_device(np.full(tuple(int(s) for s in shape), value, dtype=np.dtype(dtype)))


def synchronize() -> None:
    """Wait for all queued device work."""
    if not COMPILE_ONLY:
        state.cuda.synchronize()


def event() -> Any:
    """A CUDA event that can be recorded and timed (a no-op on the simulator and when compiling only)."""
    if COMPILE_ONLY:
        from convlab.runtime.offline import Event

        return Event()
    return state.cuda.event(timing=True)


def time_ms(fn: Callable[[], Any], *, warmup: int = 3, repeat: int = 20, inner: int = 1) -> list[float] | None:
    """Per-call times of ``fn()`` in milliseconds with CUDA events, after ``warmup`` calls: ``repeat``
    samples, each ``inner`` calls back to back between two events (inner > 1: the host's work overlaps
    the device's, as in a stream of layers) divided by ``inner``.

    Returns None on the simulator, where device times mean nothing, and when compiling only.
    """
    for _ in range(warmup):
        fn()
    if MODE != "gpu":
        return None
    state.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, stop = event(), event()
        start.record()
        for _ in range(inner):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / inner)
    return times
