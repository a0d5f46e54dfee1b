"""Host cost of a depthwise_pointwise call on device operands, measurable without a GPU: the full path
(check, choice, operand conversions, output, launch) against the replay of convlab.blocks.dw_pw_plan.

    NUMBA_ENABLE_CUDASIM=1 python benchmarks/block_host_bench.py [--n 300] [--profile]

Numba device arrays, float16, 1x8x6x6 input, 8 outputs, a residual; each way ("fused", "separate") once
with every kernel run (the plans recorded), then nothing is launched: ``convlab.runtime.launch.launch``
(every kernel call's entry) is stubbed for the full path, and every recorded launch (the block's and conv2d's)
is marked thin and its ``replay`` stubbed for the replayed one, so the replay is timed as a GPU runs it
(no simulator views). The full path is the call with no plan key (every call checked and converted).
Prints us per call (the best batch of ``n`` calls: a loaded machine's noise is large) and the Python
function calls per call that cProfile counts (steady, machine-independent); ``--profile`` adds the
replayed fused call's top functions. On a GPU the full path also pays Numba's launch of the kernel
and its ``__cuda_array_interface__`` view of each torch operand, which the stubs and Numba operands
leave out; the replay's thin launch is one driver call.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time

import numpy as np

from convlab import blocks, runtime
from convlab.blocks import dw_pw_plan
from convlab.call import plan
from convlab.runtime import launch


def _per_call_us(fn, n: int) -> float:
    for _ in range(20):
        fn()
    best = float("inf")
    for _ in range(15):
        start = time.perf_counter_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / n / 1e3)
    return best


def _python_calls(fn, n: int = 100) -> float:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    return sum(v[1] for v in pstats.Stats(prof).stats.values()) / n


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    if not runtime.SIMULATOR:
        raise SystemExit("run on the simulator (NUMBA_ENABLE_CUDASIM=1): the stubs stand in for its kernels")

    rng = np.random.default_rng(0)
    shapes = [(1, 8, 6, 6), (8, 1, 3, 3), (8, 8, 1, 1), (8,), (8,), (1, 8, 6, 6)]
    x, wd, wp, bd, bp, res = (runtime.to_device(rng.standard_normal(s).astype(np.float16)) for s in shapes)
    calls = {way: (lambda a=way: blocks.depthwise_pointwise(x, wd, wp, bd, bp, 1, 1, dw_activation="relu6",
                                                            residual=res, algorithm=a))
             for way in ("fused", "separate")}
    for fn in calls.values():
        fn()  # every kernel runs once; the block's and conv2d's plans are recorded
    launch.launch = lambda *a, **k: None
    for table in (dw_pw_plan._table().values(), plan._table().plans.values()):
        for recorded in table:
            if hasattr(recorded, "launches"):
                recorded.thin = True
    launch.Launch.replay = lambda self, operands, bases, stream: None
    planned_key = dw_pw_plan.key
    print(f"{'way':<10}{'path':<8}{'us/call':>10}{'Python calls/call':>20}")
    for way, fn in calls.items():
        for path in ("full", "replay"):
            dw_pw_plan.key = (lambda *a: None) if path == "full" else planned_key
            print(f"{way:<10}{path:<8}{_per_call_us(fn, args.n):>10.1f}{_python_calls(fn):>20.0f}")
    dw_pw_plan.key = planned_key
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.n):
            calls["fused"]()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)
    return 0


if __name__ == "__main__":
    sys.exit(main())
