"""The warpgroup tensor-core main loop (Hopper ``wgmma.mma_async``, sm_90a) beside warp's mma.sync loop:
the same loaders (cp.async into the same swizzled stages), split-K, batches and staged epilogue.

One block computes a BM x BN tile with warpgroups WGM x WGN (WGM = BM / WM, WGN = BN / WN), each a WM x
WN tile of WM / 64 m64 slices; S = STAGES shared buffers of A (BM x BK) and Bt (BN x BK); D = the
prefetch distance (``cfg.depth``): S - 2 for MMA "wgmma", S - 1 for "wgmma0".

    for s < D: cp.async k tile s -> stage s;  commit
    for kt < ceil(K/BK):
        cp.async.wait_group(D-1); fence.proxy.async; __syncthreads()
                                  # tile kt landed, visible to the async proxy, in every thread's view
        cp.async k tile kt+D -> stage (kt+D) % S  (if it exists);  commit
        wgmma.fence               # (accumulators tied through it)
        for each k step (16 halves or 8 tf32 = 32 bytes of every row), for each m64 slice s:
            acc[s] = wgmma m64nWNk(16|8)(desc(A stage kt%S, rows wm0 + 64s, step), desc(B, rows wn0, step))
        wgmma.commit_group; wgmma.wait_group(1 for "wgmma", 0 for "wgmma0")   (accumulators tied)
    wgmma.wait_group(0); staged epilogue (tc_epilogue: warp w of a warpgroup owns rows 16 (w % 4) of each
        slice, the m16n8 C fragment per 8 columns: the layout of wgmma's accumulators, wgmma.py)

Stage reuse (why D = S - 2 with one group in flight): at the barrier of iteration kt every warpgroup has
passed its wait_group of iteration kt-1, so its groups up to kt-2 ("wgmma", wait 1) or kt-1 ("wgmma0",
wait 0) are complete, while kt-1 may still be reading its stage under "wgmma". The prefetch after the
barrier writes stage (kt+D) % S = (kt-2) % S ("wgmma") or (kt-1) % S ("wgmma0"): a stage no pending
wgmma reads, and not stage kt % S, read next. The simulator checks this (wgmma_sim: a cp.async into
bytes a pending wgmma reads raises), and that every copy was waited and fenced before a wgmma reads it.

Shared layout: warp's rows of BK elements (R = BK * size = 32 / 64 / 128 bytes) with chunk c of
row r at c ^ ((r // (8 // CH)) % CH) are the K-major 32B / 64B / 128B swizzle layouts of the ISA
(wgmma_desc): descriptor SBO = 8R, stage, slice and warpgroup offsets multiples of 8R, the dynamic
shared array aligned to 1024 bytes, so every tile starts on its swizzle repeat (base offset 0). A k step
adds 32 bytes (2 in the descriptor). The descriptors are uint64 arithmetic from ``shared_addr`` of the
array, once per k tile (stage) plus compile-time constants per instruction.

Not fed by this loop (ValueError, so a plugin can decline): an m-contiguous A (``a_km``: a 1x1 NCHW
read; wgmma's MN-major operand is fp16/bf16-only and needs other strides), tf32x3 (split operands live
in registers), a TF32 rounding other than "trunc" (wgmma truncates the fp32 bits it reads; a rounding
would need a pass over shared memory).
"""
from __future__ import annotations

import numpy as np

from convlab.kernels.arch import wgmma
from convlab.kernels.arch.mma import cp_async_wait
from convlab.kernels.source import Writer
from convlab.kernels.tensor_core.config import ITYPES, TcConfig
from convlab.kernels.tensor_core.epilogue import Store, staged_epilogue
from convlab.kernels.tensor_core.copy import ALoader, block_tiles, copy_setup, k_loop, shared_arrays
from convlab.kernels.arch.wgmma_desc import desc_hi


def check(cfg: TcConfig, itype: str, loader: ALoader, tf32_round: str | None = None) -> None:
    """Raise ValueError unless this loop can run ``loader`` for ``itype`` (see the module doc)."""
    cfg.validate(itype)
    if loader.a_km:
        raise ValueError("wgmma configs read A K-major: an m-contiguous A (a 1x1 NCHW read) needs mma.sync")
    if itype == "tf32" and (tf32_round or "trunc") != "trunc":
        raise ValueError(f"wgmma truncates TF32 operands in shared memory: tf32_round {tf32_round!r} needs mma.sync")


def namespace(cfg: TcConfig, itype: str) -> dict:
    """The names a :func:`wgmma_source` kernel uses beyond tc_launch's (its waits replace the warp loop's)."""
    # ZEROS: WN / 2 float32 zeros as a global (a tuple literal that long trips Numba's bytecode peepholes)
    return {"U64": np.uint64, "ZEROS": (np.float32(0),) * (cfg.WN // 2),
            "DHI": np.uint64(desc_hi(cfg.BK * ITYPES[itype][1])),
            "mma": wgmma.wgmma_async(itype, cfg.WN), "wgmma_fence": wgmma.wgmma_fence,
            "wgmma_commit": wgmma.wgmma_commit, "wgmma_wait": wgmma.wgmma_wait(0 if cfg.MMA == "wgmma0" else 1),
            "wgmma_wait_all": wgmma.wgmma_wait(0), "fence_proxy_async": wgmma.fence_proxy_async,
            "shared_addr": wgmma.shared_addr, "wait": cp_async_wait(cfg.depth - 1), "align": wgmma.ALIGN}


def wgmma_source(cfg: TcConfig, itype: str, loader: ALoader, store: Store, name: str,
                 tf32_round: str | None = None) -> str:
    """Source of the kernel ``name(<loader.params><store.params>, vec)`` (as warp.pipeline_source) on wgmma."""
    check(cfg, itype, loader, tf32_round)
    BM, BN, BK, WM, WN = cfg[:5]
    size = ITYPES[itype][1]
    R = BK * size  # bytes per shared row (the swizzle width)
    steps, slices = R // 32, WM // 64
    w = Writer(f"def {name}({loader.params}{store.params}, vec):")
    w.indent()
    shared_arrays(w, store)
    w("tid = U(cuda.threadIdx.x)")
    w("lane = U(tid % 32)")
    w("warp = U(tid // 32)")
    w("wg = U(warp // 4)  # this warpgroup, its tile, and this warp's first row in it (the epilogue's)")
    w(f"wgm0 = U(U(wg // {BN // WN}) * {WM})")
    w(f"wn0 = U(U(wg % {BN // WN}) * {WN})")
    w("wm0 = U(wgm0 + U(U(warp % 4) * 16))")
    k_first = block_tiles(w, cfg, loader)
    cp = copy_setup(w, cfg, itype, loader)
    # descriptors of stage 0 for this warpgroup's rows of A and of Bt (B's stages after A's: B0 elements)
    w("sa = shared_addr(As, 0)")
    w(f"da0 = U64(U64(U(U(U(sa + U(wgm0 * {R})) >> 4) & U(0x3FFF))) | DHI)")
    w(f"db0 = U64(U64(U(U(U(sa + U(U(wn0 * {R}) + {cp.B0 * size})) >> 4) & U(0x3FFF))) | DHI)")
    # the accumulators: one tuple per m64 slice (a{s}, wgmma's d0..d(WN/2-1)) through the loop, scalars
    # c{s}_{j}_{r} = a{s}[4j + r] for the epilogue only: with 128 scalars through the loop Numba's SSA and
    # liveness passes made the 128x256 kernel compile in 40 s instead of 12 (a CPU; same ptxas registers)
    every = "(" + ", ".join(f"a{s}" for s in range(slices)) + ",)" if slices > 1 else "a0"
    for s in range(slices):
        w(f"a{s} = ZEROS")
    with k_loop(w, cfg, loader, cp, k_first,
                landed=["fence_proxy_async()  # this thread's landed copies, visible to the async proxy (wgmma)"]):
        w(f"{every} = wgmma_fence({every})")
        w(f"da = U64(da0 + U64(U(cs * {BM * R // 16})))")
        w(f"db = U64(db0 + U64(U(cs * {BN * R // 16})))")
        for kk in range(steps):
            for s in range(slices):
                w(f"a{s} = mma(U64(da + U64({(s * 64 * R + 32 * kk) // 16})), U64(db + U64({2 * kk})), 1, a{s})")
        w("wgmma_commit()")
        w(f"{every} = wgmma_wait({every})")
    w(f"{every} = wgmma_wait_all({every})")
    for s in range(slices):
        w(", ".join(f"c{s}_{j}_{r}" for j in range(WN // 8) for r in range(4)) + f", = a{s}")
    staged_epilogue(w, cfg, itype, store, loader.batched)
    return w.source
