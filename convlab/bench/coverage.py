"""Where convlab stands against cuDNN in ``convlab bench`` results files (``convlab bench report``).

    merged(files) -> {(suite, label, op): record}   later files replace the same row of earlier ones
    coverage(rows, plugins) -> (table, flags)

Per suite and op, over the layers: the geometric mean of cuDNN's time / the fastest checked convlab
candidate's (each candidate timed through the public op: :func:`convlab.bench.report.user_ms`), the lowest
ratio, the layers below LOW, the winning plugins; the same over the depthwise layers (groups == C > 1) of
all suites. ``plugins`` restricts the candidates that count (e.g. the SIMT fp32 plugins, without tf32x3).
Flags: a layer whose only checked candidate is ``direct`` or that has none, and a layer below LOW.
"""
from __future__ import annotations

import collections
from typing import Any, Iterable

from .report import geomean, user_ms

LOW = 0.4


def merged(files: Iterable[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    """(suite, label, op) -> result record of loaded results files, later files winning."""
    rows: dict[tuple, dict[str, Any]] = {}
    for data in files:
        for rec in data["results"]:
            rows[rec["suite"], rec["label"], rec["op"]] = rec
    return rows


def correct(rec: dict[str, Any], plugins: set[str] | None) -> list[tuple[str, float]]:
    """(plugin, ms) of every checked, timed candidate (among ``plugins``)."""
    return [(c["plugin"], user_ms(c)) for c in rec["candidates"]
            if c.get("status") == "ok" and user_ms(c) and (plugins is None or c["plugin"] in plugins)]


def is_depthwise(rec: dict[str, Any]) -> bool:
    groups, channels = rec["problem"]["groups"], rec["problem"]["x"][1]
    return groups > 1 and groups == channels


def coverage(rows: dict[tuple, dict[str, Any]], plugins: set[str] | None) -> tuple[list[list], list[str]]:
    """Table rows (group, op, layers, geomean, min, below LOW, winners) and the problems to flag."""
    ratios, winners, flags = collections.defaultdict(list), collections.defaultdict(collections.Counter), []
    for (suite, label, op), rec in rows.items():
        ok, cudnn = correct(rec, plugins), user_ms(rec["cudnn"]) if rec.get("cudnn") else None
        pick = min(ok, key=lambda pm: pm[1]) if ok else None
        if not ok or all(name == "direct" for name, _ in ok):
            flags.append(f"{suite} / {label} / {op}: {'only direct' if ok else 'no candidate'}")
        if pick is None or not cudnn:
            continue
        for group in [suite] + (["depthwise (all suites)"] if is_depthwise(rec) else []):
            ratios[group, op].append(cudnn / pick[1])
            winners[group, op][pick[0]] += 1
        if cudnn / pick[1] < LOW:
            flags.append(f"{suite} / {label} / {op}: {cudnn / pick[1]:.2f} of cuDNN ({pick[0]})")
    table = [[group, op, len(v), geomean(v), min(v), sum(x < LOW for x in v),
              ", ".join(f"{p} {n}" for p, n in winners[group, op].most_common())]
             for (group, op), v in sorted(ratios.items(), key=lambda kv: (kv[0][0].startswith("depthwise"),
                                                                           kv[0]))]
    return table, flags


def markdown(table: list[list], flags: list[str], plugins: set[str] | None) -> str:
    """The coverage table and the flagged layers as Markdown."""
    lines = [f"candidates: {'all' if plugins is None else ', '.join(sorted(plugins))}; ratio = cuDNN ms / "
             "convlab ms (public op), fastest checked candidate per layer", "",
             f"| suite | op | layers | geomean | min | below {LOW} | fastest plugin (layers) |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {group} | {op} | {n} | {g:.3f} | {low:.2f} | {below} | {win} |"
              for group, op, n, g, low, below, win in table]
    lines += ["", "flagged:" if flags else "flagged: none"] + [f"- {line}" for line in flags]
    return "\n".join(lines)
