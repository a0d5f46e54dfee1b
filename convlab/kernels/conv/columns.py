"""Column buffers: their layout, and the launches of the unfold / fold kernels over them
(``flat_launches``), shared by the explicit-GEMM plugins (im2col, col2im) and the tensor-core plugin's
wgrad and strided dgrad; the geometry parameters of those generated kernels (``geometry_params``).

Column layout (C' = C/groups; 2D shown, 3D adds a depth tap t and an output depth o, 1D keeps the
width): cols[n, (g*C' + c, r, s), (p, q)] = x[n, g*C' + c, p*sh - ph + r*dh, q*sw - pw + s*dw] (0
outside x); image n, group g is a (C'RS x PQ) matrix (3D: C'TRS x DoPQ). Per image and group the ops
are GEMMs of the tiled family (:mod:`convlab.kernels.simt.gemm`):

    op       M      N      K     (summed over images for wgrad, in k-splits added by sum_partials)
    forward  K'     PQ     C'RS
    dgrad    C'RS   PQ     K'
    wgrad    K'     C'RS   PQ
"""
from __future__ import annotations

import math

from convlab import runtime
from convlab.kernels.data.splitk import sm_count
from convlab.runtime.targets import Target
from convlab.kernels.conv.axes import names

#: (threads a block, blocks per SM) of the unfold / fold kernels' grid-stride launches: enough blocks
#: to cover the latency on a GPU; a few small ones on the simulator (each thread is a Python thread)
LAUNCH_GPU, LAUNCH_SIM = (256, 16), (32, 2)
_U32 = 2 ** 32


def launch_shape(target: Target | None = None) -> tuple[int, int]:
    """(threads a block, blocks per SM) of the unfold / fold launches on ``target`` (default: current)."""
    return LAUNCH_SIM if (runtime.target() if target is None else target).simulator else LAUNCH_GPU


PAIR_LIMIT = _U32  # (row, pixel) pairs of one launch stay below it (their index is a uint32)


def flat_launches(rows: int, pixels: int, whole: int = 1) -> list[tuple[int, int, int, int]]:
    """The unfold / fold kernels' launches over the (row, pixel) pairs of ``rows`` rows of ``pixels``
    on the current target: (first row, rows, blocks, threads a block) each, one thread per pair,
    grid-stride over at most :func:`launch_shape`'s blocks per SM (so that small images, P*Q = 49 or
    196, fill every thread: a block per row left up to 80% of them idle). A launch's pairs stay below
    2**32 (uint32 indices) and its rows are a multiple of ``whole`` (an image's channels); ValueError
    when ``whole`` rows alone pass 2**32 pairs."""
    per = min(rows, (PAIR_LIMIT - 1) // max(pixels, 1)) // whole * whole
    if per == 0 and rows:
        raise ValueError(f"{whole} rows x {pixels} pixels: more than 2**32 - 1 for 32-bit indices")
    per = max(per, 1)
    threads, per_sm = launch_shape()
    cap = per_sm * sm_count()
    launches = []
    for r0 in range(0, rows, per):
        n = min(per, rows - r0)
        launches.append((r0, n, max(1, min(cap, math.ceil(n * pixels / threads))), threads))
    return launches


def geometry_params(nd: int) -> str:
    """The geometry parameters of the unfold / fold kernels for ``nd`` axes, depth first: input
    sizes, filter sizes, output sizes, strides, paddings, dilations (2D: H, W, R, S, P, Q, sh, sw, ph,
    pw, dh, dw)."""
    return ", ".join(names(nd, "size") + names(nd, "kernel") + names(nd, "extent") + names(nd, "stride")
                     + names(nd, "pad") + names(nd, "dil"))

