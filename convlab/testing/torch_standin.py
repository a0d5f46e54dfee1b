"""Stand-ins for torch CUDA tensors, to run the planned call path without torch or a GPU.

convlab's fast path reads a torch tensor only through a few attributes (convlab.call.operands: ``shape``,
``stride()``, ``dtype``, ``get_device()``, ``data_ptr()``, ``is_cuda``, ``device``, ``numel()``,
``element_size()``, ``detach()``) and the torch module only through ``torch.empty``, its dtypes,
``torch.device`` and ``torch._C._cuda_getCurrentRawStream``. :class:`Tensor` and :func:`fake_torch`
provide exactly these (a tensor's memory is a host numpy array: pointers are real, nothing is
launched on it). :func:`adopt_plan` copies a plan recorded on Numba device arrays to the key the
same call makes with stand-ins, so that a call with stand-ins replays it.

Used by ``benchmarks/host_path_bench.py`` (host cost per call) and ``tests/core/test_call_path.py``.
"""
from __future__ import annotations

import types
from typing import Any, Sequence

import numpy as np

from convlab.call import operands, plan


class _Device:
    def __init__(self, index: int) -> None:
        self.index, self.type = index, "cuda"


class Tensor:
    """The attributes of a torch CUDA tensor that convlab's fast path reads."""

    def __init__(self, shape: Sequence[int], dtype: str = "float32", requires_grad: bool = False) -> None:
        self._host = np.zeros(shape, dtype)
        self.shape = tuple(shape)
        self.dtype = dtype
        self.is_cuda = True
        self.requires_grad = requires_grad
        self.device = _Device(0)
        self._strides = tuple(s // self._host.itemsize for s in self._host.strides)
        self._ptr = self._host.__array_interface__["data"][0]
        self.detached = 0  # how many times detach() was called on this tensor

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def get_device(self) -> int:
        return 0

    def data_ptr(self) -> int:
        return self._ptr

    def numel(self) -> int:
        return self._host.size

    def element_size(self) -> int:
        return self._host.itemsize

    def detach(self) -> "Tensor":
        self.detached += 1
        return self


Tensor.__module__ = "torch"
_OUT: dict[tuple, Tensor] = {}


def _empty(shape: tuple, dtype: Any = None, device: Any = None) -> Tensor:
    """torch.empty's stand-in: one tensor per shape (real allocation cost is torch's)."""
    found = _OUT.get((shape, dtype))
    if found is None:
        found = _OUT[(shape, dtype)] = Tensor(shape, dtype)
    return found


def fake_torch() -> types.ModuleType:
    """A module with what convlab reads from ``torch`` on the planned path."""
    torch = types.ModuleType("torch")
    torch.float32, torch.float64 = "float32", "float64"
    torch.device = lambda kind, index: _Device(index)
    torch.empty = _empty
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: 0)
    torch.cuda = types.SimpleNamespace(current_stream=lambda d=None: types.SimpleNamespace(cuda_stream=0))
    return torch


def adopt_plan(key: tuple, tensors: Sequence[Any]) -> plan.Plan:
    """Store a copy of the plan under ``key`` (recorded on Numba arrays) under the key of the same call
    on ``tensors`` (a, b[, bias[, out]]; stand-ins), marked thin; returns the copy."""
    recorded = plan.lookup(key)  # the current device's plan table (convlab.call.plan)
    if recorded is None:
        raise KeyError(f"no valid plan under {key!r}")
    slots = (list(tensors) + [None, None])[:4]
    torch_key = (key[0], tuple(operands.signature(v) for v in slots)) + key[2:]
    copy = plan.Plan(recorded.candidate, recorded.launches, recorded.out_shape, recorded.dtype,
                     torch_key[1], recorded.channels_last_out, recorded.check)
    copy.thin = True
    plan.store(torch_key, copy)
    return copy
