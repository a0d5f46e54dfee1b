"""Host overhead per call of the public ops against PyTorch, and the thin launch path (issue #12).

    python benchmarks/overhead_bench.py --selftest [--out SELFTEST.json]
    python benchmarks/overhead_bench.py --out OVERHEAD.json [--n 2000] [--batches 5]

``--selftest``: checks the thin launch (convlab.launch) on the device: a kernel with array, float32,
int32, bool, uint32, Python int and float64 parameters is recorded once, then replayed with patched
pointers on new arrays, on a view at an offset and on a second stream; results compared with numpy
(the packed values and the driver's parameter sizes are written as diagnostics). Then each public op
is called twice on device operands (record, then replay) and compared with the float64 reference;
then every op with every applicable plugin forced (``algorithm=name``, grouped/strided/bias and plain
cases), recorded and replayed on new inputs into NaN-poisoned outputs; then (GPU) two fresh processes
with ``CONVLAB_KERNEL_CACHE=1``: the second must load every kernel, compile none, and keep every plan
thin. Exits 1 when any check fails (the failed ones are named on the last line).

Benchmark (one process): per-call host wall clock, back-to-back (``n`` calls, then one synchronize;
the median over ``batches``), of torch F.conv2d / conv_transpose2d / grad.conv2d_input / conv2d_weight
and the convlab ops on torch CUDA tensors (1x16x8x8, weight 16x16x3x3); an empty Numba kernel with 4
array arguments launched by Numba and by the thin path; the relative error of each convlab op against
torch; the plan statistics; and the first call of a fresh subprocess with a warm disk cache (import,
then first call). Every measurement is caught separately: an exception is recorded, not fatal. A table
(op, torch us, convlab us, ratio) follows the JSON.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import traceback
from typing import Any, Callable

import numpy as np

from convlab import launch, plan, runtime
from convlab.runtime import cuda
from replay_checks import plugins_replay_check

SHAPE_X, SHAPE_W = (1, 16, 8, 8), (16, 16, 3, 3)


def _guard(results: dict, name: str, fn: Callable[[], Any]) -> None:
    try:
        results[name] = fn()
    except Exception as exc:  # noqa: BLE001  (one failure must not cost the other numbers)
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}


def per_call_us(fn: Callable[[], Any], sync: Callable[[], None], n: int, batches: int,
                warmup: int = 20) -> dict:
    """Median over ``batches`` of (wall time of ``n`` back-to-back calls + one sync) / n, in us, after
    ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        times.append((time.perf_counter() - start) / n * 1e6)
    return {"median_us": statistics.median(times), "batches_us": times, "n": n}


# ---- the thin launch selftest ------------------------------------------------------------------------
@runtime.jit
def _axpy(out, x, y, alpha, offset, flag, scale, big, beta):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = alpha * x[i] + y[i] + offset + (1.0 if flag else 0.0) + scale + beta * big


#: one scalar of every kind plugin kernels pass: float32, int32, bool, uint32, Python int, float64
SCALARS = (np.float32(2.5), np.int32(-3), True, np.uint32(7), 5, 0.5)


def _expect(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return 2.5 * x + y - 3 + 1 + 7 + 0.5 * 5


@runtime.jit
def _empty(a, b, c, d):
    pass


def _span(a: Any) -> tuple[int, int]:
    return runtime.device_pointer(a), int(a.size) * a.dtype.itemsize


def _thin_info(rec: Any) -> dict:
    """What the thin path packed (values read back from its buffer) and the driver's parameter sizes."""
    from convlab import thin

    if rec.thin is None:
        return {"thin": False}
    info = {"thin": True, "packed": [str(v) for v in rec.thin.packed.values()],
            "ctypes": [t.__name__ for t in rec.thin.packed.ctypes]}
    try:
        info["driver_param_sizes"] = thin._param_sizes(rec.thin.function)
    except Exception as exc:  # noqa: BLE001  (diagnostics only)
        info["driver_param_sizes"] = repr(exc)
    return info


def selftest() -> dict:
    """Record one launch, replay it on new arrays / a view / another stream; compare with numpy."""
    rng = np.random.default_rng(0)
    n = 1000
    host = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    out, x, y = (runtime.to_device(h) for h in host)
    with launch.recording([_span(out), _span(x), _span(y)]) as rec:
        _axpy[(n + 127) // 128, 128](out, x, y, *SCALARS)
    runtime.synchronize()
    checks: dict[str, Any] = {"recorded": bool(np.allclose(out.copy_to_host(), _expect(host[1], host[2]))),
                              "thin_path_on_gpu_only": (rec[0].thin is not None) == (not runtime.SIMULATOR)}
    diagnostics = {"axpy": _thin_info(rec[0])}
    new = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    out2, x2, y2 = (runtime.to_device(h) for h in new)
    bases = [runtime.device_pointer(a) for a in (out2, x2, y2)]
    rec[0].replay([out2, x2, y2], bases, 0)
    runtime.synchronize()
    got = out2.copy_to_host()
    checks["replay_new_arrays"] = bool(np.allclose(got, _expect(new[1], new[2])))
    diagnostics["replay_first_values"] = [float(v) for v in got[:4]]
    diagnostics["replay_expected"] = [float(v) for v in _expect(new[1], new[2])[:4]]
    checks["recorded_arrays_untouched"] = bool(np.allclose(out.copy_to_host(), _expect(host[1], host[2])))
    stream = cuda.stream()
    big = [runtime.to_device(rng.standard_normal(n + 16).astype(np.float32)) for _ in range(3)]
    views = [b[16:] for b in big]
    with launch.recording([_span(b) for b in big]) as rec2:
        _axpy[(n + 127) // 128, 128](*views, *SCALARS)
    expect_before = big[0].copy_to_host()
    fresh = [runtime.to_device(rng.standard_normal(n + 16).astype(np.float32)) for _ in range(3)]
    hosts = [f.copy_to_host() for f in fresh]
    rec2[0].replay(fresh, [runtime.device_pointer(f) for f in fresh], stream)
    stream.synchronize()
    got = fresh[0].copy_to_host()
    checks["replay_views_on_stream"] = bool(np.allclose(got[16:], _expect(hosts[1][16:], hosts[2][16:]))
                                            and np.array_equal(got[:16], hosts[0][:16]))
    checks["other_base_untouched"] = bool(np.array_equal(big[0].copy_to_host(), expect_before))
    _guard(checks, "ops_record_then_replay", _ops_replay_check)
    _guard(checks, "every_plugin_record_then_replay", plugins_replay_check)
    if not runtime.SIMULATOR:
        _guard(checks, "disk_cache_two_processes", _disk_cache_check)
    ok = all(v is True or (isinstance(v, dict) and v.get("ok")) for v in checks.values())
    failed = [k for k, v in checks.items() if not (v is True or (isinstance(v, dict) and v.get("ok")))]
    return {"ok": ok, "failed": failed, "checks": checks, "diagnostics": diagnostics,
            "device": runtime.device_name(), "simulator": runtime.SIMULATOR}


def _ops_replay_check() -> dict:
    """Each op twice on device operands (record, replay on new inputs) vs the float64 reference."""
    import convlab
    from convlab import reference
    from convlab.measure import rel_error

    rng = np.random.default_rng(1)
    errors = {}
    for op_name in ("conv2d", "conv2d_backward_data", "conv2d_backward_weight", "conv_transpose2d"):
        for _ in range(2):
            x, w, g = (rng.standard_normal(s).astype(np.float32) for s in ((1, 4, 6, 6), (4, 4, 3, 3),
                                                                            (1, 4, 6, 6)))
            args = {"conv2d": (x, w), "conv2d_backward_data": (g, w, x.shape),
                    "conv2d_backward_weight": (x, g, w.shape), "conv_transpose2d": (x, w)}[op_name]
            dev_args = [runtime.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
            got = getattr(convlab, op_name)(*dev_args, padding=1).copy_to_host()
            prob = convlab.problem_for(op_name, *args, padding=1)
            arrays = [a.astype(np.float64) for a in args if isinstance(a, np.ndarray)]
            errors[op_name] = rel_error(got, reference.solve(prob, *arrays))
    thin = [p.thin for p in plan._plans.values()]
    return {"ok": max(errors.values()) < 1e-4 and (runtime.SIMULATOR or all(thin)), "rel_err": errors,
            "plans": plan.stats(), "plans_thin": thin}


_DISK_CHILD = ("import json, sys, time; t0 = time.perf_counter(); sys.path.insert(0, {here!r}); "
               "import overhead_bench as b; t1 = time.perf_counter(); "
               "from convlab import kernel_cache; r = b._ops_replay_check(); t2 = time.perf_counter(); "
               "print(json.dumps(dict(r, cache=kernel_cache.stats, enabled=kernel_cache.enabled(), "
               "import_s=t1 - t0, ops_s=t2 - t1)))")


def _disk_cache_check() -> dict:
    """Two fresh processes with CONVLAB_KERNEL_CACHE=1 and an empty cache directory: the first
    compiles and saves, the second loads every kernel from disk; both give correct results."""
    import os
    import tempfile

    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, CONVLAB_KERNEL_CACHE="1", CONVLAB_CACHE_DIR=tmp)
        runs = []
        for _ in range(2):
            done = subprocess.run([sys.executable, "-c", _DISK_CHILD.format(here=here)], env=env,
                                  capture_output=True, text=True, timeout=600)
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0
                        else {"error": done.stderr[-3000:]})
    ok = all(r.get("ok") and r.get("enabled") for r in runs) and runs[1]["cache"]["compiled"] == 0 \
        and runs[1]["cache"]["loaded"] > 0  # r["ok"] includes: every plan thin
    return {"ok": bool(ok), "runs": runs}


def table(bench: dict) -> str:
    """op, torch us, convlab us, convlab / torch: the per-call host cost at a glance."""
    lines = [f"{'op':<28}{'torch us':>10}{'convlab us':>12}{'ratio':>8}"]
    for op in ("conv2d", "conv2d_backward_data", "conv2d_backward_weight", "conv_transpose2d",
               "conv2d_requires_grad"):
        theirs = bench.get(f"torch/{op.replace('_requires_grad', '')}", {})
        ours = bench.get(f"convlab/{op}", {})
        t, c = theirs.get("median_us"), ours.get("median_us")
        ratio = f"{c / t:8.2f}" if t and c else f"{'-':>8}"
        lines.append(f"{op:<28}{t if t is None else round(t, 1)!s:>10}{c if c is None else round(c, 1)!s:>12}"
                     f"{ratio}")
    for name in ("numba/empty_kernel_4_arrays", "thin/empty_kernel_4_arrays"):
        us = bench.get(name, {}).get("median_us")
        lines.append(f"{name:<28}{'':>10}{us if us is None else round(us, 1)!s:>12}")
    return "\n".join(lines)


# ---- the benchmark --------------------------------------------------------------------------------------
def benchmark(n: int, batches: int, alg: str = "auto", fresh: bool = True) -> dict:
    import torch
    import torch.nn.functional as F

    import convlab

    res: dict[str, Any] = {}
    sync = torch.cuda.synchronize
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(SHAPE_X, device="cuda", generator=g)
    w = torch.randn(SHAPE_W, device="cuda", generator=g)
    gy = torch.randn(SHAPE_X, device="cuda", generator=g)  # 3x3, padding 1: same spatial size
    torch.backends.cudnn.allow_tf32 = False
    cases = {
        "conv2d": (lambda: F.conv2d(x, w, padding=1), lambda: convlab.conv2d(x, w, padding=1, algorithm=alg)),
        "conv2d_backward_data": (lambda: torch.nn.grad.conv2d_input(x.shape, w, gy, padding=1),
                                 lambda: convlab.conv2d_backward_data(gy, w, x.shape, padding=1,
                                                                      algorithm=alg)),
        "conv2d_backward_weight": (lambda: torch.nn.grad.conv2d_weight(x, w.shape, gy, padding=1),
                                   lambda: convlab.conv2d_backward_weight(x, gy, w.shape, padding=1,
                                                                          algorithm=alg)),
        "conv_transpose2d": (lambda: F.conv_transpose2d(x, w, padding=1),
                             lambda: convlab.conv_transpose2d(x, w, padding=1, algorithm=alg)),
    }
    for name, (ref, ours) in cases.items():
        _guard(res, f"rel_err/{name}", lambda: float(((ours() - ref()).norm() / ref().norm()).item()))
        _guard(res, f"torch/{name}", lambda: per_call_us(ref, sync, n, batches))
        _guard(res, f"convlab/{name}", lambda: per_call_us(ours, sync, n, batches))
        print(name, res.get(f"torch/{name}", {}).get("median_us"), res.get(f"convlab/{name}", {}).get("median_us"),
              flush=True)
    _guard(res, "convlab/conv2d_requires_grad", lambda: per_call_us(
        lambda: convlab.conv2d(x.requires_grad_(True), w, padding=1), sync, n, batches))
    x.requires_grad_(False)
    arrays = [cuda.as_cuda_array(torch.empty(64, device="cuda")) for _ in range(4)]
    _guard(res, "numba/empty_kernel_4_arrays", lambda: per_call_us(
        lambda: _empty.dispatcher[1, 32](*arrays), sync, n, batches))
    with launch.recording([_span(a) for a in arrays]) as rec:
        launch.launch(_empty, 1, 32, arrays)
    bases = [runtime.device_pointer(a) for a in arrays]
    res["thin/available"] = rec[0].thin is not None
    _guard(res, "thin/empty_kernel_4_arrays", lambda: per_call_us(
        lambda: rec[0].replay(arrays, bases, 0), sync, n, batches))
    res["plans"] = plan.stats()
    res["plans_thin"] = [p.thin for p in plan._plans.values()]
    if fresh:
        _guard(res, "first_call_fresh_process", _first_call)
    return res


_CHILD = """
import time, json
t0 = time.perf_counter()
import torch, convlab
x = torch.randn({x}, device="cuda"); w = torch.randn({w}, device="cuda"); torch.cuda.synchronize()
t1 = time.perf_counter()
convlab.conv2d(x, w, padding=1); torch.cuda.synchronize()
t2 = time.perf_counter()
convlab.conv2d(x, w, padding=1); torch.cuda.synchronize()
t3 = time.perf_counter()
print(json.dumps({{"import_and_setup_s": t1 - t0, "first_call_s": t2 - t1, "second_call_s": t3 - t2}}))
"""


def _first_call() -> dict:
    """Fresh subprocesses: without the kernel cache (the second finds the autotuner's disk cache the
    first left), then with CONVLAB_KERNEL_CACHE=1 twice (the second finds the cubins too)."""
    import os

    code = _CHILD.format(x=SHAPE_X, w=SHAPE_W)
    runs = {}
    for label, flag in (("no_kernel_cache_1", "0"), ("no_kernel_cache_2", "0"),
                        ("kernel_cache_fill", "1"), ("kernel_cache_warm", "1")):
        env = dict(os.environ, CONVLAB_KERNEL_CACHE=flag)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                              env=env)
        runs[label] = (json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0
                       else {"error": done.stderr[-2000:]})
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="JSON output path")
    parser.add_argument("--selftest", action="store_true", help="check the thin launch path only")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--algorithm", default="auto", help="the ops' algorithm= (default auto: tunes first)")
    parser.add_argument("--no-fresh", action="store_true", help="skip the fresh-process first-call runs")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"device": runtime.device_name(), "versions": runtime.versions()}
    if args.selftest:
        _guard(result, "selftest", selftest)
        ok = isinstance(result["selftest"], dict) and result["selftest"].get("ok") is True
    else:
        _guard(result, "benchmark", lambda: benchmark(args.n, args.batches, args.algorithm, not args.no_fresh))
        ok = "error" not in result["benchmark"]
    text = json.dumps(result, indent=1, default=str)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    if args.selftest and isinstance(result["selftest"], dict):
        print(f"selftest {'ok' if ok else 'FAILED: ' + ', '.join(result['selftest'].get('failed', []))}")
    elif not args.selftest and isinstance(result["benchmark"], dict):
        print(table(result["benchmark"]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
