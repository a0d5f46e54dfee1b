"""Print a markdown table from a benchmarks/autotune_bench.py JSON: per shape and op, the autotuner's
pick, the exhaustive best, the regret, and the tuning time of a new key (cold: compiling included;
warm: kernels compiled); then the summary and the second process's cache reuse.

    python tools/summarize_autotune.py autotune.json > autotune_summary.md
"""
from __future__ import annotations

import json
import statistics
import sys


def _short(label: str | None) -> str:
    return "-" if label is None else label.replace("implicit_gemm", "igemm")


def main(path: str) -> None:
    data = json.load(open(path))
    print(f"device: {data['device']} (sm {data['compute_capability']}), versions: {data['versions']}, "
          f"date: {data['date']}\n\ntuner: {data['tuner']}; exhaustive: {data['repeat']} samples per "
          f"candidate in {data.get('exhaustive_rounds', 1)} interleaved rounds\n")
    print("| shape | op | candidates | autotuned pick | exhaustive best | best ms | regret | cold tune s | "
          "warm tune s |")
    print("|" + "---|" * 9)
    for r in data["shapes"]:
        regret = "-" if r["regret"] is None else f"{100 * r['regret']:.1f}%"
        print(f"| {r['shape']} | {r['op']} | {len(r['candidates'])} | {_short(r['warm']['pick'])} | "
              f"{_short(r['best'])} | {r['best_ms']:.3f} | {regret} | {r['cold']['tuning_s']:.2f} | "
              f"{r['warm']['tuning_s']:.2f} |")
    s, second = data["summary"], data.get("second_process", {})
    warm = [r["warm"]["tuning_s"] for r in data["shapes"]]
    print(f"\n{s['within_5pct']} of {s['with_regret']} (shape, op) pairs within 5% of the exhaustive best; "
          f"max regret {100 * s['max_regret']:.1f}%, mean {100 * s['mean_regret']:.2f}%.\n"
          f"Tuning a new key with compiled kernels: median {s['warm_tuning_s_median']:.2f} s, max "
          f"{max(warm):.2f} s, total {s['warm_tuning_s_total']:.1f} s; cold (first key of each op compiles "
          f"every config): total {s['cold_tuning_s_total']:.1f} s, median {s['cold_tuning_s_median']:.2f} s.\n"
          f"Second process on the same cache file: {second.get('cache_hits')} of {second.get('problems')} "
          f"answered from the cache, {second.get('retimed')} candidates re-timed, "
          f"{second.get('seconds', float('nan')):.2f} s in all; same picks as the first process: "
          f"{second.get('same_picks_as_first_process')}.")
    by_op = {}
    for r in data["shapes"]:
        if r["regret"] is not None:
            by_op.setdefault(r["op"], []).append(r["regret"])
    for op, regrets in by_op.items():
        print(f"- {op}: mean regret {100 * statistics.mean(regrets):.2f}%, max {100 * max(regrets):.1f}% "
              f"over {len(regrets)} shapes")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "results/autotune/h200/9003f63/autotune.json")
