"""Whether this machine has what ``convlab compile`` needs: numba-cuda's CUDA compiler libraries.

    missing() -> [what]     the compiler libraries numba-cuda cannot find (empty: every one is found)
    require()               ToolchainError with one line naming them and the extra that installs them

Lowering a kernel to PTX needs NVVM with its libdevice and NVRTC, which numba-cuda looks up in one
step (``numba.cuda.cuda_paths.get_cuda_paths``: cuda-pathfinder, then its own search of a CUDA
installation), and nvJitLink, which cuda-bindings loads through cuda-pathfinder. The base install
has none of them; the ``compile`` extra (``numba-cuda[cu13]`` and the ``nvidia-cuda-nvcc`` wheel for
ptxas) brings them all. The lookup runs in a compile-only process (``python -m
convlab.compile.toolchain``), the state the compile workers run in, whatever this process's runtime.
ptxas is optional (without it the PTX stage runs and the report says so: :mod:`.assemble`).
"""
from __future__ import annotations

import functools
import importlib
import json
import os
import re
import subprocess
import sys

#: the extra that installs every library :func:`missing` looks for
EXTRA = "compile"


class ToolchainError(RuntimeError):
    """numba-cuda cannot find a CUDA compiler library (the message is one line)."""


_NAMES = {"nvrtc": "NVRTC", "nvvm": "NVVM", "nvjitlink": "nvJitLink"}


def _what(exc: BaseException) -> str:
    """The library an exception of the lookup names ("NVRTC" for 'Failure finding "libnvrtc.so.13 or
    libnvrtc.so.12"'), else the exception's first line."""
    text = str(exc)
    found = re.search(r'Failure finding "([^"]+)"', text)
    name = next((v for k, v in _NAMES.items() if found and k in found[1].lower()), None)
    return name or f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def lookup() -> list[str]:
    """The compiler libraries numba-cuda cannot find from this process (call it in the compile-only
    runtime: :func:`missing` does)."""
    from convlab.runtime import cuda

    out: list[str] = []
    try:
        paths = cuda.cuda_paths.get_cuda_paths()  # raises when NVRTC or NVVM is not found
        for key, name in (("nvrtc", "NVRTC"), ("nvvm", "NVVM"), ("libdevice", "libdevice")):
            entry = paths.get(key)
            if entry is None or not entry.info or not os.path.exists(entry.info):
                out.append(name)
    except Exception as exc:  # noqa: BLE001  (cuda-pathfinder's DynamicLibNotFoundError, among others)
        out.append(_what(exc))
    try:
        importlib.import_module("cuda.pathfinder").load_nvidia_dynamic_lib("nvJitLink")
    except Exception as exc:  # noqa: BLE001
        out.append(_what(exc))
    return out


@functools.cache
def missing() -> tuple[str, ...]:
    """The CUDA compiler libraries numba-cuda cannot find, looked up once per process in a
    compile-only subprocess (empty: ``convlab compile`` can lower kernels here)."""
    env = dict(os.environ, CONVLAB_RUNTIME="compile", NUMBA_ENABLE_CUDASIM="0")
    done = subprocess.run([sys.executable, "-m", "convlab.compile.toolchain"], env=env, capture_output=True,
                          text=True, timeout=300)
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return (f"the lookup failed ({tail})",)
    return tuple(json.loads(lines[-1]))


def message(found: tuple[str, ...] | list[str]) -> str:
    """One line: what numba-cuda cannot find and the install command."""
    return (f"numba-cuda cannot find its CUDA compiler libraries ({', '.join(found)}); install them with: "
            f'pip install "convlab[{EXTRA}]"')


def require() -> None:
    """Raise :class:`ToolchainError` (one line: what is missing, the extra to install) unless
    numba-cuda finds every compiler library."""
    found = missing()
    if found:
        raise ToolchainError(message(found))


if __name__ == "__main__":
    out = sys.stdout
    sys.stdout = sys.stderr  # anything printed while importing stays off the answer
    out.write(json.dumps(lookup()) + "\n")
