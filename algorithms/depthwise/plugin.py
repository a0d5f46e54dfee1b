"""Depthwise convolution (groups == C, channel multiplier M = K / C >= 1) in 1D, 2D and 3D: forward, dgrad
and wgrad with tiled kernels (convlab.kernels.conv.depthwise_conv, depthwise_wgrad): each block owns a
TH x TW tile of PL output planes (consecutive channels of one image), stages the PL input halo tiles and
filters in shared memory, and each thread keeps VH output rows in registers.

    forward  y[n, k, p, q]  = bias[k] + sum_{r, s} x[n, k // M, p*sh - ph + r*dh, q*sw - pw + s*dw]
                                                  * w[k, 0, r, s]
    dgrad    dx[n, c, h, w] = bias[c] + sum_{m < M, r, s : h + ph - r*dh = p*sh, w + pw - s*dw = q*sw}
                                         dy[n, c*M + m, p, q] * w[c*M + m, 0, r, s]
    wgrad    dw[k, 0, r, s] = sum_{z < splits} sum_{(n, tile) in chunk z} sum_{(p, q) in tile}
                                         x[n, k // M, p*sh - ph + r*dh, q*sw - pw + s*dw] * dy[n, k, p, q]

Configs and launch plans: plan.py (plain tiles of any plane, and plane tiles of PL whole small planes
per block). dgrad runs one stride-1 correlation per output residue class (h + ph) mod sh, (w + pw) mod sw,
with only the filter taps that reach it. wgrad reduces in a fixed order: each block sums its chunk of
units in sequence, then a shared-memory tree per filter; with splits > 1 the partials go to a workspace
and are summed in split order by ``convlab.kernels.data.splitk.sum_partials`` (plane tiles offer
SPLIT=1: never split, one launch).
No atomics: every result is deterministic. Every layer size is a compile-time constant of its kernels,
so a launch passes the arrays only (host time per call counts on small layers).

3D: a block's tile lies at one output depth (grid x counts the depths too) and loops over the depth
taps whose input plane exists, staging each plane's halo and taps in turn (dgrad: the taps with
z + pd - t*dd = o*sd); wgrad's units are (n, output depth, tile) and its T*R*S accumulators take every
depth tap of a unit. 1D (the 2D embedding, H = 1): windows of one output row (TH = VH = 1) and, for
short rows, plane windows of PL whole rows.

fp16 / bf16 natively (no widening passes): operands stay half in memory, each read widens to float32;
tiles, filters, accumulators and wgrad's split partials are float32; the store rounds to the output type.

Epilogues (convlab.epilogue: scale, shift, activation, residual before or after it) fuse into the forward
kernels' store, 1D-3D and every dtype (``run_fused``): each output is summed whole in one thread's
registers (forward has one stride phase and no split), then stored once through
convlab.kernels.epilogue.fused_store with its output channel k. dgrad and wgrad take the separate pass.

Layouts (``layouts = fused_layouts = {"nchw", "nhwc"}``, channels_last.py): a forward into a
channels-last output (NHWC, NDHWC) runs convlab.kernels.conv.depthwise_nhwc, reading its input as it is
(a C-contiguous one is copied to channels-last scratch first) and storing through the same fused store:
one thread sums a strip of VQ outputs x V channels in registers, loads coalesced along C, no shared
memory. A dgrad into a channels-last dx runs the same kernel on the flipped filter when it has stride 1
and M = 1, else convlab.kernels.conv.depthwise_nhwc_dgrad (strips of VQ dx columns, a multiple of the
stride, so each column's taps are literals; rows test their residue). A wgrad on channels-last x
and dy runs convlab.kernels.conv.depthwise_nhwc_wgrad (a thread keeps every tap x V channels in registers
over its strips, a fixed-order tree over the block's rows, splits summed in order by ``sum_partials``) up
to MAX_WGRAD_WORDS accumulator registers. Every other call (an NCHW output, a wgrad with an NCHW x or dy
or a larger filter) runs the kernels above on NCHW copies of its channels-last operands. A Problem
carries no layout, so the configs are the NCHW tiles' (the channels-last tiles and splits are planned
from the problem and the target, not tuned) and ``workspace_bytes`` declares the larger of the two wgrad
routes' partials.

Applicability: groups == C; at most MAX_TAPS filter taps (the per-thread code is unrolled over them);
the halo tile of some config fits 48 KiB of shared memory; every tensor within 32-bit indexing; at most
65535 images and channels (grid y and z).
"""
from __future__ import annotations

import math

from convlab import runtime
from convlab.dtypes import unit_roundoff
from convlab.epilogue import Epilogue
from convlab.plugin.contract import Algorithm, Config, Verdict
from convlab.plugin.cost import Features, blocks_per_sm, default_arith
from convlab.plugin.registry import register
from convlab.problem import Problem, make_problem, make_problem_nd
from convlab.runtime.scratch import scratch
from convlab.runtime.targets import Target

from convlab.kernels.conv.depthwise_common import MAX_SHARED, compute_itemsize
from convlab.kernels.data import layouts
from convlab.kernels.data.convert import half_kind
from convlab.kernels.data.splitk import MAX_INDEX, sum_partials  # the ordered split sum
from convlab.kernels.epilogue import EpilogueOperands, compute_dtype

from .channels_last import run_channels_last, run_wgrad_channels_last, takes_channels_last, wgrad_workspace_bytes
from .plan import Plan, blocks, configs_for, launch_plan, taps, tile_of, waste, wgrad_plan

NCHW = frozenset({"nchw"})  # what operands_for copies channels-last operands into
MAX_GRID_YZ = 65535  # grid y and z: channel groups and images (wgrad: filter groups)
MAX_TAPS = 121  # R*S (3D: T*R*S): up to 11x11 (the unrolled per-thread code and wgrad's accumulators grow)


@register
class Depthwise(Algorithm):
    """Tiled depthwise convolution with shared halo tiles and register rows; any multiplier K/C."""

    name = "depthwise"
    ops = frozenset({"forward", "dgrad", "wgrad"})
    dtypes = frozenset({"float32", "float64", "float16", "bfloat16"})
    priority = 30  # above implicit_gemm (20), im2col/col2im (10), direct (0)
    deterministic = True
    compiles_per_shape = True  # layer sizes are literals of its generated kernels
    ndims = (2, 3)
    #: plan.py's tile tables list the H200's best first (results/depthwise/h200/0fec88e: on MobileNetV2's
    #: large planes the first tile ran 1.5-2.2x faster than the last, which the model estimated within 0.4 %)
    ordered_configs = True
    layouts = frozenset({"nchw", "nhwc"})  # channels_last.py: forward, stride-1 dgrad, wgrad take NHWC as is
    fused_layouts = frozenset({"nchw", "nhwc"})
    description = ("depthwise (groups == C, any K/C): halo tile + filter in shared memory, rows per "
                   "thread in registers; dgrad by stride phases; wgrad ordered tree + split sum; 1D "
                   "row windows, 3D by depth taps; channels-last forward / dgrad / wgrad: register strips")

    def check(self, problem: Problem, target: Target) -> Verdict:
        if problem.groups != problem.c:
            return Verdict.no(f"groups={problem.groups} != C={problem.c}: not depthwise")
        if taps(problem) > MAX_TAPS:
            size = "x".join(map(str, problem.kernel_size))
            return Verdict.no(f"filter {size} has more than {MAX_TAPS} taps")
        for tensor, shape in (("x", problem.x_shape), ("w", problem.w_shape), ("y", problem.y_shape)):
            if math.prod(shape) > MAX_INDEX:
                return Verdict.no(f"{tensor} {shape} has 2**31 elements or more (32-bit indexing)")
        if max(problem.n, problem.c, problem.k) > MAX_GRID_YZ:
            return Verdict.no(f"N={problem.n}, C={problem.c}, K={problem.k}: the grid takes at most "
                              f"{MAX_GRID_YZ} images and channels")
        if not self.configs(problem, target):
            return Verdict.no(f"no tile fits: the halo of the smallest tile exceeds {MAX_SHARED} bytes of "
                              f"shared memory (filter {problem.r}x{problem.s}, stride {problem.stride}, "
                              f"dilation {problem.dilation})")
        return Verdict.yes()

    def configs(self, problem: Problem, target: Target) -> list[Config]:
        return list(configs_for(problem, target))

    def workspace_bytes(self, problem: Problem, config: Config, workspace_limit: int,
                        target: Target) -> int:
        if problem.op != "wgrad":
            return 0
        splits, _ = wgrad_plan(problem, config, workspace_limit, target)
        nchw = 0 if splits == 1 else splits * problem.k * taps(problem) * compute_itemsize(problem.dtype)
        return max(nchw, wgrad_workspace_bytes(problem, target, workspace_limit))  # either layout may come

    def cost_features(self, problem: Problem, config: Config, target: Target, workspace_limit: int) -> Features:
        """The tiles' computed outputs (edges, idle phases, empty planes: ``waste``), the halo re-read
        from L2, wgrad's split sum (float32 partials for halves); operand bytes in their dtype, fp32 FMA."""
        pr, tile, part_size = problem, tile_of(config), compute_itemsize(problem.dtype)
        threads = tile[1] * tile[0] // tile[2] * tile[3]
        splits = wgrad_plan(pr, config, workspace_limit, target)[0] if pr.op == "wgrad" else 1
        grid = (splits * math.ceil(pr.k / tile[3]) if pr.op == "wgrad"
                else blocks(pr, tile)[2] * math.ceil(max(pr.c, pr.k) / tile[3]) * max(pr.n, 1))
        halo = (tile[0] + pr.r - 1) * (tile[1] + pr.s - 1) / (tile[0] * tile[1])
        return Features("depthwise", default_arith(pr), pr.flops * waste(pr, tile), float(pr.bytes),
                        2.0 * splits * pr.k * pr.r * pr.s * part_size if splits > 1 else 0.0, 1 + (splits > 1),
                        grid, 1, threads, blocks_per_sm(target, threads, 0, 48), float(pr.bytes) * halo,
                        kind="stencil")

    def compute_eps(self, dtype: str, config: Config | None = None) -> float:
        """fp16 / bf16: float32 products and sums (measure.tolerance adds the output's rounding)."""
        return unit_roundoff("float32" if half_kind(dtype) else dtype)

    def sample_problems(self, op: str) -> list[Problem]:
        bias = op != "wgrad"
        mk = make_problem
        return [mk(op, 2, 3, 7, 6, 3, 3, 3, padding=1, groups=3, bias=bias),  # M = 1, odd sizes
                mk(op, 1, 2, 9, 8, 4, 3, 3, stride=2, padding=1, groups=2, bias=bias,  # M = 2, stride 2
                   dtype="float64"),
                mk(op, 1, 2, 8, 9, 2, 3, 5, padding=(2, 3), dilation=2, groups=2),  # dilation 2, 3x5
                mk(op, 1, 1, 11, 10, 2, 5, 5, stride=(2, 3), padding=2, groups=1, bias=bias),  # 5x5
                mk(op, 1, 2, 7, 7, 2, 3, 3, p=4 if op == "dgrad" else None, padding=1, dilation=2,
                   groups=2, bias=bias),  # dgrad: the shortened dy of conv_transpose2d's output_padding
                make_problem_nd(op, 2, 2, (13,), 4, (3,), stride=2, padding=1, groups=2,  # 1D, M = 2
                                bias=bias).lowered(),
                make_problem_nd(op, 1, 2, (4, 5, 6), 2, (3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1),
                                dilation=(1, 2, 1), groups=2, bias=bias),  # 3D
                mk(op, 1, 2, 7, 6, 4, 3, 3, stride=2, padding=1, groups=2, bias=bias,  # fp16, plane tiles
                   dtype="float16"),  # (wgrad: unsplit, rounded as stored)
                mk(op, 2, 2, 9, 8, 2, 3, 3, padding=1, groups=2, bias=bias,  # bf16 (wgrad: split on the
                   dtype="bfloat16")]  # simulator's smaller tiles, unsplit on its 8x8)

    def fuses(self, problem: Problem, epilogue: Epilogue) -> str:
        """The forward kernels (1D-3D, every dtype, NCHW or channels-last output) apply any epilogue in
        their store; dgrad and wgrad do not (the op runs them, then the epilogue pass)."""
        if problem.op != "forward":
            return f"fuses epilogues into its forward kernels only, not {problem.op}"
        return ""

    def run_fused(self, problem: Problem, config: Config, a, b, bias, out, epilogue: EpilogueOperands, *,
                  workspace_limit: int) -> None:
        if takes_channels_last(problem, a, b, out):  # out channels-last (fused_layouts): the residual is too
            run_channels_last(problem, a, b, bias, out, epilogue)
            return
        plan = launch_plan(problem, config, workspace_limit, runtime.target(), epilogue.epilogue)
        with layouts.operands_for(NCHW, (a,), out_index=None) as (a,):  # out NCHW, x maybe not
            a, b, bias, out = (None if t is None else runtime.kernel_view(t) for t in (a, b, bias, out))
            r = runtime.flat_view(out) if epilogue.residual is None else epilogue.residual  # never read
            _conv(plan, a, b, bias, out, r, epilogue.scale, epilogue.shift)

    def run(self, problem: Problem, config: Config, a, b, bias, out, *, workspace_limit: int) -> None:
        """a, b, out: device arrays, C-contiguous or channels-last (``layouts``; channels_last.py routes)."""
        if takes_channels_last(problem, a, b, out):
            if problem.op == "wgrad":  # a: x, b: dy, out: dw
                run_wgrad_channels_last(problem, a, b, out, workspace_limit)
            else:
                run_channels_last(problem, a, b, bias, out)
            return
        with layouts.operands_for(NCHW, (a, b, bias, out)) as taken:
            self._run_nchw(problem, config, *taken, workspace_limit)

    def _run_nchw(self, problem: Problem, config: Config, a, b, bias, out, workspace_limit: int) -> None:
        plan = launch_plan(problem, config, workspace_limit, runtime.target())
        a, b, bias, out = (None if t is None else runtime.kernel_view(t) for t in (a, b, bias, out))  # bf16 bits
        if problem.op != "wgrad":
            _conv(plan, a, b, bias, out)
        elif plan.splits == 1:
            plan.launch(a, b, out)
        else:
            with scratch(plan.splits * out.size, compute_dtype(problem.dtype)) as part:
                plan.launch(a, b, part)
                sum_partials(part, out, plan.splits, out_kind=half_kind(problem.dtype))


def _conv(plan: Plan, a, b, bias, out, *epilogue) -> None:
    """The forward or dgrad launch of ``plan`` on kernel views (bias None: the kernel without bias, which
    never reads its bias argument; ``out`` stands in), the fused kernel's (residual, scale, shift) after."""
    if bias is None:
        plan.launch(a, b, out, out, *epilogue)
    else:
        plan.launch_bias(a, b, bias, out, *epilogue)
