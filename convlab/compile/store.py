"""``convlab compile --store DIR``: each compiled kernel's cubin written into a kernel store.

    put(dispatcher, argtypes, library, target, cubin, where) -> {"stored": bytes} or {"not_stored": why}

The cubin is the one ptxas wrote while the kernel was assembled for ``target`` (``-arch`` sm_80, or
sm_90a for 9.0: the arch numba-cuda links for on a 9.0 device, the one wgmma needs), so storing costs no
compile work beyond the write. It is filed under the key the runtime computes when it launches that
kernel with those argument types on a GPU of that arch (:func:`convlab.runtime.kernel_cache.launch_key`),
in the kernel cache's file format (:mod:`convlab.runtime.kernel_store`), with the kernel's entry name.

numba-cuda 0.30 links a launched kernel from its LTO-IR with nvJitLink (``lto`` is on by default);
ptxas's cubin is built from the PTX that NVVM emits for the same IR, with the same arch and register cap:
the same kernel, though not the same bytes, and the very binary this command checked (registers,
spills, ptxas warnings). Linking with nvJitLink here as well would cost 1.24 s a kernel beside
ptxas's 0.49 s and the lowering's 8.2 s (one implicit GEMM kernel, sm_90a, this machine's CPUs).
A kernel that links other code (``link=`` files, the device runtime, NRT's module setup) or runs in
debug or cooperative mode is not stored: the runtime compiles those.
"""
from __future__ import annotations

from typing import Any

from convlab.runtime import kernel_cache, kernel_store
from convlab.runtime.targets import Target


def why_not(dispatcher: Any, library: Any) -> str:
    """'' when ptxas's cubin of ``library``'s single PTX is the kernel numba-cuda would link, else why not."""
    options = getattr(dispatcher, "targetoptions", None) or {}
    if options.get("debug") or options.get("cooperative"):
        return "debug or cooperative kernel"
    if getattr(library, "_linking_files", None) or getattr(library, "needs_cudadevrt", False):
        return "links other code"
    if getattr(library, "_setup_functions", None) or getattr(library, "_teardown_functions", None):
        return "needs module setup (NRT)"
    if not getattr(library, "_entry_name", None):
        return "no entry name"
    return ""


def put(dispatcher: Any, argtypes: tuple, library: Any, target: Target, cubin: bytes | None,
        where: str) -> dict[str, Any]:
    """Write the kernel's ``cubin`` for ``target`` into the store ``where`` (see the module docstring)."""
    why = why_not(dispatcher, library)
    if why:
        return {"not_stored": why}
    if cubin is None:
        return {"not_stored": "no cubin (ptxas failed or was not found)"}
    key = kernel_cache.launch_key(dispatcher, argtypes, target.key)
    kernel_store.write(key, library._entry_name, cubin, where)
    return {"stored": len(cubin), "store_key": key}
