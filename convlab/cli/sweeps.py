"""The sweep side of ``convlab tune`` and ``convlab bench`` (``--workers N`` / ``--scheduler ADDRESS``):
the Dask client, the tasks of the suites, the run and its summary (the machinery is :mod:`convlab.sweep`).
"""
from __future__ import annotations

import argparse
import os
from typing import Any

from .errors import UsageError, missing_extra


def sweeping(args: argparse.Namespace) -> bool:
    """True for --workers / --scheduler; UsageError for sweep-only options without them."""
    sweep = args.workers is not None or args.scheduler is not None
    if not sweep and args.command == "bench" and (args.dtypes is not None or args.limit is not None):
        raise UsageError("--dtypes and --limit are sweep options of bench: add --workers N (e.g. "
                         "--workers 1) or --scheduler ADDRESS")
    return sweep


def _client(args: argparse.Namespace) -> Any:
    """The Dask client of --workers / --scheduler (a context manager); None when Dask is missing."""
    try:
        import dask.distributed  # noqa: F401
    except ImportError as exc:
        missing_extra(args.command, "dask.distributed, which sweeps need,", "distributed", exc)
        return None
    from convlab.sweep.cluster import client_for

    return client_for(args.workers, args.scheduler, quiet=args.quiet)


def tasks(args: argparse.Namespace, suites: list) -> list:
    """The sweep's tasks (also the single-process tune's work list): --ops, --dtypes, --limit applied."""
    from convlab.sweep import expand

    found = expand(suites, args.ops, args.dtypes, args.limit)
    if not found:
        raise UsageError(f"no problem of {[s.name for s in suites]} has an op in {list(args.ops)}")
    return found


def bench_sweep(args: argparse.Namespace, suites: list, opts: Any, stem: str) -> tuple[list, list] | None:
    import time

    from tqdm import tqdm

    from convlab.bench import report
    from convlab.sweep.bench import sweep_bench

    work = tasks(args, suites)
    meta = {k: getattr(opts, k) for k in ("ops", "plugins", "all_configs", "warmup", "repeat", "max_seconds",
                                          "workspace_limit", "auto", "seed", "simulator_wall_clock", "check_replay")}
    meta.update(suites=[s.name for s in suites], dtypes=args.dtypes, limit=args.limit, no_torch=args.no_torch)
    client = _client(args)
    if client is None:
        return None
    start = time.perf_counter()
    with client as c:
        results, failed, resumed = sweep_bench(c, work, opts, out_dir=args.out, stem=stem, meta_settings=meta,
                                               no_torch=args.no_torch, progress=not args.quiet,
                                               echo=tqdm.write)
    print(report.table(results))
    print(f"sweep: {len(work)} problems ({resumed} from the journal of an interrupted run), "
          f"{len(failed)} failed, {time.perf_counter() - start:.1f} s wall")
    print(f"wrote {os.path.join(args.out, stem)}.json and .csv")
    return results, failed


def tune_sweep(args: argparse.Namespace, work: list, limit: int) -> int:
    import time
    from collections import Counter

    from tqdm import tqdm

    from convlab import runtime
    from convlab.runtime import settings
    from convlab.autotune.cache import TuningCache
    from convlab.sweep.tune import sweep_tune

    client = _client(args)
    if client is None:
        return 1
    start = time.perf_counter()
    with client as c:
        if args.clear_cache:  # this folder's files of the workers' devices; remote workers retune
            from convlab.sweep.cluster import worker_info

            for name in sorted({i["cache_file"] for i in c.run(worker_info).values()}):
                TuningCache(settings.cache_dir() / name).clear()
                print(f"cleared {settings.cache_dir() / name}")
        answers, failed = sweep_tune(c, work, workspace_limit=limit, force=args.retune or args.clear_cache,
                                     share_cache_dir=args.scheduler is None, progress=not args.quiet,
                                     echo=tqdm.write)
    sources = Counter(a["source"] for a in answers.values())
    no_winner = sum(a["winner"] is None and a["source"] != "unsupported" for a in answers.values())
    print(f"sweep: {len(work)} problems: " + ", ".join(f"{n} {s}" for s, n in sorted(sources.items()))
          + f", {len(failed)} failed, {no_winner} without a winner; {time.perf_counter() - start:.1f} s wall")
    files = sorted({a["cache_file"] for a in answers.values() if a["entry"] is not None})
    if not runtime.HAS_DEVICE and not files:
        print("nothing was written: on the simulator the autotuner picks by declared priority and caches "
              "nothing (tune on a GPU to fill the cache)")
    for name in files:
        print(f"cache: {settings.cache_dir() / name}")
    return 1 if failed or no_winner else 0


