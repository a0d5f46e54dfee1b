"""The 1D and 3D public ops, beside the 2D ones of conv.py and with their conventions (operand kinds,
``out=``, ``stream=``, ``algorithm=``, ``workspace_limit=``, launch plans).

3D (NCDHW activations, KCTRS weights; channels-last-3d strides accepted like 2D's channels-last): the
op's problem has ``ndim=3`` and runs on the plugins that claim 3 in ``Algorithm.ndims``.

1D (NCL activations, KCS weights; NLC strides accepted): lowered here to its 2D embedding, as cuDNN
and PyTorch do: every operand is viewed with a unit height (x (N, C, L) -> (N, C, 1, L), no copy), the
problem is ``Problem.lowered()`` (H = R = P = 1, the length on the width axis), any 2D plugin runs it,
and the result is viewed back as (N, K, Lo). ``explain`` shows the embedded problem.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from convlab import runtime
from convlab.call import operands
from convlab.ops.arguments import (array_spec, dgrad_problem, forward_problem, transpose_problem,
                                   wgrad_problem)
from convlab.ops import conv
from convlab.ops.conv import _call, _with_epilogue
from convlab.problem import ND_OP_NAMES, Problem


# ---- the unit-height views of 1D operands ---------------------------------------------------------
def _unsqueeze(obj: Any, name: str, op: str) -> Any:
    """A 3-D operand (N, C, L) viewed as (N, C, 1, L), sharing its memory (None stays None); ValueError
    naming ``name`` for another rank."""
    if obj is None:
        return None
    shape = array_spec(obj, name, 3, op)[0]
    if isinstance(obj, np.ndarray):
        return obj[:, :, None, :]
    if operands.is_torch(obj):
        return obj.unsqueeze(2)
    dev = runtime.as_device_array(obj)
    st = runtime.strides_of(dev)
    return runtime.view_at(dev, 0, shape[:2] + (1,) + shape[2:], st[:2] + (st[2] * shape[2],) + st[2:],
                           dev.dtype)


def _squeeze(result: Any) -> Any:
    """A (N, K, 1, Lo) result viewed as (N, K, Lo)."""
    if isinstance(result, np.ndarray):
        return result[:, :, 0, :]
    if operands.is_torch(result):
        return result.squeeze(2)
    st, shape = runtime.strides_of(result), tuple(result.shape)
    return runtime.view_at(result, 0, shape[:2] + shape[3:], st[:2] + st[3:], result.dtype)


def _shape4(shape: Any) -> Any:
    """A 3-entry shape argument with a unit height inserted (anything else as it is: the 1D builder
    names what is wrong with it)."""
    try:
        items = tuple(shape)
    except TypeError:
        return shape
    return items[:2] + (1,) + items[2:] if len(items) == 3 else shape


def _lowered(op: str, build: Any, inputs: dict[str, Any], bias: Any, out: Any, options: tuple,
             algorithm: Any, workspace_limit: Any, stream: Any, epilogue: Any = None) -> Any:
    """Run a 1D op on the unit-height views of its operands; the result viewed back (or ``out``)."""
    views = {name: _unsqueeze(value, name, op) for name, value in inputs.items()}
    result = _call(op, lambda: build().lowered(), views, bias, _unsqueeze(out, "out", op), options,
                   algorithm, workspace_limit, stream, epilogue)
    return out if out is not None else _squeeze(result)


# ---- 1D -------------------------------------------------------------------------------------------
def conv1d(x: Any, weight: Any, bias: Any = None, stride=1, padding=0, dilation=1, groups: int = 1, *,
           algorithm: Any = "auto", out: Any = None, workspace_limit: int | None = None,
           stream: Any = None, activation: Any = None, residual: Any = None, residual_at: str = "before",
           scale: Any = None, shift: Any = None) -> Any:
    """y (N, K, Lo) = conv1d(x (N, C, L), weight (K, C/groups, S)) + bias (K,); the epilogue arguments
    are conv2d's (residual (N, K, Lo))."""
    return _with_epilogue("conv1d", forward_problem, x, weight, bias, (stride, padding, dilation, groups),
                          (out, algorithm, workspace_limit, stream), (activation, residual, residual_at, scale, shift),
                          run=_lowered, nd=1)


def conv1d_backward_data(grad_out: Any, weight: Any, input_shape: Sequence[int], stride=1, padding=0,
                         dilation=1, groups: int = 1, *, algorithm: Any = "auto", out: Any = None,
                         workspace_limit: int | None = None, stream: Any = None) -> Any:
    """dx (input_shape = (N, C, L)) from grad_out (N, K, Lo) and weight (K, C/groups, S)."""
    return _lowered("conv1d_backward_data",
                    lambda: dgrad_problem(grad_out, weight, input_shape, stride, padding, dilation, groups, nd=1),
                    {"grad_out": grad_out, "weight": weight}, None, out,
                    (_shape4(input_shape), stride, padding, dilation, groups), algorithm, workspace_limit, stream)


def conv1d_backward_weight(x: Any, grad_out: Any, weight_shape: Sequence[int], stride=1, padding=0,
                           dilation=1, groups: int = 1, *, algorithm: Any = "auto", out: Any = None,
                           workspace_limit: int | None = None, stream: Any = None) -> Any:
    """dw (weight_shape = (K, C/groups, S)) from x (N, C, L) and grad_out (N, K, Lo)."""
    return _lowered("conv1d_backward_weight",
                    lambda: wgrad_problem(x, grad_out, weight_shape, stride, padding, dilation, groups, nd=1),
                    {"x": x, "grad_out": grad_out}, None, out,
                    (_shape4(weight_shape), stride, padding, dilation, groups), algorithm, workspace_limit,
                    stream)


def conv_transpose1d(x: Any, weight: Any, bias: Any = None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1, *, algorithm: Any = "auto", out: Any = None,
                     workspace_limit: int | None = None, stream: Any = None, activation: Any = None,
                     residual: Any = None, residual_at: str = "before", scale: Any = None,
                     shift: Any = None) -> Any:
    """y (N, C_out, L_out) from x (N, C_in, L), weight (C_in, C_out/groups, S), bias (C_out,). The
    epilogue arguments are conv2d's (scale, shift: (C_out,)).
    """
    return _with_epilogue("conv_transpose1d", transpose_problem, x, weight, bias,
                          (stride, padding, output_padding, groups, dilation),
                          (out, algorithm, workspace_limit, stream), (activation, residual, residual_at, scale, shift),
                          run=_lowered, nd=1)


# ---- 3D -------------------------------------------------------------------------------------------
def conv3d(x: Any, weight: Any, bias: Any = None, stride=1, padding=0, dilation=1, groups: int = 1, *,
           algorithm: Any = "auto", out: Any = None, workspace_limit: int | None = None,
           stream: Any = None, activation: Any = None, residual: Any = None, residual_at: str = "before",
           scale: Any = None, shift: Any = None) -> Any:
    """y (N, K, Do, P, Q) = conv3d(x (N, C, D, H, W), weight (K, C/groups, T, R, S)) + bias (K,); the
    epilogue arguments are conv2d's (residual (N, K, Do, P, Q))."""
    return _with_epilogue("conv3d", forward_problem, x, weight, bias, (stride, padding, dilation, groups),
                          (out, algorithm, workspace_limit, stream), (activation, residual, residual_at, scale, shift),
                          nd=3)


def conv3d_backward_data(grad_out: Any, weight: Any, input_shape: Sequence[int], stride=1, padding=0,
                         dilation=1, groups: int = 1, *, algorithm: Any = "auto", out: Any = None,
                         workspace_limit: int | None = None, stream: Any = None) -> Any:
    """dx (input_shape = (N, C, D, H, W)) from grad_out (N, K, Do, P, Q) and weight (K, C/groups, T, R, S)."""
    return _call("conv3d_backward_data",
                 lambda: dgrad_problem(grad_out, weight, input_shape, stride, padding, dilation, groups, nd=3),
                 {"grad_out": grad_out, "weight": weight}, None, out,
                 (input_shape, stride, padding, dilation, groups), algorithm, workspace_limit, stream)


def conv3d_backward_weight(x: Any, grad_out: Any, weight_shape: Sequence[int], stride=1, padding=0,
                           dilation=1, groups: int = 1, *, algorithm: Any = "auto", out: Any = None,
                           workspace_limit: int | None = None, stream: Any = None) -> Any:
    """dw (weight_shape = (K, C/groups, T, R, S)) from x (N, C, D, H, W) and grad_out (N, K, Do, P, Q)."""
    return _call("conv3d_backward_weight",
                 lambda: wgrad_problem(x, grad_out, weight_shape, stride, padding, dilation, groups, nd=3),
                 {"x": x, "grad_out": grad_out}, None, out,
                 (weight_shape, stride, padding, dilation, groups), algorithm, workspace_limit, stream)


def conv_transpose3d(x: Any, weight: Any, bias: Any = None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1, *, algorithm: Any = "auto", out: Any = None,
                     workspace_limit: int | None = None, stream: Any = None, activation: Any = None,
                     residual: Any = None, residual_at: str = "before", scale: Any = None,
                     shift: Any = None) -> Any:
    """y (N, C_out, D_out, H_out, W_out) from x (N, C_in, D, H, W), weight (C_in, C_out/groups, T, R, S).
    The epilogue arguments are conv2d's (scale, shift: (C_out,)).
    """
    return _with_epilogue("conv_transpose3d", transpose_problem, x, weight, bias,
                          (stride, padding, output_padding, groups, dilation),
                          (out, algorithm, workspace_limit, stream), (activation, residual, residual_at, scale, shift),
                          nd=3)


# ---- a Problem through the public op of its N -----------------------------------------------------
def call_problem(problem: Problem, a: Any, b: Any, bias: Any = None, *, transpose: bool = False,
                 **kw: Any) -> Any:
    """Run ``problem`` on operands ``a``, ``b`` (and ``bias``) through the public op of its N that builds
    it, with the op's keyword arguments ``kw`` (``algorithm=``, ``out=``, ...): conv{N}d (forward),
    conv{N}d_backward_weight (wgrad), conv{N}d_backward_data (dgrad), or conv_transpose{N}d for a dgrad
    with a bias, of a transpose entry (``transpose``), or whose dx is larger than the forward formula of
    dy allows, with the output padding that gives dx's size."""
    pr = problem
    ops = {name: getattr(conv, name) if pr.ndim == 2 else globals()[name] for name in ND_OP_NAMES[pr.ndim].values()}
    names = ND_OP_NAMES[pr.ndim]
    geo = (pr.strides, pr.paddings, pr.dilations, pr.groups)
    if pr.ndim == 2:  # the 2D ops' own spellings (their plan keys)
        geo = (pr.stride, pr.padding, pr.dilation, pr.groups)
    if pr.op == "forward":
        return ops[names["forward"]](a, b, bias, *geo, **kw)
    if pr.op == "wgrad":
        return ops[names["wgrad"]](a, b, pr.w_shape, *geo, **kw)
    extra = tuple(size - ((o - 1) * st - 2 * pad + d * (k - 1) + 1) for size, o, st, pad, d, k in
                  zip(pr.spatial_in, pr.spatial_out, pr.strides, pr.paddings, pr.dilations, pr.kernel_size))
    if bias is None and not transpose and all(0 <= e < st for e, st in zip(extra, pr.strides)):
        return ops[names["dgrad"]](a, b, pr.x_shape, *geo, **kw)
    return ops[names["transpose"]](a, b, bias, geo[0], geo[1], extra, pr.groups, geo[2], **kw)
