"""``convlab tune``: every problem of the suites (or one shape) tuned into the autotuner's cache, in mode
"tune" unless ``--tune-mode`` (or a mode set before, CONVLAB_TUNE_MODE) names another: the default mode,
"heuristic", times nothing (convlab.autotune.modes). ``--workers`` / ``--scheduler``: convlab.cli.sweeps.
"""
from __future__ import annotations

import argparse
from typing import Any

from .errors import UsageError


def cmd_tune(args: argparse.Namespace) -> int:
    from convlab.runtime import settings
    from convlab.bench import harness as bench
    from . import sweeps
    from .commands import _suites

    suites = _suites(args, None)
    limit = settings.get_workspace_limit() if args.workspace_limit is None else args.workspace_limit
    autotune = bench.autotune_module()
    if autotune is None:
        raise UsageError("the autotuner (convlab.autotune) is not installed: 'auto' picks by priority")
    tasks = sweeps.tasks(args, suites)
    with autotune.mode(_tune_mode(args)):
        return _tune_tasks(args, tasks, limit, autotune)


def _tune_mode(args: argparse.Namespace) -> str:
    """``convlab tune``'s mode: ``--tune-mode``, else the mode in force unless it is the default
    "heuristic" (which times nothing): then "tune"."""
    from convlab.runtime import settings

    given = getattr(args, "tune_mode", None)
    if given:
        return given
    return "tune" if settings.get_tune_mode() == "heuristic" else settings.get_tune_mode()


def _tune_tasks(args: argparse.Namespace, tasks: list, limit: int, autotune: Any) -> int:
    from tqdm import tqdm

    from convlab import runtime
    from convlab.runtime import settings
    from . import sweeps

    if sweeps.sweeping(args):
        return sweeps.tune_sweep(args, tasks, limit)
    if args.clear_cache:
        autotune.clear_cache()
        print(f"cleared {autotune.cache_path()}")
    failed = 0
    for task in tqdm(tasks, disable=None if not args.quiet else True, unit="problem"):
        try:
            with settings.float32_precision(task.precision):
                result = autotune.tune(task.problem, workspace_limit=limit, force=args.retune)
        except ValueError as exc:  # no plugin runs it (e.g. a dtype without a wgrad kernel): not a failure
            tqdm.write(f"{task.entry.label:<32} {task.problem.op:<8} {task.dtype:<12} -> unsupported: {exc}")
            continue
        failed += result.winner is None
        tqdm.write(f"{task.entry.label:<32} {task.problem.op:<8} {task.dtype:<12} -> {result.winner_label} "
                   f"({result.source}, {result.tuning_s:.3g} s)" + ("" if result.winner else f": {result.reason}"))
        if args.verbose:
            tqdm.write(str(result))
    if not runtime.HAS_DEVICE:
        print("nothing was written: on the simulator the autotuner picks by declared priority and caches "
              "nothing (tune on a GPU to fill the cache)")
    else:
        print(f"cache: {autotune.cache_path()}")
    return 1 if failed else 0
