"""Tensor maps of the Tensor Memory Accelerator (Hopper's copy engine) as plain records: the parameters of
``cuTensorMapEncodeTiled`` / ``cuTensorMapEncodeIm2col``, every driver rule as a reason, the boxes a
copy moves (the reference that the simulator's stand-ins and the tests read), and the 128-byte encoding.

    TiledMap(dtype, dims, strides, box, swizzle, address)
    Im2colMap(dtype, dims, strides, lower, upper, channels, pixels, traversal, swizzle, address)
    reason(m) -> str              '' when the driver accepts the record, else the first rule it breaks
    tiled_box(m, coords) / im2col_box(m, coords, offsets) -> (flat element index, in bounds) arrays of
                                  the box in shared-memory order (OOB elements: in bounds False, zeros)
    swizzled(byte offsets, swizzle) the shared byte each box byte lands on (CuTe Swizzle<B,4,3>)
    encode(m, tensor) -> uint64[16]  the driver's map on a GPU; on the simulator a handle the stand-ins
                                  look the record and ``tensor`` up by; zeros when compiling only

Orders are the driver's, innermost first: ``dims`` (C, W, H, D, N) of an NDHWC tensor (C, W, N for NWC),
``strides`` the byte strides of dims 1.. (dim 0 is dense), ``lower`` / ``upper`` the corners of the
im2col box along W, H, D. The rules (CUDA driver API, "Tensor Map Object Management"): rank 1..5 (im2col
3..5), dims 1..2**32, strides multiples of 16 below 2**40, the address 16-byte aligned, box sizes 1..256
with the inner one a multiple of 16 bytes, channels per pixel <= 256 and pixels per column <= 1024
(convlab asks both in whole 16 bytes of channels), traversal strides 1..8, the corners within
[-2**15, 2**15) / [-2**7, 2**7) / [-2**4, 2**4) for 1 / 2 / 3 spatial dimensions (cuTensorMapEncodeIm2col;
CUTLASS's ``can_implement`` checks the same), a swizzled box's inner bytes no more than the swizzle
span (convlab asks them equal: its shared tiles are the wgmma layouts of wgmma_desc).

The im2col box (PTX ISA "Tensor im2col mode"; checked against Triton's ``13-tma-im2col`` tutorial's
worked examples): along each spatial dimension the box holds the positions ``lower + j * traversal``
that lie in ``[lower, dim + upper)``; a copy's coordinates name one such position (and a channel, an
image) and it walks ``pixels`` consecutive positions, the innermost spatial dimension fastest, from
one image into the next; each position reads ``channels`` channels of the pixel at position +
``offsets`` (the filter tap), zeros where that pixel or channel lies outside the tensor.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from convlab import runtime

#: numpy dtype name -> CUtensorMapDataType (bfloat16 travels as its uint16 bits)
DATA_TYPE = {"uint8": 0, "uint16": 1, "uint32": 2, "int32": 3, "float16": 6, "float32": 7, "float64": 8,
             "bfloat16": 9}
#: swizzle span in bytes -> CUtensorMapSwizzle
SWIZZLE = {0: 0, 32: 1, 64: 2, 128: 3}
#: spatial dimensions -> the im2col corner range [-limit, limit) and the largest filter offset
CORNER_LIMIT = {1: 2**15, 2: 2**7, 3: 2**4}
OFFSET_LIMIT = {1: 2**16 - 1, 2: 2**8 - 1, 3: 2**5 - 1}
MAP_WORDS = 16  # a map is 128 bytes: 16 uint64


@dataclass(frozen=True)
class _Map:
    """The fields both kinds of map start with (``dtype``, ``dims``, the byte ``strides`` of dims 1..: module
    docstring) and the element size of ``dtype``."""

    dtype: str
    dims: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class TiledMap(_Map):
    """cuTensorMapEncodeTiled's parameters (element strides 1, no interleave, L2 promotion 128 B, zero fill)."""

    box: tuple[int, ...]
    swizzle: int = 0
    address: int = 0

    @property
    def box_bytes(self) -> int:
        """Bytes one copy moves (the mbarrier's transaction count), out-of-bounds fill included."""
        return math.prod(self.box) * self.itemsize


@dataclass(frozen=True)
class Im2colMap(_Map):
    """cuTensorMapEncodeIm2col's parameters (no interleave, L2 promotion 128 B, zero fill)."""

    lower: tuple[int, ...]
    upper: tuple[int, ...]
    channels: int
    pixels: int
    traversal: tuple[int, ...]
    swizzle: int = 0
    address: int = 0

    @property
    def box_bytes(self) -> int:
        return self.channels * self.pixels * self.itemsize

    def positions(self, axis: int) -> int:
        """Box positions along spatial axis ``axis`` (0: W): ceil((dim + upper - lower) / traversal)."""
        span = self.dims[axis + 1] + self.upper[axis] - self.lower[axis]
        return (span - 1) // self.traversal[axis + 1] + 1 if span > 0 else 0


def _common(m: TiledMap | Im2colMap) -> str:
    if m.dtype not in DATA_TYPE:
        return f"the copy engine moves {sorted(DATA_TYPE)}, not {m.dtype}"
    if len(m.strides) != len(m.dims) - 1:
        return f"{len(m.dims)} dims need {len(m.dims) - 1} strides, got {len(m.strides)}"
    if any(not 1 <= d <= 2**32 for d in m.dims):
        return f"tensor map dims {m.dims} must each be in 1..2**32"
    if any(s % 16 or not 0 < s < 2**40 for s in m.strides):
        return f"tensor map strides {m.strides} (bytes) must be multiples of 16 below 2**40"
    if m.address % 16:
        return f"the tensor's address {m.address:#x} is not 16-byte aligned"
    if m.swizzle not in SWIZZLE:
        return f"swizzle {m.swizzle} must be 0, 32, 64 or 128 bytes"
    return ""


def _inner(inner_bytes: int, swizzle: int) -> str:
    if inner_bytes % 16:
        return f"the box's inner dimension is {inner_bytes} bytes, not a multiple of 16"
    if swizzle and inner_bytes != swizzle:
        return f"the box's inner dimension ({inner_bytes} bytes) must fill the {swizzle}-byte swizzle span"
    return ""


def reason(m: TiledMap | Im2colMap) -> str:
    """'' when the driver encodes ``m``, else the first rule it breaks (module doc)."""
    rank = len(m.dims)
    if isinstance(m, TiledMap):
        if not 1 <= rank <= 5:
            return f"a tiled tensor map has rank 1..5, got {rank}"
        if len(m.box) != rank or any(not 1 <= b <= 256 for b in m.box):
            return f"box {m.box} must hold {rank} sizes in 1..256"
        return _common(m) or _inner(m.box[0] * m.itemsize, m.swizzle)
    if not 3 <= rank <= 5:
        return f"an im2col tensor map has rank 3..5 (1 to 3 spatial dimensions), got {rank}"
    spatial = rank - 2
    if len(m.lower) != spatial or len(m.upper) != spatial or len(m.traversal) != rank:
        return f"{spatial} spatial dimensions need {spatial} corners each and {rank} traversal strides"
    limit = CORNER_LIMIT[spatial]
    for name, corner in (("lower", m.lower), ("upper", m.upper)):
        if any(not -limit <= v < limit for v in corner):
            return (f"im2col {name} corner {corner} outside [-{limit}, {limit - 1}] ({spatial} spatial "
                    f"dimensions: the copy engine's corner field)")
    if any(m.positions(a) < 1 for a in range(spatial)):
        return f"the im2col box (corners {m.lower}, {m.upper}) is empty"
    if any(not 1 <= t <= 8 for t in m.traversal):
        return f"traversal strides {m.traversal} must be in 1..8"
    if not 1 <= m.channels <= 256 or not 1 <= m.pixels <= 1024:
        return f"{m.channels} channels per pixel (1..256) and {m.pixels} pixels per column (1..1024)"
    return _common(m) or _inner(m.channels * m.itemsize, m.swizzle)


def swizzled(offsets: np.ndarray, swizzle: int) -> np.ndarray:
    """Byte offsets (from a tile on its swizzle repeat) after the copy engine's swizzle: 16-byte chunk
    bits 4.. XORed with bits 7.. (1, 2, 3 bits for 32, 64, 128 bytes), as wgmma_desc's layouts read them."""
    bits = {0: 0, 32: 1, 64: 2, 128: 3}[swizzle]
    offsets = np.asarray(offsets, np.int64)
    return offsets ^ (((offsets >> 7) & ((1 << bits) - 1)) << 4)


def _flat(m: TiledMap | Im2colMap, index: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(element offset from the address, in bounds) of tensor indices (one array per dim)."""
    ok = np.ones(np.broadcast(*index).shape, bool)
    flat = np.zeros(ok.shape, np.int64)
    for axis, (i, dim) in enumerate(zip(index, m.dims)):
        ok &= (i >= 0) & (i < dim)
        flat = flat + np.asarray(i, np.int64) * (m.strides[axis - 1] // m.itemsize if axis else 1)
    return np.where(ok, flat, 0), ok


def tiled_box(m: TiledMap, coords: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The box at ``coords`` in shared-memory order (box[0] fastest): (element offsets, in bounds)."""
    grids = np.meshgrid(*[np.arange(b) for b in reversed(m.box)], indexing="ij")
    index = [coords[a] + g.reshape(-1) for a, g in zip(range(len(m.box)), reversed(grids))]
    return _flat(m, index)


def im2col_box(m: Im2colMap, coords: tuple[int, ...], offsets: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The im2col box at ``coords`` (C, W, [H, [D]], N) with filter ``offsets`` (W, [H, [D]]), in
    shared-memory order [pixels, channels]: (element offsets, in bounds). ValueError when the
    coordinates name no box position (module doc)."""
    spatial = len(m.dims) - 2
    counts = [m.positions(a) for a in range(spatial)]
    js = []
    for a in range(spatial):
        j, rem = divmod(coords[a + 1] - m.lower[a], m.traversal[a + 1])
        if rem or not 0 <= j < counts[a]:
            raise ValueError(f"im2col coordinate {coords[a + 1]} along spatial axis {a} is not a box position "
                             f"(lower {m.lower[a]}, traversal {m.traversal[a + 1]}, {counts[a]} positions)")
        js.append(j)
    linear = coords[-1]
    for a in reversed(range(spatial)):
        linear = linear * counts[a] + js[a]
    t = linear + np.arange(m.pixels, dtype=np.int64)
    index = [None] * len(m.dims)
    for a in range(spatial):
        t, j = np.divmod(t, counts[a])
        index[a + 1] = (m.lower[a] + j * m.traversal[a + 1] + offsets[a])[:, None]
    index[-1] = t[:, None]
    index[0] = coords[0] + np.arange(m.channels)[None, :]
    flat, ok = _flat(m, index)
    return flat.reshape(-1), ok.reshape(-1)


# --- encoding

_HANDLES: dict[int, tuple[Any, Any]] = {}  # the simulator's maps: handle -> (record, tensor)
_NEXT = [1]
_LOCK = threading.Lock()
SIM_MAGIC = 0x434F4E564C4142  # "CONVLAB": the first word of a simulator map


def sim_lookup(words: np.ndarray) -> tuple[Any, Any]:
    """(record, tensor) of a map the simulator's :func:`encode` wrote (the stand-ins' decoder)."""
    if int(words[0]) != SIM_MAGIC or int(words[1]) not in _HANDLES:
        raise ValueError("not a tensor map that convlab's encode wrote (uninitialised descriptor memory?)")
    return _HANDLES[int(words[1])]


def encode(m: TiledMap | Im2colMap, tensor: Any) -> np.ndarray:
    """The 128-byte map of ``m`` as uint64[16] (module doc); ValueError naming the broken rule."""
    why = reason(m)
    if why:
        raise ValueError(f"tensor map not encodable: {why}")
    words = np.zeros(MAP_WORDS, np.uint64)
    if runtime.SIMULATOR:
        with _LOCK:
            handle = _NEXT[0]
            _NEXT[0] += 1
            _HANDLES[handle] = (m, tensor)
        words[0], words[1] = SIM_MAGIC, handle
        return words
    if runtime.COMPILE_ONLY:
        return words
    return _driver_encode(m)


def driver_args(m: TiledMap | Im2colMap) -> tuple[Any, tuple]:
    """(the cuda.bindings encoder, its arguments) for ``m``: every size as the driver's cuuint32_t /
    cuuint64_t (cuda-bindings 13 converts no plain int to them)."""
    from cuda.bindings import driver as drv

    u32 = lambda xs: [drv.cuuint32_t(int(x)) for x in xs]  # noqa: E731
    u64 = lambda xs: [drv.cuuint64_t(int(x)) for x in xs]  # noqa: E731
    head = (drv.CUtensorMapDataType(DATA_TYPE[m.dtype]), drv.cuuint32_t(len(m.dims)), m.address, u64(m.dims),
            u64(m.strides))
    tail = (drv.CUtensorMapInterleave(0), drv.CUtensorMapSwizzle(SWIZZLE[m.swizzle]),
            drv.CUtensorMapL2promotion(2), drv.CUtensorMapFloatOOBfill(0))
    if isinstance(m, TiledMap):
        return drv.cuTensorMapEncodeTiled, (*head, u32(m.box), u32([1] * len(m.dims)), *tail)
    return drv.cuTensorMapEncodeIm2col, (*head, [int(x) for x in m.lower], [int(x) for x in m.upper],
                                         drv.cuuint32_t(m.channels), drv.cuuint32_t(m.pixels),
                                         u32(m.traversal), *tail)


def _driver_encode(m: TiledMap | Im2colMap) -> np.ndarray:
    encoder, args = driver_args(m)
    err, tmap = encoder(*args)
    if int(err) != 0:
        raise ValueError(f"the driver refused tensor map {m}: {err}")
    return np.array([int(w) for w in tmap.opaque], np.uint64)
