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

from typing import NamedTuple

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


class Geometry(NamedTuple):
    """A problem's spatial geometry over the N axes its kernels take, depth first."""

    size: tuple[int, ...]
    kernel: tuple[int, ...]
    out: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]

    @property
    def nd(self) -> int:
        return len(self.size)


def geometry(problem: Problem, nd: int | None = None) -> Geometry:
    """The geometry of ``problem`` over its last ``nd`` axes (default :func:`kernel_ndim`)."""
    nd = kernel_ndim(problem) if nd is None else nd
    pr = problem
    return Geometry(*(tuple(v)[-nd:] for v in (pr.spatial_in, pr.kernel_size, pr.spatial_out, pr.strides,
                                                pr.paddings, pr.dilations)))


def u32_product(factors) -> str:
    """Source of the uint32 product of ``factors`` (names), multiplied left to right:
    ``U(U(a * b) * c)``; one factor as it is."""
    text = factors[0]
    for f in factors[1:]:
        text = f"U({text} * {f})"
    return text
