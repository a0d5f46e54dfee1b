"""The epilogue arguments of the forward and transpose ops (``activation=``, ``residual=``,
``residual_at=``, ``scale=``, ``shift=``; convlab.epilogue): their checks, before any launch, and the
epilogue pass (convlab.kernels.epilogue) on the op's result, after whichever plugin computed it.

Operand kinds follow the op's: a host call (numpy, CPU tensors) takes host residual / scale / shift
and the pass runs on a device copy of the result, written back into it; a device call takes a device
residual (C-contiguous or channels-last, its own) and the pass runs in place on the result. Scale and
shift may be host or device arrays, or sequences of floats, of shape (K,) for the result's K channels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from convlab import runtime
from convlab.call import operands
from convlab.dtypes import dtype_name
from convlab.epilogue import Epilogue, describe
from convlab.kernels.data import layouts
from convlab.kernels.epilogue import apply_epilogue, compute_dtype
from convlab.ops.arguments import array_spec, check_out_aliasing
from convlab.problem import Problem
from convlab.runtime import launch


@dataclass(frozen=True)
class EpilogueCall:
    """A checked epilogue with its operands: ``scale`` / ``shift`` host arrays of the compute dtype."""

    epilogue: Epilogue
    dtype: str
    residual: Any
    scale: np.ndarray | None
    shift: np.ndarray | None


def _is_host(obj: Any) -> bool:
    return isinstance(obj, np.ndarray) or operands.is_host_tensor(obj)


def _channel_vector(value: Any, name: str, channels: int, dtype: str) -> np.ndarray | None:
    """``scale`` / ``shift`` as a host array (K,) of the pass's compute dtype."""
    if value is None:
        return None
    if operands.is_torch(value):
        value = operands.host_view(value.cpu()) if value.is_cuda else operands.host_view(value)
    elif runtime.is_device_array(value) or runtime.is_cuda_array_like(value):
        value = runtime.to_host(runtime.as_device_array(value))
    array = np.asarray(value)
    if dtype_name(array.dtype) is None:
        raise TypeError(f"{name} must hold float16, bfloat16, float32 or float64 values, got dtype {array.dtype}")
    if array.shape != (channels,):
        raise ValueError(f"{name} must have shape ({channels},) (one value per output channel), "
                         f"got {array.shape}")
    return np.ascontiguousarray(array.astype(np.float64).astype(compute_dtype(dtype)))


def check(prob: Problem, first: Any, out: Any, activation: Any, residual: Any, residual_at: Any,
          scale: Any, shift: Any) -> EpilogueCall | None:
    """The checked epilogue of an op's arguments (None when none is asked for). ``prob``: the op's
    problem (its output is ``prob.operand_shapes[2]``), ``first``: its first input (host or device),
    ``out``: its ``out=``. ValueError / TypeError naming the argument."""
    epi = describe(activation, residual is not None, residual_at, scale is not None, shift is not None)
    if epi.is_identity:
        return None
    shape, dtype = prob.operand_shapes[2], prob.dtype
    if residual is not None:
        rshape, rdtype = array_spec(residual, "residual", len(shape))
        if rshape != shape or str(rdtype) != dtype:
            raise ValueError(f"residual must have the output's shape {shape} and dtype {dtype}, "
                             f"got {rshape} {rdtype}")
        if _is_host(residual) != _is_host(first):
            where = "host (numpy or a CPU tensor)" if _is_host(first) else "device"
            raise ValueError(f"residual must be a {where} array like the op's inputs, "
                             f"got {type(residual).__name__}")
        check_out_aliasing(out, {"residual": residual})
    return EpilogueCall(epi, dtype, residual, _channel_vector(scale, "scale", shape[1], dtype),
                        _channel_vector(shift, "shift", shape[1], dtype))


def _channels_last(dev: Any, name: str) -> bool:
    """Whether a dense device array (N, C, *spatial) is channels-last (False: C-contiguous);
    ValueError naming ``name`` for any other strides. Strides of size-1 dimensions are ignored."""
    shape = tuple(int(s) for s in dev.shape)
    strides = tuple(s // dev.dtype.itemsize for s in runtime.strides_of(dev))
    c_order = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape)))

    def matches(want: tuple) -> bool:
        return all(s == w for d, s, w in zip(shape, strides, want) if d > 1)
    if matches(c_order):
        return False
    if matches(layouts.channels_last_strides(shape)):
        return True
    raise ValueError(f"{name} must be C-contiguous or channels-last, got strides {strides}")


def apply(result: Any, call: EpilogueCall, stream: Any = None) -> Any:
    """Apply ``call``'s epilogue to the op's ``result`` (in place) and return it."""
    host = _is_host(result)
    scale, shift = (None if v is None else runtime.to_device(v) for v in (call.scale, call.shift))
    residual = call.residual
    if host:
        array = result if isinstance(result, np.ndarray) else operands.host_view(result, writable=True)
        y, y_cl = runtime.to_device(np.ascontiguousarray(array)), False
        r = None if residual is None else runtime.to_device(np.ascontiguousarray(
            residual if isinstance(residual, np.ndarray) else operands.host_view(residual)))
        r_cl = False
    else:
        y = operands.as_device(result)
        y_cl = _channels_last(y, "the result")
        r = None if residual is None else operands.as_device(residual)
        r_cl = r is not None and _channels_last(r, "residual")
    with launch.using_stream(operands.resolve_stream(stream, (result, residual))):
        apply_epilogue(y, call.epilogue, call.dtype, y_channels_last=y_cl, residual=r,
                       residual_channels_last=r_cl, scale=scale, shift=shift)
    if host:
        array[...] = runtime.to_host(y)
    return result


def run_with(run: Callable[[], Any], build: Callable[[], Problem], first: Any, out: Any, activation: Any,
             residual: Any, residual_at: Any, scale: Any, shift: Any, stream: Any) -> Any:
    """``run()`` (the op without an epilogue), then the checked epilogue (checked first) on its result."""
    asked = any(v is not None for v in (activation, residual, scale, shift)) or residual_at != "before"
    call = check(build(), first, out, activation, residual, residual_at, scale, shift) if asked else None
    result = run()
    return result if call is None else apply(result, call, stream)
