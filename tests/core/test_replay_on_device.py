"""A recorded launch replayed on new operands, and each op's plan recorded then replayed, against numpy
and the float64 reference: on the simulator at tiny sizes, on a GPU through the thin launch path
(``cuLaunchKernel`` on packed parameters), with the disk kernel cache read by a second process.

On a GPU run with the larger profile: ``CONVLAB_HYPOTHESIS_PROFILE=convlab-gpu python -m pytest
tests/core/test_replay_on_device.py`` (the tests step of tools/gpu_check.py runs the whole suite so)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import convlab
from convlab import reference, runtime
from convlab.call import plan
from convlab.measure import rel_error, tolerance
from convlab.plugin import registry
from convlab.runtime import cuda, launch

gpu_only = pytest.mark.skipif(runtime.SIMULATOR, reason="needs a real CUDA GPU (the thin path and the "
                              "disk kernel cache exist on a GPU only)")


@runtime.jit
def _axpy(out, x, y, alpha, offset, flag, scale, big, beta):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = alpha * x[i] + y[i] + offset + (1.0 if flag else 0.0) + scale + beta * big


#: one scalar of every kind plugin kernels pass: float32, int32, bool, uint32, Python int, float64
SCALARS = (np.float32(2.5), np.int32(-3), True, np.uint32(7), 5, 0.5)
N = 1000 if not runtime.SIMULATOR else 96  # elements (the simulator runs a thread per element)


def _expect(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return 2.5 * x + y - 3 + 1 + 7 + 0.5 * 5


def _span(a) -> tuple[int, int]:
    return runtime.device_pointer(a), int(a.size) * a.dtype.itemsize


def _record(arrays, spans):
    with launch.recording(spans) as rec:
        _axpy[(N + 31) // 32, 32](*arrays, *SCALARS)
    runtime.synchronize()
    return rec[0]


def test_a_recorded_launch_replays_on_new_arrays_and_leaves_the_recorded_ones_alone():
    rng = np.random.default_rng(0)
    host = [rng.standard_normal(N).astype(np.float32) for _ in range(3)]
    dev = [runtime.to_device(h) for h in host]
    rec = _record(dev, [_span(a) for a in dev])
    assert np.allclose(dev[0].copy_to_host(), _expect(host[1], host[2]))
    assert (rec.thin is not None) == (not runtime.SIMULATOR)  # the thin path on a GPU only
    new = [rng.standard_normal(N).astype(np.float32) for _ in range(3)]
    dev2 = [runtime.to_device(h) for h in new]
    rec.replay(dev2, [runtime.device_pointer(a) for a in dev2], 0)
    runtime.synchronize()
    assert np.allclose(dev2[0].copy_to_host(), _expect(new[1], new[2]))
    assert np.allclose(dev[0].copy_to_host(), _expect(host[1], host[2]))


def test_a_launch_recorded_on_views_replays_at_the_offset_on_another_stream():
    rng = np.random.default_rng(1)
    big = [runtime.to_device(rng.standard_normal(N + 16).astype(np.float32)) for _ in range(3)]
    rec = _record([b[16:] for b in big], [_span(b) for b in big])
    before = big[0].copy_to_host()
    fresh = [runtime.to_device(rng.standard_normal(N + 16).astype(np.float32)) for _ in range(3)]
    hosts = [f.copy_to_host() for f in fresh]
    stream = cuda.stream()
    rec.replay(fresh, [runtime.device_pointer(f) for f in fresh], stream)
    stream.synchronize()
    got = fresh[0].copy_to_host()
    assert np.allclose(got[16:], _expect(hosts[1][16:], hosts[2][16:]))
    assert np.array_equal(got[:16], hosts[0][:16])  # before the view: untouched
    assert np.array_equal(big[0].copy_to_host(), before)


OPS = ("conv2d", "conv2d_backward_data", "conv2d_backward_weight", "conv_transpose2d")


def _ops_record_then_replay(algorithm: str = "implicit_gemm") -> dict:
    """Each op twice on device operands (record, then replay on new inputs): relative errors against
    the float64 reference, the plans' replay count and whether every plan is thin."""
    rng = np.random.default_rng(1)
    errors = {}
    plan.clear()
    replayed = plan.stats()["replayed"]
    for op_name in OPS:
        for _ in range(2):
            x, w, g = (rng.standard_normal(s).astype(np.float32)
                       for s in ((1, 4, 6, 6), (4, 4, 3, 3), (1, 4, 6, 6)))
            args = {"conv2d": (x, w), "conv2d_backward_data": (g, w, x.shape),
                    "conv2d_backward_weight": (x, g, w.shape), "conv_transpose2d": (x, w)}[op_name]
            dev = [runtime.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
            got = getattr(convlab, op_name)(*dev, padding=1, algorithm=algorithm).copy_to_host()
            prob = convlab.problem_for(op_name, *args, padding=1)
            want = reference.solve(prob, *[a.astype(np.float64) for a in args if isinstance(a, np.ndarray)])
            errors[op_name] = max(errors.get(op_name, 0.0), rel_error(got, want))
    return {"rel_err": errors, "replayed": plan.stats()["replayed"] - replayed,
            "thin": [p.thin for p in plan._table().plans.values()]}


def test_each_op_records_its_plan_then_replays_it():
    res = _ops_record_then_replay()
    assert max(res["rel_err"].values()) < 1e-4, res["rel_err"]
    assert res["replayed"] == len(OPS), res
    assert runtime.SIMULATOR or all(res["thin"]), res["thin"]


#: case: (op, array shapes (a, b[, bias]), the op's shape argument or None, keyword arguments):
#: grouped, strided, with bias (a replay bug may hit one plugin's kernels only: their scalar
#: parameter types differ)
PLUGIN_CASES = {
    "conv2d": ("conv2d", ((1, 4, 5, 5), (4, 2, 3, 3), (4,)), None,
               {"padding": 1, "stride": (1, 2), "groups": 2}),
    "dgrad": ("conv2d_backward_data", ((1, 4, 5, 3), (4, 2, 3, 3)), (1, 4, 5, 5),
              {"padding": 1, "stride": (1, 2), "groups": 2}),
    "wgrad": ("conv2d_backward_weight", ((1, 4, 5, 5), (1, 4, 5, 3)), (4, 2, 3, 3),
              {"padding": 1, "stride": (1, 2), "groups": 2}),
    "transpose": ("conv_transpose2d", ((1, 4, 3, 3), (4, 1, 3, 3), (2,)), None,
                  {"padding": 1, "stride": 2, "output_padding": 1, "groups": 2}),
}


def _plugin_cases() -> list:
    out = []
    for case, (op, shapes, shape_arg, kwargs) in PLUGIN_CASES.items():
        host = [np.zeros(s, np.float32) for s in shapes]
        bias = {"bias": host[2]} if len(host) == 3 else {}
        tail = () if shape_arg is None else (shape_arg,)
        prob = convlab.problem_for(op, host[0], host[1], *tail, **kwargs, **bias)
        out += [pytest.param(case, p.name, id=f"{case}-{p.name}")
                for p in registry.plugins(prob.op) if registry.verdict(p, prob)]
    return out


@pytest.mark.parametrize("case, name", _plugin_cases())
def test_every_applicable_plugin_records_then_replays(case, name):
    """Forced with ``algorithm=name``: recorded on one input, replayed on new inputs into a NaN-poisoned
    ``out``, within the reduction-scaled tolerance of the float64 reference; on a GPU every plan thin."""
    op, shapes, shape_arg, kwargs = PLUGIN_CASES[case]
    rng = np.random.default_rng(2)
    tail = () if shape_arg is None else (shape_arg,)
    plan.clear()
    for _ in range(2):  # record, then replay on new inputs
        host = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        dev = [runtime.to_device(h) for h in host]
        bias = {"bias": dev[2]} if len(dev) == 3 else {}
        prob = convlab.problem_for(op, host[0], host[1], *tail, **kwargs,
                                   **({"bias": host[2]} if len(host) == 3 else {}))
        out = runtime.full(prob.operand_shapes[2], np.nan, np.float32)
        before = plan.stats()["replayed"]
        getattr(convlab, op)(dev[0], dev[1], *tail, algorithm=name, out=out, **kwargs, **bias)
    assert plan.stats()["replayed"] == before + 1
    want = reference.solve(prob, *[h.astype(np.float64) for h in host])
    assert rel_error(out.copy_to_host(), want) <= tolerance(prob, np.finfo(np.float32).eps)
    assert runtime.SIMULATOR or all(p.thin for p in plan._table().plans.values())


_CHILD = ("import json, sys, time; t0 = time.perf_counter(); sys.path.insert(0, {here!r}); "
          "import test_replay_on_device as t; t1 = time.perf_counter(); "
          "from convlab.runtime import kernel_cache; r = t._ops_record_then_replay(); "
          "print(json.dumps(dict(r, cache=kernel_cache.stats, enabled=kernel_cache.enabled(), "
          "import_s=t1 - t0, ops_s=time.perf_counter() - t1)))")


@gpu_only
def test_a_second_process_loads_every_kernel_from_the_disk_cache(tmp_path):
    """Two fresh processes with CONVLAB_KERNEL_CACHE=1 on one empty cache folder: the first compiles
    and saves, the second compiles nothing, and both give correct results on thin plans."""
    env = dict(os.environ, CONVLAB_KERNEL_CACHE="1", CONVLAB_CACHE_DIR=str(tmp_path))
    runs = []
    for _ in range(2):
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", _CHILD.format(here=os.path.dirname(__file__))],
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(dict(json.loads(done.stdout.strip().splitlines()[-1]), wall_s=time.perf_counter() - t0))
    for run in runs:
        assert run["enabled"] and max(run["rel_err"].values()) < 1e-4 and all(run["thin"]), run
    assert runs[1]["cache"]["compiled"] == 0 and runs[1]["cache"]["loaded"] > 0, runs
