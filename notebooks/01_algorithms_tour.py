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
# # A tour of convlab's algorithms
#
# One convolution problem and every registered algorithm plugin: which plugins apply (and why the
# others decline), whether each one agrees with the float64 reference on every op it implements, and
# how fast each one runs across a few shapes, next to cuDNN when PyTorch is installed.
#
# **Size switch.** `CONVLAB_NOTEBOOK_SIZE=tiny` (the default without a GPU, where kernels run on Numba's
# CUDA simulator) uses problems of a few hundred outputs; `full` (the default on a GPU) uses ResNet-50
# layers. On the simulator the "times" are Python wall-clock seconds of simulated kernels: they exercise
# the code, they say nothing about GPU speed.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np

import convlab
from convlab import measure, reference, runtime
from convlab.plugin import registry
from convlab.bench import baseline, harness as bench
from convlab.bench.plot import time_bars
from convlab.bench.report import table
from convlab.bench.suite import suite_from_dict

SIZE = os.environ.get("CONVLAB_NOTEBOOK_SIZE", "tiny" if runtime.target().simulator else "full")
assert SIZE in ("tiny", "full"), f"CONVLAB_NOTEBOOK_SIZE must be 'tiny' or 'full', got {SIZE!r}"
FIG_DIR = os.environ.get("CONVLAB_FIGURE_DIR") or (None if not runtime.HAS_DEVICE else "figures")
print(f"device: {runtime.device_name()}   size: {SIZE}   figures saved to: {FIG_DIR or '(not saved)'}")
print(runtime.versions())

# %% [markdown]
# ## The problem
# A 3x3 convolution with padding 1, the most common layer of image networks. `problem_for` builds the
# canonical `Problem` the ops hand to plugins; its GEMM view is the matrix product an implicit-GEMM or
# im2col algorithm computes.

# %%
if SIZE == "full":  # ResNet-50 conv3_x 3x3 layer, batch 16
    X_SHAPE, W_SHAPE, PADDING = (16, 128, 28, 28), (128, 128, 3, 3), 1
else:  # every GEMM dimension divisible by 16, so that the GEMM-based plugins apply too
    X_SHAPE, W_SHAPE, PADDING = (1, 16, 4, 4), (16, 16, 3, 3), 1

rng = np.random.default_rng(0)
x = rng.standard_normal(X_SHAPE, dtype=np.float32)
w = rng.standard_normal(W_SHAPE, dtype=np.float32)
problem = convlab.problem_for("conv2d", x, w, padding=PADDING)
print(problem.describe())
print(f"GEMM view (M, N, K): {problem.gemm_shape()}   {problem.flops / 1e9:.3g} GFLOP")

# %% [markdown]
# ## The plugins
# Built-in plugins live in `algorithms/` (installed as `convlab.algorithms`); other packages add theirs
# through the `convlab.algorithms` entry-point group. Without timings, the highest priority wins.

# %%
for plugin in convlab.plugins():
    kind = "deterministic" if plugin.deterministic else "non-deterministic"
    print(f"{plugin.name:<16} priority {plugin.priority:>3}  ops {','.join(sorted(plugin.ops)):<21} "
          f"{kind:<17} {plugin.description}")
print("plugins that failed to load:", convlab.load_errors() or "none")

# %% [markdown]
# `convlab.explain` answers, for one call, which plugins apply, why the others do not, and what
# `algorithm="auto"` picks (on a GPU the autotuner times the candidates first; on the simulator it goes
# by priority).

# %%
print(convlab.explain(x, w, padding=PADDING))

# %% [markdown]
# ## Correctness: every plugin, every op it implements
# The same geometry as three problems: forward (`conv2d`), backward-data (`conv2d_backward_data`) and
# backward-weight (`conv2d_backward_weight`). Each plugin is forced with `algorithm=name` and compared with
# the float64 reference by relative norm error, against a tolerance that grows with the square root of
# the reduction length.

# %%
def run_op(op, a, b, algorithm):
    """The public op that computes ``op`` for this geometry, on numpy operands."""
    if op == "forward":
        return convlab.conv2d(a, b, padding=PADDING, algorithm=algorithm)
    if op == "dgrad":
        return convlab.conv2d_backward_data(a, b, X_SHAPE, padding=PADDING, algorithm=algorithm)
    return convlab.conv2d_backward_weight(a, b, W_SHAPE, padding=PADDING, algorithm=algorithm)


checked = []
for op in ("forward", "dgrad", "wgrad"):
    prob = problem.replace(op=op)
    a, b, _ = measure.random_operands(prob, rng)
    want = reference.solve(prob, a, b)
    for plugin in convlab.plugins(op):
        verdict = registry.verdict(plugin, prob)
        if not verdict:
            print(f"{op:<8} {plugin.name:<16} declines: {verdict.reason}")
            continue
        err = measure.rel_error(run_op(op, a, b, plugin.name), want)
        tol = measure.tolerance(prob, plugin.compute_eps(prob.dtype))
        checked.append((op, plugin.name, err <= tol))
        print(f"{op:<8} {plugin.name:<16} relative error {err:.2e}  (tolerance {tol:.1e})  "
              f"{'ok' if err <= tol else 'WRONG'}")
assert checked and all(ok for *_, ok in checked), "a plugin disagrees with the reference"

# %% [markdown]
# ## Time by plugin across a few shapes
# The benchmark harness (`convlab.bench`, also behind `convlab bench`) checks every eligible plugin on
# fresh random operands and times the correct ones with CUDA events (median of repeated runs), and runs
# cuDNN through PyTorch when it is installed. The simulator has no device timer, so there the notebook
# adds the wall-clock time of one simulated run.

# %%
SHAPES = {
    "tiny": [  # the 3x3 problem above ran every plugin already; a 1x1 layer and a strided one
        {"label": "1x1 c16", "x": [1, 16, 4, 4], "w": [16, 16, 1, 1]},
        {"label": "3x3 s2 p1 c3", "x": [1, 3, 7, 7], "w": [8, 3, 3, 3], "stride": 2, "padding": 1},
    ],
    "full": [  # ResNet-50 layers, batch 16
        {"label": "stem 7x7 s2", "x": [16, 3, 224, 224], "w": [64, 3, 7, 7], "stride": 2, "padding": 3},
        {"label": "3x3 c64 56x56", "x": [16, 64, 56, 56], "w": [64, 64, 3, 3], "padding": 1},
        {"label": "3x3 c128 28x28", "x": [16, 128, 28, 28], "w": [128, 128, 3, 3], "padding": 1},
        {"label": "3x3 c256 14x14", "x": [16, 256, 14, 14], "w": [256, 256, 3, 3], "padding": 1},
        {"label": "1x1 c256>64 56x56", "x": [16, 256, 56, 56], "w": [64, 256, 1, 1]},
    ],
}
suite = suite_from_dict({"name": "tour", "problems": SHAPES[SIZE]}, "notebook 01")
cudnn, why_not = baseline.load()
print("cuDNN baseline:", "yes" if cudnn is not None else f"no ({why_not})")
# simulator_wall_clock: without a device clock, one wall-clock run of each checked candidate stands in
opts = bench.BenchOptions(ops=("forward",), warmup=2, repeat=10, max_seconds=0.5, simulator_wall_clock=True)
results = [bench.bench_problem(suite.name, entry, prob, opts, cudnn)
           for entry, prob in suite.problems(opts.ops)]
print(table(results))

# %%
fig, ax = plt.subplots(figsize=(1.6 + 1.9 * len(results), 4.2))
time_bars(ax, results)
ax.set_ylabel("simulator wall-clock ms (not GPU speed)" if not runtime.HAS_DEVICE else "median ms of the public op (CUDA events)")
ax.set_title(f"forward time by plugin, {runtime.device_name()} (lower is better)")
fig.tight_layout()
if FIG_DIR:
    os.makedirs(FIG_DIR, exist_ok=True)
    fig.savefig(os.path.join(FIG_DIR, "01_time_by_plugin.png"), dpi=120)

# %% [markdown]
# ## The precision dimension: time per dtype per plugin
# The first shape above in float32 (exact), float32 under `convlab.set_float32_precision("high")` (TF32
# tensor cores allowed: the `tensor_core` plugin applies, and cuDNN runs with TF32 too), float16 and
# bfloat16 (fp32 accumulation, outputs in the input type). Each plugin takes the dtypes it declares;
# `widen` runs half precision on the float32 kernels; cuDNN runs in the same dtype and math mode.

# %%
import dataclasses

PRECISIONS = [("float32", "highest"), ("float32", "high"), ("float16", "highest"), ("bfloat16", "highest")]
entry, base = next(iter(suite.problems(("forward",))))
no_auto = dataclasses.replace(opts, auto=False)
by_dtype = []
for dtype, precision in PRECISIONS:
    with convlab.float32_precision(precision):
        res = bench.bench_problem(suite.name, entry, base.replace(dtype=dtype), no_auto, cudnn)
    res.label = "tf32" if precision == "high" else dtype
    by_dtype.append(res)
print(table(by_dtype))
assert all(c.status == "ok" for res in by_dtype for c in res.candidates), "a candidate failed its check"

fig, ax = plt.subplots(figsize=(9, 4.2))
time_bars(ax, by_dtype, rotation=0)
ax.set_ylabel("simulator wall-clock ms (not GPU speed)" if not runtime.HAS_DEVICE else "median ms of the public op (CUDA events)")
ax.set_title(f"{entry.label} forward by dtype and plugin, {runtime.device_name()} (lower is better)")
fig.tight_layout()
if FIG_DIR:
    fig.savefig(os.path.join(FIG_DIR, "01_time_by_precision.png"), dpi=120)

# %% [markdown]
# ## Next
# - `02_autotuner`: what `algorithm="auto"` picks across a sweep of shapes, and its cache.
# - `03_add_a_plugin`: write a new algorithm (Winograd F(2x2, 3x3)) in a notebook, register it, run the
#   conformance suite on it and watch the autotuner consider it.
# - From a shell: `convlab demo`, `convlab bench --suite resnet50`, `convlab plot`.
