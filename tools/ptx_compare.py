"""Compile representative kernels to PTX in two checkouts and compare them (no GPU needed).

    python tools/ptx_compare.py BASE_DIR [--cc 9.0]      # BASE_DIR: e.g. `git worktree add /tmp/b main`

Needs numba-cuda's CUDA 13 compiler libraries (``pip install "numba-cuda[cu13]>=0.30.4,<0.31"``). Each
checkout is compiled in its own process with NUMBA_ENABLE_CUDASIM=0 (``cuda.compile_ptx`` works without
a device; device functions are compiled for ``--cc`` too), its ``convlab`` taken from the checkout and
``convlab.algorithms`` from its ``algorithms/`` folder, whichever layout it has (before the kernel
layer: ``convlab.gemm_kernels``, ``algorithms/_igemm_*``; after: ``convlab.kernels``,
``algorithms/implicit_gemm/``). Per kernel it prints whether the opcode sequences and the PTX text
(symbol names aside) of the two checkouts are identical, then the instruction count, shared / global
loads and stores (``ld.shared.v4``: the 128-bit fragment loads), FMAs, registers declared and local
memory use (``.local``: must be absent). Exit status 1 when an opcode sequence differs. Takes a few
minutes (the 8x8 kernels compile slowly).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

KERNELS = ("gemm f32 128x128x8/8x8 NN", "gemm f32 128x128x8/8x8 NT", "gemm f64 128x64x8/8x4 TN",
           "igemm forward 128x128x8/8x8", "igemm dgrad 128x64x8/8x8", "igemm wgrad 128x128x8/8x8",
           "igemm dgrad general 128x64x8/8x8", "igemm wgrad general 128x128x8/8x8", "sum_partials f32")

_CHILD = r'''
import importlib.util, json, os, sys
root = sys.argv[1]
sys.path.insert(0, root)
import convlab
assert os.path.dirname(convlab.__file__) == os.path.join(root, "convlab"), convlab.__file__
folder = os.path.join(root, "algorithms")
spec = importlib.util.spec_from_file_location("convlab.algorithms", os.path.join(folder, "__init__.py"),
                                              submodule_search_locations=[folder])
algorithms = importlib.util.module_from_spec(spec)
sys.modules["convlab.algorithms"] = algorithms
spec.loader.exec_module(algorithms)
convlab.algorithms = algorithms
from numba import cuda, float32, float64, int32, uint32
from convlab import runtime
assert not runtime.SIMULATOR
try:  # after the kernel layer
    from convlab.kernels.gemm_source import make_gemm_kernel
    from convlab.kernels import splitk
    sum_splits = splitk._sum_kernel(None) if hasattr(splitk, "_sum_kernel") else splitk.sum_splits
    from convlab.kernels.tile import Tile
    from convlab.algorithms.implicit_gemm.forward import gather_kernel
    from convlab.algorithms.implicit_gemm.wgrad import wgrad_kernel
except ImportError:  # before
    from convlab.gemm_kernels import Tile, make_gemm_kernel
    from convlab.gemm import sum_splits
    from convlab.algorithms._igemm_fwd import gather_kernel
    from convlab.algorithms._igemm_wgrad import wgrad_kernel
cc = tuple(int(v) for v in sys.argv[2].split("."))
import types
from numba.cuda import dispatcher  # device functions compile for "the current device": this cc
dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=cc)
f32_1, f32_4, i32_1 = float32[::1], float32[:, :, :, ::1], int32[::1]

def gemm(dtype, tile, ta, tb):
    kern = make_gemm_kernel(dtype, Tile(*tile), ta, tb)
    arr = {"float32": float32, "float64": float64}[dtype][::1]
    nargs = kern.py_func.__code__.co_argcount
    return kern.py_func, (arr,) * 4 + (uint32,) * (nargs - 4)

cases = {
    "gemm f32 128x128x8/8x8 NN": gemm("float32", (128, 128, 8, 8, 8), False, False),
    "gemm f32 128x128x8/8x8 NT": gemm("float32", (128, 128, 8, 8, 8), False, True),
    "gemm f64 128x64x8/8x4 TN": gemm("float64", (128, 64, 8, 8, 4), True, False),
    "igemm forward 128x128x8/8x8": (gather_kernel(128, 128, 8, 8, 8, True).py_func,
                                    (f32_4, f32_4, i32_1, f32_1, f32_4, f32_1)),
    "igemm dgrad 128x64x8/8x8": (gather_kernel(128, 64, 8, 8, 8, False).py_func,
                                 (f32_4, f32_4, i32_1, f32_1, f32_4, f32_1)),
    "igemm wgrad 128x128x8/8x8": (wgrad_kernel(128, 128, 8, 8).py_func,
                                  (f32_4, f32_4, i32_1, f32_4, f32_1)),
    "sum_partials f32": (sum_splits.py_func, (f32_1, f32_1, uint32, uint32, uint32)
                         + ((f32_1, uint32, uint32) if sum_splits.py_func.__code__.co_argcount == 8 else ())),
}
try:  # the general variants (groups, ragged K, strided-dgrad phases), where the checkout has them
    cases["igemm dgrad general 128x64x8/8x8"] = (gather_kernel(128, 64, 8, 8, 8, False, True).py_func,
                                                 (f32_4, f32_4, i32_1, f32_1, f32_4, f32_1))
    cases["igemm wgrad general 128x128x8/8x8"] = (wgrad_kernel(128, 128, 8, 8, True).py_func,
                                                  (f32_4, f32_4, i32_1, f32_4, f32_1))
except TypeError:
    pass
out = {}
only = json.loads(sys.argv[3])
for name, (func, sig) in cases.items():
    if only and name not in only:
        continue
    ptx, _ = cuda.compile_ptx(func, sig, cc=cc)
    out[name] = ptx
json.dump(out, sys.stdout)
'''


def compile_tree(root: Path, cc: str, only: list[str]) -> dict[str, str]:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    res = subprocess.run([sys.executable, "-c", _CHILD, str(root), cc, json.dumps(only)], env=env,
                         capture_output=True, text=True, cwd=root)
    if res.returncode:
        sys.exit(f"compiling in {root} failed:\n{res.stderr[-4000:]}")
    return json.loads(res.stdout)


def opcodes(ptx: str) -> list[str]:
    """Opcodes of the PTX instructions (labels, directives, braces and comments left out)."""
    ops = []
    for line in ptx.splitlines():
        line = line.split("//")[0].strip()
        if not line.endswith(";") or line.startswith("."):
            continue
        line = re.sub(r"^@!?%p\d+\s+", "", line)  # predicate guard
        ops.append(line.split()[0].rstrip(";"))
    return ops


def body(ptx: str) -> list[str]:
    """The PTX lines without comments, blank lines and symbol names (mangled module paths differ)."""
    lines = (re.sub(r"_ZN[\w$]*", "SYM", line.split("//")[0].strip()) for line in ptx.splitlines())
    return [line for line in lines if line]


def stats(ptx: str) -> dict[str, int]:
    ops = Counter(opcodes(ptx))
    count = lambda prefix: sum(v for k, v in ops.items() if k.startswith(prefix))  # noqa: E731
    regs = sum(int(n) for n in re.findall(r"\.reg \.\w+ \s*%\w+<(\d+)>;", ptx))
    return {"instr": sum(ops.values()), "ld.shared.v4": count("ld.shared.v4"),
            "ld.shared": count("ld.shared"), "st.shared": count("st.shared"),
            "ld.global": count("ld.global"), "st.global": count("st.global"), "fma": count("fma"),
            "bar.sync": count("bar.sync"), "regs": regs,
            ".local": len(re.findall(r"\.local\b", ptx)),
            "ld/st.local": count("ld.local") + count("st.local")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, help="the other checkout (before)")
    parser.add_argument("--head", type=Path, default=Path(__file__).resolve().parents[1],
                        help="this checkout (after; default: the one holding this script)")
    parser.add_argument("--cc", default="9.0", help="compute capability (default 9.0, the H200)")
    parser.add_argument("--only", nargs="+", default=[], choices=KERNELS, metavar="KERNEL",
                        help=f"compare only these kernels (of: {', '.join(KERNELS)})")
    parser.add_argument("--save", type=Path, help="write each PTX to SAVE/{before,after}/<kernel>.ptx")
    args = parser.parse_args(argv)
    before = compile_tree(args.base.resolve(), args.cc, args.only)
    after = compile_tree(args.head.resolve(), args.cc, args.only)
    if args.save:
        for side, ptxs in (("before", before), ("after", after)):
            (args.save / side).mkdir(parents=True, exist_ok=True)
            for name, ptx in ptxs.items():
                (args.save / side / (re.sub(r"\W+", "_", name) + ".ptx")).write_text(ptx)
    differ = 0
    names = args.only or KERNELS
    for name in names:
        if name not in before or name not in after:
            print(f"{name}: not in {'the base' if name not in before else 'this'} checkout")
            continue
        b, a = stats(before[name]), stats(after[name])
        same = opcodes(before[name]) == opcodes(after[name])
        text = body(before[name]) == body(after[name])
        differ += not same
        print(f"{name}: opcode sequence {'IDENTICAL' if same else 'DIFFERS'}; "
              f"PTX text (symbol names aside) {'identical' if text else 'differs'}")
        for key in b:
            mark = "" if b[key] == a[key] else "   <-- changed"
            print(f"    {key:14s} before {b[key]:6d}   after {a[key]:6d}{mark}")
    print(f"{len(names) - differ} of {len(names)} kernels have identical opcode sequences")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
