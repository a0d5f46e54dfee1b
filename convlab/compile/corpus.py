"""The compile corpus: which (plugin, problem, precision, layout, config) cases to compile for a target.

A :class:`Case` is one call a plugin would run: its problem in one dtype, the float32 precision it runs
under, the memory layout of its operands, and one of the configs the plugin offers for that problem on
the target. :func:`cases` expands problems into cases:

    for each problem (geometry and op), each dtype of DTYPES (float32 under "highest" and "high"),
    each registered plugin that accepts it on the target, each config it offers (all, or its first
    ``configs``), each operand layout: NCHW, and for plugins that take channels-last operands every
    mix of NCHW / channels-last a, b and out (one all-channels-last case for the others: the public
    op's layout copies); then the epilogue cases (:func:`with_epilogues`): the kernels fused with an
    epilogue (every config of a plugin that fuses, the heaviest epilogue; each activation once) and
    the epilogue pass

Problems come from the plugins' own ``sample_problems`` (the default: small, and chosen to reach their
kernel variants), from suites (``resnet50``, ...) and from single shapes, each with and without bias
where the op takes one.

:func:`picks` keeps the cases a first call runs in the default tuning mode: per problem, dtype and
precision, the cost model's pick (``heuristic``: the first of the tuner's ranking of its eligible
candidates on the target) in the layouts a whole model is called in (all NCHW, all channels-last). A
store built from them (``convlab compile --picks --store DIR``) holds every kernel a first pass over the
corpus's shapes launches, at a fraction of the corpus's compile work.

:func:`cover` keeps a subset for a corpus whose every case would take too long to compile (each
tensor-core kernel lowers in 5-25 s): per plugin, op, dtype and precision, a case is kept when it
brings a config, a layout mix, a bias flag or a problem not seen before, so every config and every
kernel variant a layout, a bias or a problem shape selects is compiled at least once, but not every
combination of them; a plugin that compiles per shape (``compiles_per_shape``: sizes are literals of
its kernels) is kept on its own sample problems only.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from convlab.epilogue import ACTIVATIONS, Epilogue
from convlab.plugin import registry
from convlab.plugin.contract import Config
from convlab.problem import DTYPES, OPS, Problem
from convlab.runtime.targets import Target

LAYOUTS = ("nchw", "nhwc")


@dataclass(frozen=True)
class Case:
    """One plugin call to compile: ``layouts`` gives a, b, out's layout ("nchw" or "nhwc")."""

    plugin: str
    problem: Problem
    precision: str
    layouts: tuple[str, str, str]
    config: Config
    epilogue: Epilogue | None = None

    @property
    def id(self) -> str:
        """A stable text identity (kernel-by-kernel comparisons between commits key on it)."""
        pr = self.problem
        geo = (f"x{'x'.join(map(str, pr.x_shape))}_w{'x'.join(map(str, pr.w_shape))}_o{pr.p}x{pr.q}"
               f"_s{pr.stride[0]}x{pr.stride[1]}_p{pr.padding[0]}x{pr.padding[1]}"
               f"_d{pr.dilation[0]}x{pr.dilation[1]}_g{pr.groups}{'_bias' if pr.bias else ''}")
        if pr.ndim == 3:  # a 2D case's id names no depth
            geo += f"_3d_o{pr.do}_s{pr.stride_d}_p{pr.padding_d}_d{pr.dilation_d}"
        epi = self.epilogue
        if epi is not None:  # the fused or the pass's kernels of this epilogue
            geo += (f"_epi-{epi.activation}{'-scale' if epi.scale else ''}{'-shift' if epi.shift else ''}"
                    f"{'-residual-' + epi.residual if epi.residual else ''}")
        return (f"{self.plugin}/{pr.op}/{pr.dtype}/{self.precision}/{'-'.join(self.layouts)}/{geo}/"
                f"{self.config.name}")


def sample_problems(plugins: Iterable[str] | None = None) -> list[Problem]:
    """Every registered plugin's ``sample_problems`` of every op (or those of ``plugins``)."""
    chosen = None if plugins is None else set(plugins)
    found: dict[tuple, Problem] = {}
    for plugin in registry.plugins():
        if chosen is not None and plugin.name not in chosen:
            continue
        for op in OPS:
            for problem in plugin.sample_problems(op) if op in plugin.ops else ():
                found.setdefault(problem.key(), problem)
    return list(found.values())


def suite_problems(names: Iterable[str]) -> list[Problem]:
    """The problems of built-in or file suites (every op of every entry)."""
    from convlab.bench.suite import load_suite

    return [problem for name in names for _, problem in load_suite(name).problems()]


def _variants(problem: Problem, dtypes: Sequence[str]) -> list[tuple[Problem, str]]:
    """(problem, precision) in each dtype, with and without bias where the op has one; float32 under
    both precisions."""
    biases = (problem.bias,) if problem.op == "wgrad" else (False, True)
    out = []
    for dtype, bias in itertools.product(dtypes, biases):
        variant = problem.replace(dtype=dtype, bias=bias)
        for precision in (("highest", "high") if dtype == "float32" else ("highest",)):
            out.append((variant, precision))
    return out


def _layouts(plugin_layouts: frozenset[str]) -> list[tuple[str, str, str]]:
    if "nhwc" in plugin_layouts:
        return list(itertools.product(LAYOUTS, repeat=3))
    return [("nchw",) * 3, ("nhwc",) * 3]


def cases(problems: Iterable[Problem], target: Target, *, plugins: Iterable[str] | None = None,
          ops: Iterable[str] = OPS, dtypes: Sequence[str] = DTYPES, configs: int | None = None,
          workspace_limit: int | None = None) -> list[Case]:
    """The cases of ``problems`` on ``target`` (see the module docstring); ``configs``: each plugin's
    first ``configs`` configs only (None: all)."""
    from convlab.runtime.settings import float32_precision, get_workspace_limit

    limit = get_workspace_limit() if workspace_limit is None else workspace_limit
    chosen = None if plugins is None else set(plugins)
    wanted_ops = set(ops)
    out: dict[str, Case] = {}
    for base in problems:
        if base.op not in wanted_ops:
            continue
        for problem, precision in _variants(base, dtypes):
            with float32_precision(precision):
                for plugin in registry.plugins(problem.op):
                    if chosen is not None and plugin.name not in chosen:
                        continue
                    for config in registry.safe_configs(plugin, problem, target)[:configs]:
                        if not registry.verdict(plugin, problem, config, limit, target):
                            continue
                        for layouts in _layouts(plugin.layouts):
                            case = Case(plugin.name, problem, precision, layouts, config)
                            out.setdefault(case.id, case)
    return list(out.values()) + with_epilogues(list(out.values()))


#: the epilogue every fused case compiles with (the most registers: erf, both per-channel operands and a
#: residual read), then the other activations, each on one case per plugin, op, dtype and precision
FUSED_EPILOGUE = Epilogue("gelu", scale=True, shift=True, residual="before")
OTHER_EPILOGUES = tuple(Epilogue(act, scale=True, shift=True, residual="after")
                        for act in ACTIVATIONS if act != "gelu")


def with_epilogues(found: list[Case]) -> list[Case]:
    """The epilogue cases of ``found`` (no epilogue): every case whose plugin fuses an epilogue into the
    kernels it runs (``fuses``) with :data:`FUSED_EPILOGUE`, and the first of each plugin, op, dtype and
    precision with each of :data:`OTHER_EPILOGUES`; and the epilogue pass's kernels (convlab.kernels.
    epilogue) once per dtype and output layout, on the first forward case of a plugin that does not fuse."""
    out, firsts, passes = [], set(), set()
    for case in found:
        pr, plugin = case.problem, registry.get(case.plugin)
        if plugin.fuses(pr, FUSED_EPILOGUE) == "":
            out.append(replace(case, epilogue=FUSED_EPILOGUE))
            klass = (case.plugin, pr.op, pr.dtype, case.precision)
            if klass not in firsts:
                firsts.add(klass)
                out += [replace(case, epilogue=epi) for epi in OTHER_EPILOGUES]
        elif pr.op == "forward" and (pr.dtype, case.layouts[2]) not in passes:
            passes.add((pr.dtype, case.layouts[2]))
            out.append(replace(case, epilogue=FUSED_EPILOGUE))
    return out


def _per_shape(case: Case) -> bool:
    """Whether the case's kernels are specialised on its sizes: its plugin compiles per shape, or the
    plugin its config runs through does (``via``: widen's float32 plugin)."""
    names = [case.plugin] + ([case.config["via"]] if "via" in case.config else [])
    return any(getattr(registry.get(name), "compiles_per_shape", False) for name in names)


def cover(found: Iterable[Case]) -> list[Case]:
    """The cases of ``found`` that bring a config, layout mix, bias flag or problem of their plugin, op,
    dtype and precision not seen before (see the module docstring)."""
    samples = {p.key() for p in sample_problems()}
    seen: set[tuple] = set()
    unbiased: dict[Problem, tuple] = {}  # a problem's key without bias, once per problem (not per case)
    out = []
    for case in found:
        pr = case.problem
        if _per_shape(case) and pr.key() not in samples:
            continue
        if pr not in unbiased:
            unbiased[pr] = pr.replace(bias=False).key()
        klass = (case.plugin, pr.op, pr.dtype, case.precision)
        keys = {klass + ("config", case.config.name), klass + ("layouts", case.layouts),
                klass + ("bias", pr.bias), klass + ("problem", unbiased[pr])}
        if case.epilogue is not None:  # an epilogue's kernels: each epilogue, and each config fused
            klass += ("epilogue",)
            keys = {klass + ("config", case.config.name), klass + (case.epilogue,)}
        if not keys <= seen:
            seen |= keys
            out.append(case)
    return out


def picks(found: Iterable[Case], target: Target, workspace_limit: int | None = None) -> list[Case]:
    """The cases of ``found`` that run their problem's pick in the default tuning mode on ``target``, in
    uniform layouts (see the module docstring)."""
    from convlab.autotune import mode_steps
    from convlab.autotune.cache_entries import eligible
    from convlab.runtime.settings import float32_precision, get_workspace_limit
    from convlab.runtime.targets import using

    limit = get_workspace_limit() if workspace_limit is None else workspace_limit
    chosen: dict[tuple, tuple[str, str] | None] = {}
    out = []
    for case in found:
        if case.epilogue is not None or len(set(case.layouts)) != 1:  # an unfused first call's kernels only
            continue
        key = (case.problem.key(), case.precision)
        if key not in chosen:
            with using(target), float32_precision(case.precision):
                cands = eligible(case.problem, limit)
                pick = mode_steps.heuristic(case.problem, "", cands, limit, 0.0)[0].winner if cands else None
            chosen[key] = None if pick is None else (pick.plugin.name, pick.config.name)
        if chosen[key] == (case.plugin, case.config.name):
            out.append(case)
    return out
