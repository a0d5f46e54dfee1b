"""Summaries and the loss-curve figure of ``train_cnn`` runs (lists of the dicts ``train`` returns).

``summarize(runs)`` gives, per backend, the mean and seed range (min, max) of the final training loss,
the held-out loss and accuracy, the median step time across seeds and the slowest first step; and the
comparison the training example exists for: whether convlab's mean final loss and mean accuracy lie
inside the range cuDNN shows across its own seeds (None with one seed), and the step-time ratio convlab / cuDNN.
``summary_text`` prints it; ``plot_losses(ax, runs)`` overlays the loss curves (one light line per seed,
the mean over seeds bold; cuDNN solid, convlab dashed) with accuracy and step time in the legend.
Torch's own convolution is labelled by where it ran (:func:`label`: cuDNN on a GPU, "torch CPU" on
the CPU).
``write_report`` is what ``python -m convlab.examples.train_cnn`` ends with: the summary printed, the
results JSON and the figure written.
"""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

LABELS = {"cudnn": "cuDNN", "convlab": "convlab"}
COLORS = {"cudnn": "black", "convlab": "tab:orange"}
STYLES = {"cudnn": "-", "convlab": "--"}


def label(backend: str, device: str | None = None) -> str:
    """A backend's name in tables and legends: torch's own convolution (backend "cudnn") is cuDNN on a
    CUDA device and "torch CPU" on the CPU, where PyTorch runs its CPU kernels (no cuDNN there)."""
    if backend == "cudnn" and device is not None and not str(device).startswith("cuda"):
        return "torch CPU"
    return LABELS[backend]


def _spread(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-backend statistics over seeds and the convlab-vs-cuDNN comparison (see the module docstring)."""
    out: dict[str, Any] = {"backends": {}}
    for backend in dict.fromkeys(r["backend"] for r in runs):
        mine = [r for r in runs if r["backend"] == backend]
        steps = [r["step_ms_median"] for r in mine if r["step_ms_median"] is not None]
        out["backends"][backend] = {
            "seeds": [r["seed"] for r in mine],
            **{key: _spread([r[key] for r in mine]) for key in ("final_loss", "test_loss", "test_accuracy")},
            "step_ms_median": statistics.median(steps) if steps else None,
            "first_step_s_max": max(r["first_step_s"] for r in mine),
            "label": label(backend, mine[0].get("device"))}
    both = out["backends"]
    if "cudnn" in both and "convlab" in both:
        ref, new = both["cudnn"], both["convlab"]
        out["reference"] = ref["label"]
        for key, name in (("final_loss", "final_loss"), ("test_accuracy", "accuracy")):
            inside = ref[key]["min"] <= new[key]["mean"] <= ref[key]["max"]
            out[f"convlab_{name}_inside_cudnn_range"] = inside if len(ref["seeds"]) > 1 else None
        out["step_time_ratio_convlab_over_cudnn"] = (
            new["step_ms_median"] / ref["step_ms_median"] if new["step_ms_median"] and ref["step_ms_median"]
            else None)
        pairs = [(a, b) for a in runs for b in runs
                 if a["backend"] == "cudnn" and b["backend"] == "convlab" and a["seed"] == b["seed"]]
        out["same_seed_first_loss_abs_diff_max"] = max((abs(a["losses"][0] - b["losses"][0]) for a, b in pairs),
                                                       default=None)
    return out


def _fmt_spread(s: dict[str, float], spec: str) -> str:
    return f"{s['mean']:{spec}} ({s['min']:{spec}}..{s['max']:{spec}})"


def summary_text(summary: dict[str, Any]) -> str:
    """A table of the per-backend statistics and the comparison lines."""
    lines = [f"{'backend':<9} {'final loss, mean (min..max)':<30} {'test accuracy':<26} "
             f"{'step ms':>8} {'first step s':>12}"]
    for backend, s in summary["backends"].items():
        step = f"{s['step_ms_median']:8.2f}" if s["step_ms_median"] is not None else f"{'-':>8}"
        lines.append(f"{s.get('label', LABELS[backend]):<9} {_fmt_spread(s['final_loss'], '.4f'):<30} "
                     f"{_fmt_spread(s['test_accuracy'], '.3f'):<26} {step} {s['first_step_s_max']:12.2f}")
    if "convlab_final_loss_inside_cudnn_range" in summary:
        ref = summary.get("reference", LABELS["cudnn"])
        yes = {True: "yes", False: "NO", None: f"n/a (one {ref} seed: no range)"}
        ratio = summary["step_time_ratio_convlab_over_cudnn"]
        lines += [f"convlab mean final loss inside {ref}'s seed range: "
                  f"{yes[summary['convlab_final_loss_inside_cudnn_range']]}",
                  f"convlab mean accuracy inside {ref}'s seed range:   "
                  f"{yes[summary['convlab_accuracy_inside_cudnn_range']]}",
                  f"same seed, first-step loss |convlab - {ref}| (max over seeds): "
                  f"{summary['same_seed_first_loss_abs_diff_max']:.2e}",
                  f"step time convlab / {ref} (median of seeds' medians, first step excluded): "
                  + (f"{ratio:.2f}x" if ratio is not None else "-")]
    return "\n".join(lines)


def plot_losses(ax: Any, runs: list[dict[str, Any]], summary: dict[str, Any] | None = None,
                title: str | None = None) -> None:
    """Overlay the training-loss curves of ``runs`` on ``ax`` (log y); the legend gives each backend's
    accuracy (mean and seed range) and median step time."""
    import numpy as np

    summary = summary or summarize(runs)
    for backend, s in summary["backends"].items():
        curves = np.array([r["losses"] for r in runs if r["backend"] == backend])
        steps = np.arange(1, curves.shape[1] + 1)
        for curve in curves:
            ax.plot(steps, curve, color=COLORS[backend], ls=STYLES[backend], lw=0.6, alpha=0.25)
        step = f", {s['step_ms_median']:.2f} ms/step" if s["step_ms_median"] is not None else ""
        ax.plot(steps, curves.mean(axis=0), color=COLORS[backend], ls=STYLES[backend], lw=1.8,
                label=f"{s.get('label', LABELS[backend])} (mean of {len(curves)} seeds): accuracy "
                      f"{_fmt_spread(s['test_accuracy'], '.3f')}{step}")
    from convlab.bench.plot import log_ticks

    log_ticks(ax)
    ax.set_xlabel("training step")
    ax.set_ylabel("training loss (cross-entropy, log)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)


def write_report(data: dict[str, Any], runs: list[dict[str, Any]], config: Any, seeds: list[int],
                 out: str | None, figure: str | None) -> int:
    """Print the summary; write the results JSON (``out``) and the loss-curve figure (``figure``) of
    ``train_cnn``'s command line (``config`` its ``TrainConfig``). Returns the exit status, 0."""
    print(summary_text(data["summary"]))
    if out:
        from convlab.runtime.fileio import atomic_write_json

        print(f"results: {atomic_write_json(out, data, indent=1)}")
    if figure:
        from convlab.bench.plot import pyplot

        plt = pyplot()
        fig, ax = plt.subplots(figsize=(8, 4.8))
        plot_losses(ax, runs, data["summary"], title=f"ShapesNet on {data['torch_device']}\n"
                    f"{config.steps} steps, batch {config.batch}, {config.size}x{config.size}, "
                    f"seeds {seeds}, algorithm={config.algorithm!r}")
        fig.tight_layout()
        Path(figure).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(figure, dpi=130)
        print(f"figure: {figure}")
    return 0
