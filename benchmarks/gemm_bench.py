"""Time the tiled GEMM kernel family (convlab.kernels.simt.gemm) against cuBLAS (torch) on one fp32 GEMM.

    python benchmarks/gemm_bench.py OUT.json [--size 4096] [--tiles 128x128x8/8x8 ...] [--repeat 20]

Both run in this process on the same device-resident operands (torch tensors, passed to numba through
``__cuda_array_interface__``), with TF32 off for cuBLAS. Each variant is run once (compile + check),
its relative error against the float64 product (computed by torch on the GPU) recorded, then timed with
CUDA events: ``warmup`` runs, then the median of ``repeat``. Writes the device, versions, shape, medians
(ms) and TFLOP/s (2*M*N*K / time) to OUT.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Callable

from convlab import runtime
from convlab.kernels.simt.gemm import GPU_TILES, Tile, matmul


def _median_ms(fn: Callable[[], object], warmup: int, repeat: int) -> float:
    """Median CUDA-event milliseconds of ``fn`` (torch and numba share the legacy default stream)."""
    return statistics.median(runtime.time_ms(fn, warmup=warmup, repeat=repeat))


def parse_tile(text: str) -> Tile:
    """``BMxBNxBK/TMxTN`` -> Tile."""
    block, thread = text.split("/")
    bm, bn, bk = (int(v) for v in block.split("x"))
    tm, tn = (int(v) for v in thread.split("x"))
    return Tile(bm, bn, bk, tm, tn)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="JSON file to write")
    parser.add_argument("--size", type=int, nargs="+", default=[4096], help="M [N K] (default 4096^3)")
    parser.add_argument("--tiles", nargs="*", default=None, help="tiles BMxBNxBK/TMxTN (default: presets)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    if runtime.SIMULATOR:
        print("gemm_bench needs a CUDA GPU (running on the simulator)", file=sys.stderr)
        return 2
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    m, n, k = (args.size * 3)[:3] if len(args.size) == 1 else args.size
    flops = 2.0 * m * n * k
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", generator=gen)
    b = torch.randn(k, n, device="cuda", generator=gen)
    want = (a.double() @ b.double())
    want_norm = float(torch.linalg.norm(want))
    c_torch = torch.empty(m, n, device="cuda")
    result = {"device": runtime.device_name(), "versions": runtime.versions(),
              "torch": torch.__version__, "shape": {"M": m, "N": n, "K": k}, "dtype": "float32",
              "timing": f"CUDA events, {args.warmup} warm-up runs, median of {args.repeat}",
              "variants": []}
    cublas_ms = _median_ms(lambda: torch.matmul(a, b, out=c_torch), args.warmup, args.repeat)
    result["cublas"] = {"ms": cublas_ms, "tflops": flops / cublas_ms / 1e9,
                        "rel_error": float(torch.linalg.norm(c_torch.double() - want)) / want_norm}
    print(f"cuBLAS: {cublas_ms:.3f} ms, {flops / cublas_ms / 1e9:.1f} TFLOP/s", flush=True)
    tiles = GPU_TILES if args.tiles is None else [parse_tile(t) for t in args.tiles]
    da, db = runtime.as_device_array(a), runtime.as_device_array(b)
    c = torch.full((m, n), float("nan"), device="cuda")
    dc = runtime.as_device_array(c)
    for tile in tiles:
        entry = {"tile": tile.name, "threads": tile.threads}
        try:
            t0 = time.perf_counter()
            matmul(da, db, dc, tile=tile)
            runtime.synchronize()
            entry["first_run_s"] = time.perf_counter() - t0  # compile + launch
            entry["rel_error"] = float(torch.linalg.norm(c.double() - want)) / want_norm
            ms = _median_ms(lambda: matmul(da, db, dc, tile=tile), args.warmup, args.repeat)
            entry.update(ms=ms, tflops=flops / ms / 1e9, vs_cublas=cublas_ms / ms)
            print(f"{tile.name}: {ms:.3f} ms, {entry['tflops']:.1f} TFLOP/s "
                  f"({entry['vs_cublas']:.2f} of cuBLAS), rel error {entry['rel_error']:.2e}, "
                  f"first run {entry['first_run_s']:.1f} s", flush=True)
        except Exception as exc:  # record and go on with the other variants
            entry["error"] = f"{type(exc).__name__}: {exc}"
            print(f"{tile.name}: {entry['error']}", flush=True)
        result["variants"].append(entry)
    timed = [v for v in result["variants"] if "tflops" in v]
    if timed:
        best = max(timed, key=lambda v: v["tflops"])
        result["best"] = {"tile": best["tile"], "tflops": best["tflops"], "vs_cublas": best["vs_cublas"]}
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
