"""Where a sweep runs: a local cluster of one Dask worker process per GPU, or an existing cluster.

Local (``--workers N``)::

    python -m dask scheduler --host 127.0.0.1 --port 0 --scheduler-file DIR/scheduler.json
    for i in range(N):                                   one OS process each, started like on a cluster:
        python -m dask worker --scheduler-file DIR/scheduler.json --nthreads 1 --resources GPU=1 --name gpu<i>
            env CUDA_VISIBLE_DEVICES=<the i-th visible GPU>   (GPU machines; none on the simulator)

Each worker is started as its own ``dask worker`` command (not a LocalCluster worker) because the GPU pin
must be in the environment before the worker process imports convlab (whose import probes the CUDA
driver): a LocalCluster's workers are spawned from this process and would re-import the ``convlab``
console script first. The scheduler is a process of its own too, so that nothing this process does
(its other threads, the simulator's kernels in a test) can stall it. Every worker has a nanny, which restarts a worker process that dies; the
scheduler then runs its task again elsewhere. The workers inherit this process's environment, so
``CONVLAB_*`` settings and the kernel cache folder are the same as a single-process run.

Existing (``--scheduler tcp://host:8786``): the workers must have been started with ``--resources GPU=1``
(one worker, one thread per GPU), which :func:`connect` checks.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator

#: Seconds to wait for the workers of a local cluster (numba's import dominates a worker's start).
START_TIMEOUT = 120


def gpu_ids(n: int) -> list[str | None]:
    """The ``CUDA_VISIBLE_DEVICES`` value of each of ``n`` local workers (None on the simulator).

    ValueError when ``n`` exceeds the GPUs this process may use."""
    from convlab import runtime

    if n < 1:
        raise ValueError(f"workers must be >= 1, got {n}")
    if not runtime.HAS_DEVICE:  # no GPUs to pin workers to
        return [None] * n
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible else \
        [str(i) for i in range(runtime.driver_gpu_count())]
    if n > len(ids):
        raise ValueError(f"workers must be at most the number of GPUs ({len(ids)}: {','.join(ids)}), "
                         f"got {n}")
    return ids[:n]


def worker_command(scheduler_file: str, name: str, local_dir: str) -> list[str]:
    """The ``dask worker`` command line of one GPU worker (what the README tells cluster users)."""
    return [sys.executable, "-m", "dask", "worker", "--scheduler-file", scheduler_file, "--nthreads", "1",
            "--nworkers", "1",
            "--resources", "GPU=1", "--name", name, "--no-dashboard", "--memory-limit", "0", "--death-timeout", "60",
            "--local-directory", local_dir]


def _start(cmd: list[str], log_path: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    with open(log_path, "wb") as log:  # stdin from /dev/null: never a pipe of the caller (pytest-xdist's)
        return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)


def _wait_for_file(path: str, proc: subprocess.Popen, timeout: float) -> None:
    start = time.monotonic()
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() - start > timeout:
            raise RuntimeError(f"the Dask scheduler did not start (see {os.path.dirname(path)}/scheduler.log)")
        time.sleep(0.1)


@contextlib.contextmanager
def local_cluster(n: int, *, quiet: bool = False) -> Iterator[Any]:
    """A ``distributed.Client`` on a ``dask scheduler`` process with ``n`` pinned worker processes (all
    three kinds of process started like on a cluster, so none of them shares this process's state)."""
    from dask.distributed import Client

    gpus = gpu_ids(n)
    folder = tempfile.mkdtemp(prefix="convlab-sweep-")
    address_file = os.path.join(folder, "scheduler.json")
    procs: list[subprocess.Popen] = []
    ok = False
    try:
        procs.append(_start([sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", "0",
                             "--no-dashboard", "--scheduler-file", address_file],
                            os.path.join(folder, "scheduler.log")))
        _wait_for_file(address_file, procs[0], START_TIMEOUT)
        time.sleep(0.2)  # the file is written whole right after creation
        for i, gpu in enumerate(gpus):
            env = dict(os.environ)
            # No statistical profiler in the workers: it calls sys._current_frames() every 10 ms, which
            # on CPython 3.11 can deadlock with a thread being started while a gc callback (distributed's
            # GC diagnosis) runs, and the simulator starts one thread per CUDA thread (seen: a worker
            # idle for minutes, its main thread waiting for the GIL inside _current_frames).
            env.setdefault("DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED", "False")
            if gpu is not None:
                env["CUDA_VISIBLE_DEVICES"] = gpu
            procs.append(_start(worker_command(address_file, f"gpu{i}", folder),
                                os.path.join(folder, f"worker{i}.log"), env))
        with Client(scheduler_file=address_file, timeout=START_TIMEOUT) as client:
            client.wait_for_workers(n, timeout=START_TIMEOUT)
            if not quiet:
                print(f"local cluster: {n} worker process(es) "
                      + (f"on GPUs {','.join(gpus)}" if gpus[0] is not None else "(CUDA simulator)")
                      + f", scheduler {client.scheduler.address}", flush=True)
            yield client
        ok = True
    finally:
        for p in reversed(procs):  # workers first, the scheduler last
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if ok:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            print(f"sweep: the scheduler and worker logs are in {folder}", file=sys.stderr)


@contextlib.contextmanager
def connect(scheduler: str) -> Iterator[Any]:
    """A ``distributed.Client`` on an existing cluster; ValueError when no worker offers a GPU resource."""
    from dask.distributed import Client

    try:
        client = Client(scheduler, timeout=30)
    except OSError as exc:
        raise ValueError(f"cannot reach the Dask scheduler at {scheduler!r} ({exc})") from None
    with client:
        workers = client.scheduler_info(n_workers=-1)["workers"].values()
        if not any(w.get("resources", {}).get("GPU") for w in workers):
            raise ValueError(f"no worker of {scheduler} offers the GPU resource: start one worker per GPU "
                             "with 'CUDA_VISIBLE_DEVICES=<i> dask worker <scheduler> --nthreads 1 "
                             "--resources GPU=1'")
        yield client


@contextlib.contextmanager
def client_for(workers: int | None, scheduler: str | None, *, quiet: bool = False) -> Iterator[Any]:
    """The client of ``--workers N`` (a local cluster) or ``--scheduler ADDRESS`` (an existing one)."""
    if (workers is None) == (scheduler is None):
        raise ValueError("give exactly one of workers (a local cluster) or scheduler (an existing one)")
    with (local_cluster(workers, quiet=quiet) if scheduler is None else connect(scheduler)) as client:
        yield client


def worker_info(dask_worker: Any = None) -> dict[str, Any]:
    """Run on a worker (in a task, or through ``client.run``, which passes ``dask_worker``): its name,
    host, GPU pin, device and tuning-cache file name."""
    import socket

    from dask.distributed import get_worker

    from convlab import runtime
    from convlab.autotune.cache import file_name

    device, cc = runtime.device_name(), runtime.compute_capability()
    return {"worker": str((dask_worker or get_worker()).name), "host": socket.gethostname(),
            "gpu": os.environ.get("CUDA_VISIBLE_DEVICES", ""), "device": device,
            "compute_capability": list(cc), "cache_file": file_name(device, cc)}
