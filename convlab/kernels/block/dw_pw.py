"""The fused depthwise kxk -> pointwise 1x1 block of inverted-residual networks: one kernel computes a
tile of the depthwise output (with its epilogue) into shared memory and the pointwise GEMM from it, so
the (N, C, P, Q) intermediate never goes to global memory.

    t[n, c, p, q] = dw_epi(sum_{r,s} x[n, c, p*sh - ph + r*dh, q*sw - pw + s*dw] * w_dw[c, 0, r, s]
                           + b_dw[c], c)
    y[n, k, p, q] = pw_epi(sum_c t[n, c, p, q] * w_pw[k, c, 0, 0] + b_pw[k], k, residual[n, k, p, q])

(dw_epi, pw_epi: convlab.epilogue's scale / shift / activation, the pointwise's with a residual too.)
Loop nest of one block: PT output pixels (the flattened p*Q + q of image n) x KT = KG*KV output channels,
KG*PT threads; thread (kg, pl) = divmod(tid, PT) owns pixel pix0 + pl and channels k0 + kg*KV + j, j < KV,
in KV registers:

    for c0 in range(0, C, CC):                                      # channel chunks
        tile[cc][pe] = t[n, c0 + cc, pix0 + pe]   (cc < CC, pe < PT; 0 outside: adds nothing)
        wps[kk][cc]  = w_pw[k0 + kk, c0 + cc]     (kk < KT)
        syncthreads
        for cc < CC: v = tile[cc][pl]; acc[j] += v * wps[kg*KV + j][cc]   (j < KV; a warp shares kg:
                                                                            a broadcast read)
        syncthreads
    y[n, k0 + kg*KV + j, pix0 + pl] = pw_epi(acc[j] + b_pw[k], ...)          (rounded to y's dtype)

Consecutive threads take consecutive pixels, so NCHW loads and stores coalesce; channels-last indexes
the same loop's memory as ((n*H + h)*W + w)*C + c. The depthwise tile is recomputed once per block of
KT output channels (ceil(K / KT) times in all). The intermediate stays in the compute type (float32 for
float16, bfloat16 and float32; float64 for float64); it is never rounded to the storage dtype, so the
fused block is at least as accurate as the two layers run apart. Grid: (ceil(P*Q / PT), ceil(K / KT), N).
Every size is a compile-time constant of a kernel (a cached factory per shape and tile).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import from_dtype

from convlab import runtime
from convlab.epilogue import Epilogue
from convlab.kernels.data.convert import from_f32, half_kind, to_f32
from convlab.kernels.epilogue import compute_dtype, device_epilogue
from convlab.runtime import context, cuda

KV = 4  # output channels per thread, the registers a0..a3 of the loop nest


@dataclass(frozen=True)
class Tile:
    """PT pixels x KG thread rows (KT = KG * KV output channels) per block, CC channels per chunk."""

    pt: int = 32
    kg: int = 4
    cc: int = 16

    @property
    def threads(self) -> int:
        return self.pt * self.kg

    @property
    def kt(self) -> int:
        return self.kg * KV

    def shared_bytes(self, dtype: str) -> int:
        """Static shared memory of a block: the depthwise tile and the pointwise weights' chunk."""
        return (self.cc * self.pt + self.kt * self.cc) * compute_dtype(dtype).itemsize


#: the GPU tile: 128 threads, 16 output channels, 2 KiB + 1 KiB of float32 shared memory
GPU_TILE = Tile(32, 4, 16)
#: the simulator's (each thread a Python thread): 32 threads
SIM_TILE = Tile(16, 2, 8)


@dataclass(frozen=True)
class Shape:
    """The sizes of one block problem: images N, channels C, input H x W, output P x Q, outputs K, and
    the depthwise filter's geometry (R, S, stride, padding, dilation per axis)."""

    n: int
    c: int
    h: int
    w: int
    k: int
    p: int
    q: int
    r: int
    s: int
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]


def grid(shape: Shape, tile: Tile) -> tuple[int, int, int]:
    """The launch grid of ``shape`` with ``tile``."""
    return (-(-shape.p * shape.q // tile.pt), -(-shape.k // tile.kt), shape.n)


@functools.cache
def fused_kernel(dtype: str, dw_epi: Epilogue, pw_epi: Epilogue, channels_last: bool, shape: Shape,
                 tile: Tile):
    """``kernel(x, w_dw, b_dw, w_pw, b_pw, y, r, dw_scale, dw_shift, scale, shift, has_bd, has_bp)`` of one dtype,
    pair of epilogues (``dw_epi`` without a residual), layout and shape: x, w_dw (C*R*S), b_dw (C), w_pw
    (K*C), b_pw (K), y and the residual r flat views of their dense memory (bfloat16 as uint16 bits);
    the scales and shifts (C,) / (K,) of the compute type; ``has_bd`` / ``has_bp`` say whether the
    biases are read (:func:`launch` passes another array in place of a missing one)."""
    ct = compute_dtype(dtype).type
    CT = from_dtype(compute_dtype(dtype))
    kind = half_kind(dtype)
    read, write = to_f32(kind), from_f32(kind)
    dw_finish, pw_finish = device_epilogue(dtype, dw_epi), device_epilogue(dtype, pw_epi)
    N, C, H, W, K, P, Q = shape.n, shape.c, shape.h, shape.w, shape.k, shape.p, shape.q
    R, S, (SH, SW), (PH, PW), (DH, DW) = shape.r, shape.s, shape.stride, shape.padding, shape.dilation
    PQ, CL, RESID = P * Q, channels_last, pw_epi.residual is not None
    PT, KG, CC, KT = tile.pt, tile.kg, tile.cc, tile.kt
    TILE_N, WPS_N, T = CC * PT, KT * CC, tile.threads
    zero = ct(0)

    @runtime.jit(device=True)
    def finish(y, r, bias, scale, shift, acc, n, k, pix, has_bias):
        if k < K and pix < PQ:
            at = (n * PQ + pix) * K + k if CL else (n * K + k) * PQ + pix
            t = acc
            if has_bias:
                t += ct(read(bias[k]))
            rv = ct(read(r[at])) if RESID else zero
            y[at] = write(pw_finish(t, k, rv, scale, shift))

    @runtime.jit
    def kernel(x, wd, bd, wp, bp, y, r, dscale, dshift, pscale, pshift, has_bd, has_bp):
        tile = cuda.shared.array(TILE_N, CT)
        wps = cuda.shared.array(WPS_N, CT)
        tid = cuda.threadIdx.x
        pix0 = cuda.blockIdx.x * PT
        k0 = cuda.blockIdx.y * KT
        n = cuda.blockIdx.z
        kg = tid // PT
        pl = tid - kg * PT
        a0 = zero
        a1 = zero
        a2 = zero
        a3 = zero
        for c0 in range(0, C, CC):
            e = tid
            while e < TILE_N:  # the depthwise tile: element (cc, pe) = divmod(e, PT)
                cc = e // PT
                c = c0 + cc
                pix = pix0 + e - cc * PT
                v = zero
                if c < C and pix < PQ:
                    p = pix // Q
                    q = pix - p * Q
                    for rr in range(R):
                        h = p * SH - PH + rr * DH
                        if 0 <= h < H:
                            for ss in range(S):
                                ww = q * SW - PW + ss * DW
                                if 0 <= ww < W:
                                    xi = ((n * H + h) * W + ww) * C + c if CL else ((n * C + c) * H + h) * W + ww
                                    v += ct(read(x[xi])) * ct(read(wd[(c * R + rr) * S + ss]))
                    if has_bd:
                        v += ct(read(bd[c]))
                    v = dw_finish(v, c, zero, dscale, dshift)
                tile[e] = v
                e += T
            e = tid
            while e < WPS_N:  # the pointwise weights' chunk: element (kk, cc) = divmod(e, CC)
                kk = e // CC
                c = c0 + e - kk * CC
                k = k0 + kk
                wps[e] = ct(read(wp[k * C + c])) if k < K and c < C else zero
                e += T
            cuda.syncthreads()
            wb = kg * KV * CC
            for cc in range(CC):
                v = tile[cc * PT + pl]
                a0 += v * wps[wb + cc]
                a1 += v * wps[wb + CC + cc]
                a2 += v * wps[wb + 2 * CC + cc]
                a3 += v * wps[wb + 3 * CC + cc]
            cuda.syncthreads()
        k = k0 + kg * KV
        pix = pix0 + pl
        finish(y, r, bp, pscale, pshift, a0, n, k, pix, has_bp)
        finish(y, r, bp, pscale, pshift, a1, n, k + 1, pix, has_bp)
        finish(y, r, bp, pscale, pshift, a2, n, k + 2, pix, has_bp)
        finish(y, r, bp, pscale, pshift, a3, n, k + 3, pix, has_bp)

    return kernel


def launch(dtype: str, dw_epi: Epilogue, pw_epi: Epilogue, channels_last: bool, shape: Shape,
           x: Any, w_dw: Any, b_dw: Any, w_pw: Any, b_pw: Any, y: Any, residual: Any, dw_scale: Any,
           dw_shift: Any, scale: Any, shift: Any, tile: Tile | None = None) -> None:
    """Run the fused block on device arrays: x (N, C, H, W) dense (channels-last when
    ``channels_last``), w_dw (C, 1, R, S), w_pw (K, C, 1, 1), biases (C,) / (K,) or None, y (N, K, P, Q)
    dense in x's layout, the residual dense like y or None; the scales and shifts (C,) / (K,) of the
    compute type or None (each present exactly when its epilogue says so)."""
    if tile is None:
        tile = SIM_TILE if runtime.target().simulator else GPU_TILE
    kernel = fused_kernel(dtype, dw_epi, pw_epi, channels_last, shape, tile)
    flat = [None if a is None else runtime.kernel_view(runtime.flat_view(a))
            for a in (x, w_dw, b_dw, w_pw, b_pw, y, residual)]
    ct = compute_dtype(dtype)  # one placeholder per device and compute dtype: no copy to the device per call
    placeholder = context.current().cached("dw_pw placeholders", ct.str, lambda: runtime.to_device(np.zeros(1, ct)))
    fx, fwd, fbd, fwp, fbp, fy, fr = flat
    kernel[grid(shape, tile), tile.threads](
        fx, fwd, fwd if fbd is None else fbd, fwp, fwp if fbp is None else fbp, fy, fy if fr is None else fr,
        *(placeholder if a is None else a for a in (dw_scale, dw_shift, scale, shift)),
        fbd is not None, fbp is not None)
