"""The public ops. Each validates its arguments (before any launch), builds a canonical
:class:`~convlab.problem.Problem`, picks a plugin through :mod:`convlab.strategy` and runs it.

Arrays: numpy in -> numpy out (copied to the device and back); a PyTorch CPU tensor in -> a CPU tensor out
(through numpy, like numpy); a Numba device array in -> device array out; a PyTorch CUDA tensor in -> a
tensor from torch's allocator out; any ``__cuda_array_interface__``
object (CuPy) is used in place, no copy. Calls with device operands replay a launch plan after the
first call of their signature (convlab.plan); streams follow convlab.operands' rules. 4-D device
operands may be C-contiguous or channels-last (convlab.layouts: a channels-last first input gives a
channels-last output; such calls are planned too).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Sequence

import numpy as np

from . import launch, layouts, measure, operands, plan, runtime
from .plugin import registry, strategy
from .arguments import (array_spec, check_fits, check_out_aliasing, dgrad_problem, forward_problem,
                        problem_for, transpose_problem, wgrad_problem)
from .plugin.registry import Candidate
from .problem import Problem
from .settings import check_workspace_limit

# ---- running --------------------------------------------------------------------------------------
def _to_device(obj: Any, name: str) -> Any:
    """A device array for an operand: numpy arrays are copied, CUDA arrays used in place (C-contiguous
    or channels-last: convlab.layouts)."""
    if isinstance(obj, np.ndarray):
        return runtime.to_device(obj)
    if operands.is_torch(obj) and obj.is_cuda or runtime.is_cuda_array_like(obj):
        dev = operands.as_device(obj)
        if not dev.is_c_contiguous() and not operands.is_channels_last(dev):
            raise ValueError(f"{name} is a non-contiguous device array; pass a C-contiguous (NCHW) or "
                             f"a channels-last (NCHW shape, NHWC strides) one")
        return dev
    raise TypeError(f"{name} must be a numpy array or a CUDA array, got {type(obj).__name__}")


def _run_with_fallback(prob: Problem, candidate: Any, algorithm: Any, limit: int, *arrays: Any) -> Any:
    """Run the candidate (on NCHW copies of channels-last operands unless it takes "nhwc":
    convlab.layouts); under ``"auto"`` a plugin whose kernel raises is excluded (with a warning
    naming it) and the next choice runs instead. A forced plugin's error propagates. Returns the
    candidate that ran."""
    while True:
        try:
            with layouts.operands_for(candidate.plugin.layouts, arrays) as taken:
                candidate.plugin.run(prob, candidate.config, *taken, workspace_limit=limit)
            return candidate
        except Exception as exc:
            if not (isinstance(algorithm, str) and algorithm == "auto"):
                raise
            registry.mark_broken(candidate.plugin.name, exc)
            try:
                following = strategy.resolve(prob, "auto", limit)
            except ValueError:
                raise exc from None
            if following.plugin is candidate.plugin:  # never retry an excluded plugin
                raise exc
            candidate = following


def _call(op: str, build: Any, inputs: dict[str, Any], bias: Any, out: Any, options: tuple,
          algorithm: Any, workspace_limit: Any, stream: Any) -> Any:
    """Replay the launch plan of this call's signature (convlab.plan), else check, run and record."""
    a, b = inputs.values()
    sig = operands.signature
    signatures = (sig(a), sig(b), sig(bias), sig(out))  # False: not a device array (CPU tensors too)
    if False in signatures and any(operands.is_host_tensor(v) for v in (a, b, bias, out)):
        return _call_host_tensors(op, build, inputs, bias, out, options, algorithm, workspace_limit, stream)
    key = plan.call_key(op, signatures, options, algorithm, workspace_limit)
    found = plan.lookup(key) if key is not None else None
    if found is not None:
        try:
            result = found.run(a, b, bias, out, stream)
        except Exception as exc:
            if not found.thin:
                raise
            launch.disable_thin(exc)  # the full path below recomputes the whole result
            plan.clear()
            result = None
        if result is not None:
            return result
    prob = build()
    check_fits(op, prob)  # before anything is allocated
    return _execute(prob, inputs, bias, out, algorithm, workspace_limit, stream, key)


def _call_host_tensors(op: str, build: Any, inputs: dict[str, Any], bias: Any, out: Any, options: tuple,
                       algorithm: Any, workspace_limit: Any, stream: Any) -> Any:
    """A call with CPU torch tensors: run it on numpy views of them (host operands, copied to the
    device and back) and return a CPU tensor (or ``out``, written in place)."""
    named = {**inputs, "bias": bias, "out": out}
    device = [name for name, v in named.items()
              if v is not None and not isinstance(v, np.ndarray) and not operands.is_host_tensor(v)]
    if device:
        cpu = next(name for name, v in named.items() if operands.is_host_tensor(v))
        raise ValueError(f"{cpu} is a CPU tensor but {device[0]} is a device array; pass host operands "
                         f"(CPU tensors, numpy) or device operands, not both")
    host = {name: operands.host_view(v, writable=name == "out") if operands.is_torch(v) else v
            for name, v in named.items()}
    result = _call(op, build, {name: host[name] for name in inputs}, host["bias"], host["out"],
                   options, algorithm, workspace_limit, stream)
    return out if out is not None else operands.from_host(result)


def _execute(prob: Problem, inputs: dict[str, Any], bias: Any, out: Any, algorithm: Any,
             workspace_limit: int | None, stream: Any = None, key: tuple | None = None) -> Any:
    """Check ``out``, pick the candidate, run it (recording a plan under ``key``), and hand the result
    back in the caller's kind of array: numpy when every operand was numpy, a torch tensor for torch
    operands, else a device array (or ``out`` when given)."""
    limit = check_workspace_limit(workspace_limit)
    out_shape = prob.operand_shapes[2]
    if out is not None:
        oshape, odtype = array_spec(out, "out", 4)
        if oshape != out_shape or str(odtype) != prob.dtype:
            raise ValueError(f"out must have shape {out_shape} and dtype {prob.dtype}, "
                             f"got {oshape} {odtype}")
        check_out_aliasing(out, {**inputs, "bias": bias})
    views = {name: _to_device(value, name)  # before "auto" may tune; a view, no copy: ValueError when
             for name, value in (*inputs.items(), ("bias", bias), ("out", out))  # another layout
             if value is not None and not isinstance(value, np.ndarray)}

    def device(value: Any, name: str) -> Any:  # each operand converted once (numpy: copied here)
        return views[name] if name in views else _to_device(value, name)
    candidate = strategy.resolve(prob, algorithm, limit)  # validates algorithm= before any copy
    st = operands.resolve_stream(stream, (*inputs.values(), bias, out))
    host = all(isinstance(v, np.ndarray) for v in inputs.values())
    first, first_name = next(iter(inputs.values())), next(iter(inputs))
    channels_last_out = (out is None and prob.n > 0 and first_name in views
                         and operands.is_channels_last(views[first_name]))
    if channels_last_out:
        out = operands.empty_like_kind(first, out_shape, prob.dtype, st, channels_last=True)
    elif out is None and operands.is_torch(first) and prob.n > 0:
        out = operands.empty_like_kind(first, out_shape, prob.dtype, st)  # the caller's allocator
    if prob.n == 0:  # nothing to compute: an empty output, or a zero gradient for wgrad
        result = np.zeros(out_shape, prob.dtype)
        dout = None if host or isinstance(out, np.ndarray) else (
            device(out, "out") if out is not None else runtime.to_device(result))
        if dout is not None and out is not None:
            layouts.copy_host_into(dout, result)
    else:
        a, b = (device(v, name) for name, v in inputs.items())
        dbias = None if bias is None else device(bias, "bias")
        device_out = out is not None and not isinstance(out, np.ndarray)
        dout = (device(out, "out") if device_out else
                operands.empty_like_kind(None, out_shape, prob.dtype, st))  # pooled: no cuMemAlloc
        arrays = (a, b, dbias, dout)
        spans = [None if v is None else operands.pointer(v) for v in arrays]
        record = (key is not None and plan.replayable(candidate)
                  and not plan.aliased(spans)
                  and not launch.is_recording() and plan.keepable(candidate, prob, limit))
        with launch.using_stream(st), (launch.recording(spans) if record else
                                       contextlib.nullcontext()) as recorded:
            ran = _run_with_fallback(prob, candidate, algorithm, limit, *arrays)
        if record and ran is candidate:
            auto = isinstance(algorithm, str) and algorithm == "auto"
            plan.store(key, plan.Plan(ran, recorded, plan.host_state(), out_shape, prob.dtype,
                                      plan.decision_of(prob, limit) if auto else None, key[1],
                                      channels_last_out))
        result = runtime.to_host(dout) if host or isinstance(out, np.ndarray) else None
    if isinstance(out, np.ndarray):
        out[...] = result
        return out
    if out is not None:
        return out
    return result if host else dout


def conv2d(x: Any, weight: Any, bias: Any = None, stride=1, padding=0, dilation=1, groups: int = 1, *,
           algorithm: Any = "auto", out: Any = None, workspace_limit: int | None = None,
           stream: Any = None) -> Any:
    """y (N, K, P, Q) = conv2d(x (N, C, H, W), weight (K, C/groups, R, S)) + bias (K,).

    ``stream``: where the kernels run (default: the operands' stream; see convlab.operands)."""
    return _call("conv2d", lambda: forward_problem(x, weight, bias, stride, padding, dilation, groups),
                 {"x": x, "weight": weight}, bias, out, (stride, padding, dilation, groups), algorithm,
                 workspace_limit, stream)


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
                     workspace_limit: int | None = None, stream: Any = None) -> Any:
    """y (N, C_out, H_out, W_out) from x (N, C_in, H, W), weight (C_in, C_out/groups, R, S), bias (C_out,).

    Computed as the backward-data problem of the forward convolution that maps y's shape to x's.
    """
    return _call("conv_transpose2d",
                 lambda: transpose_problem(x, weight, bias, stride, padding, output_padding, groups,
                                            dilation),
                 {"x": x, "weight": weight}, bias, out, (stride, padding, output_padding, groups, dilation),
                 algorithm, workspace_limit, stream)


def explain(*args: Any, op: str = "conv2d", algorithm: Any = "auto",
            workspace_limit: int | None = None, target: Any = None, **kwargs: Any):
    """For a call ``op(*args, **kwargs)`` (or a Problem as the only argument): each plugin, whether it
    applies (and why not), its workspace, and what ``algorithm`` picks. ``target``: a named target
    (``"sm_90"``) or a :class:`convlab.target.Target` to explain for instead of this machine's (nothing
    is timed for another target). Returns an Explanation."""
    from .plugin.explain import explain_problem

    prob = args[0] if len(args) == 1 and isinstance(args[0], Problem) else problem_for(op, *args, **kwargs)
    return explain_problem(prob, algorithm=algorithm, workspace_limit=check_workspace_limit(workspace_limit),
                           target=target)


def op_call(cand: Candidate, problem: Problem, dev: tuple, out: Any, limit: int,
            transpose: bool = False) -> Callable[[], Any]:
    """``fn()``: the public op of ``problem`` on ``dev`` = (a, b, bias) into ``out`` with ``cand``
    forced (``algorithm=(plugin, config)``); a dgrad with bias, of a transpose entry, or whose dx is
    larger than the forward formula of dy allows (output padding of at least the stride, allowed below
    the dilation) goes through ``conv_transpose2d`` with the output padding that gives dx's size."""
    a, b, bias = dev
    pr = problem
    conv = (pr.stride, pr.padding, pr.dilation, pr.groups)
    kw = {"algorithm": (cand.plugin.name, cand.config), "out": out, "workspace_limit": limit}
    if pr.op == "forward":
        return lambda: conv2d(a, b, bias, *conv, **kw)
    if pr.op == "wgrad":
        return lambda: conv2d_backward_weight(a, b, pr.w_shape, *conv, **kw)
    extra = tuple(size - ((o - 1) * st - 2 * pad + d * (k - 1) + 1) for size, o, st, pad, d, k in
                  zip((pr.h, pr.w), (pr.p, pr.q), pr.stride, pr.padding, pr.dilation, (pr.r, pr.s)))
    if bias is None and not transpose and all(0 <= e < st for e, st in zip(extra, pr.stride)):
        return lambda: conv2d_backward_data(a, b, pr.x_shape, *conv, **kw)
    return lambda: conv_transpose2d(a, b, bias, pr.stride, pr.padding, extra, pr.groups, pr.dilation, **kw)


measure.use_public_op(op_call, plan.transient)  # the autotuner times candidates through them
