"""``conv1d`` / ``conv2d`` / ``conv3d`` and ``conv_transpose1d`` / ``2d`` / ``3d`` with
``torch.nn.functional``'s signatures, differentiable, on convlab's kernels (one implementation for every
N: the 1D and 3D functions are the 2D ones on 3-D / 5-D tensors).

Call path: arguments are checked and normalised here (PyTorch-style errors, before any launch; string
padding resolved; unbatched (C, H, W) inputs get a batch of one; under ``torch.autocast`` floating
inputs other than float64 are cast to the autocast dtype, as torch's own convolutions are). Then:

- eager, when autograd records the call (grad mode on and an operand requires grad): an
  ``autograd.Function`` (cheaper than the dispatcher round trip of a custom op) whose forward and
  backward call convlab's ops through convlab.torch._core;
- eager with nothing to differentiate (inference, ``torch.no_grad``): the _core call alone;
- while ``torch.compile`` traces (``torch.compiler.is_compiling()``): the ``torch.ops.convlab.*``
  custom ops (convlab.torch._library), which run the same _core functions.

Backward computes only the gradients autograd asks for (``ctx.needs_input_grad``). Double backward
(``create_graph=True`` through a convolution) is not supported: the gradients are returned as
constants that raise a RuntimeError saying so when differentiated (torch's ``once_differentiable``
mechanism, which alone would miss the saved weight and input).

Epilogue: every function takes ``activation=``, ``residual=``, ``residual_at=``, ``scale=``, ``shift=``
(convlab.epilogue), differentiable in every operand (convlab.torch.epilogue).

Devices and streams: CUDA tensors are used in place, kernels run on PyTorch's current stream of the
tensor's device (autograd runs a backward op on the stream its forward ran on, so the backward kernels
follow it), and outputs and gradients come from torch's caching allocator. CPU tensors are copied to
the device and back (on a machine without a GPU: run on Numba's CUDA simulator, slowly; for tests and
notebooks).

Dtypes: float32, float64, float16 and bfloat16 tensors run in their dtype. Under ``torch.autocast``,
floating inputs other than float64 are cast to the autocast dtype first, as torch's convolutions are.
Half-precision problems run on the ``tensor_core`` plugin (forward, stride-1 dgrad, wgrad; groups 1)
or, for the rest (grouped, depthwise, strided dgrad), on the ``widen`` plugin (fp32 kernels on widened
copies); both accumulate in float32, as cuDNN does.

TF32: convlab does NOT read ``torch.backends.cudnn.allow_tf32`` (nor ``torch.backends.cudnn.conv.
fp32_precision``). float32 convolutions follow :func:`convlab.set_float32_precision` only: "highest"
(the default: float32 accuracy: fp32 FMA, or the ``tf32x3`` plugin's 3xTF32, each product within
3 * 2**-22) or "high" (TF32 tensor cores allowed). Why: convlab is a laboratory whose
results must not change with another library's global flag, and torch's flag defaults to allowing TF32
for cuDNN convolutions, which would silently lower convlab's default precision. To compare with cuDNN
like for like, set both: ``torch.backends.cudnn.allow_tf32 = False`` with convlab's "highest", or
``True`` with ``convlab.set_float32_precision("high")``.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F

from convlab.problem import as_tuple
from . import _core, _library
from ._core import DOUBLE_BACKWARD, _once  # noqa: F401  (DOUBLE_BACKWARD: re-exported)
from . import epilogue as _epilogue

Pair = tuple[int, ...]


class _Conv2d(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, bias, stride, padding, dilation, groups, algorithm):
        needs = ctx.needs_input_grad
        ctx.save_for_backward(x if needs[1] else None, w if needs[0] else None)
        ctx.shapes = (x.shape, w.shape)
        ctx.params = (stride, padding, dilation, groups, algorithm)
        return _core.conv2d(x, w, bias, stride, padding, dilation, groups, algorithm)  # any N

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        with torch.no_grad():
            grads = _core.conv2d_grads(_core.EAGER, ctx.needs_input_grad[:3], grad, x, w, *ctx.shapes,
                                       *ctx.params)
        return (*_once(grads, grad, x, w), None, None, None, None, None)


class _ConvTranspose2d(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, bias, stride, padding, output_padding, groups, dilation, algorithm):
        needs = ctx.needs_input_grad
        ctx.save_for_backward(x if needs[1] else None, w if needs[0] else None)
        ctx.shapes = (x.shape, w.shape)
        ctx.params = (stride, padding, dilation, groups, algorithm)
        return _core.conv_transpose2d(x, w, bias, stride, padding, output_padding, groups, dilation,
                                      algorithm)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        with torch.no_grad():
            grads = _core.transpose_grads(_core.EAGER, ctx.needs_input_grad[:3], grad, x, w, *ctx.shapes,
                                          *ctx.params)
        return (*_once(grads, grad, x, w), None, None, None, None, None, None)


# ---- arguments ------------------------------------------------------------------------------------------
def _tuple(value: Any, name: str, minimum: int, nd: int) -> Pair:
    if type(value) is int and value >= minimum:  # the common case, cheaply
        return (value,) * nd
    if isinstance(value, (list, tuple, torch.Size)) and len(value) == 1:
        value = value[0]
    return as_tuple(value, name, length=nd, minimum=minimum)


def _tensors(op: str, input: Any, weight: Any, bias: Any, nd: int) -> None:
    """TypeError / RuntimeError (PyTorch's wording) for non-tensors, ranks and devices."""
    for name, value in (("input", input), ("weight", weight), ("bias", bias)):
        if not isinstance(value, torch.Tensor) and not (name == "bias" and value is None):
            raise TypeError(f"{op}(): argument '{name}' must be Tensor, not {type(value).__name__}")
    if input.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"{op}(): expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input, but got "
                           f"input of size {list(input.shape)}")
    if weight.dim() != nd + 2:
        raise RuntimeError(f"{op}(): expected a {nd + 2}D weight, but got weight of size {list(weight.shape)}")
    for name, value in (("weight", weight), ("bias", bias)):
        if value is not None and (value.get_device() != input.get_device()  # -1: CPU (or meta)
                                  or value.is_meta != input.is_meta):
            raise RuntimeError(f"{op}(): expected all tensors to be on the same device, but input is on "
                               f"{input.device} and {name} on {value.device}")


def _autocast(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> tuple:
    """Inputs cast to the autocast dtype when autocast is on for their device (float64 left alone, as
    torch's autocast does)."""
    if not torch._C._is_any_autocast_enabled():  # one C call: the common case
        return input, weight, bias
    device = input.device.type
    if not torch.is_autocast_enabled(device):
        return input, weight, bias
    dtype = torch.get_autocast_dtype(device)

    def cast(t):
        return t if t is None or not t.is_floating_point() or t.dtype == torch.float64 else t.to(dtype)
    return cast(input), cast(weight), cast(bias)


def _same_padding(input: torch.Tensor, weight: torch.Tensor, stride: Pair, dilation: Pair) -> tuple:
    """(input, padding) for padding="same": symmetric where the total d*(k-1) is even; an odd total's
    extra row/column goes to the bottom/right (the end of each axis) through F.pad (PyTorch's placement)."""
    if any(s != 1 for s in stride):
        raise ValueError(f"padding='same' is not supported for strided convolutions (stride={stride})")
    totals = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
    if any(t % 2 for t in totals):
        input = F.pad(input, [v for t in reversed(totals) for v in (0, t % 2)])  # F.pad: last axis first
    return input, tuple(t // 2 for t in totals)


def _algorithm(op: str, algorithm: Any) -> str:
    if type(algorithm) is not str:
        raise TypeError(f"{op}(): algorithm must be 'auto' or a plugin name (a string: the same plugin "
                        f"serves forward, dgrad and wgrad), got {algorithm!r}")
    return algorithm


def _records_graph(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """True when autograd records this call: grad mode on and some operand requires grad."""
    return torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad
                                        or (bias is not None and bias.requires_grad))


# ---- the ops (one implementation for every N) -----------------------------------------------------------
def _conv(nd: int, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Any,
          padding: Any, dilation: Any, groups: int, algorithm: str, epilogue: dict | None = None) -> torch.Tensor:
    op = f"conv{nd}d"
    _tensors(op, input, weight, bias, nd)
    _algorithm(op, algorithm)
    input, weight, bias = _autocast(input, weight, bias)
    unbatched = input.dim() == nd + 1
    if unbatched:
        input = input.unsqueeze(0)
    st, dl = _tuple(stride, "stride", 1, nd), _tuple(dilation, "dilation", 1, nd)
    if isinstance(padding, str):
        if padding == "same":
            input, pd = _same_padding(input, weight, st, dl)
        elif padding == "valid":
            pd = (0,) * nd
        else:
            raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
    else:
        pd = _tuple(padding, "padding", 0, nd)
    if epilogue is not None:
        y = _epilogue.convolve("conv", nd, input, weight, bias, (st, pd, dl, groups), algorithm,
                          _epilogue.batched(epilogue, unbatched))
    elif torch.compiler.is_compiling():
        y = _library.OPS[nd].conv(input, weight, bias, st, pd, dl, groups, algorithm)
    elif _records_graph(input, weight, bias):
        y = _Conv2d.apply(input, weight, bias, st, pd, dl, groups, algorithm)
    else:  # nothing to differentiate: the kernel call alone (autograd.Function.apply costs ~5 us)
        y = _core.conv2d(input, weight, bias, st, pd, dl, groups, algorithm)
    return y.squeeze(0) if unbatched else y


def _conv_transpose(nd: int, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                    stride: Any, padding: Any, output_padding: Any, groups: int, dilation: Any,
                    algorithm: str, epilogue: dict | None = None) -> torch.Tensor:
    op = f"conv_transpose{nd}d"
    _tensors(op, input, weight, bias, nd)
    _algorithm(op, algorithm)
    if isinstance(padding, str):
        form = "a pair of ints" if nd == 2 else f"a tuple of {nd} ints"
        raise ValueError(f"{op}(): padding must be an int or {form}, got {padding!r}")
    input, weight, bias = _autocast(input, weight, bias)
    unbatched = input.dim() == nd + 1
    if unbatched:
        input = input.unsqueeze(0)
    st, pd = _tuple(stride, "stride", 1, nd), _tuple(padding, "padding", 0, nd)
    op, dl = _tuple(output_padding, "output_padding", 0, nd), _tuple(dilation, "dilation", 1, nd)
    if epilogue is not None:
        y = _epilogue.convolve("transpose", nd, input, weight, bias, (st, pd, op, groups, dl), algorithm,
                          _epilogue.batched(epilogue, unbatched))
    elif torch.compiler.is_compiling():
        y = _library.OPS[nd].conv_transpose(input, weight, bias, st, pd, op, groups, dl, algorithm)
    elif _records_graph(input, weight, bias):
        y = _ConvTranspose2d.apply(input, weight, bias, st, pd, op, groups, dl, algorithm)
    else:
        y = _core.conv_transpose2d(input, weight, bias, st, pd, op, groups, dl, algorithm)
    return y.squeeze(0) if unbatched else y


def conv2d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1, *, algorithm: str = "auto",
           activation: Any = None, residual: torch.Tensor | None = None, residual_at: str = "before",
           scale: Any = None, shift: Any = None) -> torch.Tensor:
    """``torch.nn.functional.conv2d`` on convlab's kernels: y (N, K, P, Q) from input (N, C, H, W) (or
    (C, H, W)), weight (K, C/groups, R, S) and bias (K,). ``padding``: int, pair, "valid" or "same".
    ``algorithm``: "auto" or a plugin name (used for each of forward/dgrad/wgrad it implements, "auto"
    for the others; a (name, config) pair is for the base ops only). ``activation``, ``residual`` (y's
    shape and dtype), ``residual_at``, ``scale`` (K,), ``shift`` (K,): an epilogue (convlab.epilogue)."""
    return _conv(2, input, weight, bias, stride, padding, dilation, groups, algorithm,
                 _epilogue.keywords(activation, residual, residual_at, scale, shift))


def conv1d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1, *, algorithm: str = "auto",
           activation: Any = None, residual: torch.Tensor | None = None, residual_at: str = "before",
           scale: Any = None, shift: Any = None) -> torch.Tensor:
    """``torch.nn.functional.conv1d``: y (N, K, Lo) from input (N, C, L) (or (C, L)), weight (K, C/groups,
    S), bias (K,); run as its 2D embedding (convlab.ops.conv_nd). Arguments as :func:`conv2d`'s."""
    return _conv(1, input, weight, bias, stride, padding, dilation, groups, algorithm,
                 _epilogue.keywords(activation, residual, residual_at, scale, shift))


def conv3d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1, *, algorithm: str = "auto",
           activation: Any = None, residual: torch.Tensor | None = None, residual_at: str = "before",
           scale: Any = None, shift: Any = None) -> torch.Tensor:
    """``torch.nn.functional.conv3d``: y (N, K, Do, P, Q) from input (N, C, D, H, W) (or (C, D, H, W)),
    weight (K, C/groups, T, R, S), bias (K,). Arguments as :func:`conv2d`'s."""
    return _conv(3, input, weight, bias, stride, padding, dilation, groups, algorithm,
                 _epilogue.keywords(activation, residual, residual_at, scale, shift))


def conv_transpose2d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                     stride: Any = 1, padding: Any = 0, output_padding: Any = 0, groups: int = 1,
                     dilation: Any = 1, *, algorithm: str = "auto", activation: Any = None,
                     residual: torch.Tensor | None = None, residual_at: str = "before", scale: Any = None,
                     shift: Any = None) -> torch.Tensor:
    """``torch.nn.functional.conv_transpose2d`` on convlab's kernels: y (N, C_out, H_out, W_out) from
    input (N, C_in, H, W) (or (C_in, H, W)), weight (C_in, C_out/groups, R, S) and bias (C_out,)."""
    return _conv_transpose(2, input, weight, bias, stride, padding, output_padding, groups, dilation,
                           algorithm, _epilogue.keywords(activation, residual, residual_at, scale, shift))


def conv_transpose1d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                     stride: Any = 1, padding: Any = 0, output_padding: Any = 0, groups: int = 1,
                     dilation: Any = 1, *, algorithm: str = "auto", activation: Any = None,
                     residual: torch.Tensor | None = None, residual_at: str = "before", scale: Any = None,
                     shift: Any = None) -> torch.Tensor:
    """``torch.nn.functional.conv_transpose1d``: y (N, C_out, L_out) from input (N, C_in, L), weight
    (C_in, C_out/groups, S), bias (C_out,)."""
    return _conv_transpose(1, input, weight, bias, stride, padding, output_padding, groups, dilation,
                           algorithm, _epilogue.keywords(activation, residual, residual_at, scale, shift))


def conv_transpose3d(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                     stride: Any = 1, padding: Any = 0, output_padding: Any = 0, groups: int = 1,
                     dilation: Any = 1, *, algorithm: str = "auto", activation: Any = None,
                     residual: torch.Tensor | None = None, residual_at: str = "before", scale: Any = None,
                     shift: Any = None) -> torch.Tensor:
    """``torch.nn.functional.conv_transpose3d``: y (N, C_out, D_out, H_out, W_out) from input
    (N, C_in, D, H, W), weight (C_in, C_out/groups, T, R, S), bias (C_out,)."""
    return _conv_transpose(3, input, weight, bias, stride, padding, output_padding, groups, dilation,
                           algorithm, _epilogue.keywords(activation, residual, residual_at, scale, shift))


__all__: Sequence[str] = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                          "conv_transpose3d"]
