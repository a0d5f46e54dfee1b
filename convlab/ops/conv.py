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

from typing import Any, Sequence

import numpy as np

from convlab import runtime
from convlab.call import operands, plan
from convlab.kernels.data import layouts
from convlab.ops import epilogue, strategy
from convlab.ops.arguments import (array_spec, check_fits, check_out_aliasing, dgrad_problem, forward_problem,
                                   problem_for, transpose_problem, wgrad_problem)
from convlab.plugin import registry
from convlab.problem import Problem
from convlab.runtime import context, launch
from convlab.runtime.settings import check_workspace_limit

# ---- running --------------------------------------------------------------------------------------
def _to_device(rec: operands.Operand, name: str) -> Any:
    """A device array for an operand: numpy arrays are copied, CUDA arrays used in place (C-contiguous
    or channels-last: convlab.kernels.data.layouts)."""
    obj = rec.value
    if isinstance(obj, np.ndarray):
        return runtime.to_device(obj)
    if operands.is_torch(obj) and obj.is_cuda or runtime.is_cuda_array_like(obj):
        dev = operands.as_device(obj)
        if not dev.is_c_contiguous() and not operands.is_channels_last(dev):
            raise ValueError(f"{name} is a non-contiguous device array; pass a C-contiguous (NCHW) or "
                             f"a channels-last (NCHW shape, NHWC strides) one")
        return dev
    raise TypeError(f"{name} must be a numpy array or a CUDA array, got {type(obj).__name__}")


def _auto(algorithm: Any) -> bool:
    return isinstance(algorithm, str) and algorithm == "auto"


def _run(prob: Problem, candidate: Any, algorithm: Any, limit: int, arrays: tuple, stream: Any,
         key: tuple | None, channels_last_out: bool = False, epilogue: Any = None) -> Any:
    """Run (recording a plan under ``key`` when it can be kept) and return the candidate that ran.

    Failures are scoped to what failed: an out-of-memory frees convlab's pools and plans and retries
    once; under ``"auto"`` a plugin whose kernel raises is set aside for this problem only (with a
    warning naming it; ``explain`` shows it) and the next choice runs; an error that is not the plugin's
    (an interrupt, the runtime's own) propagates and sets nothing aside, as does a forced plugin's."""
    retried = False
    while True:
        try:
            _run_once(prob, candidate, algorithm, limit, arrays, stream, key, channels_last_out, epilogue)
            return candidate
        except runtime.RuntimeFault:
            raise
        except Exception as exc:
            if runtime.is_out_of_memory(exc) and not retried:
                retried = True
                context.current().reset()  # convlab's pools, plans and tables: their memory freed
                continue
            if not _auto(algorithm) or runtime.is_out_of_memory(exc):
                raise
            registry.set_aside(candidate.plugin.name, prob, exc)
            try:
                following = strategy.resolve(prob, "auto", limit)
            except (ValueError, RuntimeError):
                raise exc from None
            if following.plugin is candidate.plugin:
                raise exc
            candidate = following


def _run_once(prob: Problem, candidate: Any, algorithm: Any, limit: int, arrays: tuple, stream: Any,
              key: tuple | None, channels_last_out: bool, epilogue: Any = None) -> None:
    spans = [None if v is None else operands.pointer(v) for v in arrays]
    keep = (key is not None and plan.replayable(candidate) and not plan.aliased(spans)
            and not launch.is_recording() and plan.keepable(candidate, prob, limit))
    if not keep:
        with launch.using_stream(stream), layouts.operands_for(candidate.plugin.layouts, arrays) as taken:
            if epilogue is None:
                candidate.plugin.run(prob, candidate.config, *taken, workspace_limit=limit)
            else:  # convlab.ops.epilogue.DeviceEpilogue: fused, or run and then the epilogue pass
                epilogue.run(prob, candidate, taken, limit)
        return
    check = _plan_check(prob, candidate, limit, _auto(algorithm))
    recorded = plan.record(candidate, prob, arrays, workspace_limit=limit, stream=stream, signatures=key[1],
                           channels_last_out=channels_last_out, check=check)
    plan.store(key, recorded)


def _plan_check(prob: Problem, candidate: Any, limit: int, auto: bool) -> Any:
    """``check()`` of a plan: True while its plugin is not set aside for the problem
    (registry.set_aside) and, for an "auto" plan, while the autotuner still remembers the decision it
    made."""
    name = candidate.plugin.name

    def kept() -> bool:
        return name not in registry.set_aside_for(prob)

    if not auto:
        return kept
    from convlab.autotune import tuner

    memo = tuner.memo_key(prob, limit)
    decision = tuner.remembered(memo)
    return lambda: tuner.remembered(memo) is decision and kept()


def _call(op: str, build: Any, inputs: dict[str, Any], bias: Any, out: Any, options: tuple,
          algorithm: Any, workspace_limit: Any, stream: Any, epilogue: Any = None) -> Any:
    """Replay the launch plan of this call's signature (convlab.call.plan), else check, run and record.
    Each operand is adapted once (convlab.call.operands.adapt). A call with an ``epilogue``
    (convlab.ops.epilogue.DeviceEpilogue) neither replays nor records a plan."""
    a, b = inputs.values()
    adapt = operands.adapt
    recs = (adapt(a), adapt(b), adapt(bias), adapt(out))
    signatures = (recs[0][0], recs[1][0], recs[2][0], recs[3][0])  # False: a host operand: no plan
    if False in signatures and any(operands.is_host_tensor(v) for v in (a, b, bias, out)):
        return _call_host_tensors(op, build, inputs, bias, out, options, algorithm, workspace_limit, stream,
                                  epilogue)
    key = None if epilogue is not None else plan.call_key(op, signatures, options, algorithm, workspace_limit)
    found = plan.lookup(key) if key is not None else None
    if found is not None:
        try:
            result = found.run(recs, stream)
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
    return _execute(prob, dict(zip(inputs, recs[:2])), recs[2], recs[3], algorithm, workspace_limit, stream,
                    key, epilogue)


def _call_host_tensors(op: str, build: Any, inputs: dict[str, Any], bias: Any, out: Any, options: tuple,
                       algorithm: Any, workspace_limit: Any, stream: Any, epilogue: Any = None) -> Any:
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
                   options, algorithm, workspace_limit, stream, epilogue)
    return out if out is not None else operands.from_host(result)


def _execute(prob: Problem, inputs: dict[str, operands.Operand], bias: operands.Operand,
             out: operands.Operand, algorithm: Any, workspace_limit: int | None, stream: Any = None,
             key: tuple | None = None, epilogue: Any = None) -> Any:
    """Check ``out``, pick the candidate, run it (recording a plan under ``key``), and hand the result
    back in the caller's kind of array: numpy when every operand was numpy, a torch tensor for torch
    operands, else a device array (or ``out`` when given). The operands are records (operands.adapt)."""
    limit = check_workspace_limit(workspace_limit)
    out_shape = prob.operand_shapes[2]
    named = {**inputs, "bias": bias, "out": out}
    given = out.value
    if given is not None:
        oshape, odtype = array_spec(given, "out", len(out_shape))
        if oshape != out_shape or str(odtype) != prob.dtype:
            raise ValueError(f"out must have shape {out_shape} and dtype {prob.dtype}, "
                             f"got {oshape} {odtype}")
        check_out_aliasing(given, {name: rec.value for name, rec in named.items() if name != "out"})
    views = {name: _to_device(rec, name)  # before "auto" may tune; a view, no copy: ValueError when
             for name, rec in named.items()  # another layout
             if rec.value is not None and not isinstance(rec.value, np.ndarray)}

    def device(name: str) -> Any:  # each operand converted once (numpy: copied here)
        return views[name] if name in views else _to_device(named[name], name)
    candidate = strategy.resolve(prob, algorithm, limit)  # validates algorithm= before any copy
    st = operands.resolve_stream(stream, tuple(rec.value for rec in named.values()))
    host = all(isinstance(rec.value, np.ndarray) for rec in inputs.values())
    first_name = next(iter(inputs))
    first = inputs[first_name].value
    channels_last_out = (given is None and prob.n > 0 and first_name in views
                         and operands.is_channels_last(views[first_name]))
    result_out = given
    if channels_last_out:
        result_out = operands.empty_like_kind(first, out_shape, prob.dtype, st, channels_last=True)
    elif given is None and operands.is_torch(first) and prob.n > 0:
        result_out = operands.empty_like_kind(first, out_shape, prob.dtype, st)  # the caller's allocator
    if result_out is not None and result_out is not given:
        views["out"] = _to_device(operands.adapt(result_out), "out")
    if prob.n == 0:  # nothing to compute: an empty output, or a zero gradient for wgrad
        result = np.zeros(out_shape, prob.dtype)
        dout = None if host or isinstance(result_out, np.ndarray) else (
            views["out"] if result_out is not None else runtime.to_device(result))
        if dout is not None and result_out is not None:
            layouts.copy_host_into(dout, result)
    else:
        a, b = (device(name) for name in inputs)
        dbias = None if bias.value is None else device("bias")
        device_out = result_out is not None and not isinstance(result_out, np.ndarray)
        dout = (views["out"] if device_out else
                operands.empty_like_kind(None, out_shape, prob.dtype, st))  # pooled: no cuMemAlloc
        _run(prob, candidate, algorithm, limit, (a, b, dbias, dout), st, key, channels_last_out, epilogue)
        result = runtime.to_host(dout) if host or isinstance(result_out, np.ndarray) else None
    if isinstance(result_out, np.ndarray):
        result_out[...] = result
        return result_out
    if result_out is not None:
        return result_out
    return result if host else dout


def conv2d(x: Any, weight: Any, bias: Any = None, stride=1, padding=0, dilation=1, groups: int = 1, *,
           algorithm: Any = "auto", out: Any = None, workspace_limit: int | None = None,
           stream: Any = None, activation: Any = None, residual: Any = None, residual_at: str = "before",
           scale: Any = None, shift: Any = None) -> Any:
    """y (N, K, P, Q) = conv2d(x (N, C, H, W), weight (K, C/groups, R, S)) + bias (K,).

    ``stream``: where the kernels run (default: the operands' stream; see convlab.call.operands).
    ``activation``, ``residual`` (N, K, P, Q), ``residual_at``, ``scale`` (K,), ``shift`` (K,): an
    epilogue, act((y * scale + shift) + residual) (convlab.epilogue; convlab.ops.epilogue)."""
    def build() -> Problem:
        return forward_problem(x, weight, bias, stride, padding, dilation, groups)
    return epilogue.run_with(
        lambda ep: _call("conv2d", build, {"x": x, "weight": weight}, bias, out, (stride, padding, dilation, groups),
                         algorithm, workspace_limit, stream, ep),
        build, x, out, activation, residual, residual_at, scale, shift)


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
    def build() -> Problem:
        return transpose_problem(x, weight, bias, stride, padding, output_padding, groups, dilation)
    return epilogue.run_with(
        lambda ep: _call("conv_transpose2d", build, {"x": x, "weight": weight}, bias, out,
                         (stride, padding, output_padding, groups, dilation), algorithm, workspace_limit, stream, ep),
        build, x, out, activation, residual, residual_at, scale, shift)


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
