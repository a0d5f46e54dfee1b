"""Half precision (fp16, bf16) on the float32 kernels: widen the operands, run a float32 plugin, narrow.

    a32, b32 (, bias32) = widen(a, b (, bias))        fp16 exactly; bf16 bits << 16
    out32 = <float32 plugin>.run(problem as float32, a32, b32, bias32)
    out = narrow(out32)                               round to nearest even

The products and sums are float32 (the accumulation a tensor-core kernel does too); only the output is
rounded to the input type, so the result is at least as accurate as a native half kernel's. It costs
two more passes over the operands and one over the output (scratch: float32 copies of a, b, bias and
out), which matters on memory-bound layers and hardly on compute-bound ones.

What it is for: every op, stride, group count and layout in fp16 / bf16, whether or not a native half
plugin covers it. The native ``tensor_core`` plugin runs forward, dgrad (strided too) and wgrad with
groups 1 (2D and 3D), ``depthwise`` the depthwise layers (groups == C); the others (grouped layers with
1 < groups < C) run here on the float32 plugins, tuned like any other candidate: each config names the
float32 plugin (``via``) and that plugin's config. A layer a native plugin runs is a candidate here too,
via the other float32 plugins (never via one that runs its dtype natively); the tuner compares them.
Priority -10: without tuning (the simulator) a native half plugin goes first when it applies.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from convlab import runtime
from convlab.kernels.data import convert
from convlab.plugin import registry
from convlab.plugin.contract import Algorithm, Config, Verdict
from convlab.plugin.cost import Features, features_of
from convlab.plugin.registry import register
from convlab.problem import Problem, unit_roundoff
from convlab.runtime.scratch import scratch
from convlab.runtime.targets import Target

VIA_CONFIGS = 2  # configs tried per float32 plugin (its preferred ones)


def _float32(problem: Problem) -> Problem:
    return problem.replace(dtype="float32")


def _inner(config: Config) -> tuple[str, Config]:
    """(float32 plugin name, its config) of a widen config."""
    return config["via"], Config({k: v for k, v in config.items() if k != "via"})


@register
class Widen(Algorithm):
    """fp16 / bf16 problems on a float32 plugin: operands widened to fp32 in scratch, output narrowed."""

    name = "widen"
    ops = frozenset({"forward", "dgrad", "wgrad"})
    dtypes = frozenset({"float16", "bfloat16"})
    priority = -10
    ndims = (2, 3)  # a 3D problem runs on the float32 plugins that claim 3D
    deterministic = True  # every built-in float32 plugin is; others are skipped in deterministic mode
    # conformance draws a check on the simulator beside its class examples: the kernels are the float32
    # plugins', each checked there on its own (its 21 checks: 40 CPU seconds with 2 draws, 25 with 1)
    simulator_examples = 1
    description = ("fp16/bf16 on the float32 plugins: operands widened to fp32 in scratch, fp32 "
                   "arithmetic, the output rounded back (any op, stride, groups)")

    def _via(self, problem: Problem, target: Target) -> list:
        """The float32 plugins that can run the widened problem, in priority order (native half
        plugins and this one excluded: they are candidates of the half problem themselves; so is a
        float32 variant of a native half plugin that runs the problem, e.g. tf32x3 of tensor_core on a
        stride-1 fp16 forward: the same kernels in fp16 are a candidate already)."""
        from convlab.runtime.settings import get_deterministic
        wide = _float32(problem)
        found = registry.plugins(problem.op)
        native = tuple(type(p) for p in found
                       if problem.dtype in p.dtypes and p is not self and registry.verdict(p, problem, target=target))
        via = [p for p in found
               if problem.dtype not in p.dtypes and "float32" in p.dtypes and not isinstance(p, native)
               and (p.deterministic or not get_deterministic()) and registry.verdict(p, wide, target=target)]
        return [p for p in via if p.name != "direct"] or via  # direct: only when nothing else runs it

    def check(self, problem: Problem, target: Target) -> Verdict:
        if not self._via(problem, target):
            return Verdict.no("no float32 plugin can run this problem")
        return Verdict.yes()

    def configs(self, problem: Problem, target: Target) -> list[Config]:
        wide = _float32(problem)
        return [Config(cfg, via=p.name) for p in self._via(problem, target)
                for cfg in registry.safe_configs(p, wide, target)[:VIA_CONFIGS]]

    def workspace_bytes(self, problem: Problem, config: Config, workspace_limit: int,
                        target: Target) -> int:
        """float32 copies of a, b, bias and out, plus the float32 plugin's own workspace."""
        name, inner = _inner(config)
        copies = sum(int(np.prod(s)) for s in problem.operand_shapes)
        copies += int(np.prod(problem.bias_shape)) if problem.bias else 0
        return 4 * copies + registry.workspace(registry.get(name), _float32(problem), inner, workspace_limit,
                                               target)

    def cost_features(self, problem: Problem, config: Config, target: Target, workspace_limit: int) -> Features:
        """The float32 plugin's features (its family's constants) plus the copies: each operand read in
        half and written in float32 (the output: read in float32, written in half), three more launches
        (four with a bias)."""
        name, inner = _inner(config)
        via = features_of(registry.get(name), _float32(problem), inner, target, workspace_limit)
        elems = sum(int(np.prod(s)) for s in problem.operand_shapes) + (problem.bias_shape[0] if problem.bias else 0)
        return dataclasses.replace(via, aux_bytes=via.aux_bytes + float(elems * (problem.itemsize + 4)),
                                   launches=via.launches + 3 + problem.bias)

    def compute_eps(self, dtype: str, config: Config | None = None) -> float:
        """The float32 arithmetic of the plugin and config it runs (``via``: TF32's 2**-10 through
        tensor_core under precision "high", 3xTF32's 2**-20, fp32 FMA's 2**-23); with no config the
        largest of the float32 plugins' (measure.tolerance adds the output's rounding to ``dtype``)."""
        if config is not None:
            name, inner = _inner(config)
            return registry.get(name).compute_eps("float32", inner)
        found = [p.compute_eps("float32") for p in registry.plugins()
                 if "float32" in p.dtypes and dtype not in p.dtypes and p is not self]
        return max(found, default=unit_roundoff("float32"))

    def sample_problems(self, op: str) -> list[Problem]:
        from convlab.problem import make_problem
        return [make_problem(op, 2, 4, 6, 5, 6, 3, 3, stride=2, padding=1, groups=2, dtype="float16",
                             bias=op != "wgrad"),
                make_problem(op, 1, 3, 5, 6, 3, 3, 2, dilation=(1, 2), padding=(1, 0), groups=3,
                             dtype="bfloat16")]

    def run(self, problem: Problem, config: Config, a, b, bias, out, *, workspace_limit: int) -> None:
        name, inner = _inner(config)
        kind = problem.dtype
        view = lambda arr: runtime.kernel_view(arr.reshape(-1))  # noqa: E731  (bf16 as its uint16 bits)
        sizes = [a.size, b.size, 0 if bias is None else bias.size, out.size]
        with scratch(sum(sizes), np.float32) as buf:
            wide, start = [], 0
            for arr, size in zip((a, b, bias, out), sizes):
                wide.append(None if arr is None else buf[start:start + size].reshape(arr.shape))
                start += size
            for arr, dst in zip((a, b, bias), wide[:3]):
                if arr is not None:
                    convert.widen(view(arr), dst.reshape(-1), kind)
            registry.run(registry.get(name), _float32(problem), inner, *wide, workspace_limit=workspace_limit)
            convert.narrow(wide[3].reshape(-1), view(out), kind)
