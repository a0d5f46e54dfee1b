"""Kernels of the depthwise plugin: one output-plane tile per block, the input halo tile and the filter in
shared memory, VH output rows per thread in registers; generated per filter geometry.

Each spatial axis is a 1-D correlation out[t*OSTEP + o0] = sum_{taps} in[t*ISTEP + off] * w[tap]:

    forward  one phase:          o0 = 0,         ISTEP = stride, OSTEP = 1,  taps (r, r*dil - pad), r < R
    dgrad    phases f < stride:  o0 = f - pad,   ISTEP = 1,      OSTEP = stride,
             taps (r, (f - r*dil) / stride) for the r with (f - r*dil) % stride == 0

so dgrad of a strided convolution is ``stride_h * stride_w`` stride-1 correlations over the outputs of
one residue class, each with only its valid taps (no zero is multiplied). Filter sizes, strides, padding
and dilation are compile-time constants of a kernel (a cached factory per geometry), so every tile offset
in the generated per-thread code is a literal and each shared value is read once per thread.

conv kernel (forward and dgrad), grid (x = phase f and tile bh, bw; y = channel co; z = image n):

    for j < J (forward J = 1: ci = co // M, filter co;  dgrad J = M: ci = filter = co*M + j):
        tile[HALO_H][HALO_W] <- in[n, ci, org_h + i, org_w + jj] (0 outside: padding), ws <- w[filter]
        syncthreads
        for v < VH, taps (r, s) of phase f: acc[v] += tile[row(v, r)][col(tx, s)] * ws[r, s]
        syncthreads
    out[n, co, (t0h + ty*VH + v)*OSTEP_H + o0h, (t0w + tx)*OSTEP_W + o0w] = acc[v] + bias[co]

wgrad kernel, grid (x = split z, y = filter k), units u = (n, bh, bw) in [z*chunk, z*chunk + chunk):

    for u: tile <- x[n, k // M] halo; g[v] <- dy[n, k, t0h + ty*VH + v, t0w + tx]; syncthreads
           acc[r, s] += tile[row(v, r)][col(tx, s)] * g[v]  for v, r, s;  syncthreads
    part[z, k, r, s] = tree sum of acc[r, s] over the block's threads (fixed pairing, up to 16 KiB of
                       taps per tree: log2(threads) + 2 barriers per group of taps)
    (splits > 1: dw = sum over z of part[z], in order z = 0, 1, ...: convlab.kernels.splitk.sum_partials)
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from numba import from_dtype, int32, int64, uint32

from convlab import runtime
from convlab.kernels.intrinsics import u32
from convlab.kernels.source import compile_source
from convlab.runtime import cuda

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
        counts = [-((ph.o0 - out_len) // self.ostep) - ph.t_lo for ph in self.phases]
        return max(1, math.ceil(max(counts) / tile))


@functools.cache
def axis(dgrad: bool, k: int, stride: int, pad: int, dil: int) -> Axis:
    """The Axis of a filter of ``k`` taps for forward/wgrad (``dgrad`` False) or backward-data."""
    if not dgrad:
        return Axis(stride, 1, (Phase(0, 0, tuple((r, r * dil - pad) for r in range(k))),))
    phases = tuple(Phase(f - pad, -((f - pad) // stride),
                         tuple((r, (f - r * dil) // stride) for r in range(k) if (f - r * dil) % stride == 0))
                   for f in range(stride))
    return Axis(1, stride, phases)


def reduce_group(taps: int, threads: int, itemsize: int) -> int:
    """Filter taps that wgrad's block reduction sums at once (a taps x threads buffer of <= 16 KiB)."""
    return max(1, min(taps, REDUCE_BYTES // (threads * itemsize)))


def shared_bytes(ah: Axis, aw: Axis, th: int, tw: int, vh: int, taps: int, itemsize: int) -> int:
    """Static shared memory of a kernel (the larger, wgrad's): halo tile, filter, reduction buffer."""
    threads = tw * (th // vh)
    return (ah.halo(th) * aw.halo(tw) + taps + reduce_group(taps, threads, itemsize) * threads) * itemsize


def _reads(ah: Axis, aw: Axis, fh: int, fw: int, vh: int, hw: int):
    """{literal tile offset: [(v, r, s), ...]} of phase (fh, fw) for one thread (rows v < vh)."""
    ph, pw = ah.phases[fh], aw.phases[fw]
    reads: dict[int, list[tuple[int, int, int]]] = {}
    for v in range(vh):
        for r, offr in ph.taps:
            for s, offs in pw.taps:
                at = (v * ah.istep + offr - ph.min_off) * hw + offs - pw.min_off
                reads.setdefault(at, []).append((v, r, s))
    return reads


def _device(lines: list[str], name: str, extra: dict):
    namespace = compile_source("\n".join(lines) + "\n", f"<depthwise {name}>", {"u32": u32, "i64": int64, **extra})
    return runtime.jit(device=True, forceinline=True)(namespace[name])


@functools.cache
def halo_loader(dtype: str, halo_h: int, halo_w: int, threads: int):
    """``load(a, src, org_h, org_w, in_h, in_w, tile, tid)``: tile[i*halo_w + j] = a[src + ih*in_w + iw]
    with (ih, iw) = (org_h + i, org_w + j), 0 outside the plane (the padding); coalesced along j."""
    HALO, HW, T = np.uint32(halo_h * halo_w), np.uint32(halo_w), np.uint32(threads)
    zero = np.dtype(dtype).type(0)

    @runtime.jit(device=True, forceinline=True)
    def load(a, src, org_h, org_w, in_h, in_w, tile, tid):
        e = tid
        while e < HALO:  # every product and sum cast back to 32 bits (Numba widens them to 64)
            i = uint32(e // HW)
            ih = int32(org_h + int32(i))
            iw = int32(org_w + int32(e - uint32(i * HW)))
            val = zero
            if uint32(ih) < in_h and uint32(iw) < in_w:
                val = a[int64(uint32(src + uint32(uint32(ih) * in_w) + uint32(iw)))]
            tile[e] = val
            e = uint32(e + T)

    return load


def _names(prefix: str, count: int) -> str:
    return "".join(f"{prefix}{i}, " for i in range(count))


@functools.cache
def conv_compute(ah: Axis, aw: Axis, vh: int, hw: int, s_: int):
    """``acc = compute(f, tile, ws, base, acc)``: one thread's VH rows of phase f = fh * len(aw.phases)
    + fw, every tile value read once (acc[v] += tile[base + literal] * ws[r*S + s])."""
    accs = _names("a", vh)
    lines = ["def compute(f, tile, ws, base, acc):", f"    {accs}= acc"]
    for f in range(len(ah.phases) * len(aw.phases)):
        fh, fw = divmod(f, len(aw.phases))
        lines.append(f"    {'if' if f == 0 else 'elif'} f == {f}:")
        reads = _reads(ah, aw, fh, fw, vh, hw)
        taps = sorted({(r, s) for uses in reads.values() for _, r, s in uses})
        lines += [f"        w{r}_{s} = ws[{r * s_ + s}]" for r, s in taps] or ["        pass"]
        for at, uses in sorted(reads.items()):
            lines.append(f"        x = tile[base + u32({at})]")
            lines += [f"        a{v} += x * w{r}_{s}" for v, r, s in uses]
    lines.append(f"    return ({accs})")
    return _device(lines, "compute", {})


@functools.cache
def row_store(vh: int, ostep: int):
    """``store(out, plane, oh0, ow, out_h, out_w, acc, b)``: out[plane + (oh0 + v*ostep)*out_w + ow] =
    acc[v] + b for the rows and column inside the output plane."""
    lines = ["def store(out, plane, oh0, ow, out_h, out_w, acc, b):", "    if u32(ow) < out_w:"]
    for v in range(vh):
        lines += [f"        oh = u32(oh0 + i32({v * ostep}))", "        if oh < out_h:",
                  f"            out[i64(u32(plane + u32(oh * out_w) + u32(ow)))] = acc[{v}] + b"]
    return _device(lines, "store", {"i32": np.int32})


@functools.cache
def wgrad_compute(ah: Axis, aw: Axis, vh: int, hw: int, s_: int, r_: int):
    """``acc = compute(tile, base, g, acc)``: acc[r*S + s] += tile[base + literal] * g[v]."""
    accs, gs = _names("a", r_ * s_), _names("g", vh)
    lines = ["def compute(tile, base, g, acc):", f"    {accs}= acc", f"    {gs}= g"]
    for at, uses in sorted(_reads(ah, aw, 0, 0, vh, hw).items()):
        lines.append(f"    x = tile[base + u32({at})]")
        lines += [f"    a{r * s_ + s} += x * g{v}" for v, r, s in uses]
    lines.append(f"    return ({accs})")
    return _device(lines, "compute", {})


@functools.cache
def dy_loader(vh: int):
    """``g = load(dy, at, p0, out_h, q_ok, out_w, zero)``: g[v] = dy[at + v*out_w] if row p0 + v < out_h
    and the column is inside (q_ok), else 0."""
    lines = ["def load(dy, at, p0, out_h, q_ok, out_w, zero):"]
    for v in range(vh):
        lines += [f"    g{v} = zero", f"    if q_ok and u32(p0 + u32({v})) < out_h:",
                  f"        g{v} = dy[i64(u32(at + u32({v} * out_w)))]"]
    lines.append(f"    return ({_names('g', vh)})")
    return _device(lines, "load", {})


@functools.cache
def block_reduce(taps: int, threads: int, group: int):
    """``reduce(acc, red, tid, out, at)``: out[at + i] = sum of acc[i] over the block's threads: ``group``
    taps at a time go to red[g * threads + tid], then one tree over the threads for all of them (fixed
    pairing: deterministic; log2(threads) + 2 barriers per group)."""
    lines = ["def reduce(acc, red, tid, out, at):", f"    {_names('a', taps)}= acc"]
    for i0 in range(0, taps, group):
        size = min(group, taps - i0)
        lines += [f"    red[u32({g * threads}) + tid] = a{i0 + g}" for g in range(size)]
        lines += ["    cuda.syncthreads()", f"    h = u32({threads // 2})", "    while h > u32(0):",
                  "        if tid < h:"]
        lines += [f"            red[u32({g * threads}) + tid] += red[u32({g * threads}) + tid + h]"
                  for g in range(size)]
        lines += ["        cuda.syncthreads()", "        h >>= u32(1)", "    g = tid",
                  f"    while g < u32({size}):",
                  f"        out[i64(at + u32({i0}) + g)] = red[g * u32({threads})]",
                  f"        g += u32({threads})", "    cuda.syncthreads()"]
    return _device(lines, "reduce", {"cuda": cuda})


def _consts(values) -> tuple:
    return tuple(np.int32(v) for v in values)


@functools.cache
def conv_kernel(dtype: str, dgrad: bool, th: int, tw: int, vh: int, r_: int, s_: int, sh: int, sw: int,
                ph: int, pw: int, dh: int, dw: int):
    """The forward (``dgrad`` False) or backward-data kernel of one tile shape and filter geometry.
    Grid: x = (phase, tile row, tile column), y = output channel, z = image."""
    ah, aw = axis(dgrad, r_, sh, ph, dh), axis(dgrad, s_, sw, pw, dw)
    HH, HW, T, RS = ah.halo(th), aw.halo(tw), tw * (th // vh), r_ * s_
    HALO, NT, zero = HH * HW, from_dtype(np.dtype(dtype)), np.dtype(dtype).type(0)
    load = halo_loader(dtype, HH, HW, T)
    compute = conv_compute(ah, aw, vh, HW, s_)
    store = row_store(vh, ah.ostep)
    TLO_H, TLO_W = _consts(p.t_lo for p in ah.phases), _consts(p.t_lo for p in aw.phases)
    ORG_H, ORG_W = _consts(p.min_off for p in ah.phases), _consts(p.min_off for p in aw.phases)
    O0_H, O0_W = _consts(p.o0 for p in ah.phases), _consts(p.o0 for p in aw.phases)
    IST_H, IST_W, OST_H, OST_W = _consts((ah.istep, aw.istep, ah.ostep, aw.ostep))
    u0, u1, uT, uRS, uNPW = (np.uint32(v) for v in (0, 1, T, RS, len(aw.phases)))
    uTH, uTW, uVH = (np.uint32(v) for v in (th, tw, vh))
    ROWSTEP, uISW = np.uint32(vh * ah.istep * HW), np.uint32(aw.istep)
    ZEROS, DGRAD, PHASED = (zero,) * vh, dgrad, len(ah.phases) * len(aw.phases) > 1

    @runtime.jit
    def kernel(a4, wt4, bias, out4, in_h, in_w, out_h, out_w, ca, co_n, mult, tiles_h, tiles_w, has_bias):
        a, wt, out = a4.flat, wt4.flat, out4.flat  # C-contiguous: flat indexing
        tile = cuda.shared.array(HALO, NT)
        ws = cuda.shared.array(RS, NT)
        tid = uint32(cuda.threadIdx.x)
        rem = uint32(cuda.blockIdx.x)
        co = uint32(cuda.blockIdx.y)
        n = uint32(cuda.blockIdx.z)
        f = u0
        if PHASED:
            thw = uint32(tiles_h * tiles_w)
            f = uint32(rem // thw)
            rem = uint32(rem - uint32(f * thw))
        bh = uint32(rem // tiles_w)
        fh = uint32(f // uNPW)
        fw = uint32(f - uint32(fh * uNPW))
        t0h = int32(int32(uint32(bh * uTH)) + TLO_H[fh])
        t0w = int32(int32(uint32(uint32(rem - uint32(bh * tiles_w)) * uTW)) + TLO_W[fw])
        org_h = int32(int32(t0h * IST_H) + ORG_H[fh])
        org_w = int32(int32(t0w * IST_W) + ORG_W[fw])
        ty = uint32(tid // uTW)
        tx = uint32(tid - uint32(ty * uTW))
        base = uint32(uint32(ty * ROWSTEP) + uint32(tx * uISW))
        in_hw = uint32(in_h * in_w)
        acc = ZEROS
        jn = mult if DGRAD else u1
        j = u0
        while j < jn:
            ci = uint32(uint32(co * mult) + j) if DGRAD else uint32(co // mult)
            fk = ci if DGRAD else co
            e = tid
            while e < uRS:
                ws[e] = wt[int64(uint32(uint32(fk * uRS) + e))]
                e = uint32(e + uT)
            load(a, uint32(uint32(uint32(n * ca) + ci) * in_hw), org_h, org_w, in_h, in_w, tile, tid)
            cuda.syncthreads()
            acc = compute(f, tile, ws, base, acc)
            cuda.syncthreads()
            j = uint32(j + u1)
        b = zero
        if has_bias:
            b = bias[co]
        store(out, uint32(uint32(uint32(n * co_n) + co) * uint32(out_h * out_w)),
              int32(int32(int32(t0h + int32(ty * uVH)) * OST_H) + O0_H[fh]),
              int32(int32(int32(t0w + int32(tx)) * OST_W) + O0_W[fw]), out_h, out_w, acc, b)

    return kernel


@functools.cache
def wgrad_kernel(dtype: str, th: int, tw: int, vh: int, r_: int, s_: int, sh: int, sw: int, ph: int,
                 pw: int, dh: int, dw: int):
    """The backward-weight kernel of one tile shape and filter geometry (threads a power of two).
    Grid: x = split, y = filter."""
    ah, aw = axis(False, r_, sh, ph, dh), axis(False, s_, sw, pw, dw)
    HH, HW, T, RS = ah.halo(th), aw.halo(tw), tw * (th // vh), r_ * s_
    HALO, NT, zero = HH * HW, from_dtype(np.dtype(dtype)), np.dtype(dtype).type(0)
    load = halo_loader(dtype, HH, HW, T)
    compute = wgrad_compute(ah, aw, vh, HW, s_, r_)
    load_dy = dy_loader(vh)
    GROUP = reduce_group(RS, T, np.dtype(dtype).itemsize)
    reduce = block_reduce(RS, T, GROUP)
    RED = GROUP * T
    u0, u1, uRS, uTH, uTW, uVH = (np.uint32(v) for v in (0, 1, RS, th, tw, vh))
    SH, SW, PH, PW = _consts((sh, sw, ph, pw))
    ROWSTEP, uSW = np.uint32(vh * sh * HW), np.uint32(sw)
    ZEROS = (zero,) * RS

    @runtime.jit
    def kernel(x4, dy4, part, in_h, in_w, out_h, out_w, ca, k_n, mult, tiles_h, tiles_w, units, chunk,
               splits):
        x, dy, part = x4.flat, dy4.flat, part.flat  # C-contiguous: flat indexing (part: dw or 1-D)
        tile = cuda.shared.array(HALO, NT)
        red = cuda.shared.array(RED, NT)
        tid = uint32(cuda.threadIdx.x)
        z = uint32(cuda.blockIdx.x)
        k = uint32(cuda.blockIdx.y)
        ty = uint32(tid // uTW)
        tx = uint32(tid - uint32(ty * uTW))
        base = uint32(uint32(ty * ROWSTEP) + uint32(tx * uSW))
        thw = uint32(tiles_h * tiles_w)
        src_c = uint32(k // mult)
        in_hw, out_hw = uint32(in_h * in_w), uint32(out_h * out_w)
        acc = ZEROS
        u = uint32(z * chunk)
        stop = min(uint32(u + chunk), units)
        n = uint32(u // thw)  # unit u = (n, bh, bw), advanced without division below
        bh = uint32(uint32(u - uint32(n * thw)) // tiles_w)
        bw = uint32(uint32(u - uint32(n * thw)) - uint32(bh * tiles_w))
        while u < stop:
            t0h = uint32(bh * uTH)
            t0w = uint32(bw * uTW)
            load(x, uint32(uint32(uint32(n * ca) + src_c) * in_hw), int32(int32(t0h) * SH - PH),
                 int32(int32(t0w) * SW - PW), in_h, in_w, tile, tid)
            p0 = uint32(t0h + uint32(ty * uVH))
            q = uint32(t0w + tx)
            at = uint32(uint32(uint32(uint32(n * k_n) + k) * out_hw) + uint32(uint32(p0 * out_w) + q))
            g = load_dy(dy, at, p0, out_h, q < out_w, out_w, zero)
            cuda.syncthreads()
            acc = compute(tile, base, g, acc)
            cuda.syncthreads()
            u = uint32(u + u1)
            bw = uint32(bw + u1)
            if bw == tiles_w:
                bw = u0
                bh = uint32(bh + u1)
                if bh == tiles_h:
                    bh = u0
                    n = uint32(n + u1)
        reduce(acc, red, tid, part, uint32(uint32(uint32(z * k_n) + k) * uRS))

    return kernel
