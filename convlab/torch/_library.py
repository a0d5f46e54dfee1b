"""convlab's kernels as ``torch.library`` custom ops, so that ``torch.compile`` traces models that use
them without graph breaks (the path convlab.torch's functions take while compiling). For N = 1, 2, 3:

    convlab::conv{N}d(input, weight, bias?, stride, padding, dilation, groups, algorithm) -> Tensor
    convlab::conv_transpose{N}d(input, weight, bias?, stride, padding, output_padding, groups, dilation,
                                algorithm) -> Tensor
    convlab::conv{N}d_backward_data(grad_out, weight, input_shape, stride, padding, dilation, groups,
                                    algorithm) -> Tensor
    convlab::conv{N}d_backward_weight(input, grad_out, weight_shape, stride, padding, dilation, groups,
                                      algorithm) -> Tensor

Each op runs the same function as the eager path (convlab.torch._core); ``register_fake`` gives the
output shape (PyTorch's size formulas) and ``register_autograd`` the gradient formulas of _core
through these ops. The backward ops' own backward raises: double backward is not supported.
Integer lists arrive as lists; ``algorithm`` is a plugin name or "auto" (a string in the schema).
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import torch
from torch import Tensor

from convlab.problem import conv_output_size
from convlab.reference import transpose_output_size
from . import _core


class NdOps(NamedTuple):
    """The four custom ops of one N."""
    conv: object
    conv_transpose: object
    backward_data: object
    backward_weight: object


def _no_double_backward(ctx, grad):
    raise RuntimeError("convlab.torch: double backward (a gradient of a gradient, create_graph=True "
                       "through a convolution) is not supported")


def _setup(ctx, inputs, output) -> None:
    x, w, bias = inputs[:3]
    needs = ctx.needs_input_grad
    ctx.save_for_backward(x if needs[1] else None, w if needs[0] else None)
    ctx.x_shape, ctx.w_shape = tuple(x.shape), tuple(w.shape)
    ctx.params = inputs[3:]


def _define(nd: int) -> NdOps:
    """Define and register the custom ops of N = ``nd`` (the 2D ones are convlab::conv2d, ...)."""
    name = f"conv{nd}d"

    @torch.library.custom_op(f"convlab::{name}", mutates_args=())
    def conv(input: Tensor, weight: Tensor, bias: Optional[Tensor], stride: Sequence[int],
             padding: Sequence[int], dilation: Sequence[int], groups: int, algorithm: str) -> Tensor:
        return _core.conv2d(input, weight, bias, stride, padding, dilation, groups, algorithm)

    @torch.library.custom_op(f"convlab::conv_transpose{nd}d", mutates_args=())
    def conv_transpose(input: Tensor, weight: Tensor, bias: Optional[Tensor], stride: Sequence[int],
                       padding: Sequence[int], output_padding: Sequence[int], groups: int,
                       dilation: Sequence[int], algorithm: str) -> Tensor:
        return _core.conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups, dilation,
                                      algorithm)

    @torch.library.custom_op(f"convlab::{name}_backward_data", mutates_args=())
    def backward_data(grad_out: Tensor, weight: Tensor, input_shape: Sequence[int], stride: Sequence[int],
                      padding: Sequence[int], dilation: Sequence[int], groups: int, algorithm: str) -> Tensor:
        return _core.backward_data(grad_out, weight, input_shape, stride, padding, dilation, groups, algorithm)

    @torch.library.custom_op(f"convlab::{name}_backward_weight", mutates_args=())
    def backward_weight(input: Tensor, grad_out: Tensor, weight_shape: Sequence[int], stride: Sequence[int],
                        padding: Sequence[int], dilation: Sequence[int], groups: int,
                        algorithm: str) -> Tensor:
        return _core.backward_weight(input, grad_out, weight_shape, stride, padding, dilation, groups,
                                     algorithm)

    @conv.register_fake
    def _(input, weight, bias, stride, padding, dilation, groups, algorithm):
        outs = [conv_output_size(*a) for a in zip(input.shape[2:], weight.shape[2:], stride, padding, dilation)]
        return _core.empty_output(input, (input.shape[0], weight.shape[0], *outs))

    @conv_transpose.register_fake
    def _(input, weight, bias, stride, padding, output_padding, groups, dilation, algorithm):
        outs = [transpose_output_size(*a) for a in zip(input.shape[2:], weight.shape[2:], stride, padding,
                                                       output_padding, dilation)]
        return _core.empty_output(input, (input.shape[0], weight.shape[1] * groups, *outs))

    @backward_data.register_fake
    def _(grad_out, weight, input_shape, stride, padding, dilation, groups, algorithm):
        return _core.empty_output(grad_out, input_shape)

    @backward_weight.register_fake
    def _(input, grad_out, weight_shape, stride, padding, dilation, groups, algorithm):
        return _core.empty_output(input, weight_shape)

    namespace = getattr(torch.ops.convlab, name)
    compiled = _core.Kernels(namespace, getattr(torch.ops.convlab, f"{name}_backward_data"),
                             getattr(torch.ops.convlab, f"{name}_backward_weight"))

    def conv_backward(ctx, grad):
        x, w = ctx.saved_tensors
        stride, padding, dilation, groups, algorithm = ctx.params
        grads = _core.conv2d_grads(compiled, ctx.needs_input_grad[:3], grad, x, w, ctx.x_shape, ctx.w_shape,
                                   stride, padding, dilation, groups, algorithm)
        return (*grads, None, None, None, None, None)

    def transpose_backward(ctx, grad):
        x, w = ctx.saved_tensors
        stride, padding, _, groups, dilation, algorithm = ctx.params
        grads = _core.transpose_grads(compiled, ctx.needs_input_grad[:3], grad, x, w, ctx.x_shape,
                                      ctx.w_shape, stride, padding, dilation, groups, algorithm)
        return (*grads, None, None, None, None, None, None)

    conv.register_autograd(conv_backward, setup_context=_setup)
    conv_transpose.register_autograd(transpose_backward, setup_context=_setup)
    backward_data.register_autograd(_no_double_backward)
    backward_weight.register_autograd(_no_double_backward)
    return NdOps(conv, conv_transpose, backward_data, backward_weight)


#: the custom ops of each N
OPS = {nd: _define(nd) for nd in (1, 2, 3)}
conv2d, conv_transpose2d, conv2d_backward_data, conv2d_backward_weight = OPS[2]
COMPILED = _core.Kernels(torch.ops.convlab.conv2d, torch.ops.convlab.conv2d_backward_data,
                         torch.ops.convlab.conv2d_backward_weight)
