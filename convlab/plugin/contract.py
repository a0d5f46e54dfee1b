"""The algorithm-plugin contract.

A plugin is a class, registered with :func:`convlab.register`, that owns its ``@cuda.jit`` kernels and
answers these questions about a :class:`~convlab.problem.Problem`:

    check(problem, target)                          -> Verdict   may I run it? if not, why (one line)
    configs(problem, target)                        -> [Config]  tunable variants (tile sizes ...), best first
    workspace_bytes(problem, config, limit, target) -> int       extra device memory I will allocate
    run(problem, config, a, b, bias, out, workspace_limit)       write ``out`` (see convlab.problem for a, b, out)
    compute_eps(dtype, config=None)                 -> float     machine epsilon of my arithmetic (tolerances)
    check_config(problem, config, target)           -> Verdict   may this config run it? (default yes)
    error_growth(problem, config)                   -> float     how many times plain accumulation's error
                                                                 this config makes (transforms: measured)
    error_eps(problem, config)                      -> float     compute_eps(dtype) x error_growth: what a
                                                                 tolerance of this config scales with
    accuracy_note(problem, config)                  -> str       one line on the config's accuracy (explain)
    sample_problems(op)                             -> [Problem] problems I accept, for the conformance suite
    cost_features(problem, config, target, limit)   -> Features  what the autotuner's cost model should
                                                                 know of a candidate (default: its generic view)
    cost_hints(problem, config, target)             -> dict      optional: fields that replace some of those
                                                                 Features (the simple form; default {})
    fuses(problem, epilogue)                        -> str       optional: '' when run_fused applies the
                                                                 epilogue in its stores, else why not
                                                                 (into an out of ``fused_layouts``)
    run_fused(problem, config, a, b, bias, out, epilogue, workspace_limit)   ``run`` with the epilogue fused

``target`` (a :class:`convlab.runtime.targets.Target`) is the machine the kernels are meant for: its compute
capability, SM count, shared-memory and register limits and features (``target.simulator`` for the
simulator's tiny tiles). The planning questions take it so that a plugin's configs for any GPU can be
computed on a machine without one; ``run`` executes on :func:`convlab.runtime.targets.current`, the target the
plan was made for. A config that cannot fit the target is left out of ``configs`` (``target.fits``),
and a problem no config fits is declined with that reason. Callers may leave the target out (the
current one is used), and a plugin whose methods take no ``target`` still works: it is dropped for it.
:meth:`Algorithm.applicable` combines the op, dtype, ``check``, ``check_config``, lossiness and workspace
conditions.

Accuracy: ``compute_eps(dtype, config)`` is the unit roundoff of a config's arithmetic (no config: the
bound over every config), the eps of ``convlab.measure.tolerance``. A config whose rounding error grows
beyond plain accumulation's (Winograd's, FFT's transforms) declares the factor, measured against fp32
FMA accumulation, in ``error_growth(problem, config)``; ``error_eps`` is their product, what
``measure.plugin_tolerance`` scales with. ``error_growth`` above 1 is *lossy*:
:func:`convlab.set_allow_lossy` (False) makes ``applicable`` decline it.

Class attributes declare the rest: ``name``, ``ops``, ``dtypes``, ``priority`` (higher wins when nothing
was timed), ``deterministic`` (same bits on every run), ``description``, ``compiles_per_shape`` (its
kernels are specialised on the layer's sizes, so every new shape compiles: the conformance suite draws a
quarter of the profile's examples for it on a GPU, where each compile costs seconds), ``layouts`` (the
memory layouts of the 4-D operands ``run`` takes: ``"nchw"``, C-contiguous; ``"nhwc"``, channels-last
strides, handed over as they are, and checked by ``check_channels_last_operands``; a plugin without it
gets NCHW copies: convlab.kernels.data.layouts). ``tensor_core`` takes ``"nhwc"``. ``ndims`` (default
``(2,)``): the spatial dimensions N its kernels take; :meth:`Algorithm.applicable` declines the others,
naming N. 1D problems reach a plugin as their 2D embedding (``Problem.lowered()``: H = 1), so a 2D
plugin runs every conv1d; a plugin claims 3 only when its ``run`` takes 5-D operands (NCDHW, KCTRS).

Epilogues (convlab.epilogue) are optional: a plugin that fuses none (the default ``fuses`` answers why)
has the op apply the epilogue in a separate pass over ``out`` after ``run``, so every epilogue works
with every plugin; one whose ``fuses`` answers '' gets ``run_fused`` with the epilogue's device operands
(:class:`convlab.kernels.epilogue.EpilogueOperands`) and applies it before its store, with
:func:`convlab.kernels.epilogue.device_epilogue`'s arithmetic. ``fused_layouts`` (default ``{"nchw"}``)
names the layouts of ``out`` (as ``run_fused`` takes it, after the ``layouts`` copies) it fuses into:
``"nchw"`` C-contiguous, ``"nhwc"`` channels-last; the op fuses only where ``out``'s layout is one of
them and the residual (if any) has ``out``'s layout, else it runs ``run`` and the pass. So a residual
reaches ``run_fused`` in ``out``'s layout: read it at the offset the output element is stored at.

``ordered_configs`` (default False): ``configs`` lists a problem's configs best first, as measured on a
GPU, so where the cost model's estimates of two of them are within
:data:`convlab.autotune.ranking.RESOLUTION` the ranking keeps the plugin's order instead of the model's.

The cost questions are optional: a plugin that declares neither is ranked on the generic view of
:mod:`convlab.plugin.cost`, which holds the :class:`~convlab.plugin.cost.Features` record and the tile,
wave and occupancy arithmetic the built-in plugins' declarations share.
"""
from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import numpy as np

from convlab.epilogue import Epilogue
from convlab.problem import Problem
from convlab.runtime.targets import Target

from .config import Config, Verdict, config_from  # noqa: F401  (re-exported: the contract's values)
from .cost import Features, generic

if TYPE_CHECKING:  # the kernels import numba.cuda: a plugin module imports them, the contract does not
    from convlab.kernels.epilogue import EpilogueOperands

#: the planning methods that take a ``target``, with the count of positional parameters before it
TARGETED = {"check": 1, "configs": 1, "workspace_bytes": 3, "check_config": 2}


def _takes_target(fn: Callable) -> bool:
    params = inspect.signature(fn).parameters.values()
    return any(p.name == "target" or p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)


def _with_config(fn: Callable) -> Callable:
    """A plugin's ``compute_eps`` written as ``compute_eps(self, dtype)`` callable with a ``config`` too
    (dropped: its arithmetic is the same for every config)."""
    @functools.wraps(fn)
    def compute_eps(self: Any, dtype: str, config: Config | None = None) -> float:
        return fn(self, dtype)
    compute_eps.__convlab_configured__ = True  # type: ignore[attr-defined]
    return compute_eps


def _with_target(fn: Callable, positional: int) -> Callable:
    """``fn`` (a plugin's planning method) callable with or without a target: a missing one is the
    current target (:func:`convlab.runtime.targets.current`), and a method written without a ``target``
    parameter gets none."""
    takes = _takes_target(fn)

    @functools.wraps(fn)
    def method(self: Any, *args: Any, target: Target | None = None, **kwargs: Any) -> Any:
        if len(args) > positional:
            args, target = args[:positional], args[positional]
        if not takes:
            return fn(self, *args, **kwargs)
        if target is None:
            from convlab.runtime.targets import current

            target = current()
        return fn(self, *args, target=target, **kwargs)
    method.__convlab_targeted__ = True  # type: ignore[attr-defined]
    return method


class Algorithm:
    """Base class of every algorithm plugin. Subclass it, set the class attributes, implement ``run``."""

    name: ClassVar[str] = ""
    ops: ClassVar[frozenset[str]] = frozenset()
    dtypes: ClassVar[frozenset[str]] = frozenset({"float32", "float64"})
    priority: ClassVar[int] = 0
    deterministic: ClassVar[bool] = True
    description: ClassVar[str] = ""
    compiles_per_shape: ClassVar[bool] = False
    layouts: ClassVar[frozenset[str]] = frozenset({"nchw"})
    ndims: ClassVar[tuple[int, ...]] = (2,)
    fused_layouts: ClassVar[frozenset[str]] = frozenset({"nchw"})
    ordered_configs: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, positional in TARGETED.items():  # target optional for callers, dropped for old plugins
            fn = cls.__dict__.get(name)
            if callable(fn) and not getattr(fn, "__convlab_targeted__", False):
                setattr(cls, name, _with_target(fn, positional))
        eps = cls.__dict__.get("compute_eps")
        if callable(eps) and "config" not in inspect.signature(eps).parameters:
            cls.compute_eps = _with_config(eps)  # type: ignore[method-assign]

    # -- questions the registry asks --------------------------------------------------------------
    def check(self, problem: Problem, target: Target | None = None) -> Verdict:
        """Plugin-specific applicability (groups, stride, divisibility, the target's features ...).
        Override this."""
        return Verdict.yes()

    def configs(self, problem: Problem, target: Target | None = None) -> list[Config]:
        """Tunable configurations for ``problem`` on ``target``, the preferred one first."""
        return [Config()]

    def workspace_bytes(self, problem: Problem, config: Config, workspace_limit: int,
                        target: Target | None = None) -> int:
        """Extra device memory ``run`` allocates for ``problem`` under ``workspace_limit``."""
        return 0

    def compute_eps(self, dtype: str, config: Config | None = None) -> float:
        """Machine epsilon of the arithmetic this plugin does for ``dtype`` with ``config`` (None: the
        largest of its configs'): the accumulator's (2**-23 for fp32, also for fp16 / bf16 inputs summed in
        fp32), or its inputs' conversion where that is coarser (2**-10 for TF32). The tolerance of
        :func:`convlab.measure.tolerance` scales it with the reduction length and adds the rounding of
        a half-precision output. Default: the dtype's own epsilon."""
        return float(np.finfo(dtype).eps)

    def check_config(self, problem: Problem, config: Config, target: Target | None = None) -> Verdict:
        """Config-specific applicability, asked after :meth:`check` for each config (e.g. a transform
        whose error is too large for the float32 precision in force). Override this."""
        return Verdict.yes()

    def error_growth(self, problem: Problem, config: Config) -> float:
        """How many times the rounding error of plain accumulation at :meth:`compute_eps` ``config``'s
        arithmetic makes on ``problem``: 1 for FMA and GEMM plugins; a transform algorithm declares its
        measured factor (module docstring). Above 1 the config is lossy."""
        return 1.0

    def error_eps(self, problem: Problem, config: Config) -> float:
        """The unit roundoff a tolerance of ``config`` on ``problem`` scales with:
        ``compute_eps(problem.dtype, config) * error_growth(problem, config)``."""
        return self.compute_eps(problem.dtype, config) * self.error_growth(problem, config)

    def accuracy_note(self, problem: Problem, config: Config) -> str:
        """One line on ``config``'s accuracy that ``explain`` prints beside the plugin ("" : nothing)."""
        return ""

    def sample_problems(self, op: str) -> list[Problem]:
        """A few problems this plugin accepts, checked by the conformance suite besides random ones
        (override when the plugin's applicability is too narrow for random draws to hit it)."""
        return []

    def run(self, problem: Problem, config: Config, a: Any, b: Any, bias: Any, out: Any, *,
            workspace_limit: int) -> None:
        """Compute ``out`` from device arrays ``a``, ``b`` (and ``bias`` or None). See convlab.problem."""
        raise NotImplementedError

    def fuses(self, problem: Problem, epilogue: Epilogue) -> str:
        """'' when :meth:`run_fused` applies ``epilogue`` before its store for ``problem``, else why it
        does not (the op then runs ``run`` and a separate epilogue pass). Default: fuses nothing."""
        return "fuses no epilogue: the op applies it in a separate pass"

    def run_fused(self, problem: Problem, config: Config, a: Any, b: Any, bias: Any, out: Any,
                  epilogue: EpilogueOperands, *, workspace_limit: int) -> None:
        """``run`` with ``epilogue`` applied before the store; called only where :meth:`fuses` said ''."""
        raise NotImplementedError(f"{self.name} fuses no epilogue")

    def cost_features(self, problem: Problem, config: Config, target: Target,
                      workspace_limit: int) -> Features:
        """What the autotuner's cost model knows of this candidate on ``target`` (modes "heuristic" and
        "tune" rank by it): the FLOPs and bytes of the main kernel, the bytes of auxiliary copies, the
        launches, the grid and its occupancy, the arithmetic (:class:`convlab.plugin.cost.Features`),
        computed from the plugin's own plan. Default: the generic view of :mod:`convlab.plugin.cost`
        (the problem's FLOPs and bytes, the workspace as one auxiliary pass). A declaration that raises
        or answers something other than Features gets the generic view too."""
        return generic(self, problem, config, target, workspace_limit)

    def cost_hints(self, problem: Problem, config: Config, target: Target) -> dict[str, Any]:
        """Optional, the simple form of :meth:`cost_features`: entries that replace those fields of the
        declared (or generic) Features (``convlab.plugin.cost.HINT_FIELDS``): e.g. ``launches`` (kernels
        a call issues), ``aux_bytes`` (bytes of layout copies / scratch written and read), ``flops``
        (executed, padding included), ``blocks`` / ``threads`` (the main kernel's grid), ``arith``
        ("fp32", "tf32", "f16", ...), ``family`` (the efficiency group), ``kind`` (the kind of kernel).
        A hint that raises is ignored. Default: none."""
        return {}

    # -- the full predicate -----------------------------------------------------------------------
    def applicable(self, problem: Problem, config: Config | None = None,
                   workspace_limit: int | None = None, target: Target | None = None) -> Verdict:
        """The op, dtype, plugin-specific, config-specific, lossiness and workspace conditions together on
        ``target`` (default: :func:`convlab.runtime.targets.current`), with the first failing condition as
        the reason."""
        from convlab.runtime.settings import get_allow_lossy, get_workspace_limit
        from convlab.runtime.targets import current

        target = current() if target is None else target
        if problem.op not in self.ops:
            return Verdict.no(f"implements {sorted(self.ops)}, not {problem.op}")
        if problem.dtype not in self.dtypes:
            return Verdict.no(f"supports dtypes {sorted(self.dtypes)}, not {problem.dtype}")
        if problem.ndim not in self.ndims:
            lowered = " (a 1D problem runs as its 2D embedding: Problem.lowered())" if problem.ndim == 1 else ""
            return Verdict.no(f"runs {'/'.join(f'{n}D' for n in self.ndims)} convolutions, not "
                              f"{problem.ndim}D{lowered}")
        verdict = self.check(problem, target=target)
        if not verdict:
            return verdict
        limit = get_workspace_limit() if workspace_limit is None else workspace_limit
        if config is None:
            configs = self.configs(problem, target=target)
            if not configs:
                return Verdict.no(f"no config of {self.name} fits {target.name}")
            config = configs[0]
        verdict = self.check_config(problem, config, target=target)
        if not verdict:
            return verdict
        if not get_allow_lossy():
            growth = self.error_growth(problem, config)
            if growth > 1.0:
                return Verdict.no(f"lossy: {config.name} makes {growth:.3g}x the rounding error of plain "
                                  "accumulation and convlab.set_allow_lossy(False) is in force")
        need = self.workspace_bytes(problem, config, limit, target=target)
        if need > limit:
            return Verdict.no(f"needs {need} bytes of workspace, over the limit of {limit}")
        return Verdict.yes()

    def __repr__(self) -> str:
        return f"<plugin {self.name}: ops={sorted(self.ops)} priority={self.priority}>"
