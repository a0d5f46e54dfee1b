"""Per-call host cost of convlab.torch's wrapper against torch and convlab's base op.

    python benchmarks/torch_wrapper_bench.py --out TORCH_WRAPPER.json [--n 2000] [--batches 5]
    python benchmarks/torch_wrapper_bench.py --allow-sim --n 1 --batches 1 --warmup 1  # smoke test

Per-call wall clock, back-to-back (``n`` calls, then one synchronize; the median over ``batches``:
overhead_bench.per_call_us), on a tiny conv (1x16x8x8, weight 16x16x3x3, padding 1; on the simulator
1x2x4x4 and 2x2x3x3 CPU tensors), so that the host path dominates:

    forward/torch            F.conv2d
    forward/base_op          convlab.conv2d (the base op on torch tensors)
    forward/eager            convlab.torch.conv2d, inputs without grad (autograd.Function, no graph)
    forward/eager_grad       convlab.torch.conv2d, input requiring grad (the Function records a node)
    forward/custom_op        torch.ops.convlab.conv2d called directly (the dispatcher path compile uses)
    fwd_bwd/torch            y = F.conv2d(x, w); torch.autograd.grad(y, (x, w), gy)
    fwd_bwd/base_ops         convlab.conv2d + conv2d_backward_data + conv2d_backward_weight by hand
    fwd_bwd/eager            the same through convlab.torch.conv2d and autograd
    fwd_bwd/custom_op        the same through torch.ops.convlab.conv2d (register_autograd)
    model_step/torch|convlab Conv-ReLU-Conv, forward + backward, torch's modules vs convert()'s

Also the relative error of each convlab path against F.conv2d (cudnn.allow_tf32 off, convlab "highest").
Each measurement is caught separately (an exception is recorded, not fatal). Writes JSON (device,
versions, medians in us and the batches) to ``--out``, and prints a table. Refuses to run on the
simulator unless ``--allow-sim`` (numbers there mean nothing; it checks the code path).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable

from convlab import runtime
from overhead_bench import _guard, per_call_us

SHAPES = {"gpu": ((1, 16, 8, 8), (16, 16, 3, 3)), "sim": ((1, 2, 4, 4), (2, 2, 3, 3))}


def _cases(torch: Any, x: Any, w: Any, gy: Any, alg: str) -> dict[str, Callable[[], Any]]:
    import torch.nn.functional as F

    import convlab
    import convlab.torch as ct

    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    op = torch.ops.convlab.conv2d

    def base_ops():
        convlab.conv2d(x, w, padding=1, algorithm=alg)
        convlab.conv2d_backward_data(gy, w, x.shape, padding=1, algorithm=alg)
        return convlab.conv2d_backward_weight(x, gy, w.shape, padding=1, algorithm=alg)

    return {
        "forward/torch": lambda: F.conv2d(x, w, padding=1),
        "forward/base_op": lambda: convlab.conv2d(x, w, padding=1, algorithm=alg),
        "forward/eager": lambda: ct.conv2d(x, w, padding=1, algorithm=alg),
        "forward/eager_grad": lambda: ct.conv2d(xg, w, padding=1, algorithm=alg),
        "forward/custom_op": lambda: op(x, w, None, [1, 1], [1, 1], [1, 1], 1, alg),
        "fwd_bwd/torch": lambda: torch.autograd.grad(F.conv2d(xg, wg, padding=1), (xg, wg), gy),
        "fwd_bwd/base_ops": base_ops,
        "fwd_bwd/eager": lambda: torch.autograd.grad(ct.conv2d(xg, wg, padding=1, algorithm=alg),
                                                     (xg, wg), gy),
        "fwd_bwd/custom_op": lambda: torch.autograd.grad(op(xg, wg, None, [1, 1], [1, 1], [1, 1], 1, alg),
                                                         (xg, wg), gy),
    }


def benchmark(n: int, batches: int, warmup: int, alg: str, sim: bool) -> dict:
    import torch

    import convlab.torch as ct

    torch.backends.cudnn.allow_tf32 = False
    device = "cpu" if sim else "cuda"
    sync = (lambda: None) if sim else torch.cuda.synchronize
    sx, sw = SHAPES["sim" if sim else "gpu"]
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(sx, device=device, generator=g)
    w = torch.randn(sw, device=device, generator=g)
    gy = torch.randn(sx[:1] + sw[:1] + sx[2:], device=device, generator=g)  # 3x3, padding 1: same size
    res: dict[str, Any] = {"shape_x": sx, "shape_w": sw, "tensors": device, "algorithm": alg}
    cases = _cases(torch, x, w, gy, alg)
    ref = cases["forward/torch"]()
    for name in ("forward/base_op", "forward/eager", "forward/custom_op"):
        _guard(res, f"rel_err/{name}", lambda: float(((cases[name]() - ref).norm() / ref.norm()).item()))
    for name, fn in cases.items():
        _guard(res, name, lambda: per_call_us(fn, sync, n, batches, warmup))
        print(name, res[name].get("median_us", res[name].get("error")), flush=True)
    torch.manual_seed(0)
    c = sx[1]
    model = torch.nn.Sequential(torch.nn.Conv2d(c, c, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(c, c, 3, padding=1, groups=2)).to(device)
    for name in ("model_step/torch", "model_step/convlab"):
        if name == "model_step/convlab":
            ct.convert(model, algorithm=alg)
        _guard(res, name, lambda: per_call_us(lambda: model(x).sum().backward(), sync, n, batches, warmup))
    return res


def table(res: dict) -> str:
    lines = [f"{'case':<24}{'median us':>12}"]
    for name, value in res.items():
        if isinstance(value, dict) and ("median_us" in value or "error" in value):
            us = value.get("median_us")
            lines.append(f"{name:<24}{'error' if us is None else f'{us:.1f}':>12}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None, help="JSON output path")
    parser.add_argument("--n", type=int, default=2000, help="calls per batch")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=20, help="calls before timing (each case)")
    parser.add_argument("--algorithm", default="auto", help="algorithm= of the convlab calls")
    parser.add_argument("--allow-sim", action="store_true",
                        help="run on the simulator with CPU tensors (a smoke test; the numbers mean nothing)")
    args = parser.parse_args(argv)
    if runtime.SIMULATOR and not args.allow_sim:
        print("torch_wrapper_bench needs a CUDA GPU (running on the simulator; --allow-sim for a smoke "
              "test)", file=sys.stderr)
        return 2
    import torch

    result: dict[str, Any] = {"device": runtime.device_name(), "simulator": runtime.SIMULATOR,
                              "versions": {**runtime.versions(), "torch": torch.__version__}}
    _guard(result, "benchmark", lambda: benchmark(args.n, args.batches, args.warmup, args.algorithm,
                                                                  runtime.SIMULATOR))
    bench = result["benchmark"]
    ok = "error" not in bench and not any(isinstance(v, dict) and "error" in v for v in bench.values())
    result["medians_us"] = {k: v["median_us"] for k, v in bench.items()
                            if isinstance(v, dict) and "median_us" in v}
    text = json.dumps(result, indent=1, default=str)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    print(text)
    print(table(bench) if "error" not in bench else bench["error"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
