"""Cold start of ``algorithm="auto"`` per tuning mode: one training step's convolutions of a network.

    CONVLAB_RUNTIME=compile python benchmarks/cold_start.py counts --suite resnet50 --suite mobilenetv2 \\
        --out results/autotune_cold_start/sm90/COMMIT/sm_90_float32        # CPU: the compile-only runtime
    python benchmarks/cold_start.py gpu --suite resnet50 --suite mobilenetv2 \\
        --out results/autotune_cold_start/h200/COMMIT/step                 # a GPU with torch

A step is every distinct conv layer of the suite (its ``conv2d`` entries, batch as the suite gives it),
forward, dgrad and wgrad once, in suite order, float32 unless ``--dtype``.

``counts`` (no device: ``CONVLAB_RUNTIME=compile``, the named target ``CONVLAB_TARGET``, default sm_90):
what each mode compiles and times, from the tuner's own choice of candidates
(``convlab.autotune.mode_steps``: the heuristic pick; each plugin's top TOP_K by the cost model; all)
plus, in the timing modes, the ``direct`` plugin that checks problems above
``measure.HOST_REFERENCE_MAX_FLOPS``. Kernels are counted by :func:`convlab.compile.collect.launches`
(each distinct kernel once a process, as Numba compiles it), assuming every candidate passes its check
and none is cut by the per-shape budget (CPU seconds are not the GPU's). In mode "heuristic" (the
default) it also runs the tuner itself over the step with an empty cache (``first pass``: the tuner's
counters of candidates timed, whose picks they are, the kernels of its picks).

``--store DIR`` (a kernel store, e.g. ``convlab compile --picks --store DIR`` for the suites): ``counts``
adds to the first pass the kernels of its picks that the store lacks (those a first step still
compiles); ``gpu`` adds the row ``heuristic+store``, the default mode with ``CONVLAB_KERNEL_STORE=DIR``.

``gpu``: each (mode or cuDNN setting) in a fresh process with an empty cache folder, then again warm
(the same folder: tuning entries and, with ``CONVLAB_KERNEL_CACHE=1``, kernels on disk): seconds from
the step's start to its last result synchronised, the import, kernels compiled and loaded, candidates
timed; cuDNN through torch (F.conv2d, aten.convolution_backward) with ``cudnn.benchmark`` on and off.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODES = ("heuristic", "tune", "exhaustive")
TORCH = ("cudnn.benchmark=True", "cudnn.benchmark=False")


def step_problems(suite_names: list[str], dtype: str) -> dict[str, list]:
    """suite -> [(layer label, problem)] of one step (module docstring)."""
    from convlab.bench.suite import load_suite

    out = {}
    for name in suite_names:
        suite = load_suite(name)
        out[suite.name] = [(e.label, p.replace(dtype=dtype)) for e in suite.entries if e.kind == "conv2d"
                           for p in e.problems if p.op in ("forward", "dgrad", "wgrad")]
    return out


def chosen(problem: Any, mode: str, limit: int) -> tuple[list, list]:
    """(candidates compiled, candidates timed) by the tuner in ``mode`` for a problem first seen."""
    from convlab import measure
    from convlab.autotune import mode_steps
    from convlab.plugin import registry
    from convlab.runtime import settings

    cands = registry.candidates(problem, limit, per_plugin=settings.get_tune_configs())
    if not cands:
        return [], []
    if mode == "heuristic":
        result, _ = mode_steps.heuristic(problem, "", cands, limit, time.perf_counter())
        return [result.winner], []
    timed, _ = mode_steps.to_time(problem, cands, limit, mode)
    trusted = [measure._direct(problem)] if problem.flops > measure.HOST_REFERENCE_MAX_FLOPS else []
    return timed + trusted, timed


def counts(problems: list, mode: str, kernels_of: Any) -> dict[str, Any]:
    """Kernels compiled (distinct over the step), candidates timed, per op and in all, in ``mode``."""
    from convlab.runtime import settings

    limit = settings.get_workspace_limit()
    kernels: set[str] = set()
    per_op: dict[str, dict[str, int]] = {}
    declined = []
    for label, problem in problems:
        built, timed = chosen(problem, mode, limit)
        if not built:
            declined.append(f"{label} {problem.op}")
            continue
        new = set()
        for cand in built:
            new |= kernels_of(cand, problem) - kernels
        kernels |= new
        op = per_op.setdefault(problem.op, {"kernels": 0, "timed": 0, "layer_ops": 0})
        op["kernels"] += len(new)
        op["timed"] += len(timed)
        op["layer_ops"] += 1
    return {"kernels_compiled": len(kernels), "candidates_timed": sum(o["timed"] for o in per_op.values()),
            "layer_ops": sum(o["layer_ops"] for o in per_op.values()), "per_op": per_op, "declined": declined}


def first_pass(problems: list, kernels_of: Any, store: str | None = None) -> dict[str, Any]:
    """The tuner itself on a first pass over the step in the mode in force (a fresh cache folder): its
    counters (candidates timed and checked, shapes tuned, heuristic picks), whose picks they are
    (``TuneResult.picked_by``) and the distinct kernels its picks launch. Only mode "heuristic" decides
    here as on a GPU (a timing mode picks by priority without a device)."""
    from convlab import autotune
    from convlab.runtime import settings

    limit = settings.get_workspace_limit()
    autotune.clear_cache(memory=True, disk=False)
    autotune.reset_stats()
    kernels: set[str] = set()
    picked_by: dict[str, int] = {}
    declined = []
    for label, problem in problems:
        try:
            result = autotune.tune(problem, workspace_limit=limit)
        except ValueError:
            declined.append(f"{label} {problem.op}")
            continue
        kernels |= kernels_of(result.winner, problem)
        picked_by[result.picked_by] = picked_by.get(result.picked_by, 0) + 1
    out = {"mode": settings.get_tune_mode(), "kernels_compiled": len(kernels),
           "candidates_timed": autotune.stats()["timed"], "tuner_stats": autotune.stats(), "picked_by": picked_by,
           "layer_ops": sum(picked_by.values()), "declined": declined}
    if store is not None:
        missing = {kid for kid in kernels if not _stored(kid, store)}
        out["store"] = {"dir": str(store), "kernels_from_store": len(kernels) - len(missing),
                        "kernels_compiled_with_store": len(missing), "missing": sorted(missing)}
    return out


_KNOWN: dict[str, tuple[Any, tuple]] = {}  # kernel id -> (dispatcher, argtypes) of every launch seen


def compile_only_kernels(cand: Any, problem: Any) -> set[str]:
    """The kernel ids a candidate's call launches (the compile-only runtime)."""
    from convlab.compile.collect import launches
    from convlab.compile.corpus import Case
    from convlab.runtime import settings
    from convlab.runtime.targets import current

    case = Case(cand.plugin.name, problem, settings.get_float32_precision(), ("nchw",) * 3, cand.config)
    return {launch.kernel for launch in launches(case, current(), _KNOWN)}


def _stored(kid: str, store: str) -> bool:
    """Whether the kernel store ``store`` holds kernel ``kid`` for the current target, under the key a
    launch on that GPU would look up (convlab.runtime.kernel_cache.launch_key)."""
    from convlab.runtime import kernel_cache, kernel_store
    from convlab.runtime.targets import current

    dispatcher, argtypes = _KNOWN[kid]
    return kernel_store.load(kernel_cache.launch_key(dispatcher, argtypes, current().key), store) is not None


def run_counts(args: argparse.Namespace) -> dict[str, Any]:
    from convlab import autotune, runtime
    from convlab.runtime import settings, targets

    if not runtime.COMPILE_ONLY:
        raise SystemExit("counts runs in the compile-only runtime: CONVLAB_RUNTIME=compile python ...")
    target = targets.current()
    out = {"what": "counts", "target": target.name, "top_k": autotune.TOP_K, "dtype": args.dtype,
           "command": "CONVLAB_RUNTIME=compile python benchmarks/cold_start.py " + " ".join(args.argv),
           "suites": {}}
    out["default_mode"] = settings.DEFAULT_TUNE_MODE
    with tempfile.TemporaryDirectory() as folder:  # the first pass reads and writes no user cache
        os.environ["CONVLAB_CACHE_DIR"] = folder
        for suite, problems in step_problems(args.suite, args.dtype).items():
            out["suites"][suite] = {m: counts(problems, m, compile_only_kernels) for m in MODES}
            if settings.get_tune_mode() == "heuristic":
                out["suites"][suite]["first pass"] = first_pass(problems, compile_only_kernels, args.store)
    return out


_CHILD = r"""
import json, os, sys, time
t0 = time.perf_counter()
spec = json.loads(sys.argv[1])
import torch
import convlab
from convlab import autotune
from convlab.runtime import kernel_cache
sys.path.insert(0, spec["here"])
import cold_start
imported = time.perf_counter()
problems = cold_start.step_problems(spec["suites"], spec["dtype"])[spec["suite"]]
ops, cudnn = spec["mode"] in cold_start.MODES, spec["mode"] in cold_start.TORCH
if cudnn:
    torch.backends.cudnn.benchmark = spec["mode"].endswith("True")
    torch.backends.cudnn.allow_tf32 = False
calls = []
for label, p in problems:
    dt = getattr(torch, p.dtype)
    a, b = (torch.randn(s, device="cuda", dtype=dt) for s in p.operand_shapes[:2])
    calls.append(cold_start.call(torch, p, a, b, cudnn))
torch.cuda.synchronize()
start = time.perf_counter()
with (autotune.mode(spec["mode"]) if ops else torch.no_grad()):
    for fn in calls:
        fn()
    torch.cuda.synchronize()
step = time.perf_counter() - start
print(json.dumps({"import_s": imported - t0, "step_s": step, "kernel_cache": kernel_cache.stats,
                  "tuner": autotune.stats(), "layer_ops": len(calls)}))
"""


def call(torch: Any, p: Any, a: Any, b: Any, cudnn: bool) -> Any:
    """One layer-op of the step: convlab's public op under "auto", or cuDNN through torch."""
    import convlab

    st, pd, dl, g = list(p.stride), list(p.padding), list(p.dilation), p.groups
    if cudnn:
        back = torch.ops.aten.convolution_backward
        if p.op == "forward":
            return lambda: torch.nn.functional.conv2d(a, b, None, st, pd, dl, g)
        if p.op == "dgrad":
            x = torch.empty(p.x_shape, dtype=a.dtype, device="cuda")
            return lambda: back(a, x, b, None, st, pd, dl, False, [0, 0], g, [True, False, False])
        w = torch.empty(p.w_shape, dtype=a.dtype, device="cuda")
        return lambda: back(b, a, w, None, st, pd, dl, False, [0, 0], g, [False, True, False])
    if p.op == "forward":
        return lambda: convlab.conv2d(a, b, None, st, pd, dl, g)
    if p.op == "dgrad":
        return lambda: convlab.conv2d_backward_data(a, b, p.x_shape, st, pd, dl, g)
    return lambda: convlab.conv2d_backward_weight(a, b, p.w_shape, st, pd, dl, g)


def run_gpu(args: argparse.Namespace) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        raise SystemExit("gpu needs PyTorch with a CUDA device (on the CPU: counts)")
    out = {"what": "gpu", "dtype": args.dtype, "command": "python benchmarks/cold_start.py " + " ".join(args.argv),
           "suites": {}}
    here = str(Path(__file__).resolve().parent)
    for suite in step_problems(args.suite, args.dtype):
        rows = out["suites"][suite] = {}
        runs = [(m, m, "none") for m in args.modes] + ([("heuristic+store", "heuristic", args.store)]
                                                       if args.store else [])
        for row, mode, store in runs:
            with tempfile.TemporaryDirectory() as folder:
                env = dict(os.environ, CONVLAB_CACHE_DIR=folder, CONVLAB_KERNEL_CACHE="1",
                           CONVLAB_KERNEL_STORE=str(store))
                spec = {"suites": args.suite, "suite": suite, "dtype": args.dtype, "mode": mode, "here": here}
                rows[row] = {state: _child(spec, env, args.timeout) for state in ("cold", "warm")}
                print(suite, row, {k: v.get("step_s", v.get("error", "")[-200:]) for k, v in rows[row].items()},
                      flush=True)
    return out


def _child(spec: dict, env: dict, timeout: float) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(spec)], env=env, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"cut after {timeout:g} s", "wall_s": time.perf_counter() - started}
    if done.returncode != 0:
        return {"error": done.stderr[-3000:], "wall_s": time.perf_counter() - started}
    return dict(json.loads(done.stdout.strip().splitlines()[-1]), wall_s=time.perf_counter() - started)


def markdown(data: dict[str, Any]) -> str:
    """The counts table (``counts``) or the seconds table (``gpu``), with the command."""
    lines = [f"# Cold start of algorithm=\"auto\" per tuning mode ({data['what']})", "",
             f"Command: `{data['command']}`", ""]
    if data["what"] == "counts":
        lines += [f"Target {data['target']}, dtype {data['dtype']}, TOP_K {data['top_k']}: one training step's "
                  "convolutions (each distinct layer of the suite: forward, dgrad, wgrad), first seen. "
                  "Kernels: distinct kernels compiled in the step; timed: candidates compiled, checked "
                  "and timed (every candidate assumed to pass its check, no budget cut).", "",
                  "| suite | layer-ops | mode | kernels compiled | candidates timed | per op: kernels / timed |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for suite, modes in data["suites"].items():
            for mode, c in modes.items():
                per = (", ".join(f"{op} {o['kernels']} / {o['timed']}" for op, o in c["per_op"].items())
                       if "per_op" in c else "picks: " + ", ".join(f"{n} {k}" for k, n in c["picked_by"].items()))
                name = f"first pass, {c['mode']} (the tuner)" if mode == "first pass" else mode
                lines.append(f"| {suite} | {c['layer_ops']} | {name} | {c['kernels_compiled']} | "
                             f"{c['candidates_timed']} | {per} |")
                if "store" in c:
                    lines.append(f"| {suite} | {c['layer_ops']} | {name}, with the store | "
                                 f"{c['store']['kernels_compiled_with_store']} | {c['candidates_timed']} | "
                                 f"{c['store']['kernels_from_store']} kernels from the store |")
        if "default_mode" in data:
            lines += ["", f"Default tuning mode: {data['default_mode']}. \"first pass\": autotune.tune on each "
                      "layer-op in the mode in force with an empty cache, the tuner's own counters."]
        return "\n".join(lines + [""])
    lines += ["| suite | mode | cold step s | warm step s | kernels compiled cold / warm | from the store cold "
              "| timed cold |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for suite, modes in data["suites"].items():
        for mode, r in modes.items():
            c, w = r["cold"], r["warm"]
            lines.append(f"| {suite} | {mode} | {c.get('step_s', c.get('error', '')[:60])} | "
                         f"{w.get('step_s', w.get('error', '')[:60])} | "
                         f"{c.get('kernel_cache', {}).get('compiled')} / {w.get('kernel_cache', {}).get('compiled')} "
                         f"| {c.get('kernel_cache', {}).get('store')} | {c.get('tuner', {}).get('timed')} |")
    return "\n".join(lines + [""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("counts", "gpu"))
    ap.add_argument("--suite", action="append", default=None, help="suite name or JSON (repeatable)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
    ap.add_argument("--out", required=True, help="output stem: writes STEM.json and STEM.md")
    ap.add_argument("--timeout", type=float, default=3600.0, help="gpu: seconds a step process may take")
    ap.add_argument("--store", default=None, metavar="DIR", help="a kernel store (module docstring)")
    ap.add_argument("--modes", default=",".join(MODES + TORCH),
                    help="gpu: comma-separated tuning modes and cuDNN settings to run (default: all)")
    args = ap.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in args.modes if m not in MODES + TORCH]
    if unknown or not args.modes:
        ap.error(f"--modes: unknown {unknown}; choose from {', '.join(MODES + TORCH)}")
    args.argv = sys.argv[1:] if argv is None else list(argv)
    args.suite = args.suite or ["resnet50", "mobilenetv2"]
    data = run_counts(args) if args.what == "counts" else run_gpu(args)
    stem = Path(args.out)
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1, default=str))
    stem.with_suffix(".md").write_text(markdown(data))
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
