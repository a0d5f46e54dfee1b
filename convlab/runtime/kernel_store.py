"""The kernel store: prebuilt cubins that the runtime loads instead of compiling, and their file format.

A store is a directory of ``<key>.cubin`` files in the kernel cache's format, one a kernel compiled for
one target, under the key the runtime computes at that kernel's launch
(:func:`convlab.runtime.kernel_cache.launch_key`: the kernel's code, closure constants, jit options,
argument types, the target's arch, convlab's sources and the numba / numba-cuda versions).
``convlab compile --store DIR`` builds one on any machine with CPUs (ptxas's cubins of the kernels it
compiles: :mod:`convlab.compile.worker`); two builds writing into one store at once leave whole files
(each file is written to a temporary name and renamed).

Which store the runtime reads (:func:`directory`):

    CONVLAB_KERNEL_STORE=DIR     that directory
    CONVLAB_KERNEL_STORE=none    no store ("" and "off" too)
    unset                        ``<cache dir>/store`` when it exists (the cache dir: ``CONVLAB_CACHE_DIR``,
                                 else the user cache directory, e.g. ``~/.cache/convlab/store``)

The runtime only reads a store: a file that is truncated, corrupted or foreign (written for another key)
is reported with a warning, once a file, and the kernel is compiled; a kernel absent from the store
(another convlab, numba-cuda or GPU arch changes every key) is compiled. The store goes with the kernel
cache's launch path (:mod:`convlab.runtime.kernel_cache`), which a store switches on for a GPU.

File format (version :data:`FORMAT`): a header (magic ``CVLKC``, the format, the payload's length, its
SHA-256, the SHA-256 of the key it was written for, the entry name's length), the entry name, the cubin.
"""
from __future__ import annotations

import functools
import hashlib
import os
import struct
import warnings
from pathlib import Path

from convlab.runtime.fileio import atomic_write

MAGIC, FORMAT = b"CVLKC", 2
#: magic, format, payload bytes, sha256(payload), sha256(key), entry-name bytes
_HEADER = struct.Struct("<5sHQ32s32sH")
_OFF = ("", "none", "off", "0")
_warned: set[str] = set()


def _key_bytes(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def encode(key: str, entry: str, payload: bytes) -> bytes:
    """One file's bytes: the header, the entry name, the payload (see the module docstring)."""
    name = entry.encode()
    return _HEADER.pack(MAGIC, FORMAT, len(payload), hashlib.sha256(payload).digest(), _key_bytes(key),
                        len(name)) + name + payload


def decode(key: str, data: bytes) -> tuple[str, bytes]:
    """(entry name, payload) of a file's bytes written for ``key``; ValueError saying what is wrong
    ("damaged": header, length or checksum; "foreign": written for another key)."""
    try:
        magic, fmt, size, digest, written_for, name_len = _HEADER.unpack_from(data)
    except struct.error as exc:
        raise ValueError(f"damaged ({exc})") from None
    body = data[_HEADER.size:]
    name, payload = body[:name_len], body[name_len:]
    if magic != MAGIC or fmt != FORMAT or len(payload) != size or hashlib.sha256(payload).digest() != digest:
        raise ValueError("damaged (header, length or checksum mismatch)")
    if written_for != _key_bytes(key):
        raise ValueError("foreign (written for another key)")
    try:
        return name.decode(), payload
    except UnicodeDecodeError as exc:
        raise ValueError(f"damaged ({exc})") from None


@functools.lru_cache(maxsize=8)
def _resolve(setting: str | None, cache_dir: str | None) -> Path | None:
    if setting is not None:
        return None if setting.strip().lower() in _OFF else Path(setting.strip()).expanduser()
    from convlab.runtime.settings import cache_dir as default_cache_dir

    default = default_cache_dir() / "store"
    return default if default.is_dir() else None


def directory() -> Path | None:
    """The store the runtime reads (see the module docstring); None when there is none. Looked up once
    per value of ``CONVLAB_KERNEL_STORE`` / ``CONVLAB_CACHE_DIR`` (a launch asks it)."""
    return _resolve(os.environ.get("CONVLAB_KERNEL_STORE"), os.environ.get("CONVLAB_CACHE_DIR"))


def write(key: str, entry: str, payload: bytes, where: str | os.PathLike) -> Path:
    """Write one kernel into the store ``where`` atomically (a temporary file renamed over the path)."""
    path = Path(where) / f"{key}.cubin"
    atomic_write(path, encode(key, entry, payload))
    return path


def load(key: str, where: str | os.PathLike | None = None) -> tuple[str, bytes] | None:
    """(entry name, cubin) of ``key`` in the store ``where`` (default: :func:`directory`); None when there
    is no store or no such file, or when the file is damaged or foreign (a warning, once a file; the
    file is left as it is: the store is read-only here)."""
    root = directory() if where is None else Path(where)
    if root is None:
        return None
    path = root / f"{key}.cubin"
    found, damage = read(path, key)
    if damage and str(path) not in _warned:
        _warned.add(str(path))
        warnings.warn(f"convlab: kernel store file {path} is {damage}; compiling the kernel instead",
                      RuntimeWarning, stacklevel=2)
    return found


def read(path: Path, key: str) -> tuple[tuple[str, bytes] | None, str | None]:
    """((entry name, cubin), None) from the file ``path`` written for ``key``; (None, None) when there is
    no such file; (None, what is wrong) when it is damaged or foreign (the store's and the disk cache's
    files alike: :func:`decode`)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None, None
    try:
        return decode(key, data), None
    except ValueError as exc:
        return None, str(exc)


def entries(where: str | os.PathLike) -> tuple[int, int]:
    """(files, bytes) of the store ``where``."""
    files = [p for p in Path(where).glob("*.cubin") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)
