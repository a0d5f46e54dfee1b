"""The thin GPU launch path: a kernel's parameters packed once into a buffer the record owns,
relaunched with ``cuLaunchKernel`` (:mod:`convlab.runtime.driver`).

Numba's per-call launch re-marshals every argument (a 4-D array is 13 kernel parameters built through
ctypes, about 30 us for four arrays). Here :func:`flatten` lays the parameters out exactly as Numba's
``_Kernel._prepare_args`` does (per array: meminfo, parent, nitems, itemsize, data, shape...,
strides..., all intptr_t; an integer scalar as its own width, float32 as 4 bytes, float64 as 8, a
bool as 1 byte), :class:`Packed` writes them into ONE zeroed buffer of 8-byte slots that it owns
together with its ``void**`` array, and a relaunch only writes new data pointers into the patched
slots and calls ``cuLaunchKernel``. Nothing the ``void**`` points at is a
temporary: every address lies inside the record's own buffer (tests/core/test_plan.py checks this).

Before a record takes the thin path (GPU) the packing is checked twice: against the values Numba's own
``_prepare_args`` produced for the same arguments, and against the kernel's parameter count and sizes
as the driver reports them (``cuKernelGetParamInfo``/``cuFuncGetParamInfo``). A mismatch keeps Numba's
launch for that record, with a warning naming the parameter. Types outside this table (tuples,
records, complex, float16) never take the thin path.
"""
from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any, Sequence

import numpy as np

from convlab.runtime import device as runtime
from convlab.runtime import kernel_cache
from convlab.runtime.driver import cu_launch, driver_function, stream_handle

log = logging.getLogger(__name__)
SLOT = 8  # bytes per parameter slot (every supported parameter is at most 8 bytes)
_FLOATS = {"float32": ctypes.c_float, "float64": ctypes.c_double}  # by the Numba type's name


def scalar_ctype(ty: Any) -> Any:
    """The ctypes type Numba passes a scalar kernel argument of Numba type ``ty`` as; None when this
    path does not handle ``ty``."""
    from numba.core import types as nbtypes  # imported by then: ``ty`` is a Numba type

    if ty == nbtypes.boolean:
        return ctypes.c_bool
    if isinstance(ty, nbtypes.Integer):
        return getattr(ctypes, f"c_{ty}", None)
    return _FLOATS.get(str(ty)) if isinstance(ty, nbtypes.Float) else None


def flatten(argtypes: Sequence[Any], args: Sequence[Any]) -> tuple[list, list[int]] | None:
    """((ctype, value) per kernel parameter, index of each argument's first parameter) in Numba's
    layout; None when an argument is not a device array or a supported scalar."""
    from numba.core import types as nbtypes  # imported by then: ``argtypes`` are Numba types

    params: list[tuple[Any, Any]] = []
    starts: list[int] = []
    for ty, value in zip(argtypes, args):
        starts.append(len(params))
        if isinstance(ty, nbtypes.Array):
            if not runtime.is_device_array(value):
                return None  # a host array: Numba would copy it
            itemsize = np.dtype(value.dtype).itemsize
            params += [(ctypes.c_ssize_t, 0), (ctypes.c_ssize_t, 0), (ctypes.c_ssize_t, int(value.size)),
                       (ctypes.c_ssize_t, itemsize), (ctypes.c_ssize_t, runtime.device_pointer(value))]
            params += [(ctypes.c_ssize_t, int(s)) for s in value.shape]
            params += [(ctypes.c_ssize_t, int(s)) for s in runtime.strides_of(value)]
            continue
        ctype = scalar_ctype(ty)
        if ctype is None:
            return None
        params.append((ctype, bool(value) if ctype is ctypes.c_bool else
                       (float(value) if isinstance(ty, nbtypes.Float) else int(value))))
    return params, starts


class Packed:
    """Kernel parameters in one owned buffer: ``address`` is the ``void**`` for cuLaunchKernel."""

    def __init__(self, params: Sequence[tuple[Any, Any]]) -> None:
        count = max(len(params), 1)
        self.buffer = ctypes.create_string_buffer(SLOT * count)  # zeroed; owned by this object
        self.ctypes = [ctype for ctype, _ in params]
        for i, (ctype, value) in enumerate(params):
            ctype.from_buffer(self.buffer, SLOT * i).value = value
        base = ctypes.addressof(self.buffer)
        self.pointers = (ctypes.c_void_p * count)(*[base + SLOT * i for i in range(count)])
        self.address = ctypes.addressof(self.pointers)

    def slot(self, index: int) -> Any:
        """A ctypes view of parameter ``index`` (writing ``.value`` patches the packed value)."""
        return self.ctypes[index].from_buffer(self.buffer, SLOT * index)

    def values(self) -> list:
        """The packed value of every parameter (read back from the buffer)."""
        return [self.slot(i).value for i in range(len(self.ctypes))]


def dims3(value: Any) -> tuple[int, int, int]:
    """A grid or block argument (int or tuple of 1-3 ints) as (x, y, z)."""
    dims = (int(value),) if isinstance(value, (int, np.integer)) else tuple(int(v) for v in value)
    return (dims + (1, 1, 1))[:3]


class _ThinLaunch:
    """The packed parameters of one recorded launch and the kernel's driver handle."""

    def __init__(self, function: Any, packed: Packed, patches: list[tuple[int, int, int]], dims: tuple,
                 shared: int, owner: Any = None) -> None:
        self.function, self.packed, self.dims, self.shared = function, packed, dims, int(shared)
        # what keeps the kernel's module loaded: a graph holding this launch is destroyed before it
        self.owner = owner
        # (ctypes view of a data-pointer slot, operand slot, byte offset), made once
        self.patches = [(packed.slot(index), slot, offset) for index, slot, offset in patches]
        self.address = packed.address
        self.lock = threading.Lock()  # the patched values are shared: one launch at a time

    @classmethod
    def build(cls, rec: Any, args: Sequence[Any]) -> "_ThinLaunch | None":
        """From the launch just made with ``args`` (so the kernel is compiled and loaded); None when
        this kernel cannot take the thin path (debug or cooperative kernel, host arrays, unsupported
        or mismatching parameters)."""
        target = _compiled_target(rec.dispatcher, args)
        if target is None:
            return None
        handle, argtypes, owner = target
        flat = flatten(argtypes, args)
        if flat is None:
            return None
        params, starts = flat
        problem = _check_against_numba(argtypes, args, params) or _check_against_driver(handle, params)
        if problem:
            log.warning("thin launch off for %s: %s", getattr(rec.dispatcher, "__name__", "?"), problem)
            return None
        patches = [(starts[i] + 4, slot, offset) for i, slot, offset, *_ in rec.views]  # data pointer
        return cls(driver_function(handle), Packed(params), patches, tuple(rec.grid) + tuple(rec.block),
                   rec.shared, owner)

    def launch(self, bases: Sequence[int], stream: Any) -> None:
        with self.lock:
            self.issue(bases, stream)

    def issue(self, bases: Sequence[int], stream: Any) -> None:
        """Patch the data pointers for ``bases`` and launch; the caller holds ``self.lock``."""
        for view, slot, offset in self.patches:
            view.value = bases[slot] + offset
        cu_launch(self.function, self.dims, self.shared, stream, self.address)


def _compiled_target(dispatcher: Any, args: Sequence[Any]) -> tuple[Any, tuple, Any] | None:
    """(launch handle, Numba argument types, the object owning the loaded module) of the kernel ``args``
    launch: from the disk cache when it is on, else Numba's compiled overload; None for debug or
    cooperative kernels."""
    if kernel_cache.enabled():
        found = kernel_cache.compiled(dispatcher, tuple(args))
        return None if found is None else (found.handle, found.argtypes, found)
    try:
        overload = dispatcher.overloads[tuple(dispatcher.typeof_pyval(a) for a in args)]
    except Exception:
        return None
    if getattr(overload, "debug", False) or getattr(overload, "cooperative", False):
        return None
    cufunc = overload._codelibrary.get_cufunc()
    return cufunc.handle, tuple(overload.argument_types), cufunc


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, ctypes._SimpleCData) else value


def _check_against_numba(argtypes: Sequence[Any], args: Sequence[Any], params: list) -> str:
    """'' when Numba's own ``_prepare_args`` gives the same parameter values (GPU only), else why not."""
    packer = getattr(getattr(runtime.cuda, "dispatcher", None), "_Kernel", None)
    if packer is None:
        return ""

    class _Stub:
        extensions = ()

    kernelargs: list[Any] = []
    retr: list[Any] = []
    for ty, value in zip(argtypes, args):
        packer._prepare_args(_Stub(), ty, value, 0, retr, kernelargs)
    if retr:
        return "an argument needs a host copy"
    if len(kernelargs) != len(params):
        return f"{len(params)} parameters packed, Numba packs {len(kernelargs)}"
    for i, (theirs, (ctype, ours)) in enumerate(zip(kernelargs, params)):
        theirs = _plain(theirs)
        if isinstance(theirs, (bool, np.bool_)) or ctype is ctypes.c_bool:
            same = bool(theirs) == bool(ours)
        else:
            same = theirs == ctype(ours).value
        if not same:
            return f"parameter {i}: packed {ours!r}, Numba packs {theirs!r}"
    return ""


def _param_sizes(handle: Any) -> list[int] | None:
    """Byte size of each kernel parameter as the driver reports it; None when it cannot tell."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    query = driver.cuKernelGetParamInfo if isinstance(handle, driver.CUkernel) else \
        getattr(driver, "cuFuncGetParamInfo", None)
    if query is None:
        return None
    function = handle if isinstance(handle, driver.CUkernel) else driver_function(handle)
    sizes = []
    while len(sizes) < 4096:
        err, _offset, size = query(function, len(sizes))
        if err != driver.CUresult.CUDA_SUCCESS:
            break
        sizes.append(int(size))
    return sizes or None


def _check_against_driver(handle: Any, params: list) -> str:
    """'' when the kernel's parameter count and sizes match the packing (or the driver cannot tell)."""
    try:
        sizes = _param_sizes(handle)
    except Exception:  # noqa: BLE001  (older drivers: no parameter info)
        return ""
    if sizes is None:
        return ""
    if len(sizes) != len(params):
        return f"kernel has {len(sizes)} parameters, {len(params)} packed"
    for i, (size, (ctype, _)) in enumerate(zip(sizes, params)):
        if size != ctypes.sizeof(ctype):
            return f"parameter {i} is {size} bytes, packed as {ctype.__name__}"
    return ""


def pack_args(argtypes: Sequence[Any], args: Sequence[Any]) -> Packed | None:
    """The parameters of one launch packed (see :class:`Packed`); None when not supported."""
    flat = flatten(argtypes, args)
    return None if flat is None else Packed(flat[0])


def _launch_cached(dispatcher: Any, grid: Any, block: Any, stream: Any, shared: int,
                   args: Sequence[Any]) -> bool:
    """Launch through the disk-cached kernel; False when it cannot (the caller launches via Numba)."""
    found = kernel_cache.compiled(dispatcher, tuple(args))
    packed = None if found is None else pack_args(found.argtypes, args)
    if packed is None:
        return False
    cu_launch(driver_function(found.handle), dims3(grid) + dims3(block), shared, stream_handle(stream),
              packed.address)
    return True
