"""Tile configs of the Hopper kernels and the limits a config must meet, each with its reason.

    HopperConfig(BM, BN, BK, STAGES, CONSUMERS)

One CTA: CONSUMERS warpgroups of wgmma (each BM / CONSUMERS rows of the BM x BN tile, in m64 slices),
then one producer warpgroup issuing the tensor copies (on the simulator one producer warp: each thread
is a Python thread there, and only one issues). The shared memory, from its 1024-byte aligned start:

    STAGES x A tile  [BM rows][BK]      the im2col box (K-major, swizzled to its BK * size-byte rows)
    STAGES x B tile  [BN rows][BK]      the filter box
    the C tile       [BN / EB panels][BM rows][EB]   staged output in the output type, swizzled to EB *
                                        size bytes (EB: min(BN, 128 bytes of elements)), for the TMA store
    2 x STAGES mbarriers                full (the copies landed) and empty (the consumers are done)

Registers (setmaxnreg): the kernel's launch bounds cap every thread at 65536 / threads at entry; the
producer warpgroup gives its registers back (PRODUCER_REGS) and the consumers take CONSUMER_REGS, within
the 64K of the SM: 128 x PRODUCER_REGS + 128 x CONSUMERS x CONSUMER_REGS <= 65536 (CUTLASS's 40 / 232
for two consumer warpgroups).
"""
from __future__ import annotations

from typing import NamedTuple

from convlab.kernels.arch.wgmma import ITEMSIZE, KSTEP

SMEM_LIMIT = 227 * 1024  # dynamic shared memory per block on sm_90 (opt-in)
PRODUCER_REGS = 40
CONSUMER_REGS = {1: 232, 2: 232}
REGISTER_FILE = 65536
MAX_ACCUMULATORS = 128  # fp32 accumulators a consumer thread holds at most (the 255-register ceiling)


class HopperConfig(NamedTuple):
    """A BM x BN output tile, BK reduction elements a stage, STAGES stages, CONSUMERS warpgroups."""

    BM: int
    BN: int
    BK: int
    STAGES: int
    CONSUMERS: int = 1

    @property
    def name(self) -> str:
        return f"{self.BM}x{self.BN}x{self.BK}/s{self.STAGES}/c{self.CONSUMERS}"

    def producer_warps(self, simulator: bool) -> int:
        return 1 if simulator else 4

    def threads(self, simulator: bool = False) -> int:
        return 128 * self.CONSUMERS + 32 * self.producer_warps(simulator)

    @property
    def slices(self) -> int:
        """m64 slices of one consumer warpgroup."""
        return self.BM // (64 * self.CONSUMERS)

    def row_bytes(self, itype: str) -> int:
        return self.BK * ITEMSIZE[itype]

    def epilogue_width(self, out_size: int) -> int:
        """EB: output elements per staged panel row (128 bytes, or the whole tile when narrower)."""
        return min(self.BN, 128 // out_size)

    def layout(self, itype: str, out_size: int) -> dict[str, int]:
        """Byte offsets from the dynamic shared memory's start: a_stage, b_stage (one stage's size),
        a0, b0, c0 (stage 0 of A and B, the C tile), panel (one C panel's bytes), bars, total."""
        r = self.row_bytes(itype)
        a_stage, b_stage = self.BM * r, self.BN * r
        b0 = self.STAGES * a_stage
        c0 = _up(b0 + self.STAGES * b_stage, 1024)
        panel = self.BM * self.epilogue_width(out_size) * out_size
        bars = _up(c0 + panel * (self.BN // self.epilogue_width(out_size)), 1024)
        return {"a_stage": a_stage, "b_stage": b_stage, "a0": 0, "b0": b0, "c0": c0, "panel": panel, "bars": bars,
                "total": bars + 16 * self.STAGES}

    def reason(self, itype: str, out_size: int, kind: str = "fprop") -> str:
        """'' when this config compiles and fits sm_90 for ``itype`` operands and ``out_size``-byte
        outputs in a ``kind`` kernel (kinds.py: fprop reads K-major operand rows of BK elements, wgrad
        MN-major ones of BK k rows), else the first limit it breaks."""
        if itype not in ITEMSIZE:
            return f"wgmma reads f16, bf16 or tf32 operands, not {itype}"
        if any(not isinstance(v, int) or v < 1 for v in self):
            return f"config {self} must hold positive ints"
        if self.CONSUMERS not in (1, 2) or self.BM % (64 * self.CONSUMERS) or self.slices not in (1, 2):
            return f"config {self.name}: BM is one or two m64 slices for each of 1 or 2 consumer warpgroups"
        if self.BN % 8 or not 8 <= self.BN <= 256:
            return f"config {self.name}: BN (the wgmma N) must be a multiple of 8 in 8..256"
        if kind == "wgrad":
            why = self._mn_reason(itype)
            if why:
                return why
        elif self.row_bytes(itype) not in (32, 64, 128) or self.BK % KSTEP[itype]:
            return (f"config {self.name}: BK x {ITEMSIZE[itype]} bytes must be 32, 64 or 128 (the swizzled "
                    "K-major rows the copy engine writes and wgmma reads)")
        if self.BN % self.epilogue_width(out_size):
            return f"config {self.name}: BN must be whole {self.epilogue_width(out_size)}-element output panels"
        if self.slices * self.BN // 2 > MAX_ACCUMULATORS:
            return f"config {self.name}: {self.slices * self.BN // 2} fp32 accumulators a thread, over {MAX_ACCUMULATORS}"
        if self.STAGES < 2:
            return f"config {self.name}: the producer runs ahead by at least one stage (2+ stages)"
        regs = 128 * PRODUCER_REGS + 128 * self.CONSUMERS * CONSUMER_REGS[self.CONSUMERS]
        if regs > REGISTER_FILE:
            return f"config {self.name}: setmaxnreg budgets take {regs} registers, over {REGISTER_FILE}"
        total = self.layout(itype, out_size)["total"]
        if total > SMEM_LIMIT:
            return f"config {self.name}: {total} bytes of shared memory for {itype}, over {SMEM_LIMIT}"
        return ""


    def _mn_reason(self, itype: str) -> str:
        """The MN-major operands' rules: f16 / bf16 (wgmma's imm-trans), BK k rows in whole k16 steps
        within a box (<= 256), B in swizzle atoms of 16, 32 or whole 64 columns."""
        if ITEMSIZE[itype] != 2:
            return f"wgmma reads MN-major operands in f16 / bf16 only, not {itype}"
        if self.BK % 16 or not 16 <= self.BK <= 256:
            return f"config {self.name}: BK (k rows of the MN-major tiles) must be a multiple of 16 in 16..256"
        if (self.BN > 64 and self.BN % 64) or (self.BN <= 64 and self.BN not in (16, 32, 64)):
            return f"config {self.name}: BN must be 16, 32, or whole 64-column atoms (MN-major B)"
        return ""


def _up(x: int, a: int) -> int:
    return -(-x // a) * a
