"""Shared measuring tools: random operands, error against the reference, tolerances, timing, and the
one check-and-time engine (:class:`CandidateResult`, :func:`trusted_output`, :func:`check_candidate`).
A candidate runs through :func:`convlab.call.candidate.run_candidate` (re-exported here), timed through
the launch plan it records (:func:`time_candidate`).

Used by the conformance suite, the autotuner and the benchmarks, so all three judge and time a
candidate the same way.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from convlab import reference, runtime
from convlab.call import operands, plan
from convlab.call.candidate import run_candidate
from convlab.runtime import settings
from .plugin import registry
from .plugin.contract import Config
from .plugin.registry import Candidate
from .problem import HALF_DTYPES, Problem, np_dtype, unit_roundoff


def random_operands(problem: Problem, rng: np.random.Generator | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Fresh standard-normal host operands (a, b, bias) of ``problem`` (order as in convlab.problem)."""
    rng = np.random.default_rng() if rng is None else rng
    a_shape, b_shape, _ = problem.operand_shapes
    dtype = np_dtype(problem.dtype)  # float16 / bfloat16: the float64 draws rounded once
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    bias = None
    if problem.bias:
        bias = rng.standard_normal(problem.bias_shape).astype(dtype)
    return a, b, bias


def to_device(*arrays: np.ndarray | None) -> tuple[Any, ...]:
    """Device copies of host arrays (None stays None)."""
    return tuple(None if a is None else runtime.to_device(a) for a in arrays)


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| in float64; inf when ``out`` holds a NaN or infinity."""
    out = np.asarray(out, np.float64)
    if not np.all(np.isfinite(out)):
        return math.inf
    denom = float(np.linalg.norm(ref))
    diff = float(np.linalg.norm(out - ref))
    return diff / denom if denom > 0 else diff


#: the accumulation bound's constants, in units of the arithmetic's machine epsilon (:func:`tolerance`)
ACC_SQRT, ACC_FLOOR = 8.0, 16.0


def output_rounding(problem: Problem, reference: np.ndarray | None = None) -> float:
    """Relative norm error of storing the exact result in ``problem.dtype`` when the arithmetic is wider
    (float16 / bfloat16 outputs of an fp32 accumulator; 0 for float32 and float64, whose last rounding
    is the accumulation's): ``||fl(ref) - ref|| / ||ref||`` computed from the float64 ``reference``, or
    without one its bound, the unit roundoff of round-to-nearest (2**-11 float16, 2**-8 bfloat16)."""
    if problem.dtype not in HALF_DTYPES:
        return 0.0
    if reference is None:
        return unit_roundoff(problem.dtype) / 2
    ref = np.asarray(reference, np.float64)
    return rel_error(ref.astype(np_dtype(problem.dtype)), ref)


def tolerance(problem: Problem, eps: float, reference: np.ndarray | None = None) -> float:
    """Relative-norm tolerance of a plugin whose arithmetic has machine epsilon ``eps``
    (:meth:`convlab.plugin.contract.Algorithm.compute_eps` of the plugin and config that run).

    An output element is stored as ``o = fl(v)``, ``v = y + d`` the kernel's value: ``y`` the exact sum
    of the (rounded) operands' L = ``problem.reduction_length`` products, ``d`` the kernel's arithmetic
    error (its inputs' conversion: TF32 or 3xTF32's split; its accumulation).

    - Accumulation: the rounding errors of a length-L sum of random terms grow as sqrt(L) * eps, so
      ``||d|| / ||y|| <= acc = eps * (8 sqrt(L) + 16)``. Every plugin's every accepted config on the
      simulator, over its class examples and draws of every op (tools/error_survey.py), erred
      at most 0.41 eps sqrt(L) beyond the output rounding in fp32 arithmetic (331 runs; fp16 and bf16
      inputs included), 0.30 in float64, 0.11 in 3xTF32: the constant 8 leaves a margin of 19 or more
      at long reductions, and the floor 16 covers tiny ones (a few products that cancel).
    - Output rounding (float16 / bfloat16: the fp32 accumulator rounded once, as stored): where
      ``fl(v) != fl(y)``, y lies within |d| of a rounding boundary, so both of its neighbours are within
      |fl(y) - y| + 2 |d| of it; hence ``||o - y|| <= ||fl(y) - y|| + 2 ||d||`` and the tolerance is
      :func:`output_rounding` (the error of a perfectly rounded result: about 0.43 * 2**-11 for many
      float16 outputs, measured from ``reference`` when given, else its bound 2**-11) plus ``2 * acc``.
      A kernel that sums in half precision fails it: tensor_core with its mma accumulating in fp16
      erred 1.5 to 2.4 times the tolerance (L = 72 to 1152, 256 outputs), a running fp16 sum rounded
      every 16 products 2.0 to 6.0 times (4.6 at L = 576). A correct kernel's rounding of the exact
      result gets within 2 acc of the tolerance (0.998 of it on a one-element output, where
      ``fl(y) - y`` is all the error).
    """
    acc = eps * (ACC_SQRT * math.sqrt(max(problem.reduction_length, 1)) + ACC_FLOOR)
    if problem.dtype in HALF_DTYPES:
        return output_rounding(problem, reference) + 2.0 * acc
    return acc


def plugin_tolerance(plugin: Any, problem: Problem, config: Config | None = None,
                     reference: np.ndarray | None = None) -> float:
    """:func:`tolerance` with the eps of ``plugin`` running ``config`` (its arithmetic for that config:
    a composite such as widen answers for the plugin and config it runs; no config: the
    largest over its configs). The conformance checks judge a candidate by this, and the autotuner and
    ``convlab bench`` too (:func:`check_candidate`: the same eps and tolerance). A config's eps includes
    its declared ``error_growth`` (:meth:`convlab.plugin.contract.Algorithm.error_eps`)."""
    return tolerance(problem, candidate_eps(plugin, problem, config), reference)


def candidate_eps(plugin: Any, problem: Problem, config: Config | None) -> float:
    """The eps :func:`plugin_tolerance` scales with: ``error_eps`` of the config, or without one
    ``compute_eps(dtype)``, the bound over every config."""
    return plugin.compute_eps(problem.dtype) if config is None else plugin.error_eps(problem, config)


def time_candidate(candidate: Candidate, problem: Problem, a: Any, b: Any, bias: Any, out: Any, *,
                   workspace_limit: int, warmup: int = 3, repeat: int = 20,
                   plans: dict | None = None) -> list[float] | None:
    """Per-call milliseconds (CUDA events) of a candidate as a planned call runs it: its launches
    recorded once on these device operands (convlab.call.plan.record: what the public op records), then
    replayed after ``warmup`` replays (thin launches; one CUDA graph from the
    ``convlab.call.graphs.CAPTURE_AFTER``-th); None without a GPU. ``plugin.run`` alone would time
    Numba's per-launch marshalling as well, tens of microseconds a launch that no planned call pays.
    ``plans``: a dict keeping each candidate's recorded plan between calls (the autotuner's rounds)."""
    recorded = None if plans is None else plans.get(candidate.label)
    if recorded is None:
        recorded = plan.record(candidate, problem, (a, b, bias, out), workspace_limit=workspace_limit)
        if plans is not None:
            plans[candidate.label] = recorded
    recs = tuple(operands.adapt(v) for v in (a, b, bias, out))
    return runtime.time_ms(lambda: recorded.run(recs, 0), warmup=warmup, repeat=repeat)


def wall_clock_ms(candidate: Candidate, problem: Problem, a: Any, b: Any, bias: Any, out: Any,
                  workspace_limit: int) -> float:
    """Wall-clock milliseconds of one synchronised run. The CUDA simulator has no device clock, so this
    is its stand-in; the number says how slowly Python simulates a kernel, not how fast a GPU runs it."""
    start = time.perf_counter()
    run_candidate(candidate, problem, a, b, bias, out, workspace_limit)
    runtime.synchronize()
    return (time.perf_counter() - start) * 1e3


def wall_clock_timer(problem: Problem, repeat: int = 1,
                     rng: np.random.Generator | None = None) -> Callable[[Candidate], list[float]]:
    """``timer(candidate) -> [ms, ...]``: :func:`wall_clock_ms` of ``repeat`` runs on fresh random
    operands of ``problem``, what notebooks and self-tests hand to ``autotune.tune(timer=...)`` on the
    simulator."""
    a, b, bias = to_device(*random_operands(problem, rng))
    out = runtime.empty(problem.operand_shapes[2], problem.dtype)
    limit = settings.get_workspace_limit()

    def timer(candidate: Candidate) -> list[float]:
        return [wall_clock_ms(candidate, problem, a, b, bias, out, limit) for _ in range(repeat)]

    return timer


# ---- the check-and-time engine shared by the autotuner and the benchmarks ---------------------------
#: Problems up to this many flops are checked against the host float64 reference (and every problem on
#: the simulator); larger ones against cuDNN in float64 when the caller has it, else the direct plugin.
HOST_REFERENCE_MAX_FLOPS = 5e8


@dataclass
class CandidateResult:
    """One candidate (or cuDNN) on one problem, as the autotuner and the benchmarks report it.

    ``status``: ``"ok"`` (checked, within tolerance), ``"wrong"`` (over tolerance: never timed, ranked or
    chosen), ``"error"`` (raised: ``error`` says what), ``"unchecked"`` (no trusted output), ``"not run"``.
    """

    plugin: str
    config: str
    status: str = "not run"
    error: str = ""
    rel_error: float | None = None
    tolerance: float | None = None
    median_ms: float | None = None
    op_median_ms: float | None = None  # the same candidate through the public op (benchmarks)
    min_ms: float | None = None
    samples: int = 0
    dropped_early: bool = False  # the tuner's first pass found it much slower than the leader
    auto: bool = False  # the autotuner's pick (benchmarks)
    tflops: float | None = None
    gbs: float | None = None
    vs_cudnn: float | None = None  # cuDNN ms / this ms: above 1 means faster than cuDNN
    workspace_bytes: int | None = None  # as the plugin reports it
    extra_mem_bytes: int | None = None  # allocated during the first run (kernel loading, cached buffers)
    steady_mem_bytes: int | None = None  # allocated during a later run

    @property
    def label(self) -> str:
        """``plugin[config]``, as :attr:`convlab.plugin.registry.Candidate.label`."""
        return f"{self.plugin}[{self.config}]"

    @property
    def verdict(self) -> str:
        """``status``, with the reason after a colon when there is one (``"wrong: rel err ..."``)."""
        return f"{self.status}: {self.error}" if self.error else self.status

    def fill_times(self, problem: Problem, times: list[float] | None) -> None:
        """Median, minimum and rates from per-run milliseconds (nothing when ``times`` is empty)."""
        if not times:
            return
        self.median_ms, self.min_ms, self.samples = statistics.median(times), min(times), len(times)
        if self.median_ms > 0:
            self.tflops = problem.flops / (self.median_ms * 1e-3) / 1e12
            self.gbs = problem.bytes / (self.median_ms * 1e-3) / 1e9

    @classmethod
    def from_dict(cls, row: dict) -> "CandidateResult":
        """Back from ``dataclasses.asdict`` (unknown keys ignored, so older files still load)."""
        return cls(**{k: row[k] for k in row if k in cls.__dataclass_fields__})


@dataclass
class Trusted:
    """The output candidates are checked against: float64, what it is, and its own unit roundoff (0
    for an exact float64 reference, the plugin's eps when another plugin's output stands in)."""

    output: np.ndarray | None
    name: str
    eps: float = 0.0


def _direct(problem: Problem) -> Candidate:
    """The ``direct`` plugin for ``problem``; for a dtype it does not take (fp16, bf16), direct's kernel
    on widened float32 copies (the ``widen`` plugin's ``via=direct`` config)."""
    direct = registry.get("direct")
    if problem.dtype in direct.dtypes:
        return Candidate(direct, direct.configs(problem)[0])  # the current target's
    return Candidate(registry.get("widen"), Config(via="direct"))


def trusted_output(problem: Problem, host: tuple, dev: tuple, limit: int, *,
                   cudnn: Any = None, transpose: bool = False) -> Trusted:
    """The one rule for what candidates are checked against (see HOST_REFERENCE_MAX_FLOPS).

    ``host`` and ``dev`` are the (a, b, bias) operands on the host and on the device; ``cudnn`` an
    optional :class:`convlab.bench.baseline.Cudnn` (its ``reference`` computes in float64 on the GPU).
    """
    if problem.flops <= HOST_REFERENCE_MAX_FLOPS or not runtime.HAS_DEVICE:
        return Trusted(reference.solve(problem, *host), "host float64")
    if cudnn is not None:
        try:
            return Trusted(np.asarray(cudnn.reference(problem, *dev, transpose=transpose), np.float64),
                           "cudnn float64")
        except Exception:  # e.g. out of memory in float64: fall back to direct
            pass
    try:
        cand = _direct(problem)
        out = runtime.empty(problem.operand_shapes[2], problem.dtype)
        run_candidate(cand, problem, *dev, out, limit)
        got = np.asarray(runtime.to_host(out), np.float64)
        if np.all(np.isfinite(got)):
            return Trusted(got, "direct", cand.plugin.compute_eps(problem.dtype, cand.config))
    except Exception as exc:  # the reference is the last resort below
        if problem.flops > 50 * HOST_REFERENCE_MAX_FLOPS:
            return Trusted(None, f"none ({type(exc).__name__}: {exc})")
    return Trusted(reference.solve(problem, *host), "host float64")


def judge(row: CandidateResult, got: np.ndarray, trusted: Trusted, problem: Problem, eps: float) -> bool:
    """Fill ``row``'s check from an output: rel error vs the trusted output, against the tolerance of
    the candidate's arithmetic (plus the trusted output's own when it is inexact). True when ok."""
    if trusted.output is None:
        row.status = "unchecked"
        return False
    row.rel_error = rel_error(got, trusted.output)
    exact = None if trusted.eps else trusted.output  # an inexact trusted output: the rounding's bound
    row.tolerance = tolerance(problem, eps, exact) + (tolerance(problem, trusted.eps) if trusted.eps else 0.0)
    if row.rel_error <= row.tolerance:
        row.status = "ok"
        return True
    row.status = "wrong"
    row.error = f"rel err {row.rel_error:.3g} > tolerance {row.tolerance:.3g} vs {trusted.name}"
    return False


def check_candidate(row: CandidateResult, cand: Candidate, problem: Problem, dev: tuple, out: Any,
                    poison: np.ndarray, trusted: Trusted, limit: int) -> bool:
    """Run ``cand`` once into ``out`` poisoned with NaN and :func:`judge` it; an exception is recorded
    as status "error" (never raised). True when the candidate may be timed."""
    try:
        runtime.copy_into(out, poison)
        run_candidate(cand, problem, *dev, out, limit)
        eps = candidate_eps(cand.plugin, problem, cand.config)  # plugin_tolerance's eps
        return judge(row, runtime.to_host(out), trusted, problem, eps)
    except Exception as exc:  # a broken candidate is reported, never fatal
        row.status, row.error = "error", f"{type(exc).__name__}: {exc}"[:500]
        return False
