"""The fused Winograd kernel: input transform, the GEMM over channels and the output transform in one
kernel, the transformed tiles in shared memory and the accumulators in registers.

    out[n, g*Ko + o, tile] = A_h^T ( sum_ci U[xi, g][ci, o] * V[xi][ci, tile] ) A_w     for each point xi

Loop nest of one block (BK output channels x BT tiles of group g; (BK/TK) x (BT/TT) threads, thread
(tk, tt) owning channels k0 + tk + i*(BK/TK), i < TK, and tiles t0 + tt + j*(BT/TT), j < TT, with all
P = alpha_h * alpha_w point accumulators of each pair: TK * TT * P registers):

    for c0 in 0, BC, 2*BC, ... < Ci:
        for (t, c) of the block's BT x BC tile-channel pairs, spread over the threads:
            Vs[xi, c, t] = (B_h^T d B_w)[xi],   d the input patch of tile t0 + t, channel c0 + c (0 outside)
        for (xi, c, k), spread over the threads:  Us[xi, c, k] = U[xi*G + g, c0 + c, k0 + k]  (0 outside)
        barrier
        for c < BC, xi < P (unrolled):  acc[i, j, xi] += Us[xi, c, k_i] * Vs[xi, c, t_j]
        barrier
    for each (i, j): out tile = A_h^T acc[i, j] A_w + bias[g*Ko + k_i]     (within the output plane)

U (the transformed filter, [G*P, Ci, Ko] with Ko fastest) comes from one launch of
:func:`convlab.kernels.winograd.transforms.patch_transform` before this kernel. Tile and channel geometry
as in the non-fused form (algorithms/winograd/plan.py): the input patch of tile (n, th, tw) starts at
(th*MH + oh, tw*MW + ow), the operands are flat views with element strides (NCHW or channels-last).
"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import numpy as np

from convlab import runtime
from convlab.kernels.data import convert
from convlab.kernels.source import Writer, compile_source
from convlab.kernels.transform.codegen import Constants, apply_2d
from convlab.runtime import cuda

from .transforms import Matrix

#: shared memory a block may use (static, below 48 KiB with room for the compiler's own)
SHARED_BUDGET = 40 * 1024


class FusedTile(NamedTuple):
    """Output channels BK and tiles BT of a block, TK x TT of a thread, BC channels a step."""

    BK: int
    BT: int
    TK: int
    TT: int
    BC: int

    @property
    def threads(self) -> int:
        return (self.BK // self.TK) * (self.BT // self.TT)

    def shared_bytes(self, points: int) -> int:
        return 4 * points * self.BC * (self.BK + self.BT)


def pick_tile(points: int, simulator: bool) -> FusedTile:
    """The block tile for ``points`` transform points: the largest thread tile (TK x TT) with at most 72
    accumulators, 16 x 16 threads (4 x 4 on the simulator), and the most channels a step (<= 16) whose
    tiles fit SHARED_BUDGET."""
    tk, tt = max(((a, b) for a in (1, 2, 4) for b in (1, 2, 4) if a <= b and a * b * points <= 72),
                 key=lambda ab: (ab[0] * ab[1], ab[1]))
    side = 4 if simulator else 16
    bc = 16
    while bc > 1 and FusedTile(side * tk, side * tt, tk, tt, bc).shared_bytes(points) > SHARED_BUDGET:
        bc //= 2
    return FusedTile(side * tk, side * tt, tk, tt, 2 if simulator else bc)


@functools.cache
def fused_kernel(bt_h: Matrix, bt_w: Matrix, at_h: Matrix, at_w: Matrix, tile: FusedTile,
                 kind: str | None) -> Callable:
    """The kernel (module docstring) for one pair of F's, block tile and operand kind."""
    ah, aw = len(bt_h), len(bt_w)  # points per axis (the patch is ah x aw)
    mh, mw = len(at_h), len(at_w)  # outputs per axis
    pts, (bk, bt, tk, tt, bc) = ah * aw, tile
    nk, nt = bk // tk, bt // tt  # threads along k, along t
    consts = Constants()
    w = Writer("def winograd_fused(src, u, bias, dst, total_t, groups, ci_n, ko_n, th_n, tw_n, oh, ow, y_n, x_n, "
               "s_n, s_c, s_y, s_x, p_lim, q_lim, d_n, d_c, d_y, d_x, has_bias):")
    w.indent()
    w(f"vs = cuda.shared.array({pts * bc * bt}, f32)")
    w(f"us = cuda.shared.array({pts * bc * bk}, f32)")
    w("tid = cuda.threadIdx.x")
    w(f"tk = tid // {nt}")
    w(f"tt = tid % {nt}")
    w(f"t0 = cuda.blockIdx.x * {bt}")
    w(f"k0 = cuda.blockIdx.y * {bk}")
    w("g = cuda.blockIdx.z")
    w("per = th_n * tw_n")
    for i in range(tk):
        for j in range(tt):
            for x in range(pts):
                w(f"a_{i}_{j}_{x} = zero")
    w("c0 = 0")
    with w.block("while c0 < ci_n:"):
        w("item = tid")
        with w.block(f"while item < {bt * bc}:"):  # input patches -> Vs
            w(f"t = t0 + item % {bt}")
            w(f"c = c0 + item // {bt}")
            w("ok = t < total_t and c < ci_n")
            w("n = t // per")
            w(f"y0 = ((t % per) // tw_n) * {mh} + oh")
            w(f"x0 = (t % tw_n) * {mw} + ow")
            w("base = n * s_n + (g * ci_n + c) * s_c")
            for a in range(ah):
                w(f"ry = ok and 0 <= y0 + {a} < y_n")
                for b in range(aw):
                    w(f"d_{a}_{b} = load(src[base + (y0 + {a}) * s_y + (x0 + {b}) * s_x]) "
                      f"if ry and 0 <= x0 + {b} < x_n else zero")
            apply_2d(w, consts, np.array(bt_h), np.array(bt_w), "d", "v")
            for i in range(ah):
                for j in range(aw):
                    w(f"vs[{(i * aw + j) * bc * bt} + item] = v_{i}_{j}")
            w(f"item += {nk * nt}")
        w("item = tid")
        with w.block(f"while item < {pts * bc * bk}:"):  # transformed filter -> Us
            w(f"k = k0 + item % {bk}")
            w(f"c = c0 + (item // {bk}) % {bc}")
            w(f"x = item // {bk * bc}")
            w("us[item] = u[((x * groups + g) * ci_n + c) * ko_n + k] if k < ko_n and c < ci_n else zero")
            w(f"item += {nk * nt}")
        w("cuda.syncthreads()")
        with w.block(f"for c in range({bc}):"):
            for x in range(pts):
                for i in range(tk):
                    w(f"uk{i} = us[{x * bc * bk} + c * {bk} + tk + {i * nk}]")
                for j in range(tt):
                    w(f"vt{j} = vs[{x * bc * bt} + c * {bt} + tt + {j * nt}]")
                for i in range(tk):
                    for j in range(tt):
                        w(f"a_{i}_{j}_{x} += uk{i} * vt{j}")
        w("cuda.syncthreads()")
        w(f"c0 += {bc}")
    for i in range(tk):
        with w.block(f"if k0 + tk + {i * nk} < ko_n:"):
            w(f"k = g * ko_n + k0 + tk + {i * nk}")
            w("bv = load(bias[k]) if has_bias else zero")
            for j in range(tt):
                with w.block(f"if t0 + tt + {j * nt} < total_t:"):
                    w(f"t = t0 + tt + {j * nt}")
                    w("n = t // per")
                    w(f"y0 = ((t % per) // tw_n) * {mh}")
                    w(f"x0 = (t % tw_n) * {mw}")
                    for a in range(ah):
                        for b in range(aw):
                            w(f"m_{a}_{b} = a_{i}_{j}_{a * aw + b}")
                    apply_2d(w, consts, np.array(at_h), np.array(at_w), "m", "o")
                    w("base = n * d_n + k * d_c")
                    for a in range(mh):
                        for b in range(mw):
                            with w.block(f"if y0 + {a} < p_lim and x0 + {b} < q_lim:"):
                                w(f"dst[base + (y0 + {a}) * d_y + (x0 + {b}) * d_x] = store(o_{a}_{b} + bv)")
    namespace = {"cuda": cuda, "zero": np.float32(0), "f32": np.float32, "load": convert.to_f32(kind),
                 "store": convert.from_f32(kind), **consts.namespace}
    name = f"<convlab.kernels.winograd.fused {mh}x{mw}/{ah}x{aw} {tile} {kind}>"
    return runtime.jit(compile_source(w.source, name, namespace)["winograd_fused"])
