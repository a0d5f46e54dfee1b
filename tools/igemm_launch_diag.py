"""Where does implicit_gemm's time go on short shapes (results/implicit_gemm/h200/0fec88e: host time
of the split-K workspace taken from the scratch pool)? Times plugin.run with CUDA events (median of 30 after
warm-up) on a few Burn shapes three ways: as is; with the launch wrapper bypassed (Numba's own launch);
and additionally with the split-K workspace from a fixed, exact-size buffer instead of the scratch pool.
Usage (GPU): python tools/igemm_launch_diag.py
"""
import contextlib
import statistics
import time

import numpy as np

import convlab
from convlab import measure, runtime
from convlab.runtime import launch
from convlab.runtime.kernel import Kernel
from convlab.plugin import registry
import sys

from convlab.algorithms.implicit_gemm import launches

SHAPES = [("forward", 16, 512, 7, 7, 512, 3, 3, 1), ("wgrad", 16, 256, 14, 14, 256, 3, 3, 1),
          ("forward", 16, 64, 56, 56, 64, 3, 3, 1), ("dgrad", 16, 512, 7, 7, 512, 3, 3, 1)]


def time_run(prob, cand, dev, out):
    """(median device ms per run with CUDA events, host us per run of 100 back-to-back runs)."""
    def run():
        cand.plugin.run(prob, cand.config, *dev, out, workspace_limit=convlab.get_workspace_limit())
    device_ms = statistics.median(runtime.time_ms(run, warmup=5, repeat=30))
    runtime.synchronize()
    start = time.perf_counter()
    for _ in range(100):
        run()
    host_us = (time.perf_counter() - start) * 1e4
    runtime.synchronize()
    return f"{device_ms:.4f} ms / host {host_us:.0f} us"


def main():
    if "--tiny" in sys.argv:  # a smoke test on the simulator (its timings mean nothing)
        SHAPES[:] = [("forward", 1, 16, 4, 4, 16, 3, 3, 1)]
        runtime.time_ms = lambda fn, warmup, repeat: [fn() or 0.0 for _ in range(2)]
        globals()["range"] = lambda n: iter(__builtins__.range(min(n, 2)))
    plugin = registry.get("implicit_gemm")
    original_launch = launch.launch
    for op, n, c, h, w, k, r, s, pad in SHAPES:
        prob = convlab.make_problem(op, n, c, h, w, k, r, s, padding=pad)
        cfg = plugin.configs(prob)[0]
        cand = registry.Candidate(plugin, cfg)
        dev = measure.to_device(*measure.random_operands(prob))
        out = runtime.empty(prob.operand_shapes[2], prob.dtype)
        row = {"as_is": time_run(prob, cand, dev, out)}
        launch.launch = lambda kernel, grid, block, args, stream=None, shared=0: (
            kernel.dispatcher if isinstance(kernel, Kernel) else kernel)[grid, block](*args)
        row["numba_launch"] = time_run(prob, cand, dev, out)
        fixed = {}

        @contextlib.contextmanager
        def exact(partial, tiles):
            key = (partial, tiles)
            if key not in fixed:
                fixed[key] = runtime.to_device(np.zeros(partial + tiles, np.float32))
            yield fixed[key]
        saved, launches.workspace = launches.workspace, exact
        row["numba_launch_fixed_ws"] = time_run(prob, cand, dev, out)
        launches.workspace = saved
        launch.launch = original_launch
        print(f"{prob.describe():50s} {cfg.name:32s} " + "  ".join(f"{k} {v}" for k, v in row.items()),
              flush=True)


if __name__ == "__main__":
    main()
