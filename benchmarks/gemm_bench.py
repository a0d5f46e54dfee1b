"""The kernel layer's GEMMs against cuBLAS (torch.matmul) at one size: C[M, N] = A[M, K] @ B[K, N].

    python benchmarks/gemm_bench.py --out gemm.json [--itypes f32 f16 bf16 tf32] [--size M [N K]]
        [--configs mma|wgmma|all] [--tiles BMxBNxBK/TMxTN ...] [--tf32-round trunc cvt] [--repeat 20]
    python benchmarks/gemm_bench.py --out /tmp/g.json --size 32 32 16 --itypes f32 f16   # the simulator

    itype            kernels                                                        cuBLAS
    f32              the SIMT tiled GEMM (convlab.kernels.simt.gemm): GPU_TILES      fp32, TF32 off
                     or --tiles
    f16, bf16, tf32  the tensor-core GEMM (convlab.kernels.tensor_core.gemm, fp32    in the input dtype
                     output): CONFIGS (mma.sync) and, on a target with wgmma,        (tf32: allow_tf32)
                     WGMMA_CONFIGS (--configs picks); tf32 once per --tf32-round

Per itype: operands drawn once (rounded to the itype), the float64 product of those values (torch on the
GPU, else numpy); each kernel's first run (compiles) into a NaN-filled C, checked; then every checked
kernel and cuBLAS timed in interleaved rounds (convlab.bench.rounds: CUDA events, ``repeat`` samples of
``inner`` back-to-back calls each), and the output of each one's last timed call (C NaN-filled before it)
checked again. A check: relative norm error within eps * (8 sqrt(K) + 16) plus the output's rounding
(eps 2**-24 for fp32 accumulation of exact products, 2**-10 for TF32 inputs). A kernel failing a check
keeps its row, with the reason, and no time. Writes the JSON (device, versions, shape, every row) after
each itype and prints the table. On the simulator (sizes up to 64, its tiles and configs) nothing is
timed: the checks run.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any, Callable

import numpy as np

from convlab import runtime
from convlab.bench.rounds import Contender, interleave
from convlab.kernels.simt.gemm import GPU_TILES, SIM_TILES, Tile, matmul
from convlab.kernels.tensor_core import gemm as tc_gemm
from convlab.runtime.targets import current

ROUNDS = 5
TORCH_DTYPE = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "tf32": "float32"}
OUT_ROUNDING = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}


def parse_tile(text: str) -> Tile:
    """``BMxBNxBK/TMxTN`` -> Tile."""
    block, thread = text.split("/")
    bm, bn, bk = (int(v) for v in block.split("x"))
    tm, tn = (int(v) for v in thread.split("x"))
    return Tile(bm, bn, bk, tm, tn)


def tolerance(itype: str, k: int, out_dtype: str = "float32") -> float:
    eps = 2.0**-10 if itype == "tf32" else 2.0**-24
    return eps * (8 * math.sqrt(k) + 16) + (OUT_ROUNDING[out_dtype] if out_dtype != "float32" else 0.0)


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    got = np.asarray(got, np.float64)
    if not np.all(np.isfinite(got)):
        return math.inf
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def kernels(itype: str, args: argparse.Namespace) -> list[tuple[str, Any, str | None]]:
    """(name, tile or config, tf32 rounding) of every kernel timed for ``itype``."""
    if itype == "f32":
        tiles = SIM_TILES if runtime.SIMULATOR else GPU_TILES
        return [(t.name, t, None) for t in ([parse_tile(x) for x in args.tiles] if args.tiles else tiles)]
    if runtime.SIMULATOR:
        cfgs = [tc_gemm.SIM_CONFIG[itype]]
    else:
        wgmma = current().has("wgmma") and args.configs in ("wgmma", "all")
        cfgs = (list(tc_gemm.CONFIGS[itype]) if args.configs in ("mma", "all") else []) + \
            (list(tc_gemm.WGMMA_CONFIGS.get(itype, [])) if wgmma else [])
    rounds = args.tf32_round if itype == "tf32" else [None]
    return [(f"{cfg.name}" + (f" {rnd}" if rnd else ""), cfg, rnd) for cfg in cfgs for rnd in rounds]


def _resources(itype: str, cfg: Any, rnd: str | None) -> dict:
    out = {}
    kernel = tc_gemm.make_tc_gemm(itype, cfg, tf32_round=rnd)
    for name in ("get_regs_per_thread", "get_local_mem_per_thread"):
        try:
            value = getattr(kernel, name)()
            out[name[4:]] = int(next(iter(value.values())) if isinstance(value, dict) else value)
        except Exception:  # informational: not every runtime reports it
            pass
    return out


def run_itype(itype: str, m: int, n: int, k: int, args: argparse.Namespace, torch: Any) -> list[dict]:
    """Every kernel of ``itype`` and cuBLAS: checked, timed in interleaved rounds, re-checked."""
    rng = np.random.default_rng(0)
    a, a64 = tc_gemm.to_storage(itype if itype != "f32" else "tf32", rng.standard_normal((m, k)))
    bt, b64 = tc_gemm.to_storage(itype if itype != "f32" else "tf32", rng.standard_normal((n, k)))
    want = a64 @ b64.T
    da, dbt = runtime.to_device(a), runtime.to_device(bt)
    db = runtime.to_device(np.ascontiguousarray(bt.T)) if itype == "f32" else None
    dc = runtime.empty((m, n), np.float32)
    nan = np.full((m, n), np.nan, np.float32)
    rows, contenders, tols = [], {}, {}
    for name, kernel, rnd in kernels(itype, args):
        row = {"itype": itype, "kernel": name}
        try:
            fn: Callable[[], Any] = (lambda t=kernel: matmul(da, db, dc, tile=t)) if itype == "f32" else \
                tc_gemm.launcher(itype, kernel, da, dbt, dc, tf32_round=rnd)
            runtime.copy_into(dc, nan)
            t0 = time.perf_counter()
            fn()
            runtime.synchronize()
            row["first_run_s"] = time.perf_counter() - t0
            row["rel_err"], row["tolerance"] = rel_error(runtime.to_host(dc), want), tolerance(itype, k)
            row["ok"] = row["rel_err"] <= row["tolerance"]
            if itype != "f32":
                row.update(_resources(itype, kernel, rnd))
            if row["ok"]:
                contenders[name] = Contender(fn, args.repeat, args.warmup, poison=lambda: runtime.copy_into(dc, nan),
                                             keep=lambda _: runtime.to_host(dc))
                tols[name] = row["tolerance"]
        except Exception as exc:  # recorded; the other kernels go on
            row.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:500])
        rows.append(row)
    if torch is not None and torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = itype == "tf32"
        dtype = getattr(torch, TORCH_DTYPE[itype])
        ta = torch.from_numpy(a64).to(device="cuda", dtype=dtype)
        tbt = torch.from_numpy(b64).to(device="cuda", dtype=dtype)
        contenders["cublas"] = Contender(lambda: torch.matmul(ta, tbt.T), args.repeat, args.warmup,
                                         keep=lambda got: got.double().cpu().numpy())
        tols["cublas"] = tolerance(itype, k, TORCH_DTYPE[itype])
        rows.append({"itype": itype, "kernel": "cublas", "ok": True, "tolerance": tols["cublas"]})
    inner = args.inner
    clock = None if runtime.SIMULATOR else (lambda fn, count: runtime.time_ms(fn, warmup=0, repeat=count, inner=inner))
    timed = interleave(contenders, clock, ROUNDS)
    for row in rows:
        t = timed.get(row["kernel"])
        if t is None:
            continue
        row["last_rel_err"] = rel_error(t.kept, want) if t.done else None
        if t.error or row["last_rel_err"] is None or row["last_rel_err"] > tols[row["kernel"]]:
            row.update(ok=False, error=t.error or f"last timed call: rel err {row['last_rel_err']:.3g} > "
                                                  f"tolerance {tols[row['kernel']]:.3g}")
        elif t.median:
            row.update(ms=t.median, tflops=2.0 * m * n * k / t.median / 1e9)
    cublas_ms = next((r.get("ms") for r in rows if r["kernel"] == "cublas"), None)
    for row in rows:
        if row.get("ms") and cublas_ms:
            row["vs_cublas"] = cublas_ms / row["ms"]
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
    return rows


def table(rows: list[dict]) -> str:
    def cell(row: dict, key: str, spec: str) -> str:
        value = row.get(key)
        width = int(spec.split(".")[0].rstrip("df"))
        return format(value, spec) if isinstance(value, (int, float)) else "-".rjust(width)

    lines = [f"{'itype':6} {'kernel':28} {'ms':>8} {'TFLOP/s':>8} {'vs cuBLAS':>9} {'rel err':>9} "
             f"{'last err':>9} {'regs':>5} {'first s':>8}"]
    for r in rows:
        lines.append(f"{r['itype']:6} {r['kernel']:28} {cell(r, 'ms', '8.3f')} {cell(r, 'tflops', '8.1f')} "
                     f"{cell(r, 'vs_cublas', '9.2f')} {cell(r, 'rel_err', '9.1e')} {cell(r, 'last_rel_err', '9.1e')} "
                     f"{cell(r, 'regs_per_thread', '5d')} {cell(r, 'first_run_s', '8.1f')}"
                     + (f"  {r['error']}" if r.get("error") else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--size", type=int, nargs="+", default=[4096], help="M [N K] (default 4096^3)")
    parser.add_argument("--itypes", nargs="+", default=["f32", "f16", "bf16", "tf32"], choices=list(TORCH_DTYPE))
    parser.add_argument("--configs", default="all", choices=("mma", "wgmma", "all"),
                        help="tensor-core configs: mma.sync, wgmma (on a target with it) or both")
    parser.add_argument("--tiles", nargs="+", default=None, help="f32 tiles BMxBNxBK/TMxTN (default: presets)")
    parser.add_argument("--tf32-round", nargs="+", default=["trunc"], choices=["add", "cvt", "trunc"],
                        help="TF32 rounding of the fragments (tensor_core.warp.TF32_ROUND) to time, each")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20, help="samples per kernel over the rounds")
    parser.add_argument("--inner", type=int, default=5, help="back-to-back calls per sample")
    args = parser.parse_args(argv)
    m, n, k = (args.size * 3)[:3] if len(args.size) == 1 else args.size
    if runtime.SIMULATOR and max(m, n, k) > 64:
        parser.error(f"--size {m} {n} {k}: the CUDA simulator runs sizes up to 64")
    torch = None
    if not runtime.SIMULATOR:  # cuBLAS through torch: a GPU's baseline
        try:
            import torch
        except ImportError:
            pass
    result: dict[str, Any] = {"device": runtime.device_name(), "simulator": runtime.SIMULATOR,
                              "versions": dict(runtime.versions(), torch=getattr(torch, "__version__", "none")),
                              "shape": [m, n, k], "args": vars(args), "rows": []}
    for itype in args.itypes:
        result["rows"] += run_itype(itype, m, n, k, args, torch)
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1, default=str)
    print(table(result["rows"]))
    return 1 if any(not r.get("ok") for r in result["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
