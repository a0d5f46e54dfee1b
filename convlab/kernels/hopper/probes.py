"""One-warp probes of the Hopper intrinsics, against numpy: the first thing a GPU run checks (the
simulator runs them on the stand-ins; tests/kernels/test_sm90.py, tools/hopper_check.py).

    tile_roundtrip(ten, box, swizzle, coords) -> (box as read back, the tensor a store wrote)
        ten: a C-contiguous array (dims innermost last, as numpy holds them); the tiled map of its
        reversed shape, one copy at ``coords`` (innermost first) into shared memory, the shared bytes
        read through the swizzle, then a tensor store of the box into a zeroed copy
    im2col_load(ten, lower, upper, coords, offsets, pixels, channels, traversal) -> [pixels, channels]
        one im2col copy of an N[D]HWC array (corners, coordinates, offsets innermost first)
    mn_major_mma(A, B, atom) -> D [64, n] float32
        one warpgroup's m64n{n}k16 wgmma of fp16 A [64, 16] and B [16, n], both MN-major in shared memory
        (wgmma_desc.mn_addresses: A in one 128-byte atom column, B in ``atom``-byte ones), imm-trans 1

Each launch: one warp, the copy's mbarrier at the end of 8 KiB of dynamic shared memory, the map fenced
(tensormap_acquire) by the issuing thread.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np
from numba import types

from convlab import runtime
from convlab.kernels.arch import sm90, tensormap, wgmma, wgmma_desc
from convlab.runtime import cuda

SMEM = 8192
BAR = SMEM - 64
U, I = np.uint32, np.int32
#: a probe's first lines: the shared buffer, its mbarrier at BAR, thread 0 sets it up and acquires map 0
_PROLOGUE = f"""    sm = cuda.shared.array(0, u8)
    base = wgmma.shared_addr(sm, 0)
    bar = U(base + {BAR})
    if cuda.threadIdx.x == 0:
        sm90.mbar_init(bar, 1)
        sm90.fence_mbarrier_init()
        sm90.tensormap_acquire(maps, 0)
"""


@functools.cache
def _tile_probe(rank: int, nbytes: int):
    load, store = sm90.tma_load(rank), sm90.tma_store(rank)
    coords = ", ".join(f"c{i}" for i in range(rank))
    src = f'''
def probe(maps, out, {coords}):
{_PROLOGUE}        sm90.tensormap_acquire(maps, 1)
        sm90.mbar_arrive_tx(bar, {nbytes})
        load(maps, 0, base, bar, {coords})
        sm90.mbar_wait(bar, 0)
        for i in range({nbytes}):
            out[i] = sm[i]
        store(maps, 1, base, {coords})
        sm90.bulk_commit()
        wait0()
'''
    namespace = {"cuda": cuda, "u8": types.uint8, "wgmma": wgmma, "sm90": sm90, "U": U, "load": load,
                 "store": store, "wait0": sm90.bulk_wait(0)}
    exec(compile(src, f"<convlab.kernels.hopper.probes tile {rank}d>", "exec"), namespace)
    return runtime.jit(namespace["probe"])


def tile_roundtrip(ten: np.ndarray, box: tuple[int, ...], swizzle: int, coords: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The module doc's tile probe: (box [reversed box shape], the stored tensor)."""
    ten = np.ascontiguousarray(ten)
    dims = ten.shape[::-1]
    strides = tuple(s for s in ten.strides[::-1][1:])
    src, dst = runtime.to_device(ten.reshape(-1)), runtime.to_device(np.zeros(ten.size, ten.dtype))
    rec = tensormap.TiledMap(ten.dtype.name, dims, strides, box, swizzle, runtime.device_pointer(src))
    back = tensormap.TiledMap(ten.dtype.name, dims, strides, box, swizzle, runtime.device_pointer(dst))
    maps = runtime.to_device(np.concatenate([tensormap.encode(rec, src), tensormap.encode(back, dst)]))
    out = runtime.to_device(np.zeros(rec.box_bytes, np.uint8))
    _tile_probe(len(dims), rec.box_bytes)[1, 32, 0, SMEM](maps, out, *(I(c) for c in coords))
    raw = runtime.to_host(out)[tensormap.swizzled(np.arange(rec.box_bytes), swizzle)]
    return raw.view(ten.dtype).reshape(box[::-1]), runtime.to_host(dst).reshape(ten.shape)


@functools.cache
def _im2col_probe(rank: int, nbytes: int):
    load = sm90.tma_load_im2col(rank)
    coords = ", ".join(f"c{i}" for i in range(rank))
    offs = ", ".join(f"o{i}" for i in range(rank - 2))
    src = f'''
def probe(maps, out, {coords}, {offs}):
{_PROLOGUE}        sm90.mbar_arrive_tx(bar, {nbytes})
        load(maps, 0, base, bar, {coords}, {offs})
        sm90.mbar_wait(bar, 0)
        for i in range({nbytes}):
            out[i] = sm[i]
'''
    namespace = {"cuda": cuda, "u8": types.uint8, "wgmma": wgmma, "sm90": sm90, "U": U, "load": load}
    exec(compile(src, f"<convlab.kernels.hopper.probes im2col {rank}d>", "exec"), namespace)
    return runtime.jit(namespace["probe"])


def im2col_load(ten: np.ndarray, lower: tuple, upper: tuple, coords: tuple, offsets: tuple, pixels: int,
                channels: int, traversal: tuple | None = None) -> Any:
    """The module doc's im2col probe: [pixels, channels] as the copy engine wrote them (unswizzled)."""
    ten = np.ascontiguousarray(ten)
    dims = ten.shape[::-1]
    strides = tuple(s for s in ten.strides[::-1][1:])
    size = ten.dtype.itemsize
    swizzle = channels * size if channels * size in (32, 64, 128) else 0
    src = runtime.to_device(ten.reshape(-1))
    rec = tensormap.Im2colMap(ten.dtype.name, dims, strides, tuple(lower), tuple(upper), channels, pixels,
                              tuple(traversal or (1,) * len(dims)), swizzle, runtime.device_pointer(src))
    maps = runtime.to_device(tensormap.encode(rec, src))
    out = runtime.to_device(np.zeros(rec.box_bytes, np.uint8))
    _im2col_probe(len(dims), rec.box_bytes)[1, 32, 0, SMEM](maps, out, *(I(c) for c in coords),
                                                          *(U(o) for o in offsets))
    raw = runtime.to_host(out)[tensormap.swizzled(np.arange(rec.box_bytes), swizzle)]
    return raw.view(ten.dtype).reshape(pixels, channels)


@functools.cache
def _mn_probe(n: int):
    mma, wait, zeros = wgmma.wgmma_async("f16", n, 1, 1), wgmma.wgmma_wait(0), (np.float32(0),) * (n // 2)
    writes = "\n".join(f"    out[16 * w + g + {8 * h}, {8 * j} + 2 * q + {u}] = acc[{4 * j + 2 * h + u}]"
                       for j in range(n // 8) for h in range(2) for u in range(2))
    src = f'''
def probe(src, out, da, db):
    sm = cuda.shared.array(0, u8, alignment=align)
    t = cuda.threadIdx.x
    base = wgmma.shared_addr(sm, 0)
    i = t
    while i < src.size:
        sm[i] = src[i]
        i += 128
    wgmma.fence_proxy_async()
    cuda.syncthreads()
    acc = wgmma.wgmma_fence(zeros)
    acc = mma(U64(da | U64((base >> 4) & 0x3FFF)), U64(db + U64((base >> 4) & 0x3FFF)), 1, acc)
    wgmma.wgmma_commit()
    acc = wait(acc)
    w, g, q = t // 32, (t % 32) // 4, t % 4
{writes}
'''
    namespace = {"cuda": cuda, "u8": types.uint8, "wgmma": wgmma, "mma": mma, "wait": wait, "zeros": zeros,
                 "U64": np.uint64, "align": None if runtime.SIMULATOR else 1024}
    exec(compile(src, f"<convlab.kernels.hopper.probes mn {n}>", "exec"), namespace)
    return runtime.jit(namespace["probe"])


def mn_major_mma(A: np.ndarray, B: np.ndarray, atom: int) -> np.ndarray:
    """The module doc's MN-major probe: D = A @ B computed by one wgmma (fp16 A [64, 16], B [16, n])."""
    n = B.shape[1]
    b0 = 64 * 16 * 2
    da = wgmma_desc.mn_desc_hi(128, 2048) | wgmma_desc.encode(0)
    db = wgmma_desc.mn_desc_hi(atom, 16 * atom) | wgmma_desc.encode(b0)
    buf = np.zeros(b0 + n * 16 * 2, np.uint8)
    for desc, mat, count in ((da, A, 64), (db, B.T, n)):
        buf[wgmma_desc.mn_addresses(desc, np.arange(count))] = \
            np.ascontiguousarray(mat, np.float16).view(np.uint8).reshape(count, -1)
    out = runtime.to_device(np.full((64, n), np.nan, np.float32))
    _mn_probe(n)[1, 128, 0, buf.size](runtime.to_device(buf), out, np.uint64(da), np.uint64(db))
    return runtime.to_host(out)
