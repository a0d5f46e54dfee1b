"""Atomic file writes: the one writer behind the tuning cache, the bench results and any other file
convlab writes that a reader (another process, a crash) must never see half-written.

``atomic_write(path, data)`` writes ``data`` (str or bytes) to a temporary file in the same folder,
flushes and fsyncs it, gives it the permissions a plain ``open(path, "w")`` would (0666 less the
process umask; ``mkstemp`` alone would leave 0600), and renames it over ``path`` (atomic on POSIX and
Windows). On any failure the temporary file is removed and the old ``path`` is left as it was.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

_umask_lock = threading.Lock()


def _umask() -> int:
    """The process umask (read by setting and restoring it, under a lock)."""
    with _umask_lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see the module docstring); creates missing folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any, **dump_kwargs: Any) -> Path:
    """``atomic_write`` of ``json.dumps(obj, **dump_kwargs)`` plus a final newline (``default=str``
    unless given)."""
    dump_kwargs.setdefault("default", str)
    return atomic_write(path, json.dumps(obj, **dump_kwargs) + "\n")
