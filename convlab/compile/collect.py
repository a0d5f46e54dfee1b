"""Running corpus cases in the compile-only runtime: which kernels each case launches, and how.

:func:`launches` runs one :class:`~convlab.compile.corpus.Case` as the public op would (operands in the
case's layouts, the plugin's layout copies, its ``run``) with :class:`convlab.runtime.offline.OfflineArray`
operands, and returns the launches it asked for. A kernel is identified across processes by
:func:`kernel_id`: the kernel cache's key of its code, closure constants, jit options and argument
types (:func:`convlab.runtime.kernel_cache.kernel_key`), without the target, since one lowering serves every
target (:mod:`convlab.compile.assemble`).

Must run in the compile-only runtime (``CONVLAB_RUNTIME=compile``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from convlab import runtime
from convlab.runtime import kernel_cache, offline
from convlab.call.candidate import run_candidate
from convlab.plugin import registry
from convlab.plugin.registry import Candidate
from convlab.runtime.settings import float32_precision, get_workspace_limit
from convlab.runtime.targets import Target, using

from .corpus import Case


@dataclass(frozen=True)
class Launch(offline.LaunchShape):
    """One launch of a case: its shape (grid, block, dynamic shared memory), the kernel's id and name."""

    kernel: str
    name: str


def kernel_id(dispatcher: Any, argtypes: tuple) -> str:
    """The process-independent identity of one kernel compiled for ``argtypes``."""
    options = getattr(dispatcher, "targetoptions", None) or {}
    return kernel_cache.kernel_key(dispatcher, argtypes, "lowered-once", options)


def _operand(shape: tuple[int, ...], dtype: Any, layout: str) -> Any:
    """An offline array of ``shape``; a 4-D (5-D) one in channels-last (-3d) memory for "nhwc"."""
    if layout == "nhwc" and len(shape) == 4:
        n, c, h, w = shape
        return runtime.empty((n, h, w, c), dtype).transpose(0, 3, 1, 2)
    if layout == "nhwc" and len(shape) == 5:
        n, c, d, h, w = shape
        return runtime.empty((n, d, h, w, c), dtype).transpose(0, 4, 1, 2, 3)
    return runtime.empty(shape, dtype)


def launches(case: Case, target: Target, known: dict[str, tuple[Any, tuple]] | None = None,
             workspace_limit: int | None = None) -> list[Launch]:
    """The launches of ``case`` on ``target``; ``known`` collects kernel id -> (dispatcher, argtypes)."""
    if not runtime.COMPILE_ONLY:
        raise RuntimeError("convlab.compile.collect runs in the compile-only runtime (CONVLAB_RUNTIME=compile)")
    from convlab.problem import np_dtype

    pr = case.problem
    dtype = np_dtype(pr.dtype)
    plugin = registry.get(case.plugin)
    limit = get_workspace_limit() if workspace_limit is None else workspace_limit
    a_shape, b_shape, out_shape = pr.operand_shapes
    a, b, out = (_operand(s, dtype, lay) for s, lay in zip((a_shape, b_shape, out_shape), case.layouts))
    bias = None if pr.bias_shape is None else runtime.empty(pr.bias_shape, dtype)
    epilogue = None if case.epilogue is None else _epilogue(case, out_shape, dtype)
    with using(target), float32_precision(case.precision), offline.collecting() as requests:
        run_candidate(Candidate(plugin, case.config), pr, a, b, bias, out, limit, epilogue=epilogue)
    out_list = []
    for req in requests:
        kid = kernel_id(req.dispatcher, req.argtypes)
        if known is not None:
            known.setdefault(kid, (req.dispatcher, req.argtypes))
        out_list.append(Launch(req.grid, req.block, req.shared, kernel=kid, name=req.name))
    return out_list


def _epilogue(case: Case, shape: tuple[int, ...], dtype: Any) -> Any:
    """The case's epilogue with offline operands: a residual in the output's layout where the plugin
    fuses into that layout (``fused_layouts``), else C-contiguous; scale and shift (K,)."""
    import numpy as np

    from convlab.kernels.epilogue import compute_dtype
    from convlab.ops.epilogue import DeviceEpilogue, EpilogueCall

    epi, pr = case.epilogue, case.problem
    channel = np.ones(shape[1], compute_dtype(pr.dtype))
    layout = case.layouts[2] if case.layouts[2] in registry.get(case.plugin).fused_layouts else "nchw"
    residual = _operand(shape, dtype, layout) if epi.residual is not None else None
    return DeviceEpilogue(EpilogueCall(epi, pr.dtype, residual, channel if epi.scale else None,
                                       channel if epi.shift else None))
