"""Host cost of a planned op call *around* the kernel launch, measurable without a GPU.

    python benchmarks/host_path_bench.py [--n 500] [--profile]

Each op is called once on device operands (the plan is recorded), then every recorded launch's
``replay`` is stubbed out (``convlab.runtime.launch.Launch.replay``: nothing is launched) and the plan is
marked thin, so what is timed is exactly the Python of a steady-state call: key, plan lookup and
validity, stream, output allocation, pointers. Two operand kinds: Numba device arrays, and stand-ins
for torch CUDA tensors (convlab.testing.torch_standin), whose plans are copied from the Numba ones. Prints us per call per op (the best batch of ``n`` calls: robust on a loaded machine); ``--profile`` adds cProfile's top
functions for conv2d on torch stand-ins. The stand-ins cost about what torch's C++ accessors cost
(~0.1 us each) except ``torch.empty``, which is ~2-3 us on a real GPU and a dict lookup here.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time

import numpy as np

import convlab
from convlab import runtime
from convlab.runtime import launch
from convlab.call import plan
from convlab.testing.torch_standin import Tensor, adopt_plan, fake_torch


CASES = {  # op: (array shapes, extra positional args); 1x16x8x8 input, 16x16x3x3 weight, padding 1
    "conv2d": (((1, 16, 8, 8), (16, 16, 3, 3)), ()),
    "conv2d_backward_data": (((1, 16, 8, 8), (16, 16, 3, 3)), ((1, 16, 8, 8),)),
    "conv2d_backward_weight": (((1, 16, 8, 8), (1, 16, 8, 8)), ((16, 16, 3, 3),)),
    "conv_transpose2d": (((1, 16, 8, 8), (16, 16, 3, 3)), ()),
}


def _per_call_us(fn, n: int) -> float:
    for _ in range(100):
        fn()
    best = float("inf")
    for _ in range(max(15, 200000 // n)):
        start = time.perf_counter_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter_ns() - start) / n / 1e3)
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    sys.modules.setdefault("torch", fake_torch())
    rng = np.random.default_rng(0)
    plans = plan._table().plans  # the current device's plan table (the context's "plans" store)
    calls = {}
    for op, (shapes, extra) in CASES.items():
        fn = getattr(convlab, op)
        devs = [runtime.to_device(rng.standard_normal(s).astype(np.float32)) for s in shapes]
        fn(*devs, *extra, padding=1)  # records the plan (simulated kernels run once)
        key = next(reversed(plans))
        tens = [Tensor(s) for s in shapes]
        adopt_plan(key, tens)
        plans[key].thin = True
        calls[op] = {"numba": (lambda f=fn, d=devs, e=extra: f(*d, *e, padding=1)),
                     "torch": (lambda f=fn, t=tens, e=extra: f(*t, *e, padding=1))}
    launch.Launch.replay = lambda self, operands, bases, stream: None  # nothing is launched
    print(f"{'op':<24}{'numba us':>10}{'torch us':>10}{'launches':>10}")
    for op, kinds in calls.items():
        nlaunch = len(plans[next(k for k in plans if k[0] == op)].launches)
        print(f"{op:<24}{_per_call_us(kinds['numba'], args.n):>10.2f}"
              f"{_per_call_us(kinds['torch'], args.n):>10.2f}{nlaunch:>10}")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.n):
            calls["conv2d"]["torch"]()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    sys.exit(main())
