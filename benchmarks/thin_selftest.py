"""GPU self-test of the thin launch path and of launch-plan replay (issue #12).

    python benchmarks/thin_selftest.py [--full] [--budget-s 150] [--out SELFTEST.json]
    (also ``python benchmarks/overhead_bench.py --selftest ...``)

Checks the thin launch (convlab.runtime.launch) on the device: a kernel with array, float32,
int32, bool, uint32, Python int and float64 parameters is recorded once, then replayed with patched
pointers on new arrays, on a view at an offset and on a second stream; results compared with numpy
(the packed values and the driver's parameter sizes are written as diagnostics). Then each public op
is called twice on device operands with ``algorithm=implicit_gemm`` (record, then replay; a forced
plugin: ``"auto"`` would tune every plugin's every config, minutes of compiling on a GPU) and compared
with the float64 reference; then every op with every applicable plugin forced (``algorithm=name``;
the grouped/strided/bias cases, ``--full`` adds the plain ones), recorded and replayed on new inputs
into NaN-poisoned outputs, new pairs started only within ``--budget-s`` (those left out are listed,
not failed); then (GPU) two fresh processes with ``CONVLAB_KERNEL_CACHE=1``: the second must load
every kernel, compile none, and keep every plan thin. Exits 1 when any check fails (the failed ones
are named on the last line).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import traceback
from typing import Any, Callable

import numpy as np

from convlab import runtime
from convlab.runtime import launch
from convlab.call import plan
from convlab.runtime import cuda
from replay_checks import QUICK_CASES, plugins_replay_check


def _guard(results: dict, name: str, fn: Callable[[], Any]) -> None:
    try:
        results[name] = fn()
    except Exception as exc:  # noqa: BLE001  (one failure must not cost the other numbers)
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}


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
    from convlab.runtime import thin

    if rec.thin is None:
        return {"thin": False}
    info = {"thin": True, "packed": [str(v) for v in rec.thin.packed.values()],
            "ctypes": [t.__name__ for t in rec.thin.packed.ctypes]}
    try:
        info["driver_param_sizes"] = thin._param_sizes(rec.thin.function)
    except Exception as exc:  # noqa: BLE001  (diagnostics only)
        info["driver_param_sizes"] = repr(exc)
    return info


def selftest(full: bool = False, budget_s: float | None = 150.0) -> dict:
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
    _guard(checks, "every_plugin_record_then_replay", lambda: plugins_replay_check(
        None if full else QUICK_CASES, budget_s))
    if not runtime.SIMULATOR:
        _guard(checks, "disk_cache_two_processes", _disk_cache_check)
    ok = all(v is True or (isinstance(v, dict) and v.get("ok")) for v in checks.values())
    failed = [k for k, v in checks.items() if not (v is True or (isinstance(v, dict) and v.get("ok")))]
    return {"ok": ok, "failed": failed, "checks": checks, "diagnostics": diagnostics,
            "device": runtime.device_name(), "simulator": runtime.SIMULATOR}


def _ops_replay_check(algorithm: str = "implicit_gemm") -> dict:
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
            got = getattr(convlab, op_name)(*dev_args, padding=1, algorithm=algorithm).copy_to_host()
            prob = convlab.problem_for(op_name, *args, padding=1)
            arrays = [a.astype(np.float64) for a in args if isinstance(a, np.ndarray)]
            errors[op_name] = rel_error(got, reference.solve(prob, *arrays))
    thin = [p.thin for p in plan._table().plans.values()]
    return {"ok": max(errors.values()) < 1e-4 and (runtime.SIMULATOR or all(thin)), "rel_err": errors,
            "plans": plan.stats(), "plans_thin": thin}


_DISK_CHILD = ("import json, sys, time; t0 = time.perf_counter(); sys.path.insert(0, {here!r}); "
               "import thin_selftest as b; t1 = time.perf_counter(); "
               "from convlab.runtime import kernel_cache; r = b._ops_replay_check(); t2 = time.perf_counter(); "
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
                                  capture_output=True, text=True, timeout=240)
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0
                        else {"error": done.stderr[-3000:]})
    ok = all(r.get("ok") and r.get("enabled") for r in runs) and runs[1]["cache"]["compiled"] == 0 \
        and runs[1]["cache"]["loaded"] > 0  # r["ok"] includes: every plan thin
    return {"ok": bool(ok), "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="JSON output path")
    parser.add_argument("--full", action="store_true", help="every plugin case, plain ones too")
    parser.add_argument("--budget-s", type=float, default=150.0,
                        help="start no new plugin case after this many seconds")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"device": runtime.device_name(), "versions": runtime.versions()}
    _guard(result, "selftest", lambda: selftest(args.full, args.budget_s))
    ok = isinstance(result["selftest"], dict) and result["selftest"].get("ok") is True
    text = json.dumps(result, indent=1, default=str)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    if isinstance(result["selftest"], dict):
        print(f"selftest {'ok' if ok else 'FAILED: ' + ', '.join(result['selftest'].get('failed', []))}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
