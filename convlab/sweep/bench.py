"""``convlab bench --workers N | --scheduler ADDRESS``: the benchmark harness over a sweep, one task
per problem, all workers' results in one report.

On a worker, :func:`bench_task` runs ``harness.bench_safely`` (check, memory, times, cuDNN when PyTorch
is there and not ``--no-torch``) under the client's settings and returns the ``ProblemResult`` with its
``worker`` and ``device`` set. The client keeps a journal next to the output, ``DIR/NAME.journal.jsonl``:
a header line with the sweep's settings, then one line per finished problem (appended, flushed and
fsync'ed as each arrives), and rewrites ``DIR/NAME.json`` and ``.csv`` (atomic writes) in suite order::

    done = journal entries of a previous run with the same settings      (resume: these are skipped)
    for task in expand(...) not in done:  worker: bench_safely(...) -> ProblemResult (+ worker, device)
    client, per result: append to the journal; write the report of everything finished so far
    all tasks succeeded: the journal is deleted (the next run starts afresh)
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from .cluster import worker_info
from .core import Task, applied, client_settings, run_tasks

JOURNAL = "convlab-sweep-journal/1"
_cudnn: list = []  # a worker process's cuDNN baseline, loaded by its first task


def _baseline(no_torch: bool) -> Any:
    from convlab.bench import baseline

    if no_torch:
        return None
    if not _cudnn:
        _cudnn.append(baseline.load()[0])
    return _cudnn[0]


def bench_task(spec: dict[str, Any]) -> Any:
    """Run on a worker: benchmark one problem under the client's settings (see the module docstring)."""
    from convlab.bench import harness

    info = worker_info()
    task: Task = spec["task"]
    with applied(spec, task.precision):
        res = harness.bench_safely(task.suite, task.entry, task.problem, spec["opts"], _baseline(spec["no_torch"]))
    res.worker, res.device = info["worker"], info["device"]
    return res


class Journal:
    """The append-only record of a sweep's finished problems (see the module docstring)."""

    def __init__(self, path: str | os.PathLike, settings: dict[str, Any]) -> None:
        self.path = Path(path)
        self.header = json.loads(json.dumps({"journal": JOURNAL, "settings": settings}, default=str))

    def load(self) -> dict[str, dict]:
        """{task id: result dict} of a previous run with the same settings; {} otherwise (a torn or
        corrupt line, as a crash mid-write leaves, is skipped)."""
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return {}
        records = []
        for line in lines:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
        if not records or records[0] != self.header:
            return {}
        return {r["task"]: r["result"] for r in records[1:] if isinstance(r, dict) and "task" in r}

    def start(self, keep: dict[str, dict]) -> None:
        """Rewrite the journal as the header plus ``keep`` (what :meth:`load` returned)."""
        from convlab.runtime.fileio import atomic_write

        lines = [self.header] + [{"task": k, "result": v} for k, v in keep.items()]
        atomic_write(self.path, "".join(json.dumps(r, default=str) + "\n" for r in lines))

    def append(self, task_id: str, result: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"task": task_id, "result": result}, default=str) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def sweep_bench(client: Any, tasks: list[Task], opts: Any, *, out_dir: str, stem: str,
                meta_settings: dict[str, Any], no_torch: bool = False, progress: bool = True,
                echo: Callable[[str], None] | None = None, timeout: float | None = None
                ) -> tuple[list[Any], list[tuple[Task, str]], int]:
    """Benchmark ``tasks`` on the workers of ``client`` into ``out_dir/stem.json|.csv``; returns the
    ProblemResults in task order, the failed tasks, and how many were taken from the journal."""
    from convlab.bench import report
    from convlab.bench.report import ProblemResult

    infos = sorted(client.run(worker_info).values(), key=lambda i: i["worker"])
    devices = sorted({i["device"] for i in infos})
    meta = report.metadata(meta_settings, device=(" + ".join(devices), infos[0]["compute_capability"]))
    meta["workers"] = infos
    journal = Journal(Path(out_dir) / f"{stem}.journal.jsonl", meta_settings)
    done = {k: v for k, v in journal.load().items() if k in {t.id for t in tasks}}
    journal.start(done)
    results = {k: ProblemResult.from_dict(v) for k, v in done.items()}
    order = [t.id for t in tasks]
    base = client_settings(opts.workspace_limit, None)
    specs = [(t, {**base, "task": t, "opts": opts, "no_torch": no_torch}) for t in tasks if t.id not in done]

    def finished(task: Task, res: Any) -> None:
        results[task.id] = res
        journal.append(task.id, asdict(res))
        report.write(out_dir, stem, report.to_json(meta, [results[i] for i in order if i in results]))
        if echo is not None:
            echo(f"{task.id} ({res.worker}): {report.summary(res)}")

    if done:
        report.write(out_dir, stem, report.to_json(meta, [results[i] for i in order if i in results]))
    failed = run_tasks(client, bench_task, specs, finished, progress=progress, unit="problem",
                       timeout=timeout)
    if not failed:
        journal.remove()
    return [results[i] for i in order if i in results], failed, len(done)
