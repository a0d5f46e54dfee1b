"""Convolutions with an epilogue in convlab.torch, differentiable: per output channel ``k``

    t = conv(x, w) + bias                      (or the transposed convolution)
    u = t * scale[k] + shift[k] (+ residual)   (residual_at="before")
    y = act(u) (+ residual)                    (residual_at="after")

(convlab.epilogue). Forward: one convlab op with the epilogue, fused into the kernel's store where the
picked plugin fuses it, else convlab's epilogue pass over its output; only y is written.

Backward, per activation (the derivatives are torch's own, so gradients match torch's unfused modules):

- identity, and relu / relu6 / leaky_relu (slope >= 0) / sigmoid without a residual after the
  activation: the derivative is read from the output y (y > 0 iff u > 0, 0 < y < 6 iff 0 < u < 6,
  sigmoid' = y (1 - y), as torch's ReLU and Sigmoid do); nothing but y is kept and nothing is recomputed.
- everything else (gelu, gelu_tanh, silu, hardswish, leaky_relu with a negative slope, a residual added
  after the activation, whose rounding hides act(u) in y, or a ``scale`` that needs its gradient, which
  needs t): **recompute**. The backward runs the convolution once more without the epilogue (t), then
  differentiates the epilogue through torch's ops at t. Chosen over saving the pre-activation u because
  saving u would make the forward write a second output-sized tensor (or run the activation as a separate
  pass): the forward stays one fused kernel that writes y only, and the memory kept for backward is the
  operands autograd keeps anyway (x, w, the residual), at the price of one forward convolution per
  backward for those activations.

Gradients: dx, dw, dbias through convlab's dgrad / wgrad of ``dt`` (convlab.torch._core), dscale =
sum(du * t), dshift = sum(du) over N and the spatial axes, dresidual = du (before) or dy (after).
While ``torch.compile`` traces, the convolution is the ``torch.ops.convlab`` custom op and the epilogue
runs as torch ops after it (unfused, exact).
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import torch
import torch.nn.functional as F

from convlab.epilogue import RESIDUAL_AT, parse_activation
from . import _core, _library

#: torch's function of each convlab activation (convlab.epilogue.ACTIVATIONS); leaky_relu takes the slope
TORCH_ACTIVATIONS: dict[str, Callable[..., torch.Tensor]] = {
    "identity": lambda t, slope: t, "relu": lambda t, slope: F.relu(t),
    "relu6": lambda t, slope: F.relu6(t), "leaky_relu": lambda t, slope: F.leaky_relu(t, slope),
    "gelu": lambda t, slope: F.gelu(t), "gelu_tanh": lambda t, slope: F.gelu(t, approximate="tanh"),
    "silu": lambda t, slope: F.silu(t), "sigmoid": lambda t, slope: torch.sigmoid(t),
    "hardswish": lambda t, slope: F.hardswish(t)}


class Spec(NamedTuple):
    """The static part of a call: ``kind`` "conv" (params: stride, padding, dilation, groups) or
    "transpose" (stride, padding, output_padding, groups, dilation), the activation and ``residual_at``."""
    kind: str
    params: tuple
    algorithm: str
    activation: str
    slope: float
    residual_at: str


def _channel_view(v: torch.Tensor, dim: int) -> torch.Tensor:
    """A per-channel vector (K,) viewed to broadcast over (N, K, *spatial) of rank ``dim``."""
    return v.reshape((1, -1) + (1,) * (dim - 2))


def apply(t: torch.Tensor, spec: Spec, residual: torch.Tensor | None, scale: torch.Tensor | None,
          shift: torch.Tensor | None) -> torch.Tensor:
    """The epilogue in torch's ops (differentiable) on t (N, K, *spatial) = conv + bias."""
    if scale is not None:
        t = t * _channel_view(scale, t.dim())
    if shift is not None:
        t = t + _channel_view(shift, t.dim())
    if residual is not None and spec.residual_at == "before":
        t = t + residual
    t = TORCH_ACTIVATIONS[spec.activation](t, spec.slope)
    return t + residual if residual is not None and spec.residual_at == "after" else t


def _from_output(spec: Spec, y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """du of an activation whose derivative is a function of its output y (see the module docstring)."""
    if spec.activation == "relu":
        return dy.masked_fill(y <= 0, 0)
    if spec.activation == "relu6":
        return dy.masked_fill((y <= 0) | (y >= 6), 0)
    if spec.activation == "leaky_relu":
        return torch.where(y > 0, dy, dy * spec.slope)
    if spec.activation == "sigmoid":
        return dy * (1 - y) * y
    return dy  # identity


def _recomputes(spec: Spec, has_residual: bool, scale_grad: bool) -> bool:
    """Whether backward recomputes t (False: the derivative comes from y or is the identity's)."""
    if spec.activation == "identity":
        return scale_grad
    if scale_grad or (has_residual and spec.residual_at == "after"):
        return True
    return not (spec.activation in ("relu", "relu6", "sigmoid")
                or (spec.activation == "leaky_relu" and spec.slope >= 0))


def _forward(spec: Spec, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
             epilogue: dict | None) -> torch.Tensor:
    """The convlab op of ``spec.kind`` (``epilogue``: its keywords, None for the plain convolution)."""
    if spec.kind == "conv":
        return _core.conv2d(x, w, bias, *spec.params, spec.algorithm, epilogue)
    return _core.conv_transpose2d(x, w, bias, *spec.params, spec.algorithm, epilogue)


def _keywords(spec: Spec, residual: Any, scale: Any, shift: Any) -> dict:
    detach = [None if v is None else v.detach() for v in (residual, scale, shift)]
    activation = ("leaky_relu", spec.slope) if spec.activation == "leaky_relu" else spec.activation
    return dict(activation=activation, residual=detach[0], residual_at=spec.residual_at, scale=detach[1],
                shift=detach[2])


class _EpilogueConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, bias, scale, shift, residual, spec):
        needs = ctx.needs_input_grad
        y = _forward(spec, x, w, bias, _keywords(spec, residual, scale, shift))
        ctx.recompute = _recomputes(spec, residual is not None, needs[3])
        keep_x, keep_w = needs[1] or ctx.recompute, needs[0] or ctx.recompute
        ctx.save_for_backward(x if keep_x else None, w if keep_w else None,
                              bias if ctx.recompute else None, scale, shift,
                              residual if ctx.recompute else None,
                              None if ctx.recompute or spec.activation == "identity" else y)
        ctx.spec, ctx.shapes, ctx.has_residual = spec, (x.shape, w.shape), residual is not None
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, bias, scale, shift, residual, y = ctx.saved_tensors
        spec, needs = ctx.spec, ctx.needs_input_grad
        with torch.no_grad():
            if ctx.recompute:
                dt, dscale, dshift, dres = _recomputed_grads(spec, needs, dy, x, w, bias, scale, shift, residual)
            else:
                du = _from_output(spec, y, dy)
                axes = (0,) + tuple(range(2, dy.dim()))
                dshift = du.sum(axes) if needs[4] else None
                dres = (dy if spec.residual_at == "after" else du) if needs[5] else None
                dt = du if scale is None else du * _channel_view(scale, du.dim()).to(du.dtype)
                dscale = None
            dx, dw, db = _conv_grads(spec, needs, dt, x, w, ctx.shapes)
        return (*_core._once((dx, dw, db, dscale, dshift, dres), dy, x, w), None)


def _recomputed_grads(spec: Spec, needs: tuple, dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                      bias: Any, scale: Any, shift: Any, residual: Any) -> tuple:
    """(dt, dscale, dshift, dresidual): t recomputed by convlab, the epilogue differentiated by torch."""
    t = _forward(spec, x, w, bias, None)
    with torch.enable_grad():
        leaves = [None if v is None else v.detach().requires_grad_(bool(need))
                  for v, need in ((t, True), (scale, needs[3]), (shift, needs[4]), (residual, needs[5]))]
        out = apply(leaves[0], spec, leaves[3], leaves[1], leaves[2])
        wanted = [v for v in leaves if v is not None and v.requires_grad]
        got = dict(zip(map(id, wanted), torch.autograd.grad(out, wanted, dy)))
    return tuple(None if v is None or not v.requires_grad else got[id(v)] for v in leaves)


def _conv_grads(spec: Spec, needs: tuple, dt: torch.Tensor, x: Any, w: Any, shapes: tuple) -> tuple:
    """(dx, dw, dbias) of the convolution for dt, each None unless needed."""
    if spec.kind == "conv":
        stride, padding, dilation, groups = spec.params
        return _core.conv2d_grads(_core.EAGER, needs[:3], dt, x, w, *shapes, stride, padding, dilation,
                                  groups, spec.algorithm)
    stride, padding, _, groups, dilation = spec.params
    return _core.transpose_grads(_core.EAGER, needs[:3], dt, x, w, *shapes, stride, padding, dilation, groups,
                                 spec.algorithm)


def _as_tensor(value: Any, name: str, like: torch.Tensor) -> torch.Tensor | None:
    if value is None or isinstance(value, torch.Tensor):
        return value
    try:
        return torch.as_tensor(value, dtype=like.dtype, device=like.device)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"{name} must be a tensor or a sequence of floats (one per output channel), "
                        f"got {type(value).__name__}") from exc


def keywords(activation: Any, residual: Any, residual_at: Any, scale: Any, shift: Any) -> dict | None:
    """The epilogue keywords of a public call; None when none is asked for."""
    if activation is None and residual is None and scale is None and shift is None and residual_at == "before":
        return None
    return dict(activation=activation, residual=residual, residual_at=residual_at, scale=scale, shift=shift)


def batched(epilogue: dict, unbatched: bool) -> dict:
    """``epilogue`` with an unbatched call's residual given its batch of one."""
    r = epilogue["residual"]
    return {**epilogue, "residual": r.unsqueeze(0)} if unbatched and isinstance(r, torch.Tensor) else epilogue


def convolve(kind: str, nd: int, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
        params: tuple, algorithm: str, epilogue: dict) -> torch.Tensor:
    """The convolution of ``kind`` with ``epilogue`` (the public keywords ``activation``, ``residual``,
    ``residual_at``, ``scale``, ``shift``) on a batched input: autograd's Function when a graph is
    recorded, the custom op and torch's epilogue while compiling, else the fused op alone."""
    name, slope = parse_activation(epilogue.get("activation"))
    residual_at = epilogue.get("residual_at", "before")
    if not isinstance(residual_at, str) or residual_at not in RESIDUAL_AT:
        raise ValueError(f"residual_at must be one of {RESIDUAL_AT}, got {residual_at!r}")
    residual = epilogue.get("residual")
    if residual is not None and not isinstance(residual, torch.Tensor):
        raise TypeError(f"residual must be a tensor shaped like the output, got {type(residual).__name__}")
    if (residual is not None and torch._C._is_any_autocast_enabled() and residual.is_floating_point()
            and residual.dtype != input.dtype):  # the output's dtype under autocast, as the inputs were cast
        residual = residual.to(input.dtype)
    scale, shift = (_as_tensor(epilogue.get(k), k, input) for k in ("scale", "shift"))
    spec = Spec(kind, params, algorithm, name, slope, residual_at)
    if torch.compiler.is_compiling():
        ops = _library.OPS[nd]
        y = (ops.conv(input, weight, bias, *params, algorithm) if kind == "conv" else
             ops.conv_transpose(input, weight, bias, *params, algorithm))
        return apply(y, spec, residual, scale, shift)
    operands = (input, weight, bias, scale, shift, residual)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in operands):
        return _EpilogueConv.apply(*operands, spec)
    return _forward(spec, input, weight, bias, _keywords(spec, residual, scale, shift))
