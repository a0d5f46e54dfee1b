"""The machinery both sweeps share: the tasks, the settings a worker applies, and the run loop.

A sweep is a list of :class:`Task` (suite, shape, op, dtype and float32 precision), one Dask task each::

    tasks = expand(suites, ops, dtypes, limit)                 # in suite order, already-done ones dropped
    for task in spread(tasks):        # one in flight per GPU worker; the next when one finishes,
                                      # skipping (for now) tasks that compile what a running one does
        client.submit(fn, spec(task), resources={"GPU": 1}, retries=RETRIES)
    for future in as_completed(...):                          # progress bar over the whole sweep
        on_done(task, future.result())                        # the caller merges / journals the result

``fn`` runs on a worker inside :func:`applied`: the client's key policy, deterministic mode, tuning mode,
budget and depth (``convlab.autotune.modes``), float32 precision and (local clusters) cache folder, so
that a worker keys, tunes and stores what the client would.
A task whose worker process dies is run again by the scheduler (``distributed.scheduler.allowed-failures``
times); one that raises is retried ``RETRIES`` times, then reported as failed while the sweep goes on.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from convlab.runtime import settings
from convlab.problem import DTYPES, OPS, Problem

#: Retries of a task that raised (a dead worker is handled by the scheduler's allowed-failures).
RETRIES = 2
#: ``--dtypes`` tokens: the operand dtypes, plus float32 under float32 precision "high" (TF32 allowed).
HIGH = "float32+high"
DTYPE_TOKENS = tuple(DTYPES) + (HIGH,)


@dataclass(frozen=True)
class Task:
    """One (shape, op, dtype) of a sweep; ``precision`` is the float32 precision it runs under."""

    suite: str
    entry: Any  # convlab.bench.suite.SuiteEntry
    problem: Problem
    precision: str

    @property
    def dtype(self) -> str:
        """The dtype token: ``float32+high`` for float32 under precision "high"."""
        high = self.problem.dtype == "float32" and self.precision == "high"
        return HIGH if high else self.problem.dtype

    @property
    def id(self) -> str:
        """Unique within a sweep: suite, shape label, op and dtype token."""
        return f"{self.suite}|{self.entry.label}|{self.problem.op}|{self.dtype}"


def parse_dtypes(text: str) -> tuple[str, ...]:
    """'float32,float16,float32+high' -> a tuple of tokens; ValueError naming the allowed ones."""
    tokens = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [t for t in tokens if t not in DTYPE_TOKENS]
    if bad or not tokens:
        raise ValueError(f"dtypes must be a comma-separated subset of {','.join(DTYPE_TOKENS)}, got {text!r}")
    return tokens


def expand(suites: Iterable[Any], ops: Iterable[str] = OPS, dtypes: Iterable[str] | None = None,
           limit: int | None = None) -> list[Task]:
    """The tasks of ``suites``: the first ``limit`` shapes of each, the problems whose op is in ``ops``,
    each in every dtype token of ``dtypes`` (None: the suite's dtype under the current precision)."""
    current = settings.get_float32_precision()
    tokens = None if dtypes is None else tuple(dtypes)
    tasks = []
    for suite in suites:
        for entry in suite.entries[:limit]:
            for problem in entry.problems:
                if problem.op not in ops:
                    continue
                if tokens is None:
                    tasks.append(Task(suite.name, entry, problem, current))
                    continue
                for token in tokens:
                    dtype = "float32" if token == HIGH else token
                    precision = "high" if token == HIGH else "highest" if token == "float32" else current
                    tasks.append(Task(suite.name, entry, problem.replace(dtype=dtype), precision))
    return tasks


#: Sweep order of the dtype tokens: float32 first, because its (FMA) kernels are the ones the other
#: tokens of the same layer and op reuse (TF32-allowed float32 times them too, float16/bfloat16 through
#: ``widen``); each token's tensor-core kernels are shared by every layer of that op.
TOKEN_ORDER = ("float32", HIGH, "float16", "bfloat16", "float64")


def compile_group(task: Task) -> tuple[int, int]:
    """The kernels a task compiles first depend on its dtype token and op: (token rank, op rank)."""
    return TOKEN_ORDER.index(task.dtype), OPS.index(task.problem.op)


def spread(items: list[Any], key: Callable[[Any], Any] = compile_group) -> list[Any]:
    """``items`` reordered round-robin over their groups, groups in sorted ``key`` order: every group's
    first item, then every group's second, ... Same items, stable within a group.

    With the default key, tasks that run side by side (the next ones in this order) compile different
    kernels: consecutive tasks differ in op or dtype token, a layer's float32 task runs three places
    before its TF32 one (six and nine before its float16 and bfloat16 ones) and so has put its kernels
    in the kernel disk cache when they start, and a group's second layer comes a whole round after its
    first. :func:`run_tasks` keeps this order on the cluster."""
    groups: dict[Any, list[Any]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    ordered = [groups[k] for k in sorted(groups)]
    rounds = max((len(g) for g in ordered), default=0)
    return [g[i] for i in range(rounds) for g in ordered if i < len(g)]


def compile_keys(task: Task) -> set[tuple]:
    """What a task compiles first: its layer and op's kernels (float32's FMA kernels serve every dtype
    token of that layer and op) and its dtype token and op's (one token's tensor-core kernels serve
    every layer)."""
    op = task.problem.op
    return {("layer", task.suite, task.entry.label, op), ("dtype", task.dtype, op)}


def next_index(pending: list[Task], running: list[Task], warm: set[tuple] = frozenset()) -> int | None:
    """The first of ``pending`` (in sweep order) that shares no :func:`compile_keys` with a running task,
    keys in ``warm`` (a task of theirs has finished: their kernels are on disk) aside. None when each
    pending task shares one and something runs: waiting for that task is shorter than compiling its
    kernels a second time (it began earlier), and afterwards they come from the kernel disk cache."""
    busy = set().union(*(compile_keys(r) for r in running)) - set(warm)
    for i, task in enumerate(pending):
        if not compile_keys(task) & busy:
            return i
    return None if running and pending else (0 if pending else None)


def gpu_workers(client: Any) -> int:
    """How many workers of ``client``'s cluster offer a GPU (at least 1)."""
    workers = client.scheduler_info(n_workers=-1).get("workers", {})
    return max(1, sum(1 for w in workers.values() if (w.get("resources") or {}).get("GPU")))


def client_settings(workspace_limit: int | None, cache_dir: str | None) -> dict[str, Any]:
    """What a worker must apply to key, tune and store like the client (see :func:`applied`)."""
    return {"key_policy": settings.get_key_policy(), "deterministic": settings.get_deterministic(),
            "tune_mode": settings.get_tune_mode(), "tune_budget": settings.get_tune_budget(),
            "tune_configs": settings.get_tune_configs(),
            "workspace_limit": settings.check_workspace_limit(workspace_limit), "cache_dir": cache_dir}


@contextlib.contextmanager
def applied(spec: dict[str, Any], precision: str) -> Iterator[None]:
    """Run on a worker (one task at a time): the client's settings, restored afterwards."""
    before = (settings.get_key_policy(), settings.get_deterministic(), os.environ.get("CONVLAB_CACHE_DIR"))
    tuning = (settings.get_tune_mode(), settings.get_tune_budget(), settings.get_tune_configs())
    settings.set_key_policy(spec["key_policy"])
    settings.set_deterministic(spec["deterministic"])
    settings.set_tune_mode(spec["tune_mode"])
    settings.set_tune_budget(spec["tune_budget"])
    settings.set_tune_configs(spec["tune_configs"])
    if spec.get("cache_dir"):
        os.environ["CONVLAB_CACHE_DIR"] = spec["cache_dir"]
    try:
        with settings.float32_precision(precision):
            yield
    finally:
        settings.set_key_policy(before[0])
        settings.set_deterministic(before[1])
        settings.set_tune_mode(tuning[0])
        settings.set_tune_budget(tuning[1])
        settings.set_tune_configs(tuning[2])
        if before[2] is None:
            os.environ.pop("CONVLAB_CACHE_DIR", None)
        else:
            os.environ["CONVLAB_CACHE_DIR"] = before[2]


def run_tasks(client: Any, fn: Callable[[dict], dict], specs: list[tuple[Task, dict]],
              on_done: Callable[[Task, dict], None], *, progress: bool = True, unit: str = "task",
              timeout: float | None = None) -> list[tuple[Task, str]]:
    """Run ``fn(spec)`` per task (one GPU each) in :func:`spread` order and call ``on_done`` as each
    finishes, under a progress bar over the whole sweep; returns the (task, error) of the tasks that failed.

    The client hands out the order itself: one task per GPU worker is in flight, and when one finishes
    the next is the first pending task that compiles nothing a running one does (:func:`next_index`).
    Dask's scheduler assigns tasks with resource restrictions to workers at once and runs them in no
    order we can rely on: measured on 2 GPUs, two workers then compiled the same kernels side by side;
    and in order but without the rule, a layer's TF32 task compiled its float32 kernels beside the
    float32 task. Interrupted: the tasks in flight are cancelled (what finished was already handed to
    ``on_done``). ``timeout``: seconds for the whole sweep, then TimeoutError."""
    from dask.distributed import as_completed
    from tqdm import tqdm

    pending = spread(specs, key=lambda pair: compile_group(pair[0]))
    futures: dict[Any, Task] = {}
    warm: set[tuple] = set()  # compile keys of finished tasks
    done_so_far = as_completed(timeout=timeout)

    def submit_more() -> None:  # up to one task per GPU worker, none compiling what a running one does
        while pending and len(futures) < gpu_workers(client):
            i = next_index([task for task, _ in pending], list(futures.values()), warm)
            if i is None:
                return
            task, spec = pending.pop(i)
            future = client.submit(fn, spec, resources={"GPU": 1}, retries=RETRIES, pure=False)
            futures[future] = task
            done_so_far.add(future)

    failed: list[tuple[Task, str]] = []
    try:
        with tqdm(total=len(pending), disable=None if progress else True, unit=unit,
                  dynamic_ncols=True) as bar:
            submit_more()
            for future in done_so_far:
                task = futures.pop(future)
                warm |= compile_keys(task)
                submit_more()
                try:
                    value = future.result()
                except Exception as exc:  # the task raised RETRIES + 1 times, or killed its workers
                    failed.append((task, f"{type(exc).__name__}: {exc}"[:500]))
                    tqdm.write(f"{task.id}: FAILED {failed[-1][1]}")
                else:
                    on_done(task, value)
                bar.update()
    except BaseException:
        client.cancel(list(futures))
        raise
    return failed
