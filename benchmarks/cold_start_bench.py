"""A new process's first call: the warm start from the tuning cache and the disk kernel cache (issue #12).

    python benchmarks/cold_start_bench.py --out COLD.json [--algorithm auto] [--no-torch] [--tiny]

All steps share one empty temporary ``CONVLAB_CACHE_DIR`` (the autotuner's cache and ``kernels/``) and
run with ``CONVLAB_KERNEL_CACHE=1``, each in a NEW subprocess:

    fill        call each op once on TUNED shapes (``"auto"`` tunes them): fills both caches; then run
                each tuning candidate of NEW once (compiles its kernels; NEW is not tuned)
    warm_torch  interpreter start -> ``import convlab`` -> the first call of an already-tuned shape
                returned and synchronised, with torch CUDA tensors (torch imported and the tensors
                made before ``import convlab``: the user's cost, reported apart)
    warm_numba  the same with Numba device arrays (no torch in the process)
    new_shape   a shape never tuned, whose kernels are on disk (``fill`` ran each of its tuning
                candidates once, untimed, which compiles and saves their kernels): tuned and answered

Each child reports wall seconds per phase (``spawn_to_start_s``: from the parent's ``Popen`` to the
child's first statement, i.e. the interpreter's start), the kernel cache's counters (``compiled``
must be 0 in the warm runs), the autotuner's (``tuned`` must be 0 in the warm runs) and a check of
the result against the float64 reference. ``targets``: warm first call (import convlab + call)
<= 1 s, new shape <= 2 s. GPU only (the simulator neither tunes nor caches kernels).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

#: (x shape, weight shape, padding): the tuned shapes; NEW is never tuned by ``fill``
TUNED = [((8, 64, 28, 28), (64, 64, 3, 3), 1), ((8, 128, 14, 14), (128, 128, 1, 1), 0)]
NEW = ((8, 96, 28, 28), (64, 96, 3, 3), 1)
#: ``--tiny``: shapes the CUDA simulator runs in seconds (a smoke run of this script; nothing is
#: tuned or cached there)
TINY = [((1, 4, 6, 6), (4, 4, 3, 3), 1)], ((1, 6, 6, 6), (4, 6, 3, 3), 1)

_CHILD = r"""
import time, sys, json
t_start = time.time()
spec = json.loads(sys.argv[1])
import numpy as np
t0 = time.perf_counter()
if spec["torch"]:
    import torch
    sync = torch.cuda.synchronize
    def dev(a):
        return torch.from_numpy(a).cuda()
    def host(t):
        return t.cpu().numpy()
t1 = time.perf_counter()
rng = np.random.default_rng(0)
cases = []
for xs, ws, pad in spec["shapes"]:
    x, w = (rng.standard_normal(s).astype(np.float32) for s in (xs, ws))
    cases.append((x, w, pad))
if spec["torch"]:
    devs = [(dev(x), dev(w)) for x, w, _ in cases]
    sync()
t2 = time.perf_counter()
import convlab
from convlab import runtime, autotune
from convlab.runtime import kernel_cache
t_imported = time.perf_counter()
if not spec["torch"]:
    sync = runtime.synchronize
    devs = [(runtime.to_device(x), runtime.to_device(w)) for x, w, _ in cases]
    host = runtime.to_host
    sync()
t3 = time.perf_counter()
firsts, errors = [], []
for (x, w, pad), (dx, dw) in zip(cases, devs):
    s = time.perf_counter()
    y = convlab.conv2d(dx, dw, padding=pad, algorithm=spec["algorithm"])
    sync()
    firsts.append(time.perf_counter() - s)
    prob = convlab.problem_for("conv2d", x, w, padding=pad)
    from convlab import reference
    from convlab.measure import rel_error
    errors.append(rel_error(host(y), reference.solve(prob, x.astype(np.float64), w.astype(np.float64))))
for op in spec["ops"]:
    x, w, pad = cases[0]
    dx, dw = devs[0]
    s = time.perf_counter()
    if op == "conv2d_backward_data":
        convlab.conv2d_backward_data(convlab.conv2d(dx, dw, padding=pad), dw, x.shape, padding=pad,
                                     algorithm=spec["algorithm"])
    elif op == "conv2d_backward_weight":
        convlab.conv2d_backward_weight(dx, convlab.conv2d(dx, dw, padding=pad), w.shape, padding=pad,
                                       algorithm=spec["algorithm"])
    sync()
    firsts.append(time.perf_counter() - s)
if spec["precompile"]:  # the fill step: compile (and save) every tuning candidate's kernels of these
    from convlab.runtime import settings  # shapes by running each once, without tuning them (nothing is timed)
    from convlab.plugin import registry
    from convlab.call.candidate import run_candidate
    for xs, ws, pad in spec["precompile"]:
        x, w = (rng.standard_normal(s).astype(np.float32) for s in (xs, ws))
        prob = convlab.problem_for("conv2d", x, w, padding=pad)
        limit = settings.get_workspace_limit()
        poison = np.full(prob.operand_shapes[2], np.nan, np.float32)
        if spec["torch"]:  # the operands' kind as the timed steps see it (Numba views of torch tensors)
            from convlab.call import operands
            arrays = [operands.as_device(dev(x)), operands.as_device(dev(w)), None,
                      operands.as_device(dev(poison))]
        else:
            arrays = [runtime.to_device(x), runtime.to_device(w), None, runtime.to_device(poison)]
        for cand in registry.candidates(prob, limit, per_plugin=settings.get_tune_configs()):
            run_candidate(cand, prob, *arrays, limit)
    sync()
print(json.dumps({"t_start": t_start, "import_torch_s": t1 - t0, "setup_s": t2 - t1,
                  "import_convlab_s": t_imported - t2, "numba_setup_s": t3 - t_imported,
                  "first_calls_s": firsts, "import_convlab_and_first_call_s": t_imported - t2 + firsts[0],
                  "rel_err": errors, "kernel_cache": kernel_cache.stats,
                  "kernel_cache_on": kernel_cache.enabled(),
                  "compiled_kernels": kernel_cache.compiled_names,
                  "tuner": autotune.stats(), "simulator": runtime.SIMULATOR}))
"""


def child(label: str, shapes: list, env: dict, use_torch: bool, algorithm: str, ops: tuple = (),
          timeout: int = 600, precompile: list | None = None) -> dict[str, Any]:
    """Run one step in a new interpreter; its JSON report plus the parent's view of the wall time.
    ``precompile``: shapes whose tuning candidates are each run once (kernels compiled and saved,
    nothing tuned)."""
    spec = {"shapes": shapes, "torch": use_torch, "algorithm": algorithm, "ops": list(ops),
            "precompile": precompile or []}
    spawned = time.time()
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(spec)], env=env, capture_output=True,
                          text=True, timeout=timeout)
    wall = time.time() - spawned
    if done.returncode != 0:
        return {"label": label, "error": done.stderr[-3000:], "wall_s": wall}
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report.update(label=label, wall_s=wall, spawn_to_start_s=report.pop("t_start") - spawned)
    return report


def run(use_torch: bool, algorithm: str, keep: str | None = None, tiny: bool = False) -> dict[str, Any]:
    """The four steps (module docstring) and which targets they met."""
    tuned, new_shape = TINY if tiny else (TUNED, NEW)
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, CONVLAB_KERNEL_CACHE="1", CONVLAB_CACHE_DIR=keep or tmp)
        ops = ("conv2d_backward_data", "conv2d_backward_weight")
        steps = {"fill": child("fill", tuned, env, use_torch, algorithm, ops, precompile=[new_shape])}
        if use_torch:
            steps["warm_torch"] = child("warm_torch", tuned[:1], env, True, algorithm)
        steps["warm_numba"] = child("warm_numba", tuned[:1], env, False, algorithm)
        steps["warm_ops"] = child("warm_ops", tuned[:1], env, use_torch, algorithm, ops)
        steps["new_shape"] = child("new_shape", [new_shape], env, use_torch, algorithm)
    targets = {f"{name}: ran": "error" not in step for name, step in steps.items()}
    for name in ("warm_torch", "warm_numba"):
        step = steps.get(name, {})
        if "error" not in step and step:
            first = step["import_convlab_and_first_call_s"]
            targets[f"{name}: import convlab + first call <= 1 s"] = first <= 1.0
            targets[f"{name}: nothing compiled or tuned"] = (step["kernel_cache"]["compiled"] == 0
                                                            and step["tuner"]["tuned"] == 0)
    new = steps["new_shape"]
    if "error" not in new:
        targets["new_shape: first call <= 2 s"] = new["first_calls_s"][0] <= 2.0
        targets["new_shape: no kernel compiled"] = new["kernel_cache"]["compiled"] == 0
    return {"steps": steps, "targets": targets}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="JSON output path")
    parser.add_argument("--algorithm", default="auto", help="the ops' algorithm= (auto: tuned in 'fill')")
    parser.add_argument("--no-torch", action="store_true", help="Numba device arrays only")
    parser.add_argument("--cache-dir", default=None, help="keep the caches here (default: a temporary one)")
    parser.add_argument("--tiny", action="store_true", help="simulator-sized shapes (a smoke run)")
    args = parser.parse_args(argv)
    from convlab import runtime

    result = {"device": runtime.device_name(), "versions": runtime.versions(), "tuned": TUNED, "new": NEW,
              **run(not args.no_torch, args.algorithm, args.cache_dir, args.tiny)}
    text = json.dumps(result, indent=1, default=str)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    for name, ok in result["targets"].items():
        print(f"{'ok  ' if ok else 'MISS'} {name}")
    return 0 if result["targets"] and all(result["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
