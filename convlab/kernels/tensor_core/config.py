"""Configs of the tensor-core kernels (:mod:`convlab.kernels.tensor_core.warp`): the block and warp tiles, the
pipeline depth, a register cap, the matrix instruction, and the rules a config must meet to compile for
an input type.

    ITYPES[itype] = (shared / storage dtype, bytes per element, k of one mma)
    TcConfig(BM, BN, BK, WM, WN, STAGES, REGS, MMA)

MMA "sync" (the default): warps of WM x WN tiles on ``mma.sync`` (:mod:`convlab.kernels.tensor_core.warp`).
MMA "wgmma" / "wgmma0": warpgroups (4 warps, 128 threads) of WM x WN tiles on Hopper's ``wgmma.mma_async`` (sm_90a;
:mod:`convlab.kernels.tensor_core.warpgroup`), WM a multiple of 64 (WM / 64 instructions of m64nWNk16 per k step),
"wgmma" keeping one wgmma group in flight across k tiles (prefetch distance STAGES - 2), "wgmma0"
waiting for each k tile's group (prefetch distance STAGES - 1).
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
    """Block tile BM x BN x BK, warp tile (wgmma: warpgroup tile) WM x WN, STAGES shared buffers."""

    BM: int
    BN: int
    BK: int
    WM: int
    WN: int
    STAGES: int = 3
    REGS: int = 0  # registers per thread at most (ptxas -maxrregcount; 0: the compiler's choice)
    MMA: str = "sync"  # "sync" (mma.sync warps), "wgmma" / "wgmma0" (wgmma warpgroups: module doc)

    @property
    def wgmma(self) -> bool:
        return self.MMA != "sync"

    @property
    def threads(self) -> int:
        return (128 if self.wgmma else 32) * (self.BM // self.WM) * (self.BN // self.WN)

    @property
    def frag_rows(self) -> int:
        """Rows between one warp's accumulator row blocks: 16 (mma.sync's m16) or 64 (wgmma's m64)."""
        return 64 if self.wgmma else 16

    @property
    def warps_n(self) -> int:
        """Warps per row of the block's warp grid (a warp's row of tiles: warp // warps_n)."""
        return (4 if self.wgmma else 1) * (self.BN // self.WN)

    @property
    def depth(self) -> int:
        """k tiles loading ahead of the one computed (the prefetch distance)."""
        return self.STAGES - (2 if self.MMA == "wgmma" else 1)

    def shared_bytes(self, itype: str) -> int:
        return self.STAGES * (self.BM + self.BN) * self.BK * ITYPES[itype][1]

    @property
    def name(self) -> str:
        return f"{self.BM}x{self.BN}x{self.BK}/{self.WM}x{self.WN}/s{self.STAGES}" + \
            (f"/r{self.REGS}" if self.REGS else "") + ("" if self.MMA == "sync" else "/wg" + self.MMA[5:])

    def validate(self, itype: str) -> "TcConfig":
        """Raise ValueError unless this config compiles for ``itype``."""
        if itype not in ITYPES:
            raise ValueError(f"itype must be one of {sorted(ITYPES)}, got {itype!r}")
        size, kstep = ITYPES[itype][1], ITYPES[itype][2]
        if any(not isinstance(v, int) or v < 1 for v in self[:6]) or self.REGS not in (0, *range(64, 256, 8)):
            raise ValueError(f"config {self} must hold positive ints (REGS 0, or 64..248 by 8)")
        if self.MMA not in ("sync", "wgmma", "wgmma0"):
            raise ValueError(f"config {self.name}: MMA must be 'sync', 'wgmma' or 'wgmma0', got {self.MMA!r}")
        if self.wgmma:
            self._validate_wgmma(itype)
        elif self.WM % 16 or self.WN % 16 or self.BM % self.WM or self.BN % self.WN:
            raise ValueError(f"config {self.name}: WM, WN must be multiples of 16 dividing BM, BN")
        if self.BK * size not in (32, 64, 128) or self.BK % kstep:
            raise ValueError(f"config {self.name}: BK * {size} bytes must be 32, 64 or 128")
        ch = self.BK * size // 16
        if any((rows * ch) % self.threads and self.threads % (rows * ch) for rows in (self.BM, self.BN)) \
                or self.threads > 1024:
            raise ValueError(f"config {self.name}: {self.threads} threads must divide each tile's chunks "
                             f"(BM, BN x {ch}) or be a multiple of them")
        if self.depth < 1 or self.shared_bytes(itype) > DYNAMIC_LIMIT:
            raise ValueError(f"config {self.name}: needs {self.STAGES - self.depth + 1}+ stages and <= 227 KiB "
                             f"shared memory for {itype} ({self.shared_bytes(itype)} bytes)")
        return self

    def _validate_wgmma(self, itype: str) -> None:
        """The warpgroup rules: 64-row slices, the wgmma N (WN, 8..256 by 8), at most 128 fp32 accumulators
        a thread (ptxas has 255 registers), an input wgmma reads from shared memory as it is."""
        if itype == "tf32x3":
            raise ValueError(f"config {self.name}: wgmma reads its operands from shared memory as they are; "
                             "3xTF32 needs them split in registers (mma.sync only)")
        if self.WM % 64 or self.BM % self.WM or self.BN % self.WN or self.WN % 8 or not 8 <= self.WN <= 256:
            raise ValueError(f"config {self.name}: wgmma needs WM a multiple of 64 dividing BM and WN (the "
                             "instruction's N) a multiple of 8 in 8..256 dividing BN")
        if self.WM // 64 * self.WN // 2 > 128:
            raise ValueError(f"config {self.name}: {self.WM // 64 * self.WN // 2} accumulators a thread, over 128")
