"""Checks of a call's output and memory, made by the ops before anything is allocated or launched:
``out=`` sharing memory with an input (read from the call's operand records:
convlab.call.operands), and whether the operands fit in the device's (or the target's) memory.
"""
from __future__ import annotations

import math

import numpy as np

from convlab import runtime
from convlab.call import operands
from convlab.call.operands import NUMBA, NUMPY, TORCH, Operand
from convlab.problem import Problem, op_ndim, short_op
from convlab.runtime import context


def _device_span(rec: Operand) -> tuple[int, int]:
    """(address, bytes) of a device operand's memory, from its record."""
    kind = rec[3]
    if kind == TORCH or kind == NUMBA:
        return rec[1], rec.nbytes
    return operands.pointer(runtime.as_device_array(rec[2]))


def check_out_aliasing(out: Operand, inputs: dict[str, Operand]) -> None:
    """ValueError when the operand record ``out`` shares memory with an input's (the same array, a view
    into the same buffer, overlapping device memory): the kernels read the inputs while they write
    ``out``."""
    if out[2] is None:
        return
    out_host = out[3] == NUMPY
    span = None if out_host else _device_span(out)
    for name, rec in inputs.items():
        if rec[2] is None:
            continue
        if out_host or rec[3] == NUMPY:
            overlap = out_host and rec[3] == NUMPY and np.shares_memory(out[2], rec[2])
        else:
            other = _device_span(rec)
            overlap = (span[1] > 0 and other[1] > 0 and span[0] < other[0] + other[1]
                       and other[0] < span[0] + span[1])
        if overlap:
            raise ValueError(f"out overlaps {name}: they share memory, and the kernels read {name} "
                             f"while they write out; pass an out= that shares no memory with the "
                             f"inputs (or out=None)")


#: Memory the simulator is assumed to have (it allocates host memory for every device array).
SIMULATOR_MEMORY = 2 * 2**30


def memory_budget() -> tuple[int, str]:
    """(bytes, description) of the memory an op's operands must fit in: the GPU's total memory (read
    once per device), or the target's (:data:`SIMULATOR_MEMORY` on the simulator)."""
    return context.current().cached("memory_budget", None, _memory_budget)


def _memory_budget() -> tuple[int, str]:
    if not runtime.HAS_DEVICE:
        target = runtime.target()
        return (SIMULATOR_MEMORY, "simulator's budget") if target.simulator else \
            (target.memory_bytes, f"{target.name}'s memory")
    return int(runtime.cuda.current_context().get_memory_info()[1]), "device's memory"


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def check_fits(op: str, prob: Problem) -> None:
    """ValueError naming the argument when the output of ``op`` (a public op name) on ``prob``, or all
    its operands together, cannot fit in :func:`memory_budget` (checked before any allocation)."""
    budget, where = memory_budget()
    shapes = prob.operand_shapes
    out_bytes = math.prod(shapes[2]) * prob.itemsize
    total = sum(math.prod(s) for s in shapes) * prob.itemsize
    if out_bytes <= budget and total <= budget:
        return
    nd = op_ndim(op)
    pd, st = prob.paddings[-nd:], prob.strides[-nd:]  # a conv1d's problem is its 2D embedding
    one = lambda v: v[0] if len(set(v)) == 1 else v  # noqa: E731
    culprit = {"forward": f"padding={one(pd)}" if max(pd) else f"x {prob.x_shape}",
               "dgrad": f"input_shape={prob.x_shape}",
               "wgrad": f"weight_shape={prob.w_shape}" if max(pd) == 0 else
               f"padding={one(pd)} with weight_shape={prob.w_shape}",
               "transpose": f"stride={one(st)} on x {prob.y_shape}"}[short_op(op)]
    dims = "x".join(map(str, shapes[2]))
    what = (f"the output {dims} ({_gib(out_bytes)})" if out_bytes > budget else
            f"the operands ({_gib(total)} with the output {dims})")
    raise ValueError(f"{op}: {culprit} makes {what}, more than the {where} ({_gib(budget)})")
