"""What the cost model knows about one candidate: the :class:`Features` of a (plugin, config) on a problem
and a target.

    features(plugin, problem, config, target, workspace_limit) -> Features
        built-in plugins (``convlab.algorithms``): their family's extractor (:mod:`.families`)
        any other plugin: the generic view below
        then the plugin's own ``cost_hints(problem, config, target)`` entries replace those fields

Generic view (a plugin the model knows nothing about): the dense FLOPs and fewest bytes of the problem
(``Problem.flops`` / ``Problem.bytes``), its scratch written and read once (2 x ``workspace_bytes``) by
one auxiliary kernel when it has any, the GEMM view's output tiled by the config's ``BM`` x ``BN`` (128 x
128 when it has none) over the groups, 256 threads a block, fp32 FMA arithmetic (fp64 for float64).

Units: FLOPs, bytes, counts. Nothing here compiles or runs a kernel.
"""
from __future__ import annotations

from typing import Any, Mapping

from convlab.plugin.contract import Algorithm, Config
from convlab.problem import Problem
from convlab.runtime.targets import Target

from . import families
from .features_base import (ARITH_CEILING, HINT_FIELDS, WAVE_BLOCKS_PER_SM,  # noqa: F401  (re-exported)
                            Features, blocks_per_sm, default_arith, gemm_tiles, operand_loads)


def generic(plugin: Algorithm, problem: Problem, config: Config, target: Target,
            workspace_limit: int) -> Features:
    """The generic view of the module docstring."""
    try:
        scratch = int(plugin.workspace_bytes(problem, config, workspace_limit, target=target))
    except Exception:
        scratch = 0
    m, n, k = problem.gemm_shape()
    bm, bn = int(config.get("BM", 128)), int(config.get("BN", 128))
    tiles, pad = gemm_tiles(m, n, bm, bn)
    return Features(plugin.name, default_arith(problem), problem.flops * pad, float(problem.bytes),
                    2.0 * scratch, 1 + (scratch > 0), tiles * problem.groups, 1, 256,
                    blocks_per_sm(target, 256),
                    operand_loads(m, n, k, bm, bn, problem.itemsize) * problem.groups)


def _hints(plugin: Algorithm, problem: Problem, config: Config, target: Target) -> Mapping[str, Any]:
    """The plugin's ``cost_hints`` (only those of HINT_FIELDS); {} when it declares none or raises."""
    hook = getattr(plugin, "cost_hints", None)
    if hook is None:
        return {}
    try:
        hints = hook(problem, config, target)
    except Exception:  # a broken hint must not break tuning: the generic view stands
        return {}
    if not isinstance(hints, Mapping):
        return {}
    return {k: v for k, v in hints.items() if k in HINT_FIELDS}


def features(plugin: Algorithm, problem: Problem, config: Config, target: Target,
             workspace_limit: int) -> Features:
    """The candidate's features (module docstring); never raises for a plugin whose methods raise."""
    extract = families.extractor(plugin)
    try:
        base = extract(plugin, problem, config, target, workspace_limit, features) if extract else None
    except Exception:  # a config the extractor cannot read: the generic view
        base = None
    if base is None:
        base = generic(plugin, problem, config, target, workspace_limit)
    hints = _hints(plugin, problem, config, target)
    if not hints:
        return base
    fields = base.as_dict()
    for key, value in hints.items():
        fields[key] = str(value) if key in ("family", "arith") else type(fields[key])(value)
    if fields["arith"] not in ARITH_CEILING:
        fields["arith"] = base.arith
    return Features(**fields)
