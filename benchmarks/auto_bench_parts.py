"""The pieces of benchmarks/auto_bench.py: operands in a memory format, the calls a user makes (convlab's
public ops, convlab.torch, cuDNN through torch), the float64 check, the clock, and the Markdown report.

    calls (a, b in the order of convlab.problem; st, pd, dl, g the problem's geometry)
    op       convlab public op                         convlab.torch                        cuDNN
    forward  convlab.conv2d(x, w, bias, ...)           convlab.torch.conv2d(x, w, bias, ...) F.conv2d
    dgrad    convlab.conv2d_backward_data(dy, w, ...)  torch.ops.convlab.conv2d_backward_data
                                                       torch.ops.aten.convolution_backward(mask 1,0,0)
    wgrad    convlab.conv2d_backward_weight(x, dy, ...) torch.ops.convlab.conv2d_backward_weight
                                                       torch.ops.aten.convolution_backward(mask 0,1,0)

The backward columns of both libraries go through one dispatcher call each (a torch.library op), so no
side pays a Python wrapper the other does not. Without torch CUDA (the simulator, ``--smoke``) operands
are torch CPU tensors (or numpy arrays without torch), times are wall-clock and mean nothing.
"""
from __future__ import annotations

import contextlib
import math
import statistics
import time
from typing import Any, Callable

import numpy as np

import convlab
from convlab import measure, reference
from convlab.problem import Problem

LAYOUTS = ("nchw", "channels_last")
MODES = ("heuristic", "tune", "exhaustive")


class Side:
    """Where the user's tensors live: torch CUDA (``gpu``), torch CPU or numpy (the simulator)."""

    def __init__(self) -> None:
        try:
            import torch
        except ImportError:
            torch = None
        self.torch = torch
        self.gpu = bool(torch is not None and torch.cuda.is_available() and convlab.runtime.HAS_DEVICE)
        self.why_no_cudnn = "" if self.gpu else (
            "no torch CUDA device here (the simulator runs no cuDNN)" if torch is not None
            else "PyTorch is not installed")
        if self.gpu:
            torch.backends.cudnn.benchmark = True

    def tensor(self, a: np.ndarray | None, layout: str) -> Any:
        """``a`` as the user holds it: a torch tensor (CUDA on a GPU) in ``layout`` for 4-D operands."""
        if a is None or self.torch is None:
            return a
        t = self.torch.from_numpy(np.asarray(a, np.float32) if a.dtype.name == "bfloat16" else a)
        if a.dtype.name == "bfloat16":
            t = t.to(self.torch.bfloat16)
        if self.gpu:
            t = t.cuda()
        if layout == "channels_last" and t.dim() == 4:
            t = t.contiguous(memory_format=self.torch.channels_last)
        return t

    def host(self, t: Any) -> np.ndarray:
        if self.torch is not None and isinstance(t, self.torch.Tensor):
            return t.detach().double().cpu().numpy()
        return np.asarray(t, np.float64)

    def sync(self) -> None:
        if self.gpu:
            self.torch.cuda.synchronize()

    def poison_allocator(self, shape: tuple[int, ...], dtype: Any) -> None:
        """Free a NaN-filled block of the output's size, so torch's caching allocator hands it to the
        next output of that size: an op that leaves its output unwritten returns NaN, not stale data."""
        if self.gpu:  # made and dropped at once: its block goes back to the allocator's cache
            self.torch.full(shape, float("nan"), dtype=dtype, device="cuda")

    def time_ms(self, fn: Callable[[], Any], n: int) -> list[float]:
        """``n`` per-call samples: CUDA events on torch's stream (GPU), else the wall clock."""
        out = []
        for _ in range(n):
            if self.gpu:
                start, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
                start.record()
                fn()
                end.record()
                end.synchronize()
                out.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t0) * 1e3)
        return out


def geometry(p: Problem) -> tuple:
    return tuple(p.stride), tuple(p.padding), tuple(p.dilation), p.groups


def op_call(p: Problem, a: Any, b: Any, bias: Any, algorithm: Any, out: Any = None) -> Callable[[], Any]:
    """The public op of ``p`` on the user's tensors (``out``: a caller's output tensor)."""
    st, pd, dl, g = geometry(p)
    kw = {"algorithm": algorithm, "out": out}
    if p.op == "forward":
        return lambda: convlab.conv2d(a, b, bias, st, pd, dl, g, **kw)
    if p.op == "dgrad":
        return lambda: convlab.conv2d_backward_data(a, b, p.x_shape, st, pd, dl, g, **kw)
    return lambda: convlab.conv2d_backward_weight(a, b, p.w_shape, st, pd, dl, g, **kw)


def torch_path_call(side: Side, p: Problem, a: Any, b: Any, bias: Any) -> Callable[[], Any] | None:
    """convlab.torch's call of ``p`` under "auto" (None without torch)."""
    if side.torch is None:
        return None
    import convlab.torch as ct  # registers torch.ops.convlab

    st, pd, dl, g = (list(v) if isinstance(v, tuple) else v for v in geometry(p))
    ops = side.torch.ops.convlab
    if p.op == "forward":
        return lambda: ct.conv2d(a, b, bias, st, pd, dl, g)
    if p.op == "dgrad":
        return lambda: ops.conv2d_backward_data(a, b, list(p.x_shape), st, pd, dl, g, "auto")
    return lambda: ops.conv2d_backward_weight(a, b, list(p.w_shape), st, pd, dl, g, "auto")


def cudnn_call(side: Side, p: Problem, a: Any, b: Any, bias: Any) -> Callable[[], Any]:
    """cuDNN (torch with cudnn.benchmark on) computing ``p`` on torch tensors ``a``, ``b``."""
    torch = side.torch
    st, pd, dl, g = (list(v) if isinstance(v, tuple) else v for v in geometry(p))
    if p.op == "forward":
        return lambda: torch.nn.functional.conv2d(a, b, bias, st, pd, dl, g)
    back = torch.ops.aten.convolution_backward
    fmt = torch.channels_last if a.is_contiguous(memory_format=torch.channels_last) and not \
        a.is_contiguous() else torch.contiguous_format
    if p.op == "dgrad":  # a = dy, b = w; the input's shape from an empty tensor (not read)
        x = torch.empty(p.x_shape, dtype=a.dtype, device=a.device, memory_format=fmt)
        return lambda: back(a, x, b, None, st, pd, dl, False, [0, 0], g, [True, False, False])[0]
    w = torch.empty(p.w_shape, dtype=a.dtype, device=a.device, memory_format=fmt)  # a = x, b = dy
    return lambda: back(b, a, w, None, st, pd, dl, False, [0, 0], g, [False, True, False])[1]


def float64_reference(side: Side, p: Problem, host: tuple) -> tuple[np.ndarray, str]:
    """The float64 output: on the host up to measure.HOST_REFERENCE_MAX_FLOPS (always without a GPU),
    else torch's float64 convolution on the GPU."""
    a, b, bias = (None if v is None else np.asarray(v, np.float64) for v in host)
    if p.flops <= measure.HOST_REFERENCE_MAX_FLOPS or not side.gpu:
        return reference.solve(p, a, b, bias), "host float64"
    t = [None if v is None else side.torch.from_numpy(v).cuda() for v in (a, b, bias)]
    with side.torch.no_grad():
        got = cudnn_call(side, p, *t)()
    return got.cpu().numpy(), "torch float64 on the GPU"


def check(side: Side, got: Any, ref: np.ndarray, tol: float) -> tuple[bool, float, str]:
    """(ok, relative-norm error, reason) of an output against the float64 reference."""
    try:
        err = measure.rel_error(side.host(got), ref)
    except Exception as exc:  # a wrong shape or type is a failed check, reported
        return False, math.inf, f"{type(exc).__name__}: {exc}"[:300]
    if err <= tol:
        return True, err, ""
    return False, err, f"rel err {err:.3g} > tolerance {tol:.3g}"


def rounds(side: Side, contenders: dict[str, tuple[str | None, Callable[[], Any]]], n_rounds: int,
           per_round: int, warmup: int = 2) -> dict[str, float]:
    """Median ms of each contender (name -> (tuning mode or None, call)), sampled in ``n_rounds``
    interleaved rounds of ``per_round`` calls, so every contender sees the same clocks and host load.
    Each turn starts with one untimed call (a mode switch makes "auto" plans re-check once); a
    contender that raises in its ``warmup`` calls is left out."""
    from convlab import autotune

    def mode(name: str | None) -> Any:
        return contextlib.nullcontext() if name is None else autotune.mode(name)

    got: dict[str, list[float]] = {}
    for name, (m, fn) in contenders.items():  # warm-up: plans recorded, cuDNN's benchmark search done
        try:
            with mode(m):
                side.time_ms(fn, warmup)
            got[name] = []
        except Exception:
            continue
    for _ in range(n_rounds):
        for name in got:
            m, fn = contenders[name]
            with mode(m):
                fn()
                side.sync()
                got[name] += side.time_ms(fn, per_round)
    return {name: statistics.median(v) for name, v in got.items() if v}


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def modes_in(rows: list[dict]) -> list[str]:
    """The tuning modes some row measured (``--modes``), in MODES order; all of them for no rows."""
    seen = {m for r in rows for m in r.get("auto", {})}
    return [m for m in MODES if m in seen] or list(MODES)


def summary(rows: list[dict]) -> dict:
    """Per mode: rows, ok, geomean ratio and regret and over how many rows; statuses of every row."""
    out: dict[str, Any] = {"modes": {}, "status": {}}
    for r in rows:
        out["status"][r["status"]] = out["status"].get(r["status"], 0) + 1
    for m in modes_in(rows):
        cols = [r["auto"][m] for r in rows if m in r.get("auto", {})]
        ratios = [c["ratio"] for c in cols if c["ok"] and c.get("ratio")]
        regrets = [1 + c["regret"] for c in cols if c["ok"] and c.get("regret") is not None]
        g = geomean(regrets)
        hits = sum(1 for r in rows if r.get("oracle") and r.get("auto", {}).get(m, {}).get("ok")
                   and r["auto"][m].get("pick") == r["oracle"]["label"])
        out["modes"][m] = {"rows": len(rows), "ok": sum(c["ok"] for c in cols),
                           "ratio_geomean": geomean(ratios), "ratio_over": len(ratios),
                           "regret_geomean": None if g is None else g - 1,
                           "regret_worst": max(regrets) - 1 if regrets else None, "regret_over": len(regrets),
                           "pick_is_oracle": hits,
                           "cold_s_total": sum(c.get("cold_s", 0.0) for c in cols)}
    return out


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:.4g}"


def markdown(data: dict) -> str:
    """The table of every row (declined and failed ones included) and the summary."""
    modes = modes_in(data["rows"])
    lines = [f"# algorithm=\"auto\" against cuDNN: {data['device']}", "",
             f"Command: `{data['command']}`", "",
             "Times in ms (medians of interleaved rounds, the public op on torch tensors); cold: seconds of "
             "the first call, tuning included; ratio = cuDNN's best layout / convlab (> 1: convlab "
             "faster); oracle: each plugin's best config forced through the public op.", "",
             "| layer | op | dtype | layout | " + " | ".join(f"{m} pick, ms, cold s, ratio" for m in modes)
             + " | oracle ms (pick) | cuDNN NCHW | cuDNN CL | status |",
             "|" + " --- |" * (8 + len(modes))]
    for r in data["rows"]:
        cells = []
        for m in modes:
            a = r.get("auto", {}).get(m, {})
            cells.append(f"{a.get('pick', '-')}, {_ms(a.get('median_ms'))}, {_ms(a.get('cold_s'))}, "
                         f"{_ms(a.get('ratio'))}" if a.get("ok") else a.get("reason", "-"))
        o, c = r.get("oracle") or {}, r.get("cudnn") or {}
        lines.append(f"| {r['label']} | {r['op']} | {r['dtype']} | {r['layout']} | " + " | ".join(cells)
                     + f" | {_ms(o.get('median_ms'))} ({o.get('label', '-')}) | {_ms(c.get('nchw'))} | "
                     f"{_ms(c.get('channels_last'))} | {r['status']}{': ' + r['reason'] if r.get('reason') else ''} |")
    lines += ["", "## Summary", "", "Means are over the rows in parentheses (both sides checked and "
              "timed); failed and declined rows are counted, never averaged.", "",
              "| mode | rows | ok | geomean ratio vs cuDNN (over) | regret vs oracle: geomean, worst (over) "
              "| pick = oracle | cold s total |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for m, s in data["summary"]["modes"].items():
        lines.append(f"| {m} | {s['rows']} | {s['ok']} | {_ms(s['ratio_geomean'])} ({s['ratio_over']}) | "
                     f"{_ms(s['regret_geomean'])}, {_ms(s['regret_worst'])} ({s['regret_over']}) | "
                     f"{s['pick_is_oracle']} | {_ms(s['cold_s_total'])} |")
    lines += ["", "Row statuses: " + ", ".join(f"{k} {v}" for k, v in data["summary"]["status"].items()),
              "", f"cuDNN: {data['cudnn']}", ""]
    return "\n".join(lines)
