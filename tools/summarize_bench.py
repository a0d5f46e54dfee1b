"""Print a markdown table from a `convlab bench` JSON: per shape and op, each plugin's median (ms),
cuDNN's, and the ratios cuDNN/plugin and direct/plugin; then geometric means per op.

    python tools/summarize_bench.py results/bench/h200/9003f63/burn.json
"""
from __future__ import annotations

import collections
import json
import math
import sys

PLUGINS = ("implicit_gemm", "im2col", "col2im", "direct")


def geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def main(path: str) -> None:
    data = json.load(open(path))
    print(f"device: {data['device']}, versions: {data['versions']}, date: {data['date']}\n")
    print("| suite | shape | op | " + " | ".join(PLUGINS) + " | cuDNN | cuDNN/implicit | cuDNN/best | direct/best |")
    print("|" + "---|" * (len(PLUGINS) + 7))
    per_op = collections.defaultdict(lambda: collections.defaultdict(list))
    for rec in data["results"]:
        med = {c["plugin"]: c["median_ms"] for c in rec["candidates"] if c.get("status") == "ok"}
        cud = (rec.get("cudnn") or {}).get("median_ms")
        ours = [v for p, v in med.items() if p in PLUGINS]
        best = min(ours) if ours else None
        cells = [f"{med[p]:.3f}" if p in med else "-" for p in PLUGINS]
        ig = med.get("implicit_gemm")
        r_ig = cud / ig if cud and ig else None
        r_best = cud / best if cud and best else None
        r_dir = med["direct"] / best if "direct" in med and best else None
        fmt = lambda v, d=2: f"{v:.{d}f}" if v else "-"
        print(f"| {rec['suite']} | {rec['label']} | {rec['op']} | " + " | ".join(cells) +
              f" | {fmt(cud, 3)} | {fmt(r_ig)} | {fmt(r_best)} | {fmt(r_dir, 1)} |")
        for name, value in (("cuDNN/implicit_gemm", r_ig), ("cuDNN/best", r_best)):
            if value:
                per_op[rec["op"]][name].append(value)
        for p in ("im2col", "col2im"):
            if p in med and "direct" in med:
                per_op[rec["op"]][f"direct/{p}"].append(med["direct"] / med[p])
    print("\n| op | ratio | geometric mean | shapes |\n|---|---|---|---|")
    for op, ratios in per_op.items():
        for name, xs in ratios.items():
            print(f"| {op} | {name} | {geomean(xs):.2f} | {len(xs)} |")


if __name__ == "__main__":
    main(sys.argv[1])
