"""Autotuner benchmark: regret against exhaustive search, tuning time, and cache reuse by a second process.

For every problem of the suite (the Burn conv2d suite and its batch-4 shape by default) and each op:

1. ``cold``: ``autotune.tune`` on a key never seen (compiles the kernels it needs);
2. ``exhaustive``: every eligible candidate timed independently (CUDA events, warm-up, median of
   --repeat samples taken in ROUNDS interleaved rounds, so slow drifts hit every candidate alike);
3. ``warm``: ``autotune.tune(force=True)`` again with every kernel compiled: the tuning time of a new key
   with warm kernels, and the pick whose regret is reported:
   regret = exhaustive median of the pick / best exhaustive median - 1 (the target is <= 5%).

Then a second process, started on the same cache directory, asks ``autotune.choose`` for every problem
and reports how many candidates it timed (expected: 0, all answered from the disk cache).

JSON (written after every problem, so a run cut short keeps what it measured): device, capability,
versions, shapes, per-candidate medians, regret per shape, tuning seconds, second-process re-timing count;
at the end the Markdown table beside it (OUT.md: per shape and op the pick, the exhaustive best, the
regret, the tuning times; the summary and the second process's cache reuse). On the CUDA simulator
(self-test only) times are wall-clock seconds of simulated runs.

    python benchmarks/autotune_bench.py --out autotune.json                        # full Burn suite
    python benchmarks/autotune_bench.py --out /tmp/a.json --quick                    # 4 shapes, fewer samples
    python benchmarks/autotune_bench.py --out /tmp/a.json --suite tiny --plugins direct   # simulator
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROUNDS = 4  # exhaustive timing: rounds of round-robin sampling
_QUICK = ("n4 16x512x512 w16x3x3", "n16 256x12x12 w512x3x3", "n16 64x56x56 w64x3x3",
          "n16 512x7x7 w512x3x3")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--suite", action="append", default=None,
                    help="suite name or JSON file (repeatable; default: burn and burn_b4)")
    ap.add_argument("--ops", default="forward,dgrad,wgrad", help="comma-separated ops")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--quick", action="store_true", help=f"only {len(_QUICK)} shapes, fewer samples")
    ap.add_argument("--repeat", type=int, default=None, help="exhaustive samples per candidate (20)")
    ap.add_argument("--plugins", default=None, help="comma-separated plugin names to keep (direct stays)")
    ap.add_argument("--tune-mode", default="tune", choices=("tune", "exhaustive"),
                    help="the tuner's mode in both processes (default tune; heuristic times nothing)")
    ap.add_argument("--cache-dir", default=None, help="tuning cache folder (default: a fresh temp dir)")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="start no new problem after this many seconds (results so far are kept)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--only", default=None, help=argparse.SUPPRESS)  # child: JSON list of [shape, op]
    args = ap.parse_args(argv)
    args.ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    args.repeat = args.repeat or (8 if args.quick else 20)
    return args


def load_problems(args: argparse.Namespace) -> list[tuple[str, object]]:
    """(shape label, Problem) pairs for the chosen suites, ops and dtype."""
    from convlab.bench.suite import load_suite

    out = [(entry.label, prob.replace(dtype=args.dtype)) for name in args.suite or ["burn", "burn_b4"]
           for entry, prob in load_suite(name).problems(args.ops)]
    if args.quick:
        out = [(lab, p) for lab, p in out if any(lab.startswith(q) for q in _QUICK)] or out[:3]
    return out


def keep_plugins(names: str | None) -> None:
    from convlab.plugin import registry

    if not names:
        return
    keep = {n.strip() for n in names.split(",")} | {"direct"}
    for plugin in registry.plugins():
        if plugin.name not in keep:
            registry.unregister(plugin.name)


def make_timer(problem, repeat: int):
    """(timer(candidate) -> ms samples, ops) on fresh operands: CUDA events on a GPU, wall clock on the
    simulator (where the tuner needs an injected timer to measure at all)."""
    import numpy as np
    from convlab import measure, runtime
    from convlab.runtime import settings

    limit = settings.get_workspace_limit()
    a, b, bias = measure.random_operands(problem, np.random.default_rng(0))
    da, db, dbias = measure.to_device(a, b, bias)
    out = runtime.empty(problem.operand_shapes[2], problem.dtype)

    def timer(cand, n: int = repeat, warmup: int = 3) -> list[float]:
        if not runtime.SIMULATOR:
            return measure.time_candidate(cand, problem, da, db, dbias, out, workspace_limit=limit,
                                          warmup=warmup, repeat=n)
        measure.run_candidate(cand, problem, da, db, dbias, out, limit)  # warm-up
        return [measure.wall_clock_ms(cand, problem, da, db, dbias, out, limit) for _ in range(n)]

    return timer


def bench_problem(label: str, problem, args: argparse.Namespace) -> dict:
    from convlab import autotune
    from convlab.runtime import settings
    from convlab.plugin import registry

    timer = make_timer(problem, args.repeat)
    tuner_timer = timer if _simulator() else None  # on a GPU the tuner times with its own CUDA events
    rec = {"shape": label, "op": problem.op, "problem": problem.to_dict(), "key": None,
           "gflop": problem.flops / 1e9}
    cold = autotune.tune(problem, timer=tuner_timer)
    cands = registry.candidates(problem, settings.get_workspace_limit())
    if autotune.get_deterministic():
        cands = [c for c in cands if c.plugin.deterministic]
    samples, errors = {c.label: [] for c in cands}, {}
    for rnd in range(ROUNDS):  # round-robin, so every candidate sees the same conditions
        for cand in cands:
            if cand.label in errors:
                continue
            try:
                samples[cand.label] += timer(cand, -(-args.repeat // ROUNDS), 3 if rnd == 0 else 1)
            except Exception as exc:  # recorded, not fatal
                errors[cand.label] = f"{type(exc).__name__}: {exc}"[:300]
    exhaustive = {k: statistics.median(v) for k, v in samples.items() if v and k not in errors}
    warm = autotune.tune(problem, force=True, timer=tuner_timer)
    best = min(exhaustive, key=exhaustive.get) if exhaustive else None

    def regret(pick):
        if best is None or pick not in exhaustive or exhaustive[best] <= 0:
            return None
        return exhaustive[pick] / exhaustive[best] - 1.0

    rec.update(key=warm.key, candidates=[c.label for c in cands], exhaustive_ms=exhaustive,
               exhaustive_errors=errors, best=best, best_ms=exhaustive.get(best),
               cold={"pick": cold.winner_label, "source": cold.source, "tuning_s": cold.tuning_s,
                     "regret": regret(cold.winner_label)},
               warm={"pick": warm.winner_label, "source": warm.source, "tuning_s": warm.tuning_s,
                     "checked_against": warm.checked_against,
                     "tuner": [{"label": c.label, "median_ms": c.median_ms, "status": c.status,
                                "dropped_early": c.dropped_early} for c in warm.candidates]},
               regret=regret(warm.winner_label))
    rec["within_5pct"] = None if rec["regret"] is None else rec["regret"] <= 0.05
    return rec


def _simulator() -> bool:
    from convlab import runtime

    return runtime.SIMULATOR


def child(args: argparse.Namespace) -> dict:
    """The second process: every problem through autotune.choose; nothing should be timed."""
    from convlab import autotune
    from convlab.runtime import settings

    t0 = time.perf_counter()
    autotune.reset_stats()
    picks = []
    only = None if args.only is None else {tuple(x) for x in json.loads(Path(args.only).read_text())}
    for label, problem in load_problems(args):
        if only is not None and (label, problem.op) not in only:
            continue
        cand = autotune.choose(problem, settings.get_workspace_limit())
        picks.append({"shape": label, "op": problem.op, "pick": cand.label})
    counts = autotune.stats()
    return {"stats": counts, "retimed": counts["timed"], "retuned_keys": counts["tuned"],
            "cache_hits": counts["cache_hits"], "problems": len(picks), "picks": picks,
            "seconds": time.perf_counter() - t0, "cache_file": str(autotune.cache_path())}


def summarize(shapes: list[dict]) -> dict:
    regrets = [s["regret"] for s in shapes if s.get("regret") is not None]
    out = {"problems": len(shapes), "with_regret": len(regrets)}
    if regrets:
        out.update(max_regret=max(regrets), mean_regret=statistics.fmean(regrets),
                   within_5pct=sum(r <= 0.05 for r in regrets))
    warm = [s["warm"]["tuning_s"] for s in shapes if "warm" in s]
    cold = [s["cold"]["tuning_s"] for s in shapes if "cold" in s]
    if warm:
        out.update(warm_tuning_s_median=statistics.median(warm), warm_tuning_s_total=sum(warm),
                   cold_tuning_s_median=statistics.median(cold), cold_tuning_s_total=sum(cold))
    return out


def _short(label: str | None) -> str:
    return "-" if label is None else label.replace("implicit_gemm", "igemm")


def markdown(data: dict) -> str:
    """The run as a Markdown table: per shape and op the pick, the exhaustive best, the regret, the tuning
    times of a new key (cold: compiling included; warm: kernels compiled); the summary; the second process."""
    lines = [f"device: {data['device']} (sm {data['compute_capability']}), versions: {data['versions']}, "
             f"date: {data['date']}", "", f"tuner: {data['tuner']}; exhaustive: {data['repeat']} samples per "
             f"candidate in {data.get('exhaustive_rounds', 1)} interleaved rounds", "",
             "| shape | op | candidates | autotuned pick | exhaustive best | best ms | regret | cold tune s | "
             "warm tune s |", "|" + "---|" * 9]
    for r in (r for r in data["shapes"] if "error" not in r):
        regret = "-" if r["regret"] is None else f"{100 * r['regret']:.1f}%"
        best_ms = "-" if r["best_ms"] is None else f"{r['best_ms']:.3f}"
        lines.append(f"| {r['shape']} | {r['op']} | {len(r['candidates'])} | {_short(r['warm']['pick'])} | "
                     f"{_short(r['best'])} | {best_ms} | {regret} | {r['cold']['tuning_s']:.2f} | "
                     f"{r['warm']['tuning_s']:.2f} |")
    s, second = data["summary"], data.get("second_process", {})
    if s.get("with_regret"):
        lines += ["", f"{s['within_5pct']} of {s['with_regret']} (shape, op) pairs within 5% of the exhaustive "
                  f"best; max regret {100 * s['max_regret']:.1f}%, mean {100 * s['mean_regret']:.2f}%."]
    if "warm_tuning_s_median" in s:
        lines.append(f"Tuning a new key with compiled kernels: median {s['warm_tuning_s_median']:.2f} s, total "
                     f"{s['warm_tuning_s_total']:.1f} s; cold (the first key of each op compiles every config): "
                     f"median {s['cold_tuning_s_median']:.2f} s, total {s['cold_tuning_s_total']:.1f} s.")
    lines.append(f"Second process on the same cache file: {second.get('cache_hits')} of {second.get('problems')} "
                 f"answered from the cache, {second.get('retimed')} candidates re-timed; same picks as the first "
                 f"process: {second.get('same_picks_as_first_process')}.")
    errors = [f"- {r['shape']} {r['op']}: {r['error']}" for r in data["shapes"] if "error" in r]
    return "\n".join(lines + ([""] + errors if errors else []) + [""])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="convlab-autotune-bench-")
    os.environ["CONVLAB_CACHE_DIR"] = cache_dir  # read at call time by convlab.runtime.settings.cache_dir
    os.environ["CONVLAB_TUNE_MODE"] = args.tune_mode  # read at import, here and in the second process
    import convlab
    from convlab import autotune, runtime

    keep_plugins(args.plugins)
    if args.child:
        Path(args.out).write_text(json.dumps(child(args), indent=1))
        return 0
    start = time.perf_counter()
    result = {"benchmark": "autotune", "date": datetime.datetime.now().isoformat(timespec="seconds"),
              "device": runtime.device_name(), "compute_capability": list(runtime.compute_capability()),
              "simulator": runtime.SIMULATOR, "versions": runtime.versions(),
              "convlab_version": convlab.__version__, "argv": sys.argv[1:] if argv is None else argv,
              "plugins": [p.name for p in convlab.plugins()], "key_policy": autotune.get_key_policy(),
              "tune_mode": autotune.get_mode(), "repeat": args.repeat,
              "tuner": {"warmup": autotune.WARMUP, "probe": autotune.PROBE, "repeat": autotune.REPEAT,
                        "slow_factor": autotune.SLOW_FACTOR, "final_margin": autotune.FINAL_MARGIN,
                        "final_rounds": autotune.FINAL_ROUNDS, "final_repeat": autotune.FINAL_REPEAT},
              "exhaustive_rounds": ROUNDS,
              "cache_file": str(autotune.cache_path()), "shapes": [], "skipped": []}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        result["summary"] = summarize(result["shapes"])
        result["elapsed_s"] = time.perf_counter() - start
        out.write_text(json.dumps(result, indent=1, default=str))

    for label, problem in load_problems(args):
        if args.max_seconds is not None and time.perf_counter() - start > args.max_seconds:
            result["skipped"].append(f"{label} {problem.op}")
            continue
        try:
            rec = bench_problem(label, problem, args)
        except Exception as exc:  # one broken problem must not lose the others
            rec = {"shape": label, "op": problem.op, "error": f"{type(exc).__name__}: {exc}"[:500]}
        result["shapes"].append(rec)
        print(f"{label:<28} {problem.op:<8} pick {rec.get('warm', {}).get('pick')} "
              f"regret {rec.get('regret')} tune {rec.get('warm', {}).get('tuning_s')}", flush=True)
        save()

    child_out = out.with_name(out.stem + ".child.json")
    only = out.with_name(out.stem + ".child-problems.json")
    only.write_text(json.dumps([[s["shape"], s["op"]] for s in result["shapes"] if "error" not in s]))
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--out", str(child_out), "--only",
           str(only), "--cache-dir", cache_dir, "--ops", ",".join(args.ops), "--dtype", args.dtype]
    for name in args.suite or []:
        cmd += ["--suite", name]
    cmd += (["--quick"] if args.quick else []) + (["--plugins", args.plugins] if args.plugins else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode == 0:
            second = json.loads(child_out.read_text())
            child_out.unlink()
        else:
            second = {"error": proc.stderr[-2000:], "returncode": proc.returncode}
    except subprocess.TimeoutExpired:
        second = {"error": "second process timed out"}
    only.unlink(missing_ok=True)
    warm_picks = {(s["shape"], s["op"]): s["warm"]["pick"] for s in result["shapes"] if "warm" in s}
    if "picks" in second:
        second["same_picks_as_first_process"] = all(
            warm_picks.get((p["shape"], p["op"])) == p["pick"] for p in second["picks"])
    result["second_process"] = second
    save()
    out.with_suffix(".md").write_text(markdown(result))
    print(json.dumps({"summary": result["summary"], "second_process_retimed": second.get("retimed")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
