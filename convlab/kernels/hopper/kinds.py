"""The two operand plans of the Hopper convolution kernel (mainloop.Loads): what a k tile copies and how
the consumers read it.

    fprop  (forward, stride-1 dgrad)   GEMM rows: output pixels, columns: K, reduction: taps x C blocks
        k tile kt: tap = kt // CB, channel block cb = kt % CB
        A: the im2col box of x at the unit's first pixel, the tap's offsets: [BM pixels][BK channels]
        B: the filter's box [BN rows of K][BK channels]          both K-major (rows of BK * size bytes)
        store: y as [M, K], a panel at (n0 + p EB, m0)
    wgrad  (backward-weight)           GEMM rows: K, columns: (tap, C block), reduction: N x P x Q pixels
        unit column tn: tap = tn // CB, channels c0 = (tn % CB) * BN;  k tile kt: pixels kt * BK..
        A: dy's tile [BK pixels][64 channels of K] per 64 rows       MN-major (K contiguous: 128-byte
        B: x's im2col box at pixel kt * BK, the tap's offsets,       rows; the wgmma reads them with
           [BK pixels][E channels] per E = 128 / size channels       imm-trans, f16 / bf16 only)
        store: dw as [K][taps][C] (K[T]RSC), a panel at (c0 + p EB, tap, m0)

MN-major operands (wgmma_desc.mn_desc_hi): each box is one swizzle atom column of BK rows (LBO apart:
the box's bytes), 8 rows an atom (SBO = 8 rows); a 16-row k step is 16 rows further.
"""
from __future__ import annotations

from convlab.kernels.arch.wgmma import ITEMSIZE
from convlab.kernels.arch.wgmma_desc import desc_hi, mn_desc_hi
from convlab.kernels.hopper.config import HopperConfig
from convlab.kernels.hopper.mainloop import Loads
from convlab.kernels.source import Writer


class FpropLoads(Loads):
    """The fprop plan (module doc)."""

    name, store_rank = "fprop", 2

    def __init__(self, cfg: HopperConfig, itype: str, nd: int) -> None:
        self.cfg, self.itype, self.nd = cfg, itype, nd
        self.dhi = {"DHI_A": desc_hi(cfg.row_bytes(itype)), "DHI_B": desc_hi(cfg.row_bytes(itype))}

    def unit(self, w: Writer) -> None:
        w("img = I(m0 // PIX)")
        w("rest = U(m0 % PIX)")
        for a in range(self.nd):
            w(f"x{a} = I(I(U(U(rest % O{a}) * ST{a})) - PD{a})")
            w(f"rest = U(rest // O{a})")

    def begin(self, w: Writer) -> None:
        w("tap = U(kt // CB)")
        w("cb = U(kt - U(tap * CB))")

    def ktile(self, w: Writer) -> None:
        _taps(w, self.nd, "tap")

    def copies(self, w: Writer, dst_a: str, dst_b: str, bar: str) -> None:
        axes = range(self.nd)
        c0 = f"I(U(cb * {self.cfg.BK}))"
        w(f"load_a(maps, 0, {dst_a}, {bar}, {c0}, {', '.join(f'x{a}' for a in axes)}, img, "
          f"{', '.join(f'U(f{a} * DL{a})' for a in axes)})")
        w(f"load_b(maps, 1, {dst_b}, {bar}, {c0}, {', '.join(f'I(f{a})' for a in axes)}, I(n0))")

    def advance(self, w: Writer) -> None:
        w("cb = U(cb + 1)")
        with w.block("if cb == CB:"):
            w("cb = U(0)")
            w("tap = U(tap + 1)")

    def mma(self, w: Writer, a: str, b: str) -> None:
        cfg, r = self.cfg, self.cfg.row_bytes(self.itype)
        rows = cfg.BM // cfg.CONSUMERS
        w(f"da = U64(U64(U(U({a} + U(cw * {rows * r})) >> 4) & U(0x3FFF)) | DHI_A)")
        w(f"db = U64(U64(U({b} >> 4) & U(0x3FFF)) | DHI_B)")
        for kk in range(r // 32):
            for s in range(cfg.slices):
                w(f"a{s} = mma(U64(da + U64({(s * 64 * r + 32 * kk) // 16})), U64(db + U64({2 * kk})), 1, a{s})")

    def store_coords(self, panel: int, eb: int, split: bool) -> str:
        return f"I(U(n0 + {panel * eb})), I(m0)" + (", I(z)" if split else "")


class WgradLoads(Loads):
    """The wgrad plan (module doc)."""

    name, store_rank = "wgrad", 3

    def __init__(self, cfg: HopperConfig, itype: str, nd: int) -> None:
        self.cfg, self.itype, self.nd = cfg, itype, nd
        size = ITEMSIZE[itype]
        self.atom = min(128, cfg.BN * size)  # bytes of one B box row
        self.dhi = {"DHI_A": mn_desc_hi(128, cfg.BK * 128), "DHI_B": mn_desc_hi(self.atom, cfg.BK * self.atom)}

    def _column(self, w: Writer) -> None:
        w("tap = U(U(tn) // CB)")
        w(f"c0 = U(U(U(tn) - U(tap * CB)) * {self.cfg.BN})")

    def unit(self, w: Writer) -> None:
        self._column(w)
        _taps(w, self.nd, "tap")

    def consumer_unit(self, w: Writer) -> None:
        self._column(w)

    def begin(self, w: Writer) -> None:
        pass

    def ktile(self, w: Writer) -> None:
        w(f"pix = U(kt * {self.cfg.BK})")
        w("img = I(pix // PIX)")
        w("rest = U(pix % PIX)")
        for a in range(self.nd):
            w(f"x{a} = I(I(U(U(rest % O{a}) * ST{a})) - PD{a})")
            w(f"rest = U(rest // O{a})")

    def copies(self, w: Writer, dst_a: str, dst_b: str, bar: str) -> None:
        cfg, axes = self.cfg, range(self.nd)
        for h in range(cfg.BM // 64):
            w(f"load_a(maps, 0, U({dst_a} + {h * cfg.BK * 128}), {bar}, I(U(m0 + {64 * h})), I(pix))")
        per = self.atom // ITEMSIZE[self.itype]
        for h in range(cfg.BN // per):
            w(f"load_b(maps, 1, U({dst_b} + {h * cfg.BK * self.atom}), {bar}, I(U(c0 + {h * per})), "
              f"{', '.join(f'x{a}' for a in axes)}, img, {', '.join(f'U(f{a} * DL{a})' for a in axes)})")

    def advance(self, w: Writer) -> None:
        pass

    def mma(self, w: Writer, a: str, b: str) -> None:
        cfg = self.cfg
        w(f"da = U64(U64(U(U({a} + U(cw * {cfg.slices * cfg.BK * 128})) >> 4) & U(0x3FFF)) | DHI_A)")
        w(f"db = U64(U64(U({b} >> 4) & U(0x3FFF)) | DHI_B)")
        for kk in range(cfg.BK // 16):
            for s in range(cfg.slices):
                w(f"a{s} = mma(U64(da + U64({(s * cfg.BK * 128 + kk * 16 * 128) // 16})), "
                  f"U64(db + U64({kk * 16 * self.atom // 16})), 1, a{s})")

    def store_coords(self, panel: int, eb: int, split: bool) -> str:
        return f"I(U(c0 + {panel * eb})), I(tap), I(m0)" + (", I(z)" if split else "")


def _taps(w: Writer, nd: int, tap: str) -> None:
    """f0.. = the per-axis filter index of ``tap`` (row-major taps, axis 0 (W) fastest)."""
    w(f"t = {tap}")
    for a in range(nd):
        w(f"f{a} = U(t % KS{a})")
        w(f"t = U(t // KS{a})")


KINDS = {"fprop": FpropLoads, "wgrad": WgradLoads}
