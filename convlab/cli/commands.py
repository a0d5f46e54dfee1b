"""The ``convlab`` subcommands (``convlab tune``: tune_cmd.py): one ``cmd_*`` function each, taking the parsed arguments (see cli.py for
the parser) and returning the exit status: 0 success, 1 a check or command failed. Bad input raises
:class:`UsageError` (or another ValueError), which ``convlab.cli.main`` reports with exit status 2.

Heavy modules (the harness, matplotlib, torch, the conformance suite) are imported inside the commands, so
``convlab --help`` stays fast.
"""
from __future__ import annotations

import argparse
import os
from typing import Any

from .errors import UsageError, missing_extra as _missing_extra  # noqa: F401  (UsageError: re-exported)

#: The demo's problem. Simulator: every GEMM dimension 16 (so every plugin applies), a 3x1 kernel to keep
#: it to a few seconds there. GPU: ResNet-50's 56x56 3x3 layer at batch 8, where times mean something.
DEMO_SHAPES = {"simulator": {"x": [1, 16, 4, 4], "w": [16, 16, 3, 1], "padding": [1, 0]},
               "gpu": {"x": [8, 64, 56, 56], "w": [64, 64, 3, 3], "padding": 1}}


def _shape_spec(args: argparse.Namespace) -> dict[str, Any]:
    spec = {"x": args.x, "w": args.w, "stride": args.stride, "padding": args.padding,
            "dilation": args.dilation, "groups": args.groups, "bias": args.bias, "dtype": args.dtype,
            "kind": f"conv_transpose{len(args.x) - 2}d" if args.transpose else f"conv{len(args.x) - 2}d"}
    if args.output_padding is not None:
        spec["output_padding"] = args.output_padding
    return spec


def _suites(args: argparse.Namespace, default: str | None) -> list:
    from convlab import runtime
    from convlab.bench.suite import load_suite, single_shape_suite

    names = list(args.suite or [])
    suites = [load_suite(n) for n in names]
    if args.x is not None or args.w is not None:
        if args.x is None or args.w is None:
            raise UsageError("a shape needs both --x and --w")
        suites.append(single_shape_suite(_shape_spec(args)))
    if not suites:
        suites = [load_suite(default or ("tiny" if runtime.target().simulator else "burn"))]
    batch = getattr(args, "batch", None)
    if batch is not None:
        if batch < 1:
            raise UsageError(f"--batch must be >= 1, got {batch}")
        suites = [s.with_batch(batch) for s in suites]
    return suites


def _check_plugins(names: str | None) -> tuple[str, ...] | None:
    if names is None:
        return None
    from convlab.plugin import registry

    chosen = tuple(n.strip() for n in names.split(",") if n.strip())
    known = {p.name for p in registry.plugins()}
    unknown = [n for n in chosen if n not in known]
    if unknown or not chosen:
        raise UsageError(f"unknown plugin(s) {unknown}; registered: {sorted(known)}")
    return chosen


# ---- commands -------------------------------------------------------------------------------------
def _run_bench(args: argparse.Namespace, suites: list, opts: Any, out_stem: str | None) -> list:
    from convlab import runtime
    from convlab.bench import baseline, harness as bench, report
    from convlab.runtime.settings import get_float32_precision

    cudnn, why = (None, "--no-torch") if args.no_torch else baseline.load()
    print(f"device: {runtime.device_name()}; cuDNN baseline: {'yes' if cudnn else 'no (' + why + ')'}")
    if not runtime.HAS_DEVICE:
        print(f"note: {report.simulator_note(opts.simulator_wall_clock)}")
    settings = {k: getattr(opts, k) for k in ("ops", "plugins", "all_configs", "warmup", "repeat",
                                               "max_seconds", "workspace_limit", "auto", "seed",
                                               "simulator_wall_clock", "check_replay")}
    settings["suites"] = [s.name for s in suites]
    settings["float32_precision"] = get_float32_precision()
    meta = report.metadata(settings, baseline.versions(cudnn))
    done: list = []

    def save(res: Any) -> None:
        done.append(res)
        if out_stem is not None:
            report.write(args.out, out_stem, report.to_json(meta, done))

    bench.run(suites, opts, cudnn, progress=not args.quiet, on_result=save)
    print(report.table(done))
    if not runtime.HAS_DEVICE and opts.simulator_wall_clock:
        print("note: the ms column is the simulator's wall-clock time, not GPU speed")
    elif not runtime.HAS_DEVICE:
        print(f"note: {report.SIMULATOR_NOTE}; run on a GPU for times (or pass --simulator-wall-clock "
              "for the simulator's wall-clock)")
    if out_stem is not None:
        print(f"wrote {os.path.join(args.out, out_stem)}.json and .csv")
    return done


def _options(args: argparse.Namespace, ops: tuple[str, ...]) -> Any:
    from convlab.bench.harness import BenchOptions

    if args.repeat < 1 or args.warmup < 0:
        raise UsageError("--repeat must be >= 1 and --warmup >= 0")
    return BenchOptions(ops=ops, plugins=_check_plugins(args.plugins), all_configs=args.all_configs,
                        warmup=args.warmup, repeat=args.repeat, max_seconds=args.max_seconds,
                        workspace_limit=args.workspace_limit, auto=not args.no_auto, seed=args.seed,
                        simulator_wall_clock=getattr(args, "simulator_wall_clock", False),
                        check_replay=getattr(args, "check_replay", False))


def cmd_bench(args: argparse.Namespace) -> int:
    from convlab import runtime
    from convlab.bench import harness as bench

    suites = _suites(args, None)
    opts = _options(args, args.ops)
    if not any(s.problems(opts.ops) for s in suites):
        raise UsageError(f"no problem of {[s.name for s in suites]} has an op in {list(opts.ops)}")
    if runtime.target().simulator and not args.force:
        bench.check_simulator_size(suites, opts.ops)
    stem = args.name or "+".join(s.name for s in suites)
    from . import sweeps

    if sweeps.sweeping(args):
        swept = sweeps.bench_sweep(args, suites, opts, stem)
        if swept is None:
            return 1
        results, lost = swept
    else:
        results, lost = _run_bench(args, suites, opts, stem), []
    failed = any(res.error or any(r.status in ("wrong", "error") for r in res.candidates) for res in results)
    return 1 if failed or lost else 0


def cmd_demo(args: argparse.Namespace) -> int:
    from convlab import runtime
    from convlab.problem import OPS
    from convlab.bench.suite import single_shape_suite

    args.plugins, args.all_configs, args.no_auto, args.seed = None, False, False, 0
    args.workspace_limit, args.repeat, args.warmup, args.max_seconds = None, 10, 2, 0.5
    suite = single_shape_suite(DEMO_SHAPES["simulator" if runtime.target().simulator else "gpu"], "demo")
    results = _run_bench(args, [suite], _options(args, OPS), None)
    bad = [f"{r.label} {res.op}" for res in results for r in res.candidates if r.status in ("wrong", "error")]
    bad += [f"{res.op}: {res.error}" for res in results if res.error]
    checked = sum(r.status == "ok" for res in results for r in res.candidates)
    refs = sorted({res.reference for res in results if res.reference})
    print(f"\n{checked} plugin runs matched the reference ({', '.join(refs)})"
          + (f"; FAILED: {bad}" if bad else ""))
    for res in results:
        auto = res.auto
        print(f"auto picks for {res.op:<8}: " + (f"{auto['plugin']}[{auto['config']}] ({auto['source']})"
                                                if "plugin" in auto else f"nothing ({auto.get('error')})"))
    return 1 if bad else 0


def cmd_list(args: argparse.Namespace) -> int:
    from convlab.plugin import registry
    from convlab.bench.suite import builtin_suites, load_suite

    print("plugins (highest priority first):")
    for p in registry.plugins():
        print(f"  {p.name:<16} prio {p.priority:>3}  ops {','.join(sorted(p.ops)):<20} "
              f"{'deterministic' if p.deterministic else 'non-deterministic':<17} {p.description}")
    for where, err in registry.load_errors().items():
        print(f"  failed to load {where}: {err}")
    print("suites:")
    for name in builtin_suites():
        s = load_suite(name)
        print(f"  {name:<10} {len(s.entries):>3} shapes {len(s.problems()):>3} problems  {s.description}")
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from convlab.bench.suite import single_shape_suite
    from convlab.ops import explain

    op = args.op
    if op == "transpose":
        args.transpose, op = True, "dgrad"
    entry = single_shape_suite(_shape_spec(args)).entries[0]
    if entry.kind.startswith("conv_transpose") and op not in (None, "dgrad"):
        raise UsageError(f"a {entry.kind} shape is a dgrad problem; drop --op or use --op dgrad")
    wanted = "dgrad" if entry.kind.startswith("conv_transpose") else (op or "forward")
    problem = next(p for p in entry.problems if p.op == wanted)
    explanation = explain(problem, algorithm=args.algorithm, workspace_limit=args.workspace_limit,
                          target=getattr(args, "target", None))
    print(explanation)  # nothing picked: its last line says why (what the op would raise)
    return 1 if explanation.chosen is None else 0


def cmd_check(args: argparse.Namespace) -> int:
    from convlab.plugin import registry

    plugin = registry.get(args.plugin)  # ValueError naming the registered plugins
    try:
        from hypothesis import settings

        from convlab import testing
    except ImportError as exc:
        return _missing_extra("check", "the conformance suite needs hypothesis, which", "test", exc)
    settings.load_profile(os.environ.get("CONVLAB_HYPOTHESIS_PROFILE", testing.DEFAULT_PROFILE))
    if args.mutants:
        from convlab.testing import mutation

        return 0 if all(h.killed for h in mutation.hunt_all(plugin)) else 1
    ops = sorted(plugin.ops) if args.ops is None else [o for o in args.ops if o in plugin.ops]
    checks = list(testing.CHECKS) if args.checks is None else args.checks.split(",")
    unknown = [c for c in checks if c not in testing.CHECKS]
    if unknown or not ops:
        raise UsageError(f"unknown check(s) {unknown}; known: {list(testing.CHECKS)}" if unknown else
                         f"plugin {plugin.name} implements {sorted(plugin.ops)}, none of {list(args.ops)}")
    pairs = [(op, name) for op, name in testing.applicable_checks(plugin) if op in ops] \
        if args.checks is None else [(op, name) for op in ops for name in checks]
    failed = 0
    for op, name in pairs:
        counts: dict[str, int] = {}
        try:
            count = testing.run_check(name, plugin, op, args.max_examples, counts=counts)
            per_n = f": {', '.join(f'{n} {counts[n]}' for n in sorted(counts))}" if len(counts) > 1 else ""
            status = f"ok ({count} example{'s' * (count != 1)}{per_n})"
        except Exception as exc:  # noqa: BLE001  (a failing property, or the plugin raising inside it)
            failed, status = failed + 1, _check_failure(testing.CHECKS[name], exc)
        print(f"  {name:<32} {op:<8} {status}", flush=True)
    total = len(pairs)
    print(f"{plugin.name}: {total - failed}/{total} conformance checks passed")
    return 1 if failed else 0


def _check_failure(check: Any, exc: BaseException) -> str:
    """One line for a failed check: the property, the smallest failing problem (the one hypothesis ran
    last, after shrinking: the check's ``problem`` argument in its frame of the traceback; else the
    innermost frame's ``problem``, since an outer frame's may be a loop's leftover), and the error."""
    from convlab.problem import Problem

    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:  # hypothesis: several distinct failures
        exc = exc.exceptions[0]
    problem, tb = None, exc.__traceback__
    code = getattr(check, "__code__", None)
    while tb is not None:
        found = tb.tb_frame.f_locals.get("problem")
        if isinstance(found, Problem):
            problem = found
            if tb.tb_frame.f_code is code:
                break
        tb = tb.tb_next
    prop = " ".join((check.__doc__ or check.__name__).replace("``", "").split()).split(". ")[0].rstrip(".")
    prop = prop[:1].lower() + prop[1:]
    where = f"; smallest failing problem: {problem.describe()}" if problem is not None else ""
    text = str(exc).strip().splitlines()
    return f"FAIL: {prop}{where}; {type(exc).__name__}: {text[0] if text else ''}"


def cmd_plot(args: argparse.Namespace) -> int:
    from convlab.bench import plot, report

    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        return _missing_extra("plot", "matplotlib", "plot", exc)
    data = [report.load(p) for p in args.results]
    for path in plot.plot_results(data, args.output, metric=args.metric, peak_tflops=args.peak_tflops,
                                  peak_tbps=args.peak_tbps):
        print(f"wrote {path}")
    return 0
