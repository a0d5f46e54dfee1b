"""The tensor-core convolution's stores (:class:`convlab.kernels.tensor_core.epilogue.Store`): its NCHW or
NHWC output in the input type with the bias, or split-K's float32 partials, and either output with an
epilogue (convlab.epilogue) fused into the write-out.

    NchwStore   y[n, col, pq] at (n*K + col)*P*Q + pq     rows (pixels) contiguous: contig "m"
    NhwcStore   y[row, col]   at row*K + col              columns (channels) contiguous: contig "n"
    PhaseNchwStore, PhaseNhwcStore: the same into one stride phase of a larger output, pixel (i, j) of the
                the GEMM's P x Q at (ofh + osh*i, ofw + osw*j) of y's OH x OW (a strided dgrad's phase)

A fused store (``epi``) stages acc + bias in float32 and writes each element through ``fput`` (16 bytes
of them through ``fputv`` where the output and the residual are aligned)
(:func:`convlab.kernels.epilogue.fused_store` of the output dtype and epilogue, the one definition of its
arithmetic): channel ``col`` (the GEMM column is the output channel, forward and stride-1 dgrad alike),
the residual read at the element's own offset (so it has the output's layout), ``scale`` and
``shift`` per channel; the kernel takes them (``ep_r, ep_scale, ep_shift``) after the loader's parameters.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from convlab.epilogue import Epilogue
from convlab.kernels.epilogue import fused_store, fused_store_vector
from convlab.kernels.source import Writer
from convlab.kernels.tensor_core.config import ITYPES
from convlab.kernels.tensor_core.epilogue import Store
from convlab.kernels.tensor_core.warp import OUT_CONVERT

#: itype -> the output kind of the pipeline (outputs in the input type) and the bias load
OUT_OF = {"f16": "in", "bf16": "bf16", "tf32": "f32", "tf32x3": "f32"}
BIAS_OF = {"f16": "f32(bias[{}])", "bf16": "bf16_to_f32(bias[{}])", "tf32": "bias[{}]", "tf32x3": "bias[{}]"}
#: itype -> the dtype name of its outputs (the epilogue's: convlab.kernels.epilogue)
DTYPE_OF = {"f16": "float16", "bf16": "bfloat16", "tf32": "float32", "tf32x3": "float32"}
#: the kernel parameters a fused epilogue adds (EpilogueOperands' residual, scale and shift)
FUSED_PARAMS = ", ep_r, ep_scale, ep_shift"


class NchwStore(Store):
    """y[n, col, pq] (flat NCHW) = value (+ bias[col]), converted to the output type; with ``partial``
    (split-K) the fp32 value unchanged at part[z] (z = blockIdx.z, each part M*N elements, no bias);
    with ``epi`` (not with ``partial``) the epilogue applied as it is stored (module doc).
    Contiguous along the GEMM's rows (pixels of one image)."""

    contig, array = "m", "Y"
    #: the flat offset of (row, col) from the row's ``yb``; the row's ``yb`` (``{0}``: the row)
    step = "U(yb + U({} * PQ))"
    base = "yb = U(U(U({0} // PQ) * U(N * PQ)) + U({0} % PQ))"

    def __init__(self, itype: str, bias: bool, partial: bool = False, epi: Epilogue | None = None) -> None:
        if partial and epi is not None:
            raise ValueError("split-K partials take no epilogue (the sum of the partials applies it)")
        staged_f32 = partial or epi is not None
        self.convert = "{}" if staged_f32 else OUT_CONVERT[OUT_OF[itype]]
        self.bias, self.partial = None if partial or not bias else BIAS_OF[itype], partial
        self.dtype = np.float32 if staged_f32 else ITYPES[itype][0]  # Cs: the input's storage type, or fp32
        if epi is not None:
            self.params = FUSED_PARAMS
            self.put = f"fput({self.array}, {{}}, Cs[{{}}], col, (ep_r, ep_scale, ep_shift))"
            self.put_vector = f"fputv({self.array}, {{}}, Cs, {{}}, col, (ep_r, ep_scale, ep_shift))"
            self.put_width = put_width(itype)

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


#: the kernel parameters a phase store adds: y's height, width and pixels, the phase's steps and offsets
PHASE_PARAMS = ", OH, OW, OHW, osh, osw, ofh, ofw"


class _PhaseRows:
    """The rows of a phase store: ``pn``, the image of GEMM row ``row``, and ``px``, its pixel in y, (ofh +
    osh*i)*OW + ofw + osw*j for the phase pixel (i, j) of the P x Q rows of an image (PQ, Q: the gather's
    parameters); then the row's base ``yb`` (the class's line)."""

    base_line = ""

    def __init__(self, itype: str, bias: bool) -> None:
        super().__init__(itype, bias)  # type: ignore[call-arg]  (the store it is mixed into)
        self.params = PHASE_PARAMS

    def row(self, w: Writer, row: str, batch: str | None) -> None:
        w(f"pn = U({row} // PQ)")
        w(f"pr = U({row} - U(pn * PQ))")
        w("pi = U(pr // Q)")
        w("px = U(U(U(ofh + U(osh * pi)) * OW) + U(ofw + U(osw * U(pr - U(pi * Q)))))")
        w(self.base_line)


class PhaseNchwStore(_PhaseRows, NchwStore):
    """:class:`NchwStore` into one stride phase of y [n, col, OH, OW]: rows (pixels) osh / osw apart, so
    the write-out goes element by element (no vector write-out is generated)."""

    step = "U(yb + U({} * OHW))"
    vectors = False
    base_line = "yb = U(U(pn * U(N * OHW)) + px)"


class PhaseNhwcStore(_PhaseRows, NhwcStore):
    """:class:`NhwcStore` into one stride phase of y [n, OH, OW, col]: a row's channels stay contiguous."""

    base_line = "yb = U(U(U(pn * OHW) + px) * N)"


def store_for(itype: str, bias: bool, nhwc_out: bool, split: bool, epi: Epilogue | None,
              phase: bool = False) -> Store:
    """The store of a convolution kernel: NHWC or NCHW, split-K partials, a fused epilogue, or (``phase``:
    neither split nor fused) one stride phase of a larger output."""
    if phase:
        if split or epi is not None:
            raise ValueError("a phase store takes neither split-K partials nor a fused epilogue")
        return (PhaseNhwcStore if nhwc_out else PhaseNchwStore)(itype, bias)
    return (NhwcStore if nhwc_out else NchwStore)(itype, bias, split, epi)


def put_width(itype: str) -> int:
    """Output elements in 16 bytes: a fused store's vector write-out (``put_vector``)."""
    return 16 // ITYPES[itype][1]


def fused_namespace(itype: str, epi: Epilogue | None, nhwc_out: bool) -> dict[str, Any]:
    """The names a fused store's lines use (``fput``; ``fputv``, 16 bytes along the output's contiguous
    dimension: channels for NHWC, pixels of one channel for NCHW); none without an epilogue."""
    if epi is None:
        return {}
    dtype = DTYPE_OF[itype]
    return {"fput": fused_store(dtype, epi),
            "fputv": fused_store_vector(dtype, epi, put_width(itype), 1 if nhwc_out else 0)}
