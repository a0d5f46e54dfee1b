"""Tuning and benchmark sweeps over every GPU of a host, or over a cluster, on ``dask.distributed``.

A sweep is one Dask task per (shape, op, dtype) of some suites, each holding one ``GPU`` resource of a
worker that has one GPU and one thread; the scheduler spreads them, runs again the task of a worker that
died, and the client merges what comes back:

- :mod:`.cluster`: a local cluster (``--workers N``: one ``dask worker`` process per GPU, pinned with
  ``CUDA_VISIBLE_DEVICES``) or an existing one (``--scheduler ADDRESS``);
- :mod:`.core`: the tasks, the client settings a worker applies, the submit / progress / collect loop;
- :mod:`.tune`: ``convlab tune``: entries merged into the per-device-model tuning cache files;
- :mod:`.bench`: ``convlab bench``: one report of all workers (``worker`` and ``device`` columns) and a
  journal to resume from.

Needs the ``distributed`` extra (``pip install "convlab[distributed]"``); ``import convlab`` does not
import this package or Dask.
"""
from .core import DTYPE_TOKENS, Task, expand, parse_dtypes

__all__ = ["DTYPE_TOKENS", "Task", "expand", "parse_dtypes"]
