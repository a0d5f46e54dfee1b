"""Sweeps on a local Dask cluster of 2 simulator worker processes (convlab.sweep): the same picks as one
process, a worker killed mid-sweep loses no finished entry, a second run re-times nothing, the bench
report of all workers and its resume journal, and the command line on an existing scheduler.

The workers time candidates with :class:`FakeTimer` (pickled by value: the workers cannot import this
file): milliseconds drawn from the candidate's label, so every process picks alike."""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("dask.distributed")
import cloudpickle  # noqa: E402  (a dependency of distributed)

from convlab import autotune  # noqa: E402
from convlab.runtime import settings
from convlab.bench.harness import BenchOptions  # noqa: E402
from convlab.bench.suite import load_suite  # noqa: E402
from convlab.cli import parser as cli  # noqa: E402
from convlab.sweep import expand  # noqa: E402
from convlab.sweep.bench import Journal, sweep_bench  # noqa: E402
from convlab.sweep.cluster import local_cluster  # noqa: E402
from convlab.sweep.tune import sweep_tune  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])
LIMIT_S = 240  # a stalled sweep fails (TimeoutError) instead of hanging the suite


def FakeTimer(marker: str | None = None, kill_after: int = 0, forbid: bool = False):
    """Deterministic fake timings; optionally kills its worker process (once: ``marker`` is created
    first, holding the cache entries on disk at that moment) as soon as ``kill_after`` entries are
    stored; ``forbid``: raise if called at all. (A closure: plain pickle refuses it, so Dask falls back
    to cloudpickle, which ships it and this module's helpers by value.)"""

    def timer(cand) -> list[float]:
        if forbid:
            raise AssertionError(f"{cand.label} was timed again")
        if marker is not None and not os.path.exists(marker):
            entries = _disk_entries(settings.cache_dir())
            if len(entries) >= kill_after:
                try:
                    fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    pass
                else:
                    os.write(fd, json.dumps({k: v["written_at"] for k, v in entries.items()}).encode())
                    os.close(fd)
                    os._exit(1)  # the worker process dies mid-task; its nanny starts a new one
        digest = int(hashlib.sha256(cand.label.encode()).hexdigest()[:8], 16)
        return [1.0 + digest % 1000 / 100.0] * 3

    return timer


def _disk_entries(folder) -> dict:
    files = sorted(Path(folder).glob("autotune-*.json"))
    if not files:
        return {}
    try:
        return json.loads(files[0].read_text())["entries"]
    except (OSError, ValueError, KeyError):
        return {}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from convlab.sweep.cluster import gpu_ids

    try:
        gpu_ids(2)  # one worker per GPU: on real CUDA these tests need two visible GPUs
    except ValueError as exc:
        pytest.skip(f"two local workers: {exc}")
    old = os.environ.get("CONVLAB_CACHE_DIR")
    os.environ["CONVLAB_CACHE_DIR"] = str(tmp_path_factory.mktemp("worker-cache"))  # the workers' own
    try:
        with local_cluster(2, quiet=True) as client:
            yield client
    finally:
        if old is None:
            os.environ.pop("CONVLAB_CACHE_DIR", None)
        else:
            os.environ["CONVLAB_CACHE_DIR"] = old


@pytest.fixture(autouse=True)
def timed_mode():
    """Mode "tune" on the client (the workers get it from the task's settings): these tests time."""
    with autotune.mode("tune"):
        yield


def _tasks(ops=("forward", "dgrad"), limit=3):
    return expand([load_suite("tiny")], ops, None, limit)


def test_two_workers_tune_like_one_process_survive_a_killed_worker_and_retime_nothing(cluster, tmp_path,
                                                                                       monkeypatch):
    tasks = _tasks()
    monkeypatch.setenv("CONVLAB_CACHE_DIR", str(tmp_path / "single"))
    single = {}
    for task in tasks:  # what 'convlab tune' does in one process
        result = autotune.tune(task.problem, timer=FakeTimer())
        single[result.key] = result.winner_label
    assert len(single) == len(tasks) and None not in single.values()

    monkeypatch.setenv("CONVLAB_CACHE_DIR", str(tmp_path / "sweep"))
    marker = tmp_path / "killed.json"
    answers, failed = sweep_tune(cluster, tasks, timer=FakeTimer(str(marker), kill_after=2), progress=False,
                                 timeout=LIMIT_S)
    assert failed == [] and marker.exists(), "a worker should have died mid-sweep and its task run again"
    stored = _disk_entries(tmp_path / "sweep")
    assert {k: e["winner"] for k, e in stored.items()} == single
    assert {e["mode"] for e in stored.values()} == {"tune"}  # the client's mode, on the workers
    assert {a["worker"] for a in answers.values()} == {"gpu0", "gpu1"}
    before_kill = json.loads(marker.read_text())
    assert len(before_kill) >= 2
    assert all(stored[k]["written_at"] == t for k, t in before_kill.items()), "a finished entry was lost"

    again, failed = sweep_tune(cluster, tasks, timer=FakeTimer(forbid=True), progress=False,
                                 timeout=LIMIT_S)
    assert failed == []
    assert {a["source"] for a in again.values()} == {"cache"} and sum(a["timed"] for a in again.values()) == 0
    assert _disk_entries(tmp_path / "sweep") == stored


def test_workers_without_a_shared_folder_fill_the_clients_cache(cluster, tmp_path, monkeypatch):
    tasks = _tasks(ops=("wgrad",), limit=2)
    monkeypatch.setenv("CONVLAB_CACHE_DIR", str(tmp_path / "client"))
    answers, failed = sweep_tune(cluster, tasks, share_cache_dir=False, timer=FakeTimer(), progress=False,
                                 timeout=LIMIT_S)
    assert failed == [] and {a["source"] for a in answers.values()} <= {"tuned", "cache"}
    stored = _disk_entries(tmp_path / "client")
    assert set(stored) == {a["key"] for a in answers.values()}
    assert {k: e["winner"] for k, e in stored.items()} == {a["key"]: a["winner"] for a in answers.values()}


def test_bench_sweep_one_report_and_resume_from_the_journal(cluster, tmp_path):
    tasks = expand([load_suite("tiny")], ("forward",), ("float32", "float64"), 2)
    opts = BenchOptions(ops=("forward",), auto=False)
    meta = {"case": "resume"}
    seen = []

    def interrupt(line: str) -> None:
        seen.append(line)
        if len(seen) == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep_bench(cluster, tasks, opts, out_dir=str(tmp_path), stem="s", meta_settings=meta, no_torch=True,
                    progress=False, echo=interrupt, timeout=LIMIT_S)
    journal = Journal(tmp_path / "s.journal.jsonl", meta)
    first = journal.load()
    assert 1 <= len(first) < len(tasks)
    with open(journal.path, "a") as handle:
        handle.write('{"task": "torn')  # a crash mid-append
    results, failed, resumed = sweep_bench(cluster, tasks, opts, out_dir=str(tmp_path), stem="s",
                                           meta_settings=meta, no_torch=True, progress=False,
                                 timeout=LIMIT_S)
    assert failed == [] and resumed == len(first) and not journal.path.exists()
    assert [f"{r.suite}|{r.label}|{r.op}|{r.problem['dtype']}" for r in results] == [t.id for t in tasks]
    data = json.loads((tmp_path / "s.json").read_text())
    assert len(data["results"]) == len(tasks) and {w["worker"] for w in data["workers"]} == {"gpu0", "gpu1"}
    rows = (tmp_path / "s.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert {"worker", "device"} <= set(header)
    assert all(",CUDA simulator," in r and (",gpu0," in r or ",gpu1," in r) for r in rows[1:])


def test_cli_tune_and_bench_on_an_existing_scheduler(cluster, tmp_path, capsys):
    address = cluster.scheduler.address
    assert cli.main(["tune", "--suite", "tiny", "--ops", "forward", "--limit", "2", "--dtypes",
                     "float32,float32+high", "--scheduler", address, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "sweep: 4 problems: 4 priority, 0 failed" in out and "float32+high" in out
    assert cli.main(["bench", "--suite", "tiny", "--ops", "forward", "--limit", "1", "--no-torch", "--scheduler",
                     address, "--out", str(tmp_path), "--quiet"]) == 0
    assert "sweep: 1 problems" in capsys.readouterr().out and (tmp_path / "tiny.csv").exists()
