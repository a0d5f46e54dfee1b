"""Implicit-GEMM convolution on tensor cores: an NHWC input gathered straight into the tensor-core
pipeline (:mod:`convlab.kernels.tensor_core.warp`), KRSC weights as the dense Bt, an NCHW output (+ bias).

    y[n, k, p, q] = sum_{r, s, c} xh[n, p*sh - ph + r*dh, q*sw - pw + s*dw, c] * wt[k, r, s, c] (+ bias[k])

    GEMM  M = N*P*Q (row m = (n, p, q)),  N = K,  K = R*S*C (column kk = (r, s, c), c fastest)

A 16-byte chunk of A is 8 halves (4 fp32) of consecutive channels of one input pixel when C is a
multiple of 8 (4): every chunk start kk has one (r, s) and c = kk % C, so the whole chunk is one
``cp.async`` from xh at ((n*H + h)*W + w)*C + c, zero-filled when (h, w) falls in the padding or kk >= K.
Per copy row the kernel keeps the input position of filter tap (0, 0) and its offset, mod 2**32 (ph =
max(padding, 0) and phn = max(-padding, 0) are both non-negative parameters, so negative padding works
too, which dgrad needs); each thread tracks its chunk's (c, s, r) incrementally (:class:`GatherA`).
The epilogue writes y[n, k, pq] at (n*K + k)*P*Q + pq (NCHW), or at row*K + k (NHWC, channels-last
outputs: the GEMM's row-major C), adding bias[k] in fp32 before converting. Split-K (``tps`` > 0, grid
z = split): block z reduces k tiles [z*tps, (z+1)*tps) only and writes fp32 partials, no bias, at split z
of a [splits] x (y's layout) workspace; the caller sums them in order (``splitk.sum_partials``, which
also adds the bias) and rounds to the input type.

:func:`convlab.kernels.data.transpose.to_channels_last` makes the NHWC / KRSC operands (channels zero-padded
up to a multiple of the chunk).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from convlab.kernels.arch.intrinsics import u32 as U
from convlab.kernels.source import Writer
from convlab.kernels.tensor_core.config import ITYPES, TcConfig
from convlab.kernels.tensor_core.copy import ALoader
from convlab.kernels.tensor_core.epilogue import Store, vector_ok
from convlab.kernels.tensor_core.launch import compile_kernel, configure
from convlab.kernels.tensor_core.warp import OUT_CONVERT, km_tile_ok, pipeline_source

#: itype -> the output kind of the pipeline (outputs in the input type) and the bias load
OUT_OF = {"f16": "in", "bf16": "bf16", "tf32": "f32", "tf32x3": "f32"}
BIAS_OF = {"f16": "f32(bias[{}])", "bf16": "bf16_to_f32(bias[{}])", "tf32": "bias[{}]", "tf32x3": "bias[{}]"}
PARAMS = "X, Bt, Y, bias, M, N, K, Cin, H, W, S, Q, PQ, HWC, sh, sw, ph, pw, phn, pwn, dh, dw"


class GatherA(ALoader):
    """A[m, kk] = xh[n, p*sh - ph + r*dh, q*sw - pw + s*dw, c] from an NHWC input (see module doc);
    with ``split``, split-K: parameter ``tps`` (k tiles per split, grid z = split).

    Per copy row, once: the input row and column of filter tap (0, 0), ``ah`` = p*sh - pad_h and ``aw``,
    and the offset ``ab`` of (n, ah, aw, 0), all mod 2**32 (a tap in the padding wraps to a huge
    unsigned value, so one compare ``ah + r*dh < H`` tests both ends). Per thread, its chunk's filter
    position (ci, s, r) starts with one division and then advances by BK per k tile without any (a
    carry into s, then r). Per k tile: ``koff`` = ((r*dh)*W + s*dw)*C + ci, shared by the copies; per
    copy two adds, two compares and one add for the address."""

    params = PARAMS

    def __init__(self, split: bool = False) -> None:
        if split:
            self.params, self.k_split = PARAMS + ", tps", "tps"

    def rows(self, w: Writer, e: int, m: str, batch: str | None) -> None:
        w(f"aok{e} = {m} < M")
        w(f"mm = {m} if aok{e} else U(0)")
        w("pq = U(mm % PQ)")
        w(f"ah{e} = U(U(U(U(pq // Q) * sh) + phn) - ph)")
        w(f"aw{e} = U(U(U(U(pq % Q) * sw) + pwn) - pw)")
        w(f"ab{e} = U(U(U(mm // PQ) * HWC) + U(U(U(ah{e} * W) + aw{e}) * Cin))")

    def start(self, w: Writer, kk: str) -> None:
        w(f"ci = U({kk} % Cin)  # this thread's first chunk: channel, filter column and row")
        w(f"rs = U({kk} // Cin)")
        w("si = U(rs % S)")
        w("ds = U(si * dw)")
        w("dr = U(U(rs // S) * dh)")

    def ktile(self, w: Writer, k0: str, kk: str) -> None:
        w("koff = U(U(U(U(dr * W) + ds) * Cin) + ci)")

    def chunk(self, e: int, kk: str, k_ok: str) -> tuple[str, str]:
        return f"aok{e} and {k_ok} and U(ah{e} + dr) < H and U(aw{e} + ds) < W", f"U(ab{e} + koff)"

    def advance(self, w: Writer, bk: int) -> None:
        w(f"ci = U(ci + {bk})  # the next k tile: carry into s, then r")
        with w.block("while ci >= Cin:"):
            w("ci = U(ci - Cin)")
            w("si = U(si + 1)")
            w("ds = U(ds + dw)")
            with w.block("if si == S:"):
                w("si = U(0)")
                w("ds = U(0)")
                w("dr = U(dr + dh)")


class NchwA(ALoader):
    """A[m, c] = x[n, c, pq] (m = n*P*Q + pq) of a 1x1, stride-1, unpadded convolution, read straight
    from the NCHW input (no NHWC copy): A is m-contiguous (the pipeline's ``a_km``), a 16-byte chunk is
    EPC pixels of one channel (8 halves, 4 floats), so P*Q must be a multiple of EPC and x 16-byte
    aligned; C must be a multiple of EPC too (the weights' k-contiguous chunks; k rows past C in the
    last k tile are zero-filled). With ``split``, split-K as :class:`GatherA`."""

    params = "X, Bt, Y, bias, M, N, K, PQ, CPQ"
    a_km = True

    def __init__(self, split: bool = False) -> None:
        if split:
            self.params, self.k_split = self.params + ", tps", "tps"

    def km_cols(self, w: Writer, m: str) -> None:
        w(f"amok = {m} < M")
        w(f"mm = {m} if amok else U(0)")
        w("ax = U(U(U(mm // PQ) * CPQ) + U(mm % PQ))  # x[n, 0, pq] of the chunk's first pixel")

    def km_chunk(self, e: int, k0: str, k_row: str) -> tuple[str, str]:
        return f"amok and U({k0} + {k_row}) < K", f"U(ax + U(U({k0} + {k_row}) * PQ))"


class NchwStore(Store):
    """y[n, col, pq] (flat NCHW) = value (+ bias[col]), converted to the output type; with ``partial``
    (split-K) the fp32 value unchanged at part[z] (z = blockIdx.z, each part M*N elements, no bias).
    Contiguous along the GEMM's rows (pixels of one image)."""

    contig, array = "m", "Y"
    #: the flat offset of (row, col) from the row's ``yb``; the row's ``yb`` (``{0}``: the row)
    step = "U(yb + U({} * PQ))"
    base = "yb = U(U(U({0} // PQ) * U(N * PQ)) + U({0} % PQ))"

    def __init__(self, itype: str, bias: bool, partial: bool = False) -> None:
        self.convert = "{}" if partial else OUT_CONVERT[OUT_OF[itype]]
        self.bias, self.partial = None if partial or not bias else BIAS_OF[itype], partial
        self.dtype = np.float32 if partial else ITYPES[itype][0]  # the input's storage type

    def row(self, w: Writer, row: str, batch: str | None) -> None:
        w(self.base.format(row))
        if self.partial:  # split z = grid z
            w("yb = U(yb + U(U(cuda.blockIdx.z) * U(M * N)))")

    def addr(self, col: str) -> str:
        return self.step.format(col)

    def value(self, col: str, v: str) -> str:
        if self.bias:
            v = f"{v} + {self.bias.format(col)}"
        return self.convert.format(v)


class NhwcStore(NchwStore):
    """y[row, col] (flat NHWC: row = (n, p, q), col = output channel) = value (+ bias[col])."""

    contig = "n"
    step = "U(yb + {})"
    base = "yb = U({0} * N)"


def _source(itype: str, cfg: TcConfig, bias: bool, nhwc_out: bool, split: bool, nchw_in: bool) -> str:
    if split and bias:
        raise ValueError("split-K kernels write fp32 partials without bias (added after the sum)")
    store = (NhwcStore if nhwc_out else NchwStore)(itype, bias, split)
    loader = NchwA(split) if nchw_in else GatherA(split)
    return pipeline_source(TcConfig(*cfg).validate(itype), itype, loader, store, "conv")


@functools.cache
def make_tc_conv(itype: str, cfg: TcConfig, bias: bool, nhwc_out: bool = False,
                 split: bool = False, nchw_in: bool = False) -> Callable:
    """The kernel (X, Bt, Y, bias, M, N, K, geometry... [, tps], vec) of one input type, config, bias
    flag, output layout, split-K flag and input read.

    X: NHWC input, flat (``nchw_in``: the NCHW input of a 1x1 stride-1 unpadded layer, :class:`NchwA`);
    Bt: [K_out, R*S*C] weights, flat; Y: NCHW output (NHWC with ``nhwc_out``), flat, in the input type
    (bf16 as uint16 bits); bias: [K_out] (a 1-element dummy when ``bias`` is False). ``split``: grid z =
    split, k tiles [z*tps, (z+1)*tps) each, Y float32 [splits, y's layout] partials.
    """
    cfg = TcConfig(*cfg).validate(itype)
    filename = f"<convlab.kernels.tensor_core.conv {itype} {cfg.name} bias={bias} nhwc_out={nhwc_out}" + \
        (" split" if split else "") + (" nchw_in>" if nchw_in else ">")
    return compile_kernel(_source(itype, cfg, bias, nhwc_out, split, nchw_in), "conv", filename, cfg, itype)


def kernel_source(itype: str, cfg: TcConfig, bias: bool = False, nhwc_out: bool = False,
                  split: bool = False, nchw_in: bool = False) -> str:
    """The generated source of one kernel (for reading and debugging)."""
    return _source(itype, cfg, bias, nhwc_out, split, nchw_in)


def reads_nchw(itype: str, x: Any, *, c: int, h: int, w: int, r: int, s: int, stride: tuple,
               padding: tuple, bm: int) -> bool:
    """Whether the forward kernel with BM-row tiles can read the NCHW input ``x`` (a device array) as it
    is (:class:`NchwA`): a 1x1 filter, stride 1, no padding, H*W a whole number of 16-byte chunks (8
    pixels of 16-bit types, 4 of TF32) and C too (the weights' chunks), x 16-byte aligned, and a tile
    whose m-contiguous rows can be swizzled (``copy.km_tile_ok``)."""
    size = ITYPES[itype][1]
    epc = 16 // size
    return r == s == 1 and tuple(stride) == (1, 1) and tuple(padding) == (0, 0) and (h * w) % epc == 0 \
        and c % epc == 0 and km_tile_ok(bm, size) and vector_ok(x)


def conv_launcher(itype: str, cfg: TcConfig, xh: Any, wt: Any, y: Any, bias: Any, *, n: int, c: int,
                  h: int, w: int, k: int, r: int, s: int, p: int, q: int, stride: tuple, padding: tuple,
                  dilation: tuple, nhwc_out: bool = False, tps: int = 0,
                  nchw_in: bool = False) -> Callable[[], None]:
    """A no-argument launch of the forward kernel on flat device arrays: xh [n*h*w*c] NHWC (``nchw_in``:
    [n*c*h*w] NCHW, :func:`reads_nchw`), wt [k*r*s*c] KRSC, y [n*k*p*q] NCHW (NHWC with ``nhwc_out``),
    bias [k] or None (all in the storage type of ``itype``); ``padding`` entries may be negative.
    ``tps`` > 0: split-K, tps k tiles (of BK) per split, y float32 [splits * n*k*p*q] (split-major
    partials in y's layout, for :func:`convlab.kernels.data.splitk.sum_partials`), bias None."""
    cfg = TcConfig(*cfg)
    kernel = make_tc_conv(itype, cfg, bias is not None, nhwc_out, tps > 0, nchw_in)
    m, kk = n * p * q, r * s * c
    splits = split_count(kk, cfg.BK, tps) if tps > 0 else 1
    head = (xh, wt, y, wt if bias is None else bias, U(m), U(k), U(kk))
    if nchw_in:
        args = head + (U(p * q), U(c * p * q))
    else:
        args = head + (U(c), U(h), U(w), U(s), U(q), U(p * q), U(h * w * c), U(stride[0]), U(stride[1]),
                       U(max(padding[0], 0)), U(max(padding[1], 0)), U(max(-padding[0], 0)),
                       U(max(-padding[1], 0)), U(dilation[0]), U(dilation[1]))
    args += (U(tps),) if tps > 0 else ()
    vec = vector_ok(y, k) if nhwc_out else vector_ok(y, p * q)
    configured = configure(kernel, cfg, itype, args + (vec,), m, k, splits, out_dtype=y.dtype,
                           contig="n" if nhwc_out else "m")
    return lambda: configured(*args, vec)


def split_count(kk: int, bk: int, tps: int) -> int:
    """Splits of a reduction of ``kk`` elements cut into runs of ``tps`` k tiles of ``bk``."""
    ktiles = -(-kk // bk)
    return max(1, -(-ktiles // tps))
