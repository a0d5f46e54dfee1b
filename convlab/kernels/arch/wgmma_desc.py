"""Matrix descriptors of ``wgmma.mma_async`` and the swizzled K-major layout they describe: host-side
integer arithmetic shared by the simulator's stand-ins, the probes and the kernel generator.

The 64-bit descriptor (PTX ISA 9.7.15.5.1.2.2 "Matrix Descriptor Format"; CUTLASS
``cute/arch/mma_sm90_desc.hpp``, ``GmmaDescriptor``):

    bits  0-13  start address: (shared-window byte address & 0x3FFFF) >> 4
    bits 16-29  leading dimension byte offset >> 4: unused by K-major swizzled layouts ("assumed 1";
                CUTLASS writes 1), the offset between 16-byte core-matrix columns without swizzle
    bits 32-45  stride dimension byte offset (SBO) >> 4: K-major, from one group of 8 rows to the next
    bits 49-51  base offset: 0 when the swizzle pattern starts on its repeat boundary (1024 / 512 / 256
                bytes for 128B / 64B / 32B); every tile here does, so it is always 0
    bits 62-63  swizzle mode: 0 none, 1 128-byte, 2 64-byte, 3 32-byte

Addressing (ISA 9.7.15.5.1.2 "Shared Memory Matrix Layout", the canonical K-major layouts
``Swizzle<B,4,3> o ((8,m),(T,2k)):((R/16*T,SBO),(1,T))``, T elements per 16 bytes): byte j (< 32, the
k extent of one instruction for f16/bf16 k16 and tf32 k8) of row i (M or N) of an operand whose
descriptor starts at ``start`` is read at

    a = start + (i // 8) * SBO + (i % 8) * R + j;    a ^= ((a >> 7) & (2**B - 1)) << 4

with R = 128, 64, 32 row bytes and B = 3, 2, 1 for the 128B, 64B, 32B modes: the XOR acts on the
shared-window address itself (CuTe ``Swizzle<B,4,3>`` on byte addresses), so a k step inside a row is
``start + 32 * kk``. With packed rows (SBO = 8R) and a tile base that is a multiple of 8R bytes, 16-byte
chunk c of row i sits at chunk ``c ^ ((i // (8 // CH)) % CH)`` (CH = R / 16): exactly the layout
:mod:`convlab.kernels.tensor_core.warp` writes with ``cp.async`` (:func:`pipeline_chunk`; the tests check
the two against each other). No swizzle (mode 0, K-major "interleave"): 8 x 16-byte core matrices, row
i % 8 at 16 (i % 8), rows i // 8 SBO apart, 16-byte k chunks LBO apart.
"""
from __future__ import annotations

import numpy as np

#: row bytes of a swizzled K-major tile -> the descriptor's swizzle mode (bits 62-63)
MODE = {128: 1, 64: 2, 32: 3}
#: swizzle mode -> (row bytes R, XOR bits B); mode 0 (no swizzle): 16-byte core-matrix rows
LAYOUT = {1: (128, 3), 2: (64, 2), 3: (32, 1), 0: (16, 0)}


def encode(x: int) -> int:
    """matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4 (ISA 9.7.15.5.1.2.2)."""
    return (int(x) & 0x3FFFF) >> 4


def desc_hi(row_bytes: int) -> int:
    """The descriptor without its start address: a K-major tile of packed ``row_bytes``-byte rows
    (SBO = 8 rows), swizzled to its row width, LBO 1 (unused), base offset 0."""
    if row_bytes not in MODE:
        raise ValueError(f"swizzled K-major rows are 32, 64 or 128 bytes, got {row_bytes}")
    return (MODE[row_bytes] << 62) | (encode(8 * row_bytes) << 32) | (1 << 16)


def descriptor(addr: int, row_bytes: int) -> int:
    """The descriptor of a K-major tile of packed ``row_bytes``-byte rows starting at shared byte
    address ``addr`` (16-byte aligned)."""
    if int(addr) % 16:
        raise ValueError(f"a wgmma operand starts on 16 bytes, got address {addr}")
    return desc_hi(row_bytes) | encode(addr)


def decode(desc: int) -> dict[str, int]:
    """The fields of a descriptor, byte offsets in bytes."""
    d = int(desc)
    return {"start": (d & 0x3FFF) << 4, "lbo": ((d >> 16) & 0x3FFF) << 4, "sbo": ((d >> 32) & 0x3FFF) << 4,
            "base_offset": (d >> 49) & 7, "mode": (d >> 62) & 3}


def addresses(desc: int, rows: np.ndarray, nbytes: int = 32) -> np.ndarray:
    """Shared byte addresses [len(rows), nbytes] of bytes 0..nbytes-1 of the given rows of the K-major
    operand that ``desc`` describes (the formula in the module doc)."""
    f = decode(desc)
    if f["base_offset"]:
        raise ValueError("descriptor base offset != 0: the tiles here start on their swizzle repeat")
    rows = np.asarray(rows, np.int64)[:, None]
    j = np.arange(nbytes, dtype=np.int64)[None, :]
    row_bytes, bits = LAYOUT[f["mode"]]
    if f["mode"] == 0:
        return f["start"] + (rows // 8) * f["sbo"] + (rows % 8) * 16 + (j // 16) * f["lbo"] + j % 16
    a = f["start"] + (rows // 8) * f["sbo"] + (rows % 8) * row_bytes + j
    return a ^ (((a >> 7) & ((1 << bits) - 1)) << 4)


def mn_desc_hi(atom_bytes: int, lbo: int) -> int:
    """The descriptor without its start address of an MN-major operand (f16 / bf16: wgmma's imm-trans):
    swizzle atoms of ``atom_bytes``-byte rows (32 / 64 / 128: 16 / 32 / 64 MN elements), 8 k rows to an
    atom (SBO = 8 rows), atoms along MN ``lbo`` bytes apart (CUTLASS ``make_gmma_desc<Major::MN>``:
    ((W, n), (8, k)) : ((1, LBO), (W, SBO)) in 16-byte units, W = atom_bytes / 16)."""
    if atom_bytes not in MODE or lbo % 16:
        raise ValueError(f"MN-major atoms are 32, 64 or 128-byte rows, LBO a multiple of 16, got {atom_bytes}, {lbo}")
    return (MODE[atom_bytes] << 62) | (encode(8 * atom_bytes) << 32) | ((lbo >> 4) << 16)


def mn_addresses(desc: int, mn: np.ndarray, k: int = 16, size: int = 2) -> np.ndarray:
    """Shared byte addresses [len(mn), k * size] of elements 0..k-1 (``size`` bytes each, in k order) of
    MN indices ``mn`` of the MN-major operand ``desc`` describes: element (mn, kk) at start + (mn // E) *
    LBO + (mn % E) * size + (kk % 8) * R + (kk // 8) * SBO (E = R / size elements in an atom row of R
    bytes), then the swizzle's XOR on the address, as K-major's."""
    f = decode(desc)
    row_bytes, bits = LAYOUT[f["mode"]]
    if f["mode"] == 0 or f["base_offset"]:
        raise ValueError("MN-major operands here are swizzled (32B / 64B / 128B) and start on their repeat")
    per = row_bytes // size
    mn = np.asarray(mn, np.int64)[:, None, None]
    kk = np.arange(k, dtype=np.int64)[None, :, None]
    a = f["start"] + (mn // per) * f["lbo"] + (mn % per) * size + (kk % 8) * row_bytes + (kk // 8) * f["sbo"]
    a = (a + np.arange(size, dtype=np.int64)[None, None, :]).reshape(len(mn), k * size)
    return a ^ (((a >> 7) & ((1 << bits) - 1)) << 4)


def pipeline_chunk(row: int, chunk: int, chunks: int) -> int:
    """Where the warp pipeline (convlab.kernels.tensor_core.warp) stores 16-byte chunk ``chunk`` of tile
    row ``row`` (rows of ``chunks`` chunks): the chunk index within the row."""
    return chunk ^ ((row // (8 // chunks)) % chunks)
