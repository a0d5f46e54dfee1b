"""Tensor cores: the convolution as an implicit GEMM on ``mma.sync`` (fp16 / bf16, or TF32 for float32
under ``convlab.set_float32_precision("high")``), fp32 accumulation, outputs in the input dtype.

    op        layout change (scratch, timed)           GEMM M      N    K (reduction)   kernel
    forward   x NCHW -> NHWC, w KCRS -> KRSC           N*P*Q       K    R*S*C           tc_conv
    dgrad     dy NCHW -> NHWC, w -> flipped CRSK       N*H*W       C    R*S*K           tc_conv (stride 1)
              (1x1 stride 1 unpadded, H*W and C in whole chunks: x or dy read as NCHW, no copy: tc_conv.NchwA)
    dgrad     dy NCHW -> NHWC, w -> a filter a phase   N*Hf*Wf     C    Th*Tw*K         tc_conv a phase
              (stride > 1, 2D, C >= 16: phases.py, each stride phase of dx a stride-1 gather, stored in place)
    dgrad     dy NCHW -> NHWC, w -> [CRS, K]           N*P*Q       CRS  K               tc_gemm + fold
              (stride > 1 otherwise: strided.py's column route, fp32 columns; 3D: per image CTRS x DoPQ + the
              channel-major fold)
    wgrad     dy, x unfolded split-major (wgrad.py)    K           CRS  N*P*Q           tc_gemm + split-K
              (2D / 1D: a 1x1 filter, whose NCHW x and dy are read as they are when dense; planes under
              wgrad.GATHER_MIN_PIXELS output pixels; channels not in whole chunks, a stem's 3)
    wgrad     x -> NHWC (NDHWC), dy split-major        T*R*S*Cp    K    N*Do*P*Q        tc_wgrad (tap gather)
              (3D, and more than one tap on the larger planes: taps.py; a channels-last x read as it
              is, which takes a 1x1 filter here too when its channels are whole chunks, C >= K and
              the config is mma.sync)

3D problems (NCDHW, KCTRS; channels-last-3d NDHWC operands alike) run natively: the gather of
:mod:`convlab.kernels.tensor_core.conv` is one N-d index map (gather.py; M = N*Do*P*Q, K = T*R*S*C), the
NDHWC / KTRSC copies are the same transposes over D*H*W / T*R*S, and wgrad gathers x's taps
(:mod:`.taps`) instead of unfolding T*R*S copies of it. 1D problems run as 2D ones of height 1.

dgrad (and conv_transpose2d, its dgrad) with stride 1 is the forward convolution of dy with the
spatially flipped, K<->C transposed filter and padding dilation*(R-1) - padding (negative padding is fine:
the gather works in padded coordinates). The GEMM is :mod:`convlab.kernels.tensor_core.warp` with the
NHWC gather of :mod:`convlab.kernels.tensor_core.conv`: 16-byte ``cp.async`` chunks of 8 (fp16/bf16) or 4 (tf32)
channels, so the NHWC / KRSC copies pad the gathered channel count with zeros up to a multiple of 8 (4)
(C = 3 becomes 8: more reduction work, still on tensor cores); zero-fill for padding and remainders.
wgrad (:mod:`.wgrad`) unfolds dy and x into dense split-major operands and runs the tensor-core GEMM per
image group (one launch, grid z), the fp32 partials summed in order; a filter of more than one tap on a
large plane (:func:`.wgrad.tap_gather`) and every 3D one instead gather x's taps from an NHWC x into the
GEMM's pipeline (:mod:`.taps`). Not done here: groups > 1.

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
a channels-last output is written NHWC by the epilogue, and the tap gather's x (channels a multiple of 8
or 4, aligned) is read as it is: such an x takes a 1x1 wgrad of C >= K to the gather too, on an
mma.sync config, instead of its NCHW copy. Other channels-last operands (an unaligned channel count,
dgrad's filter, wgrad's dy and dw) are copied to NCHW scratch first.

Epilogues (convlab.epilogue; ``fuses``, ``run_fused``): the gather route (forward, stride-1 dgrad: the
transpose ops) applies one in its staged store, Cs in float32 so that the value is rounded once
(:mod:`convlab.kernels.tensor_core.stores`), or with split-K in the ordered sum of the partials
(:mod:`convlab.kernels.splitk_epilogue`); either output layout (``fused_layouts``), the residual in the
output's. wgrad and the strided dgrad's column route leave it to the op's separate pass.

Applicability: a target with ``mma.sync`` and ``cp.async`` (compute capability 8.0 or newer, and the
simulator's stand-ins), groups == 1, float32 only under
precision "high" (TF32; the ``tf32x3`` plugin's 3xTF32 under either), every tensor below 2**31 elements.
"""
from __future__ import annotations

import math

from convlab import runtime
from convlab.epilogue import Epilogue
from convlab.kernels.data import layouts
from convlab.kernels.data.splitk import MAX_INDEX
from convlab.kernels.epilogue import EpilogueOperands
from convlab.kernels.tensor_core.copy import km_tile_ok
from convlab.kernels.tensor_core.config import ITYPES, TcConfig
from convlab.kernels.tensor_core.warp import DEFAULT_TF32_ROUND
from convlab.plugin.contract import Algorithm, Config, Verdict
from convlab.plugin.cost import Features
from convlab.plugin.registry import register
from convlab.problem import Problem, make_problem, make_problem_nd, np_dtype, unit_roundoff
from convlab.runtime.settings import get_float32_precision
from convlab.runtime.targets import Target

from . import configs, cost, gather, phases, strided, taps, wgrad
from .configs import tc_config, to_config
from .gather import ALIGN, NCHW, split_k  # noqa: F401  (split_k: a name of the cost model's, autotune.families)

ITYPE = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32"}
_padded, _gathered, _split_f32 = gather.padded, gather.gathered, gather.split_f32  # the cost model's names


def _strided_dgrad(problem: Problem) -> bool:
    """Backward-data with stride > 1: the stride phases of :mod:`.phases`, or the column GEMM and fold of
    :mod:`.strided`."""
    return problem.op == "dgrad" and set(problem.strides) != {1}


def _taps(problem: Problem) -> bool:
    """A backward-weight the tap gather of :mod:`.taps` takes in either layout (:func:`.wgrad.tap_gather`:
    3D, or more than one tap on a large plane)."""
    return problem.op == "wgrad" and wgrad.tap_gather(problem)


def may_gather_1x1(problem: Problem, cfg: TcConfig, itype: str) -> bool:
    """Whether a 1x1 backward-weight takes the tap gather when its x is channels-last: whole chunks of
    channels (x read as it is, no layout copy of it), at least as many input channels as output ones, a
    config the gather takes (mma.sync, a BM whose m-contiguous rows swizzle) and its operands within
    32-bit indexing. (A larger filter that :func:`.wgrad.tap_gather` leaves unfolded stays unfolded in
    either layout.)

    C >= K: the gather's GEMM is C x K on the tile the tuner chose for the unfold's K x C. H100, fp16,
    channels-last time over NCHW time against the unfolded route's (results/auto_bench/h100/65f736e
    against 92e7a00 and 05aa939): the reduce and project layers (C >= K) 0.94 (ResNet-50, 8 layers) and
    0.87 (MobileNetV2, 12) of it, the expand layers (C < K) up to 2.5x (MobileNetV2's 24->144 at 56x56)."""
    pr, align = problem, ALIGN[problem.dtype]
    rows = pr.n * max(wgrad.padded(math.prod(pr.spatial_out), align) * pr.k, math.prod(pr.spatial_in) * pr.c)
    return (pr.op == "wgrad" and math.prod(pr.kernel_size) == 1 and not _taps(pr) and pr.c % align == 0
            and pr.c >= pr.k and not cfg.wgmma
            and km_tile_ok(cfg.BM, ITYPES[itype][1]) and rows <= MAX_INDEX)


@register
class TensorCore(Algorithm):
    """Implicit GEMM on tensor cores (mma.sync m16n8k16 / m16n8k8), cp.async multi-stage pipeline."""

    name = "tensor_core"
    ops = frozenset({"forward", "dgrad", "wgrad"})
    dtypes = frozenset({"float16", "bfloat16", "float32"})
    ndims = (2, 3)
    priority = 30
    deterministic = True
    layouts = frozenset({"nchw", "nhwc"})
    fused_layouts = frozenset({"nchw", "nhwc"})  # the staged store writes either layout with the epilogue
    description = ("tensor-core implicit GEMM (fp16/bf16; TF32 for float32 under precision 'high'): "
                   "NHWC/KRSC in scratch (channels padded to 8 / 4), cp.async pipeline, mma.sync; groups 1, "
                   "strided dgrad by stride phases (C >= 16) or a column GEMM (fp32 columns) + fold; "
                   "split-K (fp32 partials summed in order) "
                   "where tiles are few; wgrad on unfolded operands, or by a gather of x's taps (3D, and more than "
                   "one tap on planes of 56x56 and more), with split-K")

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
        if _strided_dgrad(problem) and phases.applies(problem):
            if not phases.fits(problem):
                return Verdict.no("the phase route's dy copy, filters or dx have 2**31 elements or more "
                                  "(32-bit indexing)")
            return Verdict.yes()
        if _strided_dgrad(problem):
            if not strided.fits(problem):
                return Verdict.no("the column route's operands or one image's column buffer have 2**31 "
                                  "elements or more (32-bit indexing)")
            return Verdict.yes()
        if problem.op == "wgrad":
            pr = problem
            rows = pr.n * _padded(math.prod(pr.spatial_out), pr.dtype) * max(pr.k, pr.c * math.prod(pr.kernel_size))
            if _taps(pr):  # the tap gather: dy's split-major copy and x's channels-last one
                rows = pr.n * max(_padded(math.prod(pr.spatial_out), pr.dtype) * pr.k,
                                  math.prod(pr.spatial_in) * _padded(pr.c, pr.dtype))
            if rows > MAX_INDEX:
                return Verdict.no("the unfolded operands have 2**31 elements or more (32-bit indexing)")
            return Verdict.yes()
        if not gather.fits(problem):
            return Verdict.no("the channel-padded NHWC copy has 2**31 elements or more (32-bit indexing)")
        return Verdict.yes()

    def configs(self, problem: Problem, target: Target) -> list[Config]:
        itype = self.itype(problem.dtype)
        if _taps(problem):  # the GEMM of the tap gather, on mma.sync tiles whose m-contiguous rows swizzle
            m, n = wgrad.gemm_mn(problem, ALIGN[problem.dtype])
            tiles = configs.tiles(problem, (m, n, problem.gemm_shape()[2]), itype, target, False)
            return [to_config(t) for t in tiles if km_tile_ok(t.BM, ITYPES[itype][1])]
        gemm = problem.gemm_shape()
        if _strided_dgrad(problem):
            gemm = phases.gemm_shape(problem) if phases.applies(problem) else strided.gemm_shape(problem)
        return [to_config(t) for t in configs.tiles(problem, gemm, itype, target, self.takes_wgmma(itype, target))]

    def takes_wgmma(self, itype: str, target: Target) -> bool:
        """Whether warpgroup configs are offered: the target has wgmma, and the input type's operands are
        in shared memory as they are (not tf32x3's split parts; TF32 truncated: tc_wgmma)."""
        return target.has("wgmma") and itype in ("f16", "bf16", "tf32") and \
            (itype != "tf32" or DEFAULT_TF32_ROUND == "trunc")

    def workspace_bytes(self, problem: Problem, config: Config, workspace_limit: int,
                        target: Target) -> int:
        """The NHWC copy of x (forward) or dy (dgrad) and the reordered weights, channels padded, and
        the split-K fp32 partials (:func:`gather.split_f32`); wgrad: the unfolded operands and the
        split-K partials (the tap gather: x's channels-last copy, dy's split-major one and the partials)."""
        if problem.op == "wgrad":
            cfg, align = tc_config(config), ALIGN[problem.dtype]
            n_store, n_f32 = wgrad.workspace_elements(problem, cfg, align, target)
            if may_gather_1x1(problem, cfg, self.itype(problem.dtype)):  # either route, by x's layout
                g_store, g_f32 = wgrad.workspace_elements(problem, cfg, align, target, gather=True)
                n_store, n_f32 = max(n_store, g_store), max(n_f32, g_f32)
            return n_store * problem.itemsize + 4 * n_f32
        if _strided_dgrad(problem):
            return phases.workspace_bytes(problem) if phases.applies(problem) else \
                strided.workspace_bytes(problem, workspace_limit)
        n_store, n_f32 = gather.workspace_elements(problem, tc_config(config), target)
        return n_store * problem.itemsize + 4 * n_f32

    def cost_features(self, problem: Problem, config: Config, target: Target, workspace_limit: int) -> Features:
        """The route ``run`` takes, counted by :mod:`.cost` (forward, stride-1 dgrad: this module's geometry)."""
        cfg, gathered = tc_config(config), problem.op != "wgrad" and not _strided_dgrad(problem)
        plan = (_gathered(problem), split_k(problem, cfg, target)[0]) if gathered else None
        return cost.features(self, problem, cfg, target, workspace_limit, ALIGN[problem.dtype], plan)

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
                    make_problem("forward", 2, 8, 8, 8, 8, 3, 3, padding=1, dtype="bfloat16", bias=True)] + \
                self._samples_3d(op)
        if op == "dgrad":
            return [make_problem("dgrad", 2, 16, 5, 5, 8, 3, 3, padding=1, dtype="float16"),
                    make_problem("dgrad", 1, 8, 6, 5, 16, 2, 3, dilation=(2, 1), padding=(2, 0),
                                 dtype="bfloat16", bias=True),
                    make_problem("dgrad", 2, 8, 8, 8, 8, 3, 3, padding=1, dtype="float16", bias=True),
                    # strided: the column route (K = 12 padded to 16), 3D strided on two axes
                    make_problem("dgrad", 2, 5, 9, 8, 12, 3, 3, stride=2, padding=1, dtype="bfloat16", bias=True),
                    # strided with C >= 16: the phase route, four phases; a 1x1 one with phases of no taps
                    make_problem("dgrad", 1, 16, 7, 6, 8, 3, 3, stride=2, padding=1, dtype="float16", bias=True),
                    make_problem("dgrad", 1, 16, 6, 5, 8, 1, 1, stride=2, dtype="bfloat16"),
                    make_problem_nd("dgrad", 1, 3, (5, 4, 5), 4, (3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1),
                                    dtype="float16")] + self._samples_3d(op)
        if op == "wgrad":  # the tap gather (padded; strided and dilated, 5 channels padded to 8), then the
            # 1x1 route on unfolded operands (strided: x unfolded to its output pixels)
            return [make_problem("wgrad", 3, 8, 6, 5, 16, 3, 3, padding=1, dtype="float16"),
                    make_problem("wgrad", 2, 5, 7, 6, 12, 2, 3, stride=2, dilation=(2, 1), padding=(1, 0),
                                 dtype="bfloat16"),
                    make_problem("wgrad", 2, 8, 7, 6, 16, 1, 1, stride=2, dtype="float16")] + self._samples_3d(op)
        return []

    def _samples_3d(self, op: str) -> list[Problem]:
        """3D: a padded, dilated one and a strided one (wgrad: over several images, split)."""
        if op == "wgrad":
            return [make_problem_nd("wgrad", 2, 8, (4, 5, 4), 8, (3, 2, 3), stride=(2, 1, 1), padding=1,
                                    dilation=(1, 2, 1), dtype="float16"),
                    make_problem_nd("wgrad", 3, 5, (3, 4, 5), 12, (2, 3, 1), padding=(1, 1, 0), dtype="bfloat16")]
        return [make_problem_nd(op, 2, 8, (3, 4, 5), 16, (2, 3, 3), padding=1, dilation=(2, 1, 1),
                                dtype="float16", bias=True),
                make_problem_nd(op, 1, 5, (4, 5, 4), 8, (3, 1, 2), padding=(1, 0, 1), dtype="bfloat16")]

    def fuses(self, problem: Problem, epilogue: Epilogue) -> str:
        """The gather route (forward, and the stride-1 dgrad of the transpose ops) applies any epilogue in
        its staged store, or in the ordered sum of its split-K partials; the other routes do not."""
        if problem.op == "wgrad":
            return "fuses epilogues into its gather route (forward, stride-1 dgrad) only, not wgrad"
        if _strided_dgrad(problem):
            return ("fuses epilogues into its gather route only, not a strided dgrad (its phase stores or its "
                    "columns' fold)")
        return ""

    def run_fused(self, problem: Problem, config: Config, a, b, bias, out, epilogue: EpilogueOperands, *,
                  workspace_limit: int) -> None:
        """``run``'s gather route with ``epilogue`` fused (its residual in out's layout: ``fused_layouts``)."""
        gather.run_gather(problem, self.itype(problem.dtype), tc_config(config), "MMA" in config, a, b, bias, out,
                          epilogue)

    def run(self, problem: Problem, config: Config, a, b, bias, out, *, workspace_limit: int) -> None:
        """a, b, out: 4-D (5-D) device arrays, C-contiguous or channels-last (``layouts``), bias 1-D or None."""
        itype, cfg = self.itype(problem.dtype), tc_config(config)
        x_last = problem.op == "wgrad" and layouts.is_channels_last(a)
        if _taps(problem) or (x_last and may_gather_1x1(problem, cfg, itype)):
            # x read channels-last as it is; dy and a channels-last dw through NCDHW copies
            with layouts.operands_for(NCHW, (None, b, bias, out)) as (_, b, bias, out):
                taps.run_taps(problem, cfg, itype, runtime.kernel_dtype(np_dtype(problem.dtype)),
                              ALIGN[problem.dtype], *(runtime.kernel_view(t) for t in (a, b, out)), x_last)
            return
        if problem.op == "wgrad":  # the unfold reads NCHW: channels-last operands are copied first
            with layouts.operands_for(NCHW, (a, b, bias, out)) as (a, b, bias, out):
                wgrad.run_wgrad(problem, cfg, itype, runtime.kernel_dtype(np_dtype(problem.dtype)),
                                ALIGN[problem.dtype], *(runtime.kernel_view(t) for t in (a, b, out)))
            return
        if _strided_dgrad(problem) and phases.applies(problem):  # dx written in its own layout
            phases.run_phases(problem, cfg, itype, a, b, bias, out)
            return
        if _strided_dgrad(problem):  # the column route reads NCHW: channels-last operands copied first
            with layouts.operands_for(NCHW, (a, b, bias, out)) as (a, b, bias, out):
                strided.run_strided_dgrad(problem, cfg, itype, a, b, bias, out, workspace_limit)
            return
        gather.run_gather(problem, itype, cfg, "MMA" in config, a, b, bias, out)
