"""Tensor cores: the convolution as an implicit GEMM on ``mma.sync`` (fp16 / bf16, or TF32 for float32
under ``convlab.set_float32_precision("high")``), fp32 accumulation, outputs in the input dtype.

    op        layout change (scratch, timed)           GEMM M      N    K (reduction)   kernel
    forward   x NCHW -> NHWC, w KCRS -> KRSC           N*P*Q       K    R*S*C           tc_conv
    dgrad     dy NCHW -> NHWC, w -> flipped CRSK       N*H*W       C    R*S*K           tc_conv (stride 1)
              (1x1 stride 1 unpadded, H*W and C in whole chunks: x or dy read as NCHW, no copy: tc_conv.NchwA)
    dgrad     dy NCHW -> NHWC, w -> [CRS, K]           N*P*Q       CRS  K               tc_gemm + fold
              (stride > 1, float32: the column route of strided.py)
    wgrad     dy, x unfolded split-major (wgrad.py)    K           CRS  N*P*Q           tc_gemm + split-K

dgrad (and conv_transpose2d, its dgrad) with stride 1 is the forward convolution of dy with the
spatially flipped, K<->C transposed filter and padding dilation*(R-1) - padding (negative padding is fine:
the gather works in padded coordinates). The GEMM is :mod:`convlab.kernels.tensor_core.warp` with the
NHWC gather of :mod:`convlab.kernels.tensor_core.conv`: 16-byte ``cp.async`` chunks of 8 (fp16/bf16) or 4 (tf32)
channels, so the NHWC / KRSC copies pad the gathered channel count with zeros up to a multiple of 8 (4)
(C = 3 becomes 8: more reduction work, still on tensor cores); zero-fill for padding and remainders.
wgrad (:mod:`.wgrad`) unfolds dy and x into dense split-major operands and runs the tensor-core GEMM
per image group (one launch, grid z), the fp32 partials summed in order. Not done here: groups > 1, and
fp16 / bf16 strided dgrad (the ``widen`` plugin runs those in fp32).

Configs (the tuner times them all; the first wastes the least): 128x128 / 128x64 / 64x64 tiles, plus
16- and 32-wide ones when the GEMM's N is at most 32 (the seed's 16-channel layers) and a 16-row one for
a wgrad of at most 16 output channels (its M).

Split-K (forward and dgrad, :func:`split_k`): when the output tiles fill fewer than twice the SMs and
each split keeps at least MIN_SPLIT_K (1024) reduction elements, block z of the one launch (grid z)
runs k tiles [z*tps, (z+1)*tps) into fp32 partials in the output's layout (NCHW or NHWC), then
``convlab.kernels.data.splitk.sum_partials`` adds them in split order (deterministic) and the bias once, in
one pass that also rounds to fp16 / bf16. The split count depends on the problem and the config only.

Layouts (``layouts = {"nchw", "nhwc"}``): a channels-last (NHWC-memory) input is read as it is when its
channel count needs no padding (a multiple of 8, or 4 for TF32) and its data is 16-byte aligned, and so
is a channels-last forward filter (KRSC memory) and a 1x1 forward filter in either layout (KCRS = KRSC);
a channels-last output is written NHWC by the epilogue. Other channels-last operands (an unaligned
channel count, dgrad's filter, every wgrad operand) are copied to NCHW scratch first.

Applicability: a target with ``mma.sync`` and ``cp.async`` (compute capability 8.0 or newer, and the
simulator's stand-ins), groups == 1, float32 only under
precision "high" (TF32; the ``tf32x3`` plugin's 3xTF32 under either), dgrad with stride > 1 in float32
only, every tensor below 2**31 elements.
"""
from __future__ import annotations

import math

import numpy as np

from convlab import runtime
from convlab.kernels.data import convert, layouts, transpose
from convlab.kernels.data.splitk import MAX_INDEX, sum_partials
from convlab.kernels.tensor_core import conv as tc_conv
from convlab.kernels.tensor_core.config import TcConfig
from convlab.kernels.tensor_core.warp import DEFAULT_TF32_ROUND
from convlab.plugin.contract import Algorithm, Config, Verdict
from convlab.plugin.registry import register
from convlab.problem import Problem, make_problem, np_dtype, unit_roundoff
from convlab.runtime.scratch import scratch
from convlab.runtime.settings import get_float32_precision
from convlab.runtime.targets import Target

from . import configs, strided, wgrad
from .configs import tc_config, to_config

ITYPE = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32"}
NCHW = frozenset({"nchw"})  # what operands_for copies channels-last operands into
ALIGN = {"float16": 8, "bfloat16": 8, "float32": 4}  # channels per 16-byte chunk


def _strided_dgrad(problem: Problem) -> bool:
    """Backward-data with stride > 1: the column GEMM and fold of :mod:`.strided` (float32)."""
    return problem.op == "dgrad" and problem.stride != (1, 1)


def _padded(channels: int, dtype: str) -> int:
    """Channels rounded up to whole 16-byte chunks (8 fp16/bf16, 4 fp32)."""
    return -(-channels // ALIGN[dtype]) * ALIGN[dtype]


def _gathered(problem: Problem) -> dict:
    """The forward geometry the kernel runs: the problem's own (forward), or dgrad's as a forward of dy."""
    pr = problem
    if pr.op == "forward":
        return dict(n=pr.n, c=pr.c, h=pr.h, w=pr.w, k=pr.k, r=pr.r, s=pr.s, p=pr.p, q=pr.q,
                    stride=pr.stride, padding=pr.padding, dilation=pr.dilation)
    pad = tuple(d * (kk - 1) - p for d, kk, p in zip(pr.dilation, (pr.r, pr.s), pr.padding))
    return dict(n=pr.n, c=pr.k, h=pr.p, w=pr.q, k=pr.c, r=pr.r, s=pr.s, p=pr.h, q=pr.w,
                stride=(1, 1), padding=pad, dilation=pr.dilation)


#: reduction elements a split keeps at least (1 on the simulator, so that its tiny problems split): on
#: the H200 (results/tc_conv/h200/720ef48, splits of 256+) the sum and rounding passes cost 10-40 us,
#: which splits of a 512- to 1152-long reduction (ResNet-50's c3 / c5 1x1 and c3 3x3 layers) mostly
#: lost, while those of 2048 and longer (c4 / c5 3x3, Burn's deep layers) gained, up to 2x
MIN_SPLIT_K_GPU, MIN_SPLIT_K_SIM = 1024, 1


def split_k(problem: Problem, cfg: TcConfig, target: Target) -> tuple[int, int]:
    """(splits, k tiles per split) of a forward / dgrad on ``target``: as many splits as fill twice the
    SMs with blocks when the output tiles alone do not, each at least MIN_SPLIT_K reduction elements
    long, the partials within 32-bit indexing; (1, all k tiles) when not split."""
    geo = _gathered(problem)
    m, n = geo["n"] * geo["p"] * geo["q"], geo["k"]
    ktiles = math.ceil(geo["r"] * geo["s"] * _padded(geo["c"], problem.dtype) / cfg.BK)
    tiles = math.ceil(m / cfg.BM) * math.ceil(n / cfg.BN)
    least = MIN_SPLIT_K_SIM if target.simulator else MIN_SPLIT_K_GPU
    per_split = max(1, math.ceil(least / cfg.BK))
    splits = min(math.ceil(2 * target.sm_count / tiles), ktiles // per_split, MAX_INDEX // (m * n))
    if splits < 2:
        return 1, ktiles
    tps = math.ceil(ktiles / splits)
    return math.ceil(ktiles / tps), tps


def _split_f32(problem: Problem, splits: int) -> int:
    """float32 elements of the split-K workspace: the partials (0 when not split)."""
    if splits == 1:
        return 0
    geo = _gathered(problem)
    return splits * geo["n"] * geo["p"] * geo["q"] * geo["k"]


@register
class TensorCore(Algorithm):
    """Implicit GEMM on tensor cores (mma.sync m16n8k16 / m16n8k8), cp.async multi-stage pipeline."""

    name = "tensor_core"
    ops = frozenset({"forward", "dgrad", "wgrad"})
    dtypes = frozenset({"float16", "bfloat16", "float32"})
    priority = 30
    deterministic = True
    layouts = frozenset({"nchw", "nhwc"})
    description = ("tensor-core implicit GEMM (fp16/bf16; TF32 for float32 under precision 'high'): "
                   "NHWC/KRSC in scratch (channels padded to 8 / 4), cp.async pipeline, mma.sync; groups 1, "
                   "strided dgrad (float32) as a column GEMM + fold; split-K (fp32 partials summed in order) "
                   "where tiles are few; wgrad on unfolded operands with split-K")

    def itype(self, dtype: str) -> str:
        """The kernels' input type for ``dtype`` (tc_config.ITYPES)."""
        return ITYPE[dtype]

    def check_precision(self, problem: Problem) -> Verdict:
        """Whether the float32 arithmetic this plugin does is allowed (fp16 / bf16: always)."""
        if problem.dtype == "float32" and get_float32_precision() != "high":
            return Verdict.no("float32 runs in TF32 here: allowed only under "
                              "convlab.set_float32_precision('high') (now 'highest': fp32 FMA, or tf32x3)")
        return Verdict.yes()

    def check(self, problem: Problem, target: Target) -> Verdict:
        precision = self.check_precision(problem)
        if not precision.ok:
            return precision
        if not (target.has("mma.sync") and target.has("cp.async")):
            return Verdict.no(f"needs mma.sync and cp.async (compute capability 8.0+); {target.name} has "
                              f"compute capability {target.cc[0]}.{target.cc[1]}")
        if problem.groups != 1:
            return Verdict.no(f"groups = {problem.groups}: the tensor-core implicit GEMM needs groups == 1")
        for tensor, shape in zip(("x", "w", "y"), (problem.x_shape, problem.w_shape, problem.y_shape)):
            if math.prod(shape) > MAX_INDEX:
                return Verdict.no(f"{tensor} {shape} has 2**31 elements or more (32-bit indexing)")
        if problem.op == "dgrad" and problem.stride != (1, 1):
            if problem.dtype != "float32":
                return Verdict.no(f"backward-data with stride {problem.stride} runs here in float32 only (the "
                                  "column route, strided.py); fp16 / bf16 take it through widen")
            if not strided.fits(problem):
                return Verdict.no("the column route's operands or one image's column buffer have 2**31 "
                                  "elements or more (32-bit indexing)")
            return Verdict.yes()
        if problem.op == "wgrad":
            pr = problem
            rows = pr.n * _padded(pr.p * pr.q, pr.dtype) * max(pr.k, pr.c * pr.r * pr.s)
            if rows > MAX_INDEX:
                return Verdict.no("the unfolded operands have 2**31 elements or more (32-bit indexing)")
            return Verdict.yes()
        geo = _gathered(problem)
        if geo["n"] * geo["h"] * geo["w"] * _padded(geo["c"], problem.dtype) > MAX_INDEX:
            return Verdict.no("the channel-padded NHWC copy has 2**31 elements or more (32-bit indexing)")
        return Verdict.yes()

    def configs(self, problem: Problem, target: Target) -> list[Config]:
        itype = self.itype(problem.dtype)
        gemm = strided.gemm_shape(problem) if _strided_dgrad(problem) else problem.gemm_shape()
        return [to_config(t) for t in configs.tiles(problem, gemm, itype, target, self.takes_wgmma(itype, target))]

    def takes_wgmma(self, itype: str, target: Target) -> bool:
        """Whether warpgroup configs are offered: the target has wgmma, and the input type's operands are
        in shared memory as they are (not tf32x3's split parts; TF32 truncated: tc_wgmma)."""
        return target.has("wgmma") and itype in ("f16", "bf16", "tf32") and \
            (itype != "tf32" or DEFAULT_TF32_ROUND == "trunc")

    def workspace_bytes(self, problem: Problem, config: Config, workspace_limit: int,
                        target: Target) -> int:
        """The NHWC copy of x (forward) or dy (dgrad) and the reordered weights, channels padded, and
        the split-K fp32 partials (:func:`_split_f32`); wgrad: the unfolded operands and the split-K
        partials."""
        if problem.op == "wgrad":
            n_store, n_f32 = wgrad.workspace_elements(problem, tc_config(config), ALIGN[problem.dtype], target)
            return n_store * problem.itemsize + 4 * n_f32
        if _strided_dgrad(problem):
            return 4 * strided.workspace_elements(problem, workspace_limit)
        geo = _gathered(problem)
        cp = _padded(geo["c"], problem.dtype)
        f32 = _split_f32(problem, split_k(problem, tc_config(config), target)[0])
        return (geo["n"] * geo["h"] * geo["w"] + geo["k"] * geo["r"] * geo["s"]) * cp * problem.itemsize \
            + 4 * f32

    def compute_eps(self, dtype: str, config: Config | None = None) -> float:
        """float32: TF32 inputs keep 10 mantissa bits, truncated (wgmma configs, and mma.sync ones
        under TF32_ROUND "trunc", the default: 2**-10) or rounded (2**-11); fp16/bf16: the products are
        exact in the fp32 accumulator (2**-23; measure.tolerance adds the output's rounding)."""
        if dtype != "float32":
            return unit_roundoff("float32")
        wgmma = config is None or config.get("MMA", "sync") == "wgmma"
        return 2.0**-10 if wgmma or DEFAULT_TF32_ROUND == "trunc" else 2.0**-11

    def sample_problems(self, op: str) -> list[Problem]:
        # on the simulator (2 "SMs") the first two of forward and dgrad run split-K, the third not
        if op == "forward":
            return [make_problem("forward", 2, 8, 5, 6, 16, 3, 3, padding=1, dtype="float16", bias=True),
                    make_problem("forward", 1, 3, 7, 7, 24, 3, 2, stride=2, dilation=(1, 2),
                                 padding=(1, 0), dtype="bfloat16"),
                    make_problem("forward", 2, 8, 8, 8, 8, 3, 3, padding=1, dtype="bfloat16", bias=True)]
        if op == "dgrad":
            return [make_problem("dgrad", 2, 16, 5, 5, 8, 3, 3, padding=1, dtype="float16"),
                    make_problem("dgrad", 1, 8, 6, 5, 16, 2, 3, dilation=(2, 1), padding=(2, 0),
                                 dtype="bfloat16", bias=True),
                    make_problem("dgrad", 2, 8, 8, 8, 8, 3, 3, padding=1, dtype="float16", bias=True)]
        if op == "wgrad":
            return [make_problem("wgrad", 3, 8, 6, 5, 16, 3, 3, padding=1, dtype="float16"),
                    make_problem("wgrad", 2, 5, 7, 6, 12, 2, 3, stride=2, dilation=(2, 1), padding=(1, 0),
                                 dtype="bfloat16")]
        return []

    def run(self, problem: Problem, config: Config, a, b, bias, out, *, workspace_limit: int) -> None:
        """a, b, out: 4-D device arrays, C-contiguous or channels-last (``layouts``), bias 1-D or None."""
        if problem.op == "wgrad":  # the unfold reads NCHW: channels-last operands are copied first
            with layouts.operands_for(NCHW, (a, b, bias, out)) as (a, b, bias, out):
                wgrad.run_wgrad(problem, tc_config(config), self.itype(problem.dtype),
                                runtime.kernel_dtype(np_dtype(problem.dtype)), ALIGN[problem.dtype],
                                *(runtime.kernel_view(t) for t in (a, b, out)))
            return
        if _strided_dgrad(problem):  # the column route reads NCHW: channels-last operands copied first
            with layouts.operands_for(NCHW, (a, b, bias, out)) as (a, b, bias, out):
                strided.run_strided_dgrad(problem, tc_config(config), self.itype(problem.dtype), a, b, bias,
                                          out, workspace_limit)
            return
        geo = _gathered(problem)
        n, c, h, w, k, r, s = (geo[key] for key in "nchwkrs")
        cp = _padded(c, problem.dtype)
        # operands the kernel reads as they are: a channels-last gathered input (NHWC) and forward filter
        # (KRSC; a 1x1 filter in either layout), when no channel padding is needed; the output in either
        # layout
        a_last, b_last = layouts.is_channels_last(a), layouts.is_channels_last(b)
        x_as_is = a_last and cp == c and runtime.is_aligned(a)  # cp.async reads 16 aligned bytes
        # a 1x1 stride-1 unpadded forward (dgrad) reads its NCHW x (dy) as it is (tc_conv.NchwA)
        nchw_in = not a_last and "MMA" not in config and \
            tc_conv.reads_nchw(self.itype(problem.dtype), a, c=c, h=h, w=w, r=r, s=s, stride=geo["stride"],
                               padding=geo["padding"], bm=config["BM"])  # wgmma reads A K-major: NHWC
        # a 1x1 filter's KCRS memory is already KRSC
        w_as_is = problem.op == "forward" and cp == c and (b_last or r * s == 1) and runtime.is_aligned(b)
        nhwc_out = layouts.is_channels_last(out)
        copy_x = (a,) if a_last and not x_as_is else ()  # to NCHW scratch first (operands_for)
        copy_w = (b,) if b_last and not w_as_is else ()
        store = runtime.kernel_dtype(np_dtype(problem.dtype))
        nx, nw = (0 if x_as_is or nchw_in else n * h * w * cp), (0 if w_as_is else k * r * s * cp)
        with layouts.operands_for(NCHW, copy_x, out_index=None) as nchw_x, \
                layouts.operands_for(NCHW, copy_w, out_index=None) as nchw_w, \
                scratch(max(nx + nw, 1), store) as buf:
            src_x, src_w = (nchw_x or (a,))[0], (nchw_w or (b,))[0]
            flat = lambda t: runtime.kernel_view(runtime.flat_view(t))  # noqa: E731  (memory order)
            xh = flat(a) if x_as_is or nchw_in else buf[:nx]
            wt = flat(b) if w_as_is else buf[nx:nx + nw]
            if not (x_as_is or nchw_in):  # NCHW -> NHWC, channels zero-padded to cp
                transpose.to_channels_last(flat(src_x), xh, n, c, h * w, cp)
            if w_as_is:
                pass
            elif problem.op == "forward":  # wt[k, r, s, c] = w[k, c, r, s]
                transpose.to_channels_last(flat(src_w), wt, k, c, r * s, cp)
            else:  # wt[c', r, s, k'] = w[k', c', R-1-r, S-1-s] (c' = output channel, k' = gathered)
                transpose.to_channels_last(flat(src_w), wt, 1, c, k * r * s, cp, flip=r * s)
            _conv(problem, self.itype(problem.dtype), tc_config(config), xh, wt, flat(out),
                  None if bias is None else runtime.kernel_view(bias), nhwc_out, geo, nchw_in)


def _conv(problem: Problem, itype: str, cfg: TcConfig, xh, wt, y, bias, nhwc_out: bool, geo: dict,
          nchw_in: bool = False) -> None:
    """The convolution kernel on the NHWC (``nchw_in``: NCHW, a 1x1 layer's) / KRSC operands into y (flat,
    NCHW or NHWC memory order): one launch, or with split-K the partials' launch, their sum (+ bias) and
    the rounding."""
    splits, tps = split_k(problem, cfg, runtime.target())
    geo = dict(geo, c=_padded(geo["c"], problem.dtype))
    if splits == 1:
        tc_conv.conv_launcher(itype, cfg, xh, wt, y, bias, nhwc_out=nhwc_out, nchw_in=nchw_in, **geo)()
        return
    with scratch(_split_f32(problem, splits), np.float32) as part:
        tc_conv.conv_launcher(itype, cfg, xh, wt, part, None, nhwc_out=nhwc_out, tps=tps, nchw_in=nchw_in,
                              **geo)()
        sum_partials(part, y, splits, bias=bias, inner=1 if nhwc_out else geo["p"] * geo["q"],
                     out_kind=convert.half_kind(problem.dtype))
