"""The full path of a public op's call, taken when no launch plan replays it (convlab.call.plan): the
output's checks, the device views of the operands, the candidate (convlab.ops.strategy), the output, the
run through :func:`convlab.call.candidate.run_candidate` (recorded as a plan when the call can be
planned), and the result in the caller's kind of array.

    execute(problem, names, recs, algorithm, workspace_limit, stream, key) -> result

``recs`` are the call's four operand records (a, b, bias, out; convlab.call.operands.adapt), made once by
the op and read here: each device operand is viewed once (before ``"auto"`` may tune: a layout error is
raised first), each numpy operand copied once (after the candidate is resolved: ``algorithm=`` is
validated before any copy).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from convlab import runtime
from convlab.call import operands, plan
from convlab.call.candidate import run_candidate
from convlab.call.operands import NUMBA, NUMPY, TORCH, Operand
from convlab.kernels.data import layouts
from convlab.ops import strategy
from convlab.ops.arguments import array_spec
from convlab.ops.output_checks import check_out_aliasing
from convlab.plugin import registry
from convlab.problem import Problem
from convlab.runtime import context, launch
from convlab.runtime.settings import check_workspace_limit


def device_view(rec: Operand, name: str) -> Any:
    """A device array for an operand record: numpy arrays are copied, CUDA arrays used in place
    (C-contiguous or channels-last: convlab.kernels.data.layouts)."""
    kind, obj = rec[3], rec[2]
    if kind == NUMPY:
        return runtime.to_device(obj)
    if kind == TORCH or kind == NUMBA or runtime.is_cuda_array_like(obj):
        dev = operands.as_device(obj)
        if not dev.is_c_contiguous() and not operands.is_channels_last(dev):
            raise ValueError(f"{name} is a non-contiguous device array; pass a C-contiguous (NCHW) or "
                             f"a channels-last (NCHW shape, NHWC strides) one")
        return dev
    raise TypeError(f"{name} must be a numpy array or a CUDA array, got {type(obj).__name__}")


def _check_out(out: Any, prob: Problem) -> None:
    """ValueError unless ``out`` has the shape and dtype of ``prob``'s output."""
    out_shape = prob.operand_shapes[2]
    oshape, odtype = array_spec(out, "out", len(out_shape))
    if oshape != out_shape or str(odtype) != prob.dtype:
        raise ValueError(f"out must have shape {out_shape} and dtype {prob.dtype}, got {oshape} {odtype}")


def _auto(algorithm: Any) -> bool:
    return isinstance(algorithm, str) and algorithm == "auto"


def execute(prob: Problem, names: tuple[str, str], recs: tuple[Operand, ...], algorithm: Any,
            workspace_limit: Any, stream: Any = None, key: tuple | None = None, epilogue: Any = None) -> Any:
    """Check ``out``, pick the candidate, run it (recording a plan under ``key``), and hand the result
    back in the caller's kind of array: numpy when both inputs were numpy, a torch tensor for torch
    operands, else a device array (or ``out`` when given). ``names``: the two inputs' argument names.
    ``epilogue``: a checked one (convlab.ops.epilogue.DeviceEpilogue), run with the candidate (and
    recorded with it: ``key`` then holds the epilogue's)."""
    limit = check_workspace_limit(workspace_limit)
    out_shape = prob.operand_shapes[2]
    labels = (*names, "bias", "out")
    given = recs[3][2]
    if given is not None:
        _check_out(given, prob)
        check_out_aliasing(recs[3], dict(zip(labels[:3], recs[:3])))
    devs = [None if rec[2] is None or rec[3] == NUMPY else device_view(rec, label)
            for rec, label in zip(recs, labels)]
    candidate = strategy.resolve(prob, algorithm, limit)  # validates algorithm= before any copy
    st = operands.resolve_stream(stream, recs)
    host = recs[0][3] == NUMPY and recs[1][3] == NUMPY
    channels_last_out = (given is None and prob.n > 0 and devs[0] is not None
                         and operands.is_channels_last(devs[0]))
    result_out = given
    if channels_last_out:
        result_out = operands.empty_like_kind(recs[0], out_shape, prob.dtype, st, channels_last=True)
    elif given is None and recs[0][3] == TORCH and prob.n > 0:
        result_out = operands.empty_like_kind(recs[0], out_shape, prob.dtype, st)  # the caller's allocator
    if result_out is not None and result_out is not given:
        devs[3] = operands.as_device(result_out)
    host_out = isinstance(result_out, np.ndarray)
    if prob.n == 0:  # nothing to compute: an empty output, or a zero gradient for wgrad
        result = np.zeros(out_shape, prob.dtype)
        dout = None if host or host_out else (devs[3] if result_out is not None else runtime.to_device(result))
        if dout is not None and result_out is not None:
            layouts.copy_host_into(dout, result)
    else:
        a, b = (dev if dev is not None else device_view(rec, label)  # numpy: copied here
                for dev, rec, label in zip(devs[:2], recs[:2], labels))
        dbias = devs[2] if devs[2] is not None or recs[2][2] is None else device_view(recs[2], "bias")
        dout = (devs[3] if result_out is not None and not host_out else
                operands.empty_like_kind(operands.ABSENT, out_shape, prob.dtype, st))  # pooled: no cuMemAlloc
        _run(prob, candidate, algorithm, limit, (a, b, dbias, dout), st, key, channels_last_out, epilogue)
        result = runtime.to_host(dout) if host or host_out else None
    if host_out:
        result_out[...] = result
        return result_out
    if result_out is not None:
        return result_out
    return result if host else dout


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
    spans += epilogue.spans() if epilogue is not None else []
    keep = (key is not None and plan.replayable(candidate) and not plan.aliased(spans)
            and not launch.is_recording() and plan.keepable(candidate, prob, limit))
    if not keep:
        run_candidate(candidate, prob, *arrays, limit, stream=stream, epilogue=epilogue)
        return
    check = _plan_check(prob, candidate, limit, _auto(algorithm))
    recorded = plan.record(candidate, prob, arrays, workspace_limit=limit, stream=stream, signatures=key[1],
                           channels_last_out=channels_last_out, check=check, spans=spans, epilogue=epilogue)
    plan.store(key, recorded)


def _plan_check(prob: Problem, candidate: Any, limit: int, auto: bool) -> Any:
    """``check()`` of a plan: True while its plugin is not set aside for the problem
    (registry.set_aside) and, for an "auto" plan, while the autotuner still remembers the decision it
    made under the settings in force (the tuning mode among them)."""
    name = candidate.plugin.name

    def kept() -> bool:
        return name not in registry.set_aside_for(prob)

    if not auto:
        return kept
    from convlab.autotune import tuner

    decision = tuner.remembered(tuner.memo_key(prob, limit))  # the key is read at each check: the mode may change
    return lambda: tuner.remembered(tuner.memo_key(prob, limit)) is decision and kept()
