"""Real-to-complex FFTs of convolution patches in shared memory (:mod:`.stages` has the passes). A patch is
NH x NW reals (NH = 1: a 1D transform); a block takes PB patches, and two real rows share one complex
transform (row pairs of a patch, or pairs of 1D patches).

``spectrum``: patches -> half spectra X[u, v], u < NH, v <= NW/2, in the transform GEMM's layout:

    for the block's patches p (thread items spread over each step; barriers between steps):
        Z[j][bitrev(x)] = row 2j [x] + i row 2j+1 [x]           rows: patch p's rows y0 + a, sampled as below
        DIT passes over the PB*NH/2 rows Z                         (length NW)
        X[row 2j], X[row 2j+1] = (Z[v] + conj Z[-v]) / 2, (Z[v] - conj Z[-v]) / 2i   into S, rows bit-reversed per patch
        DIT passes over S's columns (NH > 1)                       (length NH)
        bin (u, v) of patch (g, t, c) -> z = (u*(NW/2+1) + v)*G + g:
            plain:  dst[z*sz + t*st + c*sc] = Re,  [... + im_off] = Im
            conj:   the four entries of [[Re, Im], [-Im, Re]] at + 0, + im_off, + row_off, + row_off + im_off

Patch (g, t, c), t = (n, th, tw) as in convlab.kernels.winograd.transforms: element (a, b) of the patch is
src[g*s_g + n*s_n + c*s_c + (y/dh)*s_y + (x/dw)*s_x + off] for y = th*step_h + oh + a, x = tw*step_w + ow + b
when y, x are multiples of (dh, dw) inside [0, Y*dh) x [0, X*dw) and (a, b) within the patch's limit
(wgrad's dy tiles: L of the NF values), else 0: a dilated filter is read with its zeros inserted (steps
and origins 0, dh, dw its dilation), an image with dh = dw = 1. The "conj" role writes the block that
makes a real GEMM compute sum X conj(P) (convlab.kernels.transform.gemm: complex products as real ones).
Index arithmetic is signed 64-bit; :mod:`.inverse` is the way back.
"""
from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from convlab import runtime
from convlab.kernels.data import convert
from convlab.kernels.source import Writer, compile_source
from convlab.runtime import cuda

from .stages import emit_bitrev, emit_passes, twiddles

#: shared memory budget of one block (two buffers of complex float32)
SHARED_BUDGET = 40 * 1024


def patches_per_block(nh: int, nw: int, simulator: bool) -> int:
    """Patches a block transforms: an even count for 1D (row pairs), the most that fit SHARED_BUDGET (16
    bytes per point: two complex buffers), at most 16 (8 on the simulator, where several blocks still
    cover the block offsets of small problems)."""
    cap = 8 if simulator else 16
    pb = max(1, min(cap, SHARED_BUDGET // (16 * nh * nw)))
    return max(2, pb - pb % 2) if nh == 1 else pb


def block_threads(simulator: bool) -> int:
    """Threads a block: 128 on a GPU; 16 on the simulator, where each thread is a Python thread (with 8
    patches a block, forward + dgrad + wgrad of a 16-channel 4x4 3x3 problem took 8.3 CPU s on 2 loaded
    cores, against 14.7 s with 4 patches and 32 threads: os.times() around the plugin's runs, as
    tools/pytest_cpu_times.py counts a test)."""
    return 16 if simulator else 128


def _namespace(nh: int, nw: int, kind: str | None) -> dict:
    ns = {"cuda": cuda, "zero": np.float32(0), "half": np.float32(0.5), "f32": np.float32,
          "load": convert.to_f32(kind), "store": convert.from_f32(kind)}
    for tag, n in (("W", nw), ("H", nh)):
        ns[f"TWR{tag}"], ns[f"TWI{tag}"] = twiddles(n)
    return ns


def _opened(signature: str, nh: int, nw: int, pb: int) -> tuple[Writer, int, int]:
    """A kernel's source opened: its ``def`` line, the two shared buffers (S1: complex rows, S2: half
    spectra), the twiddle tables, the first patch; with the half-spectrum width and S1's row count."""
    half = nw // 2 + 1
    rows = pb * nh // 2 if nh > 1 else pb // 2
    w = Writer(signature)
    w.indent()
    w(f"s1r = cuda.shared.array({rows * nw}, f32)")
    w(f"s1i = cuda.shared.array({rows * nw}, f32)")
    w(f"s2r = cuda.shared.array({pb * nh * half}, f32)")
    w(f"s2i = cuda.shared.array({pb * nh * half}, f32)")
    w("twrW = cuda.const.array_like(TWRW)")
    w("twiW = cuda.const.array_like(TWIW)")
    if nh > 1:
        w("twrH = cuda.const.array_like(TWRH)")
        w("twiH = cuda.const.array_like(TWIH)")
    w(f"p0 = cuda.blockIdx.x * {pb}")
    return w, half, rows


def _row_passes(w: Writer, nw: int, rows: int, threads: int, inverse: bool) -> None:
    """After a barrier, the NW-point transforms of the ``rows`` complex rows in S1 (contiguous)."""
    w("cuda.syncthreads()")
    w("re = s1r")
    w("im = s1i")
    emit_passes(w, nw, str(rows), f"l * {nw}", "1", threads, inverse, "W")


def _column_passes(w: Writer, nh: int, half: int, pb: int, threads: int, inverse: bool) -> None:
    """After a barrier, the NH-point transforms down the ``half`` (NW/2+1) columns of the PB half spectra
    in S2 (none for NH = 1)."""
    w("cuda.syncthreads()")
    if nh > 1:
        w("re = s2r")
        w("im = s2i")
        emit_passes(w, nh, f"{pb * half}", f"(l // {half}) * {nh * half} + l % {half}", str(half), threads, inverse,
                    "H")


def _patch_index(w: Writer, c_fast: bool) -> None:
    """g, t, c, n, th, tw of patch ``p``."""
    inner, outer = ("c", "t") if c_fast else ("t", "c")
    w(f"{inner} = p % {inner}_n")
    w(f"{outer} = (p // {inner}_n) % {outer}_n")
    w(f"g = p // ({inner}_n * {outer}_n)")
    w("per = th_n * tw_n")
    w("n = n0 + t // per")
    w("th = (t % per) // tw_n")
    w("tw = t % tw_n")


@functools.cache
def spectrum_kernel(nh: int, nw: int, pb: int, threads: int, role: str, c_fast: bool, kind: str | None) -> Callable:
    """The ``spectrum`` kernel (module docstring) for one patch size, block and output role."""
    w, half, rows = _opened("def spectrum(src, dst, n0, total, t_n, c_n, th_n, tw_n, step_h, step_w, oh, ow, y_n, "
                            "x_n, dh, dw, lim_h, lim_w, s_g, s_n, s_c, s_y, s_x, off, groups, sz, st, sc, im_off, "
                            "row_off):", nh, nw, pb)
    w("item = cuda.threadIdx.x")
    with w.block(f"while item < {rows * nw}:"):  # load row pairs, bit-reversed
        w(f"j = item // {nw}")
        w(f"x = item % {nw}")
        emit_bitrev(w, nw, "x", "xr")
        for q in range(2):
            w(f"rho = 2 * j + {q}")
            w(f"p = p0 + rho // {nh}")
            w(f"a = rho % {nh}")
            w("ok = p < total and a < lim_h and x < lim_w")
            _patch_index(w, c_fast)
            w("y = th * step_h + oh + a")
            w("xx = tw * step_w + ow + x")
            w("ok = ok and y >= 0 and xx >= 0 and y % dh == 0 and xx % dw == 0 and y < y_n * dh and xx < x_n * dw")
            w(f"v{q} = load(src[g * s_g + n * s_n + c * s_c + (y // dh) * s_y + (xx // dw) * s_x + off]) "
              "if ok else zero")
        w(f"s1r[j * {nw} + xr] = v0")
        w(f"s1i[j * {nw} + xr] = v1")
        w(f"item += {threads}")
    _row_passes(w, nw, rows, threads, False)
    w("item = cuda.threadIdx.x")
    with w.block(f"while item < {rows * half}:"):  # separate the pairs
        w(f"j = item // {half}")
        w(f"v = item % {half}")
        w(f"zr = s1r[j * {nw} + v]")
        w(f"zi = s1i[j * {nw} + v]")
        w(f"mr = s1r[j * {nw} + ({nw} - v) % {nw}]")
        w(f"mi = s1i[j * {nw} + ({nw} - v) % {nw}]")
        for q in range(2):
            if nh > 1:
                emit_bitrev(w, nh, f"(2 * j + {q}) % {nh}", "ar")
                w(f"row{q} = ((2 * j + {q}) // {nh}) * {nh} + ar")
            else:
                w(f"row{q} = 2 * j + {q}")
        w(f"s2r[row0 * {half} + v] = (zr + mr) * half")
        w(f"s2i[row0 * {half} + v] = (zi - mi) * half")
        w(f"s2r[row1 * {half} + v] = (zi + mi) * half")
        w(f"s2i[row1 * {half} + v] = (mr - zr) * half")
        w(f"item += {threads}")
    _column_passes(w, nh, half, pb, threads, False)
    w("item = cuda.threadIdx.x")
    with w.block(f"while item < {pb * nh * half}:"):  # store the bins
        w(f"p = p0 + item // {nh * half}")
        with w.block("if p < total:"):
            w(f"u = (item % {nh * half}) // {half}")
            w(f"v = item % {half}")
            _patch_index(w, c_fast)
            w(f"at = ((u * {half} + v) * groups + g) * sz + t * st + c * sc")
            w("vr = s2r[item]")
            w("vi = s2i[item]")
            w("dst[at] = vr")
            w("dst[at + im_off] = vi")
            if role == "conj":
                w("dst[at + row_off] = -vi")
                w("dst[at + row_off + im_off] = vr")
        w(f"item += {threads}")
    name = f"<convlab.kernels.fft.spectrum {nh}x{nw} pb{pb} {role} {kind}>"
    return runtime.jit(compile_source(w.source, name, _namespace(nh, nw, kind))["spectrum"])


def spectrum(src, dst, *, nf: tuple[int, int], role: str, c_fast: bool, kind: str | None, groups: int, t_n: int,
             c_n: int, tiles: tuple[int, int], step: tuple[int, int], origin: tuple[int, int],
             bounds: tuple[int, int], dilation: tuple[int, int], limit: tuple[int, int],
             src_strides: tuple[int, ...], off: int, dst_strides: tuple[int, int, int], im_off: int,
             row_off: int = 0, n0: int = 0) -> None:
    """Launch ``spectrum`` over groups x t_n x c_n patches (module docstring); ``src_strides`` (s_g, s_n,
    s_c, s_y, s_x), ``limit`` (rows, columns read a patch) and ``dst_strides`` (sz, st, sc) in elements,
    1-D device arrays."""
    total = groups * t_n * c_n
    if total == 0:
        return
    sim = runtime.target().simulator
    pb, threads = patches_per_block(*nf, sim), block_threads(sim)
    kernel = spectrum_kernel(nf[0], nf[1], pb, threads, role, c_fast, kind)
    kernel[-(-total // pb), threads](src, dst, n0, total, t_n, c_n, tiles[0], tiles[1], step[0], step[1], origin[0],
                                     origin[1], bounds[0], bounds[1], dilation[0], dilation[1], limit[0],
                                     limit[1], *src_strides, off, groups, *dst_strides, im_off, row_off)
