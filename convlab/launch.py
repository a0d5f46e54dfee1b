"""The one entry of every plugin kernel launch, and the only code below Numba's per-call marshalling.

``launch(kernel, grid, block, args, stream=..., shared=...)`` runs one kernel. Plugins do not call it
by name: :func:`convlab.runtime.jit` returns a :class:`Kernel` whose ``kernel[grid, block](*args)``
comes here, so plugins need no change.

Streams: a launch without an explicit stream runs on the *ambient* stream, set by the public ops for
the duration of a call (``with using_stream(s):``), else the default stream (0).

Recording and replay (used by :mod:`convlab.plan`): inside ``with recording(operands) as rec`` every
launch is also captured as a :class:`Launch`: compiled function, grid, block, shared memory, stream
and arguments. An argument array whose memory lies inside an operand (a, b, bias, out, matched by
device pointer) is stored as (operand slot, byte offset, shape, strides, dtype); every other array
(workspace, parameter tables) is kept referenced by the record, so its memory lives as long as the
plan. ``Launch.replay(bases, stream)`` re-issues the launch on new operands:

- on a GPU through the *thin path*: at record time Numba's own ``_Kernel._prepare_args`` packs the
  argument list once into ctypes values and a ``void**`` array (per array: meminfo, parent, nitems,
  itemsize, data, shape..., strides...; Python ints as intptr_t, as cuda.core does); a replay writes
  the new data pointers into the patched slots and calls ``cuLaunchKernel`` (cuda.bindings) directly;
- on the simulator (and on a GPU when the thin path is unavailable) by re-invoking the Numba kernel
  with views of the new operands.
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import threading
import types as pytypes
import warnings
from typing import Any, Iterator, Sequence

import numpy as np

from . import kernel_cache, runtime

log = logging.getLogger(__name__)
_state = threading.local()
#: The thin path is used on a GPU unless ``CONVLAB_THIN_LAUNCH=0``; :func:`disable_thin` turns it off.
THIN = os.environ.get("CONVLAB_THIN_LAUNCH", "1").strip() != "0"


# ---- the kernel wrapper returned by runtime.jit ----------------------------------------------------
class Kernel:
    """A Numba kernel whose ``kernel[grid, block(, stream(, shared))](*args)`` goes through
    :func:`launch`; every other attribute is the dispatcher's."""

    __slots__ = ("dispatcher",)

    def __init__(self, dispatcher: Any) -> None:
        self.dispatcher = dispatcher

    def __getitem__(self, config: tuple) -> "_Configured":
        if not isinstance(config, tuple) or len(config) not in (2, 3, 4):
            raise ValueError("a kernel launch needs [grid, block] or [grid, block, stream(, shared)]")
        grid, block, *rest = config
        return _Configured(self.dispatcher, grid, block, rest[0] if rest else None,
                           rest[1] if len(rest) > 1 else 0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.dispatcher, name)


class _Configured:
    __slots__ = ("dispatcher", "grid", "block", "stream", "shared")

    def __init__(self, dispatcher, grid, block, stream, shared) -> None:
        self.dispatcher, self.grid, self.block, self.stream, self.shared = dispatcher, grid, block, \
            stream, shared

    def __call__(self, *args: Any) -> None:
        launch(self.dispatcher, self.grid, self.block, args, stream=self.stream, shared=self.shared)


def wrap(jitted: Any) -> Any:
    """``Kernel(jitted)``; for a decorator (``cuda.jit(max_registers=...)``), one that wraps."""
    if isinstance(jitted, pytypes.FunctionType):
        return lambda fn: wrap(jitted(fn))
    return Kernel(jitted)


# ---- streams ----------------------------------------------------------------------------------------
def ambient_stream() -> Any:
    """The stream a launch without an explicit one runs on (0: the default stream)."""
    return getattr(_state, "stream", 0)


@contextlib.contextmanager
def using_stream(stream: Any) -> Iterator[None]:
    """Run the launches of the ``with`` block on ``stream`` (a Numba stream or 0)."""
    previous = ambient_stream()
    _state.stream = stream
    try:
        yield
    finally:
        _state.stream = previous


def stream_handle(stream: Any) -> int:
    """The CUstream handle (int) of a Numba stream or 0."""
    if not stream:
        return 0
    handle = getattr(stream, "handle", 0)
    try:
        return int(handle or 0)  # a cuda.bindings CUstream converts with int()
    except TypeError:
        return int(handle.value or 0)  # a ctypes handle


# ---- launching --------------------------------------------------------------------------------------
def dims3(value: Any) -> tuple[int, int, int]:
    """A grid or block argument (int or tuple of 1-3 ints) as (x, y, z)."""
    dims = (int(value),) if isinstance(value, (int, np.integer)) else tuple(int(v) for v in value)
    return (dims + (1, 1, 1))[:3]


def launch(kernel: Any, grid: Any, block: Any, args: Sequence[Any], *, stream: Any = None,
           shared: int = 0) -> None:
    """Launch ``kernel`` (a :class:`Kernel` or Numba dispatcher) on ``stream`` (default: the ambient
    stream) with Numba's ordinary launch; recorded when a recorder is active."""
    dispatcher = kernel.dispatcher if isinstance(kernel, Kernel) else kernel
    stream = ambient_stream() if stream is None else stream
    if not (kernel_cache.enabled() and _launch_cached(dispatcher, grid, block, stream, shared, args)):
        dispatcher[grid, block, stream, shared](*args)
    recorder = getattr(_state, "recorder", None)
    if recorder is not None:
        recorder.append(Launch(dispatcher, grid, block, shared, args, recorder.operands))


class Launch:
    """One recorded launch; :meth:`replay` re-issues it on new operands (see the module docstring)."""

    def __init__(self, dispatcher: Any, grid: Any, block: Any, shared: int, args: Sequence[Any],
                 operands: Sequence[tuple[int, int] | None]) -> None:
        self.dispatcher, self.grid, self.block, self.shared = dispatcher, dims3(grid), dims3(block), \
            int(shared)
        self.args: list[Any] = []   # constants and owned arrays; None where an operand view goes
        self.views: list[tuple[int, int, int, tuple, tuple, np.dtype]] = []  # (arg, slot, offset, ...)
        self.owned_bytes = 0
        for i, value in enumerate(args):
            ptr = runtime.device_pointer(value) if runtime.is_device_array(value) else None
            slot = _operand_slot(ptr, operands) if ptr is not None else None
            if slot is None:
                self.args.append(value)
                if ptr is not None:
                    self.owned_bytes += int(value.size) * value.dtype.itemsize
            else:
                self.args.append(None)
                self.views.append((i, slot, ptr - operands[slot][0], tuple(value.shape),
                                   tuple(runtime.strides_of(value)), np.dtype(value.dtype)))
        self.thin = None
        if THIN and not runtime.SIMULATOR:
            try:
                self.thin = _ThinLaunch.build(self, args)
            except Exception as exc:  # noqa: BLE001  (replay then re-invokes the Numba kernel)
                log.warning("thin launch unavailable for %s: %r", getattr(dispatcher, "__name__", "?"), exc)

    def replay(self, operands: Sequence[Any], bases: Sequence[int], stream: Any) -> None:
        """Launch again with operand slot ``s`` at device pointer ``bases[s]`` (``operands[s]`` is
        the device array itself, used when the thin path is not available)."""
        if self.thin is not None:
            self.thin.launch(bases, stream)
            return
        args = list(self.args)
        for i, slot, offset, shape, strides, dtype in self.views:
            args[i] = runtime.view_at(operands[slot], offset, shape, strides, dtype)
        self.dispatcher[self.grid, self.block, stream, self.shared](*args)


def disable_thin(exc: BaseException) -> None:
    """Stop using the thin path in this process (a thin launch failed), with a warning."""
    global THIN
    THIN = False
    warnings.warn(f"convlab: thin kernel launch failed ({exc!r}); using Numba's launch from now on",
                  RuntimeWarning, stacklevel=3)


def _operand_slot(ptr: int, operands: Sequence[tuple[int, int] | None]) -> int | None:
    for slot, span in enumerate(operands):
        if span is not None and span[0] <= ptr < span[0] + max(span[1], 1):
            return slot
    return None


def is_recording() -> bool:
    """True inside :func:`recording` on this thread."""
    return getattr(_state, "recorder", None) is not None


@contextlib.contextmanager
def recording(operands: Sequence[tuple[int, int] | None]) -> Iterator[list[Launch]]:
    """Record the launches of the ``with`` block; ``operands`` are (device pointer, bytes) per slot."""
    if getattr(_state, "recorder", None) is not None:
        raise RuntimeError("launch recordings do not nest")
    rec = _Recorder(operands)
    _state.recorder = rec
    try:
        yield rec
    finally:
        _state.recorder = None


class _Recorder(list):
    def __init__(self, operands) -> None:
        super().__init__()
        self.operands = list(operands)


# ---- the thin GPU path ------------------------------------------------------------------------------
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
    def build(cls, rec: Launch, args: Sequence[Any]) -> "_ThinLaunch | None":
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
                   rec.grid + rec.block, rec.shared)

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
    cu_launch(driver_function(found.handle), dims3(grid) + dims3(block), shared, stream,
              ctypes.addressof(params))
    return True


def driver_function(handle: Any) -> Any:
    """What ``cuLaunchKernel`` takes for a cuda.core kernel handle: a CUkernel or CUfunction as is."""
    from cuda.bindings import driver

    if isinstance(handle, (driver.CUkernel, driver.CUfunction)):
        return handle
    return driver.CUfunction(int(handle))


_cu_streams: dict[int, Any] = {}


def cu_launch(function: Any, dims: tuple, shared: int, stream: Any, params_address: int) -> None:
    """``cuLaunchKernel(function, grid, block, shared, stream, void** params)``."""
    from cuda.bindings import driver

    handle = stream_handle(stream)
    cu_stream = _cu_streams.get(handle)
    if cu_stream is None:
        cu_stream = _cu_streams[handle] = driver.CUstream(handle)
    err, = driver.cuLaunchKernel(function, *dims, int(shared), cu_stream, params_address, 0)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuLaunchKernel failed: {err}")
