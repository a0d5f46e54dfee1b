"""The public ops. Each validates its arguments (before any launch), builds a canonical
:class:`~convlab.problem.Problem`, picks a plugin through :mod:`convlab.ops.strategy` and runs it.

Arrays: numpy in -> numpy out (copied to the device and back); a PyTorch CPU tensor in -> a CPU tensor out
(through numpy, like numpy); a Numba device array in -> device array out; a PyTorch CUDA tensor in -> a
tensor from torch's allocator out; any ``__cuda_array_interface__``
object (CuPy) is used in place, no copy. Calls with device operands replay a launch plan after the
first call of their signature (convlab.call.plan); streams follow convlab.call.operands' rules. 4-D device
operands may be C-contiguous or channels-last (convlab.kernels.data.layouts: a channels-last first input gives a
channels-last output; such calls are planned too).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from convlab.call import operands, plan
from convlab.call.operands import HOST_TENSOR, NUMPY
from convlab.ops import epilogue
from convlab.ops.epilogue import PendingEpilogue
from convlab.ops.arguments import (check_fits, dgrad_problem, forward_problem, problem_for, transpose_problem,
                                   wgrad_problem)
from convlab.ops.full_path import execute
from convlab.problem import Problem
from convlab.runtime import launch
from convlab.runtime.settings import check_workspace_limit


def _call(op: str, build: Any, inputs: dict[str, Any], bias: Any, out: Any, options: tuple,
          algorithm: Any, workspace_limit: Any, stream: Any, epilogue: Any = None) -> Any:
    """Replay the launch plan of this call's signature (convlab.call.plan), else check, run and record
    (convlab.ops.full_path). Each operand is adapted once, here (convlab.call.operands.adapt), and its
    record handed down. A call with an ``epilogue`` (convlab.ops.epilogue.DeviceEpilogue) is planned
    under a key that adds the epilogue's, its residual, scale and shift read at each replay."""
    a, b = inputs.values()
    adapt = operands.adapt
    recs = (adapt(a), adapt(b), adapt(bias), adapt(out))
    signatures = (recs[0][0], recs[1][0], recs[2][0], recs[3][0])  # False: a host operand: no plan
    if False in signatures and HOST_TENSOR in (recs[0][3], recs[1][3], recs[2][3], recs[3][3]):
        return _call_host_tensors(op, build, tuple(inputs), recs, algorithm, workspace_limit, stream, epilogue)
    key = plan.call_key(op, signatures, options, algorithm, workspace_limit, epilogue)
    if key is not None:
        result = replay(key, recs, stream, () if epilogue is None else epilogue.slots)
        if result is not None:
            return result
    prob = build()
    if isinstance(epilogue, PendingEpilogue):  # a plan miss: the epilogue's checks now
        epilogue = epilogue.checked(prob, a)
    check_fits(op, prob)  # before anything is allocated
    return execute(prob, tuple(inputs), recs, algorithm, workspace_limit, stream, key, epilogue)


def replay(key: tuple, recs: tuple, stream: Any, extra: tuple = ()) -> Any:
    """The output of the plan stored under ``key`` (convlab.call.plan.call_key) replayed on the operand
    records ``recs`` = (a, b, bias, out) and the epilogue's operands ``extra``; None when no plan serves
    the call (the caller runs the full path). A thin launch that fails turns the thin path off for the
    device and drops its plans (the full path then recomputes the whole result)."""
    found = plan.lookup(key)
    if found is None:
        return None
    try:
        return found.run(recs, stream, extra)
    except Exception as exc:
        if not found.thin:
            raise
        launch.disable_thin(exc)
        plan.clear()
        return None


def _call_host_tensors(op: str, build: Any, names: tuple[str, str], recs: tuple, algorithm: Any,
                       workspace_limit: Any, stream: Any, epilogue: Any = None) -> Any:
    """A call with CPU torch tensors: run it on numpy views of them (host operands, copied to the
    device and back; convlab.call.operands.host_record) and return a CPU tensor (or ``out``, written in
    place)."""
    labels = (*names, "bias", "out")
    device = [name for name, rec in zip(labels, recs) if rec[2] is not None and rec[3] not in (NUMPY, HOST_TENSOR)]
    if device:
        cpu = next(name for name, rec in zip(labels, recs) if rec[3] == HOST_TENSOR)
        raise ValueError(f"{cpu} is a CPU tensor but {device[0]} is a device array; pass host operands "
                         f"(CPU tensors, numpy) or device operands, not both")
    host = tuple(operands.host_record(rec, writable=i == 3) for i, rec in enumerate(recs))
    prob = build()
    check_fits(op, prob)
    result = execute(prob, names, host, algorithm, workspace_limit, stream, None, epilogue)
    out = recs[3][2]
    return out if out is not None else operands.from_host(result)


def _with_epilogue(op: str, make: Callable[..., Problem], x: Any, weight: Any, bias: Any, options: tuple,
                   launch: tuple, epilogue_args: tuple, run: Callable[..., Any] = _call, nd: int = 2) -> Any:
    """A forward or transpose op named ``op`` (any N): its problem ``make(x, weight, bias, *options, nd=nd)``
    (forward_problem, transpose_problem), run by ``run`` (:func:`_call`; conv_nd's for a lowered 1D op)
    with ``launch`` = (out, algorithm, workspace_limit, stream) and the epilogue of ``epilogue_args`` =
    (activation, residual, residual_at, scale, shift) (convlab.ops.epilogue.run_with)."""
    out, algorithm, workspace_limit, stream = launch

    def build() -> Problem:
        return make(x, weight, bias, *options, nd=nd)
    return epilogue.run_with(
        lambda ep: run(op, build, {"x": x, "weight": weight}, bias, out, options, algorithm, workspace_limit,
                       stream, ep),
        build, x, out, *epilogue_args)


def conv2d(x: Any, weight: Any, bias: Any = None, stride=1, padding=0, dilation=1, groups: int = 1, *,
           algorithm: Any = "auto", out: Any = None, workspace_limit: int | None = None,
           stream: Any = None, activation: Any = None, residual: Any = None, residual_at: str = "before",
           scale: Any = None, shift: Any = None) -> Any:
    """y (N, K, P, Q) = conv2d(x (N, C, H, W), weight (K, C/groups, R, S)) + bias (K,).

    ``stream``: where the kernels run (default: the operands' stream; see convlab.call.operands).
    ``activation``, ``residual`` (N, K, P, Q), ``residual_at``, ``scale`` (K,), ``shift`` (K,): an
    epilogue, act((y * scale + shift) + residual) (convlab.epilogue; convlab.ops.epilogue)."""
    return _with_epilogue("conv2d", forward_problem, x, weight, bias, (stride, padding, dilation, groups),
                          (out, algorithm, workspace_limit, stream), (activation, residual, residual_at, scale, shift))


def conv2d_backward_data(grad_out: Any, weight: Any, input_shape: Sequence[int], stride=1, padding=0,
                         dilation=1, groups: int = 1, *, algorithm: Any = "auto", out: Any = None,
                         workspace_limit: int | None = None, stream: Any = None) -> Any:
    """dx (input_shape) from grad_out (N, K, P, Q) and weight (K, C/groups, R, S)."""
    return _call("conv2d_backward_data",
                 lambda: dgrad_problem(grad_out, weight, input_shape, stride, padding, dilation, groups),
                 {"grad_out": grad_out, "weight": weight}, None, out,
                 (input_shape, stride, padding, dilation, groups), algorithm, workspace_limit, stream)


def conv2d_backward_weight(x: Any, grad_out: Any, weight_shape: Sequence[int], stride=1, padding=0,
                           dilation=1, groups: int = 1, *, algorithm: Any = "auto", out: Any = None,
                           workspace_limit: int | None = None, stream: Any = None) -> Any:
    """dw (weight_shape = (K, C/groups, R, S)) from x (N, C, H, W) and grad_out (N, K, P, Q)."""
    return _call("conv2d_backward_weight",
                 lambda: wgrad_problem(x, grad_out, weight_shape, stride, padding, dilation, groups),
                 {"x": x, "grad_out": grad_out}, None, out,
                 (weight_shape, stride, padding, dilation, groups), algorithm, workspace_limit, stream)


def conv_transpose2d(x: Any, weight: Any, bias: Any = None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1, *, algorithm: Any = "auto", out: Any = None,
                     workspace_limit: int | None = None, stream: Any = None, activation: Any = None,
                     residual: Any = None, residual_at: str = "before", scale: Any = None,
                     shift: Any = None) -> Any:
    """y (N, C_out, H_out, W_out) from x (N, C_in, H, W), weight (C_in, C_out/groups, R, S), bias (C_out,).

    Computed as the backward-data problem of the forward convolution that maps y's shape to x's. The
    epilogue arguments (scale, shift: (C_out,)) are conv2d's.
    """
    return _with_epilogue("conv_transpose2d", transpose_problem, x, weight, bias,
                          (stride, padding, output_padding, groups, dilation),
                          (out, algorithm, workspace_limit, stream), (activation, residual, residual_at, scale, shift))


def explain(*args: Any, op: str = "conv2d", algorithm: Any = "auto",
            workspace_limit: int | None = None, target: Any = None, **kwargs: Any):
    """For a call ``op(*args, **kwargs)`` (or a Problem as the only argument): each plugin, whether it
    applies (and why not), its workspace, and what ``algorithm`` picks. ``target``: a named target
    (``"sm_90"``) or a :class:`convlab.runtime.targets.Target` to explain for instead of this machine's (nothing
    is timed for another target). Returns an Explanation."""
    from convlab.ops.explain import explain_problem

    prob = args[0] if len(args) == 1 and isinstance(args[0], Problem) else problem_for(op, *args, **kwargs)
    return explain_problem(prob, algorithm=algorithm, workspace_limit=check_workspace_limit(workspace_limit),
                           target=target)
