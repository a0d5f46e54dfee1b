"""The problem model: one immutable description of a convolution problem over N = 1, 2 or 3 spatial
dimensions (:class:`Problem`), and its builders :func:`make_problem` and :func:`make_problem_nd`.

All public ops are built on three canonical problems over the same forward geometry (2D shown; 3D adds a
depth axis d with kernel depth T and output depth Do, 1D keeps only the width):

    forward  y[n, k, p, q]  = sum_{c, r, s} x[n, g*C' + c, p*sh - ph + r*dh, q*sw - pw + s*dw] * w[k, c, r, s]
    dgrad    dx = d(sum y*dy)/dx     given dy (N, K, P, Q) and w          -> dx (N, C, H, W)
    wgrad    dw = d(sum y*dy)/dw     given x  (N, C, H, W) and dy         -> dw (K, C', R, S)

with C' = C / groups, g = k // (K / groups). conv_transpose2d(x, w) is the dgrad problem whose dy is the
transposed convolution's input; its output (dx) may carry an optional bias. Layouts are NCHW, weights
KCRS, like PyTorch (3D: NCDHW, KCTRS; 1D: NCL, KCS).

Operands of each op, in the order plugins receive them (``a``, ``b`` -> ``out``):

    op        a                 b                    out
    forward   x  (N, C, H, W)   w  (K, C', R, S)     y  (N, K, P, Q)   (+ bias (K,))
    dgrad     dy (N, K, P, Q)   w  (K, C', R, S)     dx (N, C, H, W)   (+ bias (C,), for the transpose)
    wgrad     x  (N, C, H, W)   dy (N, K, P, Q)      dw (K, C', R, S)

N-d storage: the 2D fields (h, w, r, s, p, q, stride, padding, dilation pairs) always hold the height and
width axes. A 3D problem adds ``d, t, do`` and ``stride_d, padding_d, dilation_d``; a 1D problem is its
2D embedding (H = R = P = 1, height stride/dilation 1, padding 0) with ``ndim=1``, and
:meth:`Problem.lowered` gives that embedding (ndim 2), which the ops run on the 2D plugins, as cuDNN
and PyTorch do. A 2D problem's fields and :meth:`Problem.key` do not mention the depth axis at all.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from convlab.dtypes import DTYPES, np_dtype

from .arguments import Pair, nd_fields, plane_fields
from .vocabulary import NDIMS, OPS


@dataclass(frozen=True)
class Problem:
    """A canonical convolution problem. Construct through :func:`make_problem`, :func:`make_problem_nd`
    or the op builders.

    ``p``/``q`` (and ``do``) are the output (dy) spatial sizes. They equal the forward formula except for a
    transposed convolution with ``output_padding >= stride``, whose dy may be smaller than the formula gives.
    """

    op: str
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    p: int
    q: int
    stride: Pair = (1, 1)
    padding: Pair = (0, 0)
    dilation: Pair = (1, 1)
    groups: int = 1
    dtype: str = "float32"
    bias: bool = False
    ndim: int = 2
    d: int = 1
    t: int = 1
    do: int = 1
    stride_d: int = 1
    padding_d: int = 0
    dilation_d: int = 1

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"op must be one of {OPS}, got {self.op!r}")
        if self.dtype not in DTYPES:
            raise TypeError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        np_dtype(self.dtype)  # bfloat16: imports ml_dtypes, after which np.dtype("bfloat16") works
        if self.bias and self.op == "wgrad":
            raise ValueError("bias is not an operand of wgrad")
        if self.ndim not in NDIMS:
            raise ValueError(f"ndim must be one of {NDIMS}, got {self.ndim!r}")
        if self.ndim != 3 and (self.d, self.t, self.do, self.stride_d, self.padding_d,
                               self.dilation_d) != (1, 1, 1, 1, 0, 1):
            raise ValueError(f"a {self.ndim}D problem has no depth axis")
        if self.ndim == 1 and (self.h, self.r, self.p, self.stride[0], self.padding[0],
                               self.dilation[0]) != (1, 1, 1, 1, 0, 1):
            raise ValueError("a 1D problem is stored as its 2D embedding: H = R = P = 1, height "
                             "stride 1, padding 0, dilation 1")

    # ---- N-d accessors (one entry per spatial dimension, depth first) ----------------------------
    def _axes(self, depth, height, width) -> tuple[int, ...]:
        return {1: (width,), 2: (height, width), 3: (depth, height, width)}[self.ndim]

    @property
    def spatial_in(self) -> tuple[int, ...]:
        return self._axes(self.d, self.h, self.w)

    @property
    def kernel_size(self) -> tuple[int, ...]:
        return self._axes(self.t, self.r, self.s)

    @property
    def spatial_out(self) -> tuple[int, ...]:
        return self._axes(self.do, self.p, self.q)

    @property
    def strides(self) -> tuple[int, ...]:
        return self._axes(self.stride_d, *self.stride)

    @property
    def paddings(self) -> tuple[int, ...]:
        return self._axes(self.padding_d, *self.padding)

    @property
    def dilations(self) -> tuple[int, ...]:
        return self._axes(self.dilation_d, *self.dilation)

    def lowered(self) -> "Problem":
        """The problem the plugins run: a 1D problem's 2D embedding (H = 1), others unchanged."""
        return Problem(**{**self._fields(), "ndim": 2}) if self.ndim == 1 else self

    # ---- shapes ---------------------------------------------------------------------------------
    @property
    def c_per_group(self) -> int:
        return self.c // self.groups

    @property
    def k_per_group(self) -> int:
        return self.k // self.groups

    @property
    def x_shape(self) -> tuple[int, ...]:
        return (self.n, self.c) + self.spatial_in

    @property
    def w_shape(self) -> tuple[int, ...]:
        return (self.k, self.c_per_group) + self.kernel_size

    @property
    def y_shape(self) -> tuple[int, ...]:
        return (self.n, self.k) + self.spatial_out

    @property
    def operand_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Shapes of (a, b, out) as plugins receive them (see the module docstring)."""
        return {"forward": (self.x_shape, self.w_shape, self.y_shape),
                "dgrad": (self.y_shape, self.w_shape, self.x_shape),
                "wgrad": (self.x_shape, self.y_shape, self.w_shape)}[self.op]

    @property
    def bias_shape(self) -> tuple[int] | None:
        if not self.bias:
            return None
        return (self.k,) if self.op == "forward" else (self.c,)

    @property
    def itemsize(self) -> int:
        return np_dtype(self.dtype).itemsize

    # ---- the GEMM view --------------------------------------------------------------------------
    def gemm_shape(self) -> tuple[int, int, int]:
        """(M, N, K) of one group's implicit GEMM: out[M, N] = sum_K A[M, K] B[K, N]."""
        out_px = self.do * self.p * self.q
        taps = self.t * self.r * self.s
        if self.op == "forward":
            return (self.n * out_px, self.k_per_group, self.c_per_group * taps)
        if self.op == "dgrad":
            return (self.n * self.d * self.h * self.w, self.c_per_group, self.k_per_group * taps)
        return (self.k_per_group, self.c_per_group * taps, self.n * out_px)

    @property
    def reduction_length(self) -> int:
        """Upper bound of the number of products summed into one output element."""
        return self.gemm_shape()[2]

    @property
    def flops(self) -> int:
        """Multiply-adds x 2 of the dense algorithm (the same count for all three ops)."""
        return (2 * self.n * self.k * self.do * self.p * self.q * self.c_per_group * self.t * self.r
                * self.s)

    @property
    def bytes(self) -> int:
        """Fewest bytes moved through device memory: each operand read once, the output written once."""
        elems = sum(int(np.prod(s)) for s in self.operand_shapes)
        if self.bias:
            elems += self.bias_shape[0]  # type: ignore[index]
        return elems * self.itemsize

    def key(self) -> tuple:
        """Hashable exact identity of the problem (used by caches); a 2D problem's names no depth."""
        base = (self.op, self.dtype, self.n, self.c, self.h, self.w, self.k, self.r, self.s, self.p,
                self.q, self.stride, self.padding, self.dilation, self.groups, self.bias)
        if self.ndim == 2:
            return base
        return base + (("nd", self.ndim, self.d, self.t, self.do, self.stride_d, self.padding_d,
                        self.dilation_d),)

    def _fields(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    def replace(self, **changes) -> "Problem":
        """A copy with ``changes`` (fields; a 1D or 3D problem's stride / padding / dilation may be
        given as N-tuples, depth first), validated again."""
        fields = self._fields()
        nd = changes.get("ndim", self.ndim)
        for name, unit in (("stride", 1), ("padding", 0), ("dilation", 1)):
            value = changes.get(name)
            if nd != 2 and isinstance(value, (tuple, list)) and len(value) == nd:
                changes = {**changes, name: (unit, value[0]) if nd == 1 else tuple(value[1:])}
                if nd == 3:
                    changes[f"{name}_d"] = value[0]
        fields.update(changes)
        if fields["ndim"] == 2:
            for f in ("ndim", "d", "t", "do", "stride_d", "padding_d", "dilation_d"):
                fields.pop(f)
            return make_problem(**fields)
        if fields["ndim"] == 1:
            checked = make_problem(**{f: v for f, v in fields.items() if f not in (
                "ndim", "d", "t", "do", "stride_d", "padding_d", "dilation_d")})
            return Problem(**{**checked._fields(), "ndim": 1})
        changed = Problem(**fields)  # checked again by make_problem_nd
        return make_problem_nd(changed.op, changed.n, changed.c, changed.spatial_in, changed.k,
                               changed.kernel_size, changed.spatial_out, stride=changed.strides,
                               padding=changed.paddings, dilation=changed.dilations,
                               groups=changed.groups, dtype=changed.dtype, bias=changed.bias)

    def describe(self) -> str:
        """One line such as ``forward f32 x(16,3,227,227) w(96,3,11,11) s4 p0 d1 g1``."""
        st, pd, dl = (f"{a[0]}" if len(set(a)) == 1 else "x".join(map(str, a))
                      for a in (self.strides, self.paddings, self.dilations))
        return (f"{self.op} {self.dtype.replace('float', 'f')} x{self.x_shape} w{self.w_shape} "
                f"s{st} p{pd} d{dl} g{self.groups}{' +bias' if self.bias else ''}")

    def to_dict(self) -> dict:
        if self.ndim == 2:
            return {"op": self.op, "dtype": self.dtype, "x": list(self.x_shape), "w": list(self.w_shape),
                    "out_hw": [self.p, self.q], "stride": list(self.stride), "padding": list(self.padding),
                    "dilation": list(self.dilation), "groups": self.groups, "bias": self.bias}
        return {"op": self.op, "dtype": self.dtype, "ndim": self.ndim, "x": list(self.x_shape),
                "w": list(self.w_shape), "out": list(self.spatial_out), "stride": list(self.strides),
                "padding": list(self.paddings), "dilation": list(self.dilations), "groups": self.groups,
                "bias": self.bias}

    @classmethod
    def from_dict(cls, d: dict) -> "Problem":
        """The inverse of :meth:`to_dict` (validated like :func:`make_problem`)."""
        if d.get("ndim", 2) != 2:
            (n, c, *spatial), (k, _, *kernel) = d["x"], d["w"]
            return make_problem_nd(d["op"], n, c, spatial, k, kernel, d["out"], stride=d["stride"],
                                   padding=d["padding"], dilation=d["dilation"], groups=d["groups"],
                                   dtype=d["dtype"], bias=d["bias"])
        (n, c, h, w), (k, _, r, s), (p, q) = d["x"], d["w"], d["out_hw"]
        return make_problem(d["op"], n, c, h, w, k, r, s, p=p, q=q, stride=tuple(d["stride"]),
                            padding=tuple(d["padding"]), dilation=tuple(d["dilation"]),
                            groups=d["groups"], dtype=d["dtype"], bias=d["bias"])


def make_problem(op: str, n: int, c: int, h: int, w: int, k: int, r: int, s: int,
                 p: int | None = None, q: int | None = None, stride=1, padding=0, dilation=1,
                 groups: int = 1, dtype: str = "float32", bias: bool = False) -> Problem:
    """Validate and build a :class:`Problem`; ``p``/``q`` default to the forward formula. ``op`` is
    forward, dgrad or wgrad, or its public name (conv2d, conv2d_backward_data, conv2d_backward_weight)."""
    return Problem(**plane_fields(op, n, c, h, w, k, r, s, p, q, stride, padding, dilation, groups, dtype,
                                  bias))


def make_problem_nd(op: str, n: int, c: int, spatial: Iterable[int], k: int, kernel: Iterable[int],
                    out: Iterable[int] | None = None, stride=1, padding=0, dilation=1, groups: int = 1,
                    dtype: str = "float32", bias: bool = False) -> Problem:
    """Validate and build a :class:`Problem` of N = len(spatial) spatial dimensions (1, 2 or 3):
    ``spatial`` (L,) / (H, W) / (D, H, W), ``kernel`` of the same length, ``out`` the output sizes
    (default: the forward formula), stride / padding / dilation ints or N-tuples."""
    return Problem(**nd_fields(op, n, c, spatial, k, kernel, out, stride, padding, dilation, groups, dtype,
                               bias))
