"""Backward-weight on tensor cores as one implicit GEMM over a channels-last input: the filter taps of x
gathered straight into the pipeline (:mod:`convlab.kernels.tensor_core.warp`), no column buffer.

    dwT[(t, r, s, c), k] = sum_{n, o, p, q} xh[n, o*sd - pd + t*dd, p*sh - ph + r*dh, q*sw - pw + s*dw, c]
                                            * dy[n, k, o, p, q]                     (2D: no o, t, d)

    GEMM  M = T*R*S*Cp (row m = (tap, c), c fastest; Cp: C padded to whole 16-byte chunks),  N = K,
          reduction j = (image i of a split, output pixel) over ipb * OPQp (OPQp: Do*P*Q padded)

A is m-contiguous (the pipeline's ``a_km``): a 16-byte chunk is 8 halves (4 fp32) of consecutive
channels of one input pixel at one tap, one ``cp.async`` from the NDHWC (NHWC) xh, zero-filled in the
padding, past the image's pixels (j's pixel >= OPQ) and past the reduction. Each thread decodes its
chunk's tap (t, r, s) and channel once; per k tile and copy, its k row's image and output pixel (a
division per axis) give the input position and the in-bounds test. Bt is dy split-major,
[z][k][ipb * OPQp] (dense, zeros past OPQ), read as :class:`~convlab.kernels.tensor_core.gemm.PartedA`
reads it: grid z = split * parts + part, block z runs slice z % parts of split z // parts.

Output: the fp32 partial dwT of every (split, slice), C[z][m][k] row-major; :func:`finish` sums them in
order z = 0, 1, ... (deterministic) and writes dw[k, c, tap] (c < C) in the output type.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np

from convlab import runtime
from convlab.kernels.arch.intrinsics import u32 as U
from convlab.kernels.data import convert
from convlab.kernels.source import Writer
from convlab.kernels.tensor_core.config import ITYPES, TcConfig
from convlab.kernels.tensor_core.copy import ALoader, km_tile_ok
from convlab.kernels.tensor_core.epilogue import BATCH, vector_ok
from convlab.kernels.tensor_core.gemm import BatchedStore
from convlab.kernels.tensor_core.launch import compile_kernel, configure
from convlab.kernels.tensor_core.warp import pipeline_source
from convlab.runtime import cuda

#: (the strides are st_h / st_w: the pipeline names its ldmatrix swizzle ``sw``)
PARAMS = "X, Bt, C, M, N, K, sB, sC, ld, parts, Cp, OPQp, OPQ, ipb, IMG, H, W, S, Q, st_h, st_w, ph, pw, dh, dw"
#: what a 3D gather adds: the depth D, the filter's R, an output slice's P*Q, the depth stride, padding,
#: dilation (OPQ and IMG count whole volumes: Do*P*Q, D*H*W*Cp)
DEPTH_PARAMS = ", D, R, PQs, sd, pd, dd"


class TapsA(ALoader):
    """A[(tap, c), j] = xh[image, position of j's output pixel at the tap, c] (module doc) for 2 or 3
    spatial dimensions; batched over grid z = split * parts + part like PartedA."""

    a_km = True
    batched = True
    b_stride = "ld"

    def __init__(self, nd: int = 2) -> None:
        if nd not in (2, 3):
            raise ValueError(f"the wgrad gather takes 2 or 3 spatial dimensions, got {nd}")
        self.nd = nd
        self.params = PARAMS + (DEPTH_PARAMS if nd == 3 else "")

    def b_offset(self, batch: str) -> str:
        return f"U(U(U({batch} // parts) * sB) + U(U({batch} % parts) * K))"

    def km_cols(self, w: Writer, m: str) -> None:
        w(f"amok = {m} < M")
        w(f"mm = {m} if amok else U(0)")
        w("xc = U(mm % Cp)  # the chunk's first channel and its filter tap: column, row (, depth) offsets")
        w("tap = U(mm // Cp)")
        w("tsw = U(U(tap % S) * dw)")
        if self.nd == 3:
            w("tap = U(tap // S)")
            w("trh = U(U(tap % R) * dh)")
            w("tdd = U(U(tap // R) * dd)")
        else:
            w("trh = U(U(tap // S) * dh)")
        w(f"xsp = U({BATCH} // parts)  # this block's split, and its slice's first reduction index")
        w(f"xj0 = U(U({BATCH} % parts) * K)")

    def km_rows(self, w: Writer, e: int, k0: str, k_row: str) -> None:
        w(f"jl = U(U(xj0 + {k0}) + {k_row})  # the k row's image of the split and output pixel")
        w("im = U(jl // OPQp)")
        w("pix = U(jl - U(im * OPQp))")
        w(f"jok{e} = pix < OPQ")
        if self.nd == 3:
            w("zz = U(U(U(U(pix // PQs) * sd) + tdd) - pd)")
            w("pix = U(pix % PQs)")
        w("hh = U(U(U(U(pix // Q) * st_h) + trh) - ph)")
        w("ww = U(U(U(U(pix % Q) * st_w) + tsw) - pw)")
        inside = "U(hh) < H and U(ww) < W"
        pixel = "U(U(hh * W) + ww)"
        if self.nd == 3:
            inside = f"U(zz) < D and {inside}"
            pixel = "U(U(U(U(zz * H) + hh) * W) + ww)"
        w(f"xin{e} = {inside}")
        w(f"xo{e} = U(U(U(U(U(xsp * ipb) + im) * IMG) + U({pixel} * Cp)) + xc)")

    def km_chunk(self, e: int, k0: str, k_row: str) -> tuple[str, str]:
        return f"amok and jok{e} and U({k0} + {k_row}) < K and xin{e}", f"xo{e}"


def _source(itype: str, cfg: TcConfig, nd: int) -> str:
    return pipeline_source(TcConfig(*cfg).validate(itype), itype, TapsA(nd), BatchedStore("f32", itype), "wgrad")


@functools.cache
def make_tc_wgrad(itype: str, cfg: TcConfig, nd: int = 2) -> Callable:
    """The kernel (PARAMS [+ DEPTH_PARAMS], vec) of one input type, config and number of spatial
    dimensions ``nd`` (2 or 3)."""
    cfg = TcConfig(*cfg).validate(itype)
    check(cfg, itype)
    filename = f"<convlab.kernels.tensor_core.wgrad {itype} {cfg.name} {nd}d>"
    return compile_kernel(_source(itype, cfg, nd), "wgrad", filename, cfg, itype)


def check(cfg: TcConfig, itype: str) -> None:
    """Raise ValueError unless ``cfg`` can run the m-contiguous gather (mma.sync; a swizzle of BM rows)."""
    if cfg.wgmma:
        raise ValueError(f"config {cfg.name}: the wgrad gather reads A m-contiguous, which wgmma does not take")
    if not km_tile_ok(cfg.BM, ITYPES[itype][1]):
        raise ValueError(f"config {cfg.name}: BM = {cfg.BM} rows of m-contiguous {itype} cannot be swizzled")


def kernel_source(itype: str, cfg: TcConfig, nd: int = 2) -> str:
    """The generated source of one kernel (for reading and debugging)."""
    return _source(itype, cfg, nd)


def wgrad_launcher(itype: str, cfg: TcConfig, xh: Any, bt: Any, part: Any, *, n_split: int, parts: int,
                   ipb: int, opqp: int, cp: int, k: int, spatial: tuple, kernel: tuple, out: tuple,
                   stride: tuple, padding: tuple, dilation: tuple) -> Callable[[], None]:
    """A no-argument launch on flat device arrays: xh [N * vox * cp] channels-last (NHWC / NDHWC,
    channels padded to cp), bt [n_split * k * ipb * opqp] (dy split-major, module doc), part float32
    [n_split * parts * M * k] (M = taps * cp); ``spatial`` (H, W) or (D, H, W), ``kernel`` and ``out``
    alike, stride / padding (>= 0) / dilation one per axis. ``ipb * opqp`` a whole number of ``parts``
    slices of 16-byte chunks."""
    nd = len(spatial)
    lz = ipb * opqp
    epc = 16 // ITYPES[itype][1]
    if lz % (parts * epc) or cp % epc:
        raise ValueError(f"the reduction of a split ({lz}) must cut into {parts} slices of whole {epc}-element "
                         f"chunks and the channels ({cp}) be whole chunks")
    kern = make_tc_wgrad(itype, TcConfig(*cfg), nd)
    m, z = math.prod(kernel) * cp, n_split * parts
    (h, w), (s,), q = spatial[-2:], kernel[-1:], out[-1]
    args = (xh, bt, part, U(m), U(k), U(lz // parts), U(k * lz), U(m * k), U(lz), U(parts), U(cp), U(opqp),
            U(math.prod(out)), U(ipb), U(math.prod(spatial) * cp), U(h), U(w), U(s), U(q), U(stride[-2]),
            U(stride[-1]), U(padding[-2]), U(padding[-1]), U(dilation[-2]), U(dilation[-1]))
    if nd == 3:
        args += (U(spatial[0]), U(kernel[1]), U(out[1] * out[2]), U(stride[0]), U(padding[0]), U(dilation[0]))
    vec = vector_ok(part, k, m * k)
    configured = configure(kern, cfg, itype, args + (vec,), m, k, z, out_dtype=np.float32, contig="n")
    return lambda: configured(*args, vec)


@functools.cache
def _finish_kernel(out_kind: str | None) -> Callable:
    store = convert.from_f32(out_kind)

    def finish(part, dw, splits, size, M, K, Cp, CT, TAPS):
        i = U(cuda.grid(1))
        if i < size:  # i = (k, c, tap) of dw; its partials at part[z][tap * Cp + c][k]
            kk = U(i // CT)
            ct = U(i - U(kk * CT))
            c = U(ct // TAPS)
            at = U(U(U(U(U(ct - U(c * TAPS)) * Cp) + c) * K) + kk)
            acc = part[at]
            z = U(1)
            while z < splits:
                acc += part[U(U(z * U(M * K)) + at)]
                z = U(z + 1)
            dw[i] = store(acc)

    return runtime.jit(finish)


def finish(part: Any, dw: Any, splits: int, *, cp: int, c: int, k: int, taps: int, out_kind: str | None) -> None:
    """dw [k * c * taps] (flat, the output type: float32, float16, or bf16 as uint16 bits with
    ``out_kind``) = the ordered sum over z < ``splits`` of part[z] [taps * cp, k] (float32), transposed."""
    size = k * c * taps
    if size == 0:
        return
    threads = 64 if runtime.target().simulator else 256
    _finish_kernel(out_kind)[math.ceil(size / threads), threads](
        part, dw, U(splits), U(size), U(taps * cp), U(k), U(cp), U(c * taps), U(taps))
