"""The calls a user makes, for ``convlab bench auto``: operands in a memory format, convlab's public ops,
convlab.torch, cuDNN through torch, the float64 reference and check, and the clock.

    calls (a, b in the order of convlab/problem.py; st, pd, dl, g the problem's geometry)
    op       convlab public op                         convlab.torch                        cuDNN
    forward  conv2d(x, w, bias, ...)                   convlab.torch.conv2d(x, w, bias, ...) F.conv2d
    dgrad    conv2d_backward_data(dy, w, ...)          torch.ops.convlab.conv2d_backward_data
                                                       torch.ops.aten.convolution_backward(mask 1,0,0)
    wgrad    conv2d_backward_weight(x, dy, ...)        torch.ops.convlab.conv2d_backward_weight
                                                       torch.ops.aten.convolution_backward(mask 0,1,0)

The backward columns of both libraries go through one dispatcher call each (a torch.library op), so no
side pays a Python wrapper the other does not. Without torch CUDA (the simulator) operands are torch CPU
tensors (or numpy arrays without torch), times are wall-clock and mean nothing.
"""
from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from convlab import measure, runtime
from convlab.measure import Trusted
from convlab.ops import conv2d, conv2d_backward_data, conv2d_backward_weight
from convlab.problem import Problem

from .trusted import float64_reference

try:  # torch tensors, cuDNN and the convlab.torch column need torch; without it they are left out
    import torch

    import convlab.torch as convlab_torch
except ImportError:
    torch = convlab_torch = None

LAYOUTS = ("nchw", "channels_last")


class Side:
    """Where the user's tensors live: torch CUDA (``gpu``), torch CPU or numpy (the simulator)."""

    def __init__(self) -> None:
        self.torch = torch
        self.gpu = bool(torch is not None and torch.cuda.is_available() and runtime.HAS_DEVICE)
        self.why_no_cudnn = "" if self.gpu else (
            "no torch CUDA device here (the simulator runs no cuDNN)" if torch is not None
            else "PyTorch is not installed")
        if self.gpu:
            torch.backends.cudnn.benchmark = True

    def tensor(self, a: np.ndarray | None, layout: str) -> Any:
        """``a`` as the user holds it: a torch tensor (CUDA on a GPU) in ``layout`` for 4-D operands."""
        if a is None or self.torch is None:
            return a
        bf16 = a.dtype.name == "bfloat16"
        t = self.torch.from_numpy(np.asarray(a, np.float32) if bf16 else a)
        if bf16:
            t = t.to(self.torch.bfloat16)
        if self.gpu:
            t = t.cuda()
        if layout == "channels_last" and t.dim() == 4:
            t = t.contiguous(memory_format=self.torch.channels_last)
        return t

    def host(self, t: Any) -> np.ndarray:
        """A float64 host copy (synchronises)."""
        if self.torch is not None and isinstance(t, self.torch.Tensor):
            return t.detach().double().cpu().numpy()
        return np.asarray(runtime.to_host(t) if hasattr(t, "copy_to_host") else t, np.float64)

    def sync(self) -> None:
        if self.gpu:
            self.torch.cuda.synchronize()

    def poison_allocator(self, shape: tuple[int, ...], dtype: Any) -> None:
        """Free a NaN-filled block of the output's size, so torch's caching allocator hands it to the
        next output of that size: an op that leaves its output unwritten returns NaN, not stale data."""
        if self.gpu:  # made and dropped at once: its block goes back to the allocator's cache
            self.torch.full(shape, float("nan"), dtype=dtype, device="cuda")

    def clock(self, fn: Callable[[], Any], n: int) -> list[float]:
        """``n`` per-call samples: CUDA events on torch's stream (GPU), else the wall clock."""
        out = []
        for _ in range(n):
            if self.gpu:
                start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
                start.record()
                fn()
                end.record()
                end.synchronize()
                out.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t0) * 1e3)
        return out


def geometry(p: Problem) -> tuple:
    return tuple(p.stride), tuple(p.padding), tuple(p.dilation), p.groups


def op_call(p: Problem, a: Any, b: Any, bias: Any, algorithm: Any, out: Any = None) -> Callable[[], Any]:
    """The public op of ``p`` on the user's tensors (``out``: a caller's output tensor)."""
    st, pd, dl, g = geometry(p)
    kw = {"algorithm": algorithm, "out": out}
    if p.op == "forward":
        return lambda: conv2d(a, b, bias, st, pd, dl, g, **kw)
    if p.op == "dgrad":
        return lambda: conv2d_backward_data(a, b, p.x_shape, st, pd, dl, g, **kw)
    return lambda: conv2d_backward_weight(a, b, p.w_shape, st, pd, dl, g, **kw)


def torch_path_call(side: Side, p: Problem, a: Any, b: Any, bias: Any) -> Callable[[], Any] | None:
    """convlab.torch's call of ``p`` under "auto" (None without torch)."""
    if side.torch is None:
        return None
    st, pd, dl, g = (list(v) if isinstance(v, tuple) else v for v in geometry(p))
    ops = side.torch.ops.convlab
    if p.op == "forward":
        return lambda: convlab_torch.conv2d(a, b, bias, st, pd, dl, g)
    if p.op == "dgrad":
        return lambda: ops.conv2d_backward_data(a, b, list(p.x_shape), st, pd, dl, g, "auto")
    return lambda: ops.conv2d_backward_weight(a, b, list(p.w_shape), st, pd, dl, g, "auto")


def cudnn_call(side: Side, p: Problem, a: Any, b: Any, bias: Any) -> Callable[[], Any]:
    """cuDNN (torch with cudnn.benchmark on) computing ``p`` on torch tensors ``a``, ``b``."""
    torch = side.torch
    st, pd, dl, g = (list(v) if isinstance(v, tuple) else v for v in geometry(p))
    if p.op == "forward":
        return lambda: torch.nn.functional.conv2d(a, b, bias, st, pd, dl, g)
    back = torch.ops.aten.convolution_backward
    fmt = torch.channels_last if a.is_contiguous(memory_format=torch.channels_last) and not \
        a.is_contiguous() else torch.contiguous_format
    if p.op == "dgrad":  # a = dy, b = w; the input's shape from an empty tensor (not read)
        x = torch.empty(p.x_shape, dtype=a.dtype, device=a.device, memory_format=fmt)
        return lambda: back(a, x, b, None, st, pd, dl, False, [0, 0], g, [True, False, False])[0]
    w = torch.empty(p.w_shape, dtype=a.dtype, device=a.device, memory_format=fmt)  # a = x, b = dy
    return lambda: back(b, a, w, None, st, pd, dl, False, [0, 0], g, [False, True, False])[1]


def reference(side: Side, p: Problem, host: tuple) -> Trusted:
    """The float64 output (convlab.bench.trusted): on the host up to its limit, else cuDNN in float64
    on the GPU, else torch float64 on the CPU, else numpy in chunks."""
    def on_gpu() -> np.ndarray:
        t = [None if v is None else side.torch.from_numpy(np.asarray(v, np.float64)).cuda() for v in host]
        with side.torch.no_grad():
            return cudnn_call(side, p, *t)().cpu().numpy()

    return float64_reference(p, host, on_gpu if side.gpu else None)


def check(side: Side, got: Any, ref: np.ndarray, tol: float, host: bool = False) -> tuple[bool, float, str]:
    """(ok, relative-norm error, reason) of an output (``host``: already a float64 host copy) against
    the float64 reference."""
    try:
        err = measure.rel_error(got if host else side.host(got), ref)
    except Exception as exc:  # a wrong shape or type is a failed check, reported
        return False, math.inf, f"{type(exc).__name__}: {exc}"[:300]
    if err <= tol:
        return True, err, ""
    return False, err, f"rel err {err:.3g} > tolerance {tol:.3g}"
