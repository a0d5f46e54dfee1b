"""The fused form's launches: the filter transform into U ([G*P, Ci, Ko], Ko fastest), then the fused kernel
of convlab.kernels.winograd.fused over (tile blocks, output-channel blocks, groups). Geometry from plan.py
(the non-fused form's: the same tiles, origins and filter roles)."""
from __future__ import annotations

import math

from convlab import runtime
from convlab.kernels.data import convert
from convlab.kernels.winograd.fused import FusedTile, fused_kernel, pick_tile
from convlab.kernels.transform.operands import flat, strides
from convlab.kernels.winograd.transforms import frozen, patch_transform
from convlab.plugin.contract import Config
from convlab.plugin.cost import Features, blocks_per_sm
from convlab.problem import Problem
from convlab.runtime.scratch import scratch
from convlab.runtime.targets import Target

from .plan import Plan, make_plan, stage_flops

_UNLIMITED = 1 << 40


def plan_of(problem: Problem, config: Config) -> Plan:
    return make_plan(problem, Config(m=config["m"], form="nonfused"), _UNLIMITED)


def tile_of(plan: Plan, target: Target) -> FusedTile:
    return pick_tile(plan.points, target.simulator)


def workspace_bytes(problem: Problem, config: Config, target: Target) -> int:
    """The transformed filter, float32."""
    plan = plan_of(problem, config)
    return 4 * plan.z * plan.c_in * plan.k_out


def features(name: str, problem: Problem, config: Config, target: Target) -> Features:
    """The fused kernel's FLOPs (its transforms and point-wise products; cost.py counts them alike) and
    grid; the filter transform's U written and read once per block row."""
    plan, pr = plan_of(problem, config), problem
    tile = tile_of(plan, target)
    trans, gemm = stage_flops(pr, plan)
    t_all = max(pr.n, 1) * plan.t_img
    blocks = math.ceil(t_all / tile.BT) * math.ceil(plan.k_out / tile.BK) * pr.groups
    u_bytes = 4.0 * plan.z * plan.c_in * plan.k_out
    return Features(name, "fp32", trans + gemm, float(pr.bytes), u_bytes * (1 + math.ceil(t_all / tile.BT)), 2,
                    blocks, 1, tile.threads, blocks_per_sm(target, tile.threads, tile.shared_bytes(plan.points), 128),
                    kind="simt_gemm")


def run(problem: Problem, config: Config, a, b, bias, out) -> None:
    pr, plan = problem, plan_of(problem, config)
    kind = convert.half_kind(pr.dtype)
    tile = tile_of(plan, runtime.target())
    th, tw, g, ci, ko = plan.th, plan.tw, plan.groups, plan.c_in, plan.k_out
    at_h, g_h, bt_h = th.arrays()
    at_w, g_w, bt_w = tw.arrays()
    sk, sc, sr, ss = strides(b)
    if pr.op == "forward":
        fs, off = (ko * sk, sk, sc, sr, ss), 0
    else:
        fs, off = (ci * sk, sc, sk, -sr, -ss), (pr.r - 1) * sr + (pr.s - 1) * ss
    total_t = pr.n * plan.t_img
    if total_t == 0:
        return
    with scratch(max(1, plan.z * ci * ko), "float32") as u:
        patch_transform(g_h, g_w, flat(b), u, in_kind=kind, out_kind=None, c_fast=False, groups=g, c_real=ci,
                        c_all=ci, t_real=ko, t_all=ko, tiles=(1, 1), step=(0, 0), origin=(0, 0),
                        bounds=(pr.r, pr.s), src_strides=fs, off=off, dst_strides=(ci * ko, 1, ko))
        kernel = fused_kernel(frozen(bt_h), frozen(bt_w), frozen(at_h), frozen(at_w), tile, kind)
        sn, scn, sy, sx = strides(a)
        dn, dc, dy, dx = strides(out)
        grid = (math.ceil(total_t / tile.BT), math.ceil(ko / tile.BK), g)
        has_bias = bias is not None
        kernel[grid, tile.threads](flat(a), u, runtime.kernel_view(bias) if has_bias else flat(out), flat(out), total_t,
                                   g, ci, ko, plan.tiles[0], plan.tiles[1], plan.origin[0], plan.origin[1],
                                   plan.plane_in[0], plan.plane_in[1], sn, scn, sy, sx, plan.plane_out[0],
                                   plan.plane_out[1], dn, dc, dy, dx, has_bias)
