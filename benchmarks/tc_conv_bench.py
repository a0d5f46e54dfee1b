"""GPU probe of the tensor_core plugin: its time vs cuDNN, every timed output checked first.

    python benchmarks/tc_conv_bench.py --quick [--out FILE.json]         # forward fp16 on Burn
    python benchmarks/tc_conv_bench.py [--out FILE.json]                 # Burn (batch 16) + ResNet-50
                                                                         # (batch 32), fwd, dgrad, wgrad,
                                                                         # fp16 / bf16 / TF32
        [--suites burn,resnet50] [--dtypes float16,bfloat16,float32] [--ops forward,dgrad,wgrad]  # subsets
        [--shapes 16x512x512,...] [--all-configs]   # entries whose label has one of these; every config

Its correctness at GPU tile sizes without timing is tests/algorithms/test_tensor_core_gpu.py.
Operands are torch tensors on the GPU (bf16 handed to the plugin as uint16 bits; the public
op also on channels-last tensors, ``op_cl_ms``, against channels-last cuDNN); the plugin's first config
(what "auto" would try first; one compile per config, 5-25 s each), its output checked against cuDNN in
float64 (and the public op's output again after its timing: ``op_rel_err``), then CUDA-event medians of
20 runs after warm-up, against cuDNN in the same dtype and math mode (TF32:
``torch.backends.cudnn.allow_tf32 = True``), in NCHW and in channels_last. The public op runs its plan
as one CUDA graph (convlab.call.graphs: the same tensors every call); ``op_nograph_ms`` times it again with
graphs off (each launch issued alone). Summary: geometric means of cuDNN (its faster layout) / ours per
op and dtype, through the public op (the user's path) and through plugin.run (above 1: ours is faster),
and the shapes where the public op is faster. Every measurement is in its own try/except: failures
become rows.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import numpy as np

import convlab
from convlab import runtime
from convlab.call import graphs
from convlab.bench.baseline import torch_call
from convlab.bench.suite import load_suite
from convlab.measure import rel_error, tolerance
from convlab.plugin import registry
from convlab.call.candidate import run_candidate
from convlab.plugin.registry import Candidate

DTYPES = ("float16", "bfloat16", "float32")  # float32 = TF32 under precision "high"



def log(*args) -> None:
    print(*args, flush=True)


OUT_PATH = None  # --out, written after every row
LIMIT = 2**31  # workspace limit of the benchmark (the NHWC copies: 268 MiB for the seed shape in TF32)


def _events_ms(fn) -> float:
    """Median ms of ``fn()`` (convlab.runtime.time_ms: CUDA events on the default stream, which torch's
    default stream follows, 3 warm-up calls, 20 samples)."""
    times = runtime.time_ms(fn, warmup=3, repeat=20)
    if times is None:
        raise RuntimeError("timing needs a GPU (the CUDA simulator has no device clock)")
    return statistics.median(times)


def _b2b_ms(fn) -> float:
    """Median ms per call of 10 calls back to back between two CUDA events (host work overlaps the
    device's: a stream of layers), 10 samples."""
    return statistics.median(runtime.time_ms(fn, warmup=3, repeat=10, inner=10))


def _as_numba(torch, t):
    if t is None:
        return None
    if t.dtype == torch.bfloat16:
        return runtime.as_device_array(t.view(torch.int16)).view(np.uint16)
    return runtime.as_device_array(t)


def bench_one(torch, plugin, entry, pr, rows: list, config_index: int = 0) -> None:
    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[pr.dtype]
    row = {"part": "bench", "shape": entry.label, "op": pr.op, "dtype": "tf32" if pr.dtype == "float32"
           else pr.dtype}
    try:
        verdict = plugin.applicable(pr, workspace_limit=LIMIT)
        if not verdict:
            row.update(status="declined", error=verdict.reason)
            return
        config = plugin.configs(pr)[config_index]
        row["config"] = config.name
        row["workspace_mib"] = round(plugin.workspace_bytes(pr, config, LIMIT) / 2**20, 1)
        a_shape, b_shape, out_shape = pr.operand_shapes
        g = torch.Generator(device="cuda").manual_seed(0)
        ta = torch.randn(a_shape, device="cuda", generator=g).to(tdt)
        tb = torch.randn(b_shape, device="cuda", generator=g).to(tdt)
        tbias = torch.randn(pr.bias_shape, device="cuda", generator=g).to(tdt) if pr.bias else None
        tout = torch.full(out_shape, float("nan"), device="cuda", dtype=tdt)
        a, b, bias, out = (_as_numba(torch, t) for t in (ta, tb, tbias, tout))
        t0 = time.perf_counter()
        ours = lambda: run_candidate(Candidate(plugin, config), pr, a, b, bias, out, LIMIT)  # noqa: E731
        ours()
        torch.cuda.synchronize()
        row["first_s"] = round(time.perf_counter() - t0, 1)
        with torch.no_grad():
            ref = torch_call(torch, pr, ta.double(), tb.double(), None if tbias is None else tbias.double(),
                             False)().cpu().numpy()
        row["rel_err"] = rel_error(tout.float().cpu().numpy(), ref)
        row["tolerance"] = tolerance(pr, plugin.compute_eps(pr.dtype))
        row["status"] = "ok" if row["rel_err"] <= row["tolerance"] else "WRONG"
        row["ours_ms"] = _events_ms(ours)
        row.update(_parts_ms(pr, ours, (a, b, bias, out)))
        op = _public_op(convlab, pr, ta, tb, tbias, tout, config)
        row["op_ms"] = _events_ms(op)
        tout.fill_(float("nan"))  # the op's own output (its plan's graph by now) checked as well
        op()
        row["op_rel_err"] = rel_error(tout.float().cpu().numpy(), ref)
        if row["op_rel_err"] > row["tolerance"]:
            row["status"] = "WRONG"
        with graphs.disabled():  # each launch of the plan issued alone
            row["op_nograph_ms"] = _events_ms(_public_op(convlab, pr, ta, tb, tbias, tout, config))
        row["op_b2b_ms"] = _b2b_ms(_public_op(convlab, pr, ta, tb, tbias, tout, config))
        cl = lambda t: t.contiguous(memory_format=torch.channels_last)  # noqa: E731
        row["op_cl_ms"] = _events_ms(_public_op(convlab, pr, cl(ta), cl(tb), tbias, cl(tout),  # NHWC tensors
                                                config))
        try:
            row.update(_resources(pr, config))
        except Exception as exc:  # noqa: BLE001 - diagnostics only; the timings stand
            row["resources_error"] = repr(exc)[:200]
        torch.backends.cudnn.allow_tf32 = pr.dtype == "float32"
        with torch.no_grad():
            row["cudnn_ms"] = _events_ms(torch_call(torch, pr, ta, tb, tbias, False))
            row["cudnn_b2b_ms"] = _b2b_ms(torch_call(torch, pr, ta, tb, tbias, False))
            cl = [None if t is None or t.dim() != 4 else t.contiguous(memory_format=torch.channels_last)
                  for t in (ta, tb)]  # channels_last (TF32 too)
            row["cudnn_cl_ms"] = _events_ms(torch_call(torch, pr, cl[0], cl[1], tbias, False))
        best = min(row[k] for k in ("cudnn_ms", "cudnn_cl_ms") if row.get(k))
        row["cudnn_over_ours"] = best / row["ours_ms"]  # plugin.run with Numba's launches
        row["cudnn_over_op"] = best / row["op_ms"]  # the user's path: the public op on torch tensors
        row["cudnn_nchw_over_op"] = row["cudnn_ms"] / row["op_ms"]  # both NCHW
        row["cudnn_nchw_over_op_nograph"] = row["cudnn_ms"] / row["op_nograph_ms"]  # both NCHW, no graph
        row["cudnn_cl_over_op_cl"] = row.get("cudnn_cl_ms", row["cudnn_ms"]) / row["op_cl_ms"]  # both NHWC
        row["cudnn_over_op_b2b"] = row["cudnn_b2b_ms"] / row["op_b2b_ms"]  # NCHW, calls back to back
    except Exception as exc:
        row.update(status="error", error=f"{type(exc).__name__}: {exc}"[:400])
    finally:
        torch.backends.cudnn.allow_tf32 = False
        rows.append(row)
        log({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()})
        if OUT_PATH:  # after every row: a run cut by its time limit keeps what it measured
            _write(rows, OUT_PATH)


def _public_op(convlab, pr, ta, tb, tbias, tout, config):
    """The public op on the torch tensors, forced to the tensor-core plugin and ``config`` (plans, thin
    launches)."""
    opts = dict(stride=pr.stride, padding=pr.padding, dilation=pr.dilation, groups=pr.groups,
                algorithm=("tensor_core", config.name), out=tout, workspace_limit=LIMIT)
    if pr.op == "forward":
        return lambda: convlab.conv2d(ta, tb, tbias, **opts)
    if pr.op == "wgrad":
        return lambda: convlab.conv2d_backward_weight(ta, tb, pr.w_shape, **opts)
    return lambda: convlab.conv2d_backward_data(ta, tb, pr.x_shape, **opts)


def _parts_ms(pr, run, operands) -> dict:
    """Device time of each launch of one ``plugin.run`` (layout changes, then the GEMM), each replayed
    alone through the thin path and timed with CUDA events."""
    from convlab.runtime import launch
    from convlab.call.operands import pointer
    spans = [None if v is None else pointer(v) for v in operands]
    with launch.recording(spans) as recs:
        run()
    bases = [0 if sp is None else sp[0] for sp in spans]
    parts = {}
    for i, rec in enumerate(recs):
        if rec.thin is None:
            return {"parts_error": "no thin launch"}
        name = getattr(rec.dispatcher, "__name__", "?")
        parts[f"part{i}_{name}_ms"] = _events_ms(lambda rec=rec: rec.replay(None, bases, 0))
    return parts


def _resources(pr, config) -> dict:
    """Registers and local memory (spills) per thread of the GEMM kernel, from Numba's dispatcher."""
    from convlab.algorithms.tensor_core import split_k, tc_config
    from convlab.algorithms.tensor_core.plugin import ITYPE
    from convlab.kernels.tensor_core import conv as tc_conv
    if pr.op == "wgrad":
        return {}  # the tensor-core GEMM of tc_gemm (see tc_gemm_bench for its registers)
    split = split_k(pr, tc_config(config), runtime.target())[0] > 1  # split-K: the partials' kernel (bias after the sum)
    kernel = tc_conv.make_tc_conv(ITYPE[pr.dtype], tc_config(config), pr.bias and not split, False,
                                  split).dispatcher
    if not kernel.overloads:  # launched from the disk kernel cache: Numba compiled nothing to ask
        return {}
    regs, local = kernel.get_regs_per_thread(), kernel.get_local_mem_per_thread()
    return {"regs": max(regs.values()) if isinstance(regs, dict) else regs,
            "local_bytes": max(local.values()) if isinstance(local, dict) else local}


def bench(args, plugin, rows: list) -> None:
    import torch
    torch.backends.cudnn.benchmark = True
    suites = ["burn"] if args.quick else args.suites.split(",")
    dtypes = ("float16",) if args.quick else tuple(args.dtypes.split(","))
    ops = ("forward",) if args.quick else tuple(args.ops.split(","))
    for suite_name in suites:  # the suites carry their batch sizes (burn 16, resnet50 32)
        suite = load_suite(suite_name)
        for dtype in dtypes:
            for entry, base in suite.problems(ops):
                if args.shapes and not any(part in entry.label for part in args.shapes.split(",")):
                    continue
                with convlab.float32_precision("high"):
                    pr = base.replace(dtype=dtype)
                    count = len(plugin.configs(pr)) if args.all_configs else 1
                    for index in range(count):
                        bench_one(torch, plugin, entry, pr, rows, index)


def summary(rows: list) -> None:
    """Geometric means of cuDNN (the faster layout) / ours: through the public op (the user's path),
    the same with channels-last tensors on both sides, and through plugin.run (Numba's launches); and
    the shapes where the public op is faster."""
    log("\n| op | dtype | shapes | geomean cuDNN/ours, public op (cuDNN's faster layout) | both NCHW "
        "| both NCHW, no graph | both NCHW, back to back | both channels-last | plugin.run | op faster on |")
    log("|---|---|---|---|---|---|---|---|---|---|")
    best: dict = {}  # per shape, op and dtype the config the tuner would keep (fastest public op)
    for r in rows:
        key = (r.get("shape"), r.get("op"), r.get("dtype"))
        if r.get("part") == "bench" and r.get("cudnn_over_op") and \
                r["cudnn_over_op"] > best.get(key, {}).get("cudnn_over_op", 0):
            best[key] = r
    groups: dict = {}
    for r in best.values():
        groups.setdefault((r["op"], r["dtype"]), []).append(r)
    gm = lambda rs, key: math.exp(sum(math.log(r[key]) for r in rs) / len(rs))  # noqa: E731
    for (op, dtype), rs in sorted(groups.items()):
        faster = [r["shape"] for r in rs if r["cudnn_over_op"] > 1]
        keys = ("cudnn_over_op", "cudnn_nchw_over_op", "cudnn_nchw_over_op_nograph", "cudnn_over_op_b2b",
                "cudnn_cl_over_op_cl", "cudnn_over_ours")
        means = " | ".join(f"{gm(rs, key):.3f}" if all(r.get(key) for r in rs) else "-" for key in keys)
        log(f"| {op} | {dtype} | {len(rs)} | {means} | {', '.join(faster) or '-'} |")
    bad = [r for r in rows if r.get("status") not in ("ok", "declined")]
    log(f"\n{len(rows)} rows, {len(bad)} not ok: " + "; ".join(
        f"{r.get('op')} {r.get('dtype', '')} {r.get('shape', r.get('problem', ''))}: {r.get('status')} "
        f"{r.get('error', '')}" for r in bad))


def _write(rows: list, path: str) -> None:
    """The rows as JSON, written whole to a temporary file and renamed (never a half-written file)."""
    import os
    with open(path + ".tmp", "w") as f:
        json.dump(rows, f, indent=1, default=str)
    os.replace(path + ".tmp", path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="forward fp16 on Burn only")
    parser.add_argument("--suites", default="burn,resnet50", help="comma-separated suite names")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="float16,bfloat16,float32 (TF32)")
    parser.add_argument("--ops", default="forward,dgrad,wgrad", help="forward,dgrad,wgrad")
    parser.add_argument("--shapes", help="only suite entries whose label contains one of these (comma list)")
    parser.add_argument("--all-configs", action="store_true",
                        help="every config of the plugin (the summary keeps each shape's fastest)")
    parser.add_argument("--out", help="JSON file for the rows")
    args = parser.parse_args(argv)
    global OUT_PATH
    OUT_PATH = args.out
    log(runtime.device_name(), runtime.compute_capability(), runtime.versions())
    plugin = registry.get("tensor_core")
    rows: list = []
    t0 = time.perf_counter()
    try:
        bench(args, plugin, rows)
    finally:
        summary(rows)
        log(f"total {time.perf_counter() - t0:.0f} s")
        if args.out:
            _write(rows, args.out)
    return 0 if all(r.get("status") in ("ok", "declined") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
