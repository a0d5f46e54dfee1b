"""Implicit-GEMM convolution on tensor cores: an NHWC input gathered straight into the tensor-core
pipeline (:mod:`convlab.kernels.tc_pipeline`), KRSC weights as the dense Bt, an NCHW output (+ bias).

    y[n, k, p, q] = sum_{r, s, c} xh[n, p*sh - ph + r*dh, q*sw - pw + s*dw, c] * wt[k, r, s, c] (+ bias[k])

    GEMM  M = N*P*Q (row m = (n, p, q)),  N = K,  K = R*S*C (column kk = (r, s, c), c fastest)

A 16-byte chunk of A is 8 halves (4 fp32) of consecutive channels of one input pixel when C is a
multiple of 8 (4): every chunk start kk has one (r, s) and c = kk % C, so the whole chunk is one
``cp.async`` from xh at ((n*H + h)*W + w)*C + c, zero-filled when (h, w) falls in the padding or kk >= K.
Per copy row the kernel keeps (n*H*W*C, p*sh + phn, q*sw + pwn) in padded coordinates (uint32, never
negative: ph = max(padding, 0) and phn = max(-padding, 0), so negative padding works too, which dgrad
needs); a row is inside when ph <= h' < H + ph. Per k tile it derives (r*dh, s*dw, c) of its chunk once.
The epilogue writes y[n, k, pq] at (n*K + k)*P*Q + pq (NCHW), or at row*K + k (NHWC, channels-last
outputs: the GEMM's row-major C), adding bias[k] in fp32 before converting.

:func:`to_channels_last` is every layout change (channels zero-padded up to a multiple of the chunk): the
input's NCHW -> NHWC, the filter's KCRS -> KRSC and dgrad's KCRS -> spatially flipped CRSK, each one
tiled transpose through shared memory, coalesced on both sides.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from convlab import runtime
from convlab.kernels.intrinsics import u32 as U
from convlab.kernels.tc_pipeline import OUT_CONVERT, TcConfig, compile_kernel, configure, pipeline_source
from convlab.runtime import cuda

#: itype -> the output kind of the pipeline (outputs in the input type) and the bias load
OUT_OF = {"f16": "in", "bf16": "bf16", "tf32": "f32"}
BIAS_OF = {"f16": "f32(bias[{}])", "bf16": "bf16_to_f32(bias[{}])", "tf32": "bias[{}]"}
PARAMS = "X, Bt, Y, bias, M, N, K, Cin, H, W, S, Q, PQ, HWC, sh, sw, ph, pw, phn, pwn, dh, dw"


class GatherA:
    """A[m, kk] = xh[n, p*sh - ph + r*dh, q*sw - pw + s*dw, c] from an NHWC input (see module doc)."""

    params = PARAMS

    def rows(self, w: Callable, e: int, m: str) -> None:
        w(f"aok{e} = {m} < M")
        w(f"mm = {m} if aok{e} else U(0)")
        w("pq = U(mm % PQ)")
        w(f"ab{e} = U(U(mm // PQ) * HWC)")
        w(f"ah{e} = U(U(U(pq // Q) * sh) + phn)")
        w(f"aw{e} = U(U(U(pq % Q) * sw) + pwn)")

    def ktile(self, w: Callable, d: int) -> None:
        w("rs = U(kk // Cin)", d)
        w("ci = U(kk % Cin)", d)
        w("dr = U(U(rs // S) * dh)", d)
        w("ds = U(U(rs % S) * dw)", d)

    def chunk(self, e: int) -> tuple[str, str]:
        h, x = f"U(ah{e} + dr)", f"U(aw{e} + ds)"
        return (f"aok{e} and kok and {h} >= ph and {h} < U(H + ph) and {x} >= pw and {x} < U(W + pw)",
                f"U(U(ab{e} + U(U(U(U({h} - ph) * W) + U({x} - pw)) * Cin)) + ci)")


class NchwStore:
    """y[n, col, pq] (flat NCHW) = value (+ bias[col]), converted to the output type."""

    #: the flat offset of (row, col) from the row's ``yb``
    step = "U(yb + U({} * PQ))"

    def __init__(self, itype: str, bias: bool) -> None:
        self.convert, self.bias = OUT_CONVERT[OUT_OF[itype]], BIAS_OF[itype] if bias else None

    def row(self, w: Callable, d: int) -> None:
        w("yb = U(U(U(row // PQ) * U(N * PQ)) + U(row % PQ))", d)

    def put(self, col: str, value: str) -> str:
        if self.bias:
            value = f"{value} + {self.bias.format(col)}"
        return f"Y[{self.step.format(col)}] = " + self.convert.format(value)


class NhwcStore(NchwStore):
    """y[row, col] (flat NHWC: row = (n, p, q), col = output channel) = value (+ bias[col])."""

    step = "U(yb + {})"

    def row(self, w: Callable, d: int) -> None:
        w("yb = U(row * N)", d)


def _store(itype: str, bias: bool, nhwc_out: bool) -> NchwStore:
    return (NhwcStore if nhwc_out else NchwStore)(itype, bias)


@functools.cache
def make_tc_conv(itype: str, cfg: TcConfig, bias: bool, nhwc_out: bool = False) -> Callable:
    """The kernel (X, Bt, Y, bias, M, N, K, geometry...) of one input type, config, bias flag and output
    layout.

    X: NHWC input, flat; Bt: [K_out, R*S*C] weights, flat; Y: NCHW output (NHWC with ``nhwc_out``), flat,
    in the input type (bf16 as uint16 bits); bias: [K_out] (a 1-element dummy when ``bias`` is False).
    """
    cfg = TcConfig(*cfg).validate(itype)
    source = pipeline_source(cfg, itype, GatherA(), _store(itype, bias, nhwc_out), "conv")
    filename = f"<convlab.kernels.tc_conv {itype} {cfg.name} bias={bias} nhwc_out={nhwc_out}>"
    return compile_kernel(source, "conv", filename, cfg, itype)


def kernel_source(itype: str, cfg: TcConfig, bias: bool = False, nhwc_out: bool = False) -> str:
    """The generated source of one kernel (for reading and debugging)."""
    return pipeline_source(TcConfig(*cfg).validate(itype), itype, GatherA(), _store(itype, bias, nhwc_out),
                           "conv")


def conv_launcher(itype: str, cfg: TcConfig, xh: Any, wt: Any, y: Any, bias: Any, *, n: int, c: int,
                  h: int, w: int, k: int, r: int, s: int, p: int, q: int, stride: tuple, padding: tuple,
                  dilation: tuple, nhwc_out: bool = False) -> Callable[[], None]:
    """A no-argument launch of the forward kernel on flat device arrays: xh [n*h*w*c] NHWC, wt
    [k*r*s*c] KRSC, y [n*k*p*q] NCHW (NHWC with ``nhwc_out``), bias [k] or None (all in the storage type
    of ``itype``); ``padding`` entries may be negative."""
    cfg = TcConfig(*cfg)
    kernel = make_tc_conv(itype, cfg, bias is not None, nhwc_out)
    m, kk = n * p * q, r * s * c
    args = (xh, wt, y, wt if bias is None else bias, U(m), U(k), U(kk), U(c), U(h), U(w), U(s), U(q),
            U(p * q), U(h * w * c), U(stride[0]), U(stride[1]), U(max(padding[0], 0)),
            U(max(padding[1], 0)), U(max(-padding[0], 0)), U(max(-padding[1], 0)), U(dilation[0]),
            U(dilation[1]))
    configured = configure(kernel, cfg, itype, args, m, k)
    return lambda: configured(*args)


# ---- layout changes -------------------------------------------------------------------------------
#: (tile edge, thread rows) of to_channels_last; on the H200 (32, 4) beat (32, 8), (32, 16), (64, 4 / 8)
#: and (16, 16) on every copy of benchmarks/transpose_bench.py or tied (results/h200/session7/call1)
TILE_GPU, TILE_SIM = (32, 4), (8, 4)


@functools.cache
def _transpose_kernel(dtype: str, tile: int, rows: int) -> Callable:
    """dst[b, j, i] = src[b, i, j'] (i < ci, else 0) over [B, ci, hw] -> [B, hw, cp], one tile x tile
    block; j' = j, or with ``flip`` > 1 the index j with its position inside each run of ``flip``
    reversed: (j // flip) * flip + flip - 1 - j % flip (dgrad's spatially flipped filter)."""
    stype, shape = np.dtype(dtype), (tile, tile + 1)  # +1: column reads hit distinct banks

    def transpose(src, dst, ci, hw, cp, flip):  # uint32 index math (launcher: sizes < 2**32)
        buf = cuda.shared.array(shape, stype)
        b = U(cuda.blockIdx.z)
        j0 = U(U(cuda.blockIdx.x) * tile)
        i0 = U(U(cuda.blockIdx.y) * tile)
        tx, ty = U(cuda.threadIdx.x), U(cuda.threadIdx.y)
        j = U(j0 + tx)
        js = j if flip <= 1 else U(U(U(j - U(j % flip)) + U(flip - 1)) - U(j % flip))
        src0 = U(U(b * ci) * hw)
        for e in range(0, tile, rows):
            i = U(U(i0 + ty) + e)
            buf[ty + e, tx] = src[U(src0 + U(U(i * hw) + js))] if i < ci and j < hw else 0
        cuda.syncthreads()
        dst0 = U(U(b * hw) * cp)
        for e in range(0, tile, rows):
            jj, i = U(U(j0 + ty) + e), U(i0 + tx)
            if jj < hw and i < cp:
                dst[U(dst0 + U(U(jj * cp) + i))] = buf[tx, ty + e]

    return runtime.jit(transpose)


def to_channels_last(src: Any, dst: Any, batch: int, channels: int, spatial: int, padded: int,
                     flip: int = 0) -> None:
    """dst [batch, spatial, padded] (flat) <- src [batch, channels, spatial] (flat), channels >= the
    source's zero-filled; ``flip`` > 1 reverses the spatial index inside each run of ``flip`` (see
    :func:`_transpose_kernel`). Any element type (bf16 as uint16). Used for the input (NCHW -> NHWC),
    the forward filter (KCRS -> KRSC: batch K, spatial R*S) and dgrad's filter (KCRS -> flipped CRSK:
    batch 1, channels K, spatial C*R*S, flip R*S)."""
    tile, rows = TILE_SIM if runtime.SIMULATOR else TILE_GPU
    if max(batch * channels, batch * padded) * spatial >= 2**32:
        raise ValueError(f"to_channels_last takes fewer than 2**32 elements a side, got batch {batch}, "
                         f"channels {channels} (padded {padded}), spatial {spatial}")
    grid = ((spatial + tile - 1) // tile, (padded + tile - 1) // tile, batch)
    if grid[1] > 65535 or grid[2] > 65535:
        raise ValueError(f"to_channels_last takes at most {65535 * tile} channels and 65535 batches (the "
                         f"grid's y and z limits), got batch {batch}, padded channels {padded}")
    _transpose_kernel(np.dtype(src.dtype).name, tile, rows)[grid, (tile, rows)](
        src, dst, U(channels), U(spatial), U(padded), U(flip))
