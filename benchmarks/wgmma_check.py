"""Hopper check of the wgmma path in one call: the warpgroup probes, tc_gemm on wgmma against float64, and
4096^3 timings against tc_gemm on mma.sync and cuBLAS.

    python benchmarks/wgmma_check.py --out FILE.json [--quick] [--size 4096] [--repeat 15] [--inner 10]

Needs a GPU of compute capability 9.0 (sm_90a), numba-cuda, numpy and torch, the repo on PYTHONPATH and
NUMBA_ENABLE_CUDASIM unset. In order, each step in its own try/except, the JSON rewritten after each:
(a) the one-warpgroup probes (convlab.kernels.arch.wgmma.warpgroup_mma: each input type, the 128B / 64B /
    32B swizzles, N 8..256, descriptors starting inside the tile, scale_d 0 over NaN accumulators)
    against numpy, and the dynamic shared array's address (must be a multiple of 1024);
(b) tc_gemm on each timed wgmma config against float64 (NaN-poisoned outputs, ragged shapes);
(c) per input type at M = N = K = --size: each wgmma config, tc_gemm's first mma.sync config and
    cuBLAS (torch.matmul in the input dtype; TF32 with allow_tf32) checked against an fp32 cuBLAS
    product of the same operands, then timed interleaved (round robin, ``repeat`` samples of ``inner``
    back-to-back calls between CUDA events): medians, TFLOP/s, ratio to cuBLAS.
--quick: the probes, then one wgmma config (f16) checked and timed. Compiling is the slow part (10-45 s
a wgmma kernel on a CPU here: Numba's passes, one at a time under its compiler lock), so the full list
is short: ~3 minutes of compiling in all.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from typing import Any, Callable

import numpy as np

from convlab import runtime
from convlab.kernels.tensor_core import gemm as tc_gemm
from convlab.kernels.arch import wgmma
from convlab.runtime import cuda

TORCH_DTYPE = {"f16": "float16", "bf16": "bfloat16", "tf32": "float32"}
#: probe cases (row bytes, n, a_row0, b_row0, scale0), a kernel per (itype, n, row bytes)
PROBES = [(128, 64, 64, 8, 1), (128, 64, 0, 0, 0), (64, 24, 8, 16, 0), (32, 256, 0, 8, 1)]
QUICK_PROBES = [(128, 64, 64, 8, 1), (32, 256, 0, 8, 0)]
#: wgmma configs timed per input type (indices into tc_gemm.WGMMA_CONFIGS[itype]); --quick: f16's first
TIMED = {"f16": [0, 1, 2, 3, 4], "bf16": [0], "tf32": [0, 1]}
CHECK_SHAPES = [(300, 260, 136), (256, 256, 64), (1000, 520, 1000)]


def _trunc_tf32(x: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def probes(cases, result: dict) -> None:
    rows = result.setdefault("probes", [])
    for itype in ("f16", "bf16", "tf32"):
        for row_bytes, n, a0, b0, scale0 in cases:
            row = {"itype": itype, "row_bytes": row_bytes, "n": n, "a_row0": a0, "b_row0": b0, "scale0": scale0}
            try:
                rng = np.random.default_rng(row_bytes + n + a0)
                k = row_bytes // wgmma.ITEMSIZE[itype]
                A, A64 = tc_gemm.to_storage(itype, rng.standard_normal((a0 + 64, k)))
                Bt, B64 = tc_gemm.to_storage(itype, rng.standard_normal((b0 + n + 8, k)))
                if itype == "tf32":  # wgmma truncates fp32 operands to TF32
                    A64, B64 = _trunc_tf32(A).astype(np.float64), _trunc_tf32(Bt).astype(np.float64)
                A64, B64 = A64[a0:a0 + 64], B64[b0:b0 + n]
                C = rng.standard_normal((64, n)).astype(np.float32) if scale0 else np.full((64, n), np.nan, np.float32)
                t0 = time.perf_counter()
                D, base = wgmma.warpgroup_mma(itype, A, Bt, C, n, scale0=scale0, a_row0=a0, b_row0=b0)
                row["s"] = round(time.perf_counter() - t0, 2)
                want = A64 @ B64.T + (C if scale0 else 0)
                scale = np.abs(A64) @ np.abs(B64).T + (np.abs(C) if scale0 else 0)
                row["max_err_over_bound"] = float(np.max(np.abs(D - want) / (2.0**-22 * (k + 1) * scale)))
                row["base"] = base
                row["ok"] = bool(np.all(np.isfinite(D)) and row["max_err_over_bound"] <= 1 and base % 1024 == 0)
            except Exception as exc:  # noqa: BLE001 - every case reported
                row.update(ok=False, error=repr(exc), trace=traceback.format_exc()[-1500:])
            rows.append(row)
            print("probe", row, flush=True)


def _operands(torch, itype: str, shape, seed: int):
    """(A, Bt) torch tensors of the itype's dtype and numba views of them (bf16 as int16 bits)."""
    m, n, k = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dtype = getattr(torch, TORCH_DTYPE[itype])
    a = torch.randn(m, k, device="cuda", generator=gen).to(dtype)
    bt = torch.randn(n, k, device="cuda", generator=gen).to(dtype)
    view = (lambda t: t.view(torch.int16)) if itype == "bf16" else (lambda t: t)
    return a, bt, cuda.as_cuda_array(view(a)), cuda.as_cuda_array(view(bt))


def _reference(torch, itype, a, bt, exact: bool):
    """The product wgmma computes: float64 of the operands it reads (TF32: truncated) when ``exact``, else
    an fp32 cuBLAS product (TF32 off) of those operands (the large timed size)."""
    if itype == "tf32":
        cut = lambda t: (t.view(torch.int32) & -8192).view(torch.float32)  # noqa: E731  (low 13 bits)
        a, bt = cut(a), cut(bt)
    if exact:
        return a.double() @ bt.double().T
    torch.backends.cuda.matmul.allow_tf32 = False
    return a.float() @ bt.float().T


def _rel(torch, got, want) -> float:
    return float(torch.linalg.norm(got.double() - want.double()) / torch.linalg.norm(want.double()))


def _tol(itype: str, k: int) -> float:
    return 4 * k * 2.0**-24  # products exact, fp32 accumulation: k u with margin


def checks(torch, configs, result: dict) -> None:
    rows = result.setdefault("gemm_checks", [])
    for itype, cfg in configs:
        for shape in CHECK_SHAPES:
            row = {"itype": itype, "config": cfg.name, "shape": list(shape)}
            try:
                a, bt, a_nb, bt_nb = _operands(torch, itype, shape, seed=sum(shape))
                c = torch.full(shape[:2], float("nan"), device="cuda")
                t0 = time.perf_counter()
                tc_gemm.launcher(itype, cfg, a_nb, bt_nb, cuda.as_cuda_array(c))()
                cuda.synchronize()
                row["s"] = round(time.perf_counter() - t0, 2)
                row["finite"] = bool(torch.isfinite(c).all())
                row["rel_err"] = _rel(torch, c, _reference(torch, itype, a, bt, exact=True))
                row["ok"] = row["finite"] and row["rel_err"] < _tol(itype, shape[2])
            except Exception as exc:  # noqa: BLE001
                row.update(ok=False, error=repr(exc), trace=traceback.format_exc()[-1500:])
            rows.append(row)
            print("check", row, flush=True)


def _interleaved(fns: dict[str, Callable[[], Any]], repeat: int, inner: int) -> dict[str, list[float]]:
    """Per-call ms of each function: ``repeat`` rounds, each timing ``inner`` back-to-back calls of every
    function in turn between two CUDA events (the Numba launch cost overlaps the kernels)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():  # warm-up (compiled already)
        fn()
    cuda.synchronize()
    for _ in range(repeat):
        for name, fn in fns.items():
            start, stop = runtime.event(), runtime.event()
            start.record()
            for _ in range(inner):
                fn()
            stop.record()
            stop.synchronize()
            times[name].append(start.elapsed_time(stop) / inner)
    return times


def timings(torch, itype: str, cfgs, size: int, args, result: dict) -> None:
    rows = result.setdefault("timings", [])
    shape = (size, size, size)
    flops = 2.0 * size**3
    try:
        a, bt, a_nb, bt_nb = _operands(torch, itype, shape, seed=1)
        want = _reference(torch, itype, a, bt, exact=False)
    except Exception as exc:  # noqa: BLE001
        rows.append({"itype": itype, "error": repr(exc)})
        return
    fns, info = {}, {}
    torch.backends.cuda.matmul.allow_tf32 = itype == "tf32"
    out = torch.empty(size, size, device="cuda", dtype=a.dtype)
    fns["cublas"] = lambda: torch.matmul(a, bt.T, out=out)
    info["cublas"] = {"itype": itype, "config": "cublas", "mma": "cublas"}
    for cfg in cfgs:
        name = cfg.name
        row = {"itype": itype, "config": name, "mma": cfg.MMA}
        try:
            c = torch.full((size, size), float("nan"), device="cuda")
            t0 = time.perf_counter()
            run = tc_gemm.launcher(itype, cfg, a_nb, bt_nb, cuda.as_cuda_array(c))
            run()
            cuda.synchronize()
            row["compile_s"] = round(time.perf_counter() - t0, 1)
            row["rel_err_vs_fp32"] = _rel(torch, c, want)
            row["checked"] = bool(torch.isfinite(c).all()) and row["rel_err_vs_fp32"] < 1e-4
            fns[name], info[name] = run, row
        except Exception as exc:  # noqa: BLE001
            row.update(error=repr(exc), trace=traceback.format_exc()[-1500:])
            rows.append(row)
        print("compiled", row, flush=True)
    try:
        fns["cublas"]()
        info["cublas"]["rel_err_vs_fp32"] = _rel(torch, out, want)
        times = _interleaved(fns, args.repeat, args.inner)
    except Exception as exc:  # noqa: BLE001
        rows.append({"itype": itype, "error": repr(exc), "trace": traceback.format_exc()[-1500:]})
        return
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
    cublas_ms = statistics.median(times["cublas"])
    for name, row in info.items():
        ms = statistics.median(times[name])
        row.update(shape=list(shape), ms=ms, ms_samples=times[name], tflops=flops / ms / 1e9, vs_cublas=cublas_ms / ms)
        rows.append(row)
        print("time", {k: v for k, v in row.items() if k != "ms_samples"}, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--quick", action="store_true", help="probes and one config")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--inner", type=int, default=10)
    args = parser.parse_args(argv)
    if runtime.SIMULATOR or runtime.compute_capability() < (9, 0):
        print("wgmma_check needs a GPU of compute capability 9.0 (sm_90a)", file=sys.stderr)
        return 2
    import torch

    t_start = time.perf_counter()
    result: dict[str, Any] = {"device": runtime.device_name(), "compute_capability": runtime.compute_capability(),
                              "versions": runtime.versions(), "torch": torch.__version__, "quick": args.quick,
                              "size": args.size}

    def save() -> None:
        result["wall_s"] = round(time.perf_counter() - t_start, 1)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1, default=str)

    timed = {"f16": [0]} if args.quick else TIMED
    configs = [(itype, tc_gemm.WGMMA_CONFIGS[itype][i]) for itype, idx in timed.items() for i in idx]
    for step in (lambda: probes(QUICK_PROBES if args.quick else PROBES, result),
                 lambda: checks(torch, configs, result)):
        try:
            step()
        except Exception:  # noqa: BLE001
            result.setdefault("errors", []).append(traceback.format_exc()[-3000:])
        save()
    for itype, idx in timed.items():
        cfgs = [tc_gemm.WGMMA_CONFIGS[itype][i] for i in idx] + [tc_gemm.CONFIGS[itype][0]]
        try:
            timings(torch, itype, cfgs, args.size, args, result)
        except Exception:  # noqa: BLE001
            result.setdefault("errors", []).append(traceback.format_exc()[-3000:])
        save()
    bad = [r for r in result.get("probes", []) + result.get("gemm_checks", []) if not r.get("ok")]
    bad += [r for r in result.get("timings", []) if "error" in r or r.get("checked") is False]
    print(f"\nprobes {sum(r.get('ok', False) for r in result.get('probes', []))}/{len(result.get('probes', []))} ok,"
          f" gemm checks {sum(r.get('ok', False) for r in result.get('gemm_checks', []))}/"
          f"{len(result.get('gemm_checks', []))} ok, {result['wall_s']} s")
    print(f"{'itype':5} {'config':28} {'ms':>8} {'TFLOP/s':>8} {'vs cuBLAS':>9} {'rel err':>9} {'compile s':>9}")
    for r in result.get("timings", []):
        fmt = lambda key, spec: format(r[key], spec) if isinstance(r.get(key), (int, float)) else "-"  # noqa
        print(f"{r['itype']:5} {r.get('config', '-'):28} {fmt('ms', '8.3f')} {fmt('tflops', '8.1f')} "
              f"{fmt('vs_cublas', '9.2f')} {fmt('rel_err_vs_fp32', '9.1e')} {fmt('compile_s', '9.1f')}"
              + (f"  ERROR {r['error']}" if "error" in r else ""))
    save()
    return 1 if bad or result.get("errors") else 0


if __name__ == "__main__":
    sys.exit(main())
