"""FFT convolution: real-to-complex transforms of overlap-save tiles, the products by the convolution theorem
(a correlation is a product with the conjugate spectrum), the complex-to-real transform back; 1D and 2D,
forward, dgrad (the rotated, channel-swapped filter) and wgrad (x against dy tiles, summed over tiles in
the frequency domain), stride 1, dilation folded into the filter (its zeros inserted).

    product=gemm     the products as one batched SIMT GEMM per frequency bin and group (complex as real:
                     convlab.kernels.fft.spectrum's conj block), between the transform kernels (run.py)
    product=inline   forward / dgrad with at most 4 input channels a group (depthwise layers): the products
                     formed in the inverse transform's load, no GEMM and no product buffer

``n`` is the FFT length of each filtered axis (2D: 8, 16, 32; 1D: 64, 256, 1024), less where the whole
extent fits; an output tile is n - Rd + 1 long (plan.py). Transforms, twiddles and products are fp32 for
float32, float16 and bfloat16 operands. The radix-4 / radix-2 passes are this repository's
(convlab.kernels.fft.stages), not nvmath-python's device FFT: cuFFTDx through nvmath can be built for a named
compute capability, but its kernels link LTO-IR (``cuda.jit(link=..., extensions=...)``), which Numba's
simulator rejects, which turns off the kernel disk cache, and whose registers and spills only the final
nvJitLink link knows, beyond ``convlab compile``'s NVVM-to-ptxas path; an optional extra could add it as
another config that the simulator and ``convlab compile`` skip, at the price of a second code path.

Accuracy: accuracy.py declares each size's error growth over direct fp32 FMA's (measured in float64,
tools/transform_accuracy.py); float32 under precision "highest" declines sizes over 10x, and
convlab.set_allow_lossy(False) every config. Declines: stride > 1 (the transform computes every output
position, a strided one would discard most), a dilated filter longer than the largest n.
"""
from __future__ import annotations

from convlab import runtime
from convlab.plugin.contract import Config, Verdict
from convlab.plugin.cost import Features
from convlab.plugin.lossy import TransformAlgorithm
from convlab.plugin.registry import register
from convlab.problem import Problem, make_problem, make_problem_nd
from convlab.runtime.targets import Target

from . import accuracy, cost, run
from .plan import SIZES_1D, SIZES_2D, dilated, make_plan, sizes

#: input channels a group at most for product=inline (its load sums them per bin)
INLINE_CHANNELS = 4


@register
class Fft(TransformAlgorithm):
    """FFT convolution with overlap-save tiles (module docstring)."""

    name = "fft"
    description = ("FFT convolution: radix-4/2 real-to-complex transforms of overlap-save tiles in shared memory, "
                   "products by a batched SIMT GEMM per bin (or inline for depthwise), 1D and 2D, stride 1, "
                   "dilation folded into the filter")

    def check_transform(self, problem: Problem, target: Target) -> Verdict:
        rd, sd = dilated(problem)
        biggest = SIZES_1D[-1] if problem.r == 1 else SIZES_2D[-1]
        if (problem.r > 1 and rd > biggest) or sd > biggest:
            return Verdict.no(f"the dilated filter {rd}x{sd} is longer than the largest FFT tile ({biggest})")
        return Verdict.yes()

    def configs(self, problem: Problem, target: Target) -> list[Config]:
        """Each FFT size that holds the filter (sizes that the extent cuts to the same transform
        once), product=gemm, and product=inline where it applies; the most accurate allowed first."""
        seen, out = set(), []
        for n in (SIZES_1D if problem.r == 1 else SIZES_2D):
            nf = sizes(problem, n)
            if nf is None or nf in seen:
                continue
            seen.add(nf)
            c_in = problem.k_per_group if problem.op == "dgrad" else problem.c_per_group
            products = ["gemm"] + (["inline"] if problem.op != "wgrad" and c_in <= INLINE_CHANNELS else [])
            out += [Config(n=n, product=p) for p in products]
        if target.simulator and out:  # the smallest size; products inline where they apply (its GEMM has a
            out = [c for c in out if c["n"] == out[0]["n"]]  # block per bin: tests/algorithms/test_fft.py runs it)
            out = [c for c in out if c["product"] == "inline"] or out
        return sorted(out, key=lambda c: not self.check_config(problem, c, target))

    def accuracy_label(self, problem: Problem, config: Config) -> str:
        return f"FFT {accuracy.label(problem, config)}"

    def compute_eps(self, dtype: str) -> float:
        """The largest error_eps over the sizes (the tolerance of callers that know no config)."""
        return accuracy.worst_eps()

    def error_growth(self, problem: Problem, config: Config) -> float:
        return accuracy.growth(problem, config)

    def error_eps(self, problem: Problem, config: Config) -> float:
        return accuracy.FMA_EPS * accuracy.growth(problem, config)

    def accuracy_note(self, problem: Problem, config: Config) -> str:
        return accuracy.note(problem, config)

    def workspace_bytes(self, problem: Problem, config: Config, workspace_limit: int, target: Target) -> int:
        plan = make_plan(problem, config, workspace_limit)
        ks = cost.wgrad_ksplit(problem, plan, target) if problem.op == "wgrad" else 1
        return 4 * (plan.buffers(problem) + (plan.z * 2 * plan.k_out * plan.c_in * ks if ks > 1 else 0))

    def cost_features(self, problem: Problem, config: Config, target: Target, workspace_limit: int) -> Features:
        return cost.features(self, problem, config, target, workspace_limit)

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        plan = make_plan(problem, config, workspace_limit)
        ks = cost.wgrad_ksplit(problem, plan, runtime.target()) if problem.op == "wgrad" else 1
        run.run(problem, plan, ks, a, b, bias, out)

    def sample_problems(self, op: str) -> list[Problem]:
        """A padded 2D 5x5 with groups and bias, a dilated 3x3 in fp16, a depthwise 7x7 (inline products),
        a long 1D filter in bf16, and a dgrad with a transpose's smaller dy."""
        out = [make_problem(op, 2, 4, 9, 8, 6, 5, 5, padding=2, groups=2, bias=op != "wgrad"),
               make_problem(op, 1, 3, 9, 10, 4, 3, 3, dilation=2, padding=(1, 2), dtype="float16"),
               make_problem(op, 1, 4 // (1 + (op == "wgrad")), 10, 9, 4 // (1 + (op == "wgrad")), 7, 7, padding=3,
                            groups=4 // (1 + (op == "wgrad")), bias=op != "wgrad"),
               make_problem_nd(op, 2, 3, (40,), 2, (17,), padding=4, dtype="bfloat16").lowered()]
        if op == "dgrad":
            out.append(make_problem("dgrad", 1, 2, 8, 7, 3, 3, 2, p=5, q=5, padding=(1, 0), bias=True))
        return out
