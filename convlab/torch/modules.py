"""``Conv2d`` / ``ConvTranspose2d``: torch's modules on convlab's kernels, and ``convert`` / ``revert``.

The classes subclass ``torch.nn.Conv2d`` / ``torch.nn.ConvTranspose2d``: same constructor arguments
(plus ``algorithm="auto"``), same parameters, state_dict and repr (``algorithm=...`` is shown only
when it is not "auto"); only the convolution itself runs on convlab (convlab.torch.functional).

``convert(model)`` swaps every ``nn.Conv2d`` / ``nn.ConvTranspose2d`` of a model (the exact classes;
subclasses of them may have their own forward and are left alone) for these, in place and sharing the
Parameter objects, buffers and hooks (no copy: the optimizer's references stay valid; training mode,
device and dtype are kept). ``revert(model)`` swaps them back.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from convlab.plugin import registry
from .functional import conv2d, conv_transpose2d


def _check_algorithm(algorithm: Any) -> str:
    """TypeError / ValueError for anything but "auto" or a registered plugin name."""
    if type(algorithm) is not str:
        raise TypeError(f"algorithm must be 'auto' or a plugin name, got {algorithm!r}")
    if algorithm != "auto":
        registry.get(algorithm)  # ValueError listing the registered names
    return algorithm


class _ConvlabModule:
    """What both modules add to torch's: the ``algorithm`` attribute and its repr."""
    algorithm: str = "auto"

    def extra_repr(self) -> str:
        text = super().extra_repr()  # type: ignore[misc]
        if self.algorithm != "auto":
            text += f", algorithm={self.algorithm!r}"
        return text


class Conv2d(_ConvlabModule, nn.Conv2d):
    """``torch.nn.Conv2d`` whose convolution runs on convlab's kernels (``algorithm``: "auto" or a plugin
    name). Input (N, C, H, W) or (C, H, W); weight (out_channels, in_channels/groups, kH, kW)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None, *,
                 algorithm: str = "auto") -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)
        self.algorithm = _check_algorithm(algorithm)

    def _conv_forward(self, input: torch.Tensor, weight: torch.Tensor,
                      bias: torch.Tensor | None) -> torch.Tensor:
        if self.padding_mode != "zeros":  # as torch does: pad with the mode, then convolve unpadded
            input = nn.functional.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return conv2d(input, weight, bias, self.stride, 0, self.dilation, self.groups,
                          algorithm=self.algorithm)
        return conv2d(input, weight, bias, self.stride, self.padding, self.dilation, self.groups,
                      algorithm=self.algorithm)


class ConvTranspose2d(_ConvlabModule, nn.ConvTranspose2d):
    """``torch.nn.ConvTranspose2d`` whose convolution runs on convlab's kernels. Input (N, C_in, H, W)
    or (C_in, H, W); weight (in_channels, out_channels/groups, kH, kW)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, output_padding: Any = 0, groups: int = 1, bias: bool = True,
                 dilation: Any = 1, padding_mode: str = "zeros", device: Any = None, dtype: Any = None, *,
                 algorithm: str = "auto") -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, output_padding, groups,
                         bias, dilation, padding_mode, device, dtype)
        self.algorithm = _check_algorithm(algorithm)

    def forward(self, input: torch.Tensor, output_size: list[int] | None = None) -> torch.Tensor:
        """y from input; ``output_size`` picks the output_padding, as in torch."""
        if self.padding_mode != "zeros":
            raise ValueError("Only `zeros` padding mode is supported for ConvTranspose2d")
        output_padding = self._output_padding(  # type: ignore[arg-type]
            input, output_size, self.stride, self.padding, self.kernel_size, 2, self.dilation)
        return conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding, output_padding,
                                self.groups, self.dilation, algorithm=self.algorithm)


_TO_CONVLAB = {nn.Conv2d: Conv2d, nn.ConvTranspose2d: ConvTranspose2d}
_TO_TORCH = {Conv2d: nn.Conv2d, ConvTranspose2d: nn.ConvTranspose2d}


def _recast(module: nn.Module, cls: type) -> nn.Module:
    """A module of class ``cls`` with ``module``'s state: its own containers (parameters, buffers,
    submodules, hooks), holding the same objects."""
    new = cls.__new__(cls)
    new.__dict__.update({k: v.copy() if isinstance(v, dict) else v for k, v in module.__dict__.items()})
    return new


def _swap(model: nn.Module, replace: Any) -> nn.Module:
    """``replace(module)`` (a new module or None) applied to ``model`` and every submodule, in place."""
    new = replace(model)
    if new is not None:
        return new
    for name, child in list(model.named_children()):
        swapped = _swap(child, replace)
        if swapped is not child:
            setattr(model, name, swapped)
    return model


def convert(model: nn.Module, algorithm: str = "auto") -> nn.Module:
    """Swap every ``nn.Conv2d`` / ``nn.ConvTranspose2d`` of ``model`` (recursively, ``model`` itself
    included) for convlab's, sharing the parameters; returns the model (a new object only when
    ``model`` itself is a convolution). convlab modules already there get ``algorithm``."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"convert(): model must be a torch.nn.Module, got {type(model).__name__}")
    _check_algorithm(algorithm)

    def replace(module: nn.Module) -> nn.Module | None:
        if isinstance(module, _ConvlabModule):
            module.algorithm = algorithm
            return module
        cls = _TO_CONVLAB.get(type(module))
        if cls is None:
            return None
        new = _recast(module, cls)
        new.algorithm = algorithm
        return new
    return _swap(model, replace)


def revert(model: nn.Module) -> nn.Module:
    """Undo :func:`convert`: convlab's Conv2d / ConvTranspose2d become torch's again (same parameters);
    returns the model."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"revert(): model must be a torch.nn.Module, got {type(model).__name__}")

    def replace(module: nn.Module) -> nn.Module | None:
        cls = _TO_TORCH.get(type(module))
        if cls is None:
            return None
        new = _recast(module, cls)
        new.__dict__.pop("algorithm", None)
        return new
    return _swap(model, replace)
