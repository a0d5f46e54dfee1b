"""The GEMMs that ``forward.gather_kernel`` runs for one problem, built on the host: forward is one GEMM,
backward-data one per stride phase (the strided dgrad decomposition of cuDNN and CUTLASS); which kernel
variant they need (``is_aligned``) and the split-K workspace of the largest (``workspace_elements``).

Backward-data with stride (sh, sw): input pixel h receives dy[p] through tap r only when
h + ph - r*dh = p*sh. Splitting the rows h = a + i*sh by phase a < sh, each phase is a stride-1 gather
over dy with its own taps:

    phase (a, b):  rows m = (n, i, j) -> dx[n, c, a + i*sh, b + j*sw],  i < ceil((H - a) / sh)
                   taps r with (a + ph - r*dh) % sh == 0, at dy row i + (a + ph - r*dh) // sh  (same for s)
                   A[m, (k, r, s)] = dy[n, k, i + rd(r), j + sd(s)]      B[(k, r, s), c] = w[k, c, r, s]

so no product with a zero of the dilated dy is formed, and a phase without taps only writes its bias.
Stride 1 is the single phase (0, 0). Every GEMM is per group (M x N = K/groups or C/groups x K =
C/groups*R*S or K/groups*|taps|); ``extra`` carries what the general kernel needs for groups and the
phase's output pixels:

    a_grp, b_grp, n_grp    group g reads a + g*a_grp, b + g*b_grp and writes columns g*n_grp + n
    o0, sth, stw, och      pixel (i, j) of image img, channel n goes to
                           out[img*out_img + n*och + o0 + i*sth + j*stw]
"""
from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import numpy as np

from convlab.problem import Problem
from convlab.kernels.simt.tile import Tile

from .common import plan, workspace_shape


class Gather(NamedTuple):
    """One GEMM of the gather kernel: sizes, the PARAMS geometry, the kk table, the EXTRA values."""

    m: int
    n: int
    k: int
    geo: tuple[int, ...]   # OHW, OW, a_img, a_row, lim_h, lim_w, sh, sw, ph, pw, b_ncol
    out_img: int
    table: np.ndarray      # [off | rd | sd | boff] over kk, int64
    extra: tuple[int, ...]  # a_grp, b_grp, n_grp, o0, sth, stw, och


def _forward(pr: Problem) -> Gather:
    """kk = (c, r, s): x[n, g*C' + c, p*sh - ph + r*dh, q*sw - pw + s*dw], B = w rows."""
    (sh, sw), (ph, pw), (dh, dw) = pr.stride, pr.padding, pr.dilation
    m, n, k = pr.gemm_shape()
    o, rr, ss = (a.ravel().astype(np.int64) for a in np.meshgrid(
        np.arange(pr.c_per_group), np.arange(pr.r), np.arange(pr.s), indexing="ij"))
    table = np.concatenate((o * pr.h * pr.w + rr * dh * pr.w + ss * dw, rr * dh, ss * dw,
                            o * pr.r * pr.s + rr * pr.s + ss))
    geo = (pr.p * pr.q, pr.q, pr.c * pr.h * pr.w, pr.w, pr.h, pr.w, sh, sw, ph, pw, k)
    extra = (pr.c_per_group * pr.h * pr.w, n * k, n, 0, pr.q, 1, pr.p * pr.q)
    return Gather(m, n, k, geo, pr.k * pr.p * pr.q, table, extra)


def _taps(a: int, stride: int, pad: int, dil: int, size: int) -> tuple[list[int], list[int]]:
    """(taps, dy offsets) of phase ``a`` along one axis: taps t with (a + pad - t*dil) % stride == 0."""
    taps = [t for t in range(size) if (a + pad - t * dil) % stride == 0]
    return taps, [(a + pad - t * dil) // stride for t in taps]


def _dgrad_phase(pr: Problem, a: int, b: int) -> Gather:
    """Phase (a, b) of backward-data (see the module docstring)."""
    (sh, sw), (ph, pw), (dh, dw) = pr.stride, pr.padding, pr.dilation
    hp, wp = math.ceil((pr.h - a) / sh), math.ceil((pr.w - b) / sw)
    rs, rds = _taps(a, sh, ph, dh, pr.r)
    ss, sds = _taps(b, sw, pw, dw, pr.s)
    kpg, cpg = pr.k_per_group, pr.c_per_group
    o, ri, si = (v.ravel() for v in np.meshgrid(np.arange(kpg), np.arange(len(rs)), np.arange(len(ss)),
                                                indexing="ij"))
    r, rd = np.array(rs, np.int64)[ri], np.array(rds, np.int64)[ri]
    s, sd = np.array(ss, np.int64)[si], np.array(sds, np.int64)[si]
    o = o.astype(np.int64)
    table = np.concatenate((o * pr.p * pr.q + rd * pr.q + sd, rd, sd,
                            o * cpg * pr.r * pr.s + r * pr.s + s))
    geo = (hp * wp, wp, pr.k * pr.p * pr.q, pr.q, pr.p, pr.q, 1, 1, 0, 0, pr.r * pr.s)
    extra = (kpg * pr.p * pr.q, kpg * cpg * pr.r * pr.s, cpg, a * pr.w + b, sh * pr.w, sw, pr.h * pr.w)
    return Gather(pr.n * hp * wp, cpg, len(o), geo, pr.c * pr.h * pr.w, table, extra)


@functools.lru_cache(maxsize=256)
def gathers(problem: Problem) -> tuple[Gather, ...]:
    """The GEMMs of a forward or dgrad problem (dgrad: its non-empty stride phases, row-major)."""
    if problem.op == "forward":
        return (_forward(problem),)
    sh, sw = problem.stride
    return tuple(_dgrad_phase(problem, a, b) for a in range(min(sh, problem.h))
                 for b in range(min(sw, problem.w)))


def is_aligned(problem: Problem, tile: Tile) -> bool:
    """Whether the aligned kernel runs ``problem``: one group, one GEMM (forward, or stride-1 dgrad)
    whose reduction is a multiple of BK (M and N remainders it handles itself)."""
    ga = gathers(problem)
    return problem.groups == 1 and len(ga) == 1 and ga[0].k % tile.bk == 0 and \
        (problem.op == "forward" or problem.stride == (1, 1))


def workspace_elements(problem: Problem, tile: Tile, workspace_limit: int, target: Any = None) -> int:
    """Split-K workspace elements of the largest of the problem's launches on ``target`` (default: the
    current one; 0 when none splits)."""
    most = 0
    for ga in gathers(problem):
        splits, _, n_tiles = plan(problem, tile, workspace_limit, (ga.m, ga.n, ga.k), target)
        shape = workspace_shape(problem, tile, splits, n_tiles, ga.m)
        most = max(most, 0 if shape is None else sum(shape))
    return most
