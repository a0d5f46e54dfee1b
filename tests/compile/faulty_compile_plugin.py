"""A plugin whose kernel cannot fit a GPU: 64 KiB of static shared memory (48 KiB is the limit).
Imported by the compile workers in tests/compile/test_compile.py (``imports``)."""
import numpy as np

import convlab
from convlab import runtime
from convlab.runtime import cuda


@runtime.jit
def _greedy(x, y):
    tile = cuda.shared.array(16384, np.float32)  # 64 KiB
    i = cuda.grid(1)
    tile[cuda.threadIdx.x] = x[i % x.size]
    cuda.syncthreads()
    y[i % y.size] = tile[(cuda.threadIdx.x + 1) % 128]


@convlab.register(replace=True)
class Greedy(convlab.Algorithm):
    name, ops, priority = "_test_greedy_shared", frozenset({"forward"}), -100

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        _greedy[1, 128](a.reshape(a.size), out.reshape(out.size))
