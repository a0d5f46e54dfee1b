"""The float64 outputs the benchmarks check against: computed by numpy or torch, never by a convlab plugin.

    float64_reference(problem, host, gpu=None, transpose=False) -> Trusted (output, name)

    problem.flops <= HOST_REFERENCE_MAX_FLOPS   "host float64": numpy on the host (convlab.reference)
    else, ``gpu`` given and it runs              "cudnn float64": cuDNN through torch on the GPU
    else, torch importable                       "torch float64 on the CPU"
    else                                         "host float64 in chunks of B images": numpy, B images
                                                 at a time (forward / dgrad outputs stacked, wgrad's
                                                 partial sums added), B chosen so one chunk's float64
                                                 operands stay within CHUNK_BYTES

A step that fails (cuDNN out of memory in float64, say) falls through to the next, and the row's reference
name says why (``"torch float64 on the CPU (cudnn float64 failed: ...)"``). Each is exact float64
arithmetic in its own summation order, so the reference's own error (a few float64 roundings) is far
below every tolerance the checks use: ``Trusted.eps`` stays 0.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from convlab import reference
from convlab.measure import HOST_REFERENCE_MAX_FLOPS, Trusted
from convlab.problem import Problem

from .baseline import torch_call

#: float64 bytes of one chunk's operands and output for the chunked numpy reference
CHUNK_BYTES = 256 * 2**20


def _float64(host: tuple) -> tuple[np.ndarray | None, ...]:
    return tuple(None if v is None else np.asarray(v, np.float64) for v in host)


def torch_cpu(problem: Problem, host: tuple, transpose: bool = False) -> np.ndarray:
    """``problem`` on the host operands (a, b, bias) by torch in float64 on the CPU (ImportError
    without torch)."""
    import torch

    a, b, bias = (None if v is None else torch.from_numpy(v) for v in _float64(host))
    with torch.no_grad():
        return torch_call(torch, problem, a, b, bias, transpose)().numpy()


def chunk_images(problem: Problem) -> int:
    """Images per chunk of :func:`chunked_numpy`: as many as keep one chunk within CHUNK_BYTES."""
    shapes = problem.operand_shapes
    per_image = sum(int(np.prod(s[1:])) for s in (problem.x_shape, problem.y_shape)) * 8
    fixed = int(np.prod(problem.w_shape)) * 8 * (2 if shapes[2] == problem.w_shape else 1)
    return max(1, min(problem.n, (CHUNK_BYTES - fixed) // max(per_image, 1)))


def chunked_numpy(problem: Problem, host: tuple, images: int) -> np.ndarray:
    """:func:`convlab.reference.solve` over ``images`` images at a time: forward and dgrad outputs are
    per image (stacked), wgrad sums over the batch (its partial sums added)."""
    a, b, bias = _float64(host)
    if images >= problem.n:
        return reference.solve(problem, a, b, bias)
    parts = []
    for start in range(0, problem.n, images):
        stop = min(problem.n, start + images)
        sub = problem.replace(n=stop - start)
        if problem.op == "wgrad":  # both operands are batched
            parts.append(reference.solve(sub, a[start:stop], b[start:stop]))
        else:  # a batched, b the weight
            parts.append(reference.solve(sub, a[start:stop], b, bias))
    return sum(parts[1:], parts[0]) if problem.op == "wgrad" else np.concatenate(parts)


def float64_reference(problem: Problem, host: tuple, gpu: Callable[[], Any] | None = None,
                      transpose: bool = False) -> Trusted:
    """The output candidates are checked against (module docstring). ``host``: the (a, b, bias) host
    operands; ``gpu()``: the problem in float64 on the GPU (cuDNN), tried first above the host limit."""
    if problem.flops <= HOST_REFERENCE_MAX_FLOPS:
        return Trusted(reference.solve(problem, *_float64(host)), "host float64")
    failed = []
    if gpu is not None:
        try:
            return Trusted(np.asarray(gpu(), np.float64), "cudnn float64")
        except Exception as exc:  # out of memory in float64, say: the CPU computes it
            failed.append(f"cudnn float64 failed: {type(exc).__name__}: {exc}"[:200])
    why = f" ({'; '.join(failed)})" if failed else ""
    try:
        return Trusted(np.asarray(torch_cpu(problem, host, transpose), np.float64),
                       "torch float64 on the CPU" + why)
    except ImportError:
        images = chunk_images(problem)
        return Trusted(chunked_numpy(problem, host, images),
                       f"host float64 in chunks of {images} image{'s' if images > 1 else ''}" + why)
