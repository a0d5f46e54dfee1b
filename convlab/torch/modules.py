"""``Conv1d`` / ``Conv2d`` / ``Conv3d`` and ``ConvTranspose1d`` / ``2d`` / ``3d``: torch's modules on
convlab's kernels, and ``convert`` / ``revert``.

The classes subclass torch's (``torch.nn.Conv2d``, ``torch.nn.ConvTranspose3d``, ...): same constructor arguments
(plus ``algorithm="auto"``), same parameters and state_dict; the repr is torch's with ``convlab,
algorithm='...'`` appended, so that a converted model shows which layers run on convlab and how they
pick their kernels; only the convolution itself runs on convlab (convlab.torch.functional).

``convert(model)`` swaps every ``nn.Conv1d`` / ``2d`` / ``3d`` and ``nn.ConvTranspose1d`` / ``2d`` / ``3d`` of a model (the exact classes;
subclasses of them may have their own forward and are left alone) for these, in place and sharing the
Parameter objects, buffers and hooks (no copy: the optimizer's references stay valid; training mode,
device and dtype are kept). ``revert(model)`` swaps them back.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from convlab.plugin import registry
from . import steady
from .functional import _conv, _conv_transpose


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
        """torch's, then ``convlab, algorithm='auto'`` (e.g. ``Conv2d(3, 16, kernel_size=(3, 3),
        stride=(1, 1), convlab, algorithm='auto')``)."""
        return f"{super().extra_repr()}, convlab, algorithm={self.algorithm!r}"  # type: ignore[misc]


class _ConvN(_ConvlabModule):
    """The forward of Conv1d / Conv2d / Conv3d: torch's padding modes, then convlab's convolution of N
    = ``_nd`` spatial dimensions."""
    _nd = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None, *,
                 algorithm: str = "auto") -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype)
        self.algorithm = _check_algorithm(algorithm)

    def _conv_forward(self, input: torch.Tensor, weight: torch.Tensor,
                      bias: torch.Tensor | None) -> torch.Tensor:
        y = steady.forward(self, input, weight, bias)
        if y is not None:
            return y
        if self.padding_mode != "zeros":  # as torch does: pad with the mode, then convolve unpadded
            input = nn.functional.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return _conv(self._nd, input, weight, bias, self.stride, 0, self.dilation, self.groups,
                         self.algorithm)
        return _conv(self._nd, input, weight, bias, self.stride, self.padding, self.dilation, self.groups,
                     self.algorithm)


class _ConvTransposeN(_ConvlabModule):
    """The forward of ConvTranspose1d / 2d / 3d."""
    _nd = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, output_padding: Any = 0, groups: int = 1, bias: bool = True,
                 dilation: Any = 1, padding_mode: str = "zeros", device: Any = None, dtype: Any = None, *,
                 algorithm: str = "auto") -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, output_padding, groups,
                         bias, dilation, padding_mode, device, dtype)
        self.algorithm = _check_algorithm(algorithm)

    def forward(self, input: torch.Tensor, output_size: list[int] | None = None) -> torch.Tensor:
        """y from input; ``output_size`` picks the output_padding, as in torch."""
        if output_size is None:
            y = steady.forward(self, input, self.weight, self.bias, transpose=True)
            if y is not None:
                return y
        if self.padding_mode != "zeros":
            raise ValueError(f"Only `zeros` padding mode is supported for {type(self).__name__}")
        output_padding = self._output_padding(  # type: ignore[attr-defined]
            input, output_size, self.stride, self.padding, self.kernel_size, self._nd, self.dilation)
        return _conv_transpose(self._nd, input, self.weight, self.bias, self.stride, self.padding,
                               output_padding, self.groups, self.dilation, self.algorithm)


class Conv1d(_ConvN, nn.Conv1d):
    """``torch.nn.Conv1d`` on convlab's kernels (as its 2D embedding). Input (N, C, L) or (C, L)."""
    _nd = 1


class Conv2d(_ConvN, nn.Conv2d):
    """``torch.nn.Conv2d`` whose convolution runs on convlab's kernels (``algorithm``: "auto" or a plugin
    name). Input (N, C, H, W) or (C, H, W); weight (out_channels, in_channels/groups, kH, kW)."""
    _nd = 2


class Conv3d(_ConvN, nn.Conv3d):
    """``torch.nn.Conv3d`` on convlab's kernels. Input (N, C, D, H, W) or (C, D, H, W)."""
    _nd = 3


class ConvTranspose1d(_ConvTransposeN, nn.ConvTranspose1d):
    """``torch.nn.ConvTranspose1d`` on convlab's kernels. Input (N, C_in, L) or (C_in, L)."""
    _nd = 1


class ConvTranspose2d(_ConvTransposeN, nn.ConvTranspose2d):
    """``torch.nn.ConvTranspose2d`` whose convolution runs on convlab's kernels. Input (N, C_in, H, W)
    or (C_in, H, W); weight (in_channels, out_channels/groups, kH, kW)."""
    _nd = 2


class ConvTranspose3d(_ConvTransposeN, nn.ConvTranspose3d):
    """``torch.nn.ConvTranspose3d`` on convlab's kernels. Input (N, C_in, D, H, W) or (C_in, D, H, W)."""
    _nd = 3


_TO_CONVLAB = {nn.Conv1d: Conv1d, nn.Conv2d: Conv2d, nn.Conv3d: Conv3d, nn.ConvTranspose1d: ConvTranspose1d,
               nn.ConvTranspose2d: ConvTranspose2d, nn.ConvTranspose3d: ConvTranspose3d}
_TO_TORCH = {mine: theirs for theirs, mine in _TO_CONVLAB.items()}


def _recast(module: nn.Module, cls: type) -> nn.Module:
    """A module of class ``cls`` with ``module``'s state: its own containers (parameters, buffers,
    submodules, hooks), holding the same objects."""
    new = cls.__new__(cls)
    new.__dict__.update({k: v.copy() if isinstance(v, dict) else v for k, v in module.__dict__.items()})
    return new
