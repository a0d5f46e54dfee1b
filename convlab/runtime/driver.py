"""``cuLaunchKernel`` for the thin launch path (:mod:`convlab.runtime.thin`): cuda.bindings' driver entry point
(what numba-cuda uses), given a recorded launch's function handle, grid, block, shared-memory size and
packed parameter array (:class:`convlab.runtime.thin.Packed`), with the stream's CUstream wrapper made once per
handle.

The launch goes through cuda.bindings, not libcuda's ``cuLaunchKernel`` through ctypes: with every ctypes
argument made in advance, a thin replay of an empty kernel took 6.4-8.5 us, no less than the bindings'
6.6-9.1 us, and a packed launch through the bindings alone takes 5.0 us (``benchmarks/overhead_bench.py``;
results/overhead/h200/ab4faa3 for ctypes and the bare launch, results/overhead/h200/943a35c and
results/overhead/h200/4ad9ded for the bindings' replays; results/FINDINGS.md). The call runs in the
calling thread's current context (Numba's primary context, made current by Numba before any kernel is
recorded) and raises ``RuntimeError`` naming the ``CUresult`` when the launch fails.
"""
from __future__ import annotations

import ctypes
from typing import Any

_bindings: list = []  # [cuLaunchKernel, CUDA_SUCCESS, CUstream] of cuda.bindings, looked up once
_cu_streams: dict[int, Any] = {}  # int handle -> its CUstream wrapper


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


def _fail(err: Any, what: str = "cuLaunchKernel") -> None:
    """Raise RuntimeError naming the CUresult ``err`` of the driver call ``what``."""
    try:
        from cuda.bindings import driver

        name = driver.CUresult(int(err)).name
    except Exception:  # noqa: BLE001  (the number alone still says it)
        name = str(err)
    raise RuntimeError(f"{what} failed: {name}")


def check(result: Any, what: str) -> Any:
    """The value of a cuda.bindings call's ``(err, *values)`` (None, one value, or a list); a
    RuntimeError naming the CUresult when ``err`` is not CUDA_SUCCESS."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if not _bindings:
        _load()
    if err != _bindings[1]:
        _fail(err, what)
    return values[0] if len(values) == 1 else (values or None)


def cu_stream(stream: Any) -> Any:
    """The cuda.bindings CUstream of ``stream`` (an int handle or a Numba stream), made once per handle."""
    found = _cu_streams.get(stream) if isinstance(stream, int) else None
    if found is None:
        handle = stream if isinstance(stream, int) else stream_handle(stream)
        found = _cu_streams.get(handle)
        if found is None:
            if not _bindings:
                _load()
            found = _cu_streams[handle] = _bindings[2](handle)
    return found


def _load() -> None:
    from cuda.bindings import driver

    _bindings.extend((driver.cuLaunchKernel, driver.CUresult.CUDA_SUCCESS, driver.CUstream))


def cu_launch(function: Any, dims: tuple, shared: int, stream: Any, params_address: int) -> None:
    """``cuLaunchKernel(function, *dims, shared, stream, params, NULL)``. ``dims``: grid x, y, z then
    block x, y, z; ``stream``: an int handle or a Numba stream; ``params_address``: the ``void**`` of
    the packed parameters."""
    if not _bindings:
        _load()
    launch_kernel, success, _ = _bindings
    err, = launch_kernel(function, *dims, shared, cu_stream(stream), params_address, 0)
    if err != success:
        _fail(err)
