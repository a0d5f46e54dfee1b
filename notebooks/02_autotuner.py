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
# # The autotuner behind `algorithm="auto"`
#
# In its default mode, `heuristic`, `algorithm="auto"` runs the cost model's pick for a shape it has not
# seen and times nothing. Tuning, which this notebook is about (mode `tune`, set below, as
# `convlab.tune(...)` does), runs the eligible (plugin, config) candidates the model ranks best once on
# fresh random operands, disqualifies any whose output disagrees with a trusted result, times the rest
# with CUDA events, and stores the fastest in a JSON cache, one file per GPU model. Later calls, in this
# process or the next, answer from the cache without running anything.
#
# This notebook sweeps a grid of shapes and draws a map of the winners, then looks at the cache: the
# entry on disk, cache hits, `convlab.explain`, the key policy that lets nearby shapes share a tuning,
# deterministic mode and clearing.
#
# **Size switch.** `CONVLAB_NOTEBOOK_SIZE=tiny` (the default without a GPU) tunes problems of a few
# hundred outputs on Numba's CUDA simulator, within a budget of 3 s a shape (the first candidates the
# model ranks; at least one is always timed). The simulator has no device timer, so there the notebook
# hands `tune` a `timer` that measures the wall-clock time of one simulated run: the whole pipeline
# (check, time, cache) runs for real, but the winners say nothing about GPU speed. `full` (the default on
# a GPU) tunes ResNet-like layers with CUDA events.

# %%
import json
import os
import tempfile
import time

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap

import convlab
from convlab import autotune, measure, runtime
from convlab.bench.plot import plugin_color

SIZE = os.environ.get("CONVLAB_NOTEBOOK_SIZE", "tiny" if runtime.target().simulator else "full")
assert SIZE in ("tiny", "full"), f"CONVLAB_NOTEBOOK_SIZE must be 'tiny' or 'full', got {SIZE!r}"
FIG_DIR = os.environ.get("CONVLAB_FIGURE_DIR") or (None if not runtime.HAS_DEVICE else "figures")

# A private cache folder, so that this notebook neither reads nor clears your real tuning cache.
os.environ["CONVLAB_CACHE_DIR"] = tempfile.mkdtemp(prefix="convlab-notebook-cache-")
autotune.set_key_policy("exact")
autotune.set_deterministic(False)
autotune.set_mode("tune")  # the default, "heuristic", times nothing
if SIZE == "tiny":  # seconds of checking and timing a shape (the default, 20 s, suits a GPU)
    autotune.set_budget(3)
print(f"device: {runtime.device_name()}   size: {SIZE}   figures saved to: {FIG_DIR or '(not saved)'}")
print("cache file:", autotune.cache_path())

# %% [markdown]
# ## Timing
# On a GPU, `tune` times with CUDA events itself (`timer=None`). On the simulator it would not run
# anything and fall back to the highest declared priority, so the notebook passes a wall-clock timer.

# %%
def timer_for(problem):
    """None on a GPU; on the simulator, a timer giving the wall-clock ms of one run of a candidate."""
    return None if runtime.HAS_DEVICE else measure.wall_clock_timer(problem)


def tune(problem, **kw):
    return autotune.tune(problem, timer=timer_for(problem), **kw)

# %% [markdown]
# ## A map of winners
# A sweep of forward convolutions: channels (C = K) on one axis, a second size on the other. Each cell is
# one `tune` call; its colour is the winning plugin, its text the winning config and median time.

# %%
if SIZE == "full":  # batch 8, 3x3 padding 1: channels x spatial size
    ROWS, COLS, ROW_NAME, COL_NAME = [32, 64, 128, 256], [7, 14, 28, 56], "channels C = K", "H = W"

    def sweep_problem(channels, size):
        return convlab.make_problem("forward", 8, channels, size, size, channels, 3, 3, padding=1)
else:  # batch 1, 4x4 images: channels x filter size (few, tiny problems: the simulator is slow)
    ROWS, COLS, ROW_NAME, COL_NAME = [8, 16], [1, 3], "channels C = K", "filter R = S"

    def sweep_problem(channels, size):
        return convlab.make_problem("forward", 1, channels, 4, 4, channels, size, size,
                                    padding=size // 2)

start = time.perf_counter()
grid = {(r, c): tune(sweep_problem(r, c)) for r in ROWS for c in COLS}
print(f"tuned {len(grid)} problems in {time.perf_counter() - start:.1f} s")
for (r, c), result in grid.items():
    medians = ", ".join(f"{row.label} {row.median_ms:.3g}" for row in result.candidates
                        if row.median_ms is not None)
    print(f"{ROW_NAME} {r:>4}, {COL_NAME} {c:>3}: {result.winner_label:<44} [{medians}]")

# %%
plugins = sorted({result.winner.plugin.name for result in grid.values()})
colour = {name: i for i, name in enumerate(plugins)}
cells = np.array([[colour[grid[r, c].winner.plugin.name] for c in COLS] for r in ROWS])
fig, ax = plt.subplots(figsize=(2.2 + 2.4 * len(COLS), 1.4 + 1.0 * len(ROWS)))
cmap = ListedColormap([plugin_color(name) for name in plugins])  # the colours of every convlab chart
ax.imshow(cells, cmap=cmap, vmin=-0.5, vmax=len(plugins) - 0.5, aspect="auto")
for i, r in enumerate(ROWS):
    for j, c in enumerate(COLS):
        result = grid[r, c]
        best = min(row.median_ms for row in result.candidates if row.median_ms is not None)
        ax.text(j, i, f"{result.winner.plugin.name}\n{result.winner.config.name}\n{best:.3g} ms",
                ha="center", va="center", fontsize=7, color="white")
ax.set_xticks(range(len(COLS)), [str(c) for c in COLS])
ax.set_yticks(range(len(ROWS)), [str(r) for r in ROWS])
ax.set_xlabel(COL_NAME)
ax.set_ylabel(ROW_NAME)
what = "simulator wall-clock, not GPU speed" if not runtime.HAS_DEVICE else "CUDA-event medians"
ax.set_title(f"autotuner winners, forward, {runtime.device_name()} ({what})", fontsize=9)
fig.tight_layout()
if FIG_DIR:
    os.makedirs(FIG_DIR, exist_ok=True)
    fig.savefig(os.path.join(FIG_DIR, "02_winner_map.png"), dpi=120)

# %% [markdown]
# ## One tuning in detail
# Every candidate's median and check, the winner, and where the answer came from (`tuned` here).

# %%
problem = sweep_problem(ROWS[-1], COLS[-1])
print(grid[ROWS[-1], COLS[-1]])

# %% [markdown]
# ## The cache
# The winner went to a JSON file keyed by the problem (every size, stride, padding, ..., whether each GEMM
# dimension is divisible by 16, the key policy and the deterministic mode). An entry also records the
# convlab version and a fingerprint of each plugin's source and configs: editing a kernel invalidates it.

# %%
entries = json.loads(autotune.cache_path().read_text())["entries"]
result = grid[ROWS[-1], COLS[-1]]
entry = entries[result.key]
print(f"{len(entries)} entries in {autotune.cache_path().name}; key of this problem:\n  {result.key}")
print(json.dumps({k: entry[k] for k in ("winner", "version", "candidates", "checked_against", "device")},
                 indent=1))

# %% [markdown]
# Asking again answers from the cache: nothing runs, nothing is timed. `algorithm="auto"` and
# `convlab.explain` use the same answer.

# %%
again = tune(problem)
print(f"source: {again.source}, winner {again.winner_label}, answered in {again.tuning_s * 1e3:.2f} ms")
assert again.source == "cache" and again.winner_label == result.winner_label, again.notes
x, w, _ = measure.random_operands(problem)
print(convlab.explain(x, w, padding=problem.padding))
print("counters:", autotune.stats())

# %% [markdown]
# ## Key policy: let nearby shapes share one tuning
# With `set_key_policy("pow2")` the batch and spatial sizes are rounded up to powers of two in the key,
# so a shape close to one already tuned is answered from the cache instead of being tuned again.

# %%
if SIZE == "full":
    first, neighbour = (convlab.make_problem("forward", 8, 64, s, s, 64, 3, 3, padding=1) for s in (56, 52))
else:
    first, neighbour = (convlab.make_problem("forward", 1, 8, s, s, 8, 3, 3, padding=1) for s in (6, 7))
previous = autotune.set_key_policy("pow2")
tuned = tune(first)
shared = tune(neighbour)
autotune.set_key_policy(previous)
print(f"{first.describe()}: {tuned.source}\n{neighbour.describe()}: {shared.source}\n"
      f"both under key {shared.key}")
assert shared.source == "cache" and shared.key == tuned.key

# %% [markdown]
# ## Deterministic mode
# Plugins declaring `deterministic = False` (for example ones summing with atomics) are left out after
# `set_deterministic(True)`; such choices are cached under their own keys.

# %%
for plugin in convlab.plugins(problem.op):
    print(f"{plugin.name:<16} deterministic = {plugin.deterministic}")
autotune.set_deterministic(True)
det = tune(first)
autotune.set_deterministic(False)
print(f"deterministic mode: {det.winner_label} ({det.source}), key ends with '{det.key.rsplit('|', 1)[1]}'")
assert all(convlab.get_plugin(row.plugin).deterministic for row in det.candidates)

# %% [markdown]
# ## Clearing
# `clear_cache()` forgets the results in memory and deletes this GPU's file; the next call tunes again.
# `autotune.pretune(problems)` and `convlab tune --suite resnet50` fill the cache ahead of time.

# %%
autotune.clear_cache()
print("file exists after clear_cache():", autotune.cache_path().exists())
fresh = tune(sweep_problem(ROWS[0], COLS[0]))
print(f"after clearing: {fresh.winner_label} ({fresh.source})")
assert fresh.source == "tuned"
