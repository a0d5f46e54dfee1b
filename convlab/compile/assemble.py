"""One kernel from Numba to PTX (NVVM) and to a cubin (ptxas), with what ptxas reports.

    lower(dispatcher, argtypes, cc)  -> code library: typing and lowering, Numba's own _Kernel path,
                                        the jit options of the dispatcher (the slow step: seconds)
    ptx_of(library, target)          -> PTX text for the target's arch (NVVM: a fraction of a second)
    assemble(ptx, target, ...)       -> Assembly: registers, spills, stack frame, static shared
                                        memory, barriers, warnings, errors (``ptxas -v``)
    normalised(ptx) / ptx_hash(ptx)  -> the PTX without comments, debug lines and mangled names, and
                                        its SHA-256 (equal across commits that moved but did not change
                                        a kernel)

numba-cuda 0.30's lowering depends on the compute capability only below 7.5 (``mathimpl``'s fast tanh,
``nvvmutils``'s fp64 atomics): every named target is 8.0 or newer, so a kernel is lowered once and its
PTX emitted per target. ptxas is the ``nvidia-cuda-nvcc`` wheel's (the ``compile`` extra), else the
first on PATH; an older ptxas than NVVM gets the PTX ``.version`` it accepts.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from convlab.runtime.targets import Target

INSTALL_HINT = ('pip install "convlab[compile]" (the nvidia-cuda-nvcc wheel), or put a CUDA 13 ptxas '
                "on PATH")
#: ptxas warnings that are errors: wgmma serialised (C7510: across a function call, C7515: accumulator
#: registers written by other instructions inside the pipeline), setmaxnreg ignored (C7508: no register cap
#: at the kernel's entry, or the roles not one branch each: ../shared/HOPPER.md)
FATAL_WARNINGS = ("C7510", "C7515", "C7508")


def lower(dispatcher: Any, argtypes: tuple) -> Any:
    """The code library of ``dispatcher`` compiled for ``argtypes`` with its own jit options (the
    current target's compute capability: call inside ``convlab.runtime.targets.using``)."""
    from convlab import runtime

    return runtime.lower_kernel(dispatcher, argtypes)


def ptx_of(library: Any, target: Target) -> str:
    """The PTX of a lowered kernel for ``target`` (sm_90a for 9.0: numba-cuda's choice there)."""
    cc = target.cc
    return library.get_asm_str(cc=(cc[0], cc[1], "a" if cc >= (9, 0) else ""))


def normalised(ptx: str) -> str:
    """PTX lines without comments, blank lines, ``.file`` / ``.loc`` debug lines and mangled symbol
    names (they hold module paths), and Numba's process-wide counters in its shared arrays' names
    (``_cudapy_smem_16``: numbered in the order they appear, as a kernel compiled alone would have them)."""
    lines = []
    for line in ptx.splitlines():
        line = line.split("//")[0].rstrip()
        if not line.strip() or line.lstrip().startswith((".file", ".loc")):
            continue
        lines.append(re.sub(r"_Z[\w$]+", "SYM", line))
    text = "\n".join(lines)
    counters: dict[str, str] = {}
    return re.sub(r"_cudapy_([A-Za-z]+)_\d+",
                  lambda m: counters.setdefault(m.group(0), f"_cudapy_{m.group(1)}_{len(counters)}"), text)


def ptx_hash(ptx: str) -> str:
    return hashlib.sha256(normalised(ptx).encode()).hexdigest()


@functools.cache
def ptxas_path() -> str | None:
    """The ptxas to use: ``$CONVLAB_PTXAS`` when set (empty or ``none``: no ptxas), else the
    nvidia-cuda-nvcc wheel's, else one on PATH, else None."""
    chosen = os.environ.get("CONVLAB_PTXAS")
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "none") else chosen.strip()
    try:
        import nvidia.cu13 as cu13  # the CUDA 13 wheels' namespace

        for root in getattr(cu13, "__path__", []):
            candidate = Path(root) / "bin" / "ptxas"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    except ImportError:
        pass
    return shutil.which("ptxas")


@functools.cache
def ptxas_release(path: str) -> tuple[int, int] | None:
    """(major, minor) of a ptxas's CUDA release (13, 5), None when it does not say."""
    text = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    found = re.search(r"release (\d+)\.(\d+)", text)
    return (int(found[1]), int(found[2])) if found else None


def _for_ptxas(ptx: str, path: str) -> str:
    """The PTX with its ``.version`` lowered to what an older ptxas accepts (PTX ISA 9.x pairs with
    CUDA 13.x); unchanged when the ptxas is as new as the PTX."""
    release = ptxas_release(path)
    found = re.search(r"^\.version (\d+)\.(\d+)", ptx, flags=re.M)
    if release is None or found is None:
        return ptx
    accepted = (release[0] - 4, release[1])
    if (int(found[1]), int(found[2])) <= accepted:
        return ptx
    return re.sub(r"^\.version \S+", f".version {accepted[0]}.{accepted[1]}", ptx, count=1, flags=re.M)


@dataclass
class Assembly:
    """What ptxas reported for one kernel on one target (None: not assembled)."""

    registers: int | None = None
    barriers: int | None = None
    static_shared: int | None = None
    stack_frame: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    warnings: list[str] = field(default_factory=list)
    error: str = ""
    note: str = ""  # why it was not assembled (no ptxas): not a failure
    cubin: bytes | None = field(default=None, repr=False)  # ptxas's output, kept when asked (keep_cubin)


def _number(pattern: str, text: str) -> int | None:
    found = re.search(pattern, text)
    return int(found[1]) if found else None


def assemble(ptx: str, target: Target, *, max_registers: int | None = None, ptxas: str | None = None,
             keep_cubin: bool = False) -> Assembly:
    """``ptxas -arch=<target.arch> -v`` on ``ptx`` (``-maxrregcount`` when the kernel caps registers);
    ``keep_cubin``: the cubin ptxas wrote is kept in ``Assembly.cubin`` (no second ptxas run)."""
    path = ptxas or ptxas_path()
    if path is None:
        return Assembly(note="not assembled, ptxas not found: " + INSTALL_HINT)
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        Path(src).write_text(_for_ptxas(ptx, path))
        cmd = [path, f"-arch={target.arch}", "-v", src, "-o", dst]
        if max_registers:
            cmd.insert(1, f"-maxrregcount={int(max_registers)}")
        done = subprocess.run(cmd, capture_output=True, text=True)
        cubin = Path(dst).read_bytes() if keep_cubin and not done.returncode and os.path.exists(dst) else None
    text = done.stdout + done.stderr
    out = Assembly(registers=_number(r"Used (\d+) registers", text),
                   barriers=_number(r"used (\d+) barriers", text) or 0,
                   static_shared=_number(r"(\d+) bytes smem", text) or 0,
                   stack_frame=_number(r"(\d+) bytes stack frame", text),
                   spill_stores=_number(r"(\d+) bytes spill stores", text),
                   spill_loads=_number(r"(\d+) bytes spill loads", text),
                   warnings=[line.strip() for line in text.splitlines() if "warning" in line.lower()],
                   cubin=cubin)
    if done.returncode:
        out.error = "ptxas: " + " | ".join(line.strip() for line in text.splitlines()
                                           if "error" in line.lower() or "fatal" in line.lower())[:800]
    return out
