"""GPU probe: implicit GEMM on grouped, odd-channel and strided backward-data layers, checked against torch
float64 and timed beside cuDNN and the explicit-GEMM plugins.

    python benchmarks/igemm_coverage_bench.py [--out FILE.json] [--configs N] [--repeat 20]

Per layer and op: the relative error of every implicit_gemm config (the first ``--configs`` of its
preference order, default all) against torch in float64 on the same inputs, and the median of
``--repeat`` CUDA-event times after warm-up of plugin.run, of cuDNN fp32 (torch; cudnn.benchmark on,
TF32 off) and of the explicit-GEMM plugin of the op (im2col for forward/wgrad, col2im for dgrad; direct
when that one declines). Every measurement is caught separately (an exception is recorded, not fatal); a table
with the ratios closes the run. About two minutes on an H200, compiles included (`--configs 3`
shortens it).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import traceback

import convlab
from convlab import make_problem, runtime
from convlab.measure import rel_error, tolerance
from convlab.call.candidate import run_candidate
from convlab.plugin.registry import Candidate

# (label, ops, make_problem keywords): ResNeXt-50 32x4d grouped 3x3, MobileNetV2-like odd channels, a
# 3-channel stem, ResNet-50 stride-2 3x3 dgrad, a DCGAN ConvTranspose2d(256, 128, 4, 2, 1) (dgrad + bias)
LAYERS = [
    ("resnext 128x56 g32", "forward,dgrad,wgrad", dict(n=16, c=128, h=56, w=56, k=128, r=3, s=3, padding=1,
                                                       groups=32)),
    ("resnext 256x28 g32", "forward", dict(n=16, c=256, h=28, w=28, k=256, r=3, s=3, padding=1, groups=32)),
    ("resnext 512x14 g32", "forward,dgrad", dict(n=16, c=512, h=14, w=14, k=512, r=3, s=3, padding=1,
                                                 groups=32)),
    ("resnext 1024x7 g32", "forward,wgrad", dict(n=16, c=1024, h=7, w=7, k=1024, r=3, s=3, padding=1,
                                                 groups=32)),
    ("mbv2 1x1 24->144 56", "forward,dgrad,wgrad", dict(n=32, c=24, h=56, w=56, k=144, r=1, s=1)),
    ("mbv2 1x1 40->240 28", "forward", dict(n=32, c=40, h=28, w=28, k=240, r=1, s=1)),
    ("mbv2 1x1 80->480 14", "forward", dict(n=32, c=80, h=14, w=14, k=480, r=1, s=1)),
    ("stem 3->32 3x3 s2", "forward,wgrad", dict(n=32, c=3, h=224, w=224, k=32, r=3, s=3, stride=2,
                                                padding=1)),
    ("resnet50 128x56 s2", "dgrad", dict(n=16, c=128, h=56, w=56, k=128, r=3, s=3, stride=2, padding=1)),
    ("resnet50 256x28 s2", "dgrad", dict(n=16, c=256, h=28, w=28, k=256, r=3, s=3, stride=2, padding=1)),
    ("dcgan convT 4x4 s2", "dgrad", dict(n=64, c=128, h=32, w=32, k=256, r=4, s=4, stride=2, padding=1,
                                         bias=True)),
]
PREVIOUS = {"forward": "im2col", "wgrad": "im2col", "dgrad": "col2im"}


def torch_op(prob, torch):
    """``run(a, b, bias)``: the problem's op in torch (cuDNN for float32), groups and bias included;
    dgrad as conv_transpose2d (dy, w) -> dx."""
    st, pd, dl, g = prob.stride, prob.padding, prob.dilation, prob.groups
    out_pad = tuple(size - ((pq - 1) * s - 2 * p + d * (k - 1) + 1) for size, pq, s, p, d, k in
                    zip((prob.h, prob.w), (prob.p, prob.q), st, pd, dl, (prob.r, prob.s)))

    def run(a, b, bias):
        if prob.op == "forward":
            return torch.nn.functional.conv2d(a, b, bias, st, pd, dl, g)
        if prob.op == "dgrad":  # the transposed convolution: cuDNN's backward-data, bias fused
            return torch.nn.functional.conv_transpose2d(a, b, bias, st, pd, out_pad, g, dl)
        w_like = torch.empty(prob.w_shape, dtype=a.dtype, device=a.device)
        return torch.ops.aten.convolution_backward(b, a, w_like, None, st, pd, dl, False, [0, 0], g,
                                                   [False, True, False])[1]
    return run


def median_ms(fn, repeat: int, warmup: int = 3) -> float:
    return statistics.median(runtime.time_ms(fn, warmup=warmup, repeat=repeat))


def first_call_s(run, torch) -> float:
    """Seconds of the first call (compile + launch), synchronised."""
    t0 = time.time()
    run()
    torch.cuda.synchronize()
    return time.time() - t0


def guard(rec: dict, key: str, fn):
    try:
        rec[key] = fn()
    except Exception as exc:  # noqa: BLE001  (one failure must not cost the other numbers)
        rec[key] = None
        rec.setdefault("errors", {})[key] = f"{type(exc).__name__}: {exc}"
        print(f"   {key}: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}", flush=True)
    return rec[key]


def measure(label: str, prob, torch, limit: int, n_configs: int | None, repeat: int) -> dict:
    plugin = convlab.get_plugin("implicit_gemm")
    verdict = plugin.applicable(prob)
    rec = {"label": label, "describe": prob.describe(), "problem": prob.to_dict(), "gemm": prob.gemm_shape(),
           "flops": prob.flops, "eligible": bool(verdict), "reason": verdict.reason, "configs": {}}
    print(f"{label}: {prob.describe()} -> {'eligible' if verdict else verdict.reason}", flush=True)
    if not verdict:
        return rec
    gen = torch.Generator(device="cuda").manual_seed(0)
    a, b = (torch.randn(s, device="cuda", generator=gen) for s in prob.operand_shapes[:2])
    bias = torch.randn(prob.bias_shape, device="cuda", generator=gen) if prob.bias else None
    op = torch_op(prob, torch)
    ref = op(a.double(), b.double(), None if bias is None else bias.double()).cpu().numpy()
    out = torch.full(prob.operand_shapes[2], float("nan"), device="cuda")
    da, db, dout = (runtime.as_device_array(t) for t in (a, b, out))
    dbias = None if bias is None else runtime.as_device_array(bias)
    tol = tolerance(prob, plugin.compute_eps("float32"))
    for cfg in plugin.configs(prob)[:n_configs]:
        entry = rec["configs"][cfg.name] = {"tolerance": tol}

        def run(plug=plugin, cfg=cfg):
            run_candidate(Candidate(plug, cfg), prob, da, db, dbias, dout, limit)
        out.fill_(float("nan"))
        if guard(entry, "first_call_s", lambda: first_call_s(run, torch)) is None:
            continue
        entry["rel_error"] = rel_error(out.cpu().numpy(), ref)
        entry["ok"] = bool(entry["rel_error"] <= tol)
        guard(entry, "ms", lambda: median_ms(run, repeat))
        print(f"   {cfg.name:32s} err {entry['rel_error']:.1e} {'OK ' if entry['ok'] else 'BAD'} "
              f"{entry['ms'] or float('nan'):8.3f} ms", flush=True)
    timed = [(e["ms"], name) for name, e in rec["configs"].items() if e.get("ms") and e.get("ok")]
    if timed:
        rec["best_ms"], rec["best_config"] = min(timed)
    guard(rec, "cudnn_ms", lambda: median_ms(lambda: op(a, b, bias), repeat))
    for name in (PREVIOUS[prob.op], "direct"):
        prev = convlab.get_plugin(name)
        pcfg = prev.configs(prob)[0]
        if prev.applicable(prob, pcfg, limit):
            rec["previous"] = name
            guard(rec, "previous_ms", lambda: median_ms(
                lambda: run_candidate(Candidate(prev, pcfg), prob, da, db, dbias, dout, limit),
                repeat if name != "direct" else 3, warmup=1))
            break
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the records as JSON here")
    ap.add_argument("--configs", type=int, default=None, help="time only the first N configs")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--list", action="store_true", help="only list the problems and verdicts (no GPU)")
    args = ap.parse_args()
    start = time.time()
    if args.list:
        for label, ops, geo in LAYERS:
            for op in ops.split(","):
                prob = make_problem(op, **{k: v for k, v in geo.items() if op != "wgrad" or k != "bias"})
                plugin = convlab.get_plugin("implicit_gemm")
                print(f"{label:22s} {prob.describe():60s} GEMM {prob.gemm_shape()} "
                      f"{plugin.applicable(prob) or plugin.applicable(prob).reason} "
                      f"{[c.name for c in plugin.configs(prob)][:2]}")
        return 0
    import torch
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    limit = convlab.get_workspace_limit()
    records = []
    for label, ops, geo in LAYERS:
        for op in ops.split(","):
            kw = dict(geo)
            if op == "wgrad":
                kw.pop("bias", None)
            try:
                prob = make_problem(op, **kw)
                records.append(measure(label, prob, torch, limit, args.configs, args.repeat))
            except Exception as exc:  # noqa: BLE001
                records.append({"label": label, "op": op, "error": f"{type(exc).__name__}: {exc}",
                                "traceback": traceback.format_exc()})
                print(records[-1]["traceback"], flush=True)
    print(f"\n{'layer':22s} {'op':7s} {'GEMM M,N,K (per group)':24s} {'igemm ms':>9s} {'cuDNN ms':>9s} "
          f"{'prev ms':>9s} {'cuDNN/ig':>8s} {'prev/ig':>8s}  previous / best config")
    ratios = []
    for r in records:
        if "describe" not in r:
            print(f"{r['label']:22s} {r['op']:7s} error: {r['error']}")
            continue
        ig, cd, pv = r.get("best_ms"), r.get("cudnn_ms"), r.get("previous_ms")
        fmt = lambda v: f"{v:9.3f}" if v else f"{'-':>9s}"  # noqa: E731
        rat = lambda x, y: f"{x / y:8.2f}" if x and y else f"{'-':>8s}"  # noqa: E731
        if ig and cd:
            ratios.append(cd / ig)
        print(f"{r['label']:22s} {r['problem']['op']:7s} {str(tuple(r['gemm'])):24s} {fmt(ig)} {fmt(cd)} "
              f"{fmt(pv)} {rat(cd, ig)} {rat(pv, ig)}  {r.get('previous', '-')} / "
              f"{r.get('best_config', '-')}")
    bad = [(r["describe"], name) for r in records for name, e in r.get("configs", {}).items()
           if e.get("ok") is False or "errors" in e]
    bad += [(f"{r['label']} {r['op']}", r["error"]) for r in records if "error" in r]
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
    print(f"geomean cuDNN/igemm {geo if geo is None else round(geo, 3)}; failures {bad}; "
          f"wall {time.time() - start:.0f} s")
    if args.out:
        result = {"device": runtime.device_name(), "versions": runtime.versions(), "torch": torch.__version__,
                  "cudnn": torch.backends.cudnn.version(), "workspace_limit": limit,
                  "settings": {"allow_tf32": False, "cudnn_benchmark": True, "repeat": args.repeat,
                               "timing": "median of CUDA events after warm-up"},
                  "geomean_cudnn_over_igemm": geo, "failures": bad, "records": records}
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1, default=float)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
