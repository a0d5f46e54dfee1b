"""Implicit-GEMM convolution on tensor cores: a channels-last input (NHWC, 3D: NDHWC) gathered straight
into the tensor-core pipeline (:mod:`convlab.kernels.tensor_core.warp`), KRSC (KTRSC) weights as the dense
Bt, an NCHW (NCDHW) output (+ bias).

    y[n, k, p, q] = sum_{r, s, c} xh[n, p*sh - ph + r*dh, q*sw - pw + s*dw, c] * wt[k, r, s, c] (+ bias[k])

    GEMM  M = N*P*Q (row m = (n, p, q)),  N = K,  K = R*S*C (column kk = (r, s, c), c fastest)

The gather is one N-d index map, generated for 2 or 3 spatial dimensions (3D: m = (n, o, p, q), kk =
(t, r, s, c), the depth o*sd - pd + t*dd in front of the height). A 16-byte chunk of A is 8 halves
(4 fp32) of consecutive channels of one input pixel when C is a multiple of 8 (4): every chunk start kk
has one filter tap and c = kk % C, so the whole chunk is one ``cp.async`` from xh at ((n*H + h)*W + w)*C
+ c (3D: (((n*D + z)*H + h)*W + w)*C + c), zero-filled when the pixel falls in the padding or kk >= K.
Per copy row the kernel keeps the input position of filter tap 0 on each axis and its offset, mod 2**32
(ph = max(padding, 0) and phn = max(-padding, 0) are both non-negative parameters, so negative padding
works too, which dgrad needs); each thread tracks its chunk's (c, s, r(, t)) incrementally
(:class:`GatherA`).
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
import math
from typing import Any, Callable, NamedTuple

import numpy as np

from convlab import runtime
from convlab.kernels.arch.intrinsics import u32 as U
from convlab.kernels.source import Writer
from convlab.kernels.tensor_core.config import ITYPES, TcConfig
from convlab.kernels.tensor_core.copy import ALoader
from convlab.epilogue import Epilogue
from convlab.kernels.epilogue import EpilogueOperands, register_cache
from convlab.kernels.tensor_core.epilogue import vector_ok
from convlab.kernels.tensor_core.launch import compile_kernel, configure
from convlab.kernels.tensor_core.stores import fused_namespace, store_for
from convlab.kernels.tensor_core.warp import km_tile_ok, pipeline_source

PARAMS = "X, Bt, Y, bias, M, N, K, Cin, H, W, S, Q, PQ, HWC, sh, sw, ph, pw, phn, pwn, dh, dw"
#: what a 3D gather adds after PARAMS: the depth D, the filter's R, an output slice's P*Q, and the depth
#: stride, padding (both signs) and dilation (PQ and HWC count the whole volume there: Do*P*Q, D*H*W*C)
DEPTH_PARAMS = ", D, R, PQs, sd, pd, pdn, dd"


class Axis(NamedTuple):
    """One spatial axis as the generated lines name it: the row's start ``a{name}{e}``, the input bound,
    the output pixels in one of its steps (None for the last axis), stride, padding (both signs), the
    chunk's tap index and offset, the dilation and the filter size."""

    name: str
    bound: str
    inner: str | None
    stride: str
    pad: str
    padn: str
    tap: str
    off: str
    dil: str
    size: str


#: the axes of a 2D gather (height, width) and the depth axis a 3D one puts in front
HW_AXES = (Axis("h", "H", "Q", "sh", "ph", "phn", "ri", "dr", "dh", "R"),
           Axis("w", "W", None, "sw", "pw", "pwn", "si", "ds", "dw", "S"))
DEPTH_AXIS = Axis("d", "D", "PQs", "sd", "pd", "pdn", "ti", "dt", "dd", "T")


class GatherA(ALoader):
    """A[m, kk] = xh[n, p*sh - ph + r*dh, q*sw - pw + s*dw, c] from an NHWC input (see module doc), or
    with ``nd`` = 3 from an NDHWC one; with ``split``, split-K: parameter ``tps`` (k tiles per split,
    grid z = split).

    Per copy row, once: the input position of filter tap 0 on each axis, ``ah`` = p*sh - pad_h and
    ``aw`` (3D: ``ad`` first), and the offset ``ab`` of (n, ah, aw, 0), all mod 2**32 (a tap in the
    padding wraps to a huge unsigned value, so one compare ``ah + r*dh < H`` tests both ends). Per
    thread, its chunk's filter position (ci, s, r(, t)) starts with one division per axis and then
    advances by BK per k tile without any (a carry into s, then r, then t). Per k tile: ``koff`` =
    ((r*dh)*W + s*dw)*C + ci (3D: (((t*dd)*H + r*dh)*W + s*dw)*C + ci), shared by the copies; per copy
    an add and a compare per axis and one add for the address."""

    params = PARAMS

    def __init__(self, split: bool = False, nd: int = 2) -> None:
        if nd not in (2, 3):
            raise ValueError(f"the gather takes 2 or 3 spatial dimensions, got {nd}")
        self.axes = ((DEPTH_AXIS,) if nd == 3 else ()) + HW_AXES
        self.params = PARAMS + (DEPTH_PARAMS if nd == 3 else "")
        if split:
            self.params, self.k_split = self.params + ", tps", "tps"

    def rows(self, w: Writer, e: int, m: str, batch: str | None) -> None:
        w(f"aok{e} = {m} < M")
        w(f"mm = {m} if aok{e} else U(0)")
        w("pq = U(mm % PQ)")
        last = len(self.axes) - 1
        for i, ax in enumerate(self.axes):  # pq's position along each axis, the last one fastest
            pos = f"U(pq % {self.axes[i - 1].inner})" if i == last else f"U(pq // {ax.inner})"
            w(f"a{ax.name}{e} = U(U(U({pos} * {ax.stride}) + {ax.padn}) - {ax.pad})")
            if i < last - 1:  # an outer axis: what remains of pq for the next ones
                w(f"pq = U(pq % {ax.inner})")
        w(f"ab{e} = U(U(U(mm // PQ) * HWC) + U({self._flat([f'a{ax.name}{e}' for ax in self.axes])} * Cin))")

    def _flat(self, parts: list[str]) -> str:
        """The flat offset of per-axis positions ``parts`` within one image (sizes D, H, W)."""
        expr = parts[0]
        for ax, part in zip(self.axes[1:], parts[1:]):
            expr = f"U(U({expr} * {ax.bound}) + {part})"
        return expr

    def start(self, w: Writer, kk: str) -> None:
        w(f"ci = U({kk} % Cin)  # this thread's first chunk: channel, filter column and row")
        w(f"rs = U({kk} // Cin)")
        inner = self.axes[::-1]  # the tap index is (.., r, s): the width's tap fastest
        quotient = "rs"
        for ax in inner[:-1]:
            w(f"{ax.tap} = U({quotient} % {ax.size})")
            w(f"{ax.off} = U({ax.tap} * {ax.dil})")
            quotient = f"U({quotient} // {ax.size})"
        w(f"{inner[-1].off} = U({quotient} * {inner[-1].dil})")

    def ktile(self, w: Writer, k0: str, kk: str) -> None:
        w(f"koff = U(U({self._flat([ax.off for ax in self.axes])} * Cin) + ci)")

    def chunk(self, e: int, kk: str, k_ok: str) -> tuple[str, str]:
        inside = " and ".join(f"U(a{ax.name}{e} + {ax.off}) < {ax.bound}" for ax in self.axes)
        return f"aok{e} and {k_ok} and {inside}", f"U(ab{e} + koff)"

    def advance(self, w: Writer, bk: int) -> None:
        w(f"ci = U(ci + {bk})  # the next k tile: carry into s, then r" + (", then t" if len(self.axes) > 2 else ""))
        with w.block("while ci >= Cin:"):
            w("ci = U(ci - Cin)")
            self._carry(w, self.axes[::-1])

    def _carry(self, w: Writer, inner: tuple[Axis, ...]) -> None:
        """Lines stepping the tap of ``inner[0]`` (the axes from the fastest), carrying into the next."""
        ax = inner[0]
        if len(inner) == 1:
            w(f"{ax.off} = U({ax.off} + {ax.dil})")
            return
        w(f"{ax.tap} = U({ax.tap} + 1)")
        w(f"{ax.off} = U({ax.off} + {ax.dil})")
        with w.block(f"if {ax.tap} == {ax.size}:"):
            w(f"{ax.tap} = U(0)")
            w(f"{ax.off} = U(0)")
            self._carry(w, inner[1:])


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


def _source(itype: str, cfg: TcConfig, bias: bool, nhwc_out: bool, split: bool, nchw_in: bool, nd: int,
            epi: Epilogue | None = None, phase: bool = False) -> str:
    if split and bias:
        raise ValueError("split-K kernels write fp32 partials without bias (added after the sum)")
    store = store_for(itype, bias, nhwc_out, split, epi, phase)
    loader = NchwA(split) if nchw_in else GatherA(split, nd)
    return pipeline_source(TcConfig(*cfg).validate(itype), itype, loader, store, "conv")


@functools.cache
def make_tc_conv(itype: str, cfg: TcConfig, bias: bool, nhwc_out: bool = False,
                 split: bool = False, nchw_in: bool = False, nd: int = 2, epi: Epilogue | None = None,
                 phase: bool = False) -> Callable:
    """The kernel (X, Bt, Y, bias, M, N, K, geometry... [, tps][, ep_r, ep_scale, ep_shift], vec) of one input
    type, config, bias flag, output layout, split-K flag, input read, number of spatial dimensions ``nd``
    (2 or 3) and fused epilogue ``epi`` (None: none; not with ``split``; :mod:`.stores`).

    X: NHWC (NDHWC) input, flat (``nchw_in``: the NCHW input of a 1x1 stride-1 unpadded layer, any
    N, :class:`NchwA`); Bt: [K_out, R*S*C] weights, flat; Y: NCHW output (NHWC with ``nhwc_out``),
    flat, in the input type (bf16 as uint16 bits); bias: [K_out] (a 1-element dummy when ``bias`` is
    False). ``split``: grid z = split, k tiles [z*tps, (z+1)*tps) each, Y float32 [splits, y's layout]
    partials. ``phase``: Y is one stride phase of a larger output (:mod:`.stores`' phase stores, their
    parameters after the loader's), 2D, neither split nor fused.
    """
    cfg = TcConfig(*cfg).validate(itype)
    nd = 2 if nchw_in else nd  # the NCHW read of a 1x1 layer sees only pixels
    filename = f"<convlab.kernels.tensor_core.conv {itype} {cfg.name} bias={bias} nhwc_out={nhwc_out}" + \
        (" split" if split else "") + (" nchw_in" if nchw_in else "") + (" 3d" if nd == 3 else "") + \
        ("" if epi is None else f" {epi}") + (" phase" if phase else "") + ">"
    return compile_kernel(_source(itype, cfg, bias, nhwc_out, split, nchw_in, nd, epi, phase), "conv", filename,
                          cfg, itype, fused_namespace(itype, epi, nhwc_out))


register_cache(make_tc_conv.cache_clear)  # its fused kernels are built from the epilogue's code


def kernel_source(itype: str, cfg: TcConfig, bias: bool = False, nhwc_out: bool = False,
                  split: bool = False, nchw_in: bool = False, nd: int = 2, epi: Epilogue | None = None) -> str:
    """The generated source of one kernel (for reading and debugging)."""
    return _source(itype, cfg, bias, nhwc_out, split, nchw_in, nd, epi)


def reads_nchw(itype: str, x: Any, *, c: int, spatial: tuple, kernel: tuple, stride: tuple, padding: tuple,
               bm: int) -> bool:
    """Whether the forward kernel with BM-row tiles can read the NCHW (NCDHW) input ``x`` (a device array)
    as it is (:class:`NchwA`): a 1x1 (1x1x1) filter, stride 1, no padding, the pixels of an image a whole
    number of 16-byte chunks (8 pixels of 16-bit types, 4 of TF32) and C too (the weights' chunks), x
    16-byte aligned, and a tile whose m-contiguous rows can be swizzled (``copy.km_tile_ok``)."""
    size = ITYPES[itype][1]
    epc = 16 // size
    return set(kernel) == set(stride) == {1} and set(padding) == {0} and math.prod(spatial) % epc == 0 \
        and c % epc == 0 and km_tile_ok(bm, size) and vector_ok(x)


def conv_launcher(itype: str, cfg: TcConfig, xh: Any, wt: Any, y: Any, bias: Any, *, n: int, c: int, k: int,
                  spatial: tuple, kernel: tuple, out: tuple, stride: tuple, padding: tuple, dilation: tuple,
                  nhwc_out: bool = False, tps: int = 0, nchw_in: bool = False,
                  epilogue: EpilogueOperands | None = None, phase: tuple | None = None) -> Callable[[], None]:
    """A no-argument launch of the forward kernel on flat device arrays, 2 or 3 spatial dimensions
    (``spatial`` (H, W) or (D, H, W), ``kernel`` and ``out`` alike, one stride / padding / dilation per
    axis): xh [n*h*w*c] NHWC (NDHWC; ``nchw_in``: [n*c*h*w] NCHW, :func:`reads_nchw`), wt [k*r*s*c]
    KRSC (KTRSC), y [n*k*p*q] NCHW (NHWC with ``nhwc_out``), bias [k] or None (all in the storage type
    of ``itype``); ``padding`` entries may be negative. ``tps`` > 0: split-K, tps k tiles (of BK) per
    split, y float32 [splits * n*k*p*q] (split-major partials in y's layout, for
    :func:`convlab.kernels.data.splitk.sum_partials`), bias None. ``epilogue``: fused into the store (not
    with ``tps``), its residual in y's layout. ``phase`` (2D, no split, no epilogue): (OH, OW, osh, osw,
    ofh, ofw), y is [n*k*OH*OW] (NHWC: [n*OH*OW*k]) and output pixel (p, q) goes to (ofh + osh*p, ofw +
    osw*q) of it."""
    cfg = TcConfig(*cfg)
    nd = len(spatial)
    if not (nd in (2, 3) and len(kernel) == len(out) == len(stride) == len(padding) == len(dilation) == nd):
        raise ValueError(f"spatial {spatial}, kernel {kernel}, out {out}, stride {stride}, padding {padding} and "
                         f"dilation {dilation} must have 2 or 3 entries each, one per axis")
    epi = None if epilogue is None else epilogue.epilogue
    if phase is not None and (nd != 2 or tps > 0 or epi is not None or nchw_in):
        raise ValueError("a phase store is 2D, with neither split-K, a fused epilogue nor the NCHW read")
    kern = make_tc_conv(itype, cfg, bias is not None, nhwc_out, tps > 0, nchw_in, nd, epi,
                        **({} if phase is None else {"phase": True}))  # one cache key per kernel
    px = math.prod(out)
    m, kk = n * px, math.prod(kernel) * c
    splits = split_count(kk, cfg.BK, tps) if tps > 0 else 1
    head = (xh, wt, y, wt if bias is None else bias, U(m), U(k), U(kk))
    (h, w), (s,), q = spatial[-2:], kernel[-1:], out[-1]
    if nchw_in:
        args = head + (U(px), U(c * px))
    else:
        args = head + (U(c), U(h), U(w), U(s), U(q), U(px), U(math.prod(spatial) * c), U(stride[-2]),
                       U(stride[-1]), U(max(padding[-2], 0)), U(max(padding[-1], 0)), U(max(-padding[-2], 0)),
                       U(max(-padding[-1], 0)), U(dilation[-2]), U(dilation[-1]))
        if nd == 3:  # DEPTH_PARAMS
            args += (U(spatial[0]), U(kernel[1]), U(out[1] * out[2]), U(stride[0]), U(max(padding[0], 0)),
                     U(max(-padding[0], 0)), U(dilation[0]))
    args += (U(tps),) if tps > 0 else ()
    if epilogue is not None:  # no residual: y stands in (never read)
        args += (y if epilogue.residual is None else epilogue.residual, epilogue.scale, epilogue.shift)
    if phase is not None:  # PHASE_PARAMS
        oh, ow, osh, osw, ofh, ofw = phase
        args += (U(oh), U(ow), U(oh * ow), U(osh), U(osw), U(ofh), U(ofw))
    vec = vector_ok(y, k) if nhwc_out else vector_ok(y, px)  # an NCHW phase store has no vector write-out
    if epilogue is not None and epilogue.residual is not None:  # read 16 bytes at a time beside y's stores
        vec = vec and runtime.is_aligned(epilogue.residual)
    configured = configure(kern, cfg, itype, args + (vec,), m, k, splits,
                           out_dtype=y.dtype if epi is None else np.float32, contig="n" if nhwc_out else "m")
    return lambda: configured(*args, vec)


def split_count(kk: int, bk: int, tps: int) -> int:
    """Splits of a reduction of ``kk`` elements cut into runs of ``tps`` k tiles of ``bk``."""
    ktiles = -(-kk // bk)
    return max(1, -(-ktiles // tps))
