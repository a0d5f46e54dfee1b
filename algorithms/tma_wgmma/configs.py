"""The tma_wgmma plugin's tile configs: which Hopper tiles a problem gets, best first.

    tiles(geo, itype, out_size, target) -> [HopperConfig]   the configs that fit the problem and the target
    to_config(HopperConfig) -> Config, hopper_config(Config) -> HopperConfig

GPU tiles: BM 128 (two consumer warpgroups of m64, CUTLASS's cooperative tile) or 64 (one), BN the
wgmma N from 16 to 256 (16 / 32 for 16-32 output channels: a wider tile would multiply zeros), BK the
reduction a stage takes: 128-byte rows (64 fp16 / bf16, 32 fp32), or 32- / 64-byte rows when the
channels are few (C = 3 or 16 padded to a 16-byte chunk: a 64-wide stage would be mostly zeros), stages
as many as fit 227 KiB with the staged C tile. Order: the least padded work (channel blocks x taps and
the N tile), then the fewest tile rows idle in the last wave, then the biggest tile. On the simulator
one tiny tile: 64 rows of one consumer warpgroup, 32-byte rows, 2 stages.
"""
from __future__ import annotations

import functools
import math

from convlab.kernels.arch.wgmma import ITEMSIZE
from convlab.kernels.hopper.config import HopperConfig
from convlab.kernels.hopper.geometry import Geometry
from convlab.plugin.contract import Config
from convlab.runtime.targets import Target

GPU_BN = (256, 128, 64, 32, 16)


def to_config(cfg: HopperConfig) -> Config:
    return Config(BM=cfg.BM, BN=cfg.BN, BK=cfg.BK, STAGES=cfg.STAGES, CONSUMERS=cfg.CONSUMERS)


def hopper_config(config: Config) -> HopperConfig:
    return HopperConfig(config["BM"], config["BN"], config["BK"], config["STAGES"], config["CONSUMERS"])


def _stages(bm: int, bn: int, bk: int, consumers: int, itype: str, out_size: int) -> HopperConfig | None:
    """The deepest ring (2..8 stages) of this tile that fits, None when none does."""
    best = None
    for stages in range(2, 9):
        cfg = HopperConfig(bm, bn, bk, stages, consumers)
        if cfg.reason(itype, out_size):
            break
        best = cfg
    return best


def tiles(geo: Geometry, itype: str, out_size: int, target: Target) -> list[HopperConfig]:
    """The configs of the module doc that fit ``geo``'s maps and ``target``."""
    return list(_tiles(geo, itype, out_size, target))


#: one planning per (geometry, type, target): the verdict of each config asks for the problem's tiles
#: again (per config, replanning took 2/3 of convlab compile's corpus collection on the CI cover)
@functools.lru_cache(maxsize=4096)
def _tiles(geo: Geometry, itype: str, out_size: int, target: Target) -> tuple[HopperConfig, ...]:
    size = ITEMSIZE[itype]
    if target.simulator:
        bn = 16 if geo.k <= 16 else 32
        found = [HopperConfig(64, bn, 32 // size, 2, 1)]
    else:
        cs = -(-geo.c * size // 16) * 16 // size
        bks = [b for b in (128 // size, 64 // size, 32 // size) if b // 2 < cs] or [32 // size]
        bns = [b for b in GPU_BN if b // 2 < geo.k] or [16]
        found = []
        for bk in bks:
            for bn in bns:
                for bm, consumers in ((128, 2), (64, 1)):
                    cfg = _stages(bm, bn, bk, consumers, itype, out_size)
                    if cfg is not None:
                        found.append(cfg)
    found = [c for c in found if not geo.reason(map_dtype(itype), size, c.BM, c.BN, c.BK)
             and not target.fits(threads=c.threads(target.simulator), shared=c.layout(itype, out_size)["total"])]

    def order(c: HopperConfig) -> tuple:
        work = math.ceil(geo.c / c.BK) * c.BK * math.ceil(geo.k / c.BN) * c.BN
        tiles_ = math.ceil(geo.m / c.BM) * math.ceil(geo.k / c.BN)
        tail = math.ceil(tiles_ / target.sm_count) * target.sm_count - tiles_
        return (work, tail / max(1, tiles_) > 0.5, -c.BM * c.BN)
    return tuple(sorted(found, key=order))


def map_dtype(itype: str) -> str:
    return {"f16": "float16", "bf16": "uint16"}.get(itype, "float32")


def wgrad_tiles(geo: Geometry, itype: str, target: Target) -> list[HopperConfig]:
    """wgrad's configs (kinds.py): rows K, columns (tap, C block), k rows BK pixels; on the simulator one
    tiny tile; on a GPU BM 128 / 64, BN up to C's 64-column atoms, BK 64 pixels; the least padded first."""
    return list(_wgrad_tiles(geo, itype, target))


@functools.lru_cache(maxsize=4096)
def _wgrad_tiles(geo: Geometry, itype: str, target: Target) -> tuple[HopperConfig, ...]:
    size = ITEMSIZE[itype]
    if target.simulator:
        found = [HopperConfig(64, 16 if geo.c <= 16 else 32, 16, 2, 1)]
    else:
        bns = [b for b in (256, 128, 64, 32, 16) if b // 2 < geo.c] or [16]
        found = []
        for bn in bns:
            for bm, consumers in ((128, 2), (64, 1)):
                best = None
                for stages in range(2, 9):
                    cfg = HopperConfig(bm, bn, 64, stages, consumers)
                    if cfg.reason(itype, size, "wgrad") or cfg.reason(itype, 4, "wgrad"):
                        break
                    best = cfg
                if best is not None:
                    found.append(best)
    found = [c for c in found if not geo.reason(map_dtype(itype), size, c.BK, min(128, c.BN * size) // size,
                                                 min(128, c.BN * size) // size)
             and not target.fits(threads=c.threads(target.simulator), shared=c.layout(itype, size)["total"])]

    def order(c: HopperConfig) -> tuple:
        work = math.ceil(geo.k / c.BM) * c.BM * math.ceil(geo.c / c.BN) * c.BN
        return (work, -c.BM * c.BN)
    return tuple(sorted(found, key=order))
