"""A recorded launch plan and its replay: the launches a candidate made for one call signature, replayed on
new operands (convlab.call.plan records, keeps and looks plans up).

    Plan(candidate, launches, out_shape, dtype, signatures, channels_last_out, check)
    plan.run(recs, stream)   the output (``out`` or a new one): thin launches, or one CUDA graph once
                             repeated at the same addresses (convlab.call.graphs); None when ``out``
                             overlaps an input (the caller takes the full path)
    host_state()             what a plan's candidate depends on besides the call
    held_by(launches)        device bytes the recorded launches keep alive
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

import numpy as np

from convlab.call import graphs as _graphs
from convlab.call import operands as _operands
from convlab.plugin import registry
from convlab.runtime import launch, settings
from convlab.runtime.thin import stream_handle as _stream_handle


class Plan:
    """The recorded launches of one call signature and the candidate that made them.

    Everything a replay needs beyond the operands is fixed here once: the output's shape, dtype and
    allocator (torch, on the first operand's device, or the output pool), the device whose current
    stream a torch call runs on, and the thin launches (see :meth:`run`)."""

    def __init__(self, candidate: Any, launches: Sequence[launch.Launch], out_shape: tuple, dtype: str,
                 signatures: Sequence[Any] = (), channels_last_out: bool = False,
                 check: Callable[[], bool] | None = None) -> None:
        self.candidate, self.out_shape, self.dtype = candidate, out_shape, dtype
        self.check = check  # what else the plan depends on (an "auto" decision): True while valid
        self.counts: dict | None = None  # the table's counters, once the plan is stored
        self.channels_last_out = channels_last_out  # a new output is allocated channels-last
        self.launches = list(launches)
        self.state = host_state()
        self.generation = settings.generation()
        self.held_bytes = held_by(self.launches)
        self.thin = all(rec.thin is not None for rec in self.launches)
        self.thins = [rec.thin for rec in self.launches] if self.thin else []
        self.graphs = _graphs.Graphs(self.thins)  # used on a GPU only: thin launches are GPU-only
        self.extents = extents_of(signatures)  # bytes of each operand, from the key
        first = signatures[0] if signatures else None
        self.torch_device = first[4] if first and first[0] == "torch" else None  # None: not torch
        self.numba_out = first is not None and first is not False and first[0] != "torch"
        self._empty = self._raw_stream = None
        if self.torch_device is not None:
            torch = sys.modules["torch"]
            self._empty = torch.empty
            self._out_args = (self.out_shape,)
            self._out_kwargs = {"dtype": getattr(torch, dtype), "device": torch.device("cuda", self.torch_device)}
            if channels_last_out:
                self._out_kwargs["memory_format"] = (torch.channels_last_3d if len(self.out_shape) == 5
                                                     else torch.channels_last)
            self._raw_stream = _operands.raw_stream_getter()

    def _writes_an_input(self, bases: list[int], recs: Sequence[Any]) -> bool:
        """True when ``out`` (at ``bases[3]``) overlaps an input's memory (the inputs may overlap each
        other: they are only read). Extents from the key when it has them."""
        extents = self.extents or [rec.nbytes for rec in recs]
        lo, size = bases[3], extents[3]
        return size > 0 and any(n > 0 and p < lo + size and lo < p + n
                                for p, n, rec in zip(bases[:3], extents[:3], recs) if rec[2] is not None)

    def replay(self, operands: Sequence[Any], bases: Sequence[int], stream: Any) -> None:
        """Re-issue every launch with operand slot ``s`` at ``bases[s]`` (``operands[s]`` is the
        device array; only read when a launch has no thin path)."""
        for rec in self.launches:
            rec.replay(operands, bases, stream)

    def run(self, recs: Sequence[Any], stream: Any, extra: Sequence[Any] = ()) -> Any:
        """One planned call on the operand records ``recs`` = (a, b, bias, out) (convlab.call.operands:
        absent ones :data:`~convlab.call.operands.ABSENT`): the output (``out`` or a new one), replayed
        on the call's stream. ``extra``: the device arrays of the operand slots after ``out`` (an
        epilogue's residual, scale and shift; None where absent), only read. None when this call cannot
        replay (operands that overlap ``out``): the caller takes the full path."""
        ra, rb, rbias, rout = recs
        out = rout[2]
        torch_call = self._empty is not None
        if stream is None and torch_call and self._raw_stream is not None:
            handle, st = self._raw_stream(self.torch_device), None  # rule 2 for a torch first operand
        else:
            st = _operands.resolve_stream(stream, recs)
            handle = _stream_handle(st)
        if out is not None:
            result, at = out, rout[1]
        else:
            if torch_call:
                result = self._empty(*self._out_args, **self._out_kwargs)
            else:
                result = _operands.empty_like_kind(ra, self.out_shape, self.dtype, st,
                                                   channels_last=self.channels_last_out)
            at = _operands.data_pointer(result)
        bases = [ra[1], rb[1], rbias[1], at, *(0 if v is None else _operands.data_pointer(v) for v in extra)]
        if out is not None and self._writes_an_input(bases, recs):
            return None
        if self.thin:
            if not self.graphs.run(bases, handle):  # a graph of the launches (convlab.call.graphs), else each
                self.replay(None, bases, handle)
        else:
            values = (ra[2], rb[2], rbias[2], result, *extra)
            devs = [None if v is None else _operands.as_device(v) for v in values]
            if st is None:
                st = _operands.resolve_stream(None, recs)
            self.replay(devs, bases, st)
        if self.counts is not None:
            self.counts["replayed"] += 1
        return result


def extents_of(signatures: Sequence[Any]) -> list[int] | None:
    """Bytes (elements x itemsize, as :func:`convlab.call.operands.pointer` counts) of each operand of a
    call key's signatures (0 for an absent one); None when a signature does not say."""
    out = []
    for sig in signatures:
        if sig is None:
            out.append(0)
        else:
            size = _itemsize(sig[3]) if sig and sig[0] in ("torch", "numba") else None
            if not size:
                return None
            out.append(int(np.prod(sig[1], dtype=np.int64)) * size)
    return out if len(out) == 4 else None


def _itemsize(dtype: Any) -> int | None:
    """Bytes per element of a torch dtype or a numpy dtype (or its string); None when unknown."""
    size = getattr(dtype, "itemsize", None)
    if isinstance(size, int):
        return size
    try:
        return np.dtype(dtype).itemsize
    except TypeError:
        return None


def held_by(launches: Sequence[launch.Launch]) -> int:
    """Device bytes the recorded launches keep alive, each buffer once: the sub-batches of an
    explicit-GEMM call all launch on one column buffer (counting it per launch made a plan of a large
    layer look too big to keep, so every call recorded again on a freshly allocated buffer)."""
    total, reach = 0, -1  # the union of the [ptr, ptr + bytes) ranges: views of one buffer overlap
    for lo, nbytes in sorted((ptr, n) for rec in launches for ptr, n in rec.owned):
        hi = lo + nbytes
        if hi > reach:
            total += hi - max(lo, reach)
            reach = hi
    return total


def host_state() -> tuple:
    """What a plan's candidate depends on besides the call: the registered plugins, the autotuner's key
    policy and deterministic flag, the float32 precision (TF32 plugins
    decline float32 under "highest") and the workspace-limit setting. Read only when
    :func:`convlab.runtime.settings.generation` moved since the plan was last checked."""
    return (registry.state(), settings.get_key_policy(), settings.get_deterministic(),
            settings.get_float32_precision(), settings.get_workspace_limit())
