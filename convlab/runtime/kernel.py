"""``runtime.jit``: Numba's ``cuda.jit`` whose kernels launch through :mod:`convlab.runtime.launch`.

    jit(fn) / jit(**options)(fn)   a :class:`Kernel` (device functions, ``device=True``, as Numba's)
    kernel[grid, block(, stream(, shared))](*args)   -> convlab.runtime.launch.launch: the ambient
                                   stream, plan recording, the thin path, the compile-only collector

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
