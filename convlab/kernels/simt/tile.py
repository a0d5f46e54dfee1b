"""One block tile of a GEMM-like kernel: geometry, thread layout, shared memory, validation.

A block computes a ``bm x bn`` tile of C[M, N] = sum_K A[M, K] B[K, N] in slices of ``bk``; its
threads form a (bm / tm) x (bn / tn) grid, thread (ty, tx) owning a ``tm x tn`` register fragment:

    fragment rows  g * gm * nt_m + ty * gm + v    (g < tm / gm, v < gm, gm = min(4, tm))
    fragment cols  g * gn * nt_n + tx * gn + v    (each run of gm / gn values is one vector load)
    shared         As[2][bk][bm + PAD], Bs[2][bk][bn + PAD]   (k-major, double-buffered)

PAD elements per shared row keep every row 16-byte aligned (for the 128-bit fragment loads) and make
the loaders' transposed stores conflict-free. Kernel families add their own rules on top of
:meth:`Tile.validate` (the implicit GEMM: powers of two, bk % 8, warps of 32 ...) through its keywords.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

PAD = 4  # elements added to each shared row
MAX_SHARED = 48 * 1024  # bytes of static shared memory per block


class Tile(NamedTuple):
    """Block tile bm x bn, k slice bk, thread fragment tm x tn; threads = (bm // tm) * (bn // tn)."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def nt_m(self) -> int:
        """Threads along m."""
        return self.bm // self.tm

    @property
    def nt_n(self) -> int:
        """Threads along n."""
        return self.bn // self.tn

    @property
    def threads(self) -> int:
        return self.nt_m * self.nt_n

    @property
    def gm(self) -> int:
        """Consecutive fragment rows per vector load."""
        return min(4, self.tm)

    @property
    def gn(self) -> int:
        """Consecutive fragment columns per vector load."""
        return min(4, self.tn)

    @property
    def name(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}/{self.tm}x{self.tn}"

    def config(self) -> dict[str, int]:
        """The tile as plugin config entries (BM, BN, BK, TM, TN)."""
        return dict(zip(("BM", "BN", "BK", "TM", "TN"), map(int, self)))

    @classmethod
    def from_config(cls, config: dict) -> "Tile":
        """The Tile a config names; ValueError when an entry is missing."""
        try:
            return cls(*(int(config[key]) for key in ("BM", "BN", "BK", "TM", "TN")))
        except KeyError as exc:
            raise ValueError(f"tile config {dict(config)!r} lacks {exc}") from None

    def shared_bytes(self, itemsize: int = 4) -> int:
        """Static shared memory of one block: two buffers of each padded tile."""
        return 2 * self.bk * (self.bm + self.bn + 2 * PAD) * itemsize

    def lanes_m(self, prefer: tuple[int, ...]) -> int:
        """Threads of a warp along m: the first of ``prefer`` that tiles the thread grid."""
        for lm in prefer:
            if self.nt_m % lm == 0 and self.nt_n % (32 // lm) == 0:
                return lm
        raise ValueError(f"no warp layout fits a {self.nt_m} x {self.nt_n} thread grid")

    def validate(self, itemsize: int = 4, *, power_of_two: bool = False, bk_multiple: int = 1,
                 max_bk: int | None = None, warp_multiple: bool = False,
                 max_threads: int = 1024) -> "Tile":
        """Return the tile, or raise ValueError naming the broken rule, for elements of ``itemsize``
        bytes. Always: positive ints, tm and tn in 1/2/4/8 dividing bm and bn, 1..``max_threads``
        threads, at most 48 KiB of shared memory. Optional family rules: every size a power of two,
        bk a multiple of ``bk_multiple`` and at most ``max_bk``, threads a multiple of 32."""
        for name, value in zip(self._fields, self):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"tile {name} must be a positive int, got {value!r}")
            if power_of_two and value & (value - 1):
                raise ValueError(f"tile {name}={value} must be a power of two")
        if self.bk % bk_multiple:
            raise ValueError(f"tile bk={self.bk} must be a multiple of {bk_multiple}")
        if max_bk is not None and self.bk > max_bk:
            raise ValueError(f"tile bk={self.bk} must be <= {max_bk}")
        if self.tm not in (1, 2, 4, 8) or self.tn not in (1, 2, 4, 8):
            raise ValueError(f"tile tm and tn must be 1, 2, 4 or 8, got {self.tm}, {self.tn}")
        if self.bm % self.tm or self.bn % self.tn:
            raise ValueError(f"tile bm={self.bm}, bn={self.bn} must be multiples of tm={self.tm}, "
                             f"tn={self.tn}")
        low = 32 if warp_multiple else 1
        if not low <= self.threads <= max_threads or (warp_multiple and self.threads % 32):
            rule = f"a multiple of 32 in 32..{max_threads}" if warp_multiple else f"1..{max_threads}"
            raise ValueError(f"tile {self.name} has {self.threads} threads per block; must be {rule}")
        if self.shared_bytes(itemsize) > MAX_SHARED:
            raise ValueError(f"tile {self.name} needs {self.shared_bytes(itemsize)} bytes of shared "
                             f"memory for {itemsize}-byte elements, over 48 KiB")
        return self
