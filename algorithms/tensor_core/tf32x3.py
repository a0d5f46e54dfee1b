"""float32 on tensor cores at fp32-class accuracy: the ``tensor_core`` plugin with 3xTF32 arithmetic.

Each float32 operand fragment is split in registers into two TF32 numbers (``mma.split_tf32``):

    x = big + small + r,  big = tf32(x),  small = tf32(x - big),  |r| <= 2**-22 |x|
    a*b ~ a_small*b_big + a_big*b_small + a_big*b_big      three mma.sync m16n8k8 TF32, fp32 accumulators

The dropped a_small*b_small is at most 2**-22 |a*b|, so each product is within 3 * 2**-22 (< 2**-20) of
exact, against fp32's 2**-24 rounding per fused multiply-add; the sums are fp32 in both. That is the
accuracy class of float32, not of TF32 (2**-11 per product): CUTLASS's "3xTF32" fast-accurate GEMM.
Everything else (gather, split-K, wgrad unfold, layouts, graphs) is the ``tensor_core`` plugin's: same
kernels from :mod:`convlab.kernels.tensor_core.warp`, itype ``tf32x3``.

Accepted for float32 under both precisions: "highest" (the default; the reference for speed is cuDNN in
exact fp32) and "high" (where the tensor_core plugin's plain TF32 is also a candidate and usually
faster). ``convlab.unregister("tf32x3")`` keeps float32 on the SIMT fp32 plugins (fp32 FMA).

Known limits: an infinite input gives NaN where exact fp32 gives +-inf (inf times a zero small part), and
so does a finite one within 2**-12 of the float32 maximum (its TF32 rounding is inf).
Priority 15, below implicit_gemm (20): without tuning (the simulator) float32 stays on the SIMT kernels;
on a GPU the autotuner times both.

Registers: the 128x128 tile's convolution kernel keeps twice the fragment registers of TF32 (big and
small parts) and takes 248 (sm_80) / 252 (sm_90) of the 255 registers a thread, without spills
(``convlab compile``, results/compile); a larger tile would spill.
"""
from __future__ import annotations

from convlab.plugin.contract import Config, Verdict
from convlab.plugin.registry import register
from convlab.problem import Problem, make_problem

from .plugin import TensorCore


@register
class TensorCoreTf32x3(TensorCore):
    """The tensor-core implicit GEMM for float32 with each product as three TF32 mma (fp32-class)."""

    name = "tf32x3"
    dtypes = frozenset({"float32"})
    priority = 15
    description = ("float32 on tensor cores at fp32-class accuracy: operands split into two TF32 parts, "
                   "three mma.sync a product (3xTF32, error < 2**-20 a product); otherwise tensor_core's "
                   "kernels (groups 1, strided dgrad by stride phases or a column GEMM + fold, split-K, NCHW/NHWC)")

    def itype(self, dtype: str) -> str:
        return "tf32x3"

    def check_precision(self, problem: Problem) -> Verdict:
        return Verdict.yes()  # fp32-class under "highest"; under "high" a candidate beside plain TF32

    def compute_eps(self, dtype: str, config: Config | None = None) -> float:
        """3 * 2**-22 a product (module docstring), rounded up to 2**-20."""
        return 2.0**-20

    def sample_problems(self, op: str) -> list[Problem]:
        """tensor_core's shapes in float32 (a split-K forward and dgrad on the simulator among them, the
        phase route's strided dgrads), and strided dgrads of the column route: a 3-channel stem with bias, stride 3 with dilation and a
        transpose's output size (H beyond the forward formula)."""
        shapes = [p.replace(dtype="float32") for p in super().sample_problems(op)]
        if op == "dgrad":
            shapes += [make_problem("dgrad", 2, 3, 9, 9, 8, 3, 3, stride=2, padding=1, bias=True),
                       make_problem("dgrad", 1, 4, 11, 10, 6, 2, 3, p=3, q=3, stride=(3, 3), dilation=(2, 1),
                                    padding=(1, 0))]
        return shapes
