"""The compile-only runtime's stand-ins: device arrays with no device behind them, and launches that
are collected instead of run.

In the compile-only state (:mod:`convlab.runtime`: the simulator off and no GPU, or
``CONVLAB_RUNTIME=compile``) a plugin's ``run`` executes its host code unchanged: it allocates
:class:`OfflineArray` workspaces, uploads parameter tables into them, views and reshapes them, and
launches kernels. A launch appends a :class:`Request` (the dispatcher, its Numba argument types,
grid, block, dynamic shared memory) to the active :func:`collecting` list; nothing executes, so
outputs hold zeros. :mod:`convlab.compile` then compiles each requested kernel for its target.

An OfflineArray wraps a host numpy array allocated with ``np.zeros`` (calloc: pages that are never
written cost no memory), so slicing, ``view`` and ``reshape`` are numpy's, and it types like a Numba
device array (``_numba_type_``: C, F or A layout as ``DeviceNDArray`` decides).
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

_state = threading.local()


class OfflineArray:
    """A device-array stand-in over host memory (see the module docstring)."""

    __slots__ = ("_ary", "__weakref__")

    def __init__(self, ary: np.ndarray) -> None:
        self._ary = ary

    @classmethod
    def empty(cls, shape: tuple[int, ...], dtype: Any) -> "OfflineArray":
        return cls(np.zeros(tuple(int(s) for s in shape), dtype=np.dtype(dtype)))

    # ---- the DeviceNDArray surface plugins use -----------------------------------------------------
    shape = property(lambda self: self._ary.shape)
    strides = property(lambda self: self._ary.strides)
    dtype = property(lambda self: self._ary.dtype)
    size = property(lambda self: self._ary.size)
    ndim = property(lambda self: self._ary.ndim)
    nbytes = property(lambda self: self._ary.nbytes)
    flags = property(lambda self: self._ary.flags)

    @property
    def _numba_type_(self) -> Any:
        from numba.core import types as nbtypes
        from numba.np import numpy_support

        broadcast = 0 in self.strides and self.size != 0
        layout = ("C" if self._ary.flags["C_CONTIGUOUS"] and not broadcast else
                  "F" if self._ary.flags["F_CONTIGUOUS"] and not broadcast else "A")
        return nbtypes.Array(numpy_support.from_dtype(self.dtype), self.ndim, layout)

    @property
    def pointer(self) -> int:
        """A stand-in device address (the host buffer's: numpy aligns allocations to 16 bytes)."""
        return int(self._ary.__array_interface__["data"][0])

    def is_c_contiguous(self) -> bool:
        return bool(self._ary.flags["C_CONTIGUOUS"])

    def is_f_contiguous(self) -> bool:
        return bool(self._ary.flags["F_CONTIGUOUS"])

    def __getitem__(self, key: Any) -> "OfflineArray":
        return OfflineArray(self._ary[key])

    def __len__(self) -> int:
        return len(self._ary)

    def reshape(self, *shape: Any, order: str = "C") -> "OfflineArray":
        if not (self.is_c_contiguous() or self.is_f_contiguous()):
            raise NotImplementedError("operation requires copying")  # as DeviceNDArray.reshape
        return OfflineArray(self._ary.reshape(*shape, order=order))

    def ravel(self, order: str = "C") -> "OfflineArray":
        return self.reshape(-1, order=order)

    def view(self, dtype: Any) -> "OfflineArray":
        return OfflineArray(self._ary.view(np.dtype(dtype)))

    def transpose(self, *axes: Any) -> "OfflineArray":
        return OfflineArray(self._ary.transpose(*axes))

    @property
    def T(self) -> "OfflineArray":
        return self.transpose()

    def copy_to_device(self, host: Any, stream: Any = 0) -> None:
        if isinstance(host, OfflineArray):
            host = host._ary
        self._ary[...] = np.asarray(host).reshape(self._ary.shape)

    def copy_to_host(self, ary: Any = None, stream: Any = 0) -> np.ndarray:
        if ary is not None:
            ary[...] = self._ary
            return ary
        return self._ary.copy()

    def __repr__(self) -> str:
        return f"<OfflineArray {self.shape} {self.dtype}>"


class Event:
    """A CUDA event stand-in: records nothing, times nothing (``elapsed_time`` is -1.0, as the
    simulator's)."""

    def record(self, stream: Any = 0) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, other: "Event") -> float:
        return -1.0


@dataclass(frozen=True)
class LaunchShape:
    """How a kernel is launched: grid and block (x, y, z) and dynamic shared memory in bytes."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


@dataclass(frozen=True)
class Request(LaunchShape):
    """One launch asked for in the compile-only runtime: its shape, the dispatcher and its Numba
    argument types."""

    dispatcher: Any
    argtypes: tuple

    @property
    def name(self) -> str:
        func = getattr(self.dispatcher, "py_func", None)
        return getattr(func, "__name__", None) or getattr(self.dispatcher, "__name__", "kernel")


def _dims3(value: Any) -> tuple[int, int, int]:
    dims = (int(value),) if isinstance(value, (int, np.integer)) else tuple(int(v) for v in value)
    return (dims + (1, 1, 1))[:3]  # type: ignore[return-value]


def request(dispatcher: Any, grid: Any, block: Any, shared: int, args: Sequence[Any]) -> None:
    """Record one launch (the compile-only runtime's ``launch``); RuntimeError outside
    :func:`collecting`, since nothing can run."""
    sink = getattr(_state, "sink", None)
    if sink is None:
        raise RuntimeError("the compile-only runtime launches no kernel: use convlab.compile (or run on a "
                           "GPU, or on the simulator with NUMBA_ENABLE_CUDASIM=1)")
    argtypes = tuple(dispatcher.typeof_pyval(a) for a in args)
    sink.append(Request(_dims3(grid), _dims3(block), int(shared), dispatcher=dispatcher, argtypes=argtypes))


@contextlib.contextmanager
def collecting() -> Iterator[list[Request]]:
    """``with collecting() as requests:`` every launch of the block is appended to ``requests``."""
    previous = getattr(_state, "sink", None)
    sink: list[Request] = []
    _state.sink = sink
    try:
        yield sink
    finally:
        _state.sink = previous
