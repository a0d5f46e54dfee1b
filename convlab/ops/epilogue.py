"""The epilogue arguments of the forward and transpose ops (``activation=``, ``residual=``,
``residual_at=``, ``scale=``, ``shift=``; convlab.epilogue): their checks, before any launch, and how
the call path runs them with a candidate: fused into the plugin's store where the plugin says it fuses
the epilogue, else as a separate pass over the plugin's output (convlab.kernels.epilogue).

Operand kinds follow the op's: a host call (numpy, CPU tensors) takes a host residual (copied to the
device with the inputs); a device call takes a device residual (C-contiguous or channels-last, its own).
Scale and shift may be host or device arrays, or sequences of floats, of shape (K,) for the output's
K channels. A device call with an epilogue records and replays a launch plan like any other
(convlab.call.plan): its key adds :meth:`DeviceEpilogue.plan_key` (the epilogue and the residual's
signature) and the residual, scale and shift are operand slots of the plan (:meth:`DeviceEpilogue.spans`),
read anew at each replay. A device call with only an activation and a device residual (no scale, shift or
``out=``) looks its plan up before any check (:class:`PendingEpilogue`): like the op's own operands, the
residual's checks read only what the key holds, so a replay checks nothing again (a fused call's host
cost is an unfused call's), and a miss runs every check in the order of an unplanned call.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from convlab import runtime
from convlab.call import operands
from convlab.dtypes import dtype_name
from convlab.epilogue import Epilogue, describe
from convlab.kernels.data import layouts
from convlab.ops.arguments import array_spec, check_out_aliasing
from convlab.problem import Problem


@dataclass(frozen=True)
class EpilogueCall:
    """A checked epilogue with its operands: ``scale`` / ``shift`` (K,) of the compute dtype, host arrays,
    or device arrays where they were given on the device (:func:`_channel_vector`)."""

    epilogue: Epilogue
    dtype: str
    residual: Any
    scale: Any
    shift: Any


def _is_host(obj: Any) -> bool:
    return isinstance(obj, np.ndarray) or operands.is_host_tensor(obj)


def device_vector(value: Any, channels: int, want: np.dtype) -> Any:
    """A device vector (``channels``,) as a device array of dtype ``want`` without a copy to the host
    (which would wait for the device on every call): a torch tensor of another float dtype is cast on its
    device; None where the value is not on the device, or not a dense float vector (``channels``,) a cast
    alone makes right (the caller then converts it on the host, or raises naming the argument)."""
    if operands.is_torch(value):
        torch = sys.modules["torch"]
        if not value.is_cuda or not value.is_floating_point() or tuple(value.shape) != (channels,):
            return None
        value = value.detach().to(getattr(torch, want.name)).contiguous()
        return operands.as_device(value)
    if runtime.is_device_array(value) or runtime.is_cuda_array_like(value):
        dev = runtime.as_device_array(value)
        if np.dtype(dev.dtype) == want and tuple(dev.shape) == (channels,) and dev.is_c_contiguous():
            return dev
    return None


def _on_device(value: Any, channels: int, dtype: str) -> Any:
    """A device ``scale`` / ``shift`` as a device array (K,) of the compute dtype (:func:`device_vector`)."""
    from convlab.kernels.epilogue import compute_dtype  # the kernels import numba.cuda: on first use

    return device_vector(value, channels, compute_dtype(dtype))


def _channel_vector(value: Any, name: str, channels: int, dtype: str) -> Any:
    """``scale`` / ``shift`` as an array (K,) of the pass's compute dtype: on the device where it was
    given there (:func:`_on_device`), else on the host."""
    if value is None:
        return None
    on_device = _on_device(value, channels, dtype)
    if on_device is not None:
        return on_device
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
    from convlab.kernels.epilogue import compute_dtype  # the kernels import numba.cuda: on first use

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
        check_out_aliasing(operands.adapt(out), {"residual": operands.adapt(residual)})
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


class DeviceEpilogue:
    """A checked epilogue with its operands on the device, run with a candidate by the op's call path:
    fused into the plugin's store where ``plugin.fuses`` answers '' and the output as taken has a layout
    of ``plugin.fused_layouts``, the residual (if any) the output's (:meth:`fusable`), else the plugin's
    ``run`` and then the epilogue pass over its output."""

    def __init__(self, call: EpilogueCall):
        residual, r_cl = call.residual, False
        if residual is not None and _is_host(residual):
            residual = runtime.to_device(np.ascontiguousarray(
                residual if isinstance(residual, np.ndarray) else operands.host_view(residual)))
        elif residual is not None:
            residual = operands.as_device(residual)
            r_cl = _channels_last(residual, "residual")
        scale, shift = (runtime.to_device(v) if isinstance(v, np.ndarray) else v for v in (call.scale, call.shift))
        from convlab.kernels.epilogue import operands as epilogue_operands  # the kernels: on first use

        self.operands = epilogue_operands(call.epilogue, call.dtype, residual=residual,
                                          residual_channels_last=r_cl, scale=scale, shift=shift)
        self.fused: bool | None = None  # whether the last run fused it
        self.out_cl = False
        # the plan's operand slots 4-6 (convlab.call.plan): absent ones None (the placeholder is no slot)
        self.slots = (residual, scale, shift)
        self._key = key_of(call.epilogue, call.residual)

    def plan_key(self) -> tuple:
        """What a launch plan of the call depends on beyond the op's own key: the epilogue (its
        activation and which terms it has) and the residual's signature as given (kind, shape, strides,
        dtype, device, alignment: :func:`convlab.call.operands.signature`), which its checks read. Host
        calls are not planned (their key is None before this)."""
        return self._key

    def spans(self) -> list[tuple[int, int] | None]:
        """(device pointer, bytes) of the residual, scale and shift (None where absent): the plan's
        operand slots 4-6, after the op's a, b, bias and out."""
        return [None if v is None else operands.pointer(v) for v in self.slots]

    def run_fused(self, prob: Problem, candidate: Any, taken: tuple, limit: int) -> bool:
        """Run ``candidate`` fused with the epilogue on the device operands ``taken`` (a, b, bias, out)
        and return True where its plugin fuses it; False: nothing ran (the caller runs the candidate,
        then :meth:`after`). convlab.call.candidate.run_candidate calls both."""
        plugin, (a, b, bias, out) = candidate.plugin, taken
        self.out_cl = _channels_last(out, "out")
        self.fused = self.fusable(plugin.fused_layouts) and plugin.fuses(prob, self.operands.epilogue) == ""
        if self.fused:
            plugin.run_fused(prob, candidate.config, a, b, bias, out, self.operands, workspace_limit=limit)
        return self.fused

    def fusable(self, fused_layouts: frozenset[str]) -> bool:
        """Whether the output as taken (``out_cl``) is of a layout the plugin fuses into
        (``Algorithm.fused_layouts``) and the residual, if any, has that layout too."""
        residual_ok = self.operands.residual is None or self.operands.residual_channels_last == self.out_cl
        return ("nhwc" if self.out_cl else "nchw") in fused_layouts and residual_ok

    def after(self, out: Any) -> None:
        """The epilogue pass over the output the candidate wrote (not fused)."""
        from convlab.kernels.epilogue import run_pass

        run_pass(out, self.operands, self.out_cl)


def key_of(epi: Epilogue, residual: Any) -> tuple:
    """The plan key of an epilogue with ``residual`` as the call gave it (DeviceEpilogue.plan_key)."""
    return epi, operands.signature(residual)


class PendingEpilogue:
    """A device call's epilogue of an activation and a device residual (no scale, shift or ``out=``)
    before any check: what a plan lookup needs (:meth:`plan_key`, :attr:`slots`), and on a miss
    :meth:`checked`, the :class:`DeviceEpilogue` of every check (module docstring)."""

    def __init__(self, epi: Epilogue, residual: Any, args: tuple) -> None:
        self.epilogue, self.args = epi, args
        self.slots = (residual, None, None)
        self._key = key_of(epi, residual)

    def plan_key(self) -> tuple:
        return self._key

    def checked(self, prob: Problem, first: Any) -> DeviceEpilogue | None:
        """Every check of the epilogue against ``prob`` (ValueError / TypeError as an unplanned call)."""
        call = check(prob, first, None, *self.args)
        return None if call is None else DeviceEpilogue(call)


def _pending(first: Any, out: Any, activation: Any, residual: Any, residual_at: Any, scale: Any,
             shift: Any) -> PendingEpilogue | None:
    """The :class:`PendingEpilogue` of a call that may look its plan up first, else None (the full
    checks run first, in their order: a bad activation still raises after a bad input)."""
    if scale is not None or shift is not None or out is not None or _is_host(first) or _is_host(residual):
        return None
    try:
        epi = describe(activation, residual is not None, residual_at)
    except (TypeError, ValueError):
        return None
    return PendingEpilogue(epi, residual, (activation, residual, residual_at, None, None))


def run_with(run: Callable[[Any], Any], build: Callable[[], Problem], first: Any, out: Any,
             activation: Any, residual: Any, residual_at: Any, scale: Any, shift: Any) -> Any:
    """``run(epilogue)``: the op with its epilogue (None when none is asked for), checked first, or a
    :class:`PendingEpilogue` that the op checks on a plan miss (``PendingEpilogue.checked``)."""
    asked = any(v is not None for v in (activation, residual, scale, shift)) or residual_at != "before"
    if not asked:
        return run(None)
    pending = _pending(first, out, activation, residual, residual_at, scale, shift)
    if pending is not None:
        return run(None if pending.epilogue.is_identity else pending)
    call = check(build(), first, out, activation, residual, residual_at, scale, shift)
    return run(None if call is None else DeviceEpilogue(call))
