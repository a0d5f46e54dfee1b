"""Host overhead per call of the public ops against PyTorch, and the thin launch path.

    python benchmarks/overhead_bench.py --out OVERHEAD.json [--n 2000] [--batches 7] [--profile]

Benchmark (one process): per-call host wall clock, back-to-back (``n`` calls, then one synchronize;
the median over ``batches``, every case timed round-robin so that a slower spell of the host is
shared by all cases rather than charged to the first ones measured; ``issue_us``: the same before the
synchronize, i.e. the host's cost alone while the launch queue does not fill), of torch F.conv2d / conv_transpose2d /
grad.conv2d_input / conv2d_weight and the convlab ops on torch CUDA tensors (1x16x8x8, weight
16x16x3x3; conv2d also on a tensor requiring grad); an empty Numba kernel with 4 array arguments
launched by Numba and by the thin path (and its ``cuLaunchKernel`` alone, ``launch_only/``); the
relative error of each convlab op against torch;
``convlab_nograph/<op>``: the same with the plans' CUDA graphs off (convlab.call.graphs);
``gpu/<op>``: the device time per call (torch's and convlab's), measured behind a
``torch.cuda._sleep`` spin kernel that hides the host's enqueueing: a ``median_us`` near ``gpu_us``
and above ``issue_us`` is bound by the GPU, not by the host path; each plan's launch count; with
``--profile``, cProfile's top functions per convlab op; the plan statistics. (A new process's first
calls: benchmarks/cold_start.py.) Every measurement is caught separately: an exception is
recorded, not fatal. A table (op, torch us, convlab us, ratio, issue us, gpu us) follows the JSON.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from typing import Any, Callable

from convlab import runtime
from convlab.runtime import driver as driver_launch, launch
from convlab.call import graphs, plan
from convlab.runtime import cuda


def _guard(results: dict, name: str, fn: Callable[[], Any]) -> None:
    try:
        results[name] = fn()
    except Exception as exc:  # noqa: BLE001  (one failure must not cost the other numbers)
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}


@runtime.jit
def _empty(a, b, c, d):
    pass


def _span(a: Any) -> tuple[int, int]:
    return runtime.device_pointer(a), int(a.size) * a.dtype.itemsize

SHAPE_X, SHAPE_W = (1, 16, 8, 8), (16, 16, 3, 3)


def _without_graphs(fn: Callable[[], Any]) -> Any:
    """``fn()`` with the plans' CUDA graphs off (convlab.call.graphs): each launch issued alone."""
    with graphs.disabled():
        return fn()


def layer_shapes(layer: str | None) -> tuple[tuple, tuple, int, int, int]:
    """(x shape, weight shape, padding, groups, stride) of ``--layer N,C,H,W,K,R[,G[,S]]`` (square R x R
    filter, padding R // 2, groups G and stride S, 1 by default: ``32,384,14,14,384,3,384`` is a depthwise
    layer); the default is the tiny 1x16x8x8 w16x3x3 layer."""
    if not layer:
        return SHAPE_X, SHAPE_W, 1, 1, 1
    values = [int(v) for v in layer.split(",")]
    if len(values) not in (6, 7, 8):
        raise ValueError(f"--layer takes N,C,H,W,K,R[,G[,S]], got {layer!r}")
    n, c, h, w, k, r, g, s = values + [1] * (8 - len(values))
    return (n, c, h, w), (k, c // g, r, r), r // 2, g, s


def per_call_us(fn: Callable[[], Any], sync: Callable[[], None], n: int, batches: int,
                warmup: int = 20) -> dict:
    """Median over ``batches`` of (wall time of ``n`` back-to-back calls + one sync) / n, in us, after
    ``warmup`` calls, and ``issue_us``: the median of the same without the sync (host time only)."""
    for _ in range(warmup):
        fn()
    sync()
    times, issued = [], []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        issued.append((time.perf_counter() - start) / n * 1e6)
        sync()
        times.append((time.perf_counter() - start) / n * 1e6)
    return {"median_us": statistics.median(times), "issue_us": statistics.median(issued),
            "batches_us": times, "n": n}


def interleaved_us(cases: dict[str, Callable[[], Any]], sync: Callable[[], None], n: int, batches: int,
                   warmup: int = 20) -> dict[str, dict]:
    """:func:`per_call_us` of every case, taken round-robin: batch ``b`` times each case once (``n``
    calls), in forward order on even batches and reverse order on odd ones, so a host that is slower
    for a while (clock ramp, a process finishing beside it) weighs on every case alike instead of on
    whichever was measured first."""
    for fn in cases.values():
        for _ in range(warmup):
            fn()
    sync()
    times: dict[str, list[float]] = {name: [] for name in cases}
    issued: dict[str, list[float]] = {name: [] for name in cases}
    for b in range(batches):
        for name in (list(cases) if b % 2 == 0 else list(reversed(cases))):
            fn = cases[name]
            sync()
            start = time.perf_counter()
            for _ in range(n):
                fn()
            issued[name].append((time.perf_counter() - start) / n * 1e6)
            sync()
            times[name].append((time.perf_counter() - start) / n * 1e6)
    return {name: {"median_us": statistics.median(times[name]), "issue_us": statistics.median(issued[name]),
                   "batches_us": times[name], "n": n} for name in cases}


def gpu_us(fn: Callable[[], Any], calls: int = 20, repeats: int = 5) -> float:
    """Device time per call of ``fn`` (torch current stream): ``calls`` calls queued behind a spin
    kernel long enough to hide their enqueueing, timed with events; the median over ``repeats``."""
    import torch

    fn()
    torch.cuda.synchronize()
    per = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(4e6))  # ~2 ms of spinning: longer than enqueueing ``calls`` calls
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        per.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(per)


def profile_top(fn: Callable[[], Any], n: int = 2000, top: int = 12) -> list[str]:
    """cProfile's ``top`` functions by own time over ``n`` calls of ``fn``."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    return [line for line in text.getvalue().splitlines() if line.strip()][-top - 1:]


def table(bench: dict) -> str:
    """op, torch us, convlab us, convlab / torch, convlab's host-only (issue) us and the device time
    per call of each (gpu): the per-call cost at a glance, and whether the GPU or the host bounds it."""
    def num(v: Any) -> str:
        return "-" if v is None else f"{v:.1f}"

    lines = [f"{'op':<28}{'torch us':>10}{'convlab us':>12}{'ratio':>8}{'issue us':>10}{'gpu torch':>11}"
             f"{'gpu ours':>10}{'no graph us':>13}"]
    for op in ("conv2d", "conv2d_backward_data", "conv2d_backward_weight", "conv_transpose2d",
               "conv2d_requires_grad"):
        theirs, ours = bench.get(f"torch/{op}", {}), bench.get(f"convlab/{op}", {})
        gpu = bench.get(f"gpu/{op}", {})
        t, c = theirs.get("median_us"), ours.get("median_us")
        ratio = f"{c / t:8.2f}" if t and c else f"{'-':>8}"
        lines.append(f"{op:<28}{num(t):>10}{num(c):>12}{ratio}{num(ours.get('issue_us')):>10}"
                     f"{num(gpu.get('torch_us')):>11}{num(gpu.get('convlab_us')):>10}"
                     f"{num(bench.get(f'convlab_nograph/{op}', {}).get('median_us')):>13}")
    for name in ("numba/empty_kernel_4_arrays", "thin/empty_kernel_4_arrays",
                 "launch_only/empty_kernel_4_arrays"):
        lines.append(f"{name:<28}{'':>10}{num(bench.get(name, {}).get('median_us')):>12}")
    return "\n".join(lines)


# ---- the benchmark --------------------------------------------------------------------------------------
def benchmark(n: int, batches: int, alg: str = "auto", profile: bool = False, layer: str | None = None,
              dtype: str = "float32") -> dict:
    import torch
    import torch.nn.functional as F

    import convlab

    res: dict[str, Any] = {}
    sync = torch.cuda.synchronize
    shape_x, shape_w, pad, groups, st = layer_shapes(layer)
    n_, _, h, w_ = shape_x
    shape_y = (n_, shape_w[0], (h + 2 * pad - shape_w[2]) // st + 1, (w_ + 2 * pad - shape_w[3]) // st + 1)
    kw = dict(stride=st, padding=pad, groups=groups)
    g = torch.Generator(device="cuda").manual_seed(0)
    tdt = getattr(torch, dtype)
    x = torch.randn(shape_x, device="cuda", generator=g).to(tdt)
    w = torch.randn(shape_w, device="cuda", generator=g).to(tdt)
    gy = torch.randn(shape_y, device="cuda", generator=g).to(tdt)
    torch.backends.cudnn.allow_tf32 = False
    cases = {
        "conv2d": (lambda: F.conv2d(x, w, **kw),
                   lambda: convlab.conv2d(x, w, **kw, algorithm=alg)),
        "conv2d_backward_data": (lambda: torch.nn.grad.conv2d_input(x.shape, w, gy, **kw),
                                 lambda: convlab.conv2d_backward_data(gy, w, x.shape, **kw, algorithm=alg)),
        "conv2d_backward_weight": (lambda: torch.nn.grad.conv2d_weight(x, w.shape, gy, **kw),
                                   lambda: convlab.conv2d_backward_weight(x, gy, w.shape, **kw, algorithm=alg)),
    }
    if st == 1 and shape_w[0] == shape_x[1]:  # x as the transpose's input: needs K == C (stride 1: same size)
        cases["conv_transpose2d"] = (lambda: F.conv_transpose2d(x, w, padding=pad, groups=groups),
                                     lambda: convlab.conv_transpose2d(x, w, padding=pad, groups=groups,
                                                                      algorithm=alg))
    xr = x.detach().clone().requires_grad_(True)  # made once: requires_grad_ per call would be timed
    cases["conv2d_requires_grad"] = (lambda: F.conv2d(xr, w, **kw),  # same algorithm as conv2d
                                     lambda: convlab.conv2d(xr, w, **kw, algorithm=alg))
    timed = {}
    for name, (ref, ours) in cases.items():
        _guard(res, f"rel_err/{name}", lambda: float(((ours().float() - ref().float()).norm()
                                                            / ref().float().norm()).item()))
        if not isinstance(res[f"rel_err/{name}"], dict):  # a dict is an error: the case is left out
            timed[f"torch/{name}"], timed[f"convlab/{name}"] = ref, ours
            timed[f"convlab_nograph/{name}"] = lambda ours=ours: _without_graphs(ours)
    res["per_call"] = sorted(timed)  # the names timed together, round-robin
    try:
        res.update(interleaved_us(timed, sync, n, batches))
    except Exception as exc:  # noqa: BLE001  (the launch checks below still run)
        res["per_call"] = {"error": f"{type(exc).__name__}: {exc}"}
    for name, (ref, ours) in cases.items():
        _guard(res, f"gpu/{name}", lambda: {"torch_us": gpu_us(ref), "convlab_us": gpu_us(ours)})
        if profile:
            _guard(res, f"profile/{name}", lambda: profile_top(ours))
        print(name, res.get(f"torch/{name}", {}).get("median_us"),
              res.get(f"convlab/{name}", {}).get("median_us"), res.get(f"gpu/{name}"), flush=True)
    arrays = [cuda.as_cuda_array(torch.empty(64, device="cuda")) for _ in range(4)]
    _guard(res, "numba/empty_kernel_4_arrays", lambda: per_call_us(
        lambda: _empty.dispatcher[1, 32](*arrays), sync, n, batches))
    with launch.recording([_span(a) for a in arrays]) as rec:
        launch.launch(_empty, 1, 32, arrays)
    bases = [runtime.device_pointer(a) for a in arrays]
    res["thin/available"] = rec[0].thin is not None
    _guard(res, "thin/empty_kernel_4_arrays", lambda: per_call_us(
        lambda: rec[0].replay(arrays, bases, 0), sync, n, batches))
    thin = rec[0].thin  # the same packed launch alone: the driver call without the replay's patching
    if thin is not None:
        _guard(res, "launch_only/empty_kernel_4_arrays", lambda: per_call_us(
            lambda: driver_launch.cu_launch(thin.function, thin.dims, thin.shared, 0, thin.address),
            sync, n, batches))
    from convlab.call import operands  # the pieces of a planned call on torch tensors, each alone
    raw = operands.raw_stream_getter()
    pieces = {"signature_x4": lambda: [operands.signature(t) for t in (x, w, gy, x)],
              "raw_stream": lambda: raw(0), "torch_empty_out": lambda: torch.empty(shape_y, device="cuda",
                                                                                   dtype=tdt)}
    for name, fn in pieces.items():
        _guard(res, f"piece/{name}", lambda: per_call_us(fn, sync, n, batches)["median_us"])
    res["plans"] = plan.stats()
    res["graphs"] = dict(graphs.stats)
    res["plans_thin"] = [p.thin for p in plan._table().plans.values()]
    res["plan_launches"] = {f"{k[0]}/{p.candidate.plugin.name}/{p.candidate.config.name}": len(p.launches)
                            for k, p in plan._table().plans.items()}
    return res


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="JSON output path")
    parser.add_argument("--n", type=int, default=2000, help="calls per batch")
    parser.add_argument("--batches", type=int, default=7, help="batches per case, taken round-robin")
    parser.add_argument("--algorithm", default="auto", help="the ops' algorithm= (default auto: tunes first)")
    parser.add_argument("--profile", action="store_true", help="cProfile's top functions per convlab op")
    parser.add_argument("--layer", default=None, help="N,C,H,W,K,R[,G[,S]]: a square-filter layer (groups G, "
                        "stride S), padding R//2, instead of 1x16x8x8 w16x3x3 (conv_transpose2d: K == C, S 1)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"device": runtime.device_name(), "versions": runtime.versions(),
                              "layer": args.layer or "1,16,8,8,16,3", "dtype": args.dtype,
                              "algorithm": args.algorithm}
    _guard(result, "benchmark", lambda: benchmark(args.n, args.batches, args.algorithm, args.profile,
                                                      args.layer, args.dtype))
    text = json.dumps(result, indent=1, default=str)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    if "error" in result["benchmark"]:
        return 1
    print(table(result["benchmark"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
