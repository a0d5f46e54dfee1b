"""The GEMMs that ``forward.gather_kernel`` runs for one problem, built on the host for 2 or 3 spatial
dimensions: forward is one GEMM, backward-data one per stride phase (the strided dgrad decomposition
of cuDNN and CUTLASS); which kernel variant they need (``is_aligned``) and the split-K workspace of
the largest (``workspace_elements``).

Every gather is an N-d index map: GEMM row m = (n, o_1 .. o_N) (output pixels, the last axis fastest)
and reduction column kk = (c, t_1 .. t_N) (channel, filter taps), with

    A[m, kk] = a[base(m) + off(kk)]   when 0 <= b_i(m) + d_i(kk) < L_i on every axis i (else 0)

base(m) and the per-axis starts b_i(m) come from the row's output position, off(kk) and the per-axis
tap offsets d_i(kk) from a small int32 table. The table holds [off | d_h | d_w | boff] over kk, and
for 3D the depth column d_d after them (a 2D table is a 3D one's prefix in layout).

Backward-data with stride: input pixel z receives dy[o] through tap t only when z + pad - t*dil =
o*stride, per axis. Splitting each axis's positions z = a + i*stride by phase a < stride, each phase
is a stride-1 gather over dy with its own taps:

    phase a:  rows m = (n, i_1 .. i_N) -> dx[n, c, a_1 + i_1*st_1, ..],  i_j < ceil((size_j - a_j) / st_j)
              taps t with (a + pad - t*dil) % st == 0 on each axis, at dy position i + (a + pad - t*dil) // st
              A[m, (k, t..)] = dy[n, k, i + offsets(t)]      B[(k, t..), c] = w[k, c, t..]

so no product with a zero of the dilated dy is formed, and a phase without taps only writes its bias.
Stride 1 is the single phase (0, ..). Every GEMM is per group (M x N = K/groups or C/groups x K =
C/groups*taps); ``extra`` carries what the general kernel needs for groups and the phase's output
pixels, ``depth`` the depth axis of a 3D gather:

    a_grp, b_grp, n_grp    group g reads a + g*a_grp, b + g*b_grp and writes columns g*n_grp + n
    o0, sth, stw, och      pixel (i, j) of image img, channel n goes to
    (o_std)                out[img*out_img + n*och + o0 + (i_d*o_std +) i*sth + j*stw]
"""
from __future__ import annotations

import functools
import itertools
import math
from typing import Any, NamedTuple

import numpy as np

from convlab.kernels.params import ParamTable
from convlab.problem import Problem
from convlab.kernels.simt.tile import Tile

from .common import plan, workspace_shape


class Geometry(NamedTuple):
    """The gather's height / width geometry (forward.PARAMS): output pixels per image and per row, A's
    image and row strides, the bounds of the gathered rows and columns, stride, padding, and B's column
    stride."""

    OHW: int
    OW: int
    a_img: int
    a_row: int
    lim_h: int
    lim_w: int
    sh: int
    sw: int
    ph: int
    pw: int
    b_ncol: int


class Groups(NamedTuple):
    """What the general kernel adds (forward.GENERAL_PARAMS after tiles_per_group): the groups' offsets and a
    phase's output pixel map (module doc)."""

    a_grp: int
    b_grp: int
    n_grp: int
    o0: int
    sth: int
    stw: int
    och: int


class Depth(NamedTuple):
    """The depth axis of a 3D gather (forward.DEPTH_PARAMS): output pixels per depth slice, A's depth
    stride, the bound of the gathered depth, its stride and padding, and the output's depth stride of
    a phase's pixel map (``o_std``)."""

    plane: int
    a_dep: int
    lim_d: int
    st_d: int
    pad_d: int
    o_std: int


class Gather(NamedTuple):
    """One GEMM of the gather kernel: sizes, geometry, output image stride, the kk table, groups, and
    the depth axis (None in 2D)."""

    m: int
    n: int
    k: int
    geo: Geometry
    out_img: int
    table: np.ndarray      # [off | d_h | d_w | boff (| d_d)] over kk, int64
    extra: Groups
    depth: Depth | None


#: the scalar parameters of both kernels: GEMM sizes (Kg: the reduction per group), the gather's
#: Geometry, the output's image stride, the split-K plan and the bias flag
PARAMS = ParamTable("M", "N", "Kg", *Geometry._fields, "out_img", "chunk", "n_tiles", "splits", "has_bias")
#: the general kernel's: PARAMS, then the tiles of one group and the Groups offsets
GENERAL_PARAMS = PARAMS + ParamTable("tiles_per_group", *Groups._fields)
#: both 3D kernels': GENERAL_PARAMS, then the Depth axis
DEPTH_PARAMS = GENERAL_PARAMS + ParamTable(*Depth._fields)


def _steps(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Elements between neighbours along each axis of a C-contiguous block of ``sizes``."""
    return tuple(math.prod(sizes[i + 1:]) for i in range(len(sizes)))


def _table(off: np.ndarray, axis: list[np.ndarray], boff: np.ndarray) -> np.ndarray:
    """The kk table: [off | d_h | d_w | boff], then the depth offsets of a 3D gather."""
    return np.concatenate([off, *axis[-2:], boff, *axis[:-2]]).astype(np.int64)


def _grid(*sizes: int) -> list[np.ndarray]:
    """Every index of a C-ordered grid of ``sizes``, one flat int64 array per axis."""
    return [g.ravel().astype(np.int64) for g in np.meshgrid(*(np.arange(s) for s in sizes), indexing="ij")]


def _depth(pr: Problem, plane: int, a_dep: int, lim_d: int, st_d: int, pad_d: int, o_std: int) -> Depth | None:
    return Depth(plane, a_dep, lim_d, st_d, pad_d, o_std) if pr.ndim == 3 else None


def _forward(pr: Problem) -> Gather:
    """kk = (c, t..): x[n, g*C' + c, o*st - pad + t*dil ..], B = w rows (boff = kk)."""
    ins, outs = pr.spatial_in, pr.spatial_out
    m, n, k = pr.gemm_shape()
    c, *taps = _grid(pr.c_per_group, *pr.kernel_size)
    axis = [t * d for t, d in zip(taps, pr.dilations)]
    off = c * math.prod(ins) + sum(a * step for a, step in zip(axis, _steps(ins)))
    (sh, sw), (ph, pw) = pr.strides[-2:], pr.paddings[-2:]
    geo = Geometry(math.prod(outs), outs[-1], pr.c * math.prod(ins), ins[-1], ins[-2], ins[-1], sh, sw, ph, pw,
                   k)
    extra = Groups(pr.c_per_group * math.prod(ins), n * k, n, 0, outs[-1], 1, math.prod(outs))
    depth = _depth(pr, math.prod(outs[1:]), math.prod(ins[1:]), ins[0], pr.strides[0], pr.paddings[0],
                   math.prod(outs[1:]))
    return Gather(m, n, k, geo, pr.k * math.prod(outs), _table(off, axis, np.arange(k)), extra, depth)


def _taps(a: int, stride: int, pad: int, dil: int, size: int) -> tuple[list[int], list[int]]:
    """(taps, dy offsets) of phase ``a`` along one axis: taps t with (a + pad - t*dil) % stride == 0."""
    taps = [t for t in range(size) if (a + pad - t * dil) % stride == 0]
    return taps, [(a + pad - t * dil) // stride for t in taps]


def _dgrad_phase(pr: Problem, phase: tuple[int, ...]) -> Gather:
    """The phase ``phase`` (one start per axis) of backward-data (see the module docstring)."""
    ins, outs, kernel, strides = pr.spatial_in, pr.spatial_out, pr.kernel_size, pr.strides
    counts = [math.ceil((size - a) / st) for size, a, st in zip(ins, phase, strides)]
    found = [_taps(a, st, p, d, t) for a, st, p, d, t in zip(phase, strides, pr.paddings, pr.dilations, kernel)]
    kpg, cpg = pr.k_per_group, pr.c_per_group
    o, *picks = _grid(kpg, *(len(taps) for taps, _ in found))
    taps = [np.array(t, np.int64)[i] for (t, _), i in zip(found, picks)]
    axis = [np.array(d, np.int64)[i] for (_, d), i in zip(found, picks)]
    off = o * math.prod(outs) + sum(a * step for a, step in zip(axis, _steps(outs)))
    boff = o * cpg * math.prod(kernel) + sum(t * step for t, step in zip(taps, _steps(kernel)))
    geo = Geometry(math.prod(counts), counts[-1], pr.k * math.prod(outs), outs[-1], outs[-2], outs[-1], 1, 1, 0,
                   0, math.prod(kernel))
    steps_in = _steps(ins)
    extra = Groups(kpg * math.prod(outs), kpg * cpg * math.prod(kernel), cpg,
                   sum(a * step for a, step in zip(phase, steps_in)), strides[-2] * steps_in[-2], strides[-1],
                   math.prod(ins))
    depth = _depth(pr, math.prod(counts[1:]), math.prod(outs[1:]), outs[0], 1, 0, strides[0] * steps_in[0])
    return Gather(pr.n * math.prod(counts), cpg, len(o), geo, pr.c * math.prod(ins), _table(off, axis, boff),
                  extra, depth)


@functools.lru_cache(maxsize=256)
def gathers(problem: Problem) -> tuple[Gather, ...]:
    """The GEMMs of a forward or dgrad problem (2D or 3D; dgrad: its non-empty stride phases,
    row-major)."""
    if problem.op == "forward":
        return (_forward(problem),)
    starts = (range(min(st, size)) for st, size in zip(problem.strides, problem.spatial_in))
    return tuple(_dgrad_phase(problem, phase) for phase in itertools.product(*starts))


def is_aligned(problem: Problem, tile: Tile) -> bool:
    """Whether the aligned kernel runs ``problem``: one group, one GEMM (forward, or stride-1 dgrad)
    whose reduction is a multiple of BK (M and N remainders it handles itself)."""
    ga = gathers(problem)
    return problem.groups == 1 and len(ga) == 1 and ga[0].k % tile.bk == 0 and \
        (problem.op == "forward" or set(problem.strides) == {1})


def workspace_elements(problem: Problem, tile: Tile, workspace_limit: int, target: Any = None) -> int:
    """Split-K workspace elements of the largest of the problem's launches on ``target`` (default: the
    current one; 0 when none splits)."""
    most = 0
    for ga in gathers(problem):
        splits, _, n_tiles = plan(problem, tile, workspace_limit, (ga.m, ga.n, ga.k), target)
        shape = workspace_shape(problem, tile, splits, n_tiles, ga.m)
        most = max(most, 0 if shape is None else sum(shape))
    return most
