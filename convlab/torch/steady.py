"""The steady-state forward of convlab's modules: a call whose launch plan exists replays it at once.

A model calls each convolution module with operands of the same signatures on every step. The first
call of a signature runs convlab.torch's whole path (argument checks, autocast, autograd, the epilogue's
checks, then convlab's op, which records a launch plan: convlab.call.plan); a later call that records no
autograd graph builds the key the op itself would build and replays the plan (convlab.ops.bound), without
the layers in between:

    module.forward -> forward(): the module's op bound to its options once (:func:`_static`), the
                      operands' signatures -> plan lookup -> Plan.run (the output from torch's allocator on the
                      current stream; thin launches, or one CUDA graph)

The key is the op's own (convlab.call.plan: op name, operand signatures, options, algorithm, workspace
limit, the epilogue's key), so a hit replays exactly what the op would, and whatever the key does not
match (a new shape, layout, dtype, device, an unaligned view, another epilogue) misses and takes the
whole path, which records the plan the next call finds. A stored plan carries its own validity (the
registered plugins, the precision and tuning settings: convlab.call.plan.lookup).

Taken only where the whole path would call the op directly: operands on the device, a batched input,
numeric zero padding, no graph to record (grad mode off, or no operand requiring grad), no autocast, not
while torch.compile traces, and for a transposed convolution no ``output_size``. The fused depthwise ->
pointwise block runs its own path. :func:`stats` counts the calls served here and the misses;
:func:`disabled` turns it off, and convlab.torch.bound_calls with it (to measure the whole path beside it,
benchmarks/fused_profile.py).

The host cost this removes is measured in results/fused_profile/h100/aa77346: about 0.14 ms per
convolution through the whole path, where MobileNetV2's fused float16 stack spends 0.23-0.26 ms a step
in its six kernels and 0.87 ms a step on the host.
"""
from __future__ import annotations

import weakref
from typing import Any

import torch

from convlab.ops.bound import BoundCall
from convlab.runtime import settings
from . import _core, bound_calls
from .bound_calls import disabled  # noqa: F401  (the one switch: steady replays and bound calls)
from .functional import _records_graph, _tuple

_STATS = {"steady": 0, "missed": 0}
#: each module's (token, bound call): what _static derived from the attributes in the token
_STATICS: "weakref.WeakKeyDictionary[torch.nn.Module, tuple]" = weakref.WeakKeyDictionary()


def stats() -> dict[str, int]:
    """Calls served by a steady replay and calls that qualified but found no plan (the whole path ran)."""
    return dict(_STATS)


def _static(module: Any, transpose: bool, activation: Any, residual_at: str | None) -> BoundCall | None:
    """``module``'s op bound to its options and epilogue (convlab.ops.bound), made again only when an
    attribute it depends on changed; None where the whole path must run (string or non-zero padding
    modes, options the whole path would refuse)."""
    token = (module.stride, module.padding, module.dilation, module.groups, module.algorithm,
             module.padding_mode, getattr(module, "output_padding", None), activation, residual_at,
             settings.generation())
    cached = _STATICS.get(module)
    if cached is not None and cached[0] == token:
        return cached[1]
    _STATICS[module] = (token, _derive(module, transpose, activation, residual_at))
    return _STATICS[module][1]


def _derive(module: Any, transpose: bool, activation: Any, residual_at: str | None) -> BoundCall | None:
    """The op bound to the options as convlab.torch._core hands them to it (:func:`_static`)."""
    nd = module._nd
    if isinstance(module.padding, str) or module.padding_mode != "zeros" or type(module.algorithm) is not str:
        return None
    try:
        st, pd = _tuple(module.stride, "stride", 1, nd), _tuple(module.padding, "padding", 0, nd)
        dl = _tuple(module.dilation, "dilation", 1, nd)
        if transpose:
            op = _tuple(module.output_padding, "output_padding", 0, nd)
            options = (tuple(st), tuple(pd), tuple(op), module.groups, tuple(dl))
        else:
            options = (tuple(st), tuple(pd), tuple(dl), module.groups)
        algorithm = _core._algorithm_for("dgrad" if transpose else "forward", module.algorithm)
        return BoundCall(f"conv_transpose{nd}d" if transpose else f"conv{nd}d", options, algorithm,
                         activation=activation, residual=residual_at is not None,
                         residual_at=residual_at or "before")
    except (TypeError, ValueError):
        return None


def forward(module: Any, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *,
            transpose: bool = False, activation: Any = None, residual: torch.Tensor | None = None,
            residual_at: str | None = None) -> torch.Tensor | None:
    """``module``'s output from its stored plan, or None: the caller takes the whole path. ``activation``
    and ``residual_at``: a fused module's epilogue (convlab.torch.fuse), ``residual`` its operand."""
    if torch.compiler.is_compiling():  # first: what torch.compile traces ends here
        return None
    if bound_calls.off() or input.dim() != module._nd + 2 or torch._C._is_any_autocast_enabled():
        return None
    if _records_graph(input, weight, bias) or (residual is not None and residual.requires_grad
                                                and torch.is_grad_enabled()):
        return None
    bound = _static(module, transpose, activation, residual_at)
    if bound is None:
        return None
    lowered = module._nd == 1  # the 1D ops run on unit-height views (convlab.ops.conv_nd._lowered)
    if lowered:
        input, weight = input.unsqueeze(2), weight.unsqueeze(2)
    y = bound.replay(input, weight, bias, residual)
    if y is None:
        _STATS["missed"] += input.is_cuda  # a host call never replays: no miss
        return None
    _STATS["steady"] += 1
    return y.squeeze(2) if lowered else y
