"""Where a fused stack's time goes: benchmarks/fused_bench.py's block stacks, the eval forward or the train
step (forward and backward), the ``convlab`` and ``convlab_fused`` variants (convlab.torch.convert without and with ``fuse=True``) side by
side (``convlab_fused_whole_path``: the fused model with every call through convlab.torch's whole path,
convlab.torch.steady off), each

    gpu ms / step   CUDA events around ``--repeat`` steps (what fused_bench's medians measure)
    host ms / step  the steps' Python time before the final synchronise (the launch path's cost)
    kernels         torch.profiler's CUDA kernels of a few steps, summed by name (what ran and how long)
    host profile    cProfile of ``--repeat`` steps: the functions with the most cumulative time

so a fused variant slower than the unfused one says whether its kernels or its host path are slower.
``OUT`` with the suffix ``.complete`` is written once every case is in ``OUT``.

    python benchmarks/fused_profile.py --out profile.txt [--stacks mobilenetv2/112x112x16-24] [--dtypes float16]
        [--modes forward,train]
"""
from __future__ import annotations

import argparse
import copy
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fused_stacks import STACKS, stack_model  # noqa: E402  (the benchmarks folder is no package)
from profile_report import Report, kernel_table  # noqa: E402


def _stepper(torch, model, x, gy):
    """One step: the forward under no_grad (eval), else forward and backward from ``gy`` (train)."""
    def step() -> None:
        if not model.training:
            with torch.no_grad():
                model(x)
            return
        for p in model.parameters():
            p.grad = None
        x.grad = None
        model(x).backward(gy)
    return step


def _whole_path(step):
    """``step`` with convlab.torch.steady off: each module call through convlab.torch's whole path."""
    from convlab.torch import steady

    def whole() -> None:
        with steady.disabled():
            step()
    return whole


def _steps(torch, step, repeat: int) -> tuple[float, float]:
    """(GPU ms, host ms) per step of ``repeat`` steps."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    t0 = time.perf_counter()
    for _ in range(repeat):
        step()
    host = time.perf_counter() - t0
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeat, 1e3 * host / repeat


def _host_profile(torch, step, repeat: int) -> str:
    """cProfile of ``repeat`` steps: the 30 functions with the most cumulative time."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(repeat):
        step()
    prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(30)
    return text.getvalue()


def profile_case(torch, stack: tuple, dtype: str, layout: str, mode: str, repeat: int) -> str:
    """The report of one stack, dtype, layout and mode (module docstring)."""
    import convlab.torch as ct

    name, batch, size, channels, blocks = stack
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    dt = getattr(torch, dtype)
    base = stack_model(torch, blocks).to(device="cuda", dtype=dt, memory_format=fmt).train(mode == "train")
    x = torch.randn(batch, channels, size, size, device="cuda", dtype=dt).to(memory_format=fmt)
    with torch.no_grad():
        want = base(x).float()
    gy = torch.randn(want.shape, device="cuda", dtype=dt).to(memory_format=fmt)
    x.requires_grad_(mode == "train")
    lines = [f"## {name} {dtype} {layout} {mode} (batch {batch})"]
    for variant, fuse in (("torch", None), ("convlab", False), ("convlab_fused", True),
                          ("convlab_fused_whole_path", True)):
        model = base if fuse is None else ct.convert(copy.deepcopy(base), fuse=fuse)
        step = _stepper(torch, model, x, gy)
        if variant.endswith("whole_path"):  # every call through the whole path (convlab.torch.steady off)
            step = _whole_path(step)
        for _ in range(3):
            step()
        gpu, host = _steps(torch, step, repeat)
        lines += [f"### {variant}: gpu {gpu:.4f} ms / step, host {host:.4f} ms / step, "
                  f"fusions {len(ct.fusions(model)) if fuse else 0}"]
        if fuse is not None and not variant.endswith("whole_path"):
            kernels = kernel_table(torch, step, 3, cpu=True)[0]
            lines += ["```", kernels, "```", "```", _host_profile(torch, step, repeat), "```"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the report (Markdown)")
    parser.add_argument("--stacks", default="mobilenetv2/112x112x16-24,resnet50/56x56x256")
    parser.add_argument("--dtypes", default="float16")
    parser.add_argument("--layouts", default="channels_last,nchw")
    parser.add_argument("--modes", default="forward")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (torch.cuda): it profiles CUDA kernels")
    stacks = {s[0]: s for s in STACKS["gpu"]}
    report = Report(args.out, f"# fused_profile: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name in args.stacks.split(","):
        for dtype in args.dtypes.split(","):
            for layout in args.layouts.split(","):
                for mode in args.modes.split(","):
                    report.add(profile_case(torch, stacks[name], dtype, layout, mode, args.repeat))
    report.complete()  # tools/gpu_check.py's mark
    return 0


if __name__ == "__main__":
    sys.exit(main())
