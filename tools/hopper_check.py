"""The Hopper kernels on a GPU in one resumable call: the probes, each op and dtype of the tma_wgmma plugin
at real tile sizes against float64, and its time against cuDNN, on ResNet-50 (batch 32) and Burn (batch
16) layers, channels-last (one NCHW case per op too).

    python tools/hopper_check.py --resume                   # on the GPU machine, from the repository root
    python tools/hopper_check.py --list                     # the cases, in order (no GPU needed)

Each case writes ``<out>/cases/<id>.json`` when it ends, whatever happened (status ok / failed / declined
/ error with the exception and the traceback's tail), so a cut call keeps what it did and ``--resume``
skips it. Two phases: ``check`` cases (a probe, or one call of the plugin on one layer, op, dtype and
layout, compared with torch's convolution in float64 on the GPU) run in this process from the first and
in ``--workers`` processes from the last, the kernels they compile kept in the disk kernel cache
(CONVLAB_KERNEL_CACHE=1 under ``--cache``) for everyone; then ``time`` cases run here alone on the GPU:
medians of the forced plugin and of cuDNN (torch, channels-last, cudnn.benchmark on) over interleaved
repeats, after a correct check of the same call (a time case whose check has not run waits for the
next call). No case starts past ``--budget`` seconds (checks past 60% of it);
``summary.json`` and ``README.md`` list every case at the end; ``complete`` is written once none is left.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = "/tmp/hopper_check_cache"
#: (suite, batch, label, x, w, stride, padding) of the layers
LAYERS = [("resnet50", 32, "stem 7x7 s2", (3, 224, 224), (64, 7, 7), 2, 3),
          ("resnet50", 32, "c2 1x1 reduce", (64, 56, 56), (64, 1, 1), 1, 0),
          ("resnet50", 32, "c2 3x3", (64, 56, 56), (64, 3, 3), 1, 1),
          ("resnet50", 32, "c4 3x3", (256, 14, 14), (256, 3, 3), 1, 1),
          ("burn", 16, "16ch 512x512 3x3", (16, 512, 512), (16, 3, 3), 1, 0),
          ("burn", 16, "64ch 56x56 3x3", (64, 56, 56), (64, 3, 3), 1, 0),
          ("burn", 16, "512ch 7x7 3x3", (512, 7, 7), (512, 3, 3), 1, 0),
          ("burn", 16, "96ch 224x224 1x1", (96, 224, 224), (64, 1, 1), 1, 0)]
OPS = ("forward", "dgrad", "wgrad")


def cases() -> list[tuple[str, str, dict]]:
    """(id, phase, spec) of every case, in the order they run."""
    out = [("env", "check", {"kind": "env"})]
    out += [(f"probe/tile/{s}", "check", {"kind": "tile", "swizzle": s}) for s in (0, 32, 64, 128)]
    out += [("probe/im2col", "check", {"kind": "im2col"}), ("probe/wgmma_mn", "check", {"kind": "mn"})]
    for dtype in ("float16", "bfloat16", "float32"):
        for layer in LAYERS:
            for op in OPS:
                if dtype == "float32" and op == "wgrad":
                    continue
                spec = {"kind": "conv", "layer": layer, "op": op, "dtype": dtype, "layout": "channels_last"}
                name = f"{layer[0]}/{layer[2]}/{op}/{dtype}".replace(" ", "_")
                out.append((f"check/{name}", "check", spec))
                out.append((f"time/{name}", "time", dict(spec, check=f"check/{name}")))
    for op in OPS:  # the NCHW route (transposing copies) once per op
        spec = {"kind": "conv", "layer": LAYERS[2], "op": op, "dtype": "float16", "layout": "nchw"}
        out.append((f"check/nchw/{op}", "check", spec))
    return out


def _problem(spec: dict):
    from convlab.problem import make_problem

    suite, n, _, (c, h, w), (k, r, s), stride, pad = spec["layer"]
    return make_problem(spec["op"], n, c, h, w, k, r, s, stride=stride, padding=pad, dtype=spec["dtype"])


def _tensors(spec: dict, pr):
    import torch

    dt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[spec["dtype"]]
    g = torch.Generator(device="cuda").manual_seed(0)
    fmt = torch.channels_last if spec["layout"] == "channels_last" else torch.contiguous_format

    def make(shape):
        return torch.randn(shape, generator=g, device="cuda").to(dt).contiguous(memory_format=fmt)
    return make(pr.x_shape), make(pr.w_shape), make(pr.y_shape)


def _calls(spec: dict, pr, x, w, dy):
    """(convlab's call, cuDNN's call, the float64 reference) of the case's op."""
    import torch
    import convlab

    kw = dict(stride=pr.stride, padding=pr.padding)
    nn = torch.nn.grad
    if pr.op == "forward":
        return (lambda: convlab.conv2d(x, w, algorithm="tma_wgmma", **kw),
                lambda: torch.nn.functional.conv2d(x, w, **kw),
                lambda: torch.nn.functional.conv2d(x.double(), w.double(), **kw))
    if pr.op == "dgrad":
        return (lambda: convlab.conv2d_backward_data(dy, w, pr.x_shape, algorithm="tma_wgmma", **kw),
                lambda: nn.conv2d_input(pr.x_shape, w, dy, **kw),
                lambda: nn.conv2d_input(pr.x_shape, w.double(), dy.double(), **kw))
    return (lambda: convlab.conv2d_backward_weight(x, dy, pr.w_shape, algorithm="tma_wgmma", **kw),
            lambda: nn.conv2d_weight(x, pr.w_shape, dy, **kw),
            lambda: nn.conv2d_weight(x.double(), pr.w_shape, dy.double(), **kw))


def run_case(cid: str, phase: str, spec: dict) -> dict:
    """One case's result (raises on a crash: the caller records it)."""
    import numpy as np

    from convlab import runtime

    if spec["kind"] == "env":
        import torch
        import numba
        from convlab.runtime.targets import current

        t = current()
        return {"status": "ok", "device": runtime.device_name(), "cc": list(runtime.compute_capability()),
                "features": sorted(t.features), "sm_count": t.sm_count, "torch": torch.__version__,
                "cudnn": torch.backends.cudnn.version(), "numba": numba.__version__,
                "commit": subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, capture_output=True,
                                         text=True).stdout.strip()}
    if spec["kind"] in ("tile", "im2col", "mn"):
        return _probe(spec)
    from convlab import measure
    from convlab.plugin import registry

    import convlab
    import torch

    pr = _problem(spec)
    plugin = registry.get("tma_wgmma")
    with convlab.float32_precision("high"):
        verdict = registry.verdict(plugin, pr)
        if not verdict:
            return {"status": "declined", "reason": verdict.reason}
        config = registry.safe_configs(plugin, pr)[0]
        x, w, dy = _tensors(spec, pr)
        ours, cudnn, ref = _calls(spec, pr, x, w, dy)
        got = ours()
        torch.cuda.synchronize()
        err = measure.rel_error(got.double().cpu().numpy(), ref().cpu().numpy())
        tol = measure.tolerance(pr, plugin.compute_eps(pr.dtype))
        out = {"status": "ok" if err <= tol else "failed", "rel_error": err, "tolerance": tol,
               "config": config.name, "problem": pr.describe()}
        if phase == "time" and out["status"] == "ok":
            torch.backends.cudnn.benchmark = True
            times = {"convlab": [], "cudnn": []}
            for fn in (ours, cudnn):
                fn()
            for _ in range(15):
                for name, fn in (("convlab", ours), ("cudnn", cudnn)):
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    fn()
                    e1.record()
                    e1.synchronize()
                    times[name].append(e0.elapsed_time(e1))
            med = {k: float(np.median(v)) for k, v in times.items()}
            out.update(convlab_ms=med["convlab"], cudnn_ms=med["cudnn"], ratio=med["cudnn"] / med["convlab"],
                       tflops=pr.flops / med["convlab"] / 1e9)
        return out


def _probe(spec: dict) -> dict:
    import numpy as np

    from convlab.kernels.hopper import probes

    rng = np.random.default_rng(0)
    if spec["kind"] == "tile":
        ten = rng.standard_normal((3, 5, 80)).astype(np.float16)
        inner = (spec["swizzle"] or 16) // 2
        got, stored = probes.tile_roundtrip(ten, (inner, 3, 2), spec["swizzle"], (4, -1, 2))
        want = np.zeros((2, 3, inner), np.float16)
        want[:1, 1:3] = ten[2:3, 0:2, 4:4 + inner]
        ok = np.array_equal(got, want) and np.array_equal(stored[2:3, 0:2, 4:4 + inner], ten[2:3, 0:2, 4:4 + inner])
        return {"status": "ok" if ok else "failed"}
    if spec["kind"] == "im2col":
        two = np.repeat(np.arange(1, 33, dtype=np.float32)[:, None], 32, 1).reshape(2, 4, 4, 32)
        got = probes.im2col_load(two, (-1, -1), (-1, -1), (0, 2, 1, 0), (0, 0), 16, 32)[:, 0].tolist()
        want = [7, 0, 9, 10, 11, 0, 0, 0, 0, 0, 17, 18, 19, 0, 21, 22]
        return {"status": "ok" if got == want else "failed", "got": got}
    A, B = rng.standard_normal((64, 16)).astype(np.float16), rng.standard_normal((16, 128)).astype(np.float16)
    err = float(np.abs(probes.mn_major_mma(A, B, 128) - A.astype(np.float64) @ B.astype(np.float64)).max())
    return {"status": "ok" if err < 1e-3 else "failed", "max_abs_error": err}


def record(out: Path, cid: str, result: dict) -> None:
    path = out / "cases" / (cid.replace("/", "__") + ".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"id": cid, **result}, indent=1, default=str))
    tmp.replace(path)


def done(out: Path, cid: str) -> bool:
    return (out / "cases" / (cid.replace("/", "__") + ".json")).exists()


def claim(out: Path, call: str, cid: str) -> bool:
    """True for the first process of this call to take ``cid`` (a file made exclusively)."""
    path = out / f"claims_{call}" / (cid.replace("/", "__") + ".claim")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(path, "x"):
            return True
    except FileExistsError:
        return False


def work(out: Path, todo: list, deadline: float, call: str) -> None:
    for cid, phase, spec in todo:
        if time.time() > deadline:
            return
        if done(out, cid) or not claim(out, call, cid):
            continue
        if phase == "time":  # only after a correct check of the same call (its kernels compiled)
            if not done(out, spec["check"]):
                continue
            check = json.loads((out / "cases" / (spec["check"].replace("/", "__") + ".json")).read_text())
            if check["status"] != "ok":
                record(out, cid, {"status": "skipped", "reason": f"its check: {check['status']}"})
                continue
        start = time.time()
        try:
            result = run_case(cid, phase, spec)
        except Exception as exc:  # noqa: BLE001  (recorded: the call runs blind)
            result = {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:2000],
                      "traceback": traceback.format_exc()[-3000:]}
        result["seconds"] = round(time.time() - start, 2)
        record(out, cid, result)


def summarise(out: Path, incomplete: bool) -> None:
    rows = [json.loads(p.read_text()) for p in sorted((out / "cases").glob("*.json"))]
    (out / "summary.json").write_text(json.dumps({"incomplete": incomplete, "cases": rows}, indent=1, default=str))
    lines = ["# tools/hopper_check.py", "", f"incomplete: {incomplete} (run again with --resume)", "",
             "| case | status | rel. error / tol | convlab ms | cuDNN ms | ratio (>1: convlab faster) |",
             "| --- | --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        err = f"{r['rel_error']:.2e} / {r['tolerance']:.1e}" if "rel_error" in r else r.get("reason", r.get("error", ""))[:80]
        lines.append(f"| {r['id']} | {r['status']} | {err} | {r.get('convlab_ms', '')} | {r.get('cudnn_ms', '')} | "
                     f"{round(r['ratio'], 3) if 'ratio' in r else ''} |")
    (out / "README.md").write_text("\n".join(lines) + "\n")
    if not incomplete:
        (out / "complete").write_text(f"{len(rows)} cases\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="results folder (default results/hopper/<device>/<commit>)")
    ap.add_argument("--resume", action="store_true", help="skip the cases whose files exist")
    ap.add_argument("--budget", type=float, default=380.0,
                    help="seconds after which no case starts (a case compiling its kernels takes up to a minute)")
    ap.add_argument("--workers", type=int, default=6, help="check processes beside this one")
    ap.add_argument("--list", action="store_true", help="print the cases and exit")
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--call", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    todo = cases()
    if args.list:
        print("\n".join(f"{phase:5}  {cid}" for cid, phase, _ in todo))
        return
    os.environ.setdefault("CONVLAB_KERNEL_CACHE", "1")
    os.environ.setdefault("CONVLAB_CACHE_DIR", CACHE)
    start = time.time()
    checks = [c for c in todo if c[1] == "check"]
    if args.worker is not None:  # a helper: every workers-th check case from the last
        work(Path(args.out), checks[::-1][args.worker::args.workers], start + args.budget, args.call)
        return
    out = Path(args.out or ROOT / "results" / "hopper" / _device() / _commit())
    if not args.resume and (out / "cases").exists():
        raise SystemExit(f"{out} holds results: pass --resume, or another --out")
    out.mkdir(parents=True, exist_ok=True)
    call = f"{int(start)}_{os.getpid()}"
    helpers = [subprocess.Popen([sys.executable, __file__, "--out", str(out), "--worker", str(i), "--workers",
                                 str(args.workers), "--budget", str(args.budget * 0.6), "--call", call], cwd=ROOT)
               for i in range(args.workers)]
    try:
        work(out, checks, start + args.budget * 0.6, call)
    finally:
        for p in helpers:
            try:
                p.wait(timeout=max(1.0, start + args.budget * 0.65 - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
    work(out, [c for c in todo if c[1] == "time"], start + args.budget, call)
    summarise(out, not all(done(out, cid) for cid, _, _ in todo))


def _device() -> str:
    from convlab import runtime

    return runtime.device_name().lower().replace("nvidia ", "").replace(" ", "_")


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip() or "unknown"


if __name__ == "__main__":
    main()
