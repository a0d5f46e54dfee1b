"""Issue 13's measures from `convlab bench` JSONs: per suite and op, the geometric mean over layers of
cuDNN's time / the fastest convlab candidate's (each candidate timed through the public op:
``report.user_ms``), the lowest ratio, the layers below 0.4, the winning plugins, and the same over
the depthwise layers (groups == C > 1) of all suites.

    python tools/coverage_report.py A.json [B.json ...] [--plugins implicit_gemm,depthwise] [--markdown]

A (suite, label, op) row in a later file replaces the same row of an earlier one (a re-run of some ops).
``--plugins``: only these candidates count (e.g. the SIMT fp32 plugins, without tf32x3). A layer whose
only candidate is ``direct``, or that has none, is listed: the issue asks for a non-direct plugin on each.
"""
from __future__ import annotations

import argparse
import collections
import json
from typing import Any

from convlab.bench.report import geomean, user_ms

LOW = 0.4


def rows_of(paths: list[str]) -> dict[tuple, dict[str, Any]]:
    """(suite, label, op) -> result record, later files winning."""
    rows: dict[tuple, dict[str, Any]] = {}
    for path in paths:
        with open(path) as fh:
            for rec in json.load(fh)["results"]:
                rows[rec["suite"], rec["label"], rec["op"]] = rec
    return rows


def correct(rec: dict[str, Any], plugins: set[str] | None) -> list[tuple[str, float]]:
    """(plugin, ms) of every correct, timed candidate (among ``plugins``)."""
    return [(c["plugin"], user_ms(c)) for c in rec["candidates"]
            if c.get("status") == "ok" and user_ms(c) and (plugins is None or c["plugin"] in plugins)]


def is_depthwise(rec: dict[str, Any]) -> bool:
    groups, channels = rec["problem"]["groups"], rec["problem"]["x"][1]
    return groups > 1 and groups == channels


def report(rows: dict[tuple, dict[str, Any]], plugins: set[str] | None) -> tuple[list[list], list[str]]:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--plugins", default=None, help="comma list: only these candidates count")
    args = parser.parse_args(argv)
    plugins = set(args.plugins.split(",")) if args.plugins else None
    table, flags = report(rows_of(args.files), plugins)
    print(f"candidates: {'all' if plugins is None else ', '.join(sorted(plugins))}; ratio = cuDNN ms / "
          "convlab ms (public op), fastest candidate per layer\n")
    print("| suite | op | layers | geomean | min | below 0.4 | fastest plugin (layers) |")
    print("|---|---|---|---|---|---|---|")
    for group, op, n, g, low, below, win in table:
        print(f"| {group} | {op} | {n} | {g:.3f} | {low:.2f} | {below} | {win} |")
    print("\nflagged:" if flags else "\nflagged: none")
    for line in flags:
        print(f"- {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
