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
# # Training a CNN with convlab's kernels
#
# `convlab.torch` makes convlab a drop-in for PyTorch's convolutions: `convlab.torch.convert(model)`
# swaps every `nn.Conv2d` and `nn.ConvTranspose2d` of a model for convlab's modules (subclasses of
# torch's, sharing the same parameters), whose forward runs convlab's `conv2d` / `conv_transpose2d` and
# whose backward runs convlab's dgrad and wgrad kernels through autograd. `convlab.torch.revert(model)`
# undoes it. This notebook trains one small network both ways, from the same seed, and overlays the
# loss curves: torch's own convolutions (cuDNN on a GPU; without one, PyTorch's CPU kernels, labelled
# "torch CPU") and convlab's. Both sides compute in exact float32 but sum in different orders, so the
# curves of a seed start identical and drift apart only by accumulated rounding; the final loss and
# accuracy of convlab should fall inside the spread cuDNN shows across seeds.
#
# The code lives in `convlab.examples` (`shapes`: the dataset; `train_cnn`: network, training loop and
# the command line `python -m convlab.examples.train_cnn`; `training_report`: summary and figure).
#
# **Size switch.** `CONVLAB_NOTEBOOK_SIZE=tiny` (the default without a GPU) runs convlab's kernels on
# Numba's CUDA simulator (CPU tensors), seconds per training step, beside PyTorch's CPU convolutions
# ("torch CPU": there is no cuDNN without a GPU). In the few steps the simulator allows, the network
# learns what it can: one batch of four 8x8 images (width 2, one seed), trained on 4 times with a large
# learning rate, whose loss falls by about half, step for step alike on both sides, which shows
# convlab's gradients train it. It cannot learn to generalise there: that takes hundreds of steps over
# thousands of images, so the held-out accuracy at this size (four images) is chance. `full` (the default
# on a GPU) does: 32x32 images, batch 128, 300 steps, 3 seeds, on CUDA tensors, with TF32 off for cuDNN
# and convlab's float32 precision at "highest" (about 90% held-out accuracy).

# %%
import os

import matplotlib.pyplot as plt
import numpy as np
import torch

import convlab
import convlab.torch
from convlab import runtime
from convlab.examples.shapes import CLASS_NAMES, make_shapes
from convlab.examples.train_cnn import TrainConfig, build, compare, default_device, device_description
from convlab.examples.training_report import plot_losses, summarize, summary_text

SIZE = os.environ.get("CONVLAB_NOTEBOOK_SIZE", "tiny" if runtime.target().simulator else "full")
assert SIZE in ("tiny", "full"), f"CONVLAB_NOTEBOOK_SIZE must be 'tiny' or 'full', got {SIZE!r}"
FIG_DIR = os.environ.get("CONVLAB_FIGURE_DIR") or (None if not runtime.HAS_DEVICE else "figures")
DEVICE = default_device()
# tiny: one batch of 4 images learnt in 4 steps (the training cell prints its first and last loss)
CONFIG = TrainConfig.tiny(steps=4, width=2, n_train=4, lr=0.15) if SIZE == "tiny" else TrainConfig()
SEEDS = [0] if SIZE == "tiny" else [0, 1, 2]
print(f"device: {device_description(DEVICE)}   size: {SIZE}   figures saved to: {FIG_DIR or '(not saved)'}")
print(f"torch {torch.__version__}, convlab {convlab.__version__}, float32 precision "
      f"{convlab.get_float32_precision()!r}")
print(CONFIG)

# %% [markdown]
# ## The data: shapes drawn with numpy
# Ten classes (disk, square, triangle, plus, diagonal cross, ring, frame, and stripes in three
# directions) at a random centre, size and intensity, under Gaussian noise. `make_shapes(n, size, seed)`
# is deterministic and balanced, so no download is needed and every run sees the same images. Below:
# one example per class, without noise (top) and with the training noise (bottom).

# %%
fig, axes = plt.subplots(2, 10, figsize=(12, 2.9))
for row, noise in enumerate((0.0, CONFIG.noise)):
    images, labels = make_shapes(100, size=CONFIG.size, seed=5, noise=noise)
    for k, ax in enumerate(axes[row]):
        ax.imshow(images[np.argmax(labels == k), 0], cmap="gray", vmin=-0.5, vmax=1.5)
        ax.set_xticks([]), ax.set_yticks([])
        if row == 0:
            ax.set_title(CLASS_NAMES[k], fontsize=7)
fig.tight_layout()

# %% [markdown]
# ## The network and the drop-in
# `ShapesNet` has the convolutions a real network has: a 3x3 stem, stride-2 downsampling, a grouped
# 3x3 conv (groups=4), a 4x4 stride-2 transposed conv that upsamples back and joins a skip connection,
# a 1x1 conv with bias, BatchNorm and ReLU, then a global mean pool and a linear head.
# `convert` replaces the convolution modules in place; parameters, `state_dict` keys and the output
# stay the same (up to float32 rounding: the kernels sum in a different order).

# %%
model = build("cudnn", 0, CONFIG, DEVICE).eval()
x = torch.from_numpy(make_shapes(CONFIG.batch, size=CONFIG.size, seed=9)[0]).to(DEVICE)
keys, weight = list(model.state_dict()), model.grouped[0].weight
with torch.no_grad():
    want = model(x)
    convlab.torch.convert(model)
    got = model(x)
print(model)
print("same parameters after convert:", model.grouped[0].weight is weight,
      "  same state_dict keys:", list(model.state_dict()) == keys)
print(f"logits, convlab vs torch: max abs difference {(got - want).abs().max().item():.2e} "
      f"(logits up to {want.abs().max().item():.2f})")
convlab.torch.revert(model)
print("after revert:", type(model.grouped[0]).__module__ + "." + type(model.grouped[0]).__name__)

# %% [markdown]
# ## Training both ways
# `compare(seeds, config)` calls `train(backend, seed)` for each seed, first with torch's convolutions
# (`"cudnn"`), then converted (`"convlab"`). Both build the network under `torch.manual_seed(seed)` and
# draw the batches in the same seed-fixed order, so each pair starts from identical weights and sees
# identical batches. Adam with a cosine learning rate; step time is the synchronised wall clock of
# forward, backward and optimizer step. The first step is timed apart: there convlab compiles the cost
# model's pick for each new shape (the default tuning mode, `heuristic`, times nothing;
# `convlab.torch.tune(model, inputs)` would check and time candidates) and cuDNN benchmarks its algorithms.

# %%
runs = compare(SEEDS, CONFIG, DEVICE)
summary = summarize(runs)
print()
print(summary_text(summary))
for run in runs:
    first, last = run["losses"][0], run["losses"][-1]
    print(f"{summary['backends'][run['backend']]['label']:<9} seed {run['seed']}: training loss "
          f"{first:.3f} -> {last:.3f} over {len(run['losses'])} steps")

# %% [markdown]
# ## Loss curves, overlaid
# One light line per seed and the mean over seeds in bold; torch's convolutions solid, convlab dashed. The legend gives
# the held-out accuracy (mean and range over seeds) and the median time per training step.

# %%
fig, ax = plt.subplots(figsize=(8, 4.8))
plot_losses(ax, runs, summary, title=f"ShapesNet on {device_description(DEVICE)}\n{CONFIG.steps} steps, "
            f"batch {CONFIG.batch}, {CONFIG.size}x{CONFIG.size}" + (" (simulator: times mean nothing)"
                                                                      if not runtime.HAS_DEVICE else ""))
fig.tight_layout()
if FIG_DIR:
    os.makedirs(FIG_DIR, exist_ok=True)
    fig.savefig(os.path.join(FIG_DIR, "04_training_loss.png"), dpi=120)

# %% [markdown]
# ## Step time per backend
# Median step time over steps 2..N of each seed, and the first step (compile and tune included).

# %%
print(f"{'backend':<9} {'seed':>4} {'step ms':>9} {'first step s':>13} {'final loss':>11} {'accuracy':>9}")
for run in runs:
    print(f"{summary['backends'][run['backend']]['label']:<9} {run['seed']:>4} {run['step_ms_median']:9.2f} {run['first_step_s']:13.2f} "
          f"{run['final_loss']:11.4f} {run['test_accuracy']:9.3f}")
ratio = summary["step_time_ratio_convlab_over_cudnn"]
print(f"step time convlab / {summary['reference']}: {ratio:.2f}x" + ("  (simulator wall clock, not GPU speed)"
                                                                     if not runtime.HAS_DEVICE else ""))

# %% [markdown]
# ## Next
# - The same comparison from a shell, with a results file and the figure:
#   `python -m convlab.examples.train_cnn --seeds 0 1 2 --out training-results/run.json --figure loss.png`
# - `convert(model, algorithm="implicit_gemm")` pins one plugin for every layer instead of the autotuner.
# - `torch.compile(convlab.torch.convert(model))` traces the converted model: convlab's ops are
#   registered as `torch.library` custom ops.
