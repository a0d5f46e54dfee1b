"""The machinery both sweeps share: the tasks, the settings a worker applies, and the run loop.

A sweep is a list of :class:`Task` (suite, shape, op, dtype and float32 precision), one Dask task each::

    tasks = expand(suites, ops, dtypes, limit)                 # in suite order, already-done ones dropped
    for task in spread(tasks):  client.submit(fn, spec(task), resources={"GPU": 1}, retries=RETRIES)
    for future in as_completed(futures, timeout=timeout):                      # progress bar over the whole sweep
        on_done(task, future.result())                        # the caller merges / journals the result

``fn`` runs on a worker inside :func:`applied`: the client's key policy, deterministic mode, float32
precision and (local clusters) cache folder, so that a worker keys and stores what the client would.
A task whose worker process dies is run again by the scheduler (``distributed.scheduler.allowed-failures``
times); one that raises is retried ``RETRIES`` times, then reported as failed while the sweep goes on.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from convlab import settings
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


def family(task: Task) -> tuple[str, str, str]:
    """The kernels a task compiles depend mostly on its layer and op: the float32 kernels serve
    float32, TF32-allowed float32 and (through ``widen``) float16/bfloat16 tasks of the same layer."""
    return task.suite, task.entry.label, task.problem.op


def spread(items: list[Any], key: Callable[[Any], Any] = family) -> list[Any]:
    """``items`` reordered round-robin over their families (first appearance order): every family's
    first task, then every family's second, ... Workers take tasks in submission order, so two workers
    start on different layers or ops instead of compiling the same kernels side by side; a family's
    later dtypes come when its kernels are already on disk. Same items, stable within a family."""
    groups: dict[Any, list[Any]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    rounds = max((len(g) for g in groups.values()), default=0)
    return [g[i] for i in range(rounds) for g in groups.values() if i < len(g)]


def client_settings(workspace_limit: int | None, cache_dir: str | None) -> dict[str, Any]:
    """What a worker must apply to key and store like the client (see :func:`applied`)."""
    return {"key_policy": settings.get_key_policy(), "deterministic": settings.get_deterministic(),
            "workspace_limit": settings.check_workspace_limit(workspace_limit), "cache_dir": cache_dir}


@contextlib.contextmanager
def applied(spec: dict[str, Any], precision: str) -> Iterator[None]:
    """Run on a worker (one task at a time): the client's settings, restored afterwards."""
    before = (settings.get_key_policy(), settings.get_deterministic(), os.environ.get("CONVLAB_CACHE_DIR"))
    settings.set_key_policy(spec["key_policy"])
    settings.set_deterministic(spec["deterministic"])
    if spec.get("cache_dir"):
        os.environ["CONVLAB_CACHE_DIR"] = spec["cache_dir"]
    try:
        with settings.float32_precision(precision):
            yield
    finally:
        settings.set_key_policy(before[0])
        settings.set_deterministic(before[1])
        if before[2] is None:
            os.environ.pop("CONVLAB_CACHE_DIR", None)
        else:
            os.environ["CONVLAB_CACHE_DIR"] = before[2]


def run_tasks(client: Any, fn: Callable[[dict], dict], specs: list[tuple[Task, dict]],
              on_done: Callable[[Task, dict], None], *, progress: bool = True, unit: str = "task",
              timeout: float | None = None) -> list[tuple[Task, str]]:
    """Submit ``fn(spec)`` per task (one GPU each; in :func:`spread` order) and call ``on_done`` as each
    finishes, under a progress bar; returns the (task, error) of the tasks that failed. Interrupted: the pending tasks are
    cancelled (what finished was already handed to ``on_done``). ``timeout``: seconds for the whole sweep,
    then TimeoutError."""
    from dask.distributed import as_completed
    from tqdm import tqdm

    futures = {client.submit(fn, spec, resources={"GPU": 1}, retries=RETRIES, pure=False): task
               for task, spec in spread(specs, key=lambda pair: family(pair[0]))}
    failed: list[tuple[Task, str]] = []
    try:
        with tqdm(total=len(futures), disable=None if progress else True, unit=unit,
                  dynamic_ncols=True) as bar:
            for future in as_completed(futures, timeout=timeout):
                task = futures[future]
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
