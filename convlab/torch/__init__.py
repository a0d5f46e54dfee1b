"""convlab.torch: a PyTorch drop-in on convlab's kernels, with autograd and ``torch.compile`` support.

Needs torch (``pip install convlab[torch]``); ``import convlab`` itself never imports torch.

    import convlab.torch as ct
    y = ct.conv2d(x, w, b, stride=2, padding=1)            # like torch.nn.functional.conv2d
    y.sum().backward()                                     # dx, dw, db through convlab's dgrad/wgrad
    layer = ct.Conv2d(16, 32, 3, padding=1)                # a torch.nn.Conv2d subclass
    model = ct.convert(model)                              # every nn.Conv{1,2,3}d / ConvTranspose{1,2,3}d swapped
    model = ct.revert(model)                               # and back
    fused = ct.convert(model.eval(), fuse=True)            # Conv-BN-act(-add) chains as one convolution
    print(ct.fusions(fused))                               # what each layer fused
    print(ct.tune(model, (x,)))                            # every layer's shapes checked and timed, picks cached
    print(ct.report(model, (x,)))                          # per layer: pick, tuned or the model's, kernels' origin
    torch.compile(ct.convert(model), fullgraph=True)       # traces: the ops are torch.library custom ops

Functions: :func:`conv1d`, :func:`conv2d`, :func:`conv3d` and :func:`conv_transpose1d` / ``2d`` / ``3d``;
modules: :class:`Conv1d`, :class:`Conv2d`, :class:`Conv3d`, :class:`ConvTranspose1d` / ``2d`` / ``3d``;
model surgery: :func:`convert`, :func:`revert` (``fuse=True``: convlab.torch.fuse), :func:`fusions`;
tuning on request: :func:`tune` (every convolution layer of a model checked and timed once,
convlab.torch.tuning); :func:`report` (per layer: the pick, tuned or the cost model's, and where its
kernels came from). Devices, streams, dtypes and TF32: functional.py; epilogues: convlab.torch.epilogue.
"""
from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("convlab.torch needs PyTorch: pip install 'convlab[torch]'") from exc

from .functional import conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d
from .surgery import convert, revert
from .modules import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .fuse import fusions
from .tuning import LayerPick, TuneSummary, report, tune

__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "Conv1d",
           "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "convert", "revert",
           "fusions", "tune", "report", "TuneSummary", "LayerPick"]
