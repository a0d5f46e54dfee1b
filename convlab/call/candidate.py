"""The one entry that runs a (plugin, config) candidate on a problem. The public ops (directly, or through
the launch plans they record), the autotuner, the benchmarks, the sweeps, the conformance suite and
``convlab compile`` run a candidate through it; nothing else calls a plugin's ``run``.

    run_candidate(candidate, problem, a, b, bias, out, workspace_limit, *, stream=None, epilogue=None) -> out

    a, b, bias, out   device arrays of ``problem.operand_shapes`` (bias None when absent), each
                      C-contiguous or channels-last (NHWC memory viewed as NCHW); ``out`` None: a new
                      C-contiguous output (runtime.empty)
    workspace_limit   bytes of scratch the plugin may borrow (convlab.runtime.scratch); None: the
                      ``workspace_limit`` setting
    stream            where the launches go (a Numba stream or 0); None: the ambient stream
                      (convlab.runtime.launch.using_stream), which a recording plan sets
    epilogue          a checked epilogue (convlab.ops.epilogue.DeviceEpilogue): fused into the plugin's
                      store where it fuses it, else applied by a pass over ``out`` after the plugin's run

Operands: a plugin that does not declare ``"nhwc"`` in its ``layouts`` gets a C-contiguous copy of each
channels-last operand (convlab.kernels.data.layouts.operands_for: inputs copied into borrowed scratch
before the launch, the output transposed back into ``out`` after it). Nothing is synchronised, and the
plugin's verdict is not asked again: the caller resolved the candidate (convlab.ops.strategy,
convlab.plugin.registry.candidates). Raises what the plugin raises.
"""
from __future__ import annotations

import contextlib
from typing import Any

from convlab import runtime
from convlab.kernels.data import layouts
from convlab.plugin.registry import Candidate
from convlab.problem import Problem
from convlab.runtime import launch, origin
from convlab.runtime.settings import get_workspace_limit


def run_candidate(candidate: Candidate, problem: Problem, a: Any, b: Any, bias: Any = None, out: Any = None,
                  workspace_limit: int | None = None, *, stream: Any = None, epilogue: Any = None) -> Any:
    """Run ``candidate`` on ``problem``'s device operands (module docstring); returns ``out`` (the one
    allocated when ``out`` is None)."""
    limit = get_workspace_limit() if workspace_limit is None else workspace_limit
    if out is None:
        out = runtime.empty(problem.operand_shapes[2], problem.dtype)
    ambient = contextlib.nullcontext() if stream is None else launch.using_stream(stream)
    with ambient, origin.running(problem, candidate.label), \
            layouts.operands_for(candidate.plugin.layouts, (a, b, bias, out)) as taken:
        if epilogue is None or not epilogue.run_fused(problem, candidate, taken, limit):
            candidate.plugin.run(problem, candidate.config, *taken, workspace_limit=limit)
            if epilogue is not None:
                epilogue.after(taken[3])
    return out
