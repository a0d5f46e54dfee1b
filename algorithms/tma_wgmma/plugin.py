"""tma_wgmma: convolutions on Hopper's copy engine and warpgroup tensor cores (convlab.kernels.hopper).

    op        GEMM (M x N, reduction)                     operands the kernel reads (channels-last)
    forward   N*P*Q x K, taps x C                          x NHWC (im2col copies), w KRSC (tile copies)
    dgrad     N*H*W x C, taps x K   (stride 1)             dy NHWC, w flipped to [C, taps, K] (one copy)
    wgrad     K x taps*C, N*P*Q     (fp16 / bf16)          dy NHWC (tile copies), x NHWC (im2col copies),
                                                           both MN-major for wgmma; dw written KRSC

The kernel (kernel.py there): a producer warp issues the tensor copies into an S-stage ring, one or two
consumer warpgroups run wgmma (fp16 / bf16, TF32 for float32 under precision "high"; fp32 accumulation),
mbarriers between them, setmaxnreg moving registers to the consumers, persistent CTAs over a banded tile
schedule, split-K where the tiles are fewer than the SMs (fp32 partials summed in split order: the
results do not depend on the schedule), the epilogue (bias, cast) through shared memory to a tensor
store. 1D (a rank-3 map), 2D and 3D (rank 5).

Layouts: channels-last operands are read as they are when their channel count fills whole 16 bytes
and their data starts on 16 bytes (the copy engine's stride and address rules); NCHW ones (and the
others) take one transposing copy into channels-last scratch, channels zero-padded to 16 bytes, and an
NCHW output one copy back. dgrad's filter is always copied (flipped, K <-> C).

Declined, with the reason: a target without wgmma / tma / setmaxnreg (sm_90a), groups > 1, dgrad with
stride > 1, float32 under precision "highest" and wgrad in float32 (TF32 operands must be K-major), an
output whose channel count is not whole 16 bytes (the store's row stride; wgrad: C and K both), problems whose im2col corners or filter offsets leave the copy engine's ranges
(convlab.kernels.hopper.geometry: 2**15 / 2**7 / 2**4 for 1D / 2D / 3D), tensors of 2**31 elements or
more. The tensor maps hold the operands' addresses, so a recorded call is not replayed on new operands
(``replayable = False``).
"""
from __future__ import annotations

import contextlib
import itertools
import math
from typing import Any, Iterator

from convlab import runtime
from convlab.kernels.arch.wgmma import ITEMSIZE
from convlab.kernels.data import layouts, transpose
from convlab.kernels.data.splitk import MAX_INDEX
from convlab.kernels.hopper import conv as hopper_conv
from convlab.kernels.hopper.geometry import Geometry
from convlab.plugin.contract import Algorithm, Config, Verdict
from convlab.plugin.cost import Features
from convlab.plugin.registry import register
from convlab.problem import Problem, make_problem, make_problem_nd, np_dtype, unit_roundoff
from convlab.runtime.scratch import scratch
from convlab.runtime.settings import get_float32_precision
from convlab.runtime.targets import Target

from . import configs, cost

ITYPE = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32"}
NCHW = frozenset({"nchw"})
FEATURES = ("wgmma", "tma", "setmaxnreg")


def _flat(t: Any) -> Any:
    """The elements of device array ``t`` in memory order, as the kernels take them."""
    return runtime.kernel_view(runtime.flat_view(t))


def _padded(channels: int, itype: str) -> int:
    """Channels rounded up to whole 16 bytes."""
    per = 16 // ITEMSIZE[itype]
    return -(-channels // per) * per


@register
class TmaWgmma(Algorithm):
    """Implicit GEMM on the Tensor Memory Accelerator and wgmma: warp-specialized, persistent (sm_90a)."""

    name = "tma_wgmma"
    ops = frozenset({"forward", "dgrad", "wgrad"})
    dtypes = frozenset({"float16", "bfloat16", "float32"})
    priority = 28
    deterministic = True
    layouts = frozenset({"nchw", "nhwc"})
    ndims = (2, 3)
    replayable = False
    simulator_examples = 3
    description = ("Hopper implicit GEMM: TMA im2col / tile copies into an mbarrier ring, warp-specialized "
                   "persistent wgmma (fp16/bf16; TF32 under 'high'), setmaxnreg, split-K in order, TMA store "
                   "epilogue; channels-last read as is, NCHW through one transposing copy; forward, stride-1 dgrad, "
                   "wgrad (fp16/bf16)")

    def check(self, problem: Problem, target: Target) -> Verdict:
        if problem.dtype == "float32" and get_float32_precision() != "high":
            return Verdict.no("float32 runs in TF32 here: allowed only under convlab.set_float32_precision('high')")
        missing = [f for f in FEATURES if not target.has(f)]
        if missing:
            return Verdict.no(f"needs {', '.join(missing)} (sm_90a); {target.name} lacks them")
        if problem.groups != 1:
            return Verdict.no(f"groups = {problem.groups}: the implicit GEMM here needs groups == 1")
        if problem.op == "dgrad" and any(s != 1 for s in problem.strides):
            return Verdict.no(f"backward-data with stride {problem.strides}: only stride 1 runs here (the "
                              "forward of dy with the flipped filter)")
        shapes = problem.x_shape, problem.w_shape, problem.y_shape
        if any(math.prod(s) > MAX_INDEX for s in shapes):
            return Verdict.no("a tensor has 2**31 elements or more (32-bit indexing of the copies and sums)")
        itype = ITYPE[problem.dtype]
        geo = Geometry.of(problem)
        if problem.op == "wgrad":
            if itype == "tf32":
                return Verdict.no("wgrad reads MN-major operands, which wgmma takes in fp16 / bf16 only (TF32: K-major)")
            for name, channels in (("input", geo.c), ("output", geo.k)):
                if channels * ITEMSIZE[itype] % 16:
                    return Verdict.no(f"{channels} {name} channels are not whole 16 bytes (the rows of dw / dy "
                                      "the copy engine stores / loads)")
        elif geo.k * ITEMSIZE[itype] % 16:
            return Verdict.no(f"{geo.k} output channels are not whole 16 bytes (the tensor store's row stride)")
        if geo.m * geo.k > MAX_INDEX:
            return Verdict.no("the output has 2**31 elements or more")
        if not self.configs(problem, target):
            why = geo.reason(configs.map_dtype(itype), ITEMSIZE[itype], 64, 16, 32 // ITEMSIZE[itype])
            return Verdict.no(f"the tensor maps do not fit the copy engine: {why}" if why else
                              f"no tile config fits {target.name}")
        return Verdict.yes()

    def configs(self, problem: Problem, target: Target) -> list[Config]:
        itype = ITYPE[problem.dtype]
        geo = Geometry.of(problem)
        if problem.op == "wgrad":
            return [configs.to_config(c) for c in configs.wgrad_tiles(geo, itype, target)]
        return [configs.to_config(c) for c in configs.tiles(geo, itype, ITEMSIZE[itype], target)]

    def _copies(self, problem: Problem, geo: Geometry) -> list[int]:
        """Elements of the channels-last copies of an NCHW call (an upper bound: channels-last operands
        that the copy engine reads as they are skip theirs): x, the filter (wgrad: dy), the output."""
        cs = _padded(geo.c, ITYPE[problem.dtype])
        second = geo.m * geo.k if problem.op == "wgrad" else geo.k * geo.taps * cs
        out = geo.k * geo.taps * geo.c if problem.op == "wgrad" else geo.m * geo.k
        return [geo.n * math.prod(geo.size) * cs, second, out]

    def workspace_bytes(self, problem: Problem, config: Config, workspace_limit: int, target: Target) -> int:
        geo = Geometry.of(problem)
        part = hopper_conv.partial_elements(geo, configs.hopper_config(config), ITYPE[problem.dtype], target,
                                            _kind(problem))
        return sum(self._copies(problem, geo)) * problem.itemsize + 4 * part

    def cost_features(self, problem: Problem, config: Config, target: Target, workspace_limit: int) -> Features:
        cfg, itype = configs.hopper_config(config), ITYPE[problem.dtype]
        geo = Geometry.of(problem)
        sched = hopper_conv.plan(geo, cfg, itype, target, _kind(problem))
        copies = self._copies(problem, geo)
        gemm = (geo.k, geo.taps * geo.c, geo.m, 1) if problem.op == "wgrad" else (geo.m, geo.k, geo.c, geo.taps)
        return cost.features(problem, cfg, itype, target, gemm, sched.units, sched.splits, sum(copies), len(copies))

    def compute_eps(self, dtype: str) -> float:
        """TF32 operands keep 10 mantissa bits (wgmma truncates: 2**-10); fp16 / bf16 products are exact
        in the fp32 accumulators."""
        return 2.0**-10 if dtype == "float32" else unit_roundoff("float32")

    def sample_problems(self, op: str) -> list[Problem]:
        # on the simulator (2 "SMs") the first splits its reduction; the 3D one and the 1D one run rank-5
        # and rank-3 maps
        if op == "forward":
            return [make_problem("forward", 1, 16, 5, 6, 16, 3, 3, padding=1, dtype="float16", bias=True),
                    make_problem("forward", 2, 3, 9, 7, 24, 3, 2, stride=2, dilation=(1, 2), padding=(1, 0),
                                 dtype="bfloat16"),
                    make_problem_nd("forward", 1, 8, (3, 4, 5), 16, (2, 2, 3), padding=(1, 0, 1), dtype="float16",
                                    bias=True),
                    make_problem_nd("forward", 2, 5, (13,), 8, (3,), stride=2, padding=2, dtype="bfloat16").lowered()]
        if op == "dgrad":
            return [make_problem("dgrad", 2, 16, 5, 5, 8, 3, 3, padding=1, dtype="float16"),
                    make_problem("dgrad", 1, 8, 6, 5, 16, 2, 3, dilation=(2, 1), padding=(2, 0), dtype="bfloat16",
                                 bias=True)]
        if op == "wgrad":
            return [make_problem("wgrad", 2, 16, 6, 5, 16, 3, 3, padding=1, dtype="float16"),
                    make_problem("wgrad", 2, 32, 7, 6, 24, 2, 3, stride=2, dilation=(2, 1), padding=(1, 0),
                                 dtype="bfloat16")]
        return []

    def run(self, problem: Problem, config: Config, a: Any, b: Any, bias: Any, out: Any, *,
            workspace_limit: int) -> None:
        """a, b, out: 4-D (5-D) device arrays, C-contiguous or channels-last; bias 1-D or None."""
        if problem.op == "wgrad":
            self._run_wgrad(problem, config, a, b, out)
            return
        cfg, itype = configs.hopper_config(config), ITYPE[problem.dtype]
        geo = Geometry.of(problem)
        cs = _padded(geo.c, itype)
        last = [t is not None and layouts.is_channels_last(t) for t in (a, b, out)]
        x_as_is = last[0] and cs == geo.c and runtime.is_aligned(a)
        w_as_is = problem.op == "forward" and cs == geo.c and (last[1] or geo.taps == 1) and runtime.is_aligned(b)
        y_as_is = last[2] and runtime.is_aligned(out)
        with self._staged(problem, geo, (a, b, out), (x_as_is, w_as_is, y_as_is)) as ((src_x, src_w, dst_y),
                                                                                      (xh, wt, yh)):
            if not x_as_is:  # NCHW -> NHWC, channels zero-padded to cs
                transpose.to_channels_last(_flat(src_x), xh, geo.n, geo.c, math.prod(geo.size), cs)
            if problem.op == "dgrad":  # wt[c', taps, k'] = w[k', c', flipped taps]
                transpose.to_channels_last(_flat(src_w), wt, 1, geo.c, geo.k * geo.taps, cs, flip=geo.taps)
            elif not w_as_is:  # KCRS -> KRSC
                transpose.to_channels_last(_flat(src_w), wt, geo.k, geo.c, geo.taps, cs)
            hopper_conv.forward(geo, cfg, itype, xh, wt, yh, None if bias is None else runtime.kernel_view(bias),
                                xs=cs, ws=cs)
            if not y_as_is:  # [N, P*Q, K] -> [N, K, P*Q]
                transpose.to_channels_last(yh, _flat(dst_y), geo.n, geo.pixels, geo.k, geo.pixels)

    def _run_wgrad(self, problem: Problem, config: Config, a: Any, b: Any, out: Any) -> None:
        """dw (out, [K, C, *kernel]) from x (a) and dy (b): every operand channels-last for the kernel."""
        cfg, itype = configs.hopper_config(config), ITYPE[problem.dtype]
        geo = Geometry.of(problem)
        cs = _padded(geo.c, itype)
        x_as_is = layouts.is_channels_last(a) and cs == geo.c and runtime.is_aligned(a)
        dy_as_is, dw_as_is = (layouts.is_channels_last(t) and runtime.is_aligned(t) for t in (b, out))
        with self._staged(problem, geo, (a, b, out), (x_as_is, dy_as_is, dw_as_is)) as ((src_x, src_dy, dst_dw),
                                                                                        (xh, dyh, dwh)):
            if not x_as_is:
                transpose.to_channels_last(_flat(src_x), xh, geo.n, geo.c, math.prod(geo.size), cs)
            if not dy_as_is:
                transpose.to_channels_last(_flat(src_dy), dyh, geo.n, geo.k, geo.pixels, geo.k)
            hopper_conv.wgrad(geo, cfg, itype, xh, dyh, dwh, xs=cs)
            if not dw_as_is:  # [K, taps, C] -> [K, C, taps]
                transpose.to_channels_last(dwh, _flat(dst_dw), geo.k, geo.taps, geo.c, geo.taps)

    @contextlib.contextmanager
    def _staged(self, problem: Problem, geo: Geometry, operands: tuple[Any, Any, Any],
                as_is: tuple[bool, bool, bool]) -> Iterator[tuple[tuple, tuple]]:
        """((sources), (buffers)) of the two inputs and the output (``operands``): a buffer is the operand
        itself, flat, where ``as_is`` (the kernel reads it channels-last as it is), else its part of one
        scratch allocation (``_copies``) that the caller fills from the source (the output: copies to
        it). The source of a channels-last operand not read as it is is a C-contiguous copy
        (layouts.operands_for; the output's is copied back when the block ends), else the operand."""
        counts = [0 if ok else n for ok, n in zip(as_is, self._copies(problem, geo))]
        copied = tuple(None if ok else t for t, ok in zip(operands, as_is))
        store = runtime.kernel_dtype(np_dtype(problem.dtype))
        with layouts.operands_for(NCHW, copied, out_index=2) as nchw, scratch(max(sum(counts), 1), store) as buf:
            ends = list(itertools.accumulate(counts))
            yield (tuple(t if c is None else c for t, c in zip(operands, nchw)),
                   tuple(_flat(t) if ok else buf[end - n:end] for t, ok, n, end in zip(operands, as_is, counts, ends)))

def _kind(problem: Problem) -> str:
    return "wgrad" if problem.op == "wgrad" else "fprop"
