"""Backward-data with stride > 1 on tensor cores (fp16 / bf16, or float32 as TF32 or 3xTF32): a column
GEMM, then a fold.

    cols[(n, p, q), (c, r, s)] = sum_k dy[n, k, p, q] * w[k, c, r, s]     GEMM M = N*P*Q, N = C*R*S, K = K
    dx[n, c, h, w] = bias[c] + sum over the taps (r, s) with h + ph - r*dh = p*sh, w + pw - s*dw = q*sw
                     of cols[(n, p, q), (c, r, s)]                         (col2im's fold, pixel-major)

The GEMM is :func:`convlab.kernels.tensor_core.gemm.launcher` on dense k-contiguous operands in the
problem's dtype (bf16 as uint16 bits): A = dy in NHWC ([N*P*Q, Kp], K zero-padded to whole 16-byte
chunks: 8 halves, 4 floats) and Bt = w as [C*R*S, Kp], both written by
:func:`convlab.kernels.data.transpose.to_channels_last` into scratch. The columns are float32 (the
accumulators as they are, nothing rounded before the fold); the fold (one thread per dx element, its
taps in a fixed order: deterministic, no atomics) is :func:`convlab.kernels.conv.fold.fold`, which sums
in float32 and rounds a half dx once, at its store. The column buffer holds ``images_per_pass`` images
at a time, so that it fits the workspace limit.

3D (NCDHW) takes the same GEMM per image the other way round, in the channel-major layout of the fold
:func:`convlab.kernels.conv.fold.fold` channel-major: one batched launch over a pass's images,

    cols[n][(c, t, r, s), (o, p, q)] = sum_k w[k, c, t, r, s] * dy[n, k, o, p, q]   GEMM M = C*T*R*S, N = Do*P*Q

(A = the filter [CTRS, Kp], shared by every image; Bt = dy's NDHWC copy [Do*P*Q, Kp] of image n).

The route of the strided dgrads that the phase route (phases.py) leaves: fewer than PHASE_MIN_CHANNELS
channels (the stems' 3 would make a phase's GEMM N 3, a 16-wide tile 13/16 zeros, where here the GEMM's N
is C*R*S: 147 for ResNet's stem, 363 for AlexNet's), and 3D.
"""
from __future__ import annotations

import math

import numpy as np

from convlab import runtime
from convlab.problem import Problem, np_dtype
from convlab.kernels.tensor_core import gemm as tc_gemm
from convlab.kernels.data import transpose
from convlab.kernels.data.splitk import MAX_INDEX
from convlab.kernels.tensor_core.config import TcConfig
from convlab.runtime.scratch import scratch

from convlab.kernels.conv.fold import fold

from .gather import padded


def _sizes(pr: Problem) -> tuple[int, int, int]:
    """(padded K, C*R*S, P*Q) (3D: C*T*R*S, Do*P*Q); K in whole 16-byte chunks of the problem's dtype."""
    return padded(pr.k, pr.dtype), pr.c * math.prod(pr.kernel_size), math.prod(pr.spatial_out)


def operand_elements(pr: Problem) -> int:
    """Elements (in the problem's dtype) of dy's NHWC copy and the [C*R*S, Kp] filter."""
    kp, crs, pq = _sizes(pr)
    return pr.n * pq * kp + crs * kp


def images_per_pass(pr: Problem, workspace_limit: int) -> int:
    """Images whose float32 column buffer fits beside the operands within ``workspace_limit`` bytes (at
    least 1, at most N (3D: and 65535), the buffer within 32-bit indexing)."""
    _, crs, pq = _sizes(pr)
    room = (workspace_limit - pr.itemsize * operand_elements(pr)) // 4
    most = pr.n if pr.ndim == 2 else min(pr.n, 65535)  # 3D: the images of a pass along grid z
    return max(1, min(most, room // (pq * crs), MAX_INDEX // (pq * crs)))


def column_elements(pr: Problem, workspace_limit: int) -> int:
    """float32 elements of one pass's column buffer."""
    _, crs, pq = _sizes(pr)
    return images_per_pass(pr, workspace_limit) * pq * crs


def workspace_bytes(pr: Problem, workspace_limit: int) -> int:
    """Bytes of scratch: the operands in the problem's dtype and one pass's float32 column buffer."""
    return pr.itemsize * operand_elements(pr) + 4 * column_elements(pr, workspace_limit)


def fits(pr: Problem) -> bool:
    """Whether one image's columns and the operands stay within 32-bit indexing."""
    _, crs, pq = _sizes(pr)
    return pq * crs <= MAX_INDEX and operand_elements(pr) <= MAX_INDEX


def run_strided_dgrad(pr: Problem, cfg: TcConfig, itype: str, dy, w, bias, dx, workspace_limit: int) -> None:
    """dx [N, C, H, W] (+ bias) from dy [N, K, P, Q] and w [K, C, R, S] (3D: [N, C, D, H, W], [N, K, Do,
    P, Q], [K, C, T, R, S]): device arrays of the problem's dtype, C-contiguous (flat views taken here),
    bias [C] or None."""
    kp, crs, pq = _sizes(pr)
    nb = images_per_pass(pr, workspace_limit)
    flat = lambda t: runtime.kernel_view(runtime.flat_view(t))  # noqa: E731
    dx, bias = runtime.kernel_view(dx), None if bias is None else runtime.kernel_view(bias)
    n_dy = pr.n * pq * kp
    store = runtime.kernel_dtype(np_dtype(pr.dtype))
    with scratch(operand_elements(pr), store) as ops, scratch(nb * pq * crs, np.float32) as cols:
        dyh, wt = ops[:n_dy], ops[n_dy:]
        transpose.to_channels_last(flat(dy), dyh, pr.n, pr.k, pq, kp)  # [n, pq, k]
        transpose.to_channels_last(flat(w), wt, 1, pr.k, crs, kp)  # [crs, k]
        for n0 in range(0, pr.n, nb):
            count = min(nb, pr.n - n0)
            a = dyh[n0 * pq * kp:(n0 + count) * pq * kp]
            if pr.ndim == 3:  # per image [CTRS, DoPQ], the fold's channel-major layout
                out = cols[:count * pq * crs].reshape(count, crs, pq)
                tc_gemm.batched_launcher(itype, cfg, wt.reshape(crs, kp), a.reshape(count, pq, kp), out)()
                fold_volume(pr, cols, dx, bias, n0, count)
                continue
            out = cols[:count * pq * crs].reshape(count * pq, crs)
            tc_gemm.launcher(itype, cfg, a.reshape(count * pq, kp), wt.reshape(crs, kp), out)()
            fold(pr, cols, dx, bias, n0, count, pixel_major=True)


def fold_volume(pr: Problem, cols, dx, bias, n0: int, count: int) -> None:
    """dx[n0:n0 + count] [count, C, D, H, W] (+ bias) from ``cols``, per image [C*T*R*S, Do*P*Q]
    (channel-major): the one call of the channel-major fold on this route."""
    fold(pr, cols, dx, bias, n0, count)


def gemm_shape(pr: Problem) -> tuple[int, int, int]:
    """(M, N, K) of the column GEMM (all images; 3D: of one image)."""
    kp, crs, pq = _sizes(pr)
    return (crs, pq, kp) if pr.ndim == 3 else (pr.n * pq, crs, kp)
