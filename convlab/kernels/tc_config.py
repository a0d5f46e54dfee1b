"""Configs of the tensor-core kernels (:mod:`convlab.kernels.tc_pipeline`): the block and warp tiles, the
pipeline depth, a register cap, and the rules a config must meet to compile for an input type.

    ITYPES[itype] = (shared / storage dtype, bytes per element, k of one mma)
    TcConfig(BM, BN, BK, WM, WN, STAGES, REGS)
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

DYNAMIC_LIMIT = 227 * 1024  # dynamic shared memory per block on sm_80 / sm_90 (opt-in attribute)
ITYPES = {"f16": (np.float16, 2, 16), "bf16": (np.uint16, 2, 16), "tf32": (np.float32, 4, 8),
          "tf32x3": (np.float32, 4, 8)}
#: itype -> (shared/storage dtype, bytes per element, k of one mma); 'tf32x3': float32 operands split
#: into two TF32 parts each in registers, three TF32 mma a product (mma.split_tf32)


class TcConfig(NamedTuple):
    """Block tile BM x BN x BK, warp tile WM x WN, STAGES shared buffers."""

    BM: int
    BN: int
    BK: int
    WM: int
    WN: int
    STAGES: int = 3
    REGS: int = 0  # registers per thread at most (ptxas -maxrregcount; 0: the compiler's choice)

    @property
    def threads(self) -> int:
        return 32 * (self.BM // self.WM) * (self.BN // self.WN)

    def shared_bytes(self, itype: str) -> int:
        return self.STAGES * (self.BM + self.BN) * self.BK * ITYPES[itype][1]

    @property
    def name(self) -> str:
        return f"{self.BM}x{self.BN}x{self.BK}/{self.WM}x{self.WN}/s{self.STAGES}" + \
            (f"/r{self.REGS}" if self.REGS else "")

    def validate(self, itype: str) -> "TcConfig":
        """Raise ValueError unless this config compiles for ``itype``."""
        if itype not in ITYPES:
            raise ValueError(f"itype must be one of {sorted(ITYPES)}, got {itype!r}")
        size, kstep = ITYPES[itype][1], ITYPES[itype][2]
        if any(not isinstance(v, int) or v < 1 for v in self[:6]) or self.REGS not in (0, *range(64, 256, 8)):
            raise ValueError(f"config {self} must hold positive ints (REGS 0, or 64..248 by 8)")
        if self.WM % 16 or self.WN % 16 or self.BM % self.WM or self.BN % self.WN:
            raise ValueError(f"config {self.name}: WM, WN must be multiples of 16 dividing BM, BN")
        if self.BK * size not in (32, 64, 128) or self.BK % kstep:
            raise ValueError(f"config {self.name}: BK * {size} bytes must be 32, 64 or 128")
        ch = self.BK * size // 16
        if any((rows * ch) % self.threads and self.threads % (rows * ch) for rows in (self.BM, self.BN)) \
                or self.threads > 1024:
            raise ValueError(f"config {self.name}: {self.threads} threads must divide each tile's chunks "
                             f"(BM, BN x {ch}) or be a multiple of them")
        if self.STAGES < 2 or self.shared_bytes(itype) > DYNAMIC_LIMIT:
            raise ValueError(f"config {self.name}: needs 2+ stages and <= 227 KiB shared memory for "
                             f"{itype} ({self.shared_bytes(itype)} bytes)")
        return self
