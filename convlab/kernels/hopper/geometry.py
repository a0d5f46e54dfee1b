"""A convolution as the Hopper kernels run it: the forward form over channels-last operands, and the
tensor maps that load its operand tiles and store its output.

    y[n, o, k] = sum_{tap, c} x[n, o * stride - pad + tap * dil, c] * w[k, tap, c]       (o, tap: N-d)

    GEMM  M = N * prod(out)  (rows: output pixels n, o),  N = K,  reduction = taps x channel blocks

``Geometry.of(problem)`` gives the forward form of a forward problem and of a stride-1 dgrad (the forward
of dy with the spatially flipped, K<->C transposed filter and padding dil * (kernel - 1) - pad, which may
be negative: the im2col box then starts inside the tensor). A 2D problem of unit height (a conv1d's
embedding) runs as 1D: a rank-3 map, whose corners have 16 bits instead of 8.

The maps (:mod:`convlab.kernels.arch.tensormap`): A is an im2col map of x (C, W, [H, [D]], N) with
``pixels`` = the tile's rows and ``channels`` = one k block, traversal = the stride, the box corners
``lower = -pad`` and the ``upper`` closest to 0 that keeps prod(out) positions per image; one copy per
(tap, channel block) with the tap's filter offsets ``tap * dil``. B is a tiled map of the KRSC filter
(C, S, [R, [T]], K), box (BK, 1, .., BN). Dense tensors (the output, dy in wgrad) get :func:`dense_map`.
"""
from __future__ import annotations

import math

from convlab.kernels.arch.tensormap import OFFSET_LIMIT, Im2colMap, TiledMap, reason
from convlab.kernels.conv.axes import ForwardGeometry, kernel_ndim
from convlab.problem import Problem


class Geometry(ForwardGeometry):
    """The forward form (:class:`~convlab.kernels.conv.axes.ForwardGeometry`) with its tensor maps; per-axis
    tuples outermost first (D, H, W), of length ``nd``."""

    @property
    def pixels(self) -> int:
        """Output pixels of one image."""
        return math.prod(self.out)

    @staticmethod
    def axes_of(problem: Problem) -> int:
        """The axes :meth:`of` takes (``axes.kernel_ndim``): a 2D problem of unit height and no height
        padding (a conv1d's embedding) runs as 1D; with height padding its one row reads the padding, so
        it keeps its two axes."""
        return kernel_ndim(problem)

    def corners(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(lower, upper) im2col corners in W, H, D order: lower = -pad, upper the value nearest 0 giving
        out positions per axis (any in [(o-1)s + 1 - size - pad, o*s - size - pad] does)."""
        lower, upper = [], []
        for size, out, s, p in zip(self.size, self.out, self.stride, self.padding):
            lo, hi = (out - 1) * s + 1 - size - p, out * s - size - p
            lower.append(-p)
            upper.append(min(max(0, lo), hi))
        return tuple(reversed(lower)), tuple(reversed(upper))

    def offsets(self, tap: int) -> tuple[int, ...]:
        """Filter offsets (W, H, D order) of tap number ``tap`` (taps row-major, the last axis fastest)."""
        out = []
        for t, d in zip(reversed(self.kernel), reversed(self.dilation)):
            tap, r = divmod(tap, t)
            out.append(r * d)
        return tuple(out)

    def start(self, m0: int) -> tuple[int, ...]:
        """The im2col box position (W, [H, [D]], N) of GEMM row ``m0``: its image and first window."""
        n, rest = divmod(m0, self.pixels)
        coords = []
        for out, s, p in zip(reversed(self.out), reversed(self.stride), reversed(self.padding)):
            rest, o = divmod(rest, out)
            coords.append(o * s - p)
        return tuple(coords) + (n,)

    def input_map(self, dtype: str, cs: int, address: int, bm: int, bk: int, itemsize: int) -> Im2colMap:
        """A's im2col map: x channels-last with ``cs`` elements between pixels (channels padded in
        memory beyond ``c``), BM pixels x BK channels a copy, swizzled to its BK-element rows."""
        lower, upper = self.corners()
        dims = (self.c,) + tuple(reversed(self.size)) + (self.n,)
        strides = [cs * itemsize]
        for size in reversed(self.size):
            strides.append(strides[-1] * size)
        return Im2colMap(dtype, dims, tuple(strides), lower, upper, bk, bm,
                         (1,) + tuple(reversed(self.stride)) + (1,), bk * itemsize, address)

    def filter_map(self, dtype: str, cs: int, address: int, bn: int, bk: int, itemsize: int) -> TiledMap:
        """B's tiled map of the K[T]RSC filter (``cs`` elements between taps), box (BK, 1, .., BN)."""
        dims = (self.c,) + tuple(reversed(self.kernel)) + (self.k,)
        strides = [cs * itemsize]
        for t in reversed(self.kernel):
            strides.append(strides[-1] * t)
        return TiledMap(dtype, dims, tuple(strides), (bk,) + (1,) * self.nd + (bn,), bk * itemsize, address)

    def reason(self, dtype: str, itemsize: int, bm: int, bn: int, bk: int) -> str:
        """'' when both operand maps of a BM x BN x BK tile encode and every filter offset fits the copy's
        offset field, else why not (channel padding and addresses aside: the caller's)."""
        cs = -(-self.c * itemsize // 16) * 16 // itemsize
        for m in (self.input_map(dtype, cs, 0, bm, bk, itemsize), self.filter_map(dtype, cs, 0, bn, bk, itemsize)):
            why = reason(m)
            if why:
                return why
        reach = max(d * (t - 1) for d, t in zip(self.dilation, self.kernel))
        if reach >= OFFSET_LIMIT[self.nd]:  # CUTLASS's bound (can_implement): offsets below the field's top
            return (f"the filter reaches {reach} pixels (dilation x (kernel - 1)); the im2col copy's offsets "
                    f"stop below {OFFSET_LIMIT[self.nd]} for {self.nd} spatial dimensions")
        return ""


def dense_map(dtype: str, dims: tuple[int, ...], itemsize: int, address: int, box: tuple[int, ...],
              swizzle: int) -> TiledMap:
    """The tiled map of a dense tensor of ``dims`` (innermost first): y as (K, M), a split-K partial as
    (K, M, splits), dw as (C, taps, K), dy as (K, N x P x Q)."""
    strides = [dims[0] * itemsize]
    for d in dims[1:-1]:
        strides.append(strides[-1] * d)
    return TiledMap(dtype, tuple(dims), tuple(strides), tuple(box), swizzle, address)
