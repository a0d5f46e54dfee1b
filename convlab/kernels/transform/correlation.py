"""The correlation that the transform-domain convolutions (Winograd, FFT) run, and the tiles they cut its
output plane into (host arithmetic on a Problem).

Forward and stride-1 dgrad are one correlation (dgrad: dy with the filter rotated by 180 degrees and its
two channel axes swapped, the origin moved by Rd - 1 - padding, Rd x Sd the filter's extent):

    out[n, g*Ko + o, i, j] = bias + sum_{ci < Ci, a, b} inp[n, g*Ci + ci, i + oh + a, j + ow + b] * filt(o, ci, a, b)

    op       inp   out   Ci   Ko   (oh, ow)
    forward  x     y     C'   K'   (-ph, -pw)
    dgrad    dy    dx    K'   C'   (ph - (Rd-1), pw - (Sd-1))
    wgrad    x     dy    C'   K'   (-ph, -pw)        (the tiles are dy's, x read from the origin)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from convlab.problem import Problem


@dataclass(frozen=True)
class Tiling:
    """The correlation of one problem (module docstring) and its output plane's tiles: ``tiles`` per axis
    (H, W), ``origin`` the input position of tile (0, 0) (oh, ow), ``plane_in`` / ``plane_out`` the (H, W)
    extents, ``groups``, ``c_in`` (Ci) and ``k_out`` (Ko) channels a group, ``nb`` images a pass."""

    tiles: tuple[int, int]
    origin: tuple[int, int]
    plane_in: tuple[int, int]
    plane_out: tuple[int, int]
    groups: int
    c_in: int
    k_out: int
    nb: int

    @property
    def t_img(self) -> int:
        """Tiles an image."""
        return self.tiles[0] * self.tiles[1]


def tiling_fields(problem: Problem, taps: tuple[int, int], tile: tuple[int, int]) -> dict[str, Any]:
    """The :class:`Tiling` fields of ``problem`` but ``nb``: ``taps`` (Rd, Sd) the filter's extent per axis
    (with its dilation), ``tile`` (H, W) outputs a tile."""
    pr = problem
    if pr.op == "dgrad":
        c_in, k_out, plane_in, plane_out = pr.k_per_group, pr.c_per_group, (pr.p, pr.q), (pr.h, pr.w)
        origin = (pr.padding[0] - (taps[0] - 1), pr.padding[1] - (taps[1] - 1))
    else:
        c_in, k_out, plane_in, plane_out = pr.c_per_group, pr.k_per_group, (pr.h, pr.w), (pr.p, pr.q)
        origin = (-pr.padding[0], -pr.padding[1])
    tiles = (math.ceil(plane_out[0] / tile[0]), math.ceil(plane_out[1] / tile[1]))
    return dict(tiles=tiles, origin=origin, plane_in=plane_in, plane_out=plane_out, groups=pr.groups, c_in=c_in,
                k_out=k_out)
