"""Charts from ``convlab bench`` results (matplotlib with the Agg backend, PNG files).

Per suite: ``SUITE-METRIC.png``, bars by plugin (each plugin's best checked config) for every shape, one
panel per op; and ``SUITE-roofline.png``, achieved TFLOP/s against arithmetic intensity
(``Problem.flops / Problem.bytes``, the fewest bytes any algorithm must move) under the ceilings

    attainable TFLOP/s = min(peak_tflops, intensity [FLOP/B] * peak_tbps)

Simulator runs (``convlab bench --simulator-wall-clock``) give one chart per suite,
``SUITE-simulator-time.png``, titled "simulator wall-clock, not GPU speed".

The default ceilings were measured on the benchmark GPU (see shared/gpu/README.md): cuBLAS SGEMM 4096^3 in
fp32 without TF32, and a device-to-device copy (read + write). Override them for another GPU.
Wrong or failing candidates never appear (the harness timed only checked ones).
"""
from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any, Iterable

from .report import user_ms

#: NVIDIA H200, fp32 without TF32: cuBLAS SGEMM 4096^3, measured 50.7 TFLOP/s.
H200_FP32_TFLOPS = 50.7
#: NVIDIA H200, device-to-device copy (read + write), measured 4.24 TB/s.
H200_COPY_TBPS = 4.24

METRICS = {"time": ("median time (ms, log)", "median_ms"),
           "ratio": ("cuDNN time / plugin time (above 1: faster than cuDNN)", "vs_cudnn"),
           "tflops": ("TFLOP/s", "tflops")}
_OPS = ("forward", "dgrad", "wgrad")
_MARKERS = {"forward": "o", "dgrad": "s", "wgrad": "^"}


def by_suite(datas: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Results of several files grouped by suite; a later file replaces the same (suite, shape, op)."""
    merged: dict[str, dict[tuple, dict]] = {}
    for data in datas:
        for res in data["results"]:
            merged.setdefault(res["suite"], {})[(res["label"], res["op"], res["kind"])] = res
    return {suite: list(rows.values()) for suite, rows in merged.items()}


def best_per_plugin(res: dict[str, Any], time: Any = None) -> dict[str, dict[str, Any]]:
    """Each plugin's fastest checked candidate on one problem (cuDNN as plugin 'cudnn'), fastest by
    ``time(row)`` (default: its ``median_ms``)."""
    time = time or (lambda row: row["median_ms"])
    best: dict[str, dict] = {}
    rows = res["candidates"] + ([res["cudnn"]] if res.get("cudnn") else [])
    for row in rows:
        if row["status"] not in ("ok", "unchecked") or not row.get("median_ms"):
            continue
        if row["plugin"] not in best or time(row) < time(best[row["plugin"]]):
            best[row["plugin"]] = row
    return best


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (files, no window)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


_KNOWN = ("direct", "im2col", "col2im", "implicit_gemm")


def plugin_color(plugin: str) -> str:
    """One colour per plugin in every chart (cuDNN black); unknown plugins take later cycle colours."""
    if plugin == "cudnn":
        return "black"
    import matplotlib  # rcParams only: no backend is chosen here (notebooks keep theirs)

    cycle = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    index = _KNOWN.index(plugin) if plugin in _KNOWN else len(_KNOWN) + sum(map(ord, plugin)) % 6
    return cycle[index % len(cycle)]


def log_ticks(ax) -> None:
    """Log y axis labelled 0.05, 0.1, 0.2, 0.5, 1, 2 ... (no crowded minor labels)."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(NullFormatter())


#: The title of charts of simulator runs (``convlab bench --simulator-wall-clock``).
SIMULATOR_TITLE = "simulator wall-clock (ms, log), not GPU speed"


def bar_chart(suite: str, results: list[dict[str, Any]], metric: str, path: Path, *,
              simulator: bool = False) -> Path:
    """One panel per op: for each shape, a bar per plugin. ``simulator``: the times are the simulator's
    wall-clock, and the chart says so."""
    plt = pyplot()
    title, key = METRICS[metric]
    title = SIMULATOR_TITLE if simulator else title
    ops = [op for op in _OPS if any(r["op"] == op for r in results)]
    fig, axes = plt.subplots(len(ops), 1, figsize=(max(8, 0.9 * len(results) / len(ops) + 4), 3.6 * len(ops)),
                             squeeze=False)
    for ax, op in zip(axes[:, 0], ops):
        rows = [r for r in results if r["op"] == op]
        best = [best_per_plugin(r) for r in rows]
        plugins = sorted({p for b in best for p in b if metric != "ratio" or p != "cudnn"},
                         key=lambda p: (p == "cudnn", p))
        width = 0.8 / max(len(plugins), 1)
        for i, plugin in enumerate(plugins):
            values = [b[plugin][key] if plugin in b and b[plugin].get(key) else math.nan for b in best]
            xs = [j + (i - (len(plugins) - 1) / 2) * width for j in range(len(rows))]
            ax.bar(xs, values, width, label=plugin, color=plugin_color(plugin))
        if metric == "ratio":
            ax.axhline(1.0, color="black", lw=1, ls="--")
        if metric in ("time", "ratio"):
            log_ticks(ax)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([("T " if r["kind"] == "conv_transpose2d" and not r["label"].startswith("T ")
                             else "") + r["label"] for r in rows],
                           rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("simulator ms" if simulator else title if len(title) < 20 else metric)
        transposes = all(r["kind"] == "conv_transpose2d" for r in rows)
        ax.set_title(f"{suite}: {'conv_transpose2d (dgrad)' if transposes else op}")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, ncol=min(len(plugins), 6))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def time_bars(ax, results: list[Any], *, highlight: str | None = None, rotation: float = 15) -> None:
    """Draw on ``ax`` one group of bars per shape: each plugin's fastest checked time through the public
    op (:func:`convlab.bench.report.user_ms`; and cuDNN's), log scale. ``results``: ``convlab.bench``
    ProblemResult objects or their JSON dicts; the bars of plugin ``highlight`` are hatched. Notebooks
    use it for their time-by-plugin figures."""
    rows = [r if isinstance(r, dict) else dataclasses.asdict(r) for r in results]
    best = [best_per_plugin(r, time=user_ms) for r in rows]
    names = sorted({p for b in best for p in b}, key=lambda p: (p == "cudnn", p))
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        xs = [j + (i - (len(names) - 1) / 2) * width for j, b in enumerate(best) if name in b]
        ax.bar(xs, [user_ms(b[name]) for b in best if name in b], width, label=name,
               color=plugin_color(name), hatch="//" if name == highlight else None)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["label"] for r in rows], rotation=rotation)
    log_ticks(ax)
    ax.legend(fontsize=8)


def roofline(suite: str, results: list[dict[str, Any]], path: Path, peak_tflops: float,
             peak_tbps: float, device: str = "") -> Path:
    """Achieved TFLOP/s of every plugin's best config against intensity, under the two ceilings."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    points: dict[str, list[tuple[float, float, str]]] = {}
    for res in results:
        intensity = res["flops"] / res["bytes"]
        for plugin, row in best_per_plugin(res).items():
            if row.get("tflops"):
                points.setdefault(plugin, []).append((intensity, row["tflops"], res["op"]))
    xs = [x for pts in points.values() for x, _, _ in pts]
    lo, hi = min(xs + [1.0]) / 2, max(xs + [peak_tflops / peak_tbps]) * 2
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(grid, [min(peak_tflops, x * peak_tbps) for x in grid], color="gray", lw=2,
            label=f"ceiling: {peak_tflops:g} TFLOP/s, {peak_tbps:g} TB/s")
    for plugin, pts in sorted(points.items(), key=lambda kv: (kv[0] == "cudnn", kv[0])):
        color = plugin_color(plugin)
        for op in _OPS:
            mine = [(x, y) for x, y, o in pts if o == op]
            if mine:
                ax.scatter(*zip(*mine), marker=_MARKERS[op], color=color, s=28, alpha=0.85,
                           label=f"{plugin} {op}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / minimum bytes)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"{suite}: roofline{' on ' + device if device else ''}")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_results(datas: list[dict[str, Any]], out_dir: str | os.PathLike, *, metric: str = "auto",
                 peak_tflops: float | None = None, peak_tbps: float | None = None) -> list[Path]:
    """Write the bar chart and the roofline of every suite in ``datas``; returns the files written."""
    if metric not in ("auto", *METRICS):
        raise ValueError(f"metric must be 'auto' or one of {sorted(METRICS)}, got {metric!r}")
    peak_tflops = H200_FP32_TFLOPS if peak_tflops is None else peak_tflops
    peak_tbps = H200_COPY_TBPS if peak_tbps is None else peak_tbps
    if peak_tflops <= 0 or peak_tbps <= 0:
        raise ValueError("peak_tflops and peak_tbps must be > 0")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    device = next((d.get("device", "") for d in datas), "")
    simulator = any(d.get("simulator") for d in datas)
    if simulator and not all(d.get("simulator") for d in datas):
        raise ValueError("mixing simulator and GPU results in one chart: plot them separately")
    written = []
    for suite, results in by_suite(datas).items():
        timed = [r for r in results if best_per_plugin(r)]
        if not timed and simulator:
            raise ValueError(f"suite {suite!r} is a simulator run with no timings: rerun it with "
                             "'convlab bench --simulator-wall-clock ...' to chart the simulator's "
                             "wall-clock (not GPU speed)")
        if not timed:
            raise ValueError(f"suite {suite!r} has no timings: nothing to plot")
        if simulator:  # no rates, no cuDNN, no roofline: only wall-clock bars, labelled as such
            if metric not in ("auto", "time"):
                raise ValueError(f"a simulator run has only wall-clock times: --metric {metric} needs "
                                 "a GPU run")
            written.append(bar_chart(suite, timed, "time", out / f"{suite}-simulator-time.png",
                                     simulator=True))
            continue
        chosen = metric
        if metric == "auto":
            chosen = "ratio" if any(r.get("cudnn") and r["cudnn"].get("median_ms") for r in timed) else "time"
        if chosen == "ratio" and not any(c.get("vs_cudnn") for r in timed for c in r["candidates"]):
            raise ValueError(f"suite {suite!r} has no cuDNN ratios (run bench with PyTorch); "
                             "use --metric time")
        written.append(bar_chart(suite, timed, chosen, out / f"{suite}-{chosen}.png"))
        written.append(roofline(suite, timed, out / f"{suite}-roofline.png", peak_tflops, peak_tbps, device))
    return written
