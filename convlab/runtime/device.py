"""The one place that imports ``numba.cuda``.

Everything else in convlab (kernels included) reaches CUDA through this module, so switching between a
real GPU and Numba's CUDA simulator, or moving to a successor of numba-cuda, touches this file only.

The runtime is in one of three states (:data:`MODE`), decided once at import:

    "gpu"        kernels compile for the device and run on it
    "simulator"  Numba's CUDA simulator: kernels run as Python, one thread per CUDA thread, with the
                 stand-ins of the GPU intrinsics
    "compile"    compile-only: no device and no simulator; kernels compile to PTX for a named target
                 (:mod:`convlab.runtime.targets`) and nothing runs (:mod:`convlab.runtime.offline`, :mod:`convlab.compile`)

``CONVLAB_RUNTIME=gpu|simulator|compile`` chooses one. Otherwise ``NUMBA_ENABLE_CUDASIM=1`` is the
simulator; ``NUMBA_ENABLE_CUDASIM=0`` is the GPU when the CUDA driver reports a device, else compile-only;
unset, the driver is probed with ``ctypes`` (``cuInit`` + ``cuDeviceGetCount``) and the simulator is
switched on before ``numba.cuda`` is imported when no device answers. If ``numba.cuda`` was already
imported by the caller, its choice of the simulator stands.
"""
from __future__ import annotations

__all__ = ["cuda", "numba", "driver_gpu_count", "MODES", "MODE", "SIMULATOR", "COMPILE_ONLY", "HAS_DEVICE", "SIM_UNSUPPORTED_JIT_KWARGS", "target", "lower_kernel", "RuntimeFault", "is_out_of_memory", "OfflineArray", "device_name", "compute_capability", "versions", "is_device_array", "is_cuda_array_like", "as_device_array", "device_pointer", "is_aligned", "strides_of", "view_at", "flat_view", "is_stream", "kernel_dtype", "kernel_view", "to_device", "to_host", "copy_into", "empty", "full", "synchronize", "event", "time_ms"]

import ctypes
import os
import sys
import threading
from typing import Any, Callable

import numpy as np


def driver_gpu_count() -> int:
    """The number of GPUs the CUDA driver reports (0 without a driver), probed with ``ctypes`` (no
    context is created)."""
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        try:
            if lib.cuInit(0) != 0:
                return 0
            count = ctypes.c_int(0)
            return count.value if lib.cuDeviceGetCount(ctypes.byref(count)) == 0 else 0
        except (AttributeError, OSError):
            return 0
    return 0


def _driver_has_gpu() -> bool:
    """True when a CUDA driver loads and reports at least one device."""
    return driver_gpu_count() > 0


MODES = ("gpu", "simulator", "compile")


def _choose_mode() -> str:
    """The runtime state (see the module docstring); sets NUMBA_ENABLE_CUDASIM to match."""
    requested = os.environ.get("CONVLAB_RUNTIME", "").strip().lower()
    if requested not in ("", *MODES):
        raise ValueError(f"CONVLAB_RUNTIME={requested!r}: expected one of {MODES}")
    if "numba.cuda" in sys.modules:  # the caller already decided between the simulator and not
        import numba

        if numba.config.ENABLE_CUDASIM:
            return "simulator"
        return "compile" if requested == "compile" or not _driver_has_gpu() else "gpu"
    sim = os.environ.get("NUMBA_ENABLE_CUDASIM", "").strip()
    if requested == "simulator" or (not requested and sim not in ("", "0")):
        mode = "simulator"
    elif requested == "compile":
        mode = "compile"
    elif requested == "gpu" or sim == "0":
        mode = "gpu" if _driver_has_gpu() else "compile"
    else:
        mode = "gpu" if _driver_has_gpu() else "simulator"
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1" if mode == "simulator" else "0"
    if "numba.core.config" in sys.modules:  # numba imported before us: re-read the environment
        sys.modules["numba.core.config"].reload_config()
    return mode


#: "gpu", "simulator" or "compile" (see the module docstring)
MODE: str = _choose_mode()

from numba import cuda  # noqa: E402  (must follow the simulator decision)
import numba  # noqa: E402

from convlab.runtime import targets

#: True when kernels run on Numba's CUDA simulator (one Python thread per CUDA thread). Read only here
#: and where the simulator truly differs from a GPU (its intrinsic stand-ins); everything else asks
#: the target (:func:`target`) or :data:`MODE`.
SIMULATOR: bool = MODE == "simulator"
#: True in the compile-only state: kernels compile for a named target, nothing launches.
COMPILE_ONLY: bool = MODE == "compile"
#: True when a GPU runs the kernels: device times, device memory, the driver's launch paths.
HAS_DEVICE: bool = MODE == "gpu"


def target():
    """The target kernels run on now (:func:`convlab.runtime.targets.current`)."""
    return targets.current()


def _process_target() -> Any:
    """This process's own target: the simulator's, the GPU's (read from the driver), or in the
    compile-only state the named target of ``CONVLAB_TARGET`` (default sm_90)."""
    if SIMULATOR:
        return targets.SIMULATOR
    if COMPILE_ONLY:
        return targets.get(os.environ.get("CONVLAB_TARGET", "sm_90").strip() or "sm_90")
    return targets.from_device(cuda.get_current_device())


targets.set_process_target(_process_target)


def _compile_without_device() -> None:
    """Let numba-cuda compile with no driver: the compute capability it asks the current device for
    is the current target's (numba-cuda 0.30 asks in ``dispatcher``, ``compiler`` and the code library's
    ``_ensure_cc``)."""
    import types as pytypes

    from numba.cuda import codegen, compiler, dispatcher

    def device():
        return pytypes.SimpleNamespace(compute_capability=target().cc)

    def ensure_cc(self, cc):
        if cc is not None:
            return cc
        cc = target().cc
        return (cc[0], cc[1], "a" if cc >= (9, 0) else "")

    dispatcher.get_current_device = compiler.get_current_device = device
    codegen.CUDACodeLibrary._ensure_cc = ensure_cc


def lower_kernel(dispatcher: Any, argtypes: tuple) -> Any:
    """The code library of ``dispatcher`` compiled for ``argtypes`` with its own jit options, without
    loading it (numba-cuda's ``_Kernel``; the compute capability is the current device's, or when
    compiling only the current target's). Its ``get_asm_str(cc=...)`` gives the PTX for any target."""
    import inspect

    from numba.cuda.dispatcher import _Kernel

    accepted = set(inspect.signature(_Kernel.__init__).parameters) - {"self", "py_func", "argtypes"}
    options = {k: v for k, v in (getattr(dispatcher, "targetoptions", None) or {}).items() if k in accepted}
    return _Kernel(dispatcher.py_func, argtypes, **options)._codelibrary


if COMPILE_ONLY:
    _compile_without_device()
    from convlab.runtime.offline import OfflineArray  # noqa: E402
else:
    OfflineArray = type(None)  # never matches an operand

# Small test launches are expected; their "low occupancy" warnings are noise.
numba.config.CUDA_LOW_OCCUPANCY_WARNINGS = 0

def _lock_simulator_shared_arrays() -> None:
    """Make the simulator's static ``cuda.shared.array`` allocation thread-safe.

    numba-cuda 0.30.4 ``FakeCUDAShared.array`` looks the array up by the caller's (file, line), and on a
    miss allocates it with ``np.empty`` and stores it, without a lock. All threads of a launch's first
    block make that call at once, so two of them can both miss and each keep its own array: their
    "shared" writes are then invisible to each other and the block reads uninitialised memory (rare,
    load-dependent garbage results). Same key, same ``np.empty``, under one lock; the caller's frame is
    read directly (the original's ``traceback.extract_stack`` also costs time per call).
    """
    from numba.cuda.simulator import kernelapi

    cls = kernelapi.FakeCUDAShared
    if getattr(cls, "_convlab_locked", False):
        return
    original = cls.array
    lock = threading.Lock()

    def array(self, shape, dtype, alignment=None):
        if alignment is not None or shape == 0:  # rejected, or dynamic shared memory: no lookup, no race
            return original(self, shape, dtype, alignment)
        if isinstance(dtype, kernelapi.types.Type):
            dtype = kernelapi.numpy_support.as_dtype(dtype)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            res = self._allocations.get(key)
            if res is None:
                res = self._allocations[key] = np.empty(shape, dtype)
        return res

    cls.array = array
    cls._convlab_locked = True


def simulator_kernel_context() -> Any:
    """The simulator's context of the running launch (numba-cuda keeps it private: the warpgroup
    stand-ins of convlab.kernels.arch.wgmma_sim reach the block's shared memory through it)."""
    from numba.cuda.simulator.kernel import _get_kernel_context

    return _get_kernel_context()



if SIMULATOR:
    # Barrier-heavy simulated kernels run 2-8x faster with a short GIL switch interval.
    sys.setswitchinterval(1e-4)
    _lock_simulator_shared_arrays()

#: Keyword arguments of ``cuda.jit`` that the simulator rejects (convlab.runtime.kernel.jit drops them).
SIM_UNSUPPORTED_JIT_KWARGS = ("lineinfo", "launch_bounds", "max_registers", "lto", "forceinline", "link")


class RuntimeFault(RuntimeError):
    """An error of the runtime itself, not of the plugin whose launch met it (e.g. the simulator's state
    found inconsistent): the ops set no plugin aside for it."""


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is the device (or the simulator's budget) running out of memory."""
    if isinstance(exc, MemoryError):
        return True
    code = getattr(exc, "code", None)
    text = str(exc)
    return code == 2 or "CUDA_ERROR_OUT_OF_MEMORY" in text or "out of memory" in text.lower()


def device_name() -> str:
    """Name of the current device, ``'CUDA simulator'``, or ``'compile-only (<target>)'``."""
    if SIMULATOR:
        return "CUDA simulator"
    if COMPILE_ONLY:
        return f"compile-only ({target().name})"
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def compute_capability() -> tuple[int, int]:
    """(major, minor) of the current device; (0, 0) on the simulator; the target's when compiling only."""
    if SIMULATOR:
        return (0, 0)
    if COMPILE_ONLY:
        return target().cc
    return tuple(cuda.get_current_device().compute_capability)  # type: ignore[return-value]


def versions() -> dict[str, str]:
    """Versions of the software stack, for results files."""
    import numba_cuda  # noqa: F401  (present whenever numba.cuda is the numba-cuda package)

    out = {"numba": numba.__version__, "numpy": np.__version__,
           "numba_cuda": getattr(sys.modules.get("numba_cuda"), "__version__", "unknown"),
           "python": sys.version.split()[0]}
    if MODE == "gpu":
        try:
            out["cuda_driver"] = ".".join(map(str, cuda.cudadrv.driver.driver.get_version()))
        except Exception:  # pragma: no cover - informational only
            pass
    return out


def is_device_array(obj: Any) -> bool:
    """True for a Numba device array (or the simulator's or the compile-only runtime's stand-in)."""
    if SIMULATOR:
        return isinstance(obj, cuda.devicearray.FakeCUDAArray)
    if COMPILE_ONLY:  # its stand-ins, or device arrays a caller built over memory of its own
        return isinstance(obj, OfflineArray) or cuda.devicearray.is_cuda_ndarray(obj)
    return cuda.devicearray.is_cuda_ndarray(obj)


def is_cuda_array_like(obj: Any) -> bool:
    """True for any object exposing ``__cuda_array_interface__`` (CuPy, PyTorch CUDA tensors...)."""
    return hasattr(obj, "__cuda_array_interface__") or is_device_array(obj)


def as_device_array(obj: Any) -> Any:
    """A Numba device-array view of a CUDA-array-like object, without a copy."""
    if is_device_array(obj):
        return obj
    return cuda.as_cuda_array(obj)


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
        return OfflineArray(view) if COMPILE_ONLY else cuda.devicearray.FakeCUDAArray(view)
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    return DeviceNDArray(shape, strides, dtype, gpu_data=base.gpu_data.view(offset))


def flat_view(dev: Any) -> Any:
    """A 1-D view of the ``dev.size`` elements under a dense array (C-contiguous, or any permutation
    of it such as channels-last strides), in memory order from its first element."""
    dtype = np.dtype(dev.dtype)
    if SIMULATOR or COMPILE_ONLY:
        flat = np.lib.stride_tricks.as_strided(dev._ary, (int(dev.size),), (dtype.itemsize,))
        return OfflineArray(flat) if COMPILE_ONLY else cuda.devicearray.FakeCUDAArray(flat)
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    return DeviceNDArray((int(dev.size),), (dtype.itemsize,), dtype, gpu_data=dev.gpu_data)


def is_stream(obj: Any) -> bool:
    """True for a Numba stream (or the simulator's stand-in)."""
    if COMPILE_ONLY:
        return False
    if SIMULATOR:
        from numba.cuda.simulator.api import stream as stream_class
    else:
        stream_class = cuda.cudadrv.driver.Stream
    return isinstance(obj, stream_class)


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
        return cuda.to_device(host)
    return cuda.to_device(host.view(bits)).view(host.dtype)


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
    return cuda.device_array(tuple(int(s) for s in shape), dtype=np.dtype(dtype))


def full(shape: tuple[int, ...], value: float, dtype: Any) -> Any:
    """Device array filled with ``value`` (used to poison outputs with NaN in tests)."""
    return to_device(np.full(tuple(int(s) for s in shape), value, dtype=np.dtype(dtype)))


def synchronize() -> None:
    """Wait for all queued device work."""
    if not COMPILE_ONLY:
        cuda.synchronize()


def event() -> Any:
    """A CUDA event that can be recorded and timed (a no-op on the simulator and when compiling only)."""
    if COMPILE_ONLY:
        from convlab.runtime.offline import Event

        return Event()
    return cuda.event(timing=True)


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
    cuda.synchronize()
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
