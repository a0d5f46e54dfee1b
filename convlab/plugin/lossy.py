"""What the built-in lossy transform plugins share (FFT: algorithms/fft, Winograd: algorithms/winograd):
:class:`TransformAlgorithm`, their common base, and the operand-size test of their ``check``.

Both compute every op in fp32 transforms on float32, float16 and bfloat16 operands of either layout,
and both round more than plain accumulation (``Algorithm.error_growth`` above 1): neither is ever the
pick by priority alone, and under float32 precision "highest" a config whose measured growth exceeds
:data:`HIGHEST_LIMIT` is declined (:meth:`TransformAlgorithm.check_config`). The base is not
registered: each plugin subclasses it, sets its own ``name``, ``description`` and ``stride_reason``,
implements :meth:`TransformAlgorithm.check_transform` and :meth:`TransformAlgorithm.accuracy_label` and
decorates itself with ``@register``. Both need stride 1 and 32-bit operand indices, so the base's
``check`` tests those and then asks the plugin.
"""
from __future__ import annotations

import math
from typing import ClassVar

from convlab.problem import Problem
from convlab.runtime.settings import get_float32_precision
from convlab.runtime.targets import Target

from .contract import Algorithm, Config, Verdict

#: float32 under precision "highest" declines configs whose error growth exceeds this
HIGHEST_LIMIT = 10.0
#: elements an operand may have: the transform kernels index every flat operand with 32 bits
INDEX_LIMIT = 2**31 - 1


def operands_indexable(problem: Problem) -> Verdict:
    """Yes when each operand (a, b, out) has at most :data:`INDEX_LIMIT` elements, else the first that
    has more."""
    for name, shape in zip(("a", "b", "out"), problem.operand_shapes):
        if math.prod(shape) > INDEX_LIMIT:
            return Verdict.no(f"operand {name} has {math.prod(shape)} elements, over 2**31 - 1")
    return Verdict.yes()


class TransformAlgorithm(Algorithm):
    """Base class of a transform plugin whose configs are lossy (module doc)."""

    ops: ClassVar[frozenset[str]] = frozenset({"forward", "dgrad", "wgrad"})
    dtypes: ClassVar[frozenset[str]] = frozenset({"float32", "float16", "bfloat16"})
    #: lossy: never the pick by priority (the simulator, untuned); timing or the cost model picks it
    priority: ClassVar[int] = -20
    layouts: ClassVar[frozenset[str]] = frozenset({"nchw", "nhwc"})
    #: conformance draws a check on the simulator (convlab.testing.suite): most hits are the plugins'
    #: sample problems, random draws rarely meeting their stride-1 condition
    simulator_examples: ClassVar[int] = 4
    #: why the transform needs stride 1, as the verdict says it
    stride_reason: ClassVar[str] = "the transform computes every output position"

    def check(self, problem: Problem, target: Target) -> Verdict:
        """Stride 1, operands within :data:`INDEX_LIMIT`, then the plugin's own
        :meth:`check_transform`."""
        if problem.stride != (1, 1):
            return Verdict.no(f"needs stride 1 ({self.stride_reason}), got stride {problem.stride}")
        indexable = operands_indexable(problem)
        if not indexable:
            return indexable
        return self.check_transform(problem, target)

    def check_transform(self, problem: Problem, target: Target) -> Verdict:
        """The plugin's own conditions on a stride-1 problem whose operands are indexable."""
        raise NotImplementedError

    def accuracy_label(self, problem: Problem, config: Config) -> str:
        """The transform ``config`` runs on ``problem``, as the verdicts name it (e.g. "F(4x4, 3x3)")."""
        raise NotImplementedError

    def check_config(self, problem: Problem, config: Config, target: Target) -> Verdict:
        """float32 under precision "highest": no when the config's error growth exceeds HIGHEST_LIMIT."""
        if problem.dtype == "float32" and get_float32_precision() == "highest":
            growth = self.error_growth(problem, config)
            if growth > HIGHEST_LIMIT:
                return Verdict.no(f"float32 precision 'highest': {self.accuracy_label(problem, config)} makes "
                                  f"{growth:.3g}x fp32 FMA's error, over {HIGHEST_LIMIT:g}x")
        return Verdict.yes()
