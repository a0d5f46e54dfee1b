"""Fused epilogues and fused blocks against torch: ResNet-50 and MobileNetV2 block stacks, forward and backward.

    python benchmarks/fused_bench.py --out results/fused/h100/COMMIT [--budget 440] [--resume]
    python benchmarks/fused_bench.py --smoke --out /tmp/fused     # the simulator: tiny shapes, the code path

A case is a block stack (``fused_stacks``: ResNet-50 bottlenecks, MobileNetV2 inverted residuals) in a
dtype, a layout (NCHW, channels_last) and a mode: ``forward`` (eval, no_grad; random BatchNorm
statistics) or ``train`` (forward + backward). Its variants, on copies of one model:

    torch           torch eager: cuDNN (cudnn.benchmark on, TF32 off) and separate BatchNorm / activation / add
    torch.compile   torch.compile of that model (a failure is kept in the row with its text)
    convlab         convlab.torch.convert(model): convlab's convolutions, the rest torch's
    convlab_fused   convert(model, fuse=True): Conv-BN-act(-add) chains as one convolution with an epilogue
                    (in train mode a BatchNorm is not folded, so little or nothing fuses: ``fusions``)
    convlab_blocks  convert(model, fuse=True, blocks=True): also depthwise -> 1x1 pairs as one fused block
                    (MobileNetV2, forward only: the fused block serves eval-mode calls without autograd)

convlab's variants run ``algorithm="auto"`` in the tuner's default mode; each first call (kernels
compiled, picks made) is timed apart (``first_call_s``). The reference is the same model, input and gy
in float64 (same device and memory format); in train mode, for a variant whose activations are modules,
each checked call's own: the float64 model with that call's ReLU / ReLU6 masks (``fused_check``: a kink
flip is not an arithmetic error). Each variant's first and last timed outputs (train: also the input
gradient), torch eager's included, are checked against it by relative norm error: each output within
max(``TOL[dtype]``, ``FACTOR`` x torch eager's own error on it against the same reference: the masked one,
or float64's own masks for a variant checked on those), so an ill-conditioned stack widens the bound as far
as cuDNN's own error shows it must; torch eager sets the bounds, so it passes by
construction, and its row shows its own error. Rows record ``reference``, ``masked``, ``flips`` (mask
elements on the other side of a kink than float64's), ``rel_errs`` (per output; ``rel_err`` their
largest), ``plain_rel_errs`` (against float64's own masks), ``torch_rel_errs`` and ``bounds``; a failed
check reports no time. Variants are timed round-robin (order reversed every
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
from fused_check import FACTOR, TOL, MaskRecorder, check, masked_reference
from fused_report import markdown, targets
from fused_stacks import STACKS, stack_model

VARIANTS = ("torch", "torch.compile", "convlab", "convlab_fused", "convlab_blocks")


def case_rows(torch: Any, stack: tuple, dtype: str, layout: str, mode: str, args: Any) -> list[dict]:
    """Every variant of one case, checked and timed interleaved (module docstring)."""
    import convlab.torch as ct

    name, batch, size, channels, blocks = stack
    device = "cuda" if torch.cuda.is_available() and not runtime.SIMULATOR else "cpu"
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    dt, train = getattr(torch, dtype), mode == "train"
    base = stack_model(torch, blocks).to(device=device, dtype=dt, memory_format=fmt).train(train)
    g = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(batch, channels, size, size, device=device, dtype=dt, generator=g).to(memory_format=fmt)
    with torch.no_grad():
        gy = torch.randn(base(x).shape, device=device, dtype=dt, generator=g).to(memory_format=fmt)
    x.requires_grad_(train)
    # the reference: the same model, input and gy in float64 (same memory format), once per case; in train mode
    # each check's own too, along the checked call's activation masks (fused_check)
    model64, x64, gy64 = copy.deepcopy(base).double(), x.detach().double(), gy.double()
    ref = _call(torch, copy.deepcopy(model64), x64.clone().requires_grad_(train), gy64)()

    def reference(row: dict, recorder: MaskRecorder | None, prefix: str = "") -> tuple:
        row["masked"] = recorder is not None
        row["reference"] = "float64" + (", the call's activation masks" if recorder else "")
        if recorder is None:
            return ref
        masked, flips = masked_reference(torch, model64, x64, gy64, recorder.masks)
        row[prefix + "flips"] = flips
        return masked
    torch._dynamo.reset()  # every case's blocks share a forward code object: past its recompile limit dynamo runs eager
    builds: dict[str, Callable[[], Any]] = {
        "torch": lambda: copy.deepcopy(base),  # its own copy: torch.compile traces base
        "torch.compile": lambda: torch.compile(base, backend=args.compile_backend),
        "convlab": lambda: ct.convert(copy.deepcopy(base)),
        "convlab_fused": lambda: ct.convert(copy.deepcopy(base), fuse=True)}
    if name.startswith("mobilenetv2") and not train:
        builds["convlab_blocks"] = lambda: ct.convert(copy.deepcopy(base), fuse=True, blocks=True)
    builds = {v: b for v, b in builds.items() if v == "torch" or v in args.variants}

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    # torch eager's errors against the masked reference (eager) and against float64's own masks (plain): a
    # row's bounds come from torch eager's error against the same reference as the row's
    rows, fns, recorders, eager, plain = {}, {}, {}, None, None
    for variant, build in builds.items():
        row = rows[variant] = {"stack": name, "dtype": dtype, "layout": layout, "mode": mode, "variant": variant,
                               "batch": batch, "input": [batch, channels, size, size], "passed": False}
        try:
            model = build()
            row["fusions"] = len(ct.fusions(model)) if variant.startswith("convlab") else 0
            fn = _call(torch, model, x, gy)
            recorder = MaskRecorder(model) if train and variant != "torch.compile" else None
            t0 = time.perf_counter()
            out = recorder.record(fn) if recorder else fn()
            sync()
            row["first_call_s"] = time.perf_counter() - t0
            for _ in range(args.warmup):
                fn()
            if variant.startswith("convlab"):
                row["records_per_step"] = _records_per_step(fn, sync)
            errs = check(row, out, reference(row, recorder), eager if recorder else plain, dtype)
            # against the float64 call's own branches (the same reference where nothing was recorded)
            row["plain_rel_errs"] = check({}, out, ref, plain, dtype) if recorder else errs
            if variant == "torch":
                eager, plain = errs, row["plain_rel_errs"]
            if row["passed"]:
                fns[variant] = fn
                if recorder:
                    recorders[variant] = recorder
        except Exception as exc:  # noqa: BLE001  (a variant's failure is its row's, not the case's)
            row["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            row["traceback"] = traceback.format_exc()[-3000:]
        if variant == "torch" and eager is None:
            break
    samples, last = _interleaved(torch, fns, args.repeat, device, recorders)
    for variant, fn in fns.items():
        row = rows[variant]
        recorder = recorders.get(variant)
        check(row, last[variant], reference(row, recorder, "last_"), eager if recorder else plain, dtype, "last_")
        if row["passed"]:
            row["median_ms"] = statistics.median(samples[variant])
            row["samples_ms"] = [round(s, 5) for s in samples[variant]]
    for row in rows.values():
        for key, over in (("speedup_vs_torch", "torch"), ("speedup_vs_unfused", "convlab")):
            if row.get("median_ms") and rows.get(over, {}).get("median_ms"):
                row[key] = rows[over]["median_ms"] / row["median_ms"]
    return list(rows.values())


def _records_per_step(fn: Callable[[], tuple], sync: Callable[[], None], steps: int = 2) -> float:
    """Launch plans recorded per step after the warm-up (convlab.call.plan): 0 when every call replays
    its plan, as the timed steps should."""
    from convlab.call import plan

    before = plan.stats()["built"]
    for _ in range(steps):
        fn()
    sync()
    return (plan.stats()["built"] - before) / steps


def _call(torch: Any, model: Any, x: Any, gy: Any) -> Callable[[], tuple]:
    """A call of ``model`` on x (N, C, H, W): (output,) under no_grad where x needs no gradient, else
    (output, input gradient) of a backward from gy (the output's shape)."""
    params = list(model.parameters()) + [x]

    def step() -> tuple:
        if not x.requires_grad:
            with torch.no_grad():
                return (model(x),)
        for p in params:
            p.grad = None
        y = model(x)
        y.backward(gy)
        return y.detach(), x.grad
    return step


def _interleaved(torch: Any, fns: dict, repeat: int, device: str, recorders: dict) -> tuple[dict, dict]:
    """ms per call of every variant (CUDA events; the CPU's clock on the simulator), one call each per
    round, each started on an idle GPU, the order reversed every other round; and the last outputs, whose
    activation masks ``recorders`` record (their compares are inside that round's one sample)."""
    samples: dict[str, list] = {v: [] for v in fns}
    last = {}
    for r in range(repeat):
        for v in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            call = fns[v]
            if r == repeat - 1 and v in recorders:
                call = lambda fn=fns[v], rec=recorders[v]: rec.record(fn)  # noqa: E731
            if device != "cuda":
                t0 = time.perf_counter()
                last[v] = call()
                samples[v].append((time.perf_counter() - t0) * 1e3)
                continue
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            last[v] = call()
            end.record()
            end.synchronize()
            samples[v].append(start.elapsed_time(end))
    return samples, last


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
    ap.add_argument("--without", default=[], type=_names(None),
                    help="comma-separated plugins unregistered before convlab's variants run (e.g. tf32x3: "
                         "float32 on the fp32 FMA plugins, to tell an accuracy class from a bug)")
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
    known_plugins = {p.name for p in convlab.plugins()}
    for name in args.without:
        if name not in known_plugins:
            ap.error(f"--without: no plugin named {name!r} (registered: {sorted(known_plugins)})")
        convlab.unregister(name)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cudnn = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    data: dict[str, Any] = {
        "device": runtime.device_name(), "simulator": runtime.SIMULATOR, "smoke": args.smoke, "commit": _commit(),
        "command": "python benchmarks/fused_bench.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "versions": {**runtime.versions(), "torch": torch.__version__, "convlab": convlab.__version__, "cudnn": cudnn},
        "tune_mode": settings.get_tune_mode(), "repeat": args.repeat, "warmup": args.warmup, "tol": TOL,
        "factor": FACTOR,
        "reference": "the model in float64 (train rows masked: with the checked call's activation masks)",
        "without": args.without,
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
