"""Which kernels each task of a multi-worker tuning sweep compiled, and which were compiled twice
(issue #15: the second worker should load from the kernel disk cache what the first compiled).

    CONVLAB_KERNEL_CACHE=1 CONVLAB_CACHE_DIR=/tmp/diag python tools/sweep_kernel_diag.py \\
        --suite resnet50 --limit 1 --ops wgrad --dtypes float32,float16 --workers 2 -o diag.json

Prints one line per task (worker, seconds, kernels compiled / loaded) as it finishes, then every kernel
(qualified name, argument types, cache key) compiled by more than one worker, with the tasks that did.
"""
from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

from convlab.bench.suite import load_suite
from convlab.sweep import expand
from convlab.sweep.cluster import local_cluster
from convlab.sweep.core import parse_dtypes
from convlab.sweep.tune import sweep_tune


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", action="append", required=True)
    ap.add_argument("--limit", type=int, default=1)
    ap.add_argument("--ops", default="forward,dgrad,wgrad")
    ap.add_argument("--dtypes", default="float32,float16")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args(argv)
    tasks = expand([load_suite(s) for s in args.suite], tuple(args.ops.split(",")), parse_dtypes(args.dtypes),
                   args.limit)
    start = time.perf_counter()
    with local_cluster(args.workers, quiet=True) as client:
        answers, failed = sweep_tune(client, tasks, progress=False, echo=lambda line: print(
            f"[{time.perf_counter() - start:6.1f} s] {line}", flush=True))
    by_kernel: dict[str, list[str]] = defaultdict(list)
    for tid, a in answers.items():
        for name in (a.get("kernels") or {}).get("compiled", []):
            by_kernel[name].append(f"{a['worker']}:{tid}")
    twice = {k: v for k, v in by_kernel.items() if len({w.split(':')[0] for w in v}) > 1}
    out = {"wall_s": round(time.perf_counter() - start, 1), "failed": [(t.id, e) for t, e in failed],
           "tasks": {tid: {k: a.get(k) for k in ("worker", "tuning_s", "winner", "source", "kernels")}
                     for tid, a in answers.items()},
           "compiled_by_more_than_one_worker": twice}
    with open(args.output, "w") as f:
        json.dump(out, f, indent=1)
    print(f"{len(by_kernel)} kernels compiled, {len(twice)} by more than one worker:")
    for name, where in sorted(twice.items()):
        print(f"  {name}: {', '.join(where)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
