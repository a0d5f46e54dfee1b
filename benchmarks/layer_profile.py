"""Where one layer's time goes: a suite's layers, the user's call of each op (convlab's public op under
``algorithm="auto"`` on torch CUDA tensors, the tuner's pick) beside cuDNN's (torch with
cudnn.benchmark), each

    pick            the strategy's pick and why (convlab.explain's ``picked:`` line)
    gpu ms / call   the median of ``--repeat`` calls, CUDA events around each (as ``convlab bench auto``)
    kernels         torch.profiler's CUDA kernels of ``--calls`` calls, summed by name: what ran, how
                    often and how long (the layout copies, unfolds, partial sums beside the GEMM)
    check           the relative-norm error of convlab's output against cuDNN's in float64

so a layer far behind cuDNN says whether its GEMM, the kernels around it or the gaps between launches
(gpu ms above the kernels' sum) are what it loses. ``OUT`` with the suffix ``.complete`` is written once
every case is in ``OUT``.

    python benchmarks/layer_profile.py --out layers.md --suite resnet50 --labels 'c4 3x3,c2 3x3'
        [--ops forward,dgrad,wgrad] [--dtypes float16] [--layouts nchw,channels_last]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_report import Report, kernel_table  # noqa: E402  (the benchmarks folder is no package)


def profile_case(side, entry, problem, layout: str, repeat: int, calls: int) -> str:
    """The report of one layer, op, dtype and layout (module docstring)."""
    import convlab
    from convlab.bench import user_calls
    from convlab.measure import random_operands, rel_error

    torch = side.torch
    host = random_operands(problem, np.random.default_rng(0))
    a, b, bias = (side.tensor(v, layout) for v in host)
    picked = next((line for line in str(convlab.explain(problem)).splitlines() if line.startswith("picked:")),
                  "picked: ?")
    lines = [f"## {entry.label} {problem.op} {problem.dtype} {layout}", f"- problem: `{problem}`", f"- {picked}"]
    outputs = {}
    for name, fn in (("convlab", user_calls.op_call(problem, a, b, bias, "auto")),
                     ("cudnn", user_calls.cudnn_call(side, problem, a, b, bias))):
        for _ in range(3):  # the first call compiles (convlab) or benchmarks (cuDNN)
            outputs[name] = fn()
        median = statistics.median(side.clock(fn, repeat))
        table, summed = kernel_table(torch, fn, calls, rows=15, width=90)
        lines += [f"### {name}: gpu {median:.4f} ms / call, kernels {summed:.4f} ms / call",
                  "```", table, "```"]
    err = rel_error(side.host(outputs["convlab"]), side.host(outputs["cudnn"]))
    lines.insert(3, f"- check: convlab against cuDNN, relative-norm error {err:.3g}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the report (Markdown)")
    parser.add_argument("--suite", default="resnet50")
    parser.add_argument("--labels", required=True, help="comma-separated layer labels of the suite")
    parser.add_argument("--ops", default="forward,dgrad,wgrad")
    parser.add_argument("--dtypes", default="float16")
    parser.add_argument("--layouts", default="nchw,channels_last")
    parser.add_argument("--repeat", type=int, default=30, help="timed calls per median")
    parser.add_argument("--calls", type=int, default=5, help="profiled calls")
    args = parser.parse_args(argv)
    from convlab.bench.suite import load_suite
    from convlab.bench.user_calls import Side

    side = Side()
    if not side.gpu:
        parser.error("needs torch CUDA and a CUDA device: it profiles CUDA kernels")
    labels = [s.strip() for s in args.labels.split(",") if s.strip()]
    found = [(e, p) for e, p in load_suite(args.suite).problems(args.ops.split(",")) if e.label in labels]
    missing = set(labels) - {e.label for e, _ in found}
    if missing:
        parser.error(f"no layer labelled {sorted(missing)} in suite {args.suite!r}")
    report = Report(args.out, f"# layer_profile: {side.torch.cuda.get_device_name()}, torch "
                              f"{side.torch.__version__}, cuDNN {side.torch.backends.cudnn.version()}")
    for entry, problem in found:
        for dtype in args.dtypes.split(","):
            for layout in args.layouts.split(","):
                case = problem.replace(dtype=dtype)
                try:
                    report.add(profile_case(side, entry, case, layout, args.repeat, args.calls))
                except Exception as exc:  # reported in its place: one failing case leaves the others' times
                    report.add(f"## {entry.label} {case.op} {dtype} {layout}\n- failed: "
                               f"{type(exc).__name__}: {exc}"[:2000])
    report.complete()  # tools/gpu_check.py's mark
    return 0


if __name__ == "__main__":
    sys.exit(main())
