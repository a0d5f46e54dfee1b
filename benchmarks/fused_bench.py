"""Fused epilogues and fused blocks against torch: ResNet-50 and MobileNetV2 block stacks, forward and backward.

    python benchmarks/fused_bench.py --out results/fused/h100/COMMIT [--budget 440] [--resume]
    python benchmarks/fused_bench.py --smoke --out /tmp/fused     # the simulator: tiny shapes, the code path

A case is a block stack (``STACKS``: ResNet-50 bottlenecks 1x1-BN-ReLU, 3x3-BN-ReLU, 1x1-BN, + input, ReLU;
MobileNetV2 inverted residuals 1x1 expand-BN-ReLU6, 3x3 depthwise-BN-ReLU6, 1x1 project-BN, + input where
shapes allow) in a dtype, a layout (NCHW, channels_last) and a mode: ``forward`` (eval, no_grad; random
BatchNorm statistics) or ``train`` (forward + backward). Its variants, on copies of one model:

    torch           torch eager: cuDNN (cudnn.benchmark on, TF32 off) and separate BatchNorm / activation / add
    torch.compile   torch.compile of that model (a failure is kept in the row with its text)
    convlab         convlab.torch.convert(model): convlab's convolutions, the rest torch's
    convlab_fused   convert(model, fuse=True): Conv-BN-act(-add) chains as one convolution with an epilogue
                    (in train mode a BatchNorm is not folded, so little or nothing fuses: ``fusions``)
    convlab_blocks  convert(model, fuse=True, blocks=True): also depthwise -> 1x1 pairs as one fused block
                    (MobileNetV2, forward only: the fused block serves eval-mode calls without autograd)

convlab's variants run ``algorithm="auto"`` in the tuner's default mode; each first call (kernels
compiled, picks made) is timed apart (``first_call_s``). Each variant's first and last timed outputs
(train: also the input gradient) are checked against torch eager's by relative norm error under
``TOL[dtype]``; a failed check reports no time. Variants are timed round-robin (order reversed every
other round) with CUDA events, each call started on an idle GPU (host time it cannot hide counts),
``--repeat`` rounds after ``--warmup`` calls; rows give median ms and speedups over torch eager and over
convlab unfused (> 1: faster). ``targets``: issue 43's, a fused MobileNetV2 forward >= 1.3x torch eager
and no fused row slower than unfused. Writes ``OUT/fused.json`` and ``OUT/fused.md`` after every case,
``OUT/complete`` once all ran; no case starts past ``--budget``.
"""
from __future__ import annotations

import argparse
import copy
import fnmatch
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from convlab import runtime

#: relative norm error allowed against torch eager's output: two implementations' roundings and
#: accumulation orders over a stack (float32: fp32 FMA both, cuDNN's TF32 off; half: fp32 accumulators)
TOL = {"float32": 2e-4, "float16": 1e-2, "bfloat16": 6e-2}
# (stack name, batch, input size, channels, blocks); bottleneck (c, mid); inverted residual (cin, cout, stride, t)
STACKS = {
    "gpu": [("mobilenetv2/112x112x16-24", 32, 112, 16, [("ir", 16, 24, 2, 6), ("ir", 24, 24, 1, 6)]),
            ("mobilenetv2/14x14x64", 32, 14, 64, [("ir", 64, 64, 1, 6)] * 3),
            ("resnet50/56x56x256", 32, 56, 256, [("bottleneck", 256, 64)] * 2),
            ("resnet50/14x14x1024", 32, 14, 1024, [("bottleneck", 1024, 256)] * 2)],
    "smoke": [("mobilenetv2/8x8x4-6", 1, 8, 4, [("ir", 4, 6, 2, 2), ("ir", 6, 6, 1, 2)]),
              ("resnet50/8x8x8", 1, 8, 8, [("bottleneck", 8, 4)])]}
VARIANTS = ("torch", "torch.compile", "convlab", "convlab_fused", "convlab_blocks")


def _model(torch: Any, blocks: list) -> Any:
    """The stack as an nn.Sequential of fx-traceable blocks."""
    nn = torch.nn

    def cbr(cin: int, cout: int, k: int, act: Any, stride: int = 1, groups: int = 1) -> list:  # Conv-BN-act
        return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), act()]

    class Bottleneck(nn.Module):
        def __init__(self, c: int, mid: int) -> None:
            super().__init__()
            self.a = nn.Sequential(*cbr(c, mid, 1, nn.ReLU), *cbr(mid, mid, 3, nn.ReLU))
            self.conv3, self.bn3, self.relu = nn.Conv2d(mid, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU()

        def forward(self, x: Any) -> Any:  # (N, c, H, W) -> (N, c, H, W)
            return self.relu(self.bn3(self.conv3(self.a(x))) + x)

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, t: int) -> None:
            super().__init__()
            hid, self.res = cin * t, stride == 1 and cin == cout
            self.expand = nn.Sequential(*cbr(cin, hid, 1, nn.ReLU6))
            self.dw = nn.Sequential(*cbr(hid, hid, 3, nn.ReLU6, stride, hid))
            self.project, self.bn = nn.Conv2d(hid, cout, 1, bias=False), nn.BatchNorm2d(cout)

        def forward(self, x: Any) -> Any:  # (N, cin, H, W) -> (N, cout, H / stride, W / stride)
            y = self.bn(self.project(self.dw(self.expand(x))))
            return x + y if self.res else y

    kinds = {"bottleneck": Bottleneck, "ir": InvertedResidual}
    model = nn.Sequential(*[kinds[b[0]](*b[1:]) for b in blocks])
    g = torch.Generator().manual_seed(0)
    for m in (m for m in model.modules() if isinstance(m, nn.BatchNorm2d)):  # statistics away from identity
        for t, lo, hi in ((m.running_mean, -.5, .5), (m.running_var, .5, 2), (m.weight, .5, 1.5), (m.bias, -.5, .5)):
            t.data.copy_(torch.rand(t.shape, generator=g) * (hi - lo) + lo)
    return model


def case_rows(torch: Any, stack: tuple, dtype: str, layout: str, mode: str, args: Any) -> list[dict]:
    """Every variant of one case, checked and timed interleaved (module docstring)."""
    import convlab.torch as ct

    name, batch, size, channels, blocks = stack
    device = "cuda" if torch.cuda.is_available() and not runtime.SIMULATOR else "cpu"
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    dt, train = getattr(torch, dtype), mode == "train"
    base = _model(torch, blocks).to(device=device, dtype=dt, memory_format=fmt).train(train)
    g = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(batch, channels, size, size, device=device, dtype=dt, generator=g).to(memory_format=fmt)
    with torch.no_grad():
        gy = torch.randn(base(x).shape, device=device, dtype=dt, generator=g).to(memory_format=fmt)
    x.requires_grad_(train)
    torch._dynamo.reset()  # every case's blocks share a forward code object: past its recompile limit dynamo runs eager
    builds: dict[str, Callable[[], Any]] = {
        "torch": lambda: base, "torch.compile": lambda: torch.compile(base, backend=args.compile_backend),
        "convlab": lambda: ct.convert(copy.deepcopy(base)),
        "convlab_fused": lambda: ct.convert(copy.deepcopy(base), fuse=True)}
    if name.startswith("mobilenetv2") and not train:
        builds["convlab_blocks"] = lambda: ct.convert(copy.deepcopy(base), fuse=True, blocks=True)
    builds = {v: b for v, b in builds.items() if v == "torch" or v in args.variants}

    def call(model: Any) -> Callable[[], tuple]:
        """forward: (output,) under no_grad; train: (output, input gradient) of a backward from gy."""
        params = list(model.parameters()) + [x]

        def step() -> tuple:
            if not train:
                with torch.no_grad():
                    return (model(x),)
            for p in params:
                p.grad = None
            y = model(x)
            y.backward(gy)
            return y.detach(), x.grad
        return step

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows, fns, want = {}, {}, None
    for variant, build in builds.items():
        row = rows[variant] = {"stack": name, "dtype": dtype, "layout": layout, "mode": mode, "variant": variant,
                               "batch": batch, "input": [batch, channels, size, size], "passed": False}
        try:
            model = build()
            row["fusions"] = len(ct.fusions(model)) if variant.startswith("convlab") else 0
            fn = call(model)
            t0 = time.perf_counter()
            out = fn()
            sync()
            row["first_call_s"] = time.perf_counter() - t0
            for _ in range(args.warmup):
                fn()
            want = out if variant == "torch" else want
            _check(torch, row, out, want, dtype)
            if row["passed"]:
                fns[variant] = fn
        except Exception as exc:  # noqa: BLE001  (a variant's failure is its row's, not the case's)
            row["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            row["traceback"] = traceback.format_exc()[-3000:]
        if variant == "torch" and want is None:
            break
    samples, last = _interleaved(torch, fns, args.repeat, device)
    for variant, fn in fns.items():
        row = rows[variant]
        _check(torch, row, last[variant], want, dtype, "last_")
        if row["passed"]:
            row["median_ms"] = statistics.median(samples[variant])
            row["samples_ms"] = [round(s, 5) for s in samples[variant]]
    for row in rows.values():
        for key, ref in (("speedup_vs_torch", "torch"), ("speedup_vs_unfused", "convlab")):
            if row.get("median_ms") and rows.get(ref, {}).get("median_ms"):
                row[key] = rows[ref]["median_ms"] / row["median_ms"]
    return list(rows.values())


def _check(torch: Any, row: dict, out: tuple, want: tuple, dtype: str, prefix: str = "") -> None:
    """The relative norm error of each output against torch eager's; ``passed`` while all are within TOL."""
    errs = [float((o.double() - w.double()).norm() / w.double().norm().clamp_min(1e-300)) for o, w in zip(out, want)]
    row[prefix + "rel_err"], row["tol"] = max(errs), TOL[dtype]
    row["passed"] = (prefix == "" or row["passed"]) and all(e <= TOL[dtype] for e in errs)


def _interleaved(torch: Any, fns: dict, repeat: int, device: str) -> tuple[dict, dict]:
    """ms per call of every variant (CUDA events; the CPU's clock on the simulator), one call each per
    round, each started on an idle GPU, the order reversed every other round; and the last outputs."""
    samples: dict[str, list] = {v: [] for v in fns}
    last = {}
    for r in range(repeat):
        for v in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            if device != "cuda":
                t0 = time.perf_counter()
                last[v] = fns[v]()
                samples[v].append((time.perf_counter() - t0) * 1e3)
                continue
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            last[v] = fns[v]()
            end.record()
            end.synchronize()
            samples[v].append(start.elapsed_time(end))
    return samples, last


def targets(rows: list[dict]) -> list[dict]:
    """Issue 43's targets per fused row: MobileNetV2 forward >= 1.3x torch eager; never slower than unfused."""
    out = []
    for r in (r for r in rows if r["variant"] in ("convlab_fused", "convlab_blocks")):
        t = {k: r.get(k) for k in ("stack", "dtype", "layout", "mode", "variant", "speedup_vs_torch",
                                   "speedup_vs_unfused")}
        t["not_slower_than_unfused"] = None if t["speedup_vs_unfused"] is None else t["speedup_vs_unfused"] >= 1.0
        if r["stack"].startswith("mobilenetv2") and r["mode"] == "forward":
            t["at_least_1.3x_torch"] = None if t["speedup_vs_torch"] is None else t["speedup_vs_torch"] >= 1.3
        out.append(t)
    return out


def markdown(data: dict) -> str:
    f = lambda v, p=3: "" if v is None else f"{v:.{p}f}"  # noqa: E731
    lines = [f"# Fused epilogues and blocks against torch: {data['device']}", "",
             f"Command: `{data['command']}`; convlab {data['versions'].get('convlab')} at `{data['commit']}`, "
             f"torch {data['versions'].get('torch')}, tuning mode {data['tune_mode']}, {data['repeat']} rounds.", "",
             "| stack | dtype | layout | mode | variant | median ms | vs torch | vs convlab | first call s | rel err "
             "| check | fusions |", "|" + " --- |" * 12]
    for r in data["rows"]:
        check = "error" if "error" in r else "pass" if r["passed"] else "FAIL"
        err = f"{r['rel_err']:.2e}" if "rel_err" in r else r.get("error", "")[:60].replace("|", "/")
        lines.append(f"| {r['stack']} | {r['dtype']} | {r['layout']} | {r['mode']} | {r['variant']} | "
                     f"{f(r.get('median_ms'))} | {f(r.get('speedup_vs_torch'), 2)} | "
                     f"{f(r.get('speedup_vs_unfused'), 2)} | {f(r.get('first_call_s'), 2)} | {err} | {check} | "
                     f"{r.get('fusions', '')} |")
    lines.append("")
    for key in ("at_least_1.3x_torch", "not_slower_than_unfused"):
        got = [t[key] for t in data.get("targets", []) if t.get(key) is not None]
        lines.append(f"- target {key}: met by {sum(got)} of {len(got)} timed fused rows")
    return "\n".join(lines + [""])


def _names(allowed: Any) -> Callable[[str], list[str]]:
    """argparse type: a comma-separated list of some of ``allowed`` (any names: None)."""
    def parse(text: str) -> list[str]:
        got = [v.strip() for v in text.split(",") if v.strip()]
        if not got or (allowed is not None and set(got) - set(allowed)):
            raise argparse.ArgumentTypeError(f"expected some of {', '.join(allowed or ['names'])}, got {text!r}")
        return got
    return parse


def _commit() -> str:
    try:
        got = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True,
                             cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:  # no git: CONVLAB_COMMIT names the commit, as for tools/gpu_check.py
        got = ""
    return os.environ.get("CONVLAB_COMMIT", got or "unknown")[:7]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder: writes fused.json, fused.md and, when done, complete")
    ap.add_argument("--repeat", type=int, default=30, help="timed rounds (each variant once per round)")
    ap.add_argument("--warmup", type=int, default=3, help="calls of each variant after its first, untimed")
    ap.add_argument("--dtypes", default="float16,float32", type=_names(TOL), help="comma-separated dtypes")
    ap.add_argument("--layouts", default="channels_last,nchw", type=_names(("channels_last", "nchw")))
    ap.add_argument("--modes", default="forward,train", type=_names(("forward", "train")),
                    help="forward: eval mode; train: forward + backward")
    ap.add_argument("--models", default="mobilenetv2*,resnet50*", type=_names(None), help="stack names or globs")
    ap.add_argument("--budget", type=float, default=None, help="seconds: start no case past them")
    ap.add_argument("--resume", action="store_true", help="keep the rows of OUT/fused.json, run the rest")
    ap.add_argument("--variants", default=",".join(VARIANTS), type=_names(VARIANTS), help="torch eager always runs")
    ap.add_argument("--compile-backend", default="inductor", help="torch.compile's backend")
    ap.add_argument("--smoke", action="store_true", help="tiny stacks, one round, also on the simulator")
    args = ap.parse_args(argv)
    t_end = time.time() + args.budget if args.budget is not None else float("inf")
    if runtime.SIMULATOR and not args.smoke:
        print("fused_bench needs a CUDA GPU (running on the simulator; --smoke runs tiny shapes to check the "
              "code path, its numbers mean nothing)", file=sys.stderr)
        return 2
    if args.smoke:
        args.repeat, args.warmup = 1, 0
        args.compile_backend = "eager" if runtime.SIMULATOR else args.compile_backend
    if args.repeat < 1 or args.warmup < 0:
        ap.error(f"--repeat must be >= 1 and --warmup >= 0, got {args.repeat} and {args.warmup}")
    known = STACKS["smoke" if args.smoke else "gpu"]
    stacks = [s for s in known if any(fnmatch.fnmatch(s[0], w) for w in args.models)]
    if not stacks:
        ap.error(f"--models {args.models!r} matches no stack of {[s[0] for s in known]}")
    import torch

    import convlab
    from convlab.runtime import settings

    torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32 = True, False
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cudnn = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    data: dict[str, Any] = {
        "device": runtime.device_name(), "simulator": runtime.SIMULATOR, "smoke": args.smoke, "commit": _commit(),
        "command": "python benchmarks/fused_bench.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "versions": {**runtime.versions(), "torch": torch.__version__, "convlab": convlab.__version__, "cudnn": cudnn},
        "tune_mode": settings.get_tune_mode(), "repeat": args.repeat, "warmup": args.warmup, "tol": TOL,
        "stacks": {s[0]: {"batch": s[1], "input": [s[1], s[3], s[2], s[2]], "blocks": s[4]} for s in stacks},
        "rows": [], "skipped": []}
    if args.resume and (out / "fused.json").exists():
        data["rows"] = json.loads((out / "fused.json").read_text())["rows"]
    done = {(r["stack"], r["dtype"], r["layout"], r["mode"]) for r in data["rows"]}
    cases = [(s, d, lay, m) for m in args.modes for s in stacks for d in args.dtypes for lay in args.layouts]

    def save() -> None:
        data["targets"] = targets(data["rows"])
        (out / "fused.json").write_text(json.dumps(data, indent=1, default=str))
        (out / "fused.md").write_text(markdown(data))

    for stack, dtype, layout, mode in cases:
        key = (stack[0], dtype, layout, mode)
        if key in done:
            continue
        if time.time() > t_end:
            data["skipped"].append(list(key))
            continue
        try:
            rows = case_rows(torch, stack, dtype, layout, mode, args)
        except Exception as exc:  # noqa: BLE001  (a failure while timing: the case's row says so, the run goes on)
            rows = [dict(zip(("stack", "dtype", "layout", "mode"), key), variant="*", passed=False,
                         error=f"{type(exc).__name__}: {exc}"[:2000], traceback=traceback.format_exc()[-3000:])]
        data["rows"] += rows
        print(" ".join(key), {r["variant"]: r.get("median_ms", r.get("error", "FAIL")[:80]) for r in rows}, flush=True)
        save()
    save()
    if not data["skipped"]:
        (out / "complete").write_text("every case ran\n")
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
