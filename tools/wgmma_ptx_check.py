"""Compile the wgmma kernels to PTX without a GPU and check what ptxas makes of them.

    python tools/wgmma_ptx_check.py [--configs first|all] [--itypes f16,bf16,tf32] [--probes]
                                    [--probe-shapes 64:128,256:32] [--ptxas PATH] [--no-ptxas]
                                    [--jobs N] [--out FILE.json] [--dump DIR]

Needs numba-cuda's CUDA 13 compiler libraries (libNVVM; ``numba-cuda[cu13]``); exit status 2 when they
cannot be loaded, 1 when a kernel fails a check, 0 otherwise. Sets NUMBA_ENABLE_CUDASIM=0 before convlab
is imported and compiles for ``sm_90a`` (``cc=(9, 0, "a")``: what numba-cuda picks on a 9.0 device, and
what wgmma needs). For each tc_gemm wgmma config (tc_gemm.WGMMA_CONFIGS, the first per input type or
all) and, with --probes, the one-warpgroup probes of convlab.kernels.arch.wgmma (wgmma N : row bytes, each
input type), it counts the PTX of
wgmma.mma_async / fence / commit_group / wait_group, fence.proxy.async, cp.async, ``.local`` (must be
absent) and the 1024-byte alignment of the dynamic shared array; then ``ptxas -arch=sm_90a -v`` (the
ptxas of the nvidia-cuda-nvcc wheel beside libNVVM unless --ptxas names one; an older ptxas gets the PTX
``.version`` lowered) for registers, spills, shared memory and warnings: a kernel passes with wgmma
present, no local memory, no spill and no ptxas warning (C7510 / C7515: ptxas serialising the wgmma
pipeline). ``--jobs`` compiles in that many processes (Numba's passes hold the GIL).
"""
from __future__ import annotations

import os

os.environ["NUMBA_ENABLE_CUDASIM"] = "0"  # before convlab.runtime decides

import argparse  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402


def _cuda_wheels() -> str | None:
    """The nvidia/cu13 folder of the CUDA wheels on sys.path (libNVVM, NVRTC, ptxas), if any."""
    for p in sys.path:
        if glob.glob(os.path.join(p, "nvidia", "cu13", "lib", "libnvvm*")):
            return os.path.join(p, "nvidia", "cu13")
    return None


WHEELS = _cuda_wheels()
if WHEELS and not os.environ.get("CUDA_PATH") and not os.environ.get("CUDA_HOME"):
    os.environ["CUDA_PATH"] = WHEELS  # NVRTC's loader searches site-packages of this interpreter only

PATTERNS = {"wgmma": r"wgmma\.mma_async", "wgmma_fence": r"wgmma\.fence", "commit": r"wgmma\.commit_group",
            "wait": r"wgmma\.wait_group", "fence_proxy": r"fence\.proxy\.async", "cp_async": r"cp\.async\.cg",
            "local": r"\.local", "align1024": r"\.extern \.shared \.align 1024"}
NEED = ("wgmma", "wgmma_fence", "commit", "wait", "fence_proxy", "align1024")


def _setup():
    import types as pytypes
    from numba.cuda import dispatcher
    dispatcher.get_current_device = lambda: pytypes.SimpleNamespace(compute_capability=(9, 0))


def _kernel(spec: tuple):
    """(name, py_func, signature) of one kernel spec: ("gemm", itype, cfg tuple) or ("probe", itype, n, R)."""
    from numba import types
    from convlab.kernels.tensor_core import gemm as tc_gemm
    from convlab.kernels.arch import wgmma
    from convlab.kernels.tensor_core.config import TcConfig
    store = {"f16": types.float16, "bf16": types.uint16, "tf32": types.float32}
    if spec[0] == "gemm":
        itype, cfg = spec[1], TcConfig(*spec[2])
        arr = types.Array(store[itype], 2, "C")
        sig = (arr, arr, types.Array(types.float32, 1, "C"), types.uint32, types.uint32, types.uint32, types.boolean)
        return f"tc_gemm {itype} {cfg.name}", tc_gemm.make_tc_gemm(itype, cfg).py_func, sig
    _, itype, n, row_bytes = spec
    u32, f32 = types.Array(types.uint32, 1, "C"), types.Array(types.float32, 1, "C")
    sig = (u32, u32, f32, f32, u32) + (types.uint32,) * 4
    return f"probe {itype} n{n} {row_bytes}B", wgmma._probe(itype, n, row_bytes).py_func, sig


def ptxas_info(ptxas: str, ptx: str) -> dict:
    """Registers, spills, shared memory and warnings of ``ptxas -arch=sm_90a -v`` (PTX .version lowered
    to what an older ptxas accepts)."""
    version = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout
    release = re.search(r"release (\d+)\.(\d+)", version)
    if release:  # PTX ISA 9.x pairs with CUDA 13.x
        have = re.search(r"^\.version (\d+)\.(\d+)", ptx, flags=re.M)
        want = (int(release[1]) - 4, int(release[2]))
        if have and (int(have[1]), int(have[2])) > want:
            ptx = re.sub(r"^\.version \S+", f".version {want[0]}.{want[1]}", ptx, flags=re.M)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        done = subprocess.run([ptxas, "-arch=sm_90a", "-v", path, "-o", os.path.join(tmp, "k.cubin")],
                              capture_output=True, text=True)
    text = done.stdout + done.stderr
    info = {"ptxas_rc": done.returncode, "warnings": [ln.strip() for ln in text.splitlines() if "warning" in ln]}
    for key, pattern in (("registers", r"Used (\d+) registers"), ("smem", r"(\d+) bytes smem"),
                         ("stack", r"(\d+) bytes stack frame"), ("spill_stores", r"(\d+) bytes spill stores"),
                         ("spill_loads", r"(\d+) bytes spill loads")):
        found = re.search(pattern, text)
        info[key] = int(found[1]) if found else None
    if done.returncode:
        info["ptxas_error"] = text[-800:]
    return info


def check(spec: tuple, ptxas: str | None, dump: str | None) -> dict:
    """Compile one kernel and judge it (see the module doc)."""
    _setup()
    from convlab.runtime import cuda
    name, func, sig = _kernel(spec)
    t0 = time.perf_counter()
    try:
        ptx, _ = cuda.compile_ptx(func, sig, cc=(9, 0, "a"))
    except Exception as exc:  # noqa: BLE001 - reported per kernel
        return {"kernel": name, "ok": False, "error": repr(exc)[:800]}
    row = {"kernel": name, "compile_s": round(time.perf_counter() - t0, 1),
           **{k: len(re.findall(p, ptx)) for k, p in PATTERNS.items()}}
    row["ok"] = all(row[k] > 0 for k in NEED) and row["local"] == 0
    if ptxas:
        row.update(ptxas_info(ptxas, ptx))
        row["ok"] = row["ok"] and row["ptxas_rc"] == 0 and not row["spill_stores"] and not row["warnings"]
    if dump:
        with open(os.path.join(dump, re.sub(r"[^\w.-]+", "_", name) + ".ptx"), "w") as f:
            f.write(ptx)
    return row


def nvvm_available() -> str | None:
    """None when a trivial kernel compiles for sm_90a, else the reason it does not."""
    _setup()
    from numba import types
    from convlab.runtime import cuda

    def tiny(x):
        x[0] = 1.0

    try:
        cuda.compile_ptx(tiny, (types.float32[::1],), cc=(9, 0, "a"))
    except Exception as exc:  # noqa: BLE001
        return repr(exc)[:500]
    return None


def specs(configs: str, itypes: list[str], probes: list[tuple[int, int]]) -> list[tuple]:
    from convlab.kernels.tensor_core import gemm as tc_gemm
    out = [("gemm", itype, tuple(cfg)) for itype in itypes
           for cfg in tc_gemm.WGMMA_CONFIGS[itype][: None if configs == "all" else 1]]
    return out + [("probe", itype, n, rb) for itype in itypes for n, rb in probes]


def default_ptxas() -> str | None:
    if WHEELS and os.path.exists(os.path.join(WHEELS, "bin", "ptxas")):
        return os.path.join(WHEELS, "bin", "ptxas")
    return shutil.which("ptxas")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", choices=("first", "all"), default="first")
    parser.add_argument("--itypes", default="f16,bf16,tf32")
    parser.add_argument("--probes", action="store_true", help="also the one-warpgroup probes")
    parser.add_argument("--probe-shapes", default="64:128,256:32", help="the probes' wgmma N : row bytes")
    parser.add_argument("--ptxas", default=None, help="ptxas executable (default: the CUDA wheel's, or PATH)")
    parser.add_argument("--no-ptxas", action="store_true", help="PTX checks only")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", help="JSON file to write")
    parser.add_argument("--dump", help="directory for the PTX files")
    args = parser.parse_args(argv)
    reason = nvvm_available()
    if reason:
        print(f"NVVM unavailable: {reason}", flush=True)
        return 2
    ptxas = None if args.no_ptxas else (args.ptxas or default_ptxas())
    shapes = [tuple(int(v) for v in p.split(":")) for p in args.probe_shapes.split(",")] if args.probes else []
    todo = specs(args.configs, args.itypes.split(","), shapes)
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            rows = list(pool.map(check, todo, [ptxas] * len(todo), [args.dump] * len(todo)))
    else:
        rows = [check(s, ptxas, args.dump) for s in todo]
    for row in rows:
        print(row, flush=True)
    result = {"ptxas": ptxas, "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
