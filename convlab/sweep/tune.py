"""``convlab tune --workers N | --scheduler ADDRESS``: the autotuner over a sweep, one task per problem.

On a worker, :func:`tune_task` runs ``convlab.autotune.tune`` (its cache check first: an entry that is
still valid answers without timing anything) under the client's settings, and returns the entry the
tuner stored in the worker's cache file, which its own merge-on-write (``fcntl`` lock, atomic replace)
keeps whole when two workers of one GPU model write the same file. The client merges every returned
entry into its own copy of that file (``TuningCache.merge``: the later ``written_at`` wins), so that
workers on other machines, whose cache folders the client cannot see, fill the client's cache too::

    infos = workers' device and cache file name                   (client.run)
    for task in expand(suites, ops, dtypes, limit):
        spec = problem, precision, settings, the client's entry for the key (a worker lacking it
               merges it first: resuming on a cluster without a shared folder re-times nothing)
    worker: tune(problem, force=retune) in the client's tuning mode -> winner, source (cache /
            tuned / heuristic / priority), the entry it stored when it decided now in that mode
    client: merge the entry into cache_dir()/<worker's cache file>; print one line per problem

Only an entry the worker made now, in the client's mode (``entry["mode"]``), is shipped: a cache hit is
already in some file, and a pick by declared priority is not stored at all.

A restarted sweep therefore re-times no problem whose entry was stored before the interruption (the
tuner answers from the cache; ``source`` says "cache").
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from convlab.runtime import settings
from convlab.autotune.cache import TuningCache, tuning_key
from .cluster import worker_info
from .core import Task, applied, client_settings, run_tasks


def tune_task(spec: dict[str, Any]) -> dict[str, Any]:
    """Run on a worker: tune one problem under the client's settings (see the module docstring)."""
    from convlab import autotune
    from convlab.runtime import kernel_cache
    from convlab.autotune import tuner

    info = worker_info()
    compiled_before, loaded_before = len(kernel_cache.compiled_names), kernel_cache.stats["loaded"]
    with applied(spec, spec["precision"]):
        known = spec["known"].get(info["cache_file"])
        if known is not None and tuner.stored(spec["key"]) is None:
            tuner.seed({spec["key"]: known})
        before = autotune.stats()["timed"]
        where = {"key": spec["key"], "cache_file": info["cache_file"], "worker": info["worker"],
                 "device": info["device"], "entry": None, "winner": None, "tuning_s": 0.0, "timed": 0}
        try:
            result = autotune.tune(spec["problem"], workspace_limit=spec["workspace_limit"], force=spec["force"],
                                   timer=spec.get("timer"))
        except ValueError as exc:  # no plugin runs this problem (e.g. a dtype without a wgrad kernel)
            return {**where, "source": "unsupported", "reason": str(exc)}
        entry = _shipped(tuner.stored(result.key), result.source, spec["tune_mode"])
    # the kernels this task compiled (named with CONVLAB_KERNEL_CACHE=1) and loaded from disk
    kernels = {"compiled": kernel_cache.compiled_names[compiled_before:],
               "loaded": kernel_cache.stats["loaded"] - loaded_before}
    return {**where, "key": result.key, "winner": result.winner_label, "source": result.source,
            "tuning_s": result.tuning_s, "reason": result.reason, "timed": autotune.stats()["timed"] - before,
            "entry": entry, "kernels": kernels}


def _shipped(entry: dict | None, source: str, mode: str) -> dict | None:
    """The stored entry when this task decided it now in ``mode`` (module docstring), else None."""
    if entry is None or source not in ("tuned", "heuristic") or entry.get("mode") != mode:
        return None
    return entry


def sweep_tune(client: Any, tasks: list[Task], *, workspace_limit: int | None = None, force: bool = False,
               share_cache_dir: bool = True, timer: Callable | None = None, progress: bool = True,
               echo: Callable[[str], None] | None = None, timeout: float | None = None
                ) -> tuple[dict[str, dict], list[tuple[Task, str]]]:
    """Tune ``tasks`` on the workers of ``client``; returns ({task id: the worker's answer}, failures).

    ``share_cache_dir``: the workers write into this process's cache folder (a local cluster, or a
    shared file system); else into their own, and the client merges (it does in both cases).
    ``timer``: passed to ``tune`` on the workers (tests: fake timings; it must pickle).
    """
    folder = settings.cache_dir()
    files = sorted({info["cache_file"] for info in client.run(worker_info).values()})
    caches = {name: TuningCache(folder / name) for name in files}
    stored = {name: cache.entries() for name, cache in caches.items()}
    base = client_settings(workspace_limit, str(folder) if share_cache_dir else None)
    specs = []
    for task in tasks:
        key = tuning_key(task.problem, base["key_policy"], base["deterministic"], task.precision)
        known = {name: entries[key] for name, entries in stored.items() if key in entries}
        specs.append((task, {**base, "problem": task.problem, "precision": task.precision, "key": key,
                             "known": known, "force": force, "timer": timer}))
    answers: dict[str, dict] = {}

    def done(task: Task, answer: dict) -> None:
        answers[task.id] = answer
        if answer["entry"] is not None:
            name = answer["cache_file"]
            caches.setdefault(name, TuningCache(Path(folder) / name)).merge({answer["key"]: answer["entry"]})
        if echo is not None:
            kernels = answer.get("kernels") or {}
            made = f", kernels compiled {len(kernels['compiled'])} loaded {kernels['loaded']}" \
                if kernels.get("compiled") or kernels.get("loaded") else ""
            echo(f"{task.entry.label:<28} {task.problem.op:<6} {task.dtype:<12} -> {answer['winner']} "
                 f"({answer['source']}, {answer['tuning_s']:.3g} s, {answer['worker']}{made})"
                 + ("" if answer["winner"] else f": {answer['reason']}"))

    failed = run_tasks(client, tune_task, specs, done, progress=progress, unit="problem",
                       timeout=timeout)
    return answers, failed
