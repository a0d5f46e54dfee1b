"""The tensor-core plugin's gather route: forward and stride-1 dgrad as one implicit GEMM over a
channels-last input, 2D or 3D (:mod:`convlab.kernels.tensor_core.conv`).

    forward  x NCHW -> NHWC (3D: NCDHW -> NDHWC), w KCRS -> KRSC        y = conv(xh, wt) (+ bias)
    dgrad    dy NCHW -> NHWC, w -> flipped CRSK, padding dil*(R-1) - pad  dx = conv(dyh, wt) (+ bias)

:func:`geometry` gives the forward convolution the kernel runs (dgrad's: of dy with the spatially flipped,
K<->C transposed filter), one entry per spatial axis; :func:`split_k` its split of the reduction;
:func:`run_gather` the layout copies (none for a channels-last input whose channels need no padding, a
channels-last or 1x1 forward filter, an NCHW input of a 1x1 stride-1 unpadded layer) and the launches;
with an epilogue, the kernel's store applies it (:mod:`convlab.kernels.tensor_core.stores`), or with
split-K the ordered sum of the partials (:mod:`convlab.kernels.splitk_epilogue`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from convlab import runtime
from convlab.kernels.conv.axes import ForwardGeometry
from convlab.kernels.data import convert, layouts, transpose
from convlab.kernels.data.splitk import MAX_INDEX, sum_partials
from convlab.kernels.epilogue import EpilogueOperands
from convlab.kernels.splitk_epilogue import sum_partials_fused
from convlab.kernels.tensor_core import conv as tc_conv
from convlab.kernels.tensor_core.config import TcConfig
from convlab.problem import Problem, np_dtype
from convlab.runtime.scratch import scratch
from convlab.runtime.targets import Target

ALIGN = {"float16": 8, "bfloat16": 8, "float32": 4}  # channels per 16-byte chunk
NCHW = frozenset({"nchw"})  # what operands_for copies channels-last operands into
#: reduction elements a split keeps at least (1 on the simulator, so that its tiny problems split): on
#: the H200 (results/tc_conv/h200/720ef48, splits of 256+) the sum and rounding passes cost 10-40 us,
#: which splits of a 512- to 1152-long reduction (ResNet-50's c3 / c5 1x1 and c3 3x3 layers) mostly
#: lost, while those of 2048 and longer (c4 / c5 3x3, Burn's deep layers) gained, up to 2x
MIN_SPLIT_K_GPU, MIN_SPLIT_K_SIM = 1024, 1


def padded(channels: int, dtype: str) -> int:
    """Channels rounded up to whole 16-byte chunks (8 fp16/bf16, 4 fp32)."""
    return -(-channels // ALIGN[dtype]) * ALIGN[dtype]


def geometry(problem: Problem) -> ForwardGeometry:
    """The forward geometry the kernel runs, over all of the problem's axes (2 or 3, depth first): the
    problem's own (forward), or a stride-1 dgrad's as a forward of dy, its padding negative where the
    gather starts inside dy (the gather works in padded coordinates)."""
    return ForwardGeometry.of(problem)


def gathered(problem: Problem) -> dict:
    """:func:`geometry` as a dict for readers that name the 2D axes: its fields, and h, w, r, s, p, q with a
    3D problem's depth folded into the height (h = D*H, r = T*R, p = Do*P: the products a GEMM view
    counts, M = n*p*q, K = r*s*c, the input n*h*w*c)."""
    geo = geometry(problem)
    (h, w), (r, s), (p, q) = ((math.prod(v[:-1]), v[-1]) for v in (geo.size, geo.kernel, geo.out))
    return dict(dataclasses.asdict(geo), h=h, w=w, r=r, s=s, p=p, q=q)


def split_k(problem: Problem, cfg: TcConfig, target: Target) -> tuple[int, int]:
    """(splits, k tiles per split) of a forward / dgrad on ``target``: as many splits as fill twice the
    SMs with blocks when the output tiles alone do not, each at least MIN_SPLIT_K reduction elements
    long, the partials within 32-bit indexing; (1, all k tiles) when not split."""
    geo = geometry(problem)
    m, n = geo.m, geo.k
    ktiles = math.ceil(geo.taps * padded(geo.c, problem.dtype) / cfg.BK)
    tiles = math.ceil(m / cfg.BM) * math.ceil(n / cfg.BN)
    least = MIN_SPLIT_K_SIM if target.simulator else MIN_SPLIT_K_GPU
    per_split = max(1, math.ceil(least / cfg.BK))
    splits = min(math.ceil(2 * target.sm_count / tiles), ktiles // per_split, MAX_INDEX // (m * n))
    if splits < 2:
        return 1, ktiles
    tps = math.ceil(ktiles / splits)
    return math.ceil(ktiles / tps), tps


def split_f32(problem: Problem, splits: int) -> int:
    """float32 elements of the split-K workspace: the partials (0 when not split)."""
    geo = geometry(problem)
    return 0 if splits == 1 else splits * geo.m * geo.k


def fits(problem: Problem) -> bool:
    """Whether the channel-padded channels-last copy stays within 32-bit indexing."""
    geo = geometry(problem)
    return geo.input_pixels * padded(geo.c, problem.dtype) <= MAX_INDEX


def workspace_elements(problem: Problem, cfg: TcConfig, target: Target) -> tuple[int, int]:
    """(elements in the storage type, float32 elements): the channels-last input and reordered filter
    (channels padded), and the split-K partials."""
    geo = geometry(problem)
    cp = padded(geo.c, problem.dtype)
    return (geo.input_pixels + geo.k * geo.taps) * cp, split_f32(problem, split_k(problem, cfg, target)[0])


def run_gather(problem: Problem, itype: str, cfg: TcConfig, config_wgmma: bool, a, b, bias, out,
               epilogue: EpilogueOperands | None = None) -> None:
    """Forward or stride-1 dgrad: a, b, out device arrays (4-D or 5-D, C-contiguous or channels-last),
    bias 1-D or None; ``config_wgmma``: a warpgroup config (it reads A K-major: no NCHW read);
    ``epilogue``: fused (its residual in out's layout), into the store or the split-K sum."""
    geo = geometry(problem)
    c, k, taps = geo.c, geo.k, geo.taps
    vox = math.prod(geo.size)
    cp = padded(c, problem.dtype)
    # operands the kernel reads as they are: a channels-last gathered input (NHWC / NDHWC) and forward
    # filter (KRSC; a 1x1 filter in either layout), when no channel padding is needed; the output in
    # either layout
    a_last, b_last = layouts.is_channels_last(a), layouts.is_channels_last(b)
    x_as_is = a_last and cp == c and runtime.is_aligned(a)  # cp.async reads 16 aligned bytes
    # a 1x1 stride-1 unpadded forward (dgrad) reads its NCHW x (dy) as it is (tc_conv.NchwA)
    nchw_in = not a_last and not config_wgmma and \
        tc_conv.reads_nchw(itype, a, c=c, spatial=geo.size, kernel=geo.kernel, stride=geo.stride,
                           padding=geo.padding, bm=cfg.BM)  # wgmma reads A K-major: NHWC
    # a 1x1 filter's KCRS memory is already KRSC
    w_as_is = problem.op == "forward" and cp == c and (b_last or taps == 1) and runtime.is_aligned(b)
    nhwc_out = layouts.is_channels_last(out)
    copy_x = (a,) if a_last and not x_as_is else ()  # to NCHW scratch first (operands_for)
    copy_w = (b,) if b_last and not w_as_is else ()
    store = runtime.kernel_dtype(np_dtype(problem.dtype))
    nx, nw = (0 if x_as_is or nchw_in else geo.input_pixels * cp), (0 if w_as_is else k * taps * cp)
    with layouts.operands_for(NCHW, copy_x, out_index=None) as nchw_x, \
            layouts.operands_for(NCHW, copy_w, out_index=None) as nchw_w, \
            scratch(max(nx + nw, 1), store) as buf:
        src_x, src_w = (nchw_x or (a,))[0], (nchw_w or (b,))[0]
        flat = lambda t: runtime.kernel_view(runtime.flat_view(t))  # noqa: E731  (memory order)
        xh = flat(a) if x_as_is or nchw_in else buf[:nx]
        wt = flat(b) if w_as_is else buf[nx:nx + nw]
        if not (x_as_is or nchw_in):  # NCHW -> NHWC, channels zero-padded to cp
            transpose.to_channels_last(flat(src_x), xh, geo.n, c, vox, cp)
        if w_as_is:
            pass
        elif problem.op == "forward":  # wt[k, r, s, c] = w[k, c, r, s]
            transpose.to_channels_last(flat(src_w), wt, k, c, taps, cp)
        else:  # wt[c', r, s, k'] = w[k', c', R-1-r, S-1-s] (c' = output channel, k' = gathered)
            transpose.to_channels_last(flat(src_w), wt, 1, c, k * taps, cp, flip=taps)
        _conv(problem, itype, cfg, xh, wt, flat(out), None if bias is None else runtime.kernel_view(bias),
              nhwc_out, dataclasses.replace(geo, c=cp), nchw_in, epilogue)


def _conv(problem: Problem, itype: str, cfg: TcConfig, xh: Any, wt: Any, y: Any, bias: Any, nhwc_out: bool,
          geo: ForwardGeometry, nchw_in: bool = False, epilogue: EpilogueOperands | None = None) -> None:
    """The convolution kernel on the channels-last (``nchw_in``: NCHW, a 1x1 layer's) / KRSC operands
    into y (flat, NCHW or NHWC memory order): one launch, or with split-K the partials' launch, their sum
    (+ bias) and the rounding. ``geo``: the channel-padded geometry; ``epilogue``: applied by the store
    of the one launch, or by the sum of the partials."""
    splits, tps = split_k(problem, cfg, runtime.target())
    shape = dict(n=geo.n, c=geo.c, k=geo.k, spatial=geo.size, kernel=geo.kernel, out=geo.out,
                 stride=geo.stride, padding=geo.padding, dilation=geo.dilation)
    if splits == 1:
        tc_conv.conv_launcher(itype, cfg, xh, wt, y, bias, nhwc_out=nhwc_out, nchw_in=nchw_in, epilogue=epilogue,
                              **shape)()
        return
    inner = 1 if nhwc_out else math.prod(geo.out)
    with scratch(split_f32(problem, splits), np.float32) as part:
        tc_conv.conv_launcher(itype, cfg, xh, wt, part, None, nhwc_out=nhwc_out, tps=tps, nchw_in=nchw_in,
                              **shape)()
        if epilogue is not None:
            sum_partials_fused(part, y, splits, epilogue, channels=geo.k, inner=inner, bias=bias)
            return
        sum_partials(part, y, splits, bias=bias, inner=inner, out_kind=convert.half_kind(problem.dtype))
