# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Adding an algorithm: Winograd F(2x2, 3x3)
#
# This notebook writes a new convolution algorithm from scratch, registers it with convlab, runs the
# conformance suite on it, and watches `convlab.explain`, the autotuner and the benchmark harness
# consider it next to the built-in plugins. The written guide is `docs/ADDING_A_PLUGIN.md`.
#
# Winograd's minimal filtering algorithm F(2x2, 3x3) (Lavin & Gray, 2015) computes each 2x2 tile of the
# output from a 4x4 tile `d` of the input with 16 multiplies per channel instead of 36:
#
#     U[k, c] = G g[k, c] G^T          4x4 transformed filter (once per call, kept in a workspace)
#     V[c]    = B^T d[c] B             4x4 transformed input tile
#     M       = sum_c U[k, c] * V[c]   elementwise: 16 independent channel reductions
#     Y       = A^T M A                the 2x2 output tile (+ bias[k])
#
# with `B^T = [[1,0,-1,0], [0,1,1,0], [0,-1,1,0], [0,1,0,-1]]`, `G = [[1,0,0], [.5,.5,.5], [.5,-.5,.5],
# [0,0,1]]` and `A^T = [[1,1,1,0], [0,1,-1,-1]]`. It only applies to 3x3 filters with stride 1 and
# dilation 1 (and here groups 1): the plugin must say so, with reasons.
#
# **Size switch.** `CONVLAB_NOTEBOOK_SIZE=tiny` (the default without a GPU) keeps every problem tiny
# for Numba's CUDA simulator, where times are wall-clock seconds of simulated kernels (not GPU speed);
# `full` (the default on a GPU) benchmarks ResNet-50's 3x3 layers.

# %%
import functools
import math
import os
import time

import matplotlib.pyplot as plt
import numba
import numpy as np
from hypothesis import settings

import convlab
import convlab.testing
from convlab import Algorithm, Config, Problem, Target, Verdict, autotune, measure, reference, runtime
from convlab.bench import baseline, harness as bench
from convlab.bench.plot import time_bars
from convlab.runtime import cuda
from convlab.bench.report import table
from convlab.bench.suite import suite_from_dict

SIZE = os.environ.get("CONVLAB_NOTEBOOK_SIZE", "tiny" if runtime.target().simulator else "full")
assert SIZE in ("tiny", "full"), f"CONVLAB_NOTEBOOK_SIZE must be 'tiny' or 'full', got {SIZE!r}"
FIG_DIR = os.environ.get("CONVLAB_FIGURE_DIR") or (None if not runtime.HAS_DEVICE else "figures")
print(f"device: {runtime.device_name()}   size: {SIZE}   figures saved to: {FIG_DIR or '(not saved)'}")

# %% [markdown]
# ## The kernels
# Kernels reach CUDA only through `convlab.runtime` (`from convlab.runtime import cuda`, `@runtime.jit`),
# which also runs them on the simulator. A small cached factory builds them per dtype, so that the
# constants (0, 0.5) and the local arrays' element type are compile-time constants.
#
# `filter_transform`: one thread per (k, c) computes `U = G g G^T`. `tiles`: one thread per
# (n, k, 2x2 output tile) loads each channel's 4x4 input tile (zero in the padding), transforms it,
# multiplies it into 16 accumulators, and finally writes `A^T M A` (bounds-checked for odd sizes).

# %%
@functools.cache
def winograd_kernels(dtype: str):
    """(filter_transform, tiles) for one dtype."""
    nbtype = numba.from_dtype(np.dtype(dtype))
    half = np.dtype(dtype).type(0.5)
    zero = np.dtype(dtype).type(0)

    @runtime.jit
    def filter_transform(w, u):
        """u[k, c, 4*i + j] = (G w[k, c] G^T)[i, j]; one thread per (k, c)."""
        idx = cuda.grid(1)
        kk, cc = w.shape[0], w.shape[1]
        if idx >= kk * cc:
            return
        k, c = idx // cc, idx % cc
        t = cuda.local.array((4, 3), nbtype)  # t = G g
        for j in range(3):
            g0, g1, g2 = w[k, c, 0, j], w[k, c, 1, j], w[k, c, 2, j]
            t[0, j] = g0
            t[1, j] = half * (g0 + g1 + g2)
            t[2, j] = half * (g0 - g1 + g2)
            t[3, j] = g2
        for i in range(4):  # u = t G^T
            g0, g1, g2 = t[i, 0], t[i, 1], t[i, 2]
            u[k, c, 4 * i + 0] = g0
            u[k, c, 4 * i + 1] = half * (g0 + g1 + g2)
            u[k, c, 4 * i + 2] = half * (g0 - g1 + g2)
            u[k, c, 4 * i + 3] = g2

    @runtime.jit
    def tiles(x, u, bias, y, ph, pw, has_bias):
        """y[n, k, 2*th:2*th+2, 2*tw:2*tw+2] for one (n, k, th, tw) per thread."""
        idx = cuda.grid(1)
        n_, k_, p_, q_ = y.shape
        tiles_h, tiles_w = (p_ + 1) // 2, (q_ + 1) // 2
        if idx >= n_ * k_ * tiles_h * tiles_w:
            return
        tw = idx % tiles_w
        rest = idx // tiles_w
        th = rest % tiles_h
        rest = rest // tiles_h
        k = rest % k_
        n = rest // k_
        h0, w0 = 2 * th - ph, 2 * tw - pw
        m = cuda.local.array(16, nbtype)
        d = cuda.local.array((4, 4), nbtype)
        for i in range(16):
            m[i] = zero
        for c in range(x.shape[1]):
            for i in range(4):  # the 4x4 input tile, zero in the padding
                for j in range(4):
                    h, w = h0 + i, w0 + j
                    inside = 0 <= h < x.shape[2] and 0 <= w < x.shape[3]
                    d[i, j] = x[n, c, h, w] if inside else zero
            for j in range(4):  # rows: d <- B^T d
                d0, d1, d2, d3 = d[0, j], d[1, j], d[2, j], d[3, j]
                d[0, j], d[1, j], d[2, j], d[3, j] = d0 - d2, d1 + d2, d2 - d1, d1 - d3
            for i in range(4):  # columns: V = (B^T d) B, multiplied into M
                d0, d1, d2, d3 = d[i, 0], d[i, 1], d[i, 2], d[i, 3]
                m[4 * i + 0] += u[k, c, 4 * i + 0] * (d0 - d2)
                m[4 * i + 1] += u[k, c, 4 * i + 1] * (d1 + d2)
                m[4 * i + 2] += u[k, c, 4 * i + 2] * (d2 - d1)
                m[4 * i + 3] += u[k, c, 4 * i + 3] * (d1 - d3)
        b = bias[k] if has_bias else zero
        t0 = cuda.local.array(4, nbtype)  # Y = A^T M A: the two rows of A^T M, then columns
        t1 = cuda.local.array(4, nbtype)
        for j in range(4):
            t0[j] = m[j] + m[4 + j] + m[8 + j]
            t1[j] = m[4 + j] - m[8 + j] - m[12 + j]
        for i in range(2):
            h = 2 * th + i
            if h < p_:
                row = t0 if i == 0 else t1
                y[n, k, h, 2 * tw] = row[0] + row[1] + row[2] + b
                if 2 * tw + 1 < q_:
                    y[n, k, h, 2 * tw + 1] = row[1] - row[2] - row[3] + b

    return filter_transform, tiles

# %% [markdown]
# ## The plugin
# A subclass of `convlab.Algorithm` answers the registry's questions:
# - `name`, `ops` (here forward only), `dtypes` (default float32 and float64), `priority` (wins when
#   nothing was timed: above `direct`'s 0, below the GEMM plugins), `deterministic`, `description`;
# - `check(problem, target)`: may I run it? If not, a one-line reason (the op, dtype and workspace conditions are
#   checked by the base class);
# - `configs(problem, target)`: tunable variants, preferred first (here the block size), which the
#   autotuner times; `target` (a `convlab.Target`: SMs, shared memory, `target.simulator`) is the machine
#   they are meant for, so the configs of any GPU can be listed without one;
# - `workspace_bytes(...)`: the scratch memory `run` allocates (the transformed filters);
# - `sample_problems(op)`: problems it accepts, for the conformance suite (random draws rarely hit a
#   3x3 stride-1 problem);
# - `run(problem, config, a, b, bias, out, workspace_limit=...)`: write every element of `out`.

# %%
class WinogradF2x3(Algorithm):
    """Winograd F(2x2, 3x3) forward: 2.25x fewer multiplies than direct for 3x3 stride-1 filters."""

    name = "notebook_winograd"
    ops = frozenset({"forward"})
    priority = 5
    description = "Winograd F(2x2,3x3) forward; 3x3 filters, stride 1, dilation 1, groups 1"

    def check(self, problem: Problem, target: Target) -> Verdict:
        if (problem.r, problem.s) != (3, 3):
            return Verdict.no(f"needs a 3x3 filter, got {problem.r}x{problem.s}")
        if problem.stride != (1, 1):
            return Verdict.no(f"needs stride 1, got {problem.stride}")
        if problem.dilation != (1, 1):
            return Verdict.no(f"needs dilation 1, got {problem.dilation}")
        if problem.groups != 1:
            return Verdict.no(f"needs groups 1, got {problem.groups}")
        return Verdict.yes()

    def configs(self, problem: Problem, target: Target) -> list[Config]:
        return [Config(threads=128), Config(threads=64)]

    def workspace_bytes(self, problem: Problem, config: Config, workspace_limit: int, target: Target) -> int:
        return problem.k * problem.c * 16 * problem.itemsize  # U, the transformed filters

    def sample_problems(self, op: str) -> list[Problem]:
        make = convlab.make_problem
        return [make(op, 1, 3, 6, 6, 4, 3, 3, padding=1, bias=True),
                make(op, 2, 2, 5, 7, 3, 3, 3),  # odd output sizes: partial tiles
                make(op, 1, 4, 4, 4, 2, 3, 3, padding=(2, 0), dtype="float64")]

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        filter_transform, tiles = winograd_kernels(problem.dtype)
        threads = config["threads"]
        u = runtime.empty((problem.k, problem.c, 16), problem.dtype)
        filter_transform[math.ceil(problem.k * problem.c / threads), threads](b, u)
        has_bias = bias is not None
        if not has_bias:  # kernels take a real array: a 1-element dummy stands in
            bias = runtime.empty((1,), problem.dtype)
        count = problem.n * problem.k * ((problem.p + 1) // 2) * ((problem.q + 1) // 2)
        tiles[math.ceil(count / threads), threads](a, u, bias, out, *problem.padding, has_bias)

# %% [markdown]
# ## Register it
# `convlab.register` (also usable as a class decorator) instantiates the class and adds it to the
# registry; `replace=True` lets this cell run again (a name is registered once, else ValueError).
# From now on `conv2d(..., algorithm="notebook_winograd")` forces it, and `algorithm="auto"` considers it. In a repository checkout the same class would go into `algorithms/winograd.py` with
# `@register`; a separate package would declare it under the `convlab.algorithms` entry-point group.

# %%
convlab.register(WinogradF2x3, replace=True)
for plugin in convlab.plugins("forward"):
    print(f"{plugin.name:<18} priority {plugin.priority:>3}  {plugin.description}")

# %% [markdown]
# ## The predicate, with reasons
# On a 3x3 stride-1 problem it is eligible; on a strided one it declines and says why, and forcing it
# there raises a ValueError quoting the reason, before anything is launched.

# %%
small = convlab.make_problem("forward", 1, 4, 6, 6, 4, 3, 3, padding=1, bias=True)
print(convlab.explain(small))
strided = convlab.make_problem("forward", 1, 4, 6, 6, 4, 3, 3, stride=2, padding=1)
print(convlab.explain(strided, algorithm="direct"))
x, w, bias = measure.random_operands(strided)
try:
    convlab.conv2d(x, w, bias, stride=2, padding=1, algorithm="notebook_winograd")
except ValueError as exc:
    print("ValueError:", exc)

# %% [markdown]
# ## A first check by hand
# Forced on the small problem, compared with the float64 reference.

# %%
x, w, bias = measure.random_operands(small)
y = convlab.conv2d(x, w, bias, padding=1, algorithm="notebook_winograd")
err = measure.rel_error(y, reference.solve(small, x, w, bias))
print(f"relative error {err:.2e}, tolerance {measure.tolerance(small, np.finfo(np.float32).eps):.1e}")

# %% [markdown]
# ## The conformance suite
# `convlab.testing.check_plugin` runs every property check on hypothesis-drawn problems (random ones
# with every option, GEMM-aligned ones, and the plugin's `sample_problems`): agreement with the reference
# for every config, every output element written (the output is poisoned with NaN), inputs unmodified,
# identical bits on two runs, one-line reasons, and no launch when declined. Outside pytest, load a
# hypothesis profile first (`convlab-sim` keeps the examples few on the simulator). In the repository's
# test suite, `tests/plugin/test_conformance.py` does this for every registered plugin with no new test code.

# %%
settings.load_profile(convlab.testing.DEFAULT_PROFILE)
start = time.perf_counter()
report = convlab.testing.check_plugin("notebook_winograd")
for check, status in report.items():
    print(f"{check:<44} {status}")
print(f"all {len(report)} checks passed in {time.perf_counter() - start:.1f} s")

# %% [markdown]
# The suite does catch mistakes. A variant that forgets the bias fails `check_matches_reference`, with
# the plugin, config and problem in the message:

# %%
class ForgetsBias(WinogradF2x3):
    name = "notebook_winograd_forgets_bias"

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        super().run(problem, config, a, b, None, out, workspace_limit=workspace_limit)


convlab.register(ForgetsBias)
try:
    convlab.testing.check_plugin(ForgetsBias.name, checks=["check_matches_reference"], max_examples=10)
    raise RuntimeError("the conformance suite missed a plugin that ignores the bias")
except AssertionError as exc:
    print(str(exc)[:400])
finally:
    convlab.unregister(ForgetsBias.name)

# %% [markdown]
# ## The autotuner considers it
# `autotune.tune` checks every eligible (plugin, config), this one's two block sizes included, against a
# trusted result, times the correct ones and keeps the fastest. On the simulator the notebook hands it a
# wall-clock timer (it has no device timer); on a GPU it uses CUDA events.

# %%
def timer_for(problem):
    """None on a GPU; on the simulator, the wall-clock ms of one run of a candidate."""
    return None if runtime.HAS_DEVICE else measure.wall_clock_timer(problem)


if SIZE == "full":
    tuned_problem = convlab.make_problem("forward", 16, 128, 28, 28, 128, 3, 3, padding=1)
else:
    tuned_problem = small
# mode "exhaustive" times every candidate, so the new plugin is timed however long the others take
with autotune.mode("exhaustive"):
    result = autotune.tune(tuned_problem, timer=timer_for(tuned_problem), force=True)
print(result)
assert any(row.plugin == "notebook_winograd" and row.status == "ok" for row in result.candidates)

# %% [markdown]
# ## Benchmark it against the others
# The harness behind `convlab bench` checks each eligible plugin's first config and times it (and cuDNN
# with PyTorch installed); the table marks the autotuner's pick with `*`.

# %%
SHAPES = {
    "tiny": [{"label": "3x3 p1 c4", "x": [1, 4, 6, 6], "w": [4, 4, 3, 3], "padding": 1},
             {"label": "3x3 p0 c3 7x5", "x": [2, 3, 7, 5], "w": [5, 3, 3, 3]}],
    "full": [  # ResNet-50's 3x3 layers, batch 16
        {"label": "3x3 c64 56x56", "x": [16, 64, 56, 56], "w": [64, 64, 3, 3], "padding": 1},
        {"label": "3x3 c128 28x28", "x": [16, 128, 28, 28], "w": [128, 128, 3, 3], "padding": 1},
        {"label": "3x3 c256 14x14", "x": [16, 256, 14, 14], "w": [256, 256, 3, 3], "padding": 1},
        {"label": "3x3 c512 7x7", "x": [16, 512, 7, 7], "w": [512, 512, 3, 3], "padding": 1},
    ],
}
suite = suite_from_dict({"name": "winograd", "problems": SHAPES[SIZE]}, "notebook 03")
cudnn, why_not = baseline.load()
print("cuDNN baseline:", "yes" if cudnn is not None else f"no ({why_not})")
# simulator_wall_clock: without a device clock, one wall-clock run of each checked candidate stands in
opts = bench.BenchOptions(ops=("forward",), warmup=2, repeat=10, max_seconds=0.5, simulator_wall_clock=True)
results = [bench.bench_problem(suite.name, entry, prob, opts, cudnn)
           for entry, prob in suite.problems(opts.ops)]
print(table(results))
assert all(row.status == "ok" for res in results for row in res.candidates
           if row.plugin == "notebook_winograd")

# %%
fig, ax = plt.subplots(figsize=(1.6 + 1.9 * len(results), 4.2))
time_bars(ax, results, highlight="notebook_winograd", rotation=0)
ax.set_ylabel("simulator wall-clock ms (not GPU speed)" if not runtime.HAS_DEVICE else "median ms of the public op (CUDA events)")
ax.set_title(f"3x3 forward: the new Winograd plugin vs the others, {runtime.device_name()}", fontsize=9)
ax.legend(fontsize=8)
fig.tight_layout()
if FIG_DIR:
    os.makedirs(FIG_DIR, exist_ok=True)
    fig.savefig(os.path.join(FIG_DIR, "03_winograd_vs_others.png"), dpi=120)

# %% [markdown]
# ## From here
# - Move the kernels and the class into `algorithms/winograd.py`, decorate the class with
#   `@convlab.register`, and `tests/plugin/test_conformance.py` tests it on every CI run.
# - `convlab check notebook_winograd`, `convlab bench --suite resnet50 --plugins notebook_winograd,direct`
#   and `convlab tune` work for any registered plugin.
# - Faster: keep `U` across calls, transform input tiles once per (n, c, tile) in shared memory, and turn
#   the 16 channel reductions into batched GEMMs; F(4x4, 3x3) saves more multiplies (4x) at some accuracy.
