"""Model surgery: :func:`convert` swaps a model's torch convolutions for convlab's (``fuse=True``: Conv ->
BatchNorm -> activation (-> add) chains first become one convolution with an epilogue, convlab.torch.fuse),
:func:`revert` undoes it."""
from __future__ import annotations

from typing import Any

from torch import nn

from .fuse import fuse_sequential, restore
from .fuse_block import fuse_blocks_sequential
from .fuse_graph import fuse_graph
from .modules import _TO_CONVLAB, _TO_TORCH, _ConvlabModule, _check_algorithm, _recast


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


def convert(model: nn.Module, algorithm: str = "auto", fuse: bool = False, blocks: bool = False) -> nn.Module:
    """Swap every ``nn.Conv{1,2,3}d`` / ``nn.ConvTranspose{1,2,3}d`` of ``model`` (recursively, ``model`` itself
    included) for convlab's, sharing the parameters; returns the model (a new object only when
    ``model`` itself is a convolution). convlab modules already there get ``algorithm``.
    ``fuse=True``: Conv -> BatchNorm -> activation (-> add) chains become one convolution with an
    epilogue first (convlab.torch.fuse; where torch.fx traces the model, the result is a new
    ``torch.fx.GraphModule`` and ``model`` is left as it was). ``blocks=True`` (with ``fuse=True``,
    ``algorithm="auto"``): eval-mode depthwise -> 1x1 pairs also run as one fused block
    (convlab.torch.fuse_block)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"convert(): model must be a torch.nn.Module, got {type(model).__name__}")
    _check_algorithm(algorithm)
    for name, flag in (("fuse", fuse), ("blocks", blocks)):
        if type(flag) is not bool:
            raise TypeError(f"convert(): {name} must be a bool, got {flag!r}")
    if blocks and not fuse:
        raise ValueError("convert(): blocks=True needs fuse=True")
    if fuse:
        graph = fuse_graph(model, algorithm, blocks)
        if graph is None:
            fuse_sequential(model, algorithm)
            if blocks:
                fuse_blocks_sequential(model, algorithm)
        else:
            model = graph

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
    """Undo :func:`convert`: convlab's convolution modules become torch's again (same parameters), and
    fused chains the original modules (a fused GraphModule gives back the model it was made from);
    returns the model."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"revert(): model must be a torch.nn.Module, got {type(model).__name__}")
    model = restore(model)

    def replace(module: nn.Module) -> nn.Module | None:
        cls = _TO_TORCH.get(type(module))
        if cls is None:
            return None
        new = _recast(module, cls)
        new.__dict__.pop("algorithm", None)
        return new
    return _swap(model, replace)
