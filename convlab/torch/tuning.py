"""``convlab.torch.tune(model, example_inputs)``: every convolution layer of a converted model tuned on request.

The default tuning mode, "heuristic" (convlab.autotune.modes), runs the cost model's pick at a shape's
first call and times nothing. ``tune`` runs the model once on ``example_inputs`` under the chosen mode
("tune" by default), forward and (``backward=True``, where a parameter requires grad) backward, so that
each layer's forward, dgrad and wgrad shapes are checked and timed; the picks go to the autotuner's
disk cache, so later calls in the default mode (and later processes on this GPU model) run them, and
a rerun times nothing already stored. Returns a :class:`TuneSummary`: per layer, each op's shape, its
pick and whose pick it is ("tuned", "model", "priority" on the simulator, "forced" for a layer with a
named algorithm) and where its kernels came from (the kernel store, the disk cache, a compile in this
process, or the simulator: convlab.runtime.origin). :func:`report` is ``tune`` in mode "heuristic": what
each layer runs in the default mode, timing nothing.

    import convlab.torch as ct
    model = ct.convert(model).cuda()
    summary = ct.tune(model, (torch.randn(32, 3, 224, 224, device="cuda"),), budget=10)
    print(summary)                                  # one line a layer-op: shape, pick, tuned or the model's
    print(ct.report(model, (x,)))                   # and where each pick's kernels came from
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch import nn

from convlab.autotune import tuner
from convlab.call import plan
from convlab.autotune.request import requested
from convlab.autotune.result import TuneResult
from convlab.runtime import origin
from .modules import _ConvlabModule


@dataclass
class LayerPick:
    """One op of one layer: ``layer`` (the module's name in the model), ``op`` (forward, dgrad, wgrad),
    ``shape`` (``Problem.describe()``), ``pick`` (the winner's label), ``picked_by`` ("tuned",
    "model", "priority" or "forced"), ``source`` (the tuner's: tuned now, cache, heuristic, priority)
    and ``kernels``: where the pick's kernels came from (convlab.runtime.origin.describe, e.g. '1 kernel:
    1 from the kernel store'; "" for a forced layer)."""

    layer: str
    op: str
    shape: str
    pick: str | None
    picked_by: str
    source: str
    kernels: str = ""


@dataclass
class TuneSummary:
    """What :func:`tune` did: the mode, one :class:`LayerPick` per layer and op, in the model's order."""

    mode: str
    layers: list[LayerPick] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Layer-ops per ``picked_by``."""
        out: dict[str, int] = {}
        for row in self.layers:
            out[row.picked_by] = out.get(row.picked_by, 0) + 1
        return out

    def __str__(self) -> str:
        width = max([len(r.layer) for r in self.layers] + [5])
        lines = [f"convlab.torch.tune (mode {self.mode}): {len(self.layers)} layer-ops, "
                 + ", ".join(f"{n} {k}" for k, n in sorted(self.counts().items()))]
        for r in self.layers:
            kernels = f"; {r.kernels}" if r.kernels else ""
            lines.append(f"  {r.layer:<{width}}  {r.op:<7}  {r.shape}  -> {r.pick} ({r.picked_by}, {r.source}"
                         f"{kernels})")
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython display
        p.text(str(self))


def _geometry(result: TuneResult) -> tuple:
    """A problem's geometry without its op or bias: a layer's forward, dgrad and wgrad share it."""
    return result.problem.replace(op="forward", bias=False).key()


def _inputs(example_inputs: Any) -> tuple:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs)
    raise TypeError(f"example_inputs must be a tensor or a tuple/list of the model's positional inputs, "
                    f"got {type(example_inputs).__name__}")


def _backward(output: Any) -> None:
    """Backward from the sum of every floating-point tensor in ``output`` that requires grad."""
    leaves = output if isinstance(output, (tuple, list)) else \
        list(output.values()) if isinstance(output, dict) else [output]
    total = sum(t.float().sum() for t in leaves
                if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point())
    if isinstance(total, torch.Tensor):
        total.backward()


def tune(model: nn.Module, example_inputs: Any, budget: float | None = None, mode: str = "tune", *,
         backward: bool = True, progress: bool | None = None) -> TuneSummary:
    """Tune every convlab convolution layer of ``model`` (module docstring) by running it once on
    ``example_inputs`` (a tensor or a tuple of the positional inputs, e.g. one batch (N, C, H, W)) in
    tuning ``mode``; ``budget``: seconds of checking and timing per shape in mode "tune" (None: the
    budget in force, 20 s unless set). ``backward``: also the layers' dgrad and wgrad (when the output
    requires grad). ``progress``: a tqdm bar over the layers (None: only on a terminal). The model's
    gradients and buffers (batch-norm statistics) are restored after, and so are the tuning mode and
    budget in force.

    TypeError / ValueError (naming the argument) for a non-module, a model without convlab layers
    (``convlab.torch.convert(model)`` first), bad inputs, mode or budget."""
    from tqdm import tqdm

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    inputs = _inputs(example_inputs)
    layers = [(name or type(m).__name__, m) for name, m in model.named_modules() if isinstance(m, _ConvlabModule)]
    if not layers:
        raise ValueError("model has no convlab convolution layers: convert it first (convlab.torch.convert(model))")
    mine: dict[str, list[TuneResult]] = {name: [] for name, _ in layers}
    grads = {p: p.grad for p in model.parameters()}
    buffers = {b: b.detach().clone() for b in model.buffers()}
    with requested(mode, budget), tuner.recording() as seen, \
            tqdm(total=len(layers), disable=None if progress is None else not progress, unit="layer",
                 desc=f"convlab.torch.tune ({mode})") as bar:
        other: list[TuneResult] = []  # decisions outside a layer's forward: functional calls, backward
        hooks = []
        for name, module in layers:
            hooks.append(module.register_forward_pre_hook(lambda m, a: _enter(seen, other)))
            hooks.append(module.register_forward_hook(
                lambda m, a, out, name=name: (_move(seen, mine[name]), bar.update(1))[0]))
        try:
            output = model(*inputs)
            if backward:
                _backward(output)
        finally:
            for hook in hooks:
                hook.remove()
            with torch.no_grad():
                for b, saved in buffers.items():
                    b.copy_(saved)
            for p, g in grads.items():
                p.grad = g
        _move(seen, other)
    return _summary(mode, layers, mine, other)


def report(model: nn.Module, example_inputs: Any, *, backward: bool = True) -> TuneSummary:
    """Per layer-op of ``model``: its shape, the pick the default mode runs, whether it was tuned or is
    the cost model's, and where its kernels came from (store, disk cache, compiled, simulated). Runs the
    model once on ``example_inputs`` (forward, and backward unless ``backward=False``) in mode
    "heuristic", timing nothing: :func:`tune` with ``mode="heuristic"``; its errors too."""
    return tune(model, example_inputs, mode="heuristic", backward=backward, progress=False)


def _row(name: str, result: TuneResult) -> LayerPick:
    """One layer-op's row: the tuner's decision and where its pick's kernels came from."""
    kernels = origin.describe(result.problem, result.winner_label) if result.winner_label else ""
    return LayerPick(name, result.problem.op, result.problem.describe(), result.winner_label, result.picked_by,
                     result.source, kernels)


def _enter(seen: list, other: list) -> None:
    """A layer's forward starts: earlier decisions are not its own; the launch plans are dropped, so that
    its call reaches the autotuner (a replayed plan of an earlier layer of the same shape would not)."""
    _move(seen, other)
    plan.clear()


def _move(source: list, target: list) -> None:
    target.extend(source)
    source.clear()


def _summary(mode: str, layers: Sequence[tuple[str, nn.Module]], mine: dict[str, list[TuneResult]],
             other: list[TuneResult]) -> TuneSummary:
    """Per layer its forward decisions, then the other decisions of the same geometry (its dgrad and
    wgrad); those of no layer's geometry last, as layer "(outside the layers)"."""
    by_geometry: dict[tuple, list[TuneResult]] = {}
    for result in other:
        same = by_geometry.setdefault(_geometry(result), [])
        if all(r.problem != result.problem for r in same):
            same.append(result)
    summary, placed = TuneSummary(mode), set()
    for name, module in layers:
        results = list(mine[name])
        for result in list(results):
            geometry = _geometry(result)
            placed.add(geometry)
            results += [r for r in by_geometry.get(geometry, []) if all(r.problem != x.problem for x in results)]
        if getattr(module, "algorithm", "auto") != "auto":
            summary.layers.append(LayerPick(name, "forward", "-", module.algorithm, "forced", "forced"))
        summary.layers += [_row(name, r) for r in results]
    for geometry, results in by_geometry.items():
        if geometry not in placed:
            summary.layers += [_row("(outside the layers)", r) for r in results]
    return summary


__all__ = ["tune", "report", "TuneSummary", "LayerPick"]
