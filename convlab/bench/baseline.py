"""cuDNN through PyTorch as the benchmark baseline, run on the very device arrays the plugins use.

:func:`load` returns a :class:`Cudnn` when torch with CUDA is importable on a real GPU (never on the
simulator), else None and the reason. Settings: ``cudnn.benchmark = True`` (cuDNN picks its fastest
algorithm on the first call of each shape, which the warm-up absorbs) and the same math as convlab's:
float32 in exact fp32 (TF32 off) unless convlab's float32 precision is "high" when the problem is bound,
then TF32 on both sides; fp16 / bf16 in their dtype (bf16 device arrays reach torch as int16 bits).

The baseline looks like a plugin (an unregistered :class:`~convlab.plugin.Algorithm` named ``cudnn``), so
the harness checks and times it with :mod:`convlab.measure` like every candidate. Its ``run`` keeps torch's
output in ``result`` instead of writing ``out``: torch's ops allocate their output, and copying it into
``out`` would add a copy to the timed work. Operands are shared with Numba, not copied
(``torch.as_tensor`` on ``__cuda_array_interface__``); both libraries use the legacy default stream.

    op                       torch call (a, b, bias in the order of convlab.problem)
    forward                  F.conv2d(x, w, bias, stride, padding, dilation, groups)
    dgrad                    torch.nn.grad.conv2d_input(x_shape, w, dy, ...)
    dgrad, conv_transpose2d  F.conv_transpose2d(dy, w, bias, stride, padding, output_padding, groups,
                                                dilation)
    wgrad                    torch.nn.grad.conv2d_weight(x, w_shape, dy, ...)
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from convlab import runtime
from convlab.plugin.contract import Algorithm
from convlab.problem import HALF_DTYPES, OPS, Problem, unit_roundoff
from convlab.runtime.settings import get_float32_precision


def transpose_output_padding(problem: Problem) -> tuple[int, ...]:
    """output_padding of the transposed convolution whose dgrad problem is ``problem`` (one per axis)."""
    pads = []
    for size, out, k, st, pd, dl in zip(problem.spatial_in, problem.spatial_out, problem.kernel_size,
                                        problem.strides, problem.paddings, problem.dilations):
        pads.append(size - ((out - 1) * st - 2 * pd + dl * (k - 1) + 1))
    return tuple(pads)


def torch_call(torch: Any, problem: Problem, a: Any, b: Any, bias: Any, transpose: bool) -> Callable[[], Any]:
    """A zero-argument function computing ``problem`` with torch on tensors ``a``, ``b``, ``bias``."""
    F, nd = torch.nn.functional, problem.ndim
    st, pd, dl, g = problem.strides, problem.paddings, problem.dilations, problem.groups
    conv, conv_t = getattr(F, f"conv{nd}d"), getattr(F, f"conv_transpose{nd}d")
    if problem.op == "forward":
        return lambda: conv(a, b, bias, st, pd, dl, g)
    if problem.op == "dgrad":
        if transpose or bias is not None:
            op = transpose_output_padding(problem)
            return lambda: conv_t(a, b, bias, st, pd, op, g, dl)
        return lambda: getattr(torch.nn.grad, f"conv{nd}d_input")(problem.x_shape, b, a, st, pd, dl, g)
    return lambda: getattr(torch.nn.grad, f"conv{nd}d_weight")(a, problem.w_shape, b, st, pd, dl, g)


class Cudnn(Algorithm):
    """cuDNN via PyTorch, shaped as a plugin so that convlab.measure can time it (never registered)."""

    name = "cudnn"
    ops = frozenset(OPS)
    description = "cuDNN through PyTorch (cudnn.benchmark=True; TF32 only under precision 'high')"

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self._fn: Callable[[], Any] | None = None
        self.result: Any = None

    def _tensor(self, x: Any) -> Any:
        if x is None:
            return None
        if np.dtype(x.dtype).name == "bfloat16":  # the array interface has no bf16: share its bits
            return self.torch.as_tensor(x.view(np.int16), device="cuda").view(self.torch.bfloat16)
        return self.torch.as_tensor(x, device="cuda")

    def _tensors(self, *arrays: Any) -> list[Any]:
        return [self._tensor(x) for x in arrays]

    @staticmethod
    def tf32(dtype: str) -> bool:
        """Whether cuDNN runs ``dtype`` in TF32: float32 under convlab's precision "high"."""
        return dtype == "float32" and get_float32_precision() == "high"

    def compute_eps(self, dtype: str) -> float:
        """TF32 inputs (2**-10); half inputs with fp32 accumulation; else the dtype's own."""
        if self.tf32(dtype):
            return 2.0**-10
        return unit_roundoff("float32" if dtype in HALF_DTYPES else dtype)

    def bind(self, problem: Problem, a: Any, b: Any, bias: Any, *, transpose: bool = False) -> None:
        """Prepare calls on Numba device arrays ``a``, ``b``, ``bias`` (shared, not copied), in the math
        mode convlab uses for ``problem`` (TF32 for float32 under precision "high", else exact)."""
        self.torch.backends.cudnn.allow_tf32 = self.tf32(problem.dtype)
        ta, tb, tbias = self._tensors(a, b, bias)
        self._fn = torch_call(self.torch, problem, ta, tb, tbias, transpose)
        self.result = None

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        self.result = self._fn()

    def output(self) -> np.ndarray:
        """The last result, copied to the host (float64: numpy holds no bfloat16)."""
        return self.result.detach().double().cpu().numpy()

    def reference(self, problem: Problem, a: Any, b: Any, bias: Any, *, transpose: bool = False
                  ) -> np.ndarray:
        """The problem computed in float64 by torch on the GPU (a fast reference for large problems)."""
        ta, tb, tbias = (None if x is None else x.double() for x in self._tensors(a, b, bias))
        with self.torch.no_grad():
            result = torch_call(self.torch, problem, ta, tb, tbias, transpose)()
        return result.cpu().numpy()

    def extra_memory(self, problem: Problem) -> int:
        """Peak bytes torch allocated during one run beyond its output (cuDNN's workspace)."""
        cuda = self.torch.cuda
        cuda.synchronize()
        cuda.reset_peak_memory_stats()
        base = cuda.memory_allocated()
        self.run(problem, None, None, None, None, None, workspace_limit=0)
        cuda.synchronize()
        out_bytes = self.result.numel() * self.result.element_size()
        return max(0, cuda.max_memory_allocated() - base - out_bytes)


def load() -> tuple[Cudnn | None, str]:
    """(baseline, "") when torch with CUDA is usable here, else (None, why not)."""
    if not runtime.HAS_DEVICE:
        return None, "no GPU here (the CUDA simulator runs no cuDNN)"
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed (pip install convlab[torch])"
    if not torch.cuda.is_available():
        return None, "PyTorch has no CUDA device"
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    return Cudnn(torch), ""


def versions(baseline: Cudnn | None) -> dict[str, str]:
    """torch and cuDNN versions, for results files."""
    if baseline is None:
        return {}
    torch = baseline.torch
    return {"torch": torch.__version__, "cudnn": str(torch.backends.cudnn.version()),
            "torch_cuda": str(torch.version.cuda)}
