"""What the winograd plugin tells the cost model (``cost_features``), from the plan its ``run`` follows, and
where its wgrad pays:

    flops     every FLOP executed: the transforms (two FLOPs a non-zero matrix entry applied, per row or
              column of each patch), the GEMMs over the transform points (channel / tile padding included)
    bytes     the operands read once and the output written once (the problem's fewest bytes)
    aux       the transformed buffers (non-fused: filter, inputs and GEMM outputs; fused: the filter)
              written once and read once
    launches  non-fused: the filter transform, then per pass the input transform, the GEMM (and its
              split sum) and the output transform; fused: the filter transform and the fused kernel
    blocks    the GEMM's grid (non-fused) or the fused kernel's

A wgrad config pays when its executed FLOPs are fewer than the dense convolution's
(:func:`wgrad_pays`): the x and dy transforms run per tile and channel, so with few channels per group
(depthwise, thin groups) they cost more than the point-wise GEMM saves.
"""
from __future__ import annotations

import math

from convlab.kernels.transform import gemm as tgemm
from convlab.plugin.contract import Algorithm, Config, Verdict
from convlab.plugin.cost import Features, blocks_per_sm, gemm_tiles, operand_loads
from convlab.problem import Problem
from convlab.runtime.targets import Target

from . import fused
from .plan import Plan, make_plan, stage_flops

#: the workspace limit the wgrad predicate plans with (its answer must not depend on the call's limit)
_PLAN_LIMIT = 1 << 40


def wgrad_ksplit(problem: Problem, plan: Plan, target: Target) -> int:
    """k-splits of wgrad's SIMT GEMM (reduction: a pass's tiles): enough blocks for two per SM, each
    split at least 8 k tiles long (2 on the simulator, at most 3 splits there)."""
    t = plan.nb * plan.t_img
    tile = tgemm.simt_tile(plan.k_out, plan.c_in, t, plan.z, "float32", target)
    blocks = math.ceil(plan.k_out / tile.bm) * math.ceil(plan.c_in / tile.bn) * plan.z
    least, cap = (2, 3) if target.simulator else (8, 256)
    want = min(math.ceil(2 * target.sm_count / blocks), t // (least * tile.bk), cap, 65535 // plan.z)
    return max(1, want)


def wgrad_pays(problem: Problem, configs: list[Config], target: Target) -> Verdict:
    """Yes when some config executes fewer FLOPs than the dense wgrad (module docstring)."""
    if not configs:
        return Verdict.yes()  # the base class declines: no config fits
    best = min(sum(stage_flops(problem, make_plan(problem, c, _PLAN_LIMIT))) for c in configs)
    if best < problem.flops:
        return Verdict.yes()
    return Verdict.no(f"wgrad does not pay here: its transforms and GEMMs execute {best:.3g} FLOPs against "
                      f"{problem.flops:.3g} dense (C/groups={problem.c_per_group}, K/groups={problem.k_per_group})")


def features(plugin: Algorithm, problem: Problem, config: Config, target: Target, workspace_limit: int) -> Features:
    """The features of ``config`` on ``problem`` (module docstring)."""
    pr = problem
    if config["form"] == "fused":
        return fused.features(plugin.name, pr, config, target)
    plan = make_plan(pr, config, workspace_limit)
    trans, gemm_flops = stage_flops(pr, plan)
    passes = math.ceil(max(pr.n, 1) / plan.nb)
    ops, f32 = plan.buffers(pr)
    item = 2 if plan.kind in ("f16", "bf16") else 4
    t = plan.nb * plan.t_img
    if pr.op == "wgrad":
        m, n, k = plan.k_out, plan.c_in, t
        ks = wgrad_ksplit(pr, plan, target)
        launches = passes * (3 + (ks > 1)) + 1
        aux = 2.0 * (ops * item * passes + f32 * 4 * (1 + ks * (ks > 1) * passes))
    else:
        m, n, k, ks = plan.k_out, t, plan.k_pad, 1
        launches = 1 + 3 * passes
        aux = 2.0 * (plan.z * plan.k_out * plan.k_pad * item + passes * ((ops - plan.z * plan.k_out * plan.k_pad)
                                                                          * item + f32 * 4))
    if plan.kind == "simt":
        tile = tgemm.simt_tile(m, n, k, plan.z, "float32", target)
        bm, bn, threads, shared, kind = tile.bm, tile.bn, tile.threads, tile.shared_bytes(4), "simt_gemm"
    else:
        cfg = tgemm.tc_config(plan.kind, m, target)
        bm, bn, threads, shared, kind = cfg.BM, cfg.BN, cfg.threads, cfg.shared_bytes(plan.kind), "tensor"
    tiles, _ = gemm_tiles(m, n, bm, bn)
    arith = {"simt": "fp32", "tf32x3": "tf32x3", "f16": "f16", "bf16": "f16"}[plan.kind]
    return Features(plugin.name, arith, trans + gemm_flops, float(pr.bytes), aux, launches, tiles * plan.z * ks,
                    passes, threads, blocks_per_sm(target, threads, shared, 64),
                    operand_loads(m, n, k, bm, bn, item) * plan.z * passes, kind=kind)
