"""convlab.torch: a PyTorch drop-in on convlab's kernels, with autograd and ``torch.compile`` support.

Needs torch (``pip install convlab[torch]``); ``import convlab`` itself never imports torch.

    import convlab.torch as ct
    y = ct.conv2d(x, w, b, stride=2, padding=1)            # like torch.nn.functional.conv2d
    y.sum().backward()                                     # dx, dw, db through convlab's dgrad/wgrad
    layer = ct.Conv2d(16, 32, 3, padding=1)                # a torch.nn.Conv2d subclass
    model = ct.convert(model)                              # every nn.Conv2d / nn.ConvTranspose2d swapped
    model = ct.revert(model)                               # and back
    torch.compile(ct.convert(model), fullgraph=True)       # traces: the ops are torch.library custom ops

Functions: :func:`conv2d`, :func:`conv_transpose2d`; modules: :class:`Conv2d`, :class:`ConvTranspose2d`;
model surgery: :func:`convert`, :func:`revert`. Devices, streams, dtypes and TF32: functional.py.
"""
from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("convlab.torch needs PyTorch: pip install 'convlab[torch]'") from exc

from .functional import conv2d, conv_transpose2d
from .modules import Conv2d, ConvTranspose2d, convert, revert

__all__ = ["conv2d", "conv_transpose2d", "Conv2d", "ConvTranspose2d", "convert", "revert"]
