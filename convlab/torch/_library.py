"""convlab's kernels as ``torch.library`` custom ops, so that ``torch.compile`` traces models that use
them without graph breaks (the path convlab.torch's functions take while compiling):

    convlab::conv2d(input, weight, bias?, stride, padding, dilation, groups, algorithm) -> Tensor
    convlab::conv_transpose2d(input, weight, bias?, stride, padding, output_padding, groups, dilation,
                              algorithm) -> Tensor
    convlab::conv2d_backward_data(grad_out, weight, input_shape, stride, padding, dilation, groups,
                                  algorithm) -> Tensor
    convlab::conv2d_backward_weight(input, grad_out, weight_shape, stride, padding, dilation, groups,
                                    algorithm) -> Tensor

Each op runs the same function as the eager path (convlab.torch._core); ``register_fake`` gives the
output shape (PyTorch's size formulas) and ``register_autograd`` the gradient formulas of _core
through these ops. The backward ops' own backward raises: double backward is not supported.
Integer lists arrive as lists; ``algorithm`` is a plugin name or "auto" (a string in the schema).
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import Tensor

from convlab.problem import conv_output_size
from convlab.reference import transpose_output_size
from . import _core


@torch.library.custom_op("convlab::conv2d", mutates_args=())
def conv2d(input: Tensor, weight: Tensor, bias: Optional[Tensor], stride: Sequence[int],
           padding: Sequence[int], dilation: Sequence[int], groups: int, algorithm: str) -> Tensor:
    return _core.conv2d(input, weight, bias, stride, padding, dilation, groups, algorithm)


@torch.library.custom_op("convlab::conv_transpose2d", mutates_args=())
def conv_transpose2d(input: Tensor, weight: Tensor, bias: Optional[Tensor], stride: Sequence[int],
                     padding: Sequence[int], output_padding: Sequence[int], groups: int,
                     dilation: Sequence[int], algorithm: str) -> Tensor:
    return _core.conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups, dilation,
                                  algorithm)


@torch.library.custom_op("convlab::conv2d_backward_data", mutates_args=())
def conv2d_backward_data(grad_out: Tensor, weight: Tensor, input_shape: Sequence[int],
                         stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                         groups: int, algorithm: str) -> Tensor:
    return _core.backward_data(grad_out, weight, input_shape, stride, padding, dilation, groups, algorithm)


@torch.library.custom_op("convlab::conv2d_backward_weight", mutates_args=())
def conv2d_backward_weight(input: Tensor, grad_out: Tensor, weight_shape: Sequence[int],
                           stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                           groups: int, algorithm: str) -> Tensor:
    return _core.backward_weight(input, grad_out, weight_shape, stride, padding, dilation, groups,
                                 algorithm)


# ---- shapes -------------------------------------------------------------------------------------------
@conv2d.register_fake
def _(input, weight, bias, stride, padding, dilation, groups, algorithm):
    p = conv_output_size(input.shape[2], weight.shape[2], stride[0], padding[0], dilation[0])
    q = conv_output_size(input.shape[3], weight.shape[3], stride[1], padding[1], dilation[1])
    return _core.empty_output(input, (input.shape[0], weight.shape[0], p, q))


@conv_transpose2d.register_fake
def _(input, weight, bias, stride, padding, output_padding, groups, dilation, algorithm):
    h = transpose_output_size(input.shape[2], weight.shape[2], stride[0], padding[0], output_padding[0],
                              dilation[0])
    w = transpose_output_size(input.shape[3], weight.shape[3], stride[1], padding[1], output_padding[1],
                              dilation[1])
    return _core.empty_output(input, (input.shape[0], weight.shape[1] * groups, h, w))


@conv2d_backward_data.register_fake
def _(grad_out, weight, input_shape, stride, padding, dilation, groups, algorithm):
    return _core.empty_output(grad_out, input_shape)


@conv2d_backward_weight.register_fake
def _(input, grad_out, weight_shape, stride, padding, dilation, groups, algorithm):
    return _core.empty_output(input, weight_shape)


# ---- autograd -----------------------------------------------------------------------------------------
COMPILED = _core.Kernels(torch.ops.convlab.conv2d, torch.ops.convlab.conv2d_backward_data,
                         torch.ops.convlab.conv2d_backward_weight)


def _setup(ctx, inputs, output) -> None:
    x, w, bias = inputs[:3]
    needs = ctx.needs_input_grad
    ctx.save_for_backward(x if needs[1] else None, w if needs[0] else None)
    ctx.x_shape, ctx.w_shape = tuple(x.shape), tuple(w.shape)
    ctx.params = inputs[3:]


def _conv2d_backward(ctx, grad):
    x, w = ctx.saved_tensors
    stride, padding, dilation, groups, algorithm = ctx.params
    grads = _core.conv2d_grads(COMPILED, ctx.needs_input_grad[:3], grad, x, w, ctx.x_shape, ctx.w_shape,
                               stride, padding, dilation, groups, algorithm)
    return (*grads, None, None, None, None, None)


def _transpose_backward(ctx, grad):
    x, w = ctx.saved_tensors
    stride, padding, _, groups, dilation, algorithm = ctx.params
    grads = _core.transpose_grads(COMPILED, ctx.needs_input_grad[:3], grad, x, w, ctx.x_shape,
                                  ctx.w_shape, stride, padding, dilation, groups, algorithm)
    return (*grads, None, None, None, None, None, None)


def _no_double_backward(ctx, grad):
    raise RuntimeError("convlab.torch: double backward (a gradient of a gradient, create_graph=True "
                       "through a convolution) is not supported")


conv2d.register_autograd(_conv2d_backward, setup_context=_setup)
conv_transpose2d.register_autograd(_transpose_backward, setup_context=_setup)
conv2d_backward_data.register_autograd(_no_double_backward)
conv2d_backward_weight.register_autograd(_no_double_backward)
