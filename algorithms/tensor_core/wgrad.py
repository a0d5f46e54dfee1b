"""Backward-weight convolution on tensor cores: dw as a dense GEMM over split-major unfolded operands.

    dw[k, (c, r, s)] = sum_{n, p, q} dy[n, k, p, q] * x[n, c, p*sh - ph + r*dh, q*sw - pw + s*dw]

    GEMM  M = K,  N = C*R*S,  reduction over j = (n, pq), PQ padded to PQp (16-byte chunks, zeros)

The images are cut into ``splits`` equal groups of ipb = N / splits images (split-K over images). Both
operands are written once by the column unfold of :mod:`convlab.algorithms._columns`, split-major so
that every split is a dense, k-contiguous matrix for :func:`convlab.kernels.tc_gemm.launcher`:

    A [z, k, jj]        = dy[n, k, pq]                        (dy unfolded as a 1x1 "convolution")
    Bt[z, (c, r, s), jj] = x[n, c, p*sh - ph + r*dh, ...]      (im2col's taps, 0 in the padding)
    with n = z*ipb + i, jj = i*PQp + pq

    part[z] = A[z] @ Bt[z]^T for every z < splits    (one launch, grid z; fp32, or straight into dw
                                                     when splits == 1)
    dw = sum_partials(part) in split order           (deterministic), rounded to the input type

Operands read as they are (no unfold): with one image per split (splits == N) and P*Q a whole number
of chunks (PQp == P*Q), A[z] = dy[z] is the NCHW gradient itself, [K, P*Q] row-major; and for a 1x1
filter with stride 1 and no padding, Bt[z] = x[z] too ([C, H*W], H*W == P*Q). Both also need a 16-byte
aligned start (``cp.async``); otherwise they are unfolded as above.

Workspace: the two unfolded operands (N*PQp*(K + CRS) elements; an upper bound when one is read as it
is) and, when split, the fp32 partials.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from convlab import Problem, runtime
from convlab.kernels import tc_gemm
from convlab.kernels.splitk import sm_count, sum_partials
from convlab.kernels.tc_pipeline import TcConfig
from convlab.problem import make_problem
from convlab.scratch import scratch

from .._columns import unfold_into

#: k tiles each split keeps at least (fewer: the prologue and epilogue dominate); 1 on the simulator,
#: so that its tiny test problems split
MIN_KTILES = 1 if runtime.SIMULATOR else 8


def padded(length: int, align: int) -> int:
    return -(-length // align) * align


def splits_of(pr: Problem, cfg: TcConfig, align: int) -> int:
    """How many image groups: enough blocks to fill the SMs twice, each split at least MIN_KTILES k
    tiles long, and a divisor of N (equal groups keep every split's operands dense)."""
    m, n = pr.k, pr.c * pr.r * pr.s
    blocks = math.ceil(m / cfg.BM) * math.ceil(n / cfg.BN)
    want = max(1, math.ceil(2 * sm_count() / blocks))
    per_image = padded(pr.p * pr.q, align) / cfg.BK
    best = 1
    for d in range(1, pr.n + 1):
        if pr.n % d == 0 and d <= want and (pr.n // d) * per_image >= MIN_KTILES:
            best = d
    return best


def workspace_elements(pr: Problem, cfg: TcConfig, align: int) -> tuple[int, int]:
    """(elements in the storage type, float32 elements) the run lends from the scratch pool."""
    crs, kc = pr.c * pr.r * pr.s, pr.k * pr.c * pr.r * pr.s
    splits = splits_of(pr, cfg, align)
    f32 = 0 if splits == 1 else splits * kc
    return pr.n * padded(pr.p * pr.q, align) * (pr.k + crs), f32


@functools.lru_cache(maxsize=256)
def _dy_as_image(pr: Problem) -> Problem:
    """The geometry that unfolds dy [N, K, P, Q] with a 1x1 tap: a copy with padded rows."""
    return make_problem("forward", pr.n, pr.k, pr.p, pr.q, 1, 1, 1, dtype=pr.dtype)


def as_is(pr: Problem, splits: int, align: int) -> tuple[bool, bool]:
    """Whether dy (the GEMM's A) and x (its Bt) are already the split-major operands (module doc),
    leaving their pointers' alignment aside."""
    dense = splits == pr.n and pr.p * pr.q % align == 0
    one_by_one = (pr.r, pr.s, pr.stride, pr.padding) == (1, 1, (1, 1), (0, 0))
    return dense, dense and one_by_one


def _aligned(arr) -> bool:
    return runtime.device_pointer(arr) % 16 == 0


def run_wgrad(pr: Problem, cfg: TcConfig, itype: str, store: type, align: int, x, dy, dw) -> None:
    """dw [K, C, R, S] from x [N, C, H, W] and dy [N, K, P, Q] (device arrays in the storage type,
    C-contiguous)."""
    crs, pqp = pr.c * pr.r * pr.s, padded(pr.p * pr.q, align)
    splits = splits_of(pr, cfg, align)
    ipb = pr.n // splits
    lz = ipb * pqp  # reduction length of one split
    half = itype != "tf32"
    dy_as_is, x_as_is = as_is(pr, splits, align)
    dy_as_is, x_as_is = dy_as_is and _aligned(dy), x_as_is and _aligned(x)
    n_a, n_bt = (0 if dy_as_is else splits * pr.k * lz), (0 if x_as_is else splits * crs * lz)
    _, n_f32 = workspace_elements(pr, cfg, align)
    # the unfold moves bits: 16-bit types as uint16 (a float16 zero constant is invalid NVVM IR)
    bits = np.uint16 if np.dtype(store).itemsize == 2 else store
    with scratch(max(n_a + n_bt, 1), store) as buf, scratch(max(n_f32, 1), np.float32) as f32:
        a = dy.reshape(dy.size) if dy_as_is else buf[:n_a]
        bt = x.reshape(x.size) if x_as_is else buf[n_a:n_a + n_bt]
        if not dy_as_is:
            unfold_into(_dy_as_image(pr), dy.view(bits), a.view(bits), 0, pr.n, pq_out=pqp,
                        images_per_block=ipb, strides=(pr.k * lz, pqp, lz), dtype=np.dtype(bits).name)
        if not x_as_is:
            unfold_into(pr, x.view(bits), bt.view(bits), 0, pr.n, pq_out=pqp, images_per_block=ipb,
                        strides=(crs * lz, pqp, lz), dtype=np.dtype(bits).name)
        out = dw.reshape(pr.k, crs)
        if splits == 1:
            tc_gemm.launcher(itype, cfg, a.reshape(pr.k, lz), bt.reshape(crs, lz), out)()
            return
        kc = pr.k * crs
        part = f32[:splits * kc]  # every split's GEMM in one launch (grid z), side by side
        tc_gemm.batched_launcher(itype, cfg, a.reshape(splits, pr.k, lz), bt.reshape(splits, crs, lz),
                                 part.reshape(splits, pr.k, crs))()
        sum_partials(part, out.reshape(-1), splits,
                     out_kind=("bfloat16" if itype == "bf16" else "float16") if half else None)
