"""Where a fused stack's time goes: benchmarks/fused_bench.py's block stacks, forward in eval mode, the
``convlab`` and ``convlab_fused`` variants (convlab.torch.convert without and with ``fuse=True``) side by
side, each

    gpu ms / forward   CUDA events around ``--repeat`` forwards (what fused_bench's medians measure)
    host ms / forward  the forwards' Python time before the final synchronise (the launch path's cost)
    kernels            torch.profiler's CUDA kernels of a few forwards, summed by name (what ran and how long)
    host profile       cProfile of ``--repeat`` forwards: the functions with the most cumulative time

so a fused variant slower than the unfused one says whether its kernels or its host path are slower.

    python benchmarks/fused_profile.py --out profile.txt [--stacks mobilenetv2/112x112x16-24] [--dtypes float16]
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


def _forwards(torch, model, x, repeat: int) -> tuple[float, float]:
    """(GPU ms, host ms) per forward of ``repeat`` forwards."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    t0 = time.perf_counter()
    with torch.no_grad():
        for _ in range(repeat):
            model(x)
    host = time.perf_counter() - t0
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeat, 1e3 * host / repeat


def _kernels(torch, model, x, calls: int = 3) -> str:
    """torch.profiler's CUDA kernels of ``calls`` forwards, by total time."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof, torch.no_grad():
        for _ in range(calls):
            model(x)
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70)


def _host_profile(torch, model, x, repeat: int) -> str:
    """cProfile of ``repeat`` forwards: the 30 functions with the most cumulative time."""
    prof = cProfile.Profile()
    with torch.no_grad():
        prof.enable()
        for _ in range(repeat):
            model(x)
        prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(30)
    return text.getvalue()


def profile_case(torch, stack: tuple, dtype: str, layout: str, repeat: int) -> str:
    """The report of one stack, dtype and layout (module docstring)."""
    import convlab.torch as ct

    name, batch, size, channels, blocks = stack
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    base = stack_model(torch, blocks).to(device="cuda", dtype=getattr(torch, dtype), memory_format=fmt).eval()
    x = torch.randn(batch, channels, size, size, device="cuda", dtype=getattr(torch, dtype)).to(memory_format=fmt)
    lines = [f"## {name} {dtype} {layout} (batch {batch})"]
    with torch.no_grad():
        want = base(x).float()
    for variant, fuse in (("convlab", False), ("convlab_fused", True)):
        model = ct.convert(copy.deepcopy(base), fuse=fuse)
        with torch.no_grad():
            for _ in range(3):
                got = model(x)
        err = float((got.float() - want).norm() / want.norm())
        gpu, host = _forwards(torch, model, x, repeat)
        lines += [f"### {variant}: gpu {gpu:.4f} ms / forward, host {host:.4f} ms / forward, "
                  f"rel err vs torch {err:.2e}, fusions {len(ct.fusions(model)) if fuse else 0}",
                  "```", _kernels(torch, model, x), "```", "```", _host_profile(torch, model, x, repeat), "```"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the report (Markdown)")
    parser.add_argument("--stacks", default="mobilenetv2/112x112x16-24,resnet50/56x56x256")
    parser.add_argument("--dtypes", default="float16")
    parser.add_argument("--layouts", default="channels_last,nchw")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    import torch

    stacks = {s[0]: s for s in STACKS["gpu"]}
    parts = [f"# fused_profile: {torch.cuda.get_device_name()}, torch {torch.__version__}"]
    for name in args.stacks.split(","):
        for dtype in args.dtypes.split(","):
            for layout in args.layouts.split(","):
                parts.append(profile_case(torch, stacks[name], dtype, layout, args.repeat))
                Path(args.out).write_text("\n\n".join(parts) + "\n")
                print(parts[-1].splitlines()[0], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
