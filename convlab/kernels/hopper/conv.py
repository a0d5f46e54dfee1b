"""Launching the Hopper convolution kernel on channels-last device operands: the tensor maps, the
persistent schedule, split-K partials and their ordered sum.

    forward(geo, cfg, itype, x, w, y, bias, xs=, ws=)
        y [M, K] (M = N x output pixels) = the forward form ``geo`` of x [N, *size, xs] and the
        K[T]RSC filter w [K, *kernel, ws] (xs / ws >= C elements between pixels / taps, padding zero)
    wgrad(geo, cfg, itype, x, dy, dw, xs=)
        dw [K, *kernel, C] = sum over pixels of dy [M, K] x the im2col rows of x [N, *size, xs]

All flat device arrays in the storage type. A split schedule (schedule.plan: fewer tiles than SMs) runs
the kernel into fp32 partials [splits, output] from the scratch pool and sums them in split order with
the bias and the rounding (convlab.kernels.data.splitk.sum_partials: deterministic).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from convlab import runtime
from convlab.kernels.arch import tensormap
from convlab.kernels.arch.intrinsics import u32 as U
from convlab.kernels.arch.wgmma import ITEMSIZE
from convlab.kernels.data.splitk import MAX_INDEX, sum_partials
from convlab.kernels.hopper import schedule
from convlab.kernels.hopper.config import HopperConfig
from convlab.kernels.hopper.epilogue import KINDS, Out
from convlab.kernels.hopper.geometry import Geometry, dense_map
from convlab.kernels.hopper.kernel import conv_kernel, launch, out_kind
from convlab.runtime.scratch import scratch
from convlab.runtime.targets import Target

#: map dtype of each input type and output kind (bf16 moves as its bits)
MAP_DTYPE = {"f16": "float16", "bf16": "uint16", "tf32": "float32", "f32": "float32"}
#: k tiles a split keeps at least on a GPU (fewer: the prologue and the partials' sum dominate); on the
#: simulator 1, so that its tiny problems split
MIN_K_GPU, MIN_K_SIM = 8, 1
HALF = {"f16": "float16", "bf16": "bfloat16"}


def gemm(geo: Geometry, cfg: HopperConfig, kind: str) -> tuple[int, int, int, int]:
    """(tiles_m, tiles_n, k tiles, output elements) of ``kind``'s GEMM (kinds.py)."""
    if kind == "wgrad":
        return (math.ceil(geo.k / cfg.BM), geo.taps * math.ceil(geo.c / cfg.BN), math.ceil(geo.m / cfg.BK),
                geo.k * geo.taps * geo.c)
    return math.ceil(geo.m / cfg.BM), math.ceil(geo.k / cfg.BN), geo.taps * math.ceil(geo.c / cfg.BK), geo.m * geo.k


def plan(geo: Geometry, cfg: HopperConfig, itype: str, target: Target, kind: str = "fprop") -> schedule.Schedule:
    """The persistent schedule on ``target`` (one CTA per SM; split only where the config's fp32 C tile
    fits its shared memory and the partials 32-bit indexing)."""
    tiles_m, tiles_n, ktiles, elements = gemm(geo, cfg, kind)
    most = 1 if cfg.reason(itype, 4, kind) else max(1, MAX_INDEX // max(1, elements))
    return schedule.plan(tiles_m, tiles_n, ktiles, target.sm_count, 1, MIN_K_SIM if target.simulator else MIN_K_GPU,
                         most)


def partial_elements(geo: Geometry, cfg: HopperConfig, itype: str, target: Target, kind: str = "fprop") -> int:
    """float32 elements of the split-K partials (0 when not split)."""
    splits = plan(geo, cfg, itype, target, kind).splits
    return 0 if splits == 1 else splits * gemm(geo, cfg, kind)[3]


def _swizzle(cfg: HopperConfig, size: int) -> int:
    span = cfg.epilogue_width(size) * size
    return span if span in (32, 64, 128) else 0


def _args(geo: Geometry, sched: schedule.Schedule, maps: Any, bias: Any, n: int, cb: int) -> tuple:
    axes = []
    per_axis = (geo.out, geo.stride, geo.padding, geo.kernel, geo.dilation)
    for out, st, pd, ks, dl in zip(*(reversed(v) for v in per_axis)):
        axes += [U(out), U(st), np.int32(pd), U(ks), U(dl)]
    return (maps, bias, U(n), U(sched.ktiles), U(cb), U(sched.tiles_m), U(sched.tiles_n), U(sched.units),
            U(sched.per_split), U(sched.group), U(geo.pixels), *axes)


def _run(kind: str, geo: Geometry, cfg: HopperConfig, itype: str, sched: schedule.Schedule, words: list, y: Any,
         bias: Any, output: Callable[[str, int, int, Any, tuple], Any], n: int, cb: int) -> None:
    """Encode the output map (``output(dtype, size, splits, array, extra box dims)``), launch, and with a
    split schedule sum the partials into ``y``."""
    yk = out_kind(itype, y.dtype)
    if sched.splits == 1:
        size = KINDS[yk][2]
        words = words + [tensormap.encode(output(MAP_DTYPE[yk], size, 1, y, ()), y)]
        out = Out(yk, bias is not None, False)
        args = _args(geo, sched, runtime.to_device(np.concatenate(words)), y if bias is None else bias, n, cb)
        launch(conv_kernel(cfg, itype, geo.nd, out, kind), cfg, itype, out, sched.ctas, args)
        return
    with scratch(sched.splits * y.size, np.float32) as part:
        words = words + [tensormap.encode(output("float32", 4, sched.splits, part, (1,)), part)]
        out = Out("f32", False, True)
        args = _args(geo, sched, runtime.to_device(np.concatenate(words)), y, n, cb)
        launch(conv_kernel(cfg, itype, geo.nd, out, kind), cfg, itype, out, sched.ctas, args)
        sum_partials(part, y, sched.splits, bias=bias, inner=1, out_kind=None if yk == "f32" else HALF[yk])


def forward(geo: Geometry, cfg: HopperConfig, itype: str, x: Any, w: Any, y: Any, bias: Any, *, xs: int,
            ws: int, target: Target | None = None) -> None:
    """The module doc's ``forward`` (bias None or [K])."""
    size, dtype = ITEMSIZE[itype], MAP_DTYPE[itype]
    sched = plan(geo, cfg, itype, target or runtime.target())
    words = [tensormap.encode(geo.input_map(dtype, xs, runtime.device_pointer(x), cfg.BM, cfg.BK, size), x),
             tensormap.encode(geo.filter_map(dtype, ws, runtime.device_pointer(w), cfg.BN, cfg.BK, size), w)]

    def output(dtype: str, osize: int, splits: int, arr: Any, extra: tuple) -> Any:
        dims = (geo.k, geo.m) + ((splits,) if splits > 1 else ())
        return dense_map(dtype, dims, osize, runtime.device_pointer(arr), (cfg.epilogue_width(osize), cfg.BM) + extra,
                         _swizzle(cfg, osize))
    _run("fprop", geo, cfg, itype, sched, words, y, bias, output, geo.k, math.ceil(geo.c / cfg.BK))


def wgrad(geo: Geometry, cfg: HopperConfig, itype: str, x: Any, dy: Any, dw: Any, *, xs: int,
          target: Target | None = None) -> None:
    """The module doc's ``wgrad`` (f16 / bf16: its operands are MN-major)."""
    size, dtype = ITEMSIZE[itype], MAP_DTYPE[itype]
    sched = plan(geo, cfg, itype, target or runtime.target(), "wgrad")
    per = min(128, cfg.BN * size) // size  # channels of one B box
    words = [tensormap.encode(dense_map(dtype, (geo.k, geo.m), size, runtime.device_pointer(dy), (64, cfg.BK), 128),
                              dy),
             tensormap.encode(geo.input_map(dtype, xs, runtime.device_pointer(x), cfg.BK, per, size), x)]

    def output(dtype: str, osize: int, splits: int, arr: Any, extra: tuple) -> Any:
        dims = (geo.c, geo.taps, geo.k) + ((splits,) if splits > 1 else ())
        return dense_map(dtype, dims, osize, runtime.device_pointer(arr), (cfg.epilogue_width(osize), 1, cfg.BM) + extra,
                         _swizzle(cfg, osize))
    _run("wgrad", geo, cfg, itype, sched, words, dw, None, output, geo.c, math.ceil(geo.c / cfg.BN))
