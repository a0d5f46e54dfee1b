"""Host cost of a planned op call *around* the kernel launch, measurable without a GPU.

    python benchmarks/host_path_bench.py [--n 500] [--profile]

Each op is called once on device operands (the plan is recorded), then every recorded launch's
``replay`` is stubbed out (``convlab.launch.Launch.replay``: nothing is launched) and the plan is
marked thin, so what is timed is exactly the Python of a steady-state call: key, plan lookup and
validity, stream, output allocation, pointers. Two operand kinds: Numba device arrays, and a stand-in
for torch CUDA tensors (a class whose module is ``torch``, with the attributes convlab reads, and a
stand-in ``torch`` module: ``empty``, dtypes, ``device``, ``_C._cuda_getCurrentRawStream``), whose
plans are copied from the Numba ones. Prints us per call per op (the best batch of ``n`` calls: robust on a loaded machine); ``--profile`` adds cProfile's top
functions for conv2d on torch stand-ins. The stand-ins cost about what torch's C++ accessors cost
(~0.1 us each) except ``torch.empty``, which is ~2-3 us on a real GPU and a dict lookup here.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
import types

import numpy as np

import convlab
from convlab import launch, plan, runtime


class _Dev:
    def __init__(self, index):
        self.index, self.type = index, "cuda"


class Tensor:
    """The attributes of a torch CUDA tensor that convlab's fast path reads."""

    def __init__(self, shape, dtype="float32"):
        self._host = np.zeros(shape, dtype)
        self.shape = tuple(shape)
        self.dtype = dtype
        self.is_cuda = True
        self.device = _Dev(0)
        self._strides = tuple(s // self._host.itemsize for s in self._host.strides)
        self._ptr = self._host.__array_interface__["data"][0]

    def stride(self):
        return self._strides

    def get_device(self):
        return 0

    def data_ptr(self):
        return self._ptr

    def numel(self):
        return self._host.size

    def element_size(self):
        return self._host.itemsize

    def detach(self):
        return self


Tensor.__module__ = "torch"


_OUT = {}


def _empty(shape, dtype=None, device=None):
    """torch.empty's stand-in: a pooled tensor per shape (real allocation cost is torch's)."""
    found = _OUT.get((shape, dtype))
    if found is None:
        found = _OUT[(shape, dtype)] = Tensor(shape, dtype)
    return found


def _fake_torch() -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.float32, torch.float64 = "float32", "float64"
    torch.device = lambda kind, index: _Dev(index)
    torch.empty = _empty
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda index: 0)
    torch.cuda = types.SimpleNamespace(current_stream=lambda d=None: types.SimpleNamespace(cuda_stream=0))
    return torch


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
    sys.modules.setdefault("torch", _fake_torch())
    rng = np.random.default_rng(0)
    calls = {}
    for op, (shapes, extra) in CASES.items():
        fn = getattr(convlab, op)
        devs = [runtime.to_device(rng.standard_normal(s).astype(np.float32)) for s in shapes]
        fn(*devs, *extra, padding=1)  # records the plan (simulated kernels run once)
        key = next(reversed(plan._plans))
        recorded = plan._plans[key]
        tens = [Tensor(s) for s in shapes]
        torch_key = (key[0], tuple(convlab.operands.signature(v) for v in (*tens, None, None))) + key[2:]
        try:
            copy = plan.Plan(recorded.candidate, recorded.launches, recorded.state, recorded.out_shape,
                             recorded.dtype, recorded.decision, torch_key[1])
        except TypeError:  # the plan of an older convlab
            copy = plan.Plan(recorded.candidate, recorded.launches, recorded.state, recorded.out_shape,
                             recorded.dtype, recorded.decision)
        plan.store(torch_key, copy)
        for p in (recorded, copy):
            p.thin = True
        calls[op] = {"numba": (lambda f=fn, d=devs, e=extra: f(*d, *e, padding=1)),
                     "torch": (lambda f=fn, t=tens, e=extra: f(*t, *e, padding=1))}
    launch.Launch.replay = lambda self, operands, bases, stream: None  # nothing is launched
    print(f"{'op':<24}{'numba us':>10}{'torch us':>10}{'launches':>10}")
    for op, kinds in calls.items():
        nlaunch = len(plan._plans[next(k for k in plan._plans if k[0] == op)].launches)
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
