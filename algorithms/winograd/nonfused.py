"""The non-fused Winograd convolution: transform kernels around one batched GEMM per transform point.

Loop nest of ``run`` (plan.py has the geometry; convlab.kernels.winograd.transforms the kernels):

    forward, dgrad:
        U[xi, g] (Ko x Ci) = G_h filt G_w^T                 one thread per (g, o, ci)
        for each pass of nb images:
            V[xi, g] (T x Ci) = B_h^T d B_w                 one thread per (g, tile, ci), d the input patch
            M[xi, g] (Ko x T) = U[xi, g] @ V[xi, g]^T       the batched GEMM (SIMT or tensor cores)
            out tile = A_h^T M A_w (+ bias)                 one thread per (g, o, tile)
    wgrad (F(R, m) per axis; the tiles are the reduction):
        for each pass of nb images:
            X[xi, g] (C' x T) = B_h^T x-patch B_w,  D[xi, g] (K' x T) = G_h dy-tile G_w^T
            M[xi, g] (K' x C') (+)= D[xi, g] @ X[xi, g]^T   (SIMT, split over k where blocks are few)
        dw = A_h^T M A_w                                    one thread per (g, k, c)

The transforms run in fp32 on fp32, fp16 or bf16 operands; the GEMM's operands are fp32 (SIMT, tf32x3)
or rounded to the problem's half type (the tensor cores' f16 / bf16), its accumulators fp32.
"""
from __future__ import annotations

import numpy as np

from convlab import runtime
from convlab.kernels.data import convert
from convlab.kernels.transform import gemm as tgemm
from convlab.kernels.transform.operands import flat, image_batches, strides
from convlab.kernels.winograd.transforms import patch_transform, tile_inverse
from convlab.problem import Problem
from convlab.runtime.scratch import scratch

from .plan import Plan

#: the element type the GEMM's operands are stored in, per engine (plan.storage)
OPERAND = {"simt": (np.float32, None), "tf32x3": (np.float32, None), "f16": (np.float16, "float16"),
           "bf16": (np.uint16, "bfloat16")}


def run(problem: Problem, plan: Plan, ksplit: int, a, b, bias, out) -> None:
    """Compute ``out`` (module docstring); ``ksplit``: wgrad's k-splits (plan-dependent, see plugin)."""
    dtype, kind = OPERAND[plan.kind]
    ops, f32 = plan.buffers(problem)
    part = plan.z * plan.k_out * plan.c_in * ksplit if ksplit > 1 else 0
    with scratch(max(ops, 1), dtype) as opbuf, scratch(max(f32 + part, 1), np.float32) as fbuf:
        if problem.op == "wgrad":
            _wgrad(problem, plan, ksplit, a, b, out, opbuf, fbuf)
        else:
            _forward(problem, plan, kind, a, b, bias, out, opbuf, fbuf)


def _filter_strides(problem: Problem, plan: Plan, w) -> tuple[tuple[int, ...], int]:
    """(s_g, s_n, s_c, s_y, s_x), off of filt(o, ci, a, b) in w's memory (plan.py's table)."""
    sk, sc, sr, ss = strides(w)
    if problem.op == "forward":
        return (plan.k_out * sk, sk, sc, sr, ss), 0
    return (plan.c_in * sk, sc, sk, -sr, -ss), (problem.r - 1) * sr + (problem.s - 1) * ss


def _forward(pr: Problem, plan: Plan, op_kind, inp, w, bias, out, opbuf, fbuf) -> None:
    in_kind = convert.half_kind(pr.dtype)
    th, tw, g, ci, ko, kp, z = plan.th, plan.tw, plan.groups, plan.c_in, plan.k_out, plan.k_pad, plan.z
    u_size = z * ko * kp
    _, gh, _ = th.arrays("float64")
    _, gw, _ = tw.arrays("float64")
    fs, off = _filter_strides(pr, plan, w)
    u = opbuf[:u_size]
    patch_transform(gh, gw, flat(w), u, in_kind=in_kind, out_kind=op_kind, c_fast=True, groups=g, c_real=ci,
                    c_all=kp, t_real=ko, t_all=ko, tiles=(1, 1), step=(0, 0), origin=(0, 0),
                    bounds=(pr.r, pr.s), src_strides=fs, off=off, dst_strides=(ko * kp, kp, 1))
    sn, sc, sy, sx = strides(inp)
    on, oc, oy, ox = strides(out)
    src, dst = flat(inp), flat(out)
    bias = None if bias is None else runtime.kernel_view(bias)
    for n0, t in image_batches(pr.n, plan.nb, plan.t_img):
        v, m = opbuf[u_size:u_size + z * t * kp], fbuf[:z * ko * t]
        patch_transform(th.arrays()[2], tw.arrays()[2], src, v, in_kind=in_kind, out_kind=op_kind, c_fast=True,
                        groups=g, c_real=ci, c_all=kp, t_real=t, t_all=t, tiles=plan.tiles, step=(th.m, tw.m),
                        origin=plan.origin, bounds=plan.plane_in, src_strides=(ci * sc, sn, sc, sy, sx), off=0,
                        dst_strides=(t * kp, kp, 1), n0=n0)
        tgemm.batched_gemm(plan.kind, u, v, m, z, ko, t, kp)
        tile_inverse(th.arrays()[0], tw.arrays()[0], m, dst, bias, out_kind=in_kind, groups=g, o_n=ko, t_n=t,
                     tiles=plan.tiles, src_strides=(ko * t, t), limits=plan.plane_out,
                     dst_strides=(oc, on, oy, ox), n0=n0)


def _wgrad(pr: Problem, plan: Plan, ksplit: int, x, dy, dw, opbuf, fbuf) -> None:
    in_kind = convert.half_kind(pr.dtype)
    th, tw, g, ci, ko, z = plan.th, plan.tw, plan.groups, plan.c_in, plan.k_out, plan.z
    ath, gh, bth = th.arrays()
    atw, gw, btw = tw.arrays()
    xn, xc, xy, xx = strides(x)
    yn, yc, yy, yx = strides(dy)
    m, part = fbuf[:z * ko * ci], fbuf[z * ko * ci:]
    if pr.n == 0:  # a sum over no images: the GEMM writes zeros
        tgemm.batched_gemm("simt", opbuf, opbuf, m, z, ko, ci, 0)
    for n0, t in image_batches(pr.n, plan.nb, plan.t_img):
        xt, dt = opbuf[:z * ci * t], opbuf[z * ci * t:z * (ci + ko) * t]
        patch_transform(bth, btw, flat(x), xt, in_kind=in_kind, out_kind=None, c_fast=False, groups=g, c_real=ci,
                        c_all=ci, t_real=t, t_all=t, tiles=plan.tiles, step=(th.r, tw.r), origin=plan.origin,
                        bounds=(pr.h, pr.w), src_strides=(ci * xc, xn, xc, xy, xx), off=0,
                        dst_strides=(ci * t, 1, t), n0=n0)
        patch_transform(gh, gw, flat(dy), dt, in_kind=in_kind, out_kind=None, c_fast=False, groups=g, c_real=ko,
                        c_all=ko, t_real=t, t_all=t, tiles=plan.tiles, step=(th.r, tw.r), origin=(0, 0),
                        bounds=(pr.p, pr.q), src_strides=(ko * yc, yn, yc, yy, yx), off=0,
                        dst_strides=(ko * t, 1, t), n0=n0)
        tgemm.batched_gemm("simt", dt, xt, m, z, ko, ci, t, accumulate=n0 > 0, ksplit=ksplit, part=part)
    kn, kc, kr, ks = strides(dw)
    tile_inverse(ath, atw, m, flat(dw), None, out_kind=in_kind, groups=g, o_n=ko, t_n=ci, tiles=(1, 1),
                 src_strides=(ko * ci, ci), limits=(pr.r, pr.s), dst_strides=(kn, kc, kr, ks))
