"""``runtime.jit``: Numba's ``cuda.jit`` whose kernels launch through :mod:`convlab.runtime.launch`, and
``runtime.intrinsic`` for inline-PTX intrinsics.

    jit(fn) / jit(**options)(fn)   a :class:`Kernel` (device functions, ``device=True``, as Numba's)
    kernel[grid, block(, stream(, shared))](*args)   -> convlab.runtime.launch.launch: the ambient
                                   stream, plan recording, the thin path, the compile-only collector
    intrinsic(fn)                  ``cuda.extending.intrinsic`` (a GPU, compiling only); on the
                                   simulator, which has no ``cuda.extending``, a stand-in that raises
                                   when called, so that the inline-PTX modules import there too

On the simulator the GPU-only options (``max_registers``, ``lineinfo``, ``launch_bounds``, ``lto``,
``forceinline``, ``link``, and ``cache``) are dropped, as it rejects them.
"""
from __future__ import annotations

import types as pytypes
from typing import Any, Callable

from convlab.runtime import device
from convlab.runtime import launch as launching  # looked up at each launch (launch.launch is the one entry)


class Kernel:
    """A Numba kernel whose ``kernel[grid, block(, stream(, shared))](*args)`` goes through
    :func:`convlab.runtime.launch.launch`; every other attribute is the dispatcher's."""

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
        launching.launch(self.dispatcher, self.grid, self.block, args, stream=self.stream, shared=self.shared)


def _wrap(jitted: Any) -> Any:
    """``Kernel(jitted)``; for a decorator (``cuda.jit(max_registers=...)``), one that wraps."""
    if isinstance(jitted, pytypes.FunctionType):
        return lambda fn: _wrap(jitted(fn))
    return Kernel(jitted)


def _simulated_intrinsic(fn: Callable) -> Callable:
    """The simulator's form of an inline-PTX intrinsic: it cannot run there (kernels on the simulator
    call the Python stand-ins, convlab.kernels.arch.mma_sim and wgmma_sim); calling it says so."""

    def unavailable(*args: Any) -> Any:
        raise NotImplementedError(f"{fn.__module__}.{fn.__name__} is inline PTX, which the CUDA simulator "
                                  f"cannot run; kernels there call the simulator stand-ins")

    unavailable.__name__, unavailable.__qualname__, unavailable.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    return unavailable


def intrinsic(fn: Callable) -> Callable:
    """``cuda.extending.intrinsic(fn)``; on the simulator :func:`_simulated_intrinsic` (module docstring)."""
    if device.SIMULATOR:
        return _simulated_intrinsic(fn)
    return device.cuda.extending.intrinsic(fn)


def jit(*args: Any, **kwargs: Any) -> Callable:
    """``cuda.jit`` that drops GPU-only options on the simulator; kernels come back as :class:`Kernel`
    (device functions as Numba makes them)."""
    if device.SIMULATOR:  # the simulator rejects these keyword arguments
        for key in device.SIM_UNSUPPORTED_JIT_KWARGS:
            kwargs.pop(key, None)
        kwargs.pop("cache", None)
    if kwargs.get("device"):
        return device.cuda.jit(*args, **kwargs)
    return _wrap(device.cuda.jit(*args, **kwargs))
