"""``convert(model, fuse=True)``: Conv -> BatchNorm -> activation (-> residual add) chains run as one
convlab convolution with an epilogue (convlab.epilogue), and ``revert`` undoing it.

What is fused, per chain (a convolution ``nn.Conv1d`` / ``2d`` / ``3d``, or convlab's, of one call site):

- a BatchNorm of the conv's N in eval mode with running statistics: folded into the conv's weight and
  bias, computed in float64 and cast once (``w' = w * s``, ``b' = (b - mean) * s + beta``,
  ``s = gamma / sqrt(var + eps)``). A BatchNorm in training mode stays (its batch statistics need the
  convolution's output), and so does what follows it: only exact rewrites are made.
- an activation module or function: ReLU, ReLU6, LeakyReLU, GELU (erf or tanh), SiLU, Sigmoid,
  Hardswish, Identity. Any other (Tanh, ELU, ...) ends the chain and runs as it did.
- an add of a tensor that does not depend on the chain (torch.fx graphs only), before or after the
  activation (BasicBlock's ``relu(bn2(conv2(x)) + identity)`` is "before").

torch.fx (:mod:`convlab.torch.fuse_graph`) finds chains where ``model`` traces; the result is a new
``torch.fx.GraphModule`` sharing the original's modules, and the original model object is left as it
was. Where it does not trace, neighbours in ``nn.Sequential`` containers are fused in place: the
convolution becomes a :class:`FusedConv2d` (1d, 3d) and the fused modules :class:`Fused` placeholders.
``revert`` gives back the original modules (the same objects, so parameters and buffers are bit for bit
the originals; a folded module holds new weight and bias tensors of its own).

The fused module's repr names what it fused (``fused=BatchNorm2d(folded)+relu+add(before)``) and
:func:`fusions` lists every fused layer of a model. A module with a folded BatchNorm is for inference:
its forward in training mode raises (convert again in training mode to train). A residual the fused
kernel cannot take (another shape that broadcasts, another dtype or device, autocast) is added by torch
after an unfused convolution: the result is torch's, only slower.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from convlab.epilogue import DEFAULT_NEGATIVE_SLOPE
from convlab.problem import conv_output_size
from . import epilogue as _epilogue, steady
from .functional import _conv
from .modules import Conv1d, Conv2d, Conv3d, _recast

#: convolutions a chain starts from (exact classes; subclasses may have a forward of their own)
CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, Conv1d, Conv2d, Conv3d)
_BATCHNORMS = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}


def module_activation(module: Any) -> tuple[str, float] | None:
    """(convlab activation, negative slope) of an activation module; None when it is no fusable one."""
    kind = type(module)
    if kind is nn.LeakyReLU:
        return "leaky_relu", float(module.negative_slope)
    if kind is nn.GELU:
        name = {"none": "gelu", "tanh": "gelu_tanh"}.get(module.approximate)
        return None if name is None else (name, DEFAULT_NEGATIVE_SLOPE)
    name = {nn.ReLU: "relu", nn.ReLU6: "relu6", nn.SiLU: "silu", nn.Sigmoid: "sigmoid",
            nn.Hardswish: "hardswish", nn.Identity: "identity"}.get(kind)
    return None if name is None else (name, DEFAULT_NEGATIVE_SLOPE)


def foldable(conv: nn.Module, bn: Any) -> bool:
    """Whether ``bn`` is an eval-mode BatchNorm of ``conv``'s N with running statistics for its channels."""
    nd = len(conv.kernel_size)
    return (type(bn) is _BATCHNORMS[nd] and not bn.training and bn.running_mean is not None
            and bn.running_var is not None and bn.num_features == conv.out_channels)


def fold(conv: nn.Module, bn: nn.Module) -> tuple[nn.Parameter, nn.Parameter]:
    """(weight, bias) of ``conv`` followed by the eval-mode ``bn``, in float64 then cast to conv's dtype."""
    w = conv.weight.detach().double()
    mean, var = bn.running_mean.double(), bn.running_var.double()
    gamma = bn.weight.detach().double() if bn.weight is not None else torch.ones_like(mean)
    beta = bn.bias.detach().double() if bn.bias is not None else torch.zeros_like(mean)
    s = gamma / torch.sqrt(var + bn.eps)
    b = conv.bias.detach().double() if conv.bias is not None else torch.zeros_like(mean)
    weight = (w * s.reshape((-1,) + (1,) * (w.dim() - 1))).to(conv.weight.dtype)
    bias = ((b - mean) * s + beta).to(conv.weight.dtype)
    return (nn.Parameter(weight, requires_grad=conv.weight.requires_grad),
            nn.Parameter(bias, requires_grad=conv.weight.requires_grad))


class _FusedConv:
    """What a fused convolution adds to convlab's: the epilogue it runs and the modules it replaced."""
    activation: str = "identity"
    negative_slope: float = DEFAULT_NEGATIVE_SLOPE
    residual_at: str | None = None
    folded: bool = False
    fused_from: tuple = ()
    _originals: tuple = ()

    def forward(self, input: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """y = act(conv(input) [+ residual]) [+ residual]: input (N, C, *spatial) or unbatched; residual
        shaped like y where the chain had an add (``residual_at``)."""
        if self.folded and self.training:  # type: ignore[attr-defined]
            raise RuntimeError(f"{type(self).__name__} holds a BatchNorm folded for inference; call .eval(), "
                               f"or revert and convert the model again in training mode to train it")
        if (residual is None) != (self.residual_at is None):
            raise TypeError(f"{type(self).__name__}: a residual is expected exactly when residual_at is "
                            f"set (residual_at={self.residual_at!r})")
        at = self.residual_at or "before"
        activation = (("leaky_relu", self.negative_slope) if self.activation == "leaky_relu" else
                      self.activation)
        y = steady.forward(self, input, self.weight, self.bias, activation=activation,  # type: ignore[attr-defined]
                           residual=residual, residual_at=self.residual_at)
        if y is not None:
            return y
        if residual is not None and not self._fits(input, residual):
            y = self._run(input, None)
            spec = _epilogue.Spec("conv", (), "auto", self.activation, self.negative_slope, at)
            return _epilogue.apply(y, spec, residual, None, None)
        return self._run(input, _epilogue.keywords(activation, residual, at, None, None))

    def _run(self, input: torch.Tensor, epilogue: dict | None) -> torch.Tensor:
        nd, conv = self._nd, self  # type: ignore[attr-defined]
        if conv.padding_mode != "zeros":
            input = nn.functional.pad(input, conv._reversed_padding_repeated_twice, mode=conv.padding_mode)
            return _conv(nd, input, conv.weight, conv.bias, conv.stride, 0, conv.dilation, conv.groups,
                         conv.algorithm, epilogue)
        return _conv(nd, input, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups,
                     conv.algorithm, epilogue)

    def _fits(self, input: torch.Tensor, residual: torch.Tensor) -> bool:
        """Whether ``residual`` has y's exact shape, dtype and device (the fused kernel's operand)."""
        conv = self
        if (residual.dtype != input.dtype or residual.device != input.device
                or torch._C._is_any_autocast_enabled() or residual.dim() != input.dim()):
            return False
        sizes = input.shape[-self._nd:]  # type: ignore[attr-defined]
        if conv.padding == "same":
            outs = tuple(sizes)
        else:
            pads = (0,) * len(sizes) if conv.padding == "valid" else conv.padding
            outs = tuple(conv_output_size(*a) for a in zip(sizes, conv.kernel_size, conv.stride, pads,
                                                             conv.dilation))
        want = tuple(input.shape[:-self._nd - 1]) + (conv.out_channels,) + outs  # type: ignore[attr-defined]
        return tuple(residual.shape) == want

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, fused={'+'.join(self.fused_from)}"  # type: ignore[misc]


class FusedConv1d(_FusedConv, Conv1d):
    """A convlab Conv1d with the chain it replaced as its epilogue."""
    _nd = 1


class FusedConv2d(_FusedConv, Conv2d):
    """A convlab Conv2d with the chain it replaced (BatchNorm folded, activation, residual add) as its
    epilogue; ``forward(input, residual=None)``."""
    _nd = 2


class FusedConv3d(_FusedConv, Conv3d):
    """A convlab Conv3d with the chain it replaced as its epilogue."""
    _nd = 3


_FUSED = {1: FusedConv1d, 2: FusedConv2d, 3: FusedConv3d}


class Fused(nn.Identity):
    """The place of a module fused into a convolution (its forward passes the input through); holds the
    original for :func:`revert`."""

    def __init__(self, original: nn.Module, into: str) -> None:
        super().__init__()
        self.__dict__["original"] = original  # not a submodule: its parameters are not the model's
        self.into = into

    def extra_repr(self) -> str:
        return f"{type(self.original).__name__} fused into {self.into}"


def fused_conv(conv: nn.Module, bn: nn.Module | None, activation: tuple[str, float] | None,
               residual_at: str | None, algorithm: str, originals: tuple) -> nn.Module:
    """The fused module of a chain: ``conv``'s state (its parameters shared, or BatchNorm folded into new
    ones), the activation and where a residual is added. ``originals``: the modules it replaces."""
    new = _recast(conv, _FUSED[len(conv.kernel_size)])
    new.algorithm, steps = algorithm, []
    if bn is not None:
        new.weight, new.bias = fold(conv, bn)
        new.folded = True
        steps.append(f"{type(bn).__name__}(folded)")
    if residual_at == "before":
        steps.append("add(before)")
    if activation is not None:
        new.activation, new.negative_slope = activation
        steps.append(activation[0] if activation[0] != "leaky_relu" else f"leaky_relu({activation[1]})")
    if residual_at == "after":
        steps.append("add(after)")
    new.residual_at, new.fused_from, new._originals = residual_at, tuple(steps), originals
    return new


def fuse_sequential(model: nn.Module, algorithm: str) -> int:
    """Fuse neighbouring Conv, BatchNorm, activation children of every ``nn.Sequential`` of ``model``
    in place; the number of chains fused."""
    count = 0
    for seq in [m for m in model.modules() if type(m) is nn.Sequential]:
        names = list(seq._modules)
        i = 0
        while i < len(names):
            conv, j = seq._modules[names[i]], i + 1
            if type(conv) not in CONVS:
                i += 1
                continue
            bn = act = None
            if j < len(names) and foldable(conv, seq._modules[names[j]]):
                bn, j = seq._modules[names[j]], j + 1
            if j < len(names) and module_activation(seq._modules[names[j]]) is not None:
                act, j = module_activation(seq._modules[names[j]]), j + 1
            if j > i + 1:
                originals = tuple(seq._modules[n] for n in names[i:j])
                setattr(seq, names[i], fused_conv(conv, bn, act, None, algorithm, originals))
                for name in names[i + 1:j]:
                    setattr(seq, name, Fused(seq._modules[name], names[i]))
                count += 1
            i = j
    return count


def restore(model: nn.Module) -> nn.Module:
    """What :func:`convert` fused ``model`` from: the model a fused GraphModule was made of (kept in its
    ``meta``, which deepcopy keeps), else ``model`` with :func:`unfuse` applied."""
    meta = getattr(model, "meta", None) if isinstance(model, torch.fx.GraphModule) else None
    if isinstance(meta, dict) and "convlab_unfused" in meta:
        return meta["convlab_unfused"]
    if isinstance(model, torch.fx.GraphModule) and any(isinstance(m, _FusedConv) for m in model.modules()):
        raise ValueError("revert(): this fused GraphModule no longer holds the model it was made from "
                         "(meta['convlab_unfused']); convert the original model again")
    return unfuse(model)


def unfuse(model: nn.Module) -> nn.Module:
    """The original modules back in place of fused ones and their placeholders (in ``model`` and every
    submodule); returns the model (the original convolution when ``model`` itself is a fused one)."""
    if isinstance(model, _FusedConv):
        return model._originals[0]
    if isinstance(model, Fused):  # its original may be fused itself (a block's 1x1: convlab.torch.fuse_block)
        return unfuse(model.original)
    if hasattr(model, "unfused"):  # a fused depthwise -> pointwise block
        return model.unfused()
    for name, child in list(model.named_children()):
        back = unfuse(child)
        if back is not child:
            setattr(model, name, back)
    return model


def fusions(model: nn.Module) -> dict[str, str]:
    """{qualified name: what it fused} for every fused convolution of ``model`` (e.g. ``{"layer1.0.conv1":
    "BatchNorm2d(folded)+relu"}``)."""
    found = {}
    for name, m in model.named_modules():
        if isinstance(m, _FusedConv):
            found[name] = "+".join(m.fused_from)
        elif type(m).__name__ == "DepthwisePointwise":
            found[name] = "depthwise+pointwise"
    return found
