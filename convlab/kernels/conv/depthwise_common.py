"""Shared pieces of the depthwise kernels (``_depthwise_conv``, ``_depthwise_wgrad``): the per-axis phase
geometry, the multi-plane halo loader, shared-memory sizing and the source-generation helpers.

Each spatial axis is a 1-D correlation out[t*OSTEP + o0] = sum_{taps} in[t*ISTEP + off] * w[tap]:

    forward  one phase:          o0 = 0,         ISTEP = stride, OSTEP = 1,  taps (r, r*dil - pad), r < R
    dgrad    phases f < stride:  o0 = f - pad,   ISTEP = 1,      OSTEP = stride,
             taps (r, (f - r*dil) / stride) for the r with (f - r*dil) % stride == 0

so dgrad of a strided convolution is ``stride_h * stride_w`` stride-1 correlations over the outputs of
one residue class, each with only its valid taps (no zero is multiplied).

A block covers PL planes (consecutive output channels of one image) of one TH x TW output tile; its
threads are PL groups of TP = TW * TH / VH threads, thread (l, ty, tx) = (tid // TP, ...). Its shared
halo is PL consecutive HALO_H x HALO_W tiles, plane l at l * HALO_H * HALO_W. With small planes (7x7,
14x14) a tile covers the whole plane and PL > 1 fills the block with work (few large blocks instead of
many tiny ones). Every size of the problem is a compile-time constant of a kernel (a cached factory per
layer shape and config): index math divides by literals and a launch passes only the arrays.

fp16 / bf16 (bf16 as its uint16 bits): the operands stay half in memory; every global read widens to
float32 (``convlab.kernels.data.convert.to_f32``), the shared tiles, filters, accumulators and arithmetic
are float32 (:func:`compute_itemsize`), and the store rounds to the output's type. float32 and float64
kernels compute in their own type.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from numba import int32, int64, uint32

from convlab import runtime
from convlab.kernels.arch.intrinsics import u32
from convlab.kernels.data.convert import half_kind, to_f32
from convlab.kernels.epilogue import compute_dtype
from convlab.kernels.source import Writer, compile_source

MAX_SHARED = 48 * 1024  # bytes of static shared memory per block
REDUCE_BYTES = 16 * 1024  # wgrad's reduction buffer


@dataclass(frozen=True)
class Phase:
    """Outputs t*OSTEP + o0 for t >= t_lo; ``taps`` = ((filter index, input offset), ...)."""

    o0: int
    t_lo: int
    taps: tuple[tuple[int, int], ...]

    @property
    def min_off(self) -> int:
        return min((off for _, off in self.taps), default=0)

    @property
    def span(self) -> int:
        return max((off for _, off in self.taps), default=0) - self.min_off + 1


@dataclass(frozen=True)
class Axis:
    """One spatial axis: its phases and steps (see the module docstring)."""

    istep: int
    ostep: int
    phases: tuple[Phase, ...]

    def halo(self, tile: int) -> int:
        """Input length a tile of ``tile`` outputs reads (the largest over the phases)."""
        return max((tile - 1) * self.istep + ph.span for ph in self.phases)

    def tiles(self, tile: int, out_len: int) -> int:
        """Tiles along the axis, the most any phase needs for an output of ``out_len``."""
        return max(1, math.ceil(self.extent(out_len) / tile))

    def extent(self, out_len: int) -> int:
        """Outputs of the largest phase along the axis."""
        return max(-((ph.o0 - out_len) // self.ostep) - ph.t_lo for ph in self.phases)


@functools.cache
def axis(dgrad: bool, k: int, stride: int, pad: int, dil: int) -> Axis:
    """The Axis of a filter of ``k`` taps for forward/wgrad (``dgrad`` False) or backward-data."""
    if not dgrad:
        return Axis(stride, 1, (Phase(0, 0, tuple((r, r * dil - pad) for r in range(k))),))
    phases = tuple(Phase(f - pad, -((f - pad) // stride),
                         tuple((r, (f - r * dil) // stride) for r in range(k) if (f - r * dil) % stride == 0))
                   for f in range(stride))
    return Axis(1, stride, phases)


def compute_itemsize(dtype: str) -> int:
    """Bytes of one element of the kernels' shared tiles and of wgrad's split partials: float32 for fp16 /
    bf16 (the compute type), the dtype's own otherwise."""
    return compute_dtype(dtype).itemsize


def reduce_group(taps: int, threads: int, itemsize: int) -> int:
    """Filter taps that wgrad's block reduction sums at once (a taps x threads buffer of <= 16 KiB)."""
    return max(1, min(taps, REDUCE_BYTES // (threads * itemsize)))


def shared_bytes(ah: Axis, aw: Axis, th: int, tw: int, vh: int, pl: int, taps: int, itemsize: int,
                 wgrad: bool) -> int:
    """Static shared memory of a kernel: PL halo tiles and filters (conv) or PL halo tiles and the
    reduction buffer (wgrad), of ``itemsize`` bytes an element (:func:`compute_itemsize`)."""
    threads = tw * (th // vh) * pl
    extra = reduce_group(taps, threads, itemsize) * threads if wgrad else pl * taps
    return (pl * ah.halo(th) * aw.halo(tw) + extra) * itemsize


def reads(ah: Axis, aw: Axis, fh: int, fw: int, vh: int, hw: int):
    """{literal tile offset: [(v, r, s), ...]} of phase (fh, fw) for one thread (rows v < vh)."""
    ph, pw = ah.phases[fh], aw.phases[fw]
    out: dict[int, list[tuple[int, int, int]]] = {}
    for v in range(vh):
        for r, offr in ph.taps:
            for s, offs in pw.taps:
                at = (v * ah.istep + offr - ph.min_off) * hw + offs - pw.min_off
                out.setdefault(at, []).append((v, r, s))
    return out


def tile_products(w: Writer, uses_at: dict[int, list[tuple[int, int, int]]], product) -> None:
    """Write each tile value a thread uses once (``x = tile[base + literal]``, :func:`reads`'s offsets),
    then ``product(v, r, s)``, the line that accumulates it, for each of its uses."""
    for at, uses in sorted(uses_at.items()):
        w(f"x = tile[base + u32({at})]")
        for v, r, s in uses:
            w(product(v, r, s))


def device(w: Writer, name: str, extra: dict):
    """Compile the generated source of ``w`` defining ``name`` into an inlined device function."""
    namespace = compile_source(w.source, f"<depthwise {name}>",
                               {"u32": u32, "i64": int64, **extra})
    return runtime.jit(device=True, forceinline=True)(namespace[name])


def entry_kernel(body, fused: bool):
    """The kernel of a depthwise ``body(a, w, bias, out, ep)``: ``kernel(a, w, bias, out)`` (``ep`` is out,
    which the plain store ignores) or, ``fused``, ``kernel(a, w, bias, out, r, scale, shift)`` (the
    epilogue's residual, scale and shift as ``ep``)."""
    if not fused:
        @runtime.jit
        def kernel(a, wt, bias, out):
            body(a, wt, bias, out, out)
    else:
        @runtime.jit
        def kernel(a, wt, bias, out, r, scale, shift):
            body(a, wt, bias, out, (r, scale, shift))
    return kernel


def halving_tree(w: Writer, half: int, who: str, adds: list[tuple[str, str]], prelude: tuple[str, ...] = ()) -> None:
    """The wgrad kernels' fixed-pairing tree in shared memory ``red``: for h = ``half``, half / 2, ..., 1 the
    threads whose ``who`` (their index along the reduced axis) is below h run ``prelude`` then
    red[dst] += red[src] for each (dst, src) of ``adds`` (expressions in h), a barrier after each level."""
    w(f"h = u32({half})")
    with w.block("while h > u32(0):"):
        with w.block(f"if {who} < h:"):
            for line in prelude:
                w(line)
            for dst, src in adds:
                w(f"red[{dst}] += red[{src}]")
        w("cuda.syncthreads()")
        w("h >>= u32(1)")


def names(prefix: str, count: int) -> str:
    return "".join(f"{prefix}{i}, " for i in range(count))


@functools.cache
def halo_loader(dtype: str, halo_h: int, halo_w: int, threads: int, planes: int, in_h: int, in_w: int,
                n_ch: int, div: int, mul: int, in_d: int = 0):
    """``load(a, nbase, c0, j, org_h, org_w, tile, tid, iz)``: for planes l < PL with c = c0 + l < n_ch,
    tile[l*HALO + i*halo_w + jj] = a[(nbase + (c // div) * mul + j) * in_h*in_w + ih*in_w + iw] with
    (ih, iw) = (org_h + i, org_w + jj), 0 outside the plane (the padding) or for c >= n_ch; consecutive
    threads take consecutive elements (coalesced along rows, and across planes: NCHW planes abut).
    ``in_d`` > 0 (3D): the plane at depth iz of each of those volumes of ``in_d`` planes (iz unused in
    2D). ``a`` holds ``dtype`` (bfloat16: uint16 bits); ``tile`` its compute type, each value widened."""
    HALO, HW, T, TOTAL = (np.uint32(v) for v in (halo_h * halo_w, halo_w, threads, planes * halo_h * halo_w))
    IN_H, IN_W, IN_HW, NCH = (np.uint32(v) for v in (in_h, in_w, in_h * in_w, n_ch))
    DIV, MUL, ONE = np.uint32(div), np.uint32(mul), planes == 1
    DEEP, IN_D = in_d > 0, np.uint32(in_d)
    zero, read, WIDEN = compute_dtype(dtype).type(0), to_f32(half_kind(dtype)), bool(half_kind(dtype))

    @runtime.jit(device=True, forceinline=True)
    def load(a, nbase, c0, j, org_h, org_w, tile, tid, iz):
        e = tid
        while e < TOTAL:  # every product and sum cast back to 32 bits (Numba widens them to 64)
            lp = uint32(0) if ONE else uint32(e // HALO)
            rem = uint32(e - uint32(lp * HALO))
            i = uint32(rem // HW)
            ih = int32(org_h + int32(i))
            iw = int32(org_w + int32(rem - uint32(i * HW)))
            c = uint32(c0 + lp)
            val = zero
            if c < NCH and uint32(ih) < IN_H and uint32(iw) < IN_W:
                plane = uint32(uint32(nbase + uint32(uint32(c // DIV) * MUL)) + j)
                if DEEP:
                    plane = uint32(uint32(plane * IN_D) + iz)
                at = int64(uint32(uint32(plane * IN_HW) + uint32(uint32(ih) * IN_W) + uint32(iw)))
                val = read(a[at]) if WIDEN else a[at]  # float32 / float64: read as is, no device call
            tile[e] = val
            e = uint32(e + T)

    return load
