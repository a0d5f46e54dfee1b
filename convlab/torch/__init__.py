"""convlab.torch: a PyTorch drop-in on convlab's kernels, with autograd and ``torch.compile`` support.

Needs torch (``pip install convlab[torch]``); ``import convlab`` itself never imports torch.

    import convlab.torch as ct
    y = ct.conv2d(x, w, b, stride=2, padding=1)            # like torch.nn.functional.conv2d
    y.sum().backward()                                     # dx, dw, db through convlab's dgrad/wgrad
    layer = ct.Conv2d(16, 32, 3, padding=1)                # a torch.nn.Conv2d subclass
    model = ct.convert(model)                              # every nn.Conv2d / nn.ConvTranspose2d swapped
    model = ct.revert(model)                               # and back
    torch.compile(ct.convert(model), fullgraph=True)       # traces: the ops are torch.library custom ops

Functions: :func:`conv2d`, :func:`conv_transpose2d` (torch.nn.functional's signatures plus a keyword
``algorithm``: "auto" or a plugin name). Modules: :class:`Conv2d`, :class:`ConvTranspose2d`; model
surgery: :func:`convert`, :func:`revert`. Eager calls go through an ``autograd.Function``; while
``torch.compile`` traces, through the custom ops ``torch.ops.convlab.conv2d``, ``conv_transpose2d``,
``conv2d_backward_data`` and ``conv2d_backward_weight``. Both run the same convlab ops. Double
backward (``create_graph=True`` through a convolution) is not supported: it raises a RuntimeError.

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

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("convlab.torch needs PyTorch: pip install 'convlab[torch]'") from exc

from .functional import conv2d, conv_transpose2d
from .modules import Conv2d, ConvTranspose2d, convert, revert

__all__ = ["conv2d", "conv_transpose2d", "Conv2d", "ConvTranspose2d", "convert", "revert"]
