"""The autotuner's cache: tuning keys, plugin fingerprints, and one JSON file per device.

Where: ``$CONVLAB_CACHE_DIR`` if set, else platformdirs' user cache dir for ``convlab`` (for example
``~/.cache/convlab``); one file per device model and compute capability, e.g.
``autotune-nvidia-h200-sm90.json``. Layout of the file::

    {"format": 1, "entries": {"<tuning key>": {"winner": "<label>", "version": "0.1.0",
                                                "plugins": {"<name>": "<sha256>"}, "candidates": [...],
                                                "results": [{"label", "median_ms", "status"}], ...}}}

Writes are atomic (temp file in the same folder + ``os.replace``) and merge-on-write under an exclusive
``fcntl.flock`` on ``<file>.lock``, so two processes tuning at once keep each other's entries. A corrupt
or unreadable file gives a RuntimeWarning and is rebuilt on the next write; a folder that cannot be
written leaves the cache in memory only (with a warning). Nothing here ever raises into an op.
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import re
import sys
import threading
import types
import warnings
from pathlib import Path
from typing import Any, Iterator

from convlab.runtime.fileio import atomic_write_json
from convlab.runtime import settings
from convlab.runtime.settings import KEY_POLICIES
from convlab.plugin.contract import Algorithm, Config
from convlab.problem import Problem

try:  # POSIX advisory locks; elsewhere writes stay atomic but are not merged under a lock
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

FORMAT = 1


# ---- where --------------------------------------------------------------------------------------
def file_name(device: str, capability: tuple[int, int]) -> str:
    """``autotune-<device slug>-sm<major><minor>.json``."""
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") or "device"
    return f"autotune-{slug}-sm{capability[0]}{capability[1]}.json"


# ---- keys ---------------------------------------------------------------------------------------
def _pow2(value: int) -> int:
    return 1 if value <= 1 else 1 << (int(value) - 1).bit_length()


def tuning_key(problem: Problem, policy: str = "exact", deterministic: bool = False,
               precision: str | None = None) -> str:
    """The text key a tuning result is stored under.

    Exact: op, dtype, every size, stride/padding/dilation/groups/bias. ``pow2`` rounds the batch and the
    spatial sizes (n, h, w, p, q) up to powers of two, so nearby shapes share one entry; channels and
    kernel sizes stay exact. Both add whether each GEMM dimension (M, N, K of problem.gemm_shape() of the
    real problem) is divisible by 16, the policy and the deterministic mode. A float32 problem under
    float32 precision "high" (``precision``, default the current setting) is keyed ``float32+high``
    (TF32 plugins are candidates only then); "highest" keeps the plain ``float32`` key.
    """
    if policy not in KEY_POLICIES:
        raise ValueError(f"key policy must be one of {KEY_POLICIES}, got {policy!r}")
    rnd = _pow2 if policy == "pow2" else int
    pr = problem
    div = "".join(f"{name}{int(dim % 16 == 0)}" for name, dim in zip("MNK", pr.gemm_shape()))
    pair = "{0[0]}x{0[1]}".format
    mode = precision or settings.get_float32_precision()
    dtype = "float32+high" if pr.dtype == "float32" and mode == "high" else pr.dtype
    return (f"{pr.op}|{dtype}|n{rnd(pr.n)}|c{pr.c}|h{rnd(pr.h)}|w{rnd(pr.w)}|k{pr.k}|r{pr.r}|s{pr.s}"
            f"|p{rnd(pr.p)}|q{rnd(pr.q)}|st{pair(pr.stride)}|pd{pair(pr.padding)}|dl{pair(pr.dilation)}"
            f"|g{pr.groups}|b{int(pr.bias)}{_depth_key(pr, rnd)}|div16={div}|{policy}"
            f"|{'det' if deterministic else 'any'}")


def _depth_key(pr: Problem, rnd: Any) -> str:
    """The depth axis of a 3D problem in its tuning key ("" for 1D and 2D, whose keys name none)."""
    if pr.ndim != 3:
        return ""
    return (f"|3d|d{rnd(pr.d)}|t{pr.t}|o{rnd(pr.do)}|std{pr.stride_d}|pdd{pr.padding_d}"
            f"|dld{pr.dilation_d}")


# ---- fingerprints -------------------------------------------------------------------------------
_TRACKED_PREFIXES = ("convlab.algorithms.", "convlab.kernels.")


def _tracked(name: str | None) -> bool:
    return bool(name) and name.startswith(_TRACKED_PREFIXES)


def _related_modules(module: types.ModuleType) -> list[types.ModuleType]:
    """``module`` and, recursively, the modules it uses from convlab.algorithms or convlab.kernels."""
    seen: dict[str, types.ModuleType] = {module.__name__: module}
    todo = [module]
    while todo:
        for value in list(vars(todo.pop()).values()):
            name = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__",
                                                                                       None)
            if isinstance(name, str) and _tracked(name) and name not in seen and name in sys.modules:
                seen[name] = sys.modules[name]
                todo.append(sys.modules[name])
    return [seen[k] for k in sorted(seen)]


def _source_of(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


def plugin_fingerprint(plugin: Algorithm, configs: list[Config]) -> str:
    """sha256 over the plugin's module source (plus the convlab.algorithms / convlab.kernels modules it
    uses), its class name and the names of its configs for the problem. Editing the kernel, or changing
    the configs it offers, changes the fingerprint."""
    cls = type(plugin)
    digest = hashlib.sha256(f"{cls.__module__}.{cls.__qualname__}\n".encode())
    module = sys.modules.get(cls.__module__)
    sources = [_source_of(m) for m in _related_modules(module)] if module is not None else []
    if not any(sources):  # defined interactively: fall back to the class source, then its bytecode
        sources = [_source_of(cls) or repr([f.__code__.co_code for f in vars(cls).values()
                                            if hasattr(f, "__code__")])]
    for text in sources:
        digest.update(text.encode())
        digest.update(b"\0")
    digest.update("\n".join(c.name for c in configs).encode())
    return digest.hexdigest()


# ---- the file -----------------------------------------------------------------------------------
class TuningCache:
    """Entries in memory, backed by one JSON file. Thread-safe; safe with several processes."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._entries: dict[str, dict] = {}
        self._stamp: tuple[int, int] | None = None  # (mtime_ns, size) of the file last read
        self._lock = threading.RLock()
        self._warned: set[str] = set()

    # -- reading ------------------------------------------------------------------------------------
    def _warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            warnings.warn(f"convlab autotune cache: {message}", RuntimeWarning, stacklevel=4)

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def _read_disk(self) -> dict[str, dict]:
        """The file's entries; {} when absent; {} and a warning when corrupt or unreadable."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            self._warn(f"cannot read {self.path} ({exc}); using memory only")
            return {}
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("format") != FORMAT \
                    or not isinstance(data.get("entries"), dict):
                raise ValueError("not a convlab tuning cache of format %d" % FORMAT)
        except ValueError as exc:
            self._warn(f"{self.path} is corrupt ({exc}); it will be rebuilt")
            return {}
        return {k: v for k, v in data["entries"].items() if isinstance(k, str) and isinstance(v, dict)}

    def _refresh(self) -> None:
        """Merge the file into memory when it changed since the last read (memory keeps its own)."""
        stamp = self._file_stamp()
        if stamp is not None and stamp != self._stamp:
            disk = self._read_disk()
            self._stamp = stamp
            for key, entry in disk.items():
                mine = self._entries.get(key)
                if mine is None or entry.get("written_at", 0) > mine.get("written_at", 0):
                    self._entries[key] = entry

    def get(self, key: str) -> dict | None:
        """The entry under ``key`` (memory first, then the file if it changed), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self._refresh()
                entry = self._entries.get(key)
            return entry

    def entries(self) -> dict[str, dict]:
        """All entries known (memory merged with the file)."""
        with self._lock:
            self._refresh()
            return dict(self._entries)

    # -- writing ------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a+") as handle:
            if fcntl is not None:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                if fcntl is not None:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _write_atomic(self, entries: dict[str, dict]) -> None:
        atomic_write_json(self.path, {"format": FORMAT, "entries": entries}, indent=1, sort_keys=True)

    def put(self, key: str, entry: dict) -> bool:
        """Store ``entry`` in memory and merge it into the file; False when the file could not be
        written (the entry then lives in memory only)."""
        import time

        entry = dict(entry, written_at=time.time())
        with self._lock:
            self._entries[key] = entry
            try:
                with self._file_lock():
                    disk = self._read_disk()
                    disk[key] = entry
                    self._write_atomic(disk)
                    self._stamp = self._file_stamp()
                    for k, v in disk.items():
                        self._entries.setdefault(k, v)
                return True
            except OSError as exc:
                self._warn(f"cannot write {self.path} ({exc}); keeping results in memory only")
                return False

    def merge(self, entries: dict[str, dict]) -> int:
        """Merge entries as stored elsewhere (another process's or machine's file, ``written_at``
        kept) into memory and the file, under the lock, keeping whichever of two entries for one key
        was written later; returns how many changed the file (0: nothing is written)."""
        with self._lock:
            try:
                with self._file_lock():
                    disk = self._read_disk()
                    newer = {k: v for k, v in entries.items()
                             if v.get("written_at", 0) > disk.get(k, {}).get("written_at", -1)}
                    if newer:
                        disk.update(newer)
                        self._write_atomic(disk)
                        self._stamp = self._file_stamp()
                    self._entries.update(disk)
                return len(newer)
            except OSError as exc:
                self._warn(f"cannot write {self.path} ({exc}); keeping results in memory only")
                self._entries.update(entries)
                return 0

    def clear(self, *, memory: bool = True, disk: bool = True) -> None:
        """Forget the entries in memory and/or delete the file."""
        with self._lock:
            if memory:
                self._entries.clear()
                self._stamp = None
                self._warned.clear()
            if disk:
                try:
                    with self._file_lock():
                        self.path.unlink(missing_ok=True)
                except OSError as exc:
                    self._warn(f"cannot delete {self.path} ({exc})")
                self._stamp = None
