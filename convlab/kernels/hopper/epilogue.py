"""The Hopper kernels' epilogue: accumulators (+ bias, cast to the output type) through shared memory to a
tensor store, while the producer already loads the next unit's stages.

    consumer thread 0: cp.async.bulk.wait_group.read 0    # the last unit's store has read the C tile
    named barrier (the consumer threads)
    every consumer thread: its fragments -> the C tile     # panels of EB columns, rows swizzled like
                                                           # the copy engine reads them (tensormap.swizzled)
    fence.proxy.async (each writer: its stores visible to the copy engine); named barrier
    consumer thread 0: one tensor store per panel (box EB x BM at (n0 + p EB, m0[, split])); commit

Fragment layout (wgmma_desc's accumulators): thread (warp w of its warpgroup, lane 4g + q) holds
a_s[4j + 2h + u] = C[rows(s) + 16w + g + 8h, 8j + 2q + u], rows(s) = the warpgroup's first row + 64 s.
The store clips rows past M and columns past N (the map's dims): no bounds checks here. A split-K
partial (``Out.split``) goes out in fp32 to [split, M, N] without bias; the bias then joins the ordered
sum (convlab.kernels.data.splitk).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from convlab.kernels.source import Writer
from convlab.kernels.hopper.config import HopperConfig

#: output kind -> (store conversion of a float32 value, bias load to float32, element bytes)
KINDS = {"f16": ("{}", "f32({})", 2), "bf16": ("f32_to_bf16({})", "bf16_to_f32({})", 2), "f32": ("{}", "{}", 4)}


@dataclass(frozen=True)
class Out:
    """What the epilogue writes: ``kind`` (f16, bf16 bits, f32), ``bias`` (added per column), ``split``
    (fp32 partials with a split coordinate), ``mi`` the output map's index."""

    kind: str
    bias: bool
    split: bool
    mi: int = 2

    @property
    def size(self) -> int:
        return KINDS[self.kind][2]


def epilogue(w: Writer, cfg: HopperConfig, out: Out, lay: dict[str, int], coords: Callable[[int, int], str]) -> None:
    """The lines of the module doc; the kernel defines cw, warp, lane, tid, m0, n0, z, base, ct (the
    shared memory in the output's element type) and the final accumulators a0..; ``coords(p, eb)``: the
    store coordinates of panel p (kinds.py)."""
    convert, load, size = KINDS[out.kind]
    eb = cfg.epilogue_width(size)
    ebb = eb * size
    rows = cfg.BM // cfg.CONSUMERS
    mask = {32: 1, 64: 3, 128: 7}.get(ebb, 0)
    for s in range(cfg.slices):
        w(", ".join(f"c{s}_{j}_{r}" for j in range(cfg.BN // 8) for r in range(4)) + f", = a{s}")
    w("w4 = U(warp % 4)")
    w("g = U(lane // 4)")
    w("q2 = U(U(lane % 4) * 2)")
    if out.bias:
        for j in range(cfg.BN // 8):
            for u in range(2):
                w(f"col = U(U(n0 + q2) + {8 * j + u})")
                w(f"b{j}_{u} = {load.format('bias[col]')} if col < N else f32(0)")
    with w.block("if tid == 0:"):
        w("wait_read0()")
    w("csync()")
    for s in range(cfg.slices):
        for h in range(2):
            w(f"rb = U(U(U(U(cw * {rows}) + U(U(w4 * 16) + g)) + {64 * s + 8 * h}) * {ebb})")
            for j in range(cfg.BN // 8):
                panel, ecol = (8 * j) // eb, (8 * j) % eb
                w(f"off = U(rb + U(U(q2 + {ecol}) * {size}))")
                if mask:
                    w(f"off = U(off ^ U(U(U(off >> 7) & {mask}) << 4))")
                w(f"at = U(U(off + {lay['c0'] + panel * lay['panel']}) // {size})")
                for u in range(2):
                    value = f"c{s}_{j}_{2 * h + u}" + (f" + b{j}_{u}" if out.bias else "")
                    w(f"ct[U(at + {u})] = {convert.format(value)}")
    w("fence_proxy_async()")
    w("csync()")
    with w.block("if tid == 0:"):
        for p in range(cfg.BN // eb):
            w(f"store_c(maps, {out.mi}, U(base + {lay['c0'] + p * lay['panel']}), {coords(p, eb)})")
        w("bulk_commit()")
