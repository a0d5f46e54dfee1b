"""Check and time every implicit_gemm config on the GPU beside direct and cuDNN (torch), per op.

    python benchmarks/igemm_tune.py --out DIR            # Burn suite (batch 16) where the predicate holds
    python benchmarks/igemm_tune.py --sanitize           # tiny cases, every config, one launch each
                                                         # (run under compute-sanitizer memcheck/racecheck)

For each (shape, op): relative error of every config against torch in float64 (same inputs), the median
of CUDA-event times of every config, of direct (headline shape only unless --direct-all) and of cuDNN
(fp32, TF32 off, cudnn.benchmark on). Writes DIR/igemm_tune.json with the device and versions.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import convlab
from convlab import make_problem, runtime
from convlab.measure import rel_error, tolerance
from convlab.call.candidate import run_candidate
from convlab.plugin.registry import Candidate

# Burn conv2d suite (C, H, W, K, R, S, stride), batch 16, padding 0
BURN = [(16, 512, 512, 16, 3, 3, 1), (3, 227, 227, 96, 11, 11, 4), (3, 231, 231, 96, 11, 11, 4),
        (3, 227, 227, 64, 7, 7, 2), (64, 224, 224, 64, 7, 7, 2), (96, 24, 24, 256, 5, 5, 1),
        (256, 12, 12, 512, 3, 3, 1), (3, 224, 224, 64, 3, 3, 1), (64, 112, 112, 128, 3, 3, 1),
        (64, 56, 56, 64, 3, 3, 1), (128, 28, 28, 128, 3, 3, 1), (256, 14, 14, 256, 3, 3, 1),
        (512, 7, 7, 512, 3, 3, 1), (96, 224, 224, 64, 1, 1, 1)]
SANITIZE = [dict(n=2, c=16, h=8, w=8, k=32, r=3, s=3, padding=1, stride=1, dilation=1),
            dict(n=2, c=16, h=7, w=7, k=16, r=3, s=3, padding=2, stride=2, dilation=2),
            dict(n=2, c=32, h=8, w=8, k=16, r=3, s=3, padding=2, stride=1, dilation=2)]


def torch_ops(prob, torch):
    """(run_fp32, run_fp64) closures of cuDNN for the problem's op on given tensors."""
    F = torch.nn.functional
    st, pd, dl = prob.stride, prob.padding, prob.dilation

    def run(a, b, bias):
        if prob.op == "forward":
            return F.conv2d(a, b, bias, st, pd, dl)
        x_like = torch.empty(prob.x_shape, dtype=a.dtype, device=a.device)
        if prob.op == "dgrad":
            gi, _, _ = torch.ops.aten.convolution_backward(a, x_like, b, None, st, pd, dl, False,
                                                            [0, 0], 1, [True, False, False])
            return gi if bias is None else gi + bias[None, :, None, None]
        w_like = torch.empty(prob.w_shape, dtype=a.dtype, device=a.device)
        _, gw, _ = torch.ops.aten.convolution_backward(b, a, w_like, None, st, pd, dl, False,
                                                        [0, 0], 1, [False, True, False])
        return gw
    return run


def cuda_time(fn, torch=None, warmup=2, repeat=10) -> float:
    """Median CUDA-event ms of ``fn`` (runtime.time_ms; torch shares numba's legacy default stream)."""
    return statistics.median(runtime.time_ms(fn, warmup=warmup, repeat=repeat))


START = time.time()


def host_profile(plugin, torch, limit: int, calls: int = 200) -> str:
    """cProfile of the host side of ``calls`` launches (512x7x7 forward, batch 16): where the time goes."""
    import cProfile
    import io
    import pstats
    prob = make_problem("forward", 16, 512, 7, 7, 512, 3, 3)
    cfg = plugin.configs(prob)[0]
    arrays = [runtime.as_device_array(torch.randn(s, device="cuda")) for s in prob.operand_shapes]
    run_candidate(Candidate(plugin, cfg), prob, arrays[0], arrays[1], None, arrays[2], limit)
    torch.cuda.synchronize()
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for _ in range(calls):
        run_candidate(Candidate(plugin, cfg), prob, arrays[0], arrays[1], None, arrays[2], limit)
    prof.disable()
    host_us = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(14)
    report = f"host us per call (profiled): {host_us:.1f}\n" + text.getvalue()
    print(report[:3000])
    return report


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--ops", default="forward,dgrad,wgrad")
    ap.add_argument("--direct-all", action="store_true")
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    import torch
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    plugin, direct = convlab.get_plugin("implicit_gemm"), convlab.get_plugin("direct")
    limit = convlab.get_workspace_limit()
    gen = torch.Generator(device="cuda").manual_seed(0)
    records = []
    shapes = SANITIZE if args.sanitize else [
        dict(n=16, c=c, h=h, w=w, k=k, r=r, s=s, stride=st, padding=0, dilation=1)
        for c, h, w, k, r, s, st in BURN]
    for geo in shapes:
        for op in args.ops.split(","):
            for bias in ((False, True) if args.sanitize and op != "wgrad" else (False,)):
                prob = make_problem(op, **geo, bias=bias)
                verdict = plugin.applicable(prob)
                rec = {"problem": prob.to_dict(), "describe": prob.describe(), "gemm": prob.gemm_shape(),
                       "flops": prob.flops, "eligible": bool(verdict), "reason": verdict.reason}
                records.append(rec)
                print(prob.describe(), "->", "eligible" if verdict else verdict.reason, flush=True)
                if not verdict:
                    continue
                a_shape, b_shape, out_shape = prob.operand_shapes
                a = torch.randn(a_shape, device="cuda", generator=gen)
                b = torch.randn(b_shape, device="cuda", generator=gen)
                bt = torch.randn(prob.bias_shape, device="cuda", generator=gen) if bias else None
                cudnn = torch_ops(prob, torch)
                ref = cudnn(a.double(), b.double(), None if bt is None else bt.double()).cpu().numpy()
                out = torch.full(out_shape, float("nan"), device="cuda")
                da, db, dout = (runtime.as_device_array(t) for t in (a, b, out))
                dbias = None if bt is None else runtime.as_device_array(bt)
                rec["configs"] = {}
                for cfg in plugin.configs(prob):
                    out.fill_(float("nan"))
                    t0 = time.time()
                    run_candidate(Candidate(plugin, cfg), prob, da, db, dbias, dout, limit)
                    torch.cuda.synchronize()
                    first = time.time() - t0
                    err = rel_error(out.cpu().numpy(), ref)
                    entry = {"rel_error": err, "tolerance": tolerance(prob, plugin.compute_eps("float32")),
                             "first_call_s": round(first, 3),
                             "workspace_bytes": plugin.workspace_bytes(prob, cfg, limit)}
                    if not args.sanitize:
                        ms = cuda_time(lambda: run_candidate(Candidate(plugin, cfg), prob, da, db, dbias, dout,
                                                             limit), torch, repeat=args.repeat)
                        entry.update(ms=ms, tflops=prob.flops / ms / 1e9)
                    rec["configs"][cfg.name] = entry
                    print(f"   {cfg.name:32s} err {err:.1e} {'OK ' if err <= entry['tolerance'] else 'BAD'}"
                          f" {entry.get('ms', float('nan')):8.3f} ms {entry.get('tflops', 0):6.2f} TF/s",
                          flush=True)
                if args.sanitize:
                    continue
                best = min(rec["configs"].items(), key=lambda kv: kv[1]["ms"])
                rec["best"] = {"config": best[0], "ms": best[1]["ms"]}
                cfg = next(c for c in plugin.configs(prob) if c.name == best[0])
                torch.cuda.synchronize()
                t0 = time.perf_counter()  # host cost of one call (the GPU queue absorbs the launches)
                for _ in range(5):
                    run_candidate(Candidate(plugin, cfg), prob, da, db, dbias, dout, limit)
                rec["best"]["host_us_per_call"] = (time.perf_counter() - t0) / 5 * 1e6
                torch.cuda.synchronize()
                rec["cudnn_ms"] = cuda_time(lambda: cudnn(a, b, bt), torch, repeat=args.repeat)
                if args.direct_all or (geo["c"], geo["h"]) == (16, 512):
                    rec["direct_ms"] = cuda_time(lambda: run_candidate(Candidate(direct, direct.configs(prob)[0]),
                                                                       prob, da, db, dbias, dout, limit),
                                                 torch, warmup=1, repeat=3)
                print(f"   best {best[0]} {best[1]['ms']:.3f} ms (host "
                      f"{rec['best']['host_us_per_call']:.0f} us), cuDNN {rec['cudnn_ms']:.3f} ms, ratio "
                      f"{rec['cudnn_ms'] / best[1]['ms']:.2f}, direct {rec.get('direct_ms', float('nan')):.2f}",
                      flush=True)
    summary = {}
    for op in args.ops.split(","):
        ratios = [r["cudnn_ms"] / r["best"]["ms"] for r in records
                  if r["problem"]["op"] == op and "best" in r]
        if ratios:
            summary[op] = {"shapes": len(ratios),
                           "geomean_cudnn_over_igemm": math.exp(sum(map(math.log, ratios)) / len(ratios))}
    bad = [(r["describe"], k) for r in records for k, e in r.get("configs", {}).items()
           if not e["rel_error"] <= e["tolerance"]]
    result = {"device": runtime.device_name(), "versions": runtime.versions(),
              "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
              "settings": {"allow_tf32": False, "cudnn_benchmark": True, "batch": 16,
                           "workspace_limit": limit, "timing": "median of CUDA events"},
              "summary": summary, "failures": bad, "records": records}
    if not args.sanitize:
        result["host_profile"] = host_profile(plugin, torch, limit)
    name = "igemm_sanitize.json" if args.sanitize else "igemm_tune.json"
    with open(f"{args.out}/{name}", "w") as fh:
        json.dump(result, fh, indent=1, default=float)
    print(json.dumps(summary, indent=1), "failures:", bad, f"wall {time.time() - START:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
