"""GPU probe: the depthwise plugin against cuDNN/PyTorch on the depthwise layers of MobileNetV2 and
EfficientNet-B0 (batch 32, fp32, TF32 off), forward / dgrad / wgrad, the plugin's first configs.

    python benchmarks/depthwise_bench.py [--batch 32] [--nets mobilenetv2,efficientnet-b0]
        [--ops forward,dgrad,wgrad] [--configs 3] [--repeat 30] [--out depthwise.json]

Layers (unique shapes, with how often each occurs in the network):
- MobileNetV2: Sandler et al. 2018, Table 2 (bottlenecks t, c, n, s = 1,16,1,1 / 6,24,2,2 / 6,32,3,2 /
  6,64,4,2 / 6,96,3,1 / 6,160,3,2 / 6,320,1,1 on a 112x112x32 stem), as in torchvision's mobilenet_v2:
  every depthwise conv is 3x3, padding 1.
- EfficientNet-B0: Tan & Le 2019, Table 1, as in torchvision's efficientnet_b0 (MBConv expand, kernel,
  stride, in, out, layers = 1,3,1,32,16,1 / 6,3,2,16,24,2 / 6,5,2,24,40,2 / 6,3,2,40,80,3 /
  6,5,1,80,112,3 / 6,5,2,112,192,4 / 6,3,1,192,320,1): padding (k - 1) / 2.

For each layer and op: correctness of the plugin's first ``--configs`` configs (0: all; each compiles
for about a second, so all of them make a net take minutes) against PyTorch in float64 (relative norm
error within convlab's tolerance), the median time of each with CUDA events (warm-up, then one call
per event pair, as convlab bench times), cuDNN/PyTorch (torch.nn.functional.conv2d with groups=C, and
torch.nn.grad.conv2d_input / conv2d_weight, cudnn.benchmark=True), and the public op
(convlab.conv2d / conv2d_backward_data / conv2d_backward_weight on torch tensors, algorithm="depthwise").
"back-to-back" times run the call `repeat` times between two events (host launch cost overlapped).
ratio = cuDNN time / ours (> 1: we are faster). Each measurement is wrapped: a failure is recorded.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import traceback

import numpy as np
import torch
import torch.nn.functional as F

import convlab
from convlab import measure, runtime
from convlab.runtime.settings import get_workspace_limit
from convlab.call.candidate import run_candidate
from convlab.plugin.registry import Candidate

# (name, C, H, kernel, stride, count in the network)
MOBILENET_V2 = [("mbv2_112_c32_s1", 32, 112, 3, 1, 1), ("mbv2_112_c96_s2", 96, 112, 3, 2, 1),
                ("mbv2_56_c144_s1", 144, 56, 3, 1, 1), ("mbv2_56_c144_s2", 144, 56, 3, 2, 1),
                ("mbv2_28_c192_s1", 192, 28, 3, 1, 2), ("mbv2_28_c192_s2", 192, 28, 3, 2, 1),
                ("mbv2_14_c384_s1", 384, 14, 3, 1, 4), ("mbv2_14_c576_s1", 576, 14, 3, 1, 2),
                ("mbv2_14_c576_s2", 576, 14, 3, 2, 1), ("mbv2_7_c960_s1", 960, 7, 3, 1, 3)]
EFFICIENTNET_B0 = [("effb0_112_c32_k3_s1", 32, 112, 3, 1, 1), ("effb0_112_c96_k3_s2", 96, 112, 3, 2, 1),
                   ("effb0_56_c144_k3_s1", 144, 56, 3, 1, 1), ("effb0_56_c144_k5_s2", 144, 56, 5, 2, 1),
                   ("effb0_28_c240_k5_s1", 240, 28, 5, 1, 1), ("effb0_28_c240_k3_s2", 240, 28, 3, 2, 1),
                   ("effb0_14_c480_k3_s1", 480, 14, 3, 1, 2), ("effb0_14_c480_k5_s1", 480, 14, 5, 1, 1),
                   ("effb0_14_c672_k5_s1", 672, 14, 5, 1, 2), ("effb0_14_c672_k5_s2", 672, 14, 5, 2, 1),
                   ("effb0_7_c1152_k5_s1", 1152, 7, 5, 1, 3), ("effb0_7_c1152_k3_s1", 1152, 7, 3, 1, 1)]
NETS = {"mobilenetv2": MOBILENET_V2, "efficientnet-b0": EFFICIENTNET_B0}


def timed(fn, warmup: int, repeat: int) -> dict:
    """Median per-call ms (convlab.runtime.time_ms: events around each call) and back-to-back ms (events
    around `repeat` calls)."""
    times = runtime.time_ms(fn, warmup=warmup, repeat=repeat)
    if times is None:
        raise RuntimeError("timing needs a GPU (the CUDA simulator has no device clock)")
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeat):
        fn()
    stop.record()
    stop.synchronize()
    return {"ms": statistics.median(times), "b2b_ms": start.elapsed_time(stop) / repeat}


def attempt(record: dict, key: str, fn) -> None:
    try:
        record[key] = fn()
    except Exception as exc:  # one failing measurement must not stop the probe
        record[key] = {"error": f"{type(exc).__name__}: {exc}"}
        traceback.print_exc()


def layer_ops(c, h, k, stride, batch):
    """Torch operands and the three (problem, torch reference, torch timed call, public op) per op."""
    pad = (k - 1) // 2
    dev = torch.device("cuda")
    x = torch.randn(batch, c, h, h, device=dev)
    w = torch.randn(c, 1, k, k, device=dev)
    y = F.conv2d(x, w, None, stride, pad, 1, c)
    dy = torch.randn_like(y)
    common = dict(stride=stride, padding=pad, dilation=1, groups=c)
    xd, wd, dyd = x.double(), w.double(), dy.double()
    out = {
        "forward": (convlab.ops.problem_for("conv2d", x, w, None, stride, pad, 1, c), (x, w),
                    lambda: F.conv2d(xd, wd, None, stride, pad, 1, c),
                    lambda: F.conv2d(x, w, None, stride, pad, 1, c),
                    lambda: convlab.conv2d(x, w, None, stride, pad, 1, c, algorithm="depthwise")),
        "dgrad": (convlab.ops.problem_for("conv2d_backward_data", dy, w, x.shape, stride, pad, 1, c),
                  (dy, w), lambda: torch.nn.grad.conv2d_input(x.shape, wd, dyd, **common),
                  lambda: torch.nn.grad.conv2d_input(x.shape, w, dy, **common),
                  lambda: convlab.conv2d_backward_data(dy, w, x.shape, stride, pad, 1, c,
                                                       algorithm="depthwise")),
        "wgrad": (convlab.ops.problem_for("conv2d_backward_weight", x, dy, w.shape, stride, pad, 1, c),
                  (x, dy), lambda: torch.nn.grad.conv2d_weight(xd, w.shape, dyd, **common),
                  lambda: torch.nn.grad.conv2d_weight(x, w.shape, dy, **common),
                  lambda: convlab.conv2d_backward_weight(x, dy, w.shape, stride, pad, 1, c,
                                                         algorithm="depthwise")),
    }
    return out


def run_layer(net, name, c, h, k, stride, count, args) -> list[dict]:
    plugin = convlab.get_plugin("depthwise")
    limit = get_workspace_limit()
    rows = []
    ops = layer_ops(c, h, k, stride, args.batch)
    for op in args.ops:
        problem, operands, ref_fn, torch_fn, public_fn = ops[op]
        row = {"net": net, "layer": name, "count": count, "op": op, "problem": problem.describe(),
               "configs": {}}
        want = ref_fn().cpu().numpy()
        tol = measure.tolerance(problem, float(np.finfo(np.float32).eps))
        a, b = (convlab.runtime.as_device_array(t) for t in operands)
        configs = plugin.configs(problem)
        for config in configs[:args.configs] if args.configs > 0 else configs:
            rec: dict = {}
            if not plugin.applicable(problem, config, limit):
                rec["declined"] = plugin.applicable(problem, config, limit).reason
                row["configs"][config.name] = rec
                continue
            res = torch.full(problem.operand_shapes[2], float("nan"), device="cuda")
            dres = convlab.runtime.as_device_array(res)
            run = lambda: run_candidate(Candidate(plugin, config), problem, a, b, None, dres, limit)  # noqa: E731

            def check():
                run()
                torch.cuda.synchronize()
                err = measure.rel_error(res.cpu().numpy(), want)
                return {"rel_err": err, "ok": err <= tol}

            attempt(rec, "check", check)
            if rec["check"].get("ok"):
                attempt(rec, "time", lambda: timed(run, args.warmup, args.repeat))
            row["configs"][config.name] = rec
        attempt(row, "cudnn", lambda: timed(torch_fn, args.warmup, args.repeat))

        def public():
            got = public_fn()
            torch.cuda.synchronize()
            host = got.cpu().numpy() if isinstance(got, torch.Tensor) else got.copy_to_host()
            err = measure.rel_error(host, want)
            return {"rel_err": err, "ok": err <= tol, **timed(public_fn, args.warmup, args.repeat)}

        attempt(row, "public_op", public)
        timed_cfgs = {n: r["time"] for n, r in row["configs"].items() if "ms" in r.get("time", {})}
        if timed_cfgs:
            best = min(timed_cfgs, key=lambda n: timed_cfgs[n]["ms"])
            row["best"] = {"config": best, **timed_cfgs[best]}
            row["first"] = {"config": plugin.configs(problem)[0].name,
                            **timed_cfgs.get(plugin.configs(problem)[0].name, {})}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "configs"}), flush=True)
    return rows


def ratio(row, key, field="ms"):
    try:
        return row["cudnn"][field] / row[key][field]
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def summary(rows) -> str:
    lines = [f"{'layer':22} {'op':7} {'cudnn ms':>9} {'best ms':>8} {'config':16} {'ratio':>6} "
             f"{'first':>6} {'b2b':>6} {'public ms':>9} {'ratio':>6} {'checks':>6}"]
    for row in rows:
        ok = all(r.get("check", {}).get("ok", "declined" in r) for r in row["configs"].values())
        fmt = lambda v, w=6, d=2: f"{v:>{w}.{d}f}" if isinstance(v, float) else f"{'-':>{w}}"  # noqa: E731
        lines.append(f"{row['layer']:22} {row['op']:7} {fmt(row['cudnn'].get('ms'), 9, 4)} "
                     f"{fmt(row.get('best', {}).get('ms'), 8, 4)} "
                     f"{row.get('best', {}).get('config', '-'):16} "
                     f"{fmt(ratio(row, 'best'))} {fmt(ratio(row, 'first'))} "
                     f"{fmt(ratio(row, 'best', 'b2b_ms'))} {fmt(row['public_op'].get('ms'), 9, 4)} "
                     f"{fmt(ratio(row, 'public_op'))} {'ok' if ok else 'WRONG':>6}")
    lines.append("geometric mean of cuDNN / ours (per-call best config | first config | back-to-back best "
                 "| public op):")
    for op in sorted({r["op"] for r in rows}):
        means = []
        for key, field in (("best", "ms"), ("first", "ms"), ("best", "b2b_ms"), ("public_op", "ms")):
            vals = [v for v in (ratio(r, key, field) for r in rows if r["op"] == op) if v]
            means.append(math.exp(sum(map(math.log, vals)) / len(vals)) if vals else float("nan"))
        lines.append(f"  {op:8} " + " | ".join(f"{m:.3f}" for m in means))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--nets", default="mobilenetv2,efficientnet-b0")
    parser.add_argument("--ops", default="forward,dgrad,wgrad")
    parser.add_argument("--layers", default="", help="comma-separated substrings of layer names")
    parser.add_argument("--configs", type=int, default=3, help="time the plugin's first N configs (0: all)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    args.ops = args.ops.split(",")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    print(convlab.runtime.versions(), "torch", torch.__version__, "cudnn", torch.backends.cudnn.version())
    rows = []
    for net in args.nets.split(","):
        for name, c, h, k, stride, count in NETS[net]:
            if args.layers and not any(s in name for s in args.layers.split(",")):
                continue
            try:
                rows += run_layer(net, name, c, h, k, stride, count, args)
            except Exception:  # a layer that fails entirely (e.g. out of memory) is skipped
                traceback.print_exc()
    text = summary(rows)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rows": rows, "summary": text, "args": vars(args)}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
