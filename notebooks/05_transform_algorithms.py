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
# # Winograd and FFT: fewer multiplies, more rounding
#
# Two plugins trade arithmetic for accuracy. `winograd` computes F(m x m, 3 x 3) tiles with
# (m + 2)^2 multiplies instead of 9 m^2; `fft` turns a correlation into a product of spectra, whose
# cost hardly depends on the filter's size. Both add rounding error in their transforms, which each
# config declares (measured in float64: `tools/transform_accuracy.py`) and which decides what runs under
# float32 precision `"highest"`.
#
# This notebook shows the generated transforms, Winograd's error against its tile size and dtype, the
# FLOPs it saves against the measured time, and FFT's crossover kernel size.
#
# **Size switch.** `CONVLAB_NOTEBOOK_SIZE=tiny` (the default without a GPU) measures errors on small
# problems and runs the kernels on Numba's CUDA simulator; `full` (the default on a GPU) uses larger
# error samples and times ResNet-50's 3x3 layers with CUDA events.

# %%
import glob
import json
import os

import matplotlib.pyplot as plt
import numpy as np

import convlab
from convlab import make_problem, make_problem_nd, measure, reference, runtime
from convlab.kernels.transform import emulate
from convlab.kernels.winograd.toomcook import LAVIN_POINTS, tensor_error, winograd
from convlab.runtime.targets import get as get_target

SIZE = os.environ.get("CONVLAB_NOTEBOOK_SIZE", "tiny" if runtime.target().simulator else "full")
assert SIZE in ("tiny", "full"), f"CONVLAB_NOTEBOOK_SIZE must be 'tiny' or 'full', got {SIZE!r}"
FIG_DIR = os.environ.get("CONVLAB_FIGURE_DIR") or (None if not runtime.HAS_DEVICE else "figures")
print(f"device: {runtime.device_name()}   size: {SIZE}   figures saved to: {FIG_DIR or '(not saved)'}")
WINOGRAD, FFT = convlab.get_plugin("winograd"), convlab.get_plugin("fft")
SM90 = get_target("sm_90")

# %% [markdown]
# ## The transforms, generated
#
# `convlab.kernels.winograd.toomcook` builds A^T, G and B^T of F(m, r) from interpolation points by the
# Toom-Cook construction in exact rational arithmetic: a Vandermonde matrix per factor, its inverse,
# and the transpose that turns a polynomial product into a correlation. `tensor_error` checks the whole
# algorithm exactly: an empty list means every output is the correlation, in rationals.

# %%
t = winograd(2, 3)
for name, matrix in (("A^T", t.AT), ("G", t.G), ("B^T", t.BT)):
    print(f"F(2,3) {name}: " + "; ".join(" ".join(str(v) for v in row) for row in matrix))
print("points of F(6,3):", ", ".join(str(p) for p in winograd(6, 3).points), "and infinity")
print("exact in rational arithmetic:", all(not tensor_error(winograd(m, 3)) for m in (2, 4, 6)))

# %% [markdown]
# ## Winograd's error against tile size and dtype
#
# The relative error of each form's arithmetic (emulated in float32, as the kernels round:
# `convlab.kernels.transform.emulate`) over direct fp32 FMA's, against float64. "fp32" is the SIMT GEMM
# and the fused kernel, "tf32x3" float32 on tensor cores, "f16" / "bf16" a half problem on tensor cores
# (the transformed operands rounded to the half type). Lavin and Gray's integer points are shown for
# comparison: with 0, +-1, +-1/2, +-2 the F(6x6, 3x3) error drops by more than an order of magnitude.

# %%
channels = (4, 32) if SIZE == "tiny" else (4, 32, 128)
rng = np.random.default_rng(0)
ratios = {}
for c in channels:
    x = rng.standard_normal((1, c, 14, 14)).astype(np.float32).astype(np.float64)
    w = rng.standard_normal((8, c, 3, 3)).astype(np.float32).astype(np.float64)
    ref = reference.solve(make_problem("forward", 1, c, 14, 14, 8, 3, 3), x, w, None)
    fma = measure.rel_error(emulate.direct_fma(x, w), ref)
    for m in (2, 4, 6):
        for engine in ("simt", "tf32x3", "f16", "bf16"):
            err = measure.rel_error(emulate.winograd(x, w, winograd(m, 3), winograd(m, 3), engine), ref)
            ratios.setdefault((m, engine), []).append(err / fma)
        lavin = emulate.winograd(x, w, winograd(m, 3, LAVIN_POINTS), winograd(m, 3, LAVIN_POINTS))
        ratios.setdefault((m, "simt, Lavin's points"), []).append(measure.rel_error(lavin, ref) / fma)

fig, ax = plt.subplots(figsize=(7, 4))
for engine in ("simt", "tf32x3", "f16", "bf16", "simt, Lavin's points"):
    ax.plot([2, 4, 6], [max(ratios[m, engine]) for m in (2, 4, 6)], marker="o",
            label=engine.replace("simt", "fp32"))
ax.axhline(10, color="gray", ls="--", lw=1)
ax.text(2.05, 11, "precision 'highest' limit (10x)", color="gray")
ax.set_yscale("log")
ax.set_xticks([2, 4, 6], ["F(2x2,3x3)", "F(4x4,3x3)", "F(6x6,3x3)"])
ax.set_ylabel("error / direct fp32 FMA's (worst over channels)")
ax.legend(fontsize=8)
fig.tight_layout()
if FIG_DIR:
    os.makedirs(FIG_DIR, exist_ok=True)
    fig.savefig(os.path.join(FIG_DIR, "05_winograd_error.png"), dpi=120)
plt.show()
for m in (2, 4, 6):
    declared = WINOGRAD.error_growth(make_problem("forward", 1, 8, 14, 14, 8, 3, 3), convlab.Config(m=m, form="fused"))
    print(f"F({m}x{m},3x3) fp32: measured here {max(ratios[m, 'simt']):.3g}x, declared {declared:g}x")

# %% [markdown]
# The declared growth (a margin above the worst measured over lengths, distributions and seeds) is what
# `explain` prints and what decides the float32 rule: under `"highest"` F(6x6, 3x3) declines.

# %%
problem = make_problem("forward", 1, 8, 12, 12, 8, 3, 3, padding=1)
for config in WINOGRAD.configs(problem, SM90)[:3] + WINOGRAD.configs(problem, SM90)[-1:]:
    verdict = WINOGRAD.applicable(problem, config, target=SM90)
    print(f"{config.name:<32} {WINOGRAD.accuracy_note(problem, config):<62} "
          f"{'runs' if verdict else 'declines: ' + verdict.reason[:60]}")
with convlab.allow_lossy(False):
    print("with convlab.allow_lossy(False):", WINOGRAD.applicable(problem).reason)

# %% [markdown]
# The kernels themselves, checked against float64 (on the simulator: its small problem):

# %%
shape = (1, 4, 8, 8) if SIZE == "tiny" else (8, 64, 56, 56)
problem = make_problem("forward", shape[0], shape[1], shape[2], shape[3], shape[1], 3, 3, padding=1)
host = measure.random_operands(problem, np.random.default_rng(1))
for config in [c for c in WINOGRAD.configs(problem) if WINOGRAD.applicable(problem, c)]:
    out = runtime.empty(problem.operand_shapes[2], problem.dtype)
    WINOGRAD.run(problem, config, *measure.to_device(*host), out, workspace_limit=convlab.get_workspace_limit())
    err = measure.rel_error(runtime.to_host(out), reference.solve(problem, *host))
    print(f"winograd[{config.name}] relative error {err:.3g} "
          f"(tolerance {measure.tolerance(problem, WINOGRAD.error_eps(problem, config)):.3g})")

# %% [markdown]
# ## FLOPs saved against measured time
#
# The FLOPs each form executes (its declared `cost_features`: transforms and GEMMs, padding included)
# over the dense convolution's, on ResNet-50's 3x3 stride-1 layers. F(4x4, 3x3) multiplies 4x less;
# the transforms take back part of it. The measured times come from `tools/gpu_check.py`'s step
# `transform/resnet50_3x3` (results/bench/), when it has run.

# %%
layers = [(64, 56), (128, 28), (256, 14), (512, 7)]
for c, hw in layers:
    layer = make_problem("forward", 32, c, hw, hw, c, 3, 3, padding=1)
    row = []
    for m in (2, 4, 6):
        feats = WINOGRAD.cost_features(layer, convlab.Config(m=m, form="nonfused", gemm="simt"), SM90, 1 << 30)
        row.append(f"F({m}x{m}) {feats.flops / layer.flops:.2f}")
    print(f"c={c:<4} {hw}x{hw}: executed / dense FLOPs  " + "   ".join(row))
found = sorted(glob.glob("../results/bench/*/*/transform_resnet50_3x3.json") +
               glob.glob("results/bench/*/*/transform_resnet50_3x3.json"))
if found:
    rows = json.load(open(found[-1]))
    print(f"GPU numbers: {found[-1]}")
    print(json.dumps(rows, indent=1)[:2000])
else:
    print("GPU numbers: none yet (tools/gpu_check.py --steps 'transform/*' measures them)")

# %% [markdown]
# ## FFT's crossover kernel size
#
# An FFT convolution's cost grows with the transform size, not with the filter's taps; a dense one's
# grows with the taps. Counted in FLOPs (each plugin's declared `cost_features`), FFT wins at any size
# with 64 channels: its products cost 8 FLOPs a complex multiply-add on about half as many bins as
# outputs. Its transforms and spectra move memory instead, so until GPU numbers exist the model is the
# autotuner's cost model on sm_90 (`convlab.explain(..., target="sm_90").estimates`: FLOPs, bytes,
# launches and occupancy against the fitted ceilings; fft's family starts from its kind's defaults):
# the kernel size from which FFT's estimate beats every other plugin's, for a 1D layer (64 -> 64
# channels, 4096 samples) and a 2D one (64 -> 64, 56x56), batch 8.

# %%
def best_estimates(layer):
    est = convlab.explain(layer, target="sm_90").estimates
    fft = min((ms for label, ms in est.items() if label.startswith("fft[")), default=None)
    other = min(ms for label, ms in est.items() if not label.startswith(("fft[", "winograd[")))
    return fft, other


fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
for ax, kind, sizes in ((axes[0], "1D", (3, 5, 9, 17, 31, 63, 127)), (axes[1], "2D", (3, 5, 7, 9, 13, 17, 25))):
    rows, crossover = [], None
    for k in sizes:
        if kind == "1D":
            layer = make_problem_nd("forward", 8, 64, (4096,), 64, (k,), padding=k // 2).lowered()
        else:
            layer = make_problem("forward", 8, 64, 56, 56, 64, k, k, padding=k // 2)
        fft, other = best_estimates(layer)
        flops = min(FFT.cost_features(layer, c, SM90, 1 << 30).flops for c in FFT.configs(layer, SM90))
        rows.append((k, fft, other, flops / layer.flops))
        if crossover is None and fft is not None and fft < other:
            crossover = k
    ax.loglog([r[0] for r in rows], [r[2] for r in rows], marker="o", label="best other plugin (model)")
    ax.loglog([r[0] for r in rows], [r[1] for r in rows], marker="s", label="fft (model)")
    ax.set_title(f"{kind}: 64 -> 64 channels")
    ax.set_xlabel("kernel size (taps per axis)")
    print(f"{kind}: fft / dense FLOPs " + ", ".join(f"k={k}: {r:.2f}" for k, _, _, r in rows))
    print(f"{kind}: FFT's estimate beats every other plugin's from kernel size {crossover} on (cost model, sm_90)")
axes[0].set_ylabel("estimated ms")
axes[0].legend(fontsize=8)
fig.tight_layout()
if FIG_DIR:
    fig.savefig(os.path.join(FIG_DIR, "05_fft_crossover.png"), dpi=120)
plt.show()

# %% [markdown]
# The model is not a measurement: `transform/large_kernels` in `tools/gpu_check.py` times the kernels
# against the other plugins and cuDNN on such layers. The FFT kernels, checked on a long 1D signal
# (overlap-save: several tiles a row):

# %%
length = 300 if SIZE == "tiny" else 16000
problem = make_problem_nd("forward", 1, 2, (length,), 3, (31,), padding=15).lowered()
host = measure.random_operands(problem, np.random.default_rng(2))
for config in FFT.configs(problem):
    out = runtime.empty(problem.operand_shapes[2], problem.dtype)
    FFT.run(problem, config, *measure.to_device(*host), out, workspace_limit=convlab.get_workspace_limit())
    err = measure.rel_error(runtime.to_host(out), reference.solve(problem, *host))
    print(f"fft[{config.name}] relative error {err:.3g}; {FFT.accuracy_note(problem, config)}")
