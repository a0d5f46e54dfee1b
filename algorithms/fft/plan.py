"""The geometry of an FFT convolution: the transform size per axis, the overlap-save tiles, the operands'
roles, the workspace and the images per pass (host arithmetic only).

Stride 1; a dilated filter is its zero-inserted form, Rd = d*(R - 1) + 1 taps. Forward and dgrad are one
correlation (dgrad: dy with the filter rotated and its channel axes swapped: convlab.kernels.transform.
correlation, shared with winograd's plan):

    out[n, g*Ko + o, i, j] = bias + sum_{ci, a < Rd, b < Sd} inp[n, g*Ci + ci, i + oh + a, j + ow + b] * wd(o, ci, a, b)

Overlap-save: an axis of FFT length NF gives L = NF - Rd + 1 outputs a tile; tile t reads the NF inputs
from t*L + origin, and the first L values of IFFT(X conj W) are its outputs (no wrap-around: t + a
< NF). An axis without a filter (R = 1: a 1D problem's height) is not transformed (NF = 1); a filter
of width 1 still gets NF = 2 (two outputs a tile) since the row transform needs a pair.

wgrad correlates x patches of NF with dy tiles of L (zeros beyond): dw's lag a*d (a < R) is the
product's value at a*d, summed over tiles and images in the frequency domain by a GEMM.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from convlab.kernels.transform.correlation import Tiling, tiling_fields
from convlab.plugin.contract import Config
from convlab.problem import Problem

#: FFT lengths per filtered axis (2D: NH = NW), the largest first tried where the extent allows
SIZES_2D = (8, 16, 32)
SIZES_1D = (64, 256, 1024)
_INDEX_LIMIT = 2**31 - 1


def pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def dilated(problem: Problem) -> tuple[int, int]:
    """(Rd, Sd): the zero-inserted filter's taps per axis."""
    return tuple(d * (k - 1) + 1 for d, k in zip(problem.dilation, (problem.r, problem.s)))


def extents(problem: Problem) -> tuple[tuple[int, int], tuple[int, int]]:
    """(input plane, output plane) of the correlation: wgrad's output is dy's plane (its tiles)."""
    pr = problem
    if pr.op == "dgrad":
        return (pr.p, pr.q), (pr.h, pr.w)
    return (pr.h, pr.w), (pr.p, pr.q)


def sizes(problem: Problem, n: int) -> tuple[int, int] | None:
    """(NH, NW) for config size ``n``: n, or less where the whole extent fits; None when the filter
    does not fit n (no output left a tile)."""
    rd, sd = dilated(problem)
    _, out = extents(problem)
    nh = 1 if problem.r == 1 else min(n, pow2(out[0] + rd - 1))
    nw = max(2, min(n, pow2(out[1] + sd - 1)))
    if (problem.r > 1 and nh < rd) or nw < sd:
        return None
    return nh, nw


@dataclass(frozen=True)
class Plan(Tiling):
    """One FFT run (module docstring): the correlation and its tiles (Tiling's fields), ``nf`` (NH, NW),
    ``tile`` outputs a tile per axis, ``inline`` products in the inverse; ``z`` = bins x groups GEMMs."""

    nf: tuple[int, int]
    tile: tuple[int, int]
    inline: bool

    @property
    def bins(self) -> int:
        return self.nf[0] * (self.nf[1] // 2 + 1)

    @property
    def z(self) -> int:
        return self.bins * self.groups

    def buffers(self, problem: Problem) -> int:
        """float32 elements of the workspace: the two spectra and the GEMM's output (module docstring)."""
        t = self.nb * self.t_img
        if problem.op == "wgrad":
            return self.z * (2 * self.k_out * 2 * t + self.c_in * 2 * t + 2 * self.k_out * self.c_in)
        return self.z * (2 * self.k_out * 2 * self.c_in + t * 2 * self.c_in
                         + (0 if self.inline else 2 * self.k_out * t))


def make_plan(problem: Problem, config: Config, workspace_limit: int) -> Plan:
    """The plan of ``config`` (its ``n``, ``product``) with as many images a pass as the limit allows
    (at least 1: over the limit the plugin declines)."""
    pr = problem
    nf = sizes(pr, int(config["n"]))
    if nf is None:
        raise ValueError(f"FFT size {config['n']} cannot hold the {dilated(pr)} filter")
    rd, sd = dilated(pr)
    tile = (nf[0] - rd + 1 if pr.r > 1 else 1, nf[1] - sd + 1)
    inline = config.get("product", "gemm") == "inline"
    base = Plan(**tiling_fields(pr, (rd, sd), tile), nb=1, nf=nf, tile=tile, inline=inline)
    one, two = base.buffers(pr), dataclasses.replace(base, nb=2).buffers(pr)
    per_image, fixed = two - one, 2 * one - two
    room = (workspace_limit // 4 - fixed) // max(1, per_image)
    nb = int(max(1, min(max(pr.n, 1), room, _INDEX_LIMIT // max(1, per_image))))
    return dataclasses.replace(base, nb=nb)
