"""The computations behind convlab.torch: each forward op and the gradient formulas, written once and
used by both call paths (the eager ``autograd.Function`` and the ``torch.library`` custom ops).

Kernel calls (``conv2d``, ``backward_data``, ``backward_weight``, ``conv_transpose2d`` here) run
convlab's public ops of the operands' N on torch tensors (N = rank - 2: a 3-D tensor runs conv1d, a
5-D one conv3d; the formulas below hold per spatial axis) (CUDA: on torch's current stream, outputs from torch's caching
allocator; CPU: through the simulator or a host copy). The gradient formulas take a :class:`Kernels`
namespace, so the eager path calls the functions below directly and the compiled path calls the same
functions through ``torch.ops.convlab.*`` (which ``torch.compile`` can trace).

Gradients, with ``F`` the forward convolution ``y = F_w(x)`` (NCHW; ``w`` is (K, C/groups, R, S)):

    conv2d:            dx = dgrad(dy, w)             dw = wgrad(x, dy)            db = sum_{N,P,Q} dy
    conv_transpose2d:  y = F_w^T(x) (the dgrad of the forward conv mapping y's shape to x's), so
                       dx = F_w(dy) = conv2d(dy, w)  dw = wgrad(dy, x)            db = sum_{N,H,W} dy

(for the transpose, ``<dy, F_w^T x> = <F_w dy, x>``: the forward conv's input is dy and its output
gradient is x). With ``output_padding >= stride`` (allowed when smaller than the dilation) the forward
conv of dy has more rows than x: dx keeps the first H (W) of them and wgrad sees x zero-padded to that
size, the rows y never read.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import torch
import torch.nn.functional as F

from convlab import ops
from convlab.call.operands import is_channels_last
from convlab.plugin import registry
from convlab.problem import conv_output_size
from . import bound_calls


def _contiguous(t: torch.Tensor | None) -> torch.Tensor | None:
    """``t`` as convlab's ops take it: C-contiguous or channels-last tensors as they are (a
    channels-last model gets channels-last outputs), any other layout copied to C-contiguous."""
    if t is None or t.is_contiguous() or is_channels_last(t):
        return t
    return t.contiguous()


def empty_output(first: torch.Tensor, shape: Sequence[int]) -> torch.Tensor:
    """An empty tensor shaped like the op's output in the layout the op gives it: channels-last when
    the first operand is a channels-last CUDA tensor (convlab.kernels.data.layouts; CPU tensors give C-contiguous
    results), else C-contiguous (the fake implementations of convlab.torch._library)."""
    channels_last = first.is_cuda and is_channels_last(first)
    layout = torch.contiguous_format
    if channels_last:
        layout = torch.channels_last_3d if len(shape) == 5 else torch.channels_last
    return torch.empty(tuple(shape), dtype=first.dtype, device=first.device, memory_format=layout)


def _algorithm_for(op: str, algorithm: str) -> str:
    """``algorithm`` for the convlab op ``op`` (forward/dgrad/wgrad); "auto" where the named plugin
    does not implement that op (a forced forward plugin must not break the backward pass)."""
    if algorithm == "auto":
        return algorithm
    return algorithm if op in registry.get(algorithm).ops else "auto"


def _run(op: str, operands: tuple, args: tuple, algorithm: str, epilogue: dict | None = None) -> torch.Tensor:
    """``convlab.<op>(*operands, *args, algorithm=..., **epilogue)`` on C-contiguous or channels-last
    operands (float16 / bfloat16 problems no native half kernel runs go to the ``widen`` plugin, like
    any other choice); ``op`` is the 2D name, run as the op of the first operand's N. ``epilogue``: the
    forward ops' ``activation`` / ``residual`` / ``residual_at`` / ``scale`` / ``shift`` keywords. A
    repeated device call replays its plan first (convlab.torch.bound_calls)."""
    nd = operands[0].dim() - 2
    name = op.replace("2d", f"{nd}d")
    if nd != 1:  # the 1D ops run on unit-height views: their calls take the op (convlab.ops.conv_nd)
        y = bound_calls.replay(name, operands, args, algorithm, epilogue,
                               lambda given: _algorithm_for(_KIND[op], given))
        if y is not None:
            return y
    return getattr(ops, name)(*map(_contiguous, operands), *args, algorithm=_algorithm_for(_KIND[op], algorithm),
                              **(epilogue or {}))


_KIND = {"conv2d": "forward", "conv2d_backward_data": "dgrad", "conv2d_backward_weight": "wgrad",
         "conv_transpose2d": "dgrad"}


def conv2d(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
           padding: Sequence[int], dilation: Sequence[int], groups: int, algorithm: str,
           epilogue: dict | None = None) -> torch.Tensor:
    """y (N, K, P, Q) through convlab.conv2d (with ``epilogue``'s keywords, see :func:`_run`)."""
    return _run("conv2d", (x, w, bias), (tuple(stride), tuple(padding), tuple(dilation), groups),
                algorithm, epilogue)


def backward_data(dy: torch.Tensor, w: torch.Tensor, input_shape: Sequence[int], stride: Sequence[int],
                  padding: Sequence[int], dilation: Sequence[int], groups: int,
                  algorithm: str) -> torch.Tensor:
    """dx (input_shape) through convlab.conv2d_backward_data."""
    return _run("conv2d_backward_data", (dy, w),
                (tuple(input_shape), tuple(stride), tuple(padding), tuple(dilation), groups), algorithm)


def backward_weight(x: torch.Tensor, dy: torch.Tensor, weight_shape: Sequence[int], stride: Sequence[int],
                    padding: Sequence[int], dilation: Sequence[int], groups: int,
                    algorithm: str) -> torch.Tensor:
    """dw (weight_shape) through convlab.conv2d_backward_weight."""
    return _run("conv2d_backward_weight", (x, dy),
                (tuple(weight_shape), tuple(stride), tuple(padding), tuple(dilation), groups), algorithm)


def conv_transpose2d(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
                     padding: Sequence[int], output_padding: Sequence[int], groups: int,
                     dilation: Sequence[int], algorithm: str, epilogue: dict | None = None) -> torch.Tensor:
    """y (N, C_out, H_out, W_out) through convlab.conv_transpose2d (a dgrad problem; ``epilogue`` as
    :func:`conv2d`'s)."""
    return _run("conv_transpose2d", (x, w, bias),
                (tuple(stride), tuple(padding), tuple(output_padding), groups, tuple(dilation)), algorithm,
                epilogue)


class Kernels(NamedTuple):
    """The kernel calls a gradient formula uses (signatures of the functions above)."""
    conv2d: Callable[..., torch.Tensor]
    backward_data: Callable[..., torch.Tensor]
    backward_weight: Callable[..., torch.Tensor]


EAGER = Kernels(conv2d, backward_data, backward_weight)


def bias_grad(dy: torch.Tensor) -> torch.Tensor:
    """db (K,) = dy summed over N and the spatial axes (in dy's dtype, also when called under autocast)."""
    return dy.sum((0,) + tuple(range(2, dy.dim()))).to(dy.dtype)


def conv2d_grads(k: Kernels, needs: Sequence[bool], dy: torch.Tensor, x: torch.Tensor | None,
                 w: torch.Tensor | None, x_shape: Sequence[int], w_shape: Sequence[int],
                 stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], groups: int,
                 algorithm: str) -> tuple:
    """(dx, dw, db) of conv2d, each None unless ``needs`` (input, weight, bias) asks for it; ``x`` is
    needed for dw only and ``w`` for dx only."""
    args = (stride, padding, dilation, groups, algorithm)
    dx = k.backward_data(dy, w, list(x_shape), *args) if needs[0] else None
    dw = k.backward_weight(x, dy, list(w_shape), *args) if needs[1] else None
    return dx, dw, bias_grad(dy) if needs[2] else None


def transpose_grads(k: Kernels, needs: Sequence[bool], dy: torch.Tensor, x: torch.Tensor | None,
                    w: torch.Tensor | None, x_shape: Sequence[int], w_shape: Sequence[int],
                    stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], groups: int,
                    algorithm: str) -> tuple:
    """(dx, dw, db) of conv_transpose2d (see the module docstring), each None unless needed."""
    sizes = tuple(x_shape[2:])
    outs = tuple(conv_output_size(n, k, st, pd, dl) for n, k, st, pd, dl in
                 zip(dy.shape[2:], w_shape[2:], stride, padding, dilation))
    dx = dw = None
    if needs[0]:
        dx = k.conv2d(dy, w, None, stride, padding, dilation, groups, algorithm)
        if outs != sizes:
            dx = dx[(slice(None), slice(None)) + tuple(slice(0, n) for n in sizes)]
    if needs[1]:
        pads = [v for o, n in zip(reversed(outs), reversed(sizes)) for v in (0, o - n)]  # F.pad: last axis first
        xp = x if outs == sizes else F.pad(x, pads)
        dw = k.backward_weight(dy, xp, list(w_shape), stride, padding, dilation, groups, algorithm)
    return dx, dw, bias_grad(dy) if needs[2] else None


DOUBLE_BACKWARD = ("convlab.torch: double backward (differentiating a gradient of a convlab convolution, "
                   "create_graph=True) is not supported")


def _once(grads: tuple, *used: torch.Tensor | None) -> tuple:
    """``grads``, computed without a graph, marked to raise :data:`DOUBLE_BACKWARD` when differentiated,
    if the backward runs with create_graph=True on tensors that require grad."""
    if not (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in used)):
        return grads
    fake = [None if g is None else g.detach().requires_grad_() for g in grads]
    return torch._C._functions.DelayedError(DOUBLE_BACKWARD, len(fake))(*fake)
