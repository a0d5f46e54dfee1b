"""Compile the tensor-core kernels to PTX without a GPU and count the instructions that matter.

    python benchmarks/tc_ptx_check.py [--out FILE.json] [--all] [--dump DIR] [--ptxas PATH]

Needs numba-cuda[cu13] (libNVVM). Sets NUMBA_ENABLE_CUDASIM=0 before convlab is imported, so that
convlab.runtime compiles for a GPU even on a machine without one (no launch happens). For each input type
and config (the first of tc_gemm.CONFIGS, or all with --all) it reports the counts of mma.sync, ldmatrix,
cp.async, cp.async.wait_group/commit_group, cvt.rna (tf32) and any .local (spills, local arrays), then
the same for the tensor_core plugin's convolution kernels (convlab.kernels.tc_conv, its GPU configs, with
and without bias), plus the one-warp probes of convlab.kernels.mma. Exit status 1 when an instruction is missing or .local appears.
With --ptxas, each kernel's PTX is also assembled for sm_90 (``ptxas -v``: registers, spills); the PTX
``.version`` line is lowered to what that ptxas accepts when it is older than libNVVM.
"""
from __future__ import annotations

import os

os.environ["NUMBA_ENABLE_CUDASIM"] = "0"  # before convlab.runtime decides

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from numba import types  # noqa: E402

from convlab import runtime  # noqa: E402
from convlab.kernels import mma, tc_conv, tc_gemm  # noqa: E402
from convlab.kernels.tc_pipeline import DEFAULT_TF32_ROUND  # noqa: E402
from convlab.runtime import cuda  # noqa: E402

PATTERNS = {"mma.sync": r"mma\.sync\.aligned", "ldmatrix": r"ldmatrix\.sync", "cp.async": r"cp\.async\.cg",
            "wait_group": r"cp\.async\.wait_group", "commit_group": r"cp\.async\.commit_group",
            "cvt.rna.tf32": r"cvt\.rna\.tf32", "local": r"\.local"}
STORE = {"f16": types.float16, "bf16": types.uint16, "tf32": types.float32}


def counts(ptx: str) -> dict[str, int]:
    return {name: len(re.findall(p, ptx)) for name, p in PATTERNS.items()}


def ptxas_info(ptxas: str, ptx: str) -> dict:
    """Registers and spill bytes from ``ptxas -v -arch=sm_90`` (PTX .version lowered if need be)."""
    version = subprocess.run([ptxas, "--version"], capture_output=True, text=True).stdout
    release = re.search(r"release (\d+)\.(\d+)", version)
    if release:  # PTX ISA 9.x pairs with CUDA 13.x
        ptx = re.sub(r"^\.version \S+", f".version {int(release[1]) - 4}.{release[2]}", ptx, flags=re.M)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        done = subprocess.run([ptxas, "-arch=sm_90", "-v", path, "-o", os.path.join(tmp, "k.cubin")],
                              capture_output=True, text=True)
    text = done.stdout + done.stderr
    info = {"ptxas_rc": done.returncode}
    for key, pattern in (("registers", r"Used (\d+) registers"), ("smem", r"(\d+) bytes smem"),
                         ("spill_stores", r"(\d+) bytes spill stores"),
                         ("spill_loads", r"(\d+) bytes spill loads")):
        found = re.search(pattern, text)
        info[key] = int(found[1]) if found else None
    if done.returncode:
        info["ptxas_error"] = text[-500:]
    return info


def check(itype: str, cfg: tc_gemm.TcConfig, dump: str | None, ptxas: str | None = None,
          out: str = "float32") -> dict:
    arr = types.Array(STORE[itype], 2, "C")
    sig = (arr, arr, types.Array(getattr(types, out), 1, "C"), types.uint32, types.uint32, types.uint32,
           types.boolean)
    t0 = time.perf_counter()
    ptx, _ = cuda.compile_ptx(tc_gemm.make_tc_gemm(itype, cfg, out).py_func, sig, cc=(9, 0))
    row = {"kernel": f"tc_gemm {itype} {cfg.name} -> {out}", "compile_s": round(time.perf_counter() - t0, 1),
           **counts(ptx)}
    regs = re.findall(r"\.reg \.(\w+)\s+%\w+<(\d+)>", ptx)
    row["virtual_regs"] = {k: int(v) for k, v in regs}
    _judge(row, ptx, itype, ptxas)
    if dump:
        name = f"tc_gemm_{itype}_{cfg.name.replace('/', '_')}_{out}.ptx"
        with open(os.path.join(dump, name), "w") as f:
            f.write(ptx)
    return row


def _judge(row: dict, ptx: str, itype: str, ptxas: str | None) -> None:
    """row["ok"]: the tensor-core instructions are there, no local memory, and (with ptxas) it assembles
    without spills."""
    need = {"mma.sync", "ldmatrix", "cp.async", "wait_group", "commit_group"}
    if itype == "tf32" and DEFAULT_TF32_ROUND == "cvt":
        need.add("cvt.rna.tf32")  # tc_pipeline.TF32_ROUND's "cvt"
    row["ok"] = all(row[k] > 0 for k in need) and row["local"] == 0
    if ptxas:
        row.update(ptxas_info(ptxas, ptx))
        row["ok"] = row["ok"] and row["ptxas_rc"] == 0 and not row["spill_stores"]


def check_conv(itype: str, cfg: tc_gemm.TcConfig, bias: bool, dump: str | None,
               ptxas: str | None = None) -> dict:
    """The tensor_core plugin's implicit-GEMM kernel (convlab.kernels.tc_conv) for one config."""
    arr = types.Array(STORE[itype], 1, "C")
    sig = (arr, arr, arr, arr) + (types.uint32,) * (len(tc_conv.PARAMS.split(",")) - 4) + (types.boolean,)
    t0 = time.perf_counter()
    ptx, _ = cuda.compile_ptx(tc_conv.make_tc_conv(itype, cfg, bias).py_func, sig, cc=(9, 0))
    row = {"kernel": f"tc_conv {itype} {cfg.name} bias={bias}",
           "compile_s": round(time.perf_counter() - t0, 1), **counts(ptx)}
    _judge(row, ptx, itype, ptxas)
    if dump:
        with open(os.path.join(dump, f"tc_conv_{itype}_{cfg.name.replace('/', '_')}_{bias}.ptx"), "w") as f:
            f.write(ptx)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="JSON file to write")
    parser.add_argument("--all", action="store_true", help="every config of tc_gemm.CONFIGS")
    parser.add_argument("--dump", help="directory for the PTX files")
    parser.add_argument("--ptxas", help="ptxas executable: also assemble for sm_90 (registers, spills)")
    args = parser.parse_args(argv)
    assert not runtime.SIMULATOR
    rows = []
    for itype in ("f16", "bf16", "tf32"):
        for cfg in tc_gemm.CONFIGS[itype][: None if args.all else 1]:
            try:
                rows.append(check(itype, cfg, args.dump, args.ptxas))
            except Exception as exc:  # keep going: report every kernel
                rows.append({"kernel": f"tc_gemm {itype} {cfg.name}", "ok": False, "error": repr(exc)})
            print(rows[-1], flush=True)
    for itype, out in (("f16", "float16"), ("bf16", "uint16")):  # the input-type outputs
        rows.append(check(itype, tc_gemm.CONFIGS[itype][0], args.dump, args.ptxas, out))
        print(rows[-1], flush=True)
    from convlab.algorithms import tensor_core
    for itype in ("f16", "bf16", "tf32"):
        for cfg in tensor_core.GPU_TILES[32 if itype == "tf32" else 16]:
            for bias in (False, True):
                try:
                    rows.append(check_conv(itype, cfg, bias, args.dump, args.ptxas))
                except Exception as exc:  # keep going: report every kernel
                    rows.append({"kernel": f"tc_conv {itype} {cfg.name}", "ok": False, "error": repr(exc)})
                print(rows[-1], flush=True)
    u32 = types.Array(types.uint32, 2, "C")
    f32 = types.Array(types.float32, 2, "C")
    for itype in ("f16", "bf16", "tf32"):
        ptx, _ = cuda.compile_ptx(mma._mma_probe(itype).py_func, (u32, u32, f32, f32), cc=(9, 0))
        rows.append({"kernel": f"warp_mma {itype}", **counts(ptx)})
        print(rows[-1], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r.get("ok", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
