"""The persistent tile schedule of the Hopper kernels: which CTA computes which output tile, over which
slice of the reduction, in which order.

    units = splits x tiles_m x tiles_n         one unit: a BM x BN output tile over one split of the k tiles
    CTA c of ``ctas`` (blockIdx.x) computes units c, c + ctas, c + 2 ctas, ...   (the static persistent
        scheduler: a CTA's next tile's loads start while its consumers finish the last one's epilogue)
    unit u -> (tm, tn, split) = unit_of(u, ...):  split = u // tiles;  within a split the tiles go in
        bands of ``group`` tile rows, column by column inside a band (tiles of one band share their B
        columns and their A rows stay in L2: CUTLASS's raster swizzle, Triton's grouped order)
    split s covers k tiles [s * per_split, min((s + 1) * per_split, ktiles))

:func:`plan` splits the reduction (split-K) when the tiles fill fewer than the CTA slots (SMs x CTAs per
SM), keeping each split at least ``min_k`` k tiles long and no split empty; the partial tiles are summed
in split order afterwards (convlab.kernels.data.splitk: deterministic). :func:`unit_of` is the one
decoder: the kernels call it compiled as a device function (:data:`unit_of_device`), the tests call
it as it is.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from convlab import runtime

#: tile rows per band of the rasterisation (L2 reuse of the B columns across a band's rows)
GROUP = 8


def unit_of(u, tiles_m, tiles_n, group):
    """(tm, tn, split) of unit ``u`` (module doc); integer arithmetic only (host ints or kernel uint32)."""
    tiles = tiles_m * tiles_n
    split = u // tiles
    t = u - split * tiles
    band = group * tiles_n
    first = (t // band) * group
    rows = min(tiles_m - first, group)
    rest = t - (t // band) * band
    return first + rest % rows, rest // rows, split


unit_of_device = runtime.jit(device=True)(unit_of)


@dataclass(frozen=True)
class Schedule:
    """tiles_m x tiles_n output tiles, the reduction of ``ktiles`` k tiles cut in ``splits`` of
    ``per_split``, run by ``ctas`` persistent CTAs, rasterised in bands of ``group`` tile rows."""

    tiles_m: int
    tiles_n: int
    ktiles: int
    splits: int
    per_split: int
    ctas: int
    group: int

    @property
    def tiles(self) -> int:
        return self.tiles_m * self.tiles_n

    @property
    def units(self) -> int:
        return self.tiles * self.splits

    def k_range(self, split: int) -> tuple[int, int]:
        start = split * self.per_split
        return start, min(start + self.per_split, self.ktiles)

    def units_of(self, cta: int) -> list[tuple[int, int, int]]:
        """The (tm, tn, split) CTA ``cta`` computes, in its order."""
        return [unit_of(u, self.tiles_m, self.tiles_n, self.group) for u in range(cta, self.units, self.ctas)]


def plan(tiles_m: int, tiles_n: int, ktiles: int, sm_count: int, ctas_per_sm: int = 1, min_k: int = 4,
         max_splits: int | None = None, group: int = GROUP) -> Schedule:
    """The schedule of a GEMM of tiles_m x tiles_n tiles and ``ktiles`` k tiles on ``sm_count`` SMs with
    ``ctas_per_sm`` CTAs each (module doc); ``max_splits`` caps the split count (the partials' workspace)."""
    if min(tiles_m, tiles_n, ktiles, sm_count, ctas_per_sm, min_k) < 1:
        raise ValueError(f"a schedule needs positive sizes, got tiles {tiles_m} x {tiles_n}, {ktiles} k tiles, "
                         f"{sm_count} SMs x {ctas_per_sm}, min_k {min_k}")
    slots, tiles = sm_count * ctas_per_sm, tiles_m * tiles_n
    splits = 1
    if tiles < slots:
        splits = max(1, min(math.ceil(slots / tiles), ktiles // min_k, max_splits or ktiles))
    per_split = math.ceil(ktiles / splits)
    splits = math.ceil(ktiles / per_split)  # no empty split
    return Schedule(tiles_m, tiles_n, ktiles, splits, per_split, min(tiles * splits, slots),
                    max(1, min(group, tiles_m)))
