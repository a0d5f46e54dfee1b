"""Backward-weight on tensor cores by the tap gather of :mod:`convlab.kernels.tensor_core.wgrad`, no column
buffer: every 3D problem, and a 2D (1D) one whose filter has more than one tap over whole chunks of
channels on a large plane (:func:`.wgrad.tap_gather`; a 1x1 one whose x is channels-last: the plugin's
``may_gather_1x1``).

    dwT[(t, r, s, c), k] = sum_{n, o, p, q} xh[n, o*sd - pd + t*dd, ..., c] * dy[n, k, o, p, q]   (2D: no o, t)

    xh  x in NDHWC (NHWC), channels padded to Cp (whole 16-byte chunks): x itself when it is channels-last
        with C = Cp and 16-byte aligned, else one transposing copy (x's size, not T*R*S times it)
    dy  split-major [z][k][ipb * OPQp] as the 2D route's (:mod:`.wgrad`): dy itself when every split is
        one image, Do*P*Q is in whole chunks and dy is aligned, else a padded copy
    dw  the fp32 partials of every (split, slice) summed in order and transposed into dw (K, C, T, R, S)
        in the output type (:func:`convlab.kernels.tensor_core.wgrad.finish`)

The splits and slices of the reduction are :func:`.wgrad.plan`'s, on the GEMM M = T*R*S*Cp, N = K.
Why not the unfold of the 1x1 route (:mod:`.wgrad`): it writes and reads T*R*S copies of x (9 for a 3x3
layer, 27 for a 3x3x3 one); the gather reads x once per tap from L2. The gather reads A m-contiguous,
which wgmma does not take: this route runs on mma.sync configs only.
"""
from __future__ import annotations

import math

import numpy as np

from convlab import runtime
from convlab.kernels.data import convert, transpose
from convlab.kernels.tensor_core import wgrad as tc_wgrad
from convlab.kernels.tensor_core.config import TcConfig
from convlab.problem import Problem
from convlab.runtime.scratch import scratch

from convlab.kernels.conv.unfold import unfold_into

from .wgrad import as_is, dy_as_image, padded, plan


def run_taps(pr: Problem, cfg: TcConfig, itype: str, store: type, align: int, x, dy, dw, x_last: bool) -> None:
    """dw (K, C, [T,] R, S) from x (N, C, [D,] H, W; channels-last memory when ``x_last``) and dy (N, K,
    [Do,] P, Q), C-contiguous device arrays in the storage type (x in either layout)."""
    the_plan = plan(pr, cfg, align, runtime.target(), gather=True)
    splits, parts, pqp = the_plan
    ipb, cp, taps = pr.n // splits, padded(pr.c, align), math.prod(pr.kernel_size)
    vox = math.prod(pr.spatial_in)
    lz = ipb * pqp
    dy_as_is = as_is(pr, splits, align, pqp)[0] and runtime.is_aligned(dy)
    x_as_is = x_last and cp == pr.c and runtime.is_aligned(x)
    n_dy, n_x = (0 if dy_as_is else splits * pr.k * lz), (0 if x_as_is else pr.n * vox * cp)
    n_f32 = the_plan.partial_elements(pr, align, gather=True)
    bits = np.uint16 if np.dtype(store).itemsize == 2 else store  # the copies move bits
    flat = lambda t: runtime.kernel_view(runtime.flat_view(t))  # noqa: E731  (memory order)
    with scratch(max(n_dy + n_x, 1), store) as buf, scratch(max(n_f32, 1), np.float32) as part:
        bt = flat(dy) if dy_as_is else buf[:n_dy]
        xh = flat(x) if x_as_is else buf[n_dy:n_dy + n_x]
        if not dy_as_is:
            unfold_into(dy_as_image(pr), dy.view(bits), bt.view(bits), 0, pr.n, pq_out=pqp, images_per_block=ipb,
                        strides=(pr.k * lz, pqp, lz), dtype=np.dtype(bits).name)
        if not x_as_is:  # NCDHW (or channels-last with padded channels, through NCDHW) -> NDHWC, zero-padded
            if x_last:
                with scratch(pr.n * pr.c * vox, store) as nchw:
                    transpose.to_channels_last(flat(x), nchw, pr.n, vox, pr.c, vox)
                    transpose.to_channels_last(nchw, xh, pr.n, pr.c, vox, cp)
            else:
                transpose.to_channels_last(flat(x), xh, pr.n, pr.c, vox, cp)
        tc_wgrad.wgrad_launcher(itype, cfg, xh, bt, part[:n_f32], n_split=splits, parts=parts, ipb=ipb, opqp=pqp,
                                cp=cp, k=pr.k, spatial=pr.spatial_in, kernel=pr.kernel_size, out=pr.spatial_out,
                                stride=pr.strides, padding=pr.paddings, dilation=pr.dilations)()
        tc_wgrad.finish(part, dw.reshape(dw.size), splits * parts, cp=cp, c=pr.c, k=pr.k, taps=taps,
                        out_kind=convert.half_kind(pr.dtype))
