"""GPU probe of the tensor-core GEMM (convlab.kernels.tensor_core.gemm) against cuBLAS (torch.matmul), same process.

    python benchmarks/tc_gemm_bench.py [--out FILE.json] [--size 4096 [N K]]
                                   [--itypes f16 bf16 tf32] [--configs 0 1 ...] [--repeat 20] [--inner 5]

Its correctness checks without timing are tests/kernels/test_tc_gemm.py and test_mma.py (on a GPU: every
config at a few sizes against float64). For each input type (fp16, bf16, tf32 from fp32) and
each config of tc_gemm.CONFIGS it compiles, checks and times C[M, N] = A[M, K] @ Bt[N, K]^T (fp32
output) with CUDA events (warm-up, then the median over ``repeat`` samples of ``inner`` back-to-back
calls, so the ~30 us Numba launch cost overlaps), against torch.matmul(A, Bt.T) in the same dtype
(fp32 output for cuBLAS fp16/bf16 is not offered by torch.matmul: it writes the input dtype) with
TF32 allowed for tf32. Every measurement is in its own try/except; the table is printed at the end and
everything goes to --out (JSON).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from typing import Any, Callable


from convlab import runtime
from convlab.kernels.tensor_core import gemm as tc_gemm
from convlab.runtime import cuda

TORCH_DTYPE = {"f16": "float16", "bf16": "bfloat16", "tf32": "float32"}


def _median_ms(fn: Callable[[], Any], warmup: int, repeat: int, inner: int) -> float:
    return statistics.median(runtime.time_ms(fn, warmup=warmup, repeat=repeat, inner=inner))


def _operands(torch, itype: str, m: int, n: int, k: int, seed: int):
    """(A, Bt) torch tensors in the itype's dtype, and numba views of them (bf16 as int16 bits)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dtype = getattr(torch, TORCH_DTYPE[itype])
    a = torch.randn(m, k, device="cuda", generator=gen).to(dtype)
    bt = torch.randn(n, k, device="cuda", generator=gen).to(dtype)
    view = (lambda t: t.view(torch.int16)) if itype == "bf16" else (lambda t: t)
    return a, bt, cuda.as_cuda_array(view(a)), cuda.as_cuda_array(view(bt))


def _rel_err(torch, c, a, bt) -> float:
    want = a.double() @ bt.double().T
    return float(torch.linalg.norm(c.double() - want) / torch.linalg.norm(want))


def _resources(kernel) -> dict:
    out = {}
    for name in ("get_regs_per_thread", "get_local_mem_per_thread", "get_shared_mem_per_block"):
        try:
            value = getattr(kernel, name)()
            out[name[4:]] = int(next(iter(value.values())) if isinstance(value, dict) else value)
        except Exception as exc:  # informational only
            out[name[4:]] = repr(exc)
    return out


def bench(torch, itype: str, cfgs, m: int, n: int, k: int, args, result: dict) -> None:
    flops = 2.0 * m * n * k
    rows = result.setdefault("timings", [])
    try:
        a, bt, a_nb, bt_nb = _operands(torch, itype, m, n, k, seed=1)
    except Exception as exc:
        rows.append({"itype": itype, "error": repr(exc)})
        return
    try:  # cuBLAS in the same dtype
        torch.backends.cuda.matmul.allow_tf32 = itype == "tf32"
        ms = _median_ms(lambda: torch.matmul(a, bt.T), args.warmup, args.repeat, args.inner)
        rows.append({"itype": itype, "config": "cublas", "ms": ms, "tflops": flops / ms / 1e9})
    except Exception as exc:
        rows.append({"itype": itype, "config": "cublas", "error": repr(exc)})
    cublas_ms = rows[-1].get("ms")
    rounds = args.tf32_round if itype == "tf32" else ["cvt"]
    for cfg, rnd in ((cfg, rnd) for cfg in cfgs for rnd in rounds):
        row = {"itype": itype, "config": cfg.name}
        if itype == "tf32":
            row["tf32_round"] = rnd
        try:
            c = torch.full((m, n), float("nan"), device="cuda")
            t0 = time.perf_counter()
            run = tc_gemm.launcher(itype, cfg, a_nb, bt_nb, cuda.as_cuda_array(c), tf32_round=rnd)
            run()
            cuda.synchronize()
            row["compile_s"] = time.perf_counter() - t0
            row["rel_err"] = _rel_err(torch, c, a, bt)
            row.update(_resources(tc_gemm.make_tc_gemm(itype, cfg, tf32_round=rnd)))
            row["ms"] = _median_ms(run, args.warmup, args.repeat, args.inner)
            row["tflops"] = flops / row["ms"] / 1e9
            if cublas_ms:
                row["vs_cublas"] = cublas_ms / row["ms"]
        except Exception as exc:
            row.update(error=repr(exc), trace=traceback.format_exc()[-2000:])
        rows.append(row)
        print("time", row, flush=True)
    torch.backends.cuda.matmul.allow_tf32 = False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="JSON file to write")
    parser.add_argument("--size", type=int, nargs="+", default=[4096], help="M [N K] (default 4096^3)")
    parser.add_argument("--itypes", nargs="*", default=["f16", "bf16", "tf32"],
                        help="input types to time")
    parser.add_argument("--configs", type=int, nargs="*", default=None,
                        help="indices into tc_gemm.CONFIGS[itype] to time (default: all)")
    parser.add_argument("--tf32-round", nargs="+", default=["trunc"], choices=["add", "cvt", "trunc"],
                        help="TF32 rounding of the fragments (kernels.tensor_core.warp.TF32_ROUND) to time, each")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--inner", type=int, default=5)
    args = parser.parse_args(argv)
    if runtime.SIMULATOR:
        print("tc_gemm_bench needs a CUDA GPU (running on the simulator)", file=sys.stderr)
        return 2
    import torch

    m, n, k = (args.size * 3)[:3] if len(args.size) == 1 else args.size
    result: dict[str, Any] = {"device": runtime.device_name(), "versions": runtime.versions(),
                              "torch": torch.__version__, "shape": [m, n, k]}

    def save() -> None:
        if args.out:
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1, default=str)

    for itype in args.itypes:
        cfgs = tc_gemm.CONFIGS[itype]
        if args.configs is not None:
            cfgs = [cfgs[i] for i in args.configs if i < len(cfgs)]
        bench(torch, itype, cfgs, m, n, k, args, result)
        save()
    print(f"\n{'itype':6} {'config':24} {'ms':>8} {'TFLOP/s':>8} {'vs cuBLAS':>9} {'rel err':>9} "
          f"{'regs':>5} {'local':>5} {'compile s':>9}")
    for r in result.get("timings", []):
        fmt = lambda key, spec: format(r[key], spec) if isinstance(r.get(key), (int, float)) else "-"  # noqa
        name = f"{r.get('config', '-')} {r.get('tf32_round', '')}"
        print(f"{r['itype']:6} {name:24} {fmt('ms', '8.3f')} {fmt('tflops', '8.1f')} "
              f"{fmt('vs_cublas', '9.2f')} {fmt('rel_err', '9.1e')} {fmt('regs_per_thread', '5d')} "
              f"{fmt('local_mem_per_thread', '5d')} {fmt('compile_s', '9.1f')}"
              + (f"  ERROR {r['error']}" if "error" in r else ""))
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
