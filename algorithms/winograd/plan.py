"""The geometry of a Winograd convolution: which F(m, r) runs on each axis, the tiles, the operands' roles,
the workspace and the images per pass. Everything here is host arithmetic on a Problem and a Config.

Forward and dgrad run as one correlation (dgrad: stride 1, so dx is the forward of dy with the filter
rotated by 180 degrees and its two channel axes swapped, and the origin moved by R - 1 - padding):

    out[n, g*Ko + o, i, j] = bias + sum_{ci < Ci, a, b} inp[n, g*Ci + ci, i + oh + a, j + ow + b] * filt(o, ci, a, b)

    op       inp   out   Ci   Ko   (oh, ow)                    filt(o, ci, a, b)
    forward  x     y     C'   K'   (-ph, -pw)                  w[g*K' + o, ci, a, b]
    dgrad    dy    dx    K'   C'   (ph - (R-1), pw - (S-1))    w[g*K' + ci, o, R-1-a, S-1-b]

with F(m, R) on the height axis and F(m, S) on the width axis (F(1, 1), the identity, on an axis of
filter length 1: a 1D problem's height). wgrad correlates x with dy tiles: for a tile of m x m dy
values at (th*m, tw*m), dw gets the correlation of the (m + R - 1)-square x patch at (th*m - ph,
tw*m - pw) with it, F(R, m) per axis (output R taps, "filter" the dy tile); summed over tiles and
images, the sum is one GEMM per transform point with the tiles as its reduction.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from convlab.kernels.transform import gemm as tgemm
from convlab.kernels.transform.correlation import Tiling, tiling_fields
from convlab.kernels.winograd.toomcook import Transforms, winograd
from convlab.plugin.contract import Config
from convlab.problem import Problem

#: transform points per axis at most: beyond 8, no choice of points keeps fp32 errors within 10x of FMA's
MAX_POINTS = 8
#: output tile sizes offered per axis
TILES = (2, 4, 6)
_INDEX_LIMIT = 2**31 - 1  # every flat buffer is indexed with 32 bits by the GEMM kernels


def axis_transforms(problem: Problem, m: int) -> tuple[Transforms, Transforms]:
    """(height, width) F's of ``problem`` (2D: a 1D problem's embedding has R = 1) for tile ``m``."""
    if problem.op == "wgrad":
        return (winograd(problem.r, m if problem.r > 1 else 1), winograd(problem.s, m if problem.s > 1 else 1))
    return (winograd(m if problem.r > 1 else 1, problem.r), winograd(m if problem.s > 1 else 1, problem.s))


def tile_fits(problem: Problem, m: int) -> bool:
    """Whether F(m, r) of every filtered axis has at most MAX_POINTS points."""
    return all(r == 1 or m + r - 1 <= MAX_POINTS for r in (problem.r, problem.s))


def storage(problem: Problem, config: Config) -> str:
    """The GEMM engine of a non-fused config: "simt", or the tensor-core kind for its dtype."""
    if config.get("gemm", "simt") == "simt":
        return "simt"
    return {"float32": "tf32x3", "float16": "f16", "bfloat16": "bf16"}[problem.dtype]


@dataclass(frozen=True)
class Plan(Tiling):
    """One Winograd run: the correlation and its tiles (Tiling's fields), the transforms and the sizes of its
    GEMMs (see the module docstring).

    ``th`` / ``tw``: the height / width F's; ``kind``: the GEMM engine (``storage``); ``z``: GEMMs
    (transform points x groups); ``k_pad``: the reduction length the GEMM reads (channels, or wgrad's
    tiles, padded for the tensor cores).
    """

    th: Transforms
    tw: Transforms
    kind: str
    z: int
    k_pad: int

    @property
    def points(self) -> int:
        return self.th.n * self.tw.n

    def buffers(self, problem: Problem) -> tuple[int, int]:
        """(operand elements, float32 elements) of the workspace: the transformed filter and inputs
        (wgrad: x and dy) in the engine's type, the GEMM's output."""
        t = self.nb * self.t_img
        if problem.op == "wgrad":
            return self.z * (self.c_in + self.k_out) * self.k_pad, self.z * self.k_out * self.c_in
        return self.z * (self.k_out + t) * self.k_pad, self.z * self.k_out * t

    def workspace_bytes(self, problem: Problem) -> int:
        ops, f32 = self.buffers(problem)
        item = 4 if self.kind in ("simt", "tf32x3") else 2
        return ops * item + f32 * 4


def make_plan(problem: Problem, config: Config, workspace_limit: int) -> Plan:
    """The plan of ``config`` on ``problem`` with as many images per pass as the limit allows (at least 1:
    the workspace may then exceed the limit, and the plugin declines)."""
    pr, m = problem, int(config["m"])
    th, tw = axis_transforms(pr, m)
    kind = storage(pr, config)
    z = th.n * tw.n * pr.groups
    if pr.op == "wgrad":  # the tiles are the GEMM's reduction: a pass's tiles, accumulated over passes
        fields = tiling_fields(pr, (pr.r, pr.s), (th.r, tw.r))
        tiles, c_in, k_out = fields["tiles"], fields["c_in"], fields["k_out"]
        per_image = tiles[0] * tiles[1] * z * (c_in + k_out) * 4
        room = max(1, (workspace_limit - z * k_out * c_in * 4) // per_image)
        nb = int(max(1, min(max(pr.n, 1), room, _INDEX_LIMIT // max(1, per_image // 4))))
        return Plan(**fields, nb=nb, th=th, tw=tw, kind="simt", z=z, k_pad=nb * tiles[0] * tiles[1])
    fields = tiling_fields(pr, (pr.r, pr.s), (th.m, tw.m))
    k_pad = tgemm.padded(fields["c_in"], kind)
    base = Plan(**fields, nb=1, th=th, tw=tw, kind=kind, z=z, k_pad=k_pad)
    per_image = base.t_img * z * (k_pad * (4 if kind in ("simt", "tf32x3") else 2) + 4 * base.k_out)
    fixed = base.workspace_bytes(pr) - per_image
    room = max(1, (workspace_limit - fixed) // max(per_image, 1))
    cap = _INDEX_LIMIT // max(1, base.t_img * z * max(k_pad, base.k_out))
    nb = int(max(1, min(max(pr.n, 1), room, cap)))
    return dataclasses.replace(base, nb=nb)


def transform_flops(mh: np.ndarray, mw: np.ndarray) -> int:
    """FLOPs of ``mh @ patch @ mw^T`` as the generated kernels compute it (rows first)."""
    mh, mw = np.atleast_2d(mh), np.atleast_2d(mw)
    return 2 * (mh.shape[1] * int(np.count_nonzero(mw)) + mw.shape[0] * int(np.count_nonzero(mh)))


def stage_flops(problem: Problem, plan: Plan) -> tuple[float, float]:
    """(transform FLOPs, GEMM FLOPs) of one whole call."""
    pr, th, tw = problem, plan.th, plan.tw
    at_h, g_h, bt_h = th.arrays()
    at_w, g_w, bt_w = tw.arrays()
    tiles = max(pr.n, 1) * plan.t_img
    if pr.op == "wgrad":
        trans = tiles * (plan.c_in * transform_flops(bt_h, bt_w) + plan.k_out * transform_flops(g_h, g_w))
        trans += plan.k_out * plan.c_in * transform_flops(at_h, at_w)
        return float(trans * pr.groups), 2.0 * plan.z * plan.k_out * plan.c_in * tiles
    trans = plan.k_out * plan.c_in * transform_flops(g_h, g_w)
    trans += tiles * (plan.c_in * transform_flops(bt_h, bt_w) + plan.k_out * transform_flops(at_h, at_w))
    return float(trans * pr.groups), 2.0 * plan.z * plan.k_out * tiles * plan.k_pad
