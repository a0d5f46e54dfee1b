"""The fused benchmark's check of a variant's outputs against the float64 model (benchmarks/fused_bench.py).

    check(row, out, ref, eager, dtype)      relative norm errors, each within max(TOL, FACTOR x torch eager's)
    recorder = MaskRecorder(model)          forward hooks on the model's ReLU / ReLU6 modules
    out = recorder.record(fn)               one call with its activations' derivative masks recorded
    ref, flips = masked_reference(torch, model64, x64, gy64, recorder.masks)

A train step's input gradient is discontinuous where a ReLU or ReLU6 input sits on a kink (0; 6): an input
within rounding of it takes either branch in a float32 computation, and at batch 32 one element on the
other branch than float64's moves x.grad by about 3e-4 to 2e-3 of its norm (the x.grad errors of
results/fused/h100/cdf96a4, its README: torch.compile's and convlab's, 4.4e-4 to 5.6e-3 from run to run,
against torch eager's 5e-7 where its own call took float64's branches). Against a reference that took its
own branches, x.grad's error measures which side of a kink rounding fell on, not the arithmetic.

So in train mode each checked call of a variant whose activations are modules records their masks (1
strictly inside the linear piece), and its reference is the float64 model's output and x.grad with those
masks as the activations' derivatives (the values are float64's own); ``flips`` counts the mask elements
that differ from the float64 call's. torch.compile's activations are inside its graph: its rows keep the
plain reference (``masked`` False), as do forward rows (no gradient).
"""
from __future__ import annotations

import copy
from typing import Any

#: relative norm error always allowed against the float64 reference: a well-conditioned stack's roundings
#: and accumulation orders (float32: fp32 FMA, cuDNN's TF32 off; half: fp32 accumulators, half storage)
TOL = {"float32": 2e-4, "float16": 1e-2, "bfloat16": 6e-2}
#: beyond TOL a variant may be this many times torch eager's own error against the float64 reference (per
#: output): an ill-conditioned stack (train-mode BatchNorm's backward subtracts batch means, a cancellation)
#: shows in torch eager's own error, and other roundings and accumulation orders may be a few times worse
#: than cuDNN's, not more
FACTOR = 4
#: module class name -> the open interval of its output where its derivative is 1 (0 outside)
KINKS = {"ReLU": (0.0, float("inf")), "ReLU6": (0.0, 6.0)}


def derivative_mask(module: Any, out: Any) -> Any:
    """Where the activation ``module`` (a KINKS class) has derivative 1, from its output ``out``: the output
    lies strictly inside the linear piece (the same set as the input's, so an in-place module's will do)."""
    lo, hi = KINKS[type(module).__name__]
    return (out > lo) & (out < hi)


def check(row: dict, out: tuple, ref: tuple, eager: list[float] | None, dtype: str, prefix: str = "") -> list:
    """Each output's relative norm error ||o - r|| / ||r|| against the float64 reference ``ref``; ``passed``
    while each is within its bound max(TOL[dtype], FACTOR x torch eager's error ``eager`` on that output).
    torch eager's first check (``eager`` None) sets those errors, so it passes by construction. The errors."""
    errs = [float((o.double() - r).norm() / r.norm().clamp_min(1e-300)) for o, r in zip(out, ref)]
    eager = errs if eager is None else eager
    bounds = [max(TOL[dtype], FACTOR * e) for e in eager]
    row.update({prefix + "rel_errs": errs, prefix + "rel_err": max(errs), "torch_rel_errs": eager,
                "torch_rel_err": max(eager), "tol": TOL[dtype], "bounds": bounds})
    row["passed"] = (prefix == "" or row["passed"]) and all(e <= b for e, b in zip(errs, bounds))
    return errs


class MaskRecorder:
    """The ReLU / ReLU6 modules of ``model``; :meth:`record` hooks them for one call, each call of one
    appending its derivative mask (bool, the output's shape) to ``masks[name]``, in call order. Outside
    :meth:`record` the model has no hook (its timed calls run as they would)."""

    def __init__(self, model: Any) -> None:
        self.masks: dict = {}
        self.found = [(name, m) for name, m in model.named_modules() if type(m).__name__ in KINKS]

    @property
    def modules(self) -> list[str]:
        return [name for name, _ in self.found]

    def record(self, fn: Any) -> Any:
        """``fn()`` with the masks of this call recorded."""
        self.masks = {}

        def hook(name: str) -> Any:
            def keep(module: Any, args: tuple, out: Any) -> None:
                self.masks.setdefault(name, []).append(derivative_mask(module, out))
            return keep
        handles = [m.register_forward_hook(hook(name)) for name, m in self.found]
        try:
            return fn()
        finally:
            for h in handles:
                h.remove()


def masked_reference(torch: Any, model64: Any, x64: Any, gy64: Any, masks: dict) -> tuple[tuple, int]:
    """(output, x.grad) of a copy of the float64 ``model64`` from ``x64`` and ``gy64``, each activation in
    ``masks`` taking its recorded mask as its derivative (values unchanged), and the number of mask
    elements that differ from the float64 call's own."""
    model, flips, queue = copy.deepcopy(model64), [0], {k: list(v) for k, v in masks.items()}
    for name, m in model.named_modules():
        if name not in queue:
            continue
        if hasattr(m, "inplace"):
            m.inplace = False  # the hook needs the input as it was

        def hook(module: Any, args: tuple, out: Any, name: str = name) -> Any:
            mask = queue[name].pop(0).to(out.device)
            flips[0] += int((derivative_mask(module, out) != mask).sum())
            x = args[0]
            return out.detach() + (x - x.detach()) * mask.to(x.dtype)
        m.register_forward_hook(hook)
    x = x64.detach().clone().requires_grad_(True)
    y = model(x)
    y.backward(gy64)
    return (y.detach(), x.grad), flips[0]
