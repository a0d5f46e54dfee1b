"""What the profiling scripts (fused_profile.py, layer_profile.py) share: torch.profiler's kernel table of
a few calls, and the Markdown report written case by case with the mark tools/gpu_check.py waits for.

    table, ms = kernel_table(torch, fn, calls)     # ms: the kernels' device time per call
    report = Report(out, "# title"); report.add(case_text); ...; report.complete()
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


def kernel_table(torch: Any, fn: Callable[[], Any], calls: int, *, cpu: bool = False, rows: int = 25,
                 width: int = 70) -> tuple[str, float | None]:
    """torch.profiler's events of ``calls`` calls of ``fn`` by device time (CUDA kernels; with ``cpu`` the
    host ops too), and the kernels' summed device time per call in ms (CUDA events only, each kernel once;
    None with ``cpu``, where a host op's self device time counts its kernels again)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cpu else [ProfilerActivity.CUDA]
    with profile(activities=activities) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    events = prof.key_averages()
    table = events.table(sort_by="device_time_total", row_limit=rows, max_name_column_width=width)
    return table, None if cpu else sum(e.self_device_time_total for e in events) / 1e3 / calls


class Report:
    """A Markdown report under ``out``: the title, then each case as it is added (the file rewritten each
    time, so a cut run keeps its finished cases); ``complete()`` writes ``out`` with the suffix
    ``.complete``, the mark of a finished step."""

    def __init__(self, out: str | Path, title: str) -> None:
        self.out, self.parts = Path(out), [title]

    def add(self, text: str) -> None:
        self.parts.append(text)
        self.out.write_text("\n\n".join(self.parts) + "\n")
        print(text.splitlines()[0], flush=True)

    def complete(self) -> None:
        self.out.with_suffix(".complete").write_text("every case profiled\n")
