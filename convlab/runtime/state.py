"""The runtime's state, decided once at import, and the one import of ``numba.cuda`` in convlab, made on
first use.

The runtime is in one of three states (:data:`MODE`):

    "gpu"        kernels compile for the device and run on it
    "simulator"  Numba's CUDA simulator: kernels run as Python, one thread per CUDA thread, with the
                 stand-ins of the GPU intrinsics
    "compile"    compile-only: no device and no simulator; kernels compile to PTX for a named target
                 (:mod:`convlab.runtime.targets`) and nothing runs (:mod:`convlab.runtime.offline`,
                 :mod:`convlab.compile`)

``CONVLAB_RUNTIME=gpu|simulator|compile`` chooses one. Otherwise ``NUMBA_ENABLE_CUDASIM=1`` is the
simulator; ``NUMBA_ENABLE_CUDASIM=0`` is the GPU when the CUDA driver reports a device, else compile-only;
unset, the driver is probed with ``ctypes`` (``cuInit`` + ``cuDeviceGetCount``) and the simulator is
switched on before ``numba.cuda`` is imported when no device answers. If ``numba.cuda`` was already
imported by the caller, its choice of the simulator stands.

``numba.cuda`` (and ``numba``) load on first use: the first read of ``state.cuda`` / ``runtime.cuda``
(a kernel module's ``from convlab.runtime import cuda``, ``runtime.jit``, a device array) imports them and
applies what the state needs of numba-cuda (:func:`load_numba_cuda`). Importing convlab, ``convlab
--help`` and argument errors import neither: ``import convlab`` costs 0.13x ``import numba.cuda``, against
1.9x with ``numba.cuda`` imported at import (medians, results/import_cost/cpu/e50faa5).

Here too: what each state needs of numba-cuda (the simulator's thread-safe shared arrays and its kernel
context, compiling without a driver), the device's name, compute capability and software versions.
Device arrays, copies and events are :mod:`convlab.runtime.arrays`; both are read through
:mod:`convlab.runtime.device`.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
from typing import Any

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

from convlab.runtime import sim_blocks, targets  # noqa: E402

_load_lock = threading.Lock()


def load_numba_cuda() -> Any:
    """``numba.cuda``, imported on the first call (after the state's decision, which it follows), with what
    the state needs of it: compiling without a driver, the simulator's thread-safe shared arrays and
    its blocks' runner (convlab.runtime.sim_blocks), no low-occupancy warnings. Module attributes ``cuda`` and ``numba`` (:func:`__getattr__`) call it."""
    module = globals().get("cuda")
    if module is not None:
        return module
    with _load_lock:
        if "cuda" not in globals():
            from numba import cuda as module
            import numba as numba_module

            if COMPILE_ONLY:
                _compile_without_device()
            if SIMULATOR:
                _lock_simulator_shared_arrays()
                from numba.cuda.simulator import kernel as sim_kernel

                sim_blocks.install(sim_kernel)  # blocks wait for their threads, no polling loop (sim_blocks.py)
            # Small test launches are expected; their "low occupancy" warnings are noise.
            numba_module.config.CUDA_LOW_OCCUPANCY_WARNINGS = 0
            globals().update(numba=numba_module, cuda=module)
    return globals()["cuda"]


def numba_cuda_imported() -> bool:
    """Whether ``numba.cuda`` is imported, by convlab or by the caller (no Numba device array or stream
    exists before)."""
    return "cuda" in globals() or "numba.cuda" in sys.modules


def __getattr__(name: str) -> Any:
    """``state.cuda`` and ``state.numba``: loaded on first read (:func:`load_numba_cuda`)."""
    if name in ("cuda", "numba"):
        load_numba_cuda()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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
    return targets.from_device(load_numba_cuda().get_current_device())


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

    load_numba_cuda()  # a dispatcher made by numba.cuda.jit itself: the compile-only patch first
    from numba.cuda.dispatcher import _Kernel

    accepted = set(inspect.signature(_Kernel.__init__).parameters) - {"self", "py_func", "argtypes"}
    options = {k: v for k, v in (getattr(dispatcher, "targetoptions", None) or {}).items() if k in accepted}
    return _Kernel(dispatcher.py_func, argtypes, **options)._codelibrary


if COMPILE_ONLY:
    from convlab.runtime.offline import OfflineArray  # noqa: E402
else:
    OfflineArray = type(None)  # never matches an operand


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
    name = load_numba_cuda().get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def compute_capability() -> tuple[int, int]:
    """(major, minor) of the current device; (0, 0) on the simulator; the target's when compiling only."""
    if SIMULATOR:
        return (0, 0)
    if COMPILE_ONLY:
        return target().cc
    return tuple(load_numba_cuda().get_current_device().compute_capability)  # type: ignore[return-value]


def total_memory() -> int | None:
    """Bytes of the current device's memory; None on the simulator and when compiling only."""
    if SIMULATOR or COMPILE_ONLY:
        return None
    return int(load_numba_cuda().current_context().get_memory_info()[1])


def versions() -> dict[str, str]:
    """Versions of the software stack, for results files."""
    cuda = load_numba_cuda()
    import numba
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
