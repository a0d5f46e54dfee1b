"""Launching the Hopper convolution kernel on channels-last device operands: the tensor maps, the
persistent schedule, split-K partials and their ordered sum.

    forward(geo, cfg, itype, x, w, y, bias, xs=, ws=, target=)
        y [M, K] (flat, rows ``K`` apart) = the forward form ``geo`` of x [N, *size, xs] and the K[T]RSC
        filter w [K, *kernel, ws] (flat; xs / ws >= C elements between pixels / taps, the padding zero)

A split schedule (schedule.plan: fewer tiles than SMs) runs the kernel into fp32 partials [splits, M, K]
from the scratch pool and sums them in split order with the bias and the rounding
(convlab.kernels.data.splitk.sum_partials: deterministic).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from convlab import runtime
from convlab.kernels.arch import tensormap
from convlab.kernels.arch.wgmma import ITEMSIZE
from convlab.kernels.arch.intrinsics import u32 as U
from convlab.kernels.data import convert
from convlab.kernels.data.splitk import MAX_INDEX, sum_partials
from convlab.kernels.hopper import schedule
from convlab.kernels.hopper.config import HopperConfig
from convlab.kernels.hopper.epilogue import KINDS, Out
from convlab.kernels.hopper.geometry import Geometry, output_map
from convlab.kernels.hopper.kernel import conv_kernel, launch, out_kind
from convlab.runtime.scratch import scratch
from convlab.runtime.targets import Target

#: map dtype of each input type (bf16 moves as its bits)
MAP_DTYPE = {"f16": "float16", "bf16": "uint16", "tf32": "float32", "f32": "float32"}
#: k tiles a split keeps at least on a GPU (fewer: the prologue and the partials' sum dominate); on the
#: simulator 1, so that its tiny problems split
MIN_K_GPU, MIN_K_SIM = 8, 1


def plan(geo: Geometry, cfg: HopperConfig, itype: str, target: Target) -> schedule.Schedule:
    """The persistent schedule of ``geo`` with ``cfg`` on ``target`` (one CTA per SM; split only where
    the config's fp32 C tile fits its shared memory and the partials 32-bit indexing)."""
    ktiles = geo.taps * math.ceil(geo.c / cfg.BK)
    most = 1 if cfg.reason(itype, 4) else max(1, MAX_INDEX // max(1, geo.m * geo.k))
    return schedule.plan(math.ceil(geo.m / cfg.BM), math.ceil(geo.k / cfg.BN), ktiles, target.sm_count, 1,
                         MIN_K_SIM if target.simulator else MIN_K_GPU, most)


def partial_elements(geo: Geometry, cfg: HopperConfig, itype: str, target: Target) -> int:
    """float32 elements of the split-K partials (0 when not split)."""
    splits = plan(geo, cfg, itype, target).splits
    return 0 if splits == 1 else splits * geo.m * geo.k


def _epilogue_swizzle(cfg: HopperConfig, size: int) -> int:
    span = cfg.epilogue_width(size) * size
    return span if span in (32, 64, 128) else 0


def _args(geo: Geometry, cfg: HopperConfig, sched: schedule.Schedule, maps: Any, bias: Any) -> tuple:
    axes = []
    for out, st, pd, ks, dl in zip(*(reversed(v) for v in (geo.out, geo.stride, geo.pad, geo.kernel, geo.dil))):
        axes += [U(out), U(st), np.int32(pd), U(ks), U(dl)]
    return (maps, bias, U(geo.k), U(sched.ktiles), U(math.ceil(geo.c / cfg.BK)), U(sched.tiles_m),
            U(sched.tiles_n), U(sched.units), U(sched.per_split), U(sched.group), U(geo.pixels), *axes)


def forward(geo: Geometry, cfg: HopperConfig, itype: str, x: Any, w: Any, y: Any, bias: Any, *, xs: int,
            ws: int, target: Target | None = None) -> None:
    """The module doc's ``forward`` (flat device arrays in the storage type; bias None or [K])."""
    target = target or runtime.target()
    size = ITEMSIZE[itype]
    kind = out_kind(itype, y.dtype)
    sched = plan(geo, cfg, itype, target)
    dtype = MAP_DTYPE[itype]
    words = [tensormap.encode(geo.input_map(dtype, xs, runtime.device_pointer(x), cfg.BM, cfg.BK, size), x),
             tensormap.encode(geo.filter_map(dtype, ws, runtime.device_pointer(w), cfg.BN, cfg.BK, size), w)]
    dummy = y if bias is None else bias
    if sched.splits == 1:
        osize = KINDS[kind][2]
        words.append(tensormap.encode(output_map(MAP_DTYPE[kind], geo.m, geo.k, geo.k, runtime.device_pointer(y),
                                                 cfg.BM, cfg.epilogue_width(osize), osize,
                                                 _epilogue_swizzle(cfg, osize)), y))
        out = Out(kind, bias is not None, False)
        maps = runtime.to_device(np.concatenate(words))
        launch(conv_kernel(cfg, itype, geo.nd, out), cfg, itype, out, sched.ctas, _args(geo, cfg, sched, maps, dummy))
        return
    with scratch(sched.splits * geo.m * geo.k, np.float32) as part:
        words.append(tensormap.encode(output_map("float32", geo.m, geo.k, geo.k, runtime.device_pointer(part),
                                                 cfg.BM, cfg.epilogue_width(4), 4, _epilogue_swizzle(cfg, 4),
                                                 sched.splits), part))
        out = Out("f32", False, True)
        maps = runtime.to_device(np.concatenate(words))
        launch(conv_kernel(cfg, itype, geo.nd, out), cfg, itype, out, sched.ctas, _args(geo, cfg, sched, maps, y))
        sum_partials(part, y, sched.splits, bias=bias, inner=1,
                     out_kind=None if kind == "f32" else convert.half_kind({"f16": "float16", "bf16": "bfloat16"}[kind]))
