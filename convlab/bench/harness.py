"""The benchmark harness: every eligible plugin (and the autotuner's pick, and cuDNN) on every problem.

For each (suite entry, op) problem::

    operands   fresh random a, b (bias) on the device, shared by every candidate and by cuDNN
    reference  convlab.bench.trusted.float64_reference: numpy float64 on the host for small problems,
               else cuDNN in float64 on the GPU, else torch float64 on the CPU, else numpy in chunks of
               images; never a convlab plugin (the row's ``reference`` names which)
    check      each candidate (plugin, config; the auto pick too): ``out`` poisoned with NaN, one run
               (compiles), relative error against the reference; a wrong or crashing candidate is
               recorded and never timed, ranked or compared
    memory     device memory allocated during that first run (numba's memory info, frees deferred:
               kernel loading and buffers a plugin caches across calls count; driver granularity), and
               during a later run (steady state); cuDNN: torch's peak beyond its output
    rounds     convlab.bench.rounds.interleave over every checked candidate's two paths (convlab.bench.
               paths: ``plugin.run`` -> ``median_ms``, the public op with the candidate forced ->
               ``op_median_ms``) and cuDNN: warm-up, then ROUNDS interleaved rounds of CUDA events
               (``repeat`` samples each, fewer for a slow one: ``max_seconds``)
    recheck    each path's last timed output (``out`` poisoned before that call) against the reference:
               a path that disagrees makes the row ``wrong`` and drops its times; ``rel_error`` is the
               largest error of every checked output
    cuDNN      ratio = cuDNN ms / candidate ms (> 1: faster)

On the simulator nothing is timed and each candidate is checked by its first run; with ``check_replay``
(``convlab bench --check-replay``) also through the public op, by a poisoned replay of the plan its first
op call recorded (the path a GPU run times: a plugin whose ``run`` does host work a replay skips shows).
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np

from convlab import measure, runtime
from convlab.measure import CandidateResult, Trusted, judge
from convlab.ops import strategy
from convlab.plugin import registry
from convlab.plugin.contract import Config
from convlab.plugin.registry import Candidate
from convlab.problem import OPS, Problem
from convlab.runtime import scratch
from convlab.runtime.settings import get_workspace_limit

from . import paths, rounds
from .baseline import Cudnn
from .paths import op_call, run_candidate  # noqa: F401  (the harness's names for them)
from .report import ProblemResult, rank, summary
from .rounds import Contender
from .suite import Suite, SuiteEntry
from .trusted import float64_reference

#: interleaved rounds of the timing (convlab.bench.rounds)
ROUNDS = 5
#: Suites whose largest problem exceeds this many flops are refused on the simulator (without force).
SIMULATOR_MAX_FLOPS = 2e6


@dataclass
class BenchOptions:
    ops: tuple[str, ...] = OPS
    plugins: tuple[str, ...] | None = None  # None: every registered plugin
    all_configs: bool = False
    warmup: int = 5
    repeat: int = 30
    max_seconds: float = 2.0  # timing budget per candidate (repeat is cut, never below 3)
    workspace_limit: int | None = None
    auto: bool = True  # also report (and time) the autotuner's pick
    simulator_wall_clock: bool = False  # simulator: record one run's wall-clock ms as the median
    check_replay: bool = False  # simulator: also check the public op's replay (a GPU checks every timed path)
    seed: int = 0


def allocated_during(fn: Callable[[], Any]) -> int | None:
    """Run ``fn()``; the device bytes allocated meanwhile (frees deferred, so an upper bound of the peak),
    None without a GPU."""
    if not runtime.HAS_DEVICE:
        fn()
        return None
    cuda = runtime.cuda
    ctx = cuda.current_context()
    runtime.synchronize()
    ctx.deallocations.clear()
    free0 = ctx.get_memory_info().free
    with cuda.defer_cleanup():
        fn()
        runtime.synchronize()
        free1 = ctx.get_memory_info().free
    return max(0, free0 - free1)


def autotune_module() -> Any:
    """The convlab.autotune module, or None when it is not installed."""
    try:
        return importlib.import_module("convlab.autotune")
    except ModuleNotFoundError as exc:
        if exc.name != "convlab.autotune":
            raise
        return None


def auto_pick(problem: Problem, limit: int) -> tuple[Candidate | None, dict]:
    """The autotuner's choice and how it was made ({plugin, config, source[, tuning_s]} or {error}).

    Uses ``convlab.autotune.tune`` (which says whether the pick came from the cache, was tuned now or
    went by priority), else ``autotune.choose``, else the strategy's ``"auto"`` rule.
    """
    autotune = autotune_module()
    info: dict[str, Any] = {}
    try:
        if autotune is not None and hasattr(autotune, "tune"):
            result = autotune.tune(problem, workspace_limit=limit)
            if result.winner is None:
                return None, {"error": f"no candidate ran correctly: {result.reason}"}
            cand, info = result.winner, {"source": result.source, "tuning_s": result.tuning_s}
        elif autotune is not None and hasattr(autotune, "choose"):
            cand, info = autotune.choose(problem, limit), {"source": "autotune"}
        else:
            cand, info = strategy.resolve(problem, "auto", limit), {"source": "priority"}
    except Exception as exc:  # a failing autotuner is recorded, not fatal
        return None, {"error": f"{type(exc).__name__}: {exc}"}
    return cand, {"plugin": cand.plugin.name, "config": cand.config.name, **info}


def candidates(problem: Problem, opts: BenchOptions, limit: int) -> tuple[list[Candidate], dict]:
    """Eligible candidates (the first applicable config of each plugin, or all) and declining reasons."""
    chosen, declined = [], {}
    for plugin in registry.plugins(problem.op):
        if opts.plugins is not None and plugin.name not in opts.plugins:
            continue
        configs = registry.safe_configs(plugin, problem)
        ok = [c for c in configs if registry.verdict(plugin, problem, c, limit)]
        if not ok:
            verdict = registry.verdict(plugin, problem, configs[0] if configs else None, limit)
            declined[plugin.name] = verdict.reason or "offers no configuration"
        chosen += [Candidate(plugin, c) for c in (ok if opts.all_configs else ok[:1])]
    return chosen, declined


def _first(cand: Candidate, problem: Problem, dev: tuple, out: Any, poison: np.ndarray, trusted: Trusted,
           opts: BenchOptions, limit: int) -> tuple[CandidateResult, bool]:
    """The candidate's row after its first run (checked) and the memory probes; True when it may be timed."""
    row = CandidateResult(cand.plugin.name, cand.config.name)
    try:
        row.workspace_bytes = int(cand.plugin.workspace_bytes(problem, cand.config, limit))
        scratch.release()  # so the first run's allocation shows the plugin's scratch memory
        usable = []  # the first run (compiles, then checked) inside the memory probe
        row.extra_mem_bytes = allocated_during(
            lambda: usable.append(paths.first_check(row, cand, problem, dev, out, poison, trusted, limit)))
        if usable[0] and runtime.HAS_DEVICE:
            row.steady_mem_bytes = allocated_during(lambda: paths.run_candidate(cand, problem, dev, out, limit))
        elif usable[0] and opts.simulator_wall_clock:  # no rates: not GPU speed
            row.median_ms = paths.wall_clock_ms(cand, problem, dev, out, limit)
        return row, usable[0]
    except Exception as exc:  # a plugin failing to compile or launch is recorded, never fatal
        row.status, row.error = "error", paths.why(exc)
        return row, False


def _cudnn_first(cudnn: Cudnn, problem: Problem, dev: tuple, out: Any, trusted: Trusted, transpose: bool,
                 opts: BenchOptions, limit: int) -> tuple[CandidateResult, Contender | None]:
    """cuDNN's row after its first run (checked) and its memory; its contender when it may be timed."""
    row, cand = CandidateResult("cudnn", "default"), Candidate(cudnn, Config())
    try:
        cudnn.bind(problem, *dev, transpose=transpose)
        paths.run_candidate(cand, problem, dev, out, limit)
        runtime.synchronize()
        if not judge(row, cudnn.output(), trusted, problem, cudnn.compute_eps(problem.dtype)):
            return row, None
        row.extra_mem_bytes = row.steady_mem_bytes = cudnn.extra_memory(problem)  # after its first run
        fn = lambda: paths.run_candidate(cand, problem, dev, out, limit)  # noqa: E731
        samples, warmup = paths.sampling(fn, opts.repeat, opts.warmup, opts.max_seconds)
        return row, Contender(fn, samples, warmup, keep=lambda _: cudnn.output())
    except Exception as exc:
        row.status, row.error = "error", paths.why(exc)
        return row, None


def bench_problem(suite: str, entry: SuiteEntry, problem: Problem, opts: BenchOptions,
                  cudnn: Cudnn | None = None, on_step: Callable[[str], None] | None = None) -> ProblemResult:
    """Check every candidate (and cuDNN) on one problem, time the checked ones in interleaved rounds and
    check each timed path's last output (module docstring)."""
    limit = get_workspace_limit() if opts.workspace_limit is None else opts.workspace_limit
    step = on_step or (lambda _: None)
    transpose = entry.kind == "conv_transpose2d"
    res = ProblemResult(suite, entry.label, entry.kind, problem.op, problem.to_dict(), problem.flops,
                        problem.bytes)
    cands, res.declined = candidates(problem, opts, limit)
    pick = None
    if opts.auto:
        step("auto")
        pick, res.auto = auto_pick(problem, limit)
    rng = np.random.default_rng([opts.seed, *problem.key()[2:11]])
    host = measure.random_operands(problem, rng)
    dev = measure.to_device(*host)
    step("reference")
    gpu = None if cudnn is None else (lambda: cudnn.reference(problem, *dev, transpose=transpose))
    trusted = float64_reference(problem, host, gpu, transpose)
    res.reference = trusted.name
    out = runtime.empty(problem.operand_shapes[2], problem.dtype)
    poison = np.full(problem.operand_shapes[2], np.nan, problem.dtype)
    extra = [pick] if (pick is not None and (opts.plugins is None or pick.plugin.name in opts.plugins)
                       and all((c.plugin.name, c.config) != (pick.plugin.name, pick.config)
                               for c in cands)) else []
    timed: dict[tuple, Contender] = {}
    for i, cand in enumerate(cands + extra):
        step(cand.label)
        row, usable = _first(cand, problem, dev, out, poison, trusted, opts, limit)
        row.auto = pick is not None and (cand.plugin.name, cand.config) == (pick.plugin.name, pick.config)
        res.candidates.append(row)
        if usable and (runtime.HAS_DEVICE or opts.check_replay):
            timed.update(paths.contenders(i, cand, problem, dev, out, poison, limit, transpose, opts.repeat,
                                          opts.warmup, opts.max_seconds))
    if cudnn is not None:
        step("cudnn")
        res.cudnn, contender = _cudnn_first(cudnn, problem, dev, out, trusted, transpose, opts, limit)
        if contender is not None:
            timed[("cudnn", "cudnn")] = contender
    step("rounds")
    got = rounds.interleave(timed, paths.clock(), ROUNDS)
    for i, (cand, row) in enumerate(zip(cands + extra, res.candidates)):
        mine = {path: t for (key, path), t in got.items() if key == i}
        if mine:
            paths.settle(row, mine, trusted, problem, paths.compute_eps(cand, problem))
    if ("cudnn", "cudnn") in got:
        paths.settle(res.cudnn, {"cudnn": got["cudnn", "cudnn"]}, trusted, problem,
                     cudnn.compute_eps(problem.dtype))
    if cudnn is not None:
        cudnn.result = None
    rank(res)
    return res


def bench_safely(suite: str, entry: SuiteEntry, problem: Problem, opts: BenchOptions,
                 cudnn: Cudnn | None = None, on_step: Callable[[str], None] | None = None) -> ProblemResult:
    """:func:`bench_problem`, with a failure to set the problem up recorded as its ``error``."""
    try:
        return bench_problem(suite, entry, problem, opts, cudnn, on_step)
    except Exception as exc:  # recorded; a run goes on with the next problem
        return ProblemResult(suite, entry.label, entry.kind, problem.op, problem.to_dict(), problem.flops,
                             problem.bytes, error=f"{type(exc).__name__}: {exc}"[:500])


def check_simulator_size(suites: Iterable[Suite], ops: Iterable[str]) -> None:
    """ValueError when a suite is too large for the simulator (use the 'tiny' suite there)."""
    for suite in suites:
        worst = max((p.flops for _, p in suite.problems(ops)), default=0)
        if worst > SIMULATOR_MAX_FLOPS:
            raise ValueError(f"suite {suite.name!r} has problems of up to {worst:.3g} flops, too large "
                             f"for the CUDA simulator; use --suite tiny (or --force)")


def run(suites: Iterable[Suite], opts: BenchOptions, cudnn: Cudnn | None = None, *,
        progress: bool = True, on_result: Callable[[ProblemResult], None] | None = None
        ) -> list[ProblemResult]:
    """Benchmark every (entry, op) of ``suites``; ``on_result`` sees each problem as it completes.

    ``progress``: a tqdm bar on a terminal; elsewhere (logs) one line per finished problem on stderr.
    """
    from tqdm import tqdm

    work = [(s.name, e, p) for s in suites for e, p in s.problems(opts.ops)]
    results = []
    lines = progress and not sys.stderr.isatty()
    with tqdm(total=len(work), disable=None if progress else True, unit="problem",
              dynamic_ncols=True) as bar:
        for i, (suite, entry, problem) in enumerate(work):
            bar.set_description(f"{entry.label} {problem.op}"[:48])
            res = bench_safely(suite, entry, problem, opts, cudnn,
                               on_step=lambda s: bar.set_postfix_str(s[:32], refresh=True))
            results.append(res)
            if on_result is not None:
                on_result(res)
            bar.update()
            if lines:
                print(f"[{i + 1}/{len(work)}] {suite} {entry.label} {problem.op}: {summary(res)}",
                      file=sys.stderr, flush=True)
    return results

