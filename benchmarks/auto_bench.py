"""``algorithm="auto"`` as a user gets it, against cuDNN: the honest benchmark of issue 31.

    python benchmarks/auto_bench.py --suite resnet50 --suite mobilenetv2 --out results/auto_bench/h200
    python benchmarks/auto_bench.py --smoke --out /tmp/auto_smoke          # the simulator: code paths only

For each suite layer, op (--ops), dtype (--dtypes) and layout (--layouts)::

    operands   fresh random host operands, the user's torch tensors in the layout (4-D operands in NCHW
               or channels_last memory format), the float64 reference (auto_bench_parts.float64_reference)
    for mode in heuristic, tune, exhaustive (the tuner's caches emptied once per layout; each mode's
               entry is more thorough than the last, so none answers the next):
        cold     wall seconds of the first public-op call under "auto", synchronised: tuning included
                 (kernels an earlier mode compiled in this process are not compiled again)
        check    that output, then one into a NaN-poisoned ``out=``, and convlab.torch's output, each
                 against float64 (measure.tolerance of the pick's arithmetic); a failed check keeps
                 the row, with the reason, out of every mean
    oracle     every eligible (plugin, config) forced through the public op: checked, probed; each
               plugin's best enters the rounds
    rounds     interleaved: each mode's "auto" op call and convlab.torch call, each plugin's best, cuDNN
               in NCHW and channels_last (cudnn.benchmark on; dgrad / wgrad through
               torch.ops.aten.convolution_backward); ROUNDS rounds of --repeat / ROUNDS calls each
    ratios     cuDNN's best layout / convlab (> 1: convlab faster); regret = pick / oracle - 1

dtypes: float32 (exact fp32 class: the FMA plugins and 3xTF32 both eligible, cuDNN with TF32 off),
float32+fma (the FMA plugins alone: tf32x3 unregistered), float32+high (TF32 on both sides), float16,
bfloat16. Each row names the arithmetic of every pick, so a ratio's arithmetic is always visible.
Writes OUT.json (device, versions, shapes, medians, picks, ratios, statuses) after every layer-op, and
OUT.md at the end; ``--resume`` keeps the rows of an earlier, cut run and measures the rest.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import auto_bench_parts as parts  # noqa: E402
from auto_bench_parts import LAYOUTS, MODES  # noqa: E402

ROUNDS = 5
#: token -> (dtype, float32 precision, plugins left out)
DTYPES = {"float32": ("float32", "highest", ()), "float32+fma": ("float32", "highest", ("tf32x3",)),
          "float32+high": ("float32", "high", ()), "float16": ("float16", "highest", ()),
          "bfloat16": ("bfloat16", "highest", ())}
SMOKE = {"name": "smoke", "problems": [{"label": "3x3 p1", "x": [1, 4, 5, 5], "w": [4, 4, 3, 3],
                                        "padding": 1}]}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output stem: writes STEM.json and STEM.md")
    ap.add_argument("--suite", action="append", default=None, help="suite name or JSON (repeatable)")
    ap.add_argument("--dtypes", default="float32,float32+fma,float32+high,float16", help=", ".join(DTYPES))
    ap.add_argument("--layouts", default="nchw,channels_last")
    ap.add_argument("--ops", default="forward,dgrad,wgrad")
    ap.add_argument("--limit", type=int, default=None, help="first N layers of each suite")
    ap.add_argument("--repeat", type=int, default=30, help="samples per contender (over the rounds)")
    ap.add_argument("--probe", type=int, default=5, help="oracle: samples per (plugin, config)")
    ap.add_argument("--modes", default=",".join(MODES), help="tuning modes timed, of " + ", ".join(MODES))
    ap.add_argument("--no-oracle", dest="oracle", action="store_false",
                    help="leave out the oracle (every eligible config forced and probed): the picks against "
                         "cuDNN only, for a short GPU run")
    ap.add_argument("--plugins", default=None, help="comma-separated plugins to keep (others unregistered)")
    ap.add_argument("--resume", action="store_true", help="keep the rows of an existing STEM.json, run the rest")
    ap.add_argument("--smoke", action="store_true", help="one tiny layer, one sample: the simulator's run")
    ap.add_argument("--shard", default="0/1", help="I/N: only the layer-ops whose index mod N is I (a parallel "
                                                   "phase that fills the kernel cache splits a suite so)")
    args = ap.parse_args(argv)
    try:
        args.shard = tuple(int(v) for v in args.shard.split("/"))
        if len(args.shard) != 2 or not 0 <= args.shard[0] < args.shard[1]:
            raise ValueError
    except ValueError:
        raise SystemExit(f"--shard: expected I/N with 0 <= I < N, got {args.shard!r}") from None
    args.dtypes = _tokens(args.dtypes, DTYPES, "--dtypes")
    args.layouts = _tokens(args.layouts, LAYOUTS, "--layouts")
    args.ops = _tokens(args.ops, ("forward", "dgrad", "wgrad"), "--ops")
    args.modes = _tokens(args.modes, MODES, "--modes")
    args.rounds, args.warmup = ROUNDS, 2
    if args.smoke:  # one sample of everything: every code path, no meaningful time
        args.repeat, args.probe, args.rounds, args.warmup = 1, 1, 1, 0
    return args


def _tokens(text: str, allowed: Any, flag: str) -> tuple[str, ...]:
    got = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [t for t in got if t not in allowed]
    if bad or not got:
        raise SystemExit(f"{flag}: unknown {bad or text!r}; choose from {', '.join(allowed)}")
    return got


@contextlib.contextmanager
def without(names: tuple[str, ...]) -> Iterator[None]:
    """The plugins ``names`` unregistered inside the block (float32+fma: no 3xTF32 candidate)."""
    from convlab.plugin import registry

    gone = [registry.get(n) for n in names if n in {p.name for p in registry.plugins()}]
    for plugin in gone:
        registry.unregister(plugin.name)
    try:
        yield
    finally:
        for plugin in gone:
            registry.register(type(plugin), replace=True)


def arithmetic(cand: Any, p: Any, limit: int) -> str:
    """What a candidate computes in: fp32 (FMA), tf32, tf32x3, f16, ... (the cost model's view)."""
    from convlab.autotune.features import features
    from convlab.runtime.targets import current

    try:
        return features(cand.plugin, p, cand.config, current(), limit).arith
    except Exception:  # an estimate's failure does not hide the row
        return "?"


def auto_column(side: parts.Side, p: Any, ts: tuple, ref: np.ndarray, limit: int, mode: str) -> dict:
    """The first call of ``mode`` (cold), its pick and the three checks (module docstring)."""
    from convlab import autotune
    from convlab.runtime import kernel_cache

    col: dict[str, Any] = {"ok": False}
    before, compiled = autotune.stats(), kernel_cache.stats["compiled"]
    with autotune.mode(mode):
        try:
            side.poison_allocator(p.operand_shapes[2], getattr(ts[0], "dtype", None))
            t0 = time.perf_counter()
            y = parts.op_call(p, *ts, "auto")()
            side.sync()
            col["cold_s"] = time.perf_counter() - t0
            cand = autotune.choose(p, limit)
        except Exception as exc:  # declined or failed: the row stays, with why
            col["reason"] = f"{type(exc).__name__}: {exc}"[:300]
            return col
        after = autotune.stats()
        col.update(pick=cand.label, arith=arithmetic(cand, p, limit),
                   timed=after["timed"] - before["timed"], compiled=kernel_cache.stats["compiled"] - compiled)
        tol = parts.measure.tolerance(p, cand.plugin.compute_eps(p.dtype))
        ok, col["rel_err"], why = parts.check(side, y, ref, tol)
        if ok and side.torch is not None:  # the same call into a NaN-poisoned out=
            out = side.torch.full_like(y, float("nan"))
            parts.op_call(p, *ts, "auto", out=out)()
            side.sync()
            ok, _, why = parts.check(side, out, ref, tol)
            why = why and f"out=: {why}"
        fn = parts.torch_path_call(side, p, *ts)
        if ok and fn is not None:
            side.poison_allocator(p.operand_shapes[2], ts[0].dtype)
            ok, col["torch_rel_err"], why = parts.check(side, fn(), ref, tol)
            why = why and f"convlab.torch: {why}"
    col["ok"], col["reason"] = ok, why
    return col


def oracle(side: parts.Side, p: Any, ts: tuple, ref: np.ndarray, cands: list, limit: int, probe: int
           ) -> dict[str, dict]:
    """Every candidate forced through the public op: its check and probe median, per plugin the best."""
    best: dict[str, dict] = {}
    for cand in cands:
        fn = parts.op_call(p, *ts, (cand.plugin.name, cand.config))
        tol = parts.measure.tolerance(p, cand.plugin.compute_eps(p.dtype))
        try:
            side.poison_allocator(p.operand_shapes[2], getattr(ts[0], "dtype", None))
            ok, err, why = parts.check(side, fn(), ref, tol)
            ms = statistics.median(side.time_ms(fn, probe)) if ok else None
        except Exception as exc:
            ok, err, why, ms = False, None, f"{type(exc).__name__}: {exc}"[:300], None
        row = {"label": cand.label, "ok": ok, "rel_err": err, "reason": why, "probe_ms": ms,
               "arith": arithmetic(cand, p, limit), "fn": fn}
        mine = best.get(cand.plugin.name)
        if mine is None or (ok and (not mine["ok"] or ms < mine["probe_ms"])):
            best[cand.plugin.name] = row
    return best


def run_case(side: parts.Side, entry: Any, problem: Any, token: str, args: argparse.Namespace,
             rng: np.random.Generator) -> list[dict]:
    """The rows of one layer-op in one dtype, one per layout (module docstring)."""
    from convlab import autotune, measure
    from convlab.plugin import registry
    from convlab.problem import unit_roundoff
    from convlab.runtime import settings

    dtype, precision, left_out = DTYPES[token]
    p = problem.replace(dtype=dtype)
    base = {"label": entry.label, "op": p.op, "dtype": token, "problem": p.to_dict(), "flops": p.flops}
    limit = settings.get_workspace_limit()
    rows = []
    with settings.float32_precision(precision), without(left_out):
        cands = registry.candidates(p, limit)
        if not cands:  # declined: the row stays, with every plugin's reason
            from convlab.ops.explain import plugin_rows

            why = "no eligible plugin: " + "; ".join(f"{r.name}: {r.reason}" for r in plugin_rows(p, limit))
            return [dict(base, layout=lay, status="declined", reason=why[:500]) for lay in args.layouts]
        host = measure.random_operands(p, rng)
        ref, ref_name = parts.float64_reference(side, p, host)
        tensors = {lay: tuple(side.tensor(v, lay) for v in host) for lay in LAYOUTS}
        cudnn, cudnn_checks = {}, {}
        if side.gpu:
            side.torch.backends.cudnn.allow_tf32 = precision == "high"
            eps = 2.0**-10 if precision == "high" and dtype == "float32" else \
                unit_roundoff("float32" if dtype in ("float16", "bfloat16") else dtype)
            for lay in LAYOUTS:
                fn = parts.cudnn_call(side, p, *tensors[lay])
                ok, err, why = parts.check(side, fn(), ref, measure.tolerance(p, eps))
                cudnn_checks[lay] = {"ok": ok, "rel_err": err, "reason": why}
                if ok:
                    cudnn[f"cudnn:{lay}"] = (None, fn)
        for lay in args.layouts:
            ts = tensors[lay]
            autotune.clear_cache(memory=True, disk=True)
            auto = {m: auto_column(side, p, ts, ref, limit, m) for m in args.modes}
            plugins = oracle(side, p, ts, ref, cands, limit, args.probe) if args.oracle else {}
            contenders = dict(cudnn)
            for m in args.modes:
                if auto[m]["ok"]:
                    contenders[f"auto:{m}"] = (m, parts.op_call(p, *ts, "auto"))
                    torch_fn = parts.torch_path_call(side, p, *ts)
                    if torch_fn is not None:
                        contenders[f"torch:{m}"] = (m, torch_fn)
            contenders.update({f"plugin:{n}": (None, r["fn"]) for n, r in plugins.items() if r["ok"]})
            medians = parts.rounds(side, contenders, args.rounds, max(1, args.repeat // args.rounds),
                                   args.warmup)
            rows.append(summarize_row(dict(base, layout=lay, reference=ref_name), auto, plugins, medians,
                                      cudnn_checks, side))
    return rows


def summarize_row(row: dict, auto: dict, plugins: dict, medians: dict, cudnn_checks: dict,
                  side: parts.Side) -> dict:
    """Medians, ratios against cuDNN's best layout, regret against the oracle, the row's status."""
    cud = {lay: medians.get(f"cudnn:{lay}") for lay in LAYOUTS}
    best_cudnn = min((v for v in cud.values() if v), default=None)
    row["cudnn"] = {**cud, "best": best_cudnn, "checks": cudnn_checks,
                    "reason": "" if side.gpu else side.why_no_cudnn}
    row["plugins"] = {n: {k: v for k, v in r.items() if k != "fn"} | {"median_ms": medians.get(f"plugin:{n}")}
                      for n, r in plugins.items()}
    timed = {n: r for n, r in row["plugins"].items() if r["median_ms"] is not None}
    name = min(timed, key=lambda n: timed[n]["median_ms"]) if timed else None
    row["oracle"] = None if name is None else {"plugin": name, "label": timed[name]["label"],
                                               "median_ms": timed[name]["median_ms"],
                                               "arith": timed[name]["arith"]}
    for m, col in auto.items():
        col["median_ms"], col["torch_ms"] = medians.get(f"auto:{m}"), medians.get(f"torch:{m}")
        col["ratio"] = best_cudnn / col["median_ms"] if best_cudnn and col["median_ms"] else None
        col["torch_ratio"] = best_cudnn / col["torch_ms"] if best_cudnn and col["torch_ms"] else None
        oracle_ms = row["oracle"]["median_ms"] if row["oracle"] else None
        col["regret"] = col["median_ms"] / oracle_ms - 1 if oracle_ms and col["median_ms"] else None
    row["auto"] = auto
    if row["oracle"] is not None and best_cudnn:
        row["oracle"]["ratio"] = best_cudnn / row["oracle"]["median_ms"]
    failed = [m for m, c in auto.items() if not c["ok"]]
    row["status"] = "ok" if not failed else ("failed" if len(failed) == len(auto) else "partly failed")
    row["reason"] = "; ".join(f"{m}: {auto[m].get('reason')}" for m in failed)
    return row


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("CONVLAB_CACHE_DIR", tempfile.mkdtemp(prefix="convlab-auto-bench-"))
    import convlab
    from convlab import runtime
    from convlab.bench.suite import load_suite, suite_from_dict
    from convlab.plugin import registry

    side = parts.Side()
    if args.plugins:
        keep = {n.strip() for n in args.plugins.split(",")} | {"direct"}
        for plugin in registry.plugins():
            if plugin.name not in keep:
                registry.unregister(plugin.name)
    suites = [suite_from_dict(SMOKE, "smoke")] if args.smoke else [load_suite(s) for s in
                                                                    args.suite or ("resnet50", "mobilenetv2")]
    versions = dict(runtime.versions(), convlab=convlab.__version__)
    if side.torch is not None:
        versions.update(torch=side.torch.__version__,
                        cudnn=str(side.torch.backends.cudnn.version()) if side.gpu else "none")
    data: dict[str, Any] = {"device": runtime.device_name(), "simulator": runtime.SIMULATOR,
                            "versions": versions, "command": " ".join(["python benchmarks/auto_bench.py",
                                                                       *(sys.argv[1:] if argv is None else argv)]),
                            "rounds": args.rounds, "repeat": args.repeat,
                            "cudnn": side.why_no_cudnn or "cudnn.benchmark=True", "rows": []}
    rng = np.random.default_rng(0)
    stem = Path(args.out)
    stem.parent.mkdir(parents=True, exist_ok=True)
    if args.resume and stem.with_suffix(".json").exists():
        data["rows"] = json.loads(stem.with_suffix(".json").read_text())["rows"]
    done = {(r["suite"], r["label"], r["op"], r["dtype"]) for r in data["rows"]}
    index = -1
    for suite in suites:
        entries = [e for e in suite.entries if e.kind == "conv2d"][: args.limit]
        for entry in entries:
            for problem in (q for q in entry.problems if q.op in args.ops):
                index += 1
                if index % args.shard[1] != args.shard[0]:
                    continue
                for token in (t for t in args.dtypes if (suite.name, entry.label, problem.op, t) not in done):
                    for row in run_case(side, entry, problem, token, args, rng):
                        data["rows"].append(dict(row, suite=suite.name))
                        print(f"{suite.name} {entry.label} {problem.op} {token} {row['layout']}: {row['status']}",
                              flush=True)
                    data["summary"] = parts.summary(data["rows"])
                    stem.with_suffix(".json").write_text(json.dumps(data, indent=1, default=str))
    data["summary"] = parts.summary(data["rows"])
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1, default=str))
    stem.with_suffix(".md").write_text(parts.markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
