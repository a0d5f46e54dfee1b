"""``cuLaunchKernel`` for the thin launch path (:mod:`convlab.thin`): the driver's own entry point,
called through ctypes with arguments built once per recorded launch.

Two ways to reach the same driver function, chosen once per process:

- ``"ctypes"`` (default where the driver library loads): ``libcuda``'s ``cuLaunchKernel`` as a
  ctypes function. A recorded launch binds its function handle, grid, block, shared-memory size and
  parameter array to ctypes values once (:func:`bind`); a replay passes them with the stream's handle,
  so a launch is one foreign call with no argument conversion.
- ``"bindings"``: ``cuda.bindings.driver.cuLaunchKernel`` (what numba-cuda uses), whose wrapper checks
  and converts every argument on every call (about 5 us a launch on the H200 host,
  ``../shared/NUMBA_NOTES.md``).

``CONVLAB_CU_LAUNCH=bindings`` forces the second. Both call the driver in the calling thread's current
context (Numba's primary context, made current by Numba before any kernel is recorded), and both
raise ``RuntimeError`` naming the ``CUresult`` when the launch fails.
"""
from __future__ import annotations

import ctypes
import os
import sys
from typing import Any, Callable

#: "ctypes" or "bindings" (see the module docstring); read once, at import.
MODE = os.environ.get("CONVLAB_CU_LAUNCH", "ctypes").strip().lower()
_lib: list = []  # [the ctypes cuLaunchKernel, or None when the driver library did not load]
_bindings: list = []  # [cuLaunchKernel, CUDA_SUCCESS, CUstream] of cuda.bindings, looked up once
_cu_streams: dict[Any, Any] = {}  # int handle -> what the launcher takes for it


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
    if isinstance(handle, ctypes.c_void_p):  # numba-cuda's ctypes binding
        return int(handle.value or 0)
    return int(handle or 0)  # a cuda.bindings CUstream converts with int()


def _ctypes_launch() -> Any:
    """libcuda's ``cuLaunchKernel`` as a ctypes function (int result), or None."""
    if not _lib:
        fn = None
        if MODE == "ctypes":
            name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
            try:
                fn = ctypes.CDLL(name).cuLaunchKernel
                fn.restype = ctypes.c_int
            except (OSError, AttributeError):
                fn = None
        _lib.append(fn)
    return _lib[0]


def _fail(err: Any) -> None:
    try:
        from cuda.bindings import driver

        name = driver.CUresult(int(err)).name
    except Exception:  # noqa: BLE001  (the number alone still says it)
        name = str(err)
    raise RuntimeError(f"cuLaunchKernel failed: {name}")


def _ctypes_stream(stream: Any) -> ctypes.c_void_p:
    handle = stream if isinstance(stream, int) else stream_handle(stream)
    found = _cu_streams.get(("ctypes", handle))
    if found is None:
        found = _cu_streams[("ctypes", handle)] = ctypes.c_void_p(handle or None)
    return found


def bind(function: Any, dims: tuple, shared: int, params_address: int) -> Callable[[Any], None]:
    """``launch(stream)``: ``cuLaunchKernel(function, *dims, shared, stream, params, NULL)`` with
    everything but the stream (an int handle or a Numba stream) fixed now. ``dims``: grid x, y, z then
    block x, y, z; ``params_address``: the ``void**`` of the packed parameters."""
    fn = _ctypes_launch()
    if fn is None:
        return lambda stream: cu_launch(function, dims, shared, stream, params_address)
    head = (ctypes.c_void_p(int(function)), *(ctypes.c_uint(int(d)) for d in dims), ctypes.c_uint(int(shared)))
    params = ctypes.c_void_p(params_address)
    streams = _cu_streams

    def launch(stream: Any) -> None:
        cu_stream = streams.get(("ctypes", stream)) if isinstance(stream, int) else None
        err = fn(*head, cu_stream or _ctypes_stream(stream), params, None)
        if err:
            _fail(err)
    return launch


def cu_launch(function: Any, dims: tuple, shared: int, stream: Any, params_address: int) -> None:
    """One launch with nothing bound in advance (the disk-cache path): through cuda.bindings, whose
    wrapper takes the handle objects as they are. ``stream`` is an int handle or a Numba stream (its
    CUstream wrapper is cached by handle)."""
    if not _bindings:
        from cuda.bindings import driver

        _bindings.extend((driver.cuLaunchKernel, driver.CUresult.CUDA_SUCCESS, driver.CUstream))
    launch_kernel, success, cu_stream_type = _bindings
    handle = stream if isinstance(stream, int) else stream_handle(stream)
    cu_stream = _cu_streams.get(("bindings", handle))
    if cu_stream is None:
        cu_stream = _cu_streams[("bindings", handle)] = cu_stream_type(handle)
    err, = launch_kernel(function, *dims, shared, cu_stream, params_address, 0)
    if err != success:
        _fail(err)
