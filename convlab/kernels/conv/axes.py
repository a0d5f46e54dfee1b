"""The spatial axes of the N-d convolution kernels: which N a problem's kernels are specialised for, its
geometry as N-tuples, and the names that generated kernel source gives each axis.

The kernel families of this package write their loop nests once for N = 1, 2 or 3 spatial axes (depth,
height, width; the last N of them), specialised at compile time so that a 2D kernel carries no depth
arithmetic: direct, unfold and fold as source generated per N (a 1D kernel has no height arithmetic
either), depthwise with its depth-tap loop a branch on a compile-time constant (1D: row windows of
its 2D kernels, the height a literal 1).

    N = kernel_ndim(problem)          3 for a 3D problem; 1 for the 2D embedding of a conv1d
                                      (H = R = P = 1, no height padding); else 2
    g = geometry(problem)             g.size (input), g.kernel, g.out, g.stride, g.padding, g.dilation:
                                      N-tuples, depth first
    names(N, "tap")                   ("t", "r", "s")[3 - N:]: the loop variables of the taps
    u32_product(("O", "P", "Q"))      "U(U(O * P) * Q)": a product in the generated source's uint32 U
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from convlab.problem import Problem

#: per-axis names (depth, height, width) of the generated kernels' variables
AXIS_NAMES = {
    "out": ("o", "p", "q"),         # output (dy) coordinate
    "tap": ("t", "r", "s"),         # filter tap
    "in": ("z", "h", "ww"),         # input (x / dx) coordinate
    "stride": ("sd", "sh", "sw"),
    "pad": ("pd", "ph", "pw"),
    "dil": ("dd", "dh", "dw"),
    "size": ("D", "H", "W"),        # input extent
    "kernel": ("T", "R", "S"),      # filter extent
    "extent": ("O", "P", "Q"),      # output extent
}


def names(nd: int, which: str) -> tuple[str, ...]:
    """The names of ``which`` (a key of AXIS_NAMES) for the last ``nd`` axes."""
    return AXIS_NAMES[which][3 - nd:]


def kernel_ndim(problem: Problem) -> int:
    """The N a problem's kernels run with: 3 for ndim 3, 1 for a 2D problem that is a 1D one's
    embedding (a unit input, filter and output height and no height padding: every height index is
    0), else 2."""
    if problem.ndim == 3:
        return 3
    if (problem.h, problem.r, problem.p, problem.padding[0]) == (1, 1, 1, 0):
        return 1
    return 2


@dataclass(frozen=True)
class Geometry:
    """A problem's spatial geometry over the N axes its kernels take, depth first: input size, filter
    size, output size, stride, padding and dilation, each an N-tuple."""

    size: tuple[int, ...]
    kernel: tuple[int, ...]
    out: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]

    @property
    def nd(self) -> int:
        return len(self.size)

    @property
    def taps(self) -> int:
        """Filter taps: prod(kernel)."""
        return math.prod(self.kernel)


def _last_axes(problem: Problem, nd: int) -> tuple[tuple[int, ...], ...]:
    """(size, kernel, out, stride, padding, dilation) of ``problem`` over its last ``nd`` axes."""
    pr = problem
    return tuple(tuple(v)[-nd:] for v in (pr.spatial_in, pr.kernel_size, pr.spatial_out, pr.strides,
                                           pr.paddings, pr.dilations))


def geometry(problem: Problem, nd: int | None = None) -> Geometry:
    """The geometry of ``problem`` over its last ``nd`` axes (default :func:`kernel_ndim`)."""
    return Geometry(*_last_axes(problem, kernel_ndim(problem) if nd is None else nd))


@dataclass(frozen=True)
class ForwardGeometry(Geometry):
    """The forward convolution an implicit GEMM runs for a problem: n images, c gathered (input)
    channels, k output channels, and the spatial geometry of that forward (:meth:`of`)::

        y[n, o, k] = sum_{tap, c} x[n, o * stride - padding + tap * dilation, c] * w[k, tap, c]

    GEMM M = n * prod(out) output pixels, N = k, reduction taps x c."""

    n: int
    c: int
    k: int

    @property
    def m(self) -> int:
        """GEMM rows: every output pixel of every image."""
        return self.n * math.prod(self.out)

    @property
    def input_pixels(self) -> int:
        """Input pixels of every image: n * prod(size)."""
        return self.n * math.prod(self.size)

    @staticmethod
    def axes_of(problem: Problem) -> int:
        """The spatial axes :meth:`of` takes by default: all of the problem's."""
        return problem.ndim

    @classmethod
    def of(cls, problem: Problem, nd: int | None = None) -> "ForwardGeometry":
        """The forward over the last ``nd`` axes (default :meth:`axes_of`) of a forward problem, of a
        wgrad (the forward whose filter gradient is wanted) and of a stride-1 dgrad: the forward of dy
        with the spatially flipped, K<->C transposed filter and padding dilation * (kernel - 1) - padding
        (negative where that exceeds the reach: the window starts inside dy); ValueError otherwise."""
        pr = problem
        size, kernel, out, stride, padding, dilation = _last_axes(pr, cls.axes_of(pr) if nd is None else nd)
        if pr.op in ("forward", "wgrad"):
            return cls(size, kernel, out, stride, padding, dilation, n=pr.n, c=pr.c, k=pr.k)
        if pr.op == "dgrad" and all(s == 1 for s in stride):
            flipped = tuple(d * (t - 1) - p for d, t, p in zip(dilation, kernel, padding))
            return cls(out, kernel, size, stride, flipped, dilation, n=pr.n, c=pr.k, k=pr.c)
        raise ValueError(f"no forward form for {pr.describe()}: forward, or dgrad with stride 1")


def u32_product(factors) -> str:
    """Source of the uint32 product of ``factors`` (names), multiplied left to right:
    ``U(U(a * b) * c)``; one factor as it is."""
    text = factors[0]
    for f in factors[1:]:
        text = f"U({text} * {f})"
    return text
