"""Backward-weight convolution on tensor cores: dw as a dense GEMM over split-major unfolded operands.

    dw[k, (c, r, s)] = sum_{n, p, q} dy[n, k, p, q] * x[n, c, p*sh - ph + r*dh, q*sw - pw + s*dw]

    GEMM  M = K,  N = C*R*S,  reduction over j = (n, pq), PQ padded to PQp (16-byte chunks, zeros)

The images are cut into ``splits`` equal groups of ipb = N / splits images (split-K over images). Both
operands are written once by the column unfold of :mod:`convlab.kernels.conv.unfold`, split-major so
that every split is a dense, k-contiguous matrix for :func:`convlab.kernels.tensor_core.gemm.launcher`:

    A [z, k, jj]        = dy[n, k, pq]                        (dy unfolded as a 1x1 "convolution")
    Bt[z, (c, r, s), jj] = x[n, c, p*sh - ph + r*dh, ...]      (im2col's taps, 0 in the padding)
    with n = z*ipb + i, jj = i*PQp + pq

    part[z] = A[z] @ Bt[z]^T for every z < splits    (one launch, grid z; fp32, or straight into dw
                                                     when splits == 1)
    dw = sum_partials(part) in split order           (deterministic), rounded to the input type

When the image groups' tiles still leave SMs idle (few output channels: M = K = 16 in the seed's
layer), each group's reduction is also cut in ``parts`` slices (:func:`plan`, tc_gemm's parted GEMM:
grid z = splits * parts, part[z * parts + p] the product over slice p), PQp padded further when the
slices need it; the sum then runs over splits * parts partials.

Operands read as they are (no unfold): with one image per split (splits == N) and P*Q a whole number
of chunks (PQp == P*Q), A[z] = dy[z] is the NCHW gradient itself, [K, P*Q] row-major; and for a 1x1
filter with stride 1 and no padding, Bt[z] = x[z] too ([C, H*W], H*W == P*Q). Both also need a 16-byte
aligned start (``cp.async``); otherwise they are unfolded as above.

Workspace: the two unfolded operands (N*PQp*(K + CRS) elements; an upper bound when one is read as it
is) and, when split, the fp32 partials.

Which route (:func:`tap_gather`): every 3D filter, and a 2D (1D) one of more than one tap over whole
chunks of channels on a plane of at least :data:`GATHER_MIN_PIXELS` output pixels, takes the tap gather
of :mod:`.taps` (x read once per tap from L2 instead of unfolded R*S times: 9 copies of x written and read
for a 3x3 layer); smaller planes, a channel count the gather would pad (a stem's 3) and a 1x1 filter stay
here, where an NCHW x is read as it is or a strided one unfolded to its output pixels only.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from convlab import runtime
from convlab.problem import Problem
from convlab.kernels.data import convert
from convlab.kernels.tensor_core import gemm as tc_gemm
from convlab.kernels.data.splitk import sum_partials
from convlab.kernels.tensor_core.config import TcConfig
from convlab.problem import make_problem
from convlab.runtime.scratch import scratch
from convlab.runtime.targets import Target

from convlab.kernels.conv.unfold import unfold_into

from .gather import ALIGN

#: k tiles each split keeps at least (fewer: the prologue and epilogue dominate); 1 on the simulator,
#: so that its tiny test problems split
MIN_KTILES_GPU, MIN_KTILES_SIM = 8, 1


#: output pixels an image from which a 2D (1D) filter of more than one tap takes the tap gather. H100, ResNet-50
#: fp16 batch 32, the gather (results/auto_bench/h100/65f736e) against the unfold (h100/92e7a00; that run's
#: unchanged forward rows were 1.11x faster): c2 3x3 at 56x56 0.146 -> 0.130 ms (NCHW), 0.165 -> 0.131
#: (channels-last); the 28x28 to 7x7 3x3 layers slower, c4 3x3 0.093 -> 0.130 and c5 3x3 0.081 -> 0.133
#: (channels-last): there x's and dy's copies, the fp32 partials and the launches cost more than the
#: unfolded copies save. Channels not in whole chunks (the stems' 3, gathered as 8) stay unfolded:
#: ResNet-50's 7x7 stem ran 0.213 -> 0.297 ms, MobileNetV2's 3x3 stem 0.091 -> 0.199 (h100/05aa939)
GATHER_MIN_PIXELS = 56 * 56


def min_ktiles(target: Target) -> int:
    return MIN_KTILES_SIM if target.simulator else MIN_KTILES_GPU


def padded(length: int, align: int) -> int:
    return -(-length // align) * align


def splits_of(pr: Problem, cfg: TcConfig, align: int, target: Target, gather: bool | None = None) -> int:
    """How many image groups on ``target``: enough blocks to fill the SMs twice, each split at least
    :func:`min_ktiles` k
    tiles long, and a divisor of N (equal groups keep every split's operands dense). When P*Q is in
    whole chunks, one image per split reads dy as it is (no unfold; a 1x1 stride-1 unpadded x too), at
    the price of N fp32 partials of dw: taken when they are no larger than the copies they replace,
    N*K*C*R*S fp32 against N*P*Q*K (+ N*P*Q*C for a 1x1 x) input elements written and read again
    (16-bit 3x3 layers with 2*C*9 <= P*Q: ResNet-50's c2 3x3 at 56x56 and Burn's 64-channel layers at
    56x56 and more, not the 28x28 ones; the 1x1 layers at 28x28 and more), each image at least
    min_ktiles k tiles long and N within grid z (65535). ``gather``: the route (None: the problem's,
    :func:`tap_gather`)."""
    least = min_ktiles(target)
    gather = tap_gather(pr) if gather is None else gather
    dense, x_too = as_is(pr, pr.n, align)
    px = math.prod(pr.spatial_out)
    copied = px * (pr.k + (pr.c if x_too and not gather else 0)) * pr.itemsize
    m, n = gemm_mn(pr, align, gather)
    if dense and 0 < pr.n <= 65535 and 4 * m * n <= copied and px >= least * cfg.BK:
        return pr.n
    blocks = math.ceil(m / cfg.BM) * math.ceil(n / cfg.BN)
    want = max(1, math.ceil(2 * target.sm_count / blocks))
    per_image = padded(px, align) / cfg.BK
    best = 1
    for d in range(1, pr.n + 1):
        if pr.n % d == 0 and d <= want and (pr.n // d) * per_image >= least:
            best = d
    return best


def tap_gather(pr: Problem) -> bool:
    """Whether the backward-weight ``pr`` runs the tap gather of :mod:`.taps` (module doc): 3D, or a filter
    of more than one tap over whole chunks of channels and at least :data:`GATHER_MIN_PIXELS` output pixels
    an image, in either layout (a 1x1 one with a channels-last x may too: the plugin's
    ``may_gather_1x1``)."""
    if pr.ndim == 3:
        return True
    return (math.prod(pr.kernel_size) > 1 and pr.c % ALIGN.get(pr.dtype, 1) == 0
            and math.prod(pr.spatial_out) >= GATHER_MIN_PIXELS)


def gemm_mn(pr: Problem, align: int, gather: bool | None = None) -> tuple[int, int]:
    """(M, N) of the wgrad GEMM: (K, C*R*S) on the unfolded operands, (T*R*S*Cp, K) for the tap gather
    (``gather``, None: :func:`tap_gather`; :mod:`.taps`; Cp: C in whole chunks)."""
    if tap_gather(pr) if gather is None else gather:
        return math.prod(pr.kernel_size) * padded(pr.c, align), pr.k
    return pr.k, pr.c * pr.r * pr.s


class Plan(NamedTuple):
    """splits image groups, each reduction cut in parts slices, images pqp long (zeros past P*Q)."""

    splits: int
    parts: int
    pqp: int

    def partial_elements(self, pr: Problem, align: int = 1, gather: bool | None = None) -> int:
        """float32 elements of the partials (0: one GEMM straight into dw; the tap gather's always, its
        rows ``align``-padded; ``gather`` None: :func:`tap_gather`)."""
        partials = self.splits * self.parts
        if tap_gather(pr) if gather is None else gather:
            return partials * math.prod(gemm_mn(pr, align, True))
        return 0 if partials == 1 else partials * pr.k * pr.c * pr.r * pr.s


def plan(pr: Problem, cfg: TcConfig, align: int, target: Target, gather: bool | None = None) -> Plan:
    """The image groups (:func:`splits_of`), and when their tiles still leave SMs idle (few output
    channels, a long reduction: the seed's 16-channel layer) slices of each group's reduction, at least
    min_ktiles k tiles each and a whole number of chunks: a divisor of the chunk count near the wanted
    number, else every image padded up to a multiple of parts chunks (not when the groups are single
    images read as they are: padding would bring dy's copy back, so the divisor is kept); splits *
    parts stays within grid z (65535). ``gather``: the route (None: :func:`tap_gather`)."""
    splits = splits_of(pr, cfg, align, target, gather)
    pqp = padded(math.prod(pr.spatial_out), align)
    lz = pr.n // splits * pqp
    m, n = gemm_mn(pr, align, gather)
    blocks = math.ceil(m / cfg.BM) * math.ceil(n / cfg.BN) * splits
    parts = max(1, min(math.ceil(2 * target.sm_count / blocks), lz // (min_ktiles(target) * cfg.BK),
                       65535 // splits))
    if parts > 1 and (lz // align) % parts:
        divisor = max(d for d in range(1, parts + 1) if (lz // align) % d == 0)
        if (divisor > 1 and 2 * divisor >= parts) or as_is(pr, splits, align)[0]:
            parts = divisor
        else:
            pqp = padded(math.prod(pr.spatial_out), align * parts)
    return Plan(splits, parts, pqp)


def workspace_elements(pr: Problem, cfg: TcConfig, align: int, target: Target,
                       gather: bool | None = None) -> tuple[int, int]:
    """(elements in the storage type, float32 elements) the run lends from the scratch pool (the tap
    gather, ``gather`` None: :func:`tap_gather`: dy's split-major copy and x's channels-last one,
    :mod:`.taps`)."""
    gather = tap_gather(pr) if gather is None else gather
    p = plan(pr, cfg, align, target, gather)
    if gather:
        return (pr.n * (p.pqp * pr.k + math.prod(pr.spatial_in) * padded(pr.c, align)),
                p.partial_elements(pr, align, True))
    return pr.n * p.pqp * (pr.k + pr.c * pr.r * pr.s), p.partial_elements(pr)


@functools.lru_cache(maxsize=256)
def dy_as_image(pr: Problem) -> Problem:
    """The geometry that unfolds dy [N, K, P, Q] with a 1x1 tap: a copy with padded rows (3D: dy's
    pixels as one row, [N, K, 1, Do*P*Q])."""
    if pr.ndim == 3:
        return make_problem("forward", pr.n, pr.k, 1, math.prod(pr.spatial_out), 1, 1, 1, dtype=pr.dtype)
    return make_problem("forward", pr.n, pr.k, pr.p, pr.q, 1, 1, 1, dtype=pr.dtype)


def as_is(pr: Problem, splits: int, align: int, pqp: int | None = None) -> tuple[bool, bool]:
    """Whether dy (the GEMM's A) and x (its Bt) are already the split-major operands (module doc) of a
    plan with ``splits`` image groups and images ``pqp`` long (default: P*Q rounded up to whole chunks),
    leaving their pointers' alignment aside."""
    px = math.prod(pr.spatial_out)
    pqp = padded(px, align) if pqp is None else pqp
    dense = splits == pr.n and pqp == px
    one_by_one = (pr.r, pr.s, pr.stride, pr.padding) == (1, 1, (1, 1), (0, 0)) and pr.ndim == 2
    return dense, dense and one_by_one


def run_wgrad(pr: Problem, cfg: TcConfig, itype: str, store: type, align: int, x, dy, dw) -> None:
    """dw [K, C, R, S] from x [N, C, H, W] and dy [N, K, P, Q] (device arrays in the storage type,
    C-contiguous)."""
    crs = pr.c * pr.r * pr.s
    the_plan = plan(pr, cfg, align, runtime.target())
    splits, parts, pqp = the_plan
    ipb = pr.n // splits
    lz = ipb * pqp  # reduction length of one split
    dy_as_is, x_as_is = as_is(pr, splits, align, pqp)
    dy_as_is, x_as_is = dy_as_is and runtime.is_aligned(dy), x_as_is and runtime.is_aligned(x)
    n_a, n_bt = (0 if dy_as_is else splits * pr.k * lz), (0 if x_as_is else splits * crs * lz)
    n_f32 = the_plan.partial_elements(pr)
    # the unfold moves bits: 16-bit types as uint16 (a float16 zero constant is invalid NVVM IR)
    bits = np.uint16 if np.dtype(store).itemsize == 2 else store
    with scratch(max(n_a + n_bt, 1), store) as buf, scratch(max(n_f32, 1), np.float32) as f32:
        a = dy.reshape(dy.size) if dy_as_is else buf[:n_a]
        bt = x.reshape(x.size) if x_as_is else buf[n_a:n_a + n_bt]
        if not dy_as_is:
            unfold_into(dy_as_image(pr), dy.view(bits), a.view(bits), 0, pr.n, pq_out=pqp,
                        images_per_block=ipb, strides=(pr.k * lz, pqp, lz), dtype=np.dtype(bits).name)
        if not x_as_is:
            unfold_into(pr, x.view(bits), bt.view(bits), 0, pr.n, pq_out=pqp, images_per_block=ipb,
                        strides=(crs * lz, pqp, lz), dtype=np.dtype(bits).name)
        out = dw.reshape(pr.k, crs)
        if splits * parts == 1:
            tc_gemm.launcher(itype, cfg, a.reshape(pr.k, lz), bt.reshape(crs, lz), out)()
            return
        part = f32[:n_f32]  # every split's (and slice's) GEMM in one launch, side by side
        a3, bt3 = a.reshape(splits, pr.k, lz), bt.reshape(splits, crs, lz)
        if parts == 1:
            tc_gemm.batched_launcher(itype, cfg, a3, bt3, part.reshape(splits, pr.k, crs))()
        else:
            tc_gemm.parted_launcher(itype, cfg, a3, bt3, part.reshape(splits * parts, pr.k, crs), parts)()
        sum_partials(part, out.reshape(-1), splits * parts, out_kind=convert.half_kind(pr.dtype))
