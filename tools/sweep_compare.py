"""Compare the tuning caches of two sweeps of the same problems (issue #15's single- vs two-GPU run).

    python tools/sweep_compare.py --single DIR1 --dual DIR2 --wall-single S --wall-dual S -o OUT.json

DIR1/DIR2 are the CONVLAB_CACHE_DIRs of the runs (their autotune-*.json files). For every tuning key in
either: the two winners are identical, a tie (each run's winner within the tuner's FINAL_MARGIN of the
other's in at least one run's own medians: the final round treats such candidates as contenders), or
different (listed with both runs' medians). Writes the counts, the wall times, their ratio and whether
issue #15's bar is met (ratio <= 0.55, the same keys, no different pick) to OUT.json and prints it.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from convlab.autotune import FINAL_MARGIN

TARGET = 0.55


def entries(folder: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for path in sorted(Path(folder).glob("autotune-*.json")):
        out.update({f"{path.name}:{k}": v for k, v in json.loads(path.read_text())["entries"].items()})
    return out


def medians(entry: dict) -> dict[str, float]:
    """Each timed candidate's median, under the label the entry's ``winner`` uses: plugin[config]."""
    return {r.get("label") or f"{r['plugin']}[{r['config']}]": r["median_ms"]
            for r in entry.get("results", []) if r.get("median_ms")}


def tie(a: dict, b: dict) -> bool:
    """Each winner within FINAL_MARGIN of the other in either run's own medians."""
    for entry in (a, b):
        m = medians(entry)
        wa, wb = m.get(a["winner"]), m.get(b["winner"])
        if wa and wb and max(wa, wb) <= min(wa, wb) * (1 + FINAL_MARGIN):
            return True
    return False


def compare(single: dict[str, dict], dual: dict[str, dict]) -> dict:
    common = sorted(set(single) & set(dual))
    same = [k for k in common if single[k]["winner"] == dual[k]["winner"]]
    ties = [k for k in common if k not in same and tie(single[k], dual[k])]
    differ = [{"key": k, "single": single[k]["winner"], "dual": dual[k]["winner"],
               "single_medians": medians(single[k]), "dual_medians": medians(dual[k])}
              for k in common if k not in same and k not in ties]
    return {"keys_single": len(single), "keys_dual": len(dual), "common": len(common),
            "only_single": sorted(set(single) - set(dual)), "only_dual": sorted(set(dual) - set(single)),
            "identical": len(same), "ties": len(ties), "tie_keys": ties, "different": differ,
            "tie_margin": FINAL_MARGIN}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--single", required=True)
    ap.add_argument("--dual", required=True)
    ap.add_argument("--wall-single", type=float, required=True)
    ap.add_argument("--wall-dual", type=float, required=True)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--note", default="", help="what was swept (suites, ops, dtypes, limit)")
    ap.add_argument("--cut", nargs="*", default=[], help="runs stopped by their time limit (not met)")
    args = ap.parse_args(argv)
    out = compare(entries(args.single), entries(args.dual))
    ratio = args.wall_dual / args.wall_single if args.wall_single else None
    out.update(wall_single_s=args.wall_single, wall_dual_s=args.wall_dual, ratio=ratio, target=TARGET,
               note=args.note, cut=args.cut,
               met=bool(ratio is not None and ratio <= TARGET and not out["different"] and not args.cut
                        and not out["only_single"] and not out["only_dual"] and out["common"]))
    Path(args.output).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k not in ("tie_keys",)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
