"""The host side of the implicit-GEMM kernels: each launch's int32 parameter table (the kernels'
ParamTables, then forward's kk table), its grid and split-K workspace, prepared once per (problem, tile,
workspace limit, target) and kept in the device's context, and the launches themselves.

    forward / dgrad   one launch per GEMM of gathers.gathers (dgrad: per stride phase)   forward.gather_kernel
    wgrad             one launch                                                         wgrad.wgrad_kernel

The grids are configured at each launch, not cached: the simulator's ``kernel[grid, block]`` sets the
grid on the one kernel object of a tile and returns it, so a cached configured kernel would launch with
the grid of whichever problem configured that tile last.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, ContextManager

import numpy as np

from convlab import runtime
from convlab.kernels.epilogue import EpilogueOperands
from convlab.kernels.simt.tile import Tile
from convlab.problem import Problem
from convlab.runtime import context
from convlab.runtime.scratch import scratch

from .common import plan, workspace_shape
from .forward import gather_kernel
from .gathers import DEPTH_PARAMS, GENERAL_PARAMS, PARAMS, gathers, is_aligned
from .wgrad import DEPTH_PARAMS as WGRAD_DEPTH, GENERAL_PARAMS as WGRAD_GENERAL, is_aligned as wgrad_aligned
from .wgrad import wgrad_kernel


def _params(problem: Problem, index: int, tile: Tile, splits: int, chunk: int, n_tiles: int,
            general: bool):
    """Device int32 array: the PARAMS values (the general kernel: GENERAL_PARAMS'), then the kk table
    of GEMM ``index`` of ``gathers(problem)``."""
    ga = gathers(problem)[index]
    values = dict(M=ga.m, N=ga.n, Kg=ga.k, **ga.geo._asdict(), out_img=ga.out_img, chunk=chunk,
                  n_tiles=n_tiles, splits=splits, has_bias=int(problem.bias))
    if ga.depth is not None:
        head = DEPTH_PARAMS.pack(**values, tiles_per_group=math.ceil(ga.m / tile.bm) * n_tiles,
                                 **ga.extra._asdict(), **ga.depth._asdict())
    elif general:
        head = GENERAL_PARAMS.pack(**values, tiles_per_group=math.ceil(ga.m / tile.bm) * n_tiles,
                                   **ga.extra._asdict())
    else:
        head = PARAMS.pack(**values)
    return runtime.to_device(np.concatenate([head, ga.table]).astype(np.int32))


def prepared(problem: Problem, tile: Tile, workspace_limit: int, target: Any):
    """[(kernel, grid, params, workspace or None)] of one (problem, tile, limit, target), one per GEMM
    (dgrad: per stride phase), kept in the device's context (the parameter tables live on the device:
    one upload per shape, one lookup per call; convlab.reset drops them)."""
    return context.current().cached("implicit_gemm.forward", (problem, tile, workspace_limit, target),
                                    lambda: _prepare(problem, tile, workspace_limit, target), limit=256)


def _prepare(problem: Problem, tile: Tile, workspace_limit: int, target: Any) -> list:
    general = not is_aligned(problem, tile)
    kern = gather_kernel(tile.bm, tile.bn, tile.bk, tile.tm, tile.tn, problem.op == "forward", general,
                         problem.ndim)
    launches = []
    for index, ga in enumerate(gathers(problem)):
        splits, chunk, n_tiles = plan(problem, tile, workspace_limit, (ga.m, ga.n, ga.k), target)
        grid = (math.ceil(ga.m / tile.bm) * n_tiles * problem.groups, splits)
        params = _params(problem, index, tile, splits, chunk, n_tiles, general)
        launches.append((kern, grid, params, workspace_shape(problem, tile, splits, n_tiles, ga.m)))
    return launches


def launch(problem: Problem, tile: Tile, a, b, bias, out, workspace_limit: int,
           epilogue: EpilogueOperands | None = None) -> None:
    """Run forward or dgrad of ``problem``: a = x or dy, b = w, out = y or dx (device, C-contiguous;
    flattened inside the kernel, so no host-side views are built per call); one launch per GEMM.
    ``epilogue``: applied in the kernel's store (its residual C-contiguous like ``out``)."""
    bias = dummy() if bias is None else bias
    fused = ()
    if epilogue is not None:
        kern = gather_kernel(tile.bm, tile.bn, tile.bk, tile.tm, tile.tn, problem.op == "forward",
                             not is_aligned(problem, tile), problem.ndim, epilogue.epilogue)
        r = runtime.flat_view(out) if epilogue.residual is None else epilogue.residual
        fused = (r, epilogue.scale, epilogue.shift)
    for plain, grid, params, ws in prepared(problem, tile, workspace_limit, runtime.target()):
        if grid[0] == 0:  # no rows (batch 0)
            continue
        with lend_workspace(ws) as buf:
            (kern if fused else plain)[grid, tile.threads](a, b, params, bias, out, buf, *fused)


def _wgrad_params(problem: Problem, splits: int, chunk: int, n_tiles: int, tiles_per_group: int):
    """Device int32 array of GENERAL_PARAMS (3D: DEPTH_PARAMS; the aligned 2D kernel reads the PARAMS
    at its head)."""
    pr = problem
    m, n, k = pr.gemm_shape()
    (sh, sw), (ph, pw), (dh, dw) = pr.stride, pr.padding, pr.dilation
    vox, px, taps = math.prod(pr.spatial_in), math.prod(pr.spatial_out), math.prod(pr.kernel_size)
    values = dict(
        M=m, N=n, k_len=k, P=pr.p, Q=pr.q, KPQ=pr.k * px, CHW=pr.c * vox, H=pr.h, W=pr.w, RS=taps, S=pr.s,
        sh=sh, sw=sw, ph=ph, pw=pw, dh=dh, dw=dw, chunk=chunk, n_tiles=n_tiles, splits=splits,
        tiles_per_group=tiles_per_group, a_grp=m * px, b_grp=pr.c_per_group * vox, m_grp=m)
    if pr.ndim == 3:
        head = WGRAD_DEPTH.pack(**values, O=pr.do, D=pr.d, R_S=pr.r * pr.s, st_d=pr.stride_d,
                                 pad_d=pr.padding_d, dil_d=pr.dilation_d)
    else:
        head = WGRAD_GENERAL.pack(**values)
    return runtime.to_device(head.astype(np.int32))


def wgrad_prepared(problem: Problem, tile: Tile, workspace_limit: int, target: Any):
    """(kernel, grid, params, workspace shape or None) of one (problem, tile, limit, target), kept in
    the device's context as :func:`prepared`'s."""
    return context.current().cached("implicit_gemm.wgrad", (problem, tile, workspace_limit, target),
                                    lambda: _wgrad_prepare(problem, tile, workspace_limit, target), limit=256)


def _wgrad_prepare(problem: Problem, tile: Tile, workspace_limit: int, target: Any) -> tuple:
    splits, chunk, n_tiles = plan(problem, tile, workspace_limit, target=target)
    kern = wgrad_kernel(tile.bm, tile.bn, tile.tm, tile.tn, not wgrad_aligned(problem), problem.ndim)
    tiles_per_group = math.ceil(problem.gemm_shape()[0] / tile.bm) * n_tiles
    grid = (tiles_per_group * problem.groups, splits)
    params = _wgrad_params(problem, splits, chunk, n_tiles, tiles_per_group)
    return kern, grid, params, workspace_shape(problem, tile, splits, n_tiles)


def wgrad_launch(problem: Problem, tile: Tile, x, dy, out, workspace_limit: int) -> None:
    """dw (device, (K, C', R, S)) from device x (N, C, H, W) and dy (N, K, P, Q), C-contiguous (3D:
    (K, C', T, R, S), (N, C, D, H, W), (N, K, Do, P, Q))."""
    kern, grid, params, ws = wgrad_prepared(problem, tile, workspace_limit, runtime.target())
    with lend_workspace(ws) as buf:
        kern[grid, tile.threads](x, dy, params, out, buf)


def lend_workspace(shape: tuple[int, int] | None) -> ContextManager[Any]:
    """The split-K workspace of ``shape`` (:func:`workspace`), or the dummy array when None."""
    return contextlib.nullcontext(dummy()) if shape is None else workspace(*shape)


def workspace(partial: int, tiles: int) -> ContextManager[Any]:
    """``with workspace(partial, tiles) as ws``: a float32 buffer of ``partial`` split-K partials, then
    ``tiles`` counters that are zero on entry, lent by :func:`convlab.runtime.scratch.scratch`. The kernels
    return every counter to zero; the pool re-zeroes them when the buffer's last use did not end
    normally (a launch that raised may leave counters non-zero) or was not a split-K workspace."""
    return scratch(partial + tiles, np.float32, zeroed=tiles)


def dummy():
    """A 1-element float32 device array standing in for an absent bias or workspace (one per device)."""
    return context.current().cached("implicit_gemm.dummy", np.float32, lambda: runtime.empty((1,), np.float32))
