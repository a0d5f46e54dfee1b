"""The tensor-core plugin's configs: the tile tables per target class and the order the plugin offers them.

    tiles(problem, gemm, itype, target, wgmma) -> [TcConfig]   the configs that fit the target, best first:
        warp tiles (mma.sync) and, where the target has wgmma, warpgroup tiles after them; within each, the tile that wastes the least of N (output
        channels), then the one filling the most SMs (up to all of them), then the biggest
    to_config(TcConfig) -> Config, tc_config(Config) -> TcConfig
"""
from __future__ import annotations

import math

from convlab.kernels.tensor_core.config import TcConfig
from convlab.plugin.contract import Config
from convlab.problem import Problem
from convlab.runtime.targets import Target

#: GPU configs (shared memory <= 48 KiB: few configs, each compiles in 5-25 s on the H200); the 128x64 fp16
#: tile capped at 128 registers (4 blocks of 128 threads per SM: the staged epilogue took it to 156)
GPU_TILES = {16: [TcConfig(128, 128, 32, 64, 64, 3), TcConfig(128, 64, 32, 64, 32, 3, REGS=128),
                  TcConfig(64, 64, 32, 32, 32, 4)],
             32: [TcConfig(128, 128, 16, 64, 64, 3), TcConfig(128, 64, 16, 64, 32, 3),
                  TcConfig(64, 64, 16, 32, 32, 4)]}
#: narrow tiles, offered when the GEMM's N (output channels; dgrad: input channels) is at most 32, where a
#: 64-wide tile would multiply by zeros: the seed's 16-channel layers, MobileNet's 16/24/32-channel ones
GPU_NARROW = {16: [TcConfig(128, 16, 32, 32, 16, 3), TcConfig(128, 32, 32, 32, 32, 3)],
              32: [TcConfig(128, 16, 16, 32, 16, 3), TcConfig(128, 32, 16, 32, 32, 3)]}
SIM_TILES = {16: [TcConfig(32, 32, 16, 16, 32, 2)], 32: [TcConfig(32, 32, 8, 16, 32, 2)]}
#: the simulator's narrow tile (instead of SIM_TILES when N <= 16): fewer B chunks than threads
SIM_NARROW = {16: [TcConfig(32, 16, 16, 16, 16, 2)], 32: [TcConfig(32, 16, 8, 16, 16, 2)]}
#: 16-row tiles for a wgrad GEMM of M = K <= 16 output channels (the seed's layer: a 128-row tile is
#: 7/8 zeros), GPU and simulator (fewer A chunks than threads)
GPU_SHORT = {16: [TcConfig(16, 64, 32, 16, 32, 3)], 32: [TcConfig(16, 64, 16, 16, 32, 3)]}
SIM_SHORT = {16: [TcConfig(16, 32, 16, 16, 16, 2)], 32: [TcConfig(16, 32, 8, 16, 16, 2)]}
#: warpgroup configs (``wgmma.mma_async``, convlab.kernels.tensor_core.warpgroup) for targets with wgmma (sm_90):
#: 128-byte shared rows (the 128B swizzle: BK 64 halves, 32 fp32), two warpgroups along M, a block N of
#: 256 / 128 / 64 (32 for a narrow N); on the GPU they come first, on the simulator after the warp tiles
#: (one warpgroup, 32-byte rows). Not for tf32x3 (its split operands live in registers) nor an NCHW 1x1
#: read (wgmma reads A K-major: run copies it to NHWC)
GPU_WGMMA = {16: [TcConfig(128, 256, 64, 64, 256, 4, MMA="wgmma"), TcConfig(128, 128, 64, 64, 128, 5, MMA="wgmma"),
                  TcConfig(128, 64, 64, 64, 64, 5, MMA="wgmma")],
             32: [TcConfig(128, 256, 32, 64, 256, 4, MMA="wgmma"), TcConfig(128, 128, 32, 64, 128, 5, MMA="wgmma"),
                  TcConfig(128, 64, 32, 64, 64, 5, MMA="wgmma")]}
GPU_WGMMA_NARROW = {16: [TcConfig(128, 32, 64, 64, 32, 5, MMA="wgmma")],
                    32: [TcConfig(128, 32, 32, 64, 32, 5, MMA="wgmma")]}
SIM_WGMMA = {16: [TcConfig(64, 32, 16, 64, 32, 3, MMA="wgmma")], 32: [TcConfig(64, 32, 8, 64, 32, 3, MMA="wgmma")]}


def to_config(t: TcConfig) -> Config:
    extra = ({"REGS": t.REGS} if t.REGS else {}) | ({"MMA": t.MMA} if t.wgmma else {})
    return Config(BM=t.BM, BN=t.BN, BK=t.BK, WM=t.WM, WN=t.WN, STAGES=t.STAGES, **extra)


def tc_config(config: Config) -> TcConfig:
    """The TcConfig a plugin config names."""
    return TcConfig(config["BM"], config["BN"], config["BK"], config["WM"], config["WN"], config["STAGES"],
                    REGS=config.get("REGS", 0), MMA=config.get("MMA", "sync"))


def tiles(problem: Problem, gemm: tuple[int, int, int], itype: str, target: Target, wgmma: bool) -> list[TcConfig]:
    """The configs of ``problem`` (its GEMM's (M, N, K): ``gemm``) on ``target`` (module docstring)."""
    bits = 32 if itype in ("tf32", "tf32x3") else 16
    m, n, _ = gemm
    blocks = lambda t: math.ceil(m / t.BM) * math.ceil(n / t.BN)  # noqa: E731
    short = problem.op == "wgrad" and m <= 16  # wgrad: M = output channels
    if target.simulator:
        warp = (SIM_SHORT if short else SIM_NARROW if n <= 16 else SIM_TILES)[bits]
        warpgroup = SIM_WGMMA[bits]
    else:  # narrow tiles for N <= 32; no 128-wide tile for N <= 64 (half of it would be zeros)
        warp = [t for t in GPU_TILES[bits] if t.BN <= 64 or n > 64] + (GPU_NARROW[bits] if n <= 32 else []) \
            + (GPU_SHORT[bits] if short else [])
        warpgroup = [t for t in GPU_WGMMA[bits] if t.BN <= max(64, n)] + (GPU_WGMMA_NARROW[bits] if n <= 32 else [])
    if not wgmma:
        warpgroup = []
    # a short wgrad GEMM: the least padded M x N area first
    area = (lambda t: math.ceil(m / t.BM) * t.BM) if short else (lambda t: 1)  # noqa: E731
    order = lambda t: (area(t) * math.ceil(n / t.BN) * t.BN, -min(blocks(t), target.sm_count),  # noqa: E731
                       -t.BM * t.BN)
    fits = lambda t: not target.fits(threads=t.threads, shared=t.shared_bytes(itype))  # noqa: E731
    warp, warpgroup = (sorted(filter(fits, group), key=order) for group in (warp, warpgroup))
    # mma.sync first, wgmma after, on every target: on the H200 the wgmma configs first gave 0.694 of cuDNN
    # channels-last in f16 forward (Burn, b16) against 0.797 for the mma.sync tiles, and wgrad 0.548 against
    # 0.593 (results/wgmma/h200/9f7b5c1/README.md); the tuner times both where it tunes
    return warp + warpgroup
