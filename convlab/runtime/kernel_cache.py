"""Disk cache of compiled kernels (cubins), so a new process compiles nothing an earlier one compiled.

Switched on with ``CONVLAB_KERNEL_CACHE=1`` (GPU only; off by default: switch it on where
``tests/core/test_replay_on_device.py`` passes, whose second process loads every kernel from disk). With it,
or with a kernel store (:mod:`convlab.runtime.kernel_store`: prebuilt cubins, ``CONVLAB_KERNEL_STORE``),
every launch of a :func:`convlab.runtime.jit` kernel asks :func:`compiled` for the kernel of its argument
types:

1. in this process: the overload Numba already compiled, or a cubin loaded before;
2. in the kernel store, read-only: ``<store>/<key>.cubin``;
3. on disk (cache on): ``<cache_dir>/kernels/<key>.cubin`` (``cache_dir`` is the autotuner's,
   ``CONVLAB_CACHE_DIR``); 2 and 3 are loaded into Numba's context without typing, lowering or linking;
4. else Numba compiles it, and with the cache on its cubin is written to disk.

Where each kernel came from is counted (:mod:`convlab.runtime.origin`).

The key (:func:`kernel_key`) hashes the kernel's qualified name, the bytes of its defining source file
and of every convlab source file, the compile-time constants of factory closures (cell values, numpy
arrays by their bytes; captured kernels and device functions by their own key), for generated source
(``convlab.kernels.source.compile_source``: a ``<...>`` file name) the generated code itself and the
namespace values it names (tile constants, intrinsics), the jit options, the argument types, the
target (its arch: convlab.runtime.targets) and the numba / numba-cuda versions. A file is a header (magic,
format version, payload length, SHA-256 of the payload, the key it was written for), the entry name and
the cubin; a truncated, corrupted or foreign (written for another key) file is reported with a warning,
removed (the store's are left: it is read-only) and recompiled. Files are written to a temporary name in
the same directory and renamed (atomic), so two processes writing the same kernel at once leave one
whole file.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from convlab.runtime import context
from convlab.runtime import device as runtime
from convlab.runtime import kernel_store, origin
from convlab.runtime.kernel_store import FORMAT, MAGIC, decode, encode  # noqa: F401  (the file format)
from convlab.runtime.fileio import atomic_write

log = logging.getLogger(__name__)
#: kernels by where they came from, and the names of those this process compiled (process-wide counters;
#: "loaded": from the disk cache, "store": from the kernel store)
stats = {"compiled": 0, "loaded": 0, "store": 0, "in_process": 0}
compiled_names: list[str] = []  # "qualname(argtypes)@key" of each kernel this process compiled (diagnostics)


def _memo() -> dict[tuple, tuple[Any, Any]]:
    """The current device's loaded kernels: (id(dispatcher), argtypes) -> (dispatcher, kernel or False)
    (the context's "kernel_cache" store: modules loaded into this device's context)."""
    return context.current().store("kernel_cache")


def disk_enabled() -> bool:
    """True when ``CONVLAB_KERNEL_CACHE=1`` (the disk cache is read and written)."""
    return os.environ.get("CONVLAB_KERNEL_CACHE", "0").strip() == "1"


def enabled() -> bool:
    """True when launches go through this module: on a GPU, with the disk cache on or a kernel store
    found (see the module docstring)."""
    return runtime.MODE == "gpu" and (disk_enabled() or kernel_store.directory() is not None)


def directory() -> Path:
    """``<autotuner cache dir>/kernels``."""
    from convlab.runtime.settings import cache_dir

    return cache_dir() / "kernels"


@functools.lru_cache(maxsize=None)
def _file_digest(path: str) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "unreadable:" + path


@functools.lru_cache(maxsize=1)
def _package_digest() -> str:
    """One hash of every convlab and built-in plugin source file (any edit invalidates all)."""
    spec = importlib.util.find_spec("convlab.algorithms")  # located, not imported
    roots = [Path(__file__).parents[1]] + ([Path(spec.origin).parent] if spec and spec.origin else [])
    files = sorted({str(p) for root in roots for p in root.rglob("*.py")})
    return hashlib.sha256("".join(_file_digest(f) for f in files).encode()).hexdigest()


def _py_func(kernel: Any) -> Any:
    kernel = getattr(kernel, "dispatcher", kernel)
    return (getattr(kernel, "py_func", None) or getattr(kernel, "fn", None)
            or getattr(kernel, "_defn", None) or kernel)  # _defn: a Numba intrinsic's typing function


def _describe(value: Any, depth: int = 0) -> str:
    """A process-independent description of a closure cell / constant."""
    if isinstance(value, (bool, int, float, str, bytes, type(None), np.generic, np.dtype)):
        return f"{type(value).__name__}:{value!r}"
    nbtypes = sys.modules.get("numba.core.types")  # none before Numba is imported
    if nbtypes is not None and isinstance(value, nbtypes.Type):  # by its name (float16 and bfloat16 differ)
        return f"nbtype:{value}"
    if isinstance(value, np.ndarray):
        return f"ndarray:{value.dtype.str}{value.shape}:{hashlib.sha256(value.tobytes()).hexdigest()}"
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_describe(v, depth) for v in value) + ")"
    func = _py_func(value)
    if callable(func) and hasattr(func, "__code__") and depth < 8:
        return "fn:" + _function_digest(func, depth + 1)
    return f"type:{type(value).__module__}.{type(value).__qualname__}"


def _names(code: Any) -> list[str]:
    """Every global name ``code`` and its nested code objects read."""
    names = list(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names += _names(const)
    return names


def _code_text(code: Any) -> str:
    """A process-independent text of a code object: bytecode, names and constants (nested code too)."""
    consts = [_code_text(c) if hasattr(c, "co_code") else
              repr(sorted(map(repr, c)) if isinstance(c, frozenset) else c) for c in code.co_consts]
    return "|".join([code.co_code.hex(), repr(code.co_names), repr(code.co_varnames), *consts])


def _generated(func: Any, depth: int) -> str:
    """For a function compiled from generated source (a ``<...>`` file name, which need not encode
    every parameter and is shared by variants): its code and the values of the namespace globals it
    names (tile constants, intrinsics)."""
    code = func.__code__
    if not code.co_filename.startswith("<"):
        return ""
    names = sorted(set(n for n in _names(code) if n in func.__globals__ and not n.startswith("__")))
    values = ",".join(f"{n}={_describe(func.__globals__[n], depth)}" for n in names)
    return hashlib.sha256((_code_text(code) + values).encode()).hexdigest()


def _function_digest(func: Any, depth: int = 0) -> str:
    cells = tuple(c.cell_contents for c in (func.__closure__ or ()))
    parts = [str(func.__module__), func.__qualname__, _file_digest(func.__code__.co_filename),
             _generated(func, depth), _describe(cells, depth)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def kernel_key(kernel: Any, argtypes: tuple, target: Any, options: dict | None = None) -> str:
    """The cache key of ``kernel`` compiled for ``argtypes`` for ``target`` (a target's ``key``, its
    arch such as ``sm_90a``)."""
    versions = runtime.versions()
    parts = [_function_digest(_py_func(kernel)), _package_digest(),
             _describe(tuple(sorted((options or {}).items()))),
             repr(tuple(str(t) for t in argtypes)), repr(target), versions["numba"],
             versions["numba_cuda"], str(FORMAT)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def save(key: str, entry: str, payload: bytes, where: Path | None = None) -> Path:
    """Write one entry atomically (convlab.runtime.fileio.atomic_write)."""
    where = where or directory()
    atomic_write(where / f"{key}.cubin", encode(key, entry, payload))
    return where / f"{key}.cubin"


def load(key: str, where: Path | None = None) -> tuple[str, bytes] | None:
    """(entry name, payload) of ``key``; None when absent, or when the file is damaged or foreign (a
    warning; the file is removed so that the recompiled kernel replaces it)."""
    path = (where or directory()) / f"{key}.cubin"
    found, damage = kernel_store.read(path, key)
    if damage:
        warnings.warn(f"convlab: kernel cache file {path} is {damage}; recompiling", RuntimeWarning, stacklevel=2)
        with contextlib.suppress(OSError):
            path.unlink()
    return found


def cubin_bytes(cubin: Any) -> bytes:
    """The bytes of what ``get_cubin`` returns: bytes (older numba-cuda) or a cuda.core ObjectCode
    (numba-cuda 0.30: its ``code``), never a ``bytes(obj)`` of the object itself."""
    if isinstance(cubin, (bytes, bytearray, memoryview)):
        return bytes(cubin)
    code = getattr(cubin, "code", None)
    if isinstance(code, (bytes, bytearray, memoryview)):
        return bytes(code)
    raise TypeError(f"cannot read the cubin bytes of a {type(cubin).__name__}")


def _object_code(payload: bytes) -> Any:
    """What numba-cuda's ``create_module_image`` loads: a cuda.core ObjectCode of the cubin."""
    try:
        from cuda.core import ObjectCode
    except ImportError:  # older cuda.core
        from cuda.core.experimental import ObjectCode
    return ObjectCode.from_cubin(payload)


class CompiledKernel:
    """A kernel loaded for the current context: its launch handle, Numba argument types and where it
    came from ("store", "disk" or "compiled": convlab.runtime.origin)."""

    def __init__(self, handle: Any, argtypes: tuple, module: Any = None, where: str = "compiled") -> None:
        self.handle, self.argtypes, self.module, self.origin = handle, argtypes, module, where


def launch_key(dispatcher: Any, argtypes: tuple, target_key: str) -> str:
    """The key of ``dispatcher`` launched with ``argtypes`` on a target of ``target_key`` (its arch):
    the runtime's at a launch and ``convlab compile --store``'s, one function for both."""
    options = getattr(dispatcher, "targetoptions", None) or {}
    return kernel_key(dispatcher, argtypes, target_key, options)


def compiled(dispatcher: Any, args: tuple) -> CompiledKernel | None:
    """The compiled kernel for ``args`` (memory, store, disk, else compiled by Numba and saved); None
    when it cannot be cached (a failure is logged and the caller takes Numba's ordinary launch)."""
    try:
        argtypes = tuple(dispatcher.typeof_pyval(a) for a in args)
    except Exception:
        return None
    memo_key = (id(dispatcher), argtypes)
    memo = _memo()
    hit = memo.get(memo_key)
    # An entry holds its dispatcher, so no other kernel takes that id while the entry lives (keyed by
    # the id alone, a new kernel at a freed kernel's address once ran the old kernel's code on the GPU).
    if hit is not None and hit[0] is dispatcher:
        if hit[1]:
            origin.launched(dispatcher, getattr(hit[1], "origin", "compiled"))
        return hit[1] or None  # False: failed before, not retried every launch
    try:
        found = _load_or_compile(dispatcher, argtypes)
    except Exception as exc:  # noqa: BLE001  (the ordinary launch still works)
        log.warning("kernel cache: %s not cached (%s: %s)", _py_func(dispatcher).__qualname__,
                    type(exc).__name__, exc)
        memo[memo_key] = (dispatcher, False)
        return None
    memo[memo_key] = (dispatcher, found)
    origin.launched(dispatcher, getattr(found, "origin", "compiled"))
    return found


def _loaded(hit: tuple[str, bytes], argtypes: tuple, where: str) -> CompiledKernel:
    """A cubin ``(entry name, bytes)`` loaded into the current context."""
    module = runtime.cuda.current_context().create_module_image(_object_code(hit[1]), [], [])
    function = module.get_function(hit[0])
    return CompiledKernel(function.handle, argtypes, (module, function), where)


def _load_or_compile(dispatcher: Any, argtypes: tuple) -> CompiledKernel:
    options = getattr(dispatcher, "targetoptions", None) or {}
    if options.get("debug") or options.get("cooperative"):
        raise ValueError("debug and cooperative kernels are not cached")
    name = _py_func(dispatcher).__qualname__
    key = launch_key(dispatcher, argtypes, runtime.target().key)
    overload = dispatcher.overloads.get(argtypes)
    disk = disk_enabled()
    if overload is None:
        for where, find in (("store", kernel_store.load), ("disk", load if disk else None)):
            hit = None if find is None else find(key)
            if hit is not None:
                log.info("kernel cache: %s loaded from the %s (%s)", name, where, key[:12])
                stats["store" if where == "store" else "loaded"] += 1
                origin.count(where)
                return _loaded(hit, argtypes, where)
        log.info("kernel cache: compiling %s for %s (%s)", name, ", ".join(map(str, argtypes)), key[:12])
        overload = dispatcher.compile(argtypes)
        stats["compiled"] += 1
        origin.count("compiled")
        compiled_names.append(f"{name}({', '.join(map(str, argtypes))})@{key[:12]}")
    else:
        stats["in_process"] += 1
    library = overload._codelibrary
    if library._setup_functions or library._teardown_functions:
        raise ValueError("the kernel needs module setup (NRT); not cached")
    cufunc = library.get_cufunc()
    if disk and load(key) is None:
        # Numba's own arch (get_cufunc's: sm_90a on a 9.0 device); an explicit (9, 0) links for sm_90,
        # which rejects wgmma (measured on the H200: results/wgmma/h200/9f7b5c1/README.md)
        save(key, cufunc.name, cubin_bytes(library.get_cubin()))
    return CompiledKernel(cufunc.handle, tuple(overload.argument_types))
