"""``convlab bench auto``: ``algorithm="auto"`` as a user gets it, against cuDNN.

For each suite layer, op (``ops``), dtype (``dtypes``) and layout (``layouts``)::

    operands   fresh random host operands, the user's torch tensors in the layout (4-D operands in NCHW
               or channels_last memory format), the float64 reference (convlab.bench.user_calls.reference:
               never a convlab plugin)
    for mode in heuristic, tune, exhaustive (the tuner's caches emptied once per layout; each mode's
               entry is more thorough than the last, so none answers the next):
        cold     wall seconds of the first public-op call under "auto", synchronised: tuning included
                 (kernels an earlier mode compiled in this process are not compiled again)
        check    that output, then one into a NaN-poisoned ``out=``, and convlab.torch's output, each
                 against float64 (measure.tolerance of the pick's arithmetic)
    oracle     every eligible (plugin, config) forced through the public op: checked, probed; each
               plugin's best enters the rounds
    rounds     convlab.bench.rounds.interleave: each mode's "auto" op call and convlab.torch call, each
               plugin's best, cuDNN in NCHW and channels_last (cudnn.benchmark on; dgrad / wgrad through
               torch.ops.aten.convolution_backward); ``rounds`` rounds, ``repeat`` samples each
    recheck    every contender's last timed output (the allocator's block of that size poisoned with NaN
               before the call) against float64: one that disagrees loses its time and fails its column
    ratios     cuDNN's best layout / convlab (> 1: convlab faster); regret = pick / oracle - 1

A failed check keeps the row, with the reason, out of every mean. dtypes: float32 (exact fp32 class: the FMA
plugins and 3xTF32 both eligible, cuDNN with TF32 off), float32+fma (the FMA plugins alone: tf32x3
unregistered), float32+high (TF32 on both sides), float16, bfloat16. Each row names the arithmetic of
every pick. :func:`run` writes STEM.json after every layer-op and STEM.md at the end; ``resume`` keeps the
rows of an earlier, cut run.
"""
from __future__ import annotations

import contextlib
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from convlab import autotune, measure, runtime
from convlab._version import __version__
from convlab.autotune.features import features
from convlab.ops.explain import plugin_rows
from convlab.plugin import registry
from convlab.problem import unit_roundoff
from convlab.runtime import kernel_cache, settings
from convlab.runtime.fileio import atomic_write, atomic_write_json
from convlab.runtime.targets import current

from . import user_calls as calls
from .auto_report import markdown, summarize_row, summary
from .rounds import Contender, interleave
from .user_calls import LAYOUTS

MODES = settings.TUNE_MODES
#: token -> (dtype, float32 precision, plugins left out)
DTYPES = {"float32": ("float32", "highest", ()), "float32+fma": ("float32", "highest", ("tf32x3",)),
          "float32+high": ("float32", "high", ()), "float16": ("float16", "highest", ()),
          "bfloat16": ("bfloat16", "highest", ())}


@dataclass
class AutoOptions:
    """What :func:`run_case` measures (``convlab bench auto --help`` says each)."""

    dtypes: tuple[str, ...] = ("float32", "float32+fma", "float32+high", "float16")
    layouts: tuple[str, ...] = LAYOUTS
    ops: tuple[str, ...] = ("forward", "dgrad", "wgrad")
    modes: tuple[str, ...] = MODES
    repeat: int = 30  # samples per contender, over the rounds
    probe: int = 5  # oracle: samples per (plugin, config)
    oracle: bool = True
    rounds: int = 5
    warmup: int = 2


@contextlib.contextmanager
def without(names: tuple[str, ...]) -> Iterator[None]:
    """The plugins ``names`` unregistered inside the block (float32+fma: no 3xTF32 candidate)."""
    gone = [registry.get(n) for n in names if n in {p.name for p in registry.plugins()}]
    for plugin in gone:
        registry.unregister(plugin.name)
    try:
        yield
    finally:
        for plugin in gone:
            registry.register(type(plugin), replace=True)


def arithmetic(cand: Any, p: Any, limit: int) -> str:
    """What a candidate computes in: fp32 (FMA), tf32, tf32x3, f16, ... (the cost model's view)."""
    try:
        return features(cand.plugin, p, cand.config, current(), limit).arith
    except Exception:  # an estimate's failure does not hide the row
        return "?"


def tolerance(cand: Any, p: Any) -> float:
    return measure.tolerance(p, cand.plugin.compute_eps(p.dtype))


def auto_column(side: calls.Side, p: Any, ts: tuple, ref: np.ndarray, limit: int, mode: str) -> dict:
    """The first call of ``mode`` (cold), its pick and the three checks (module docstring)."""
    col: dict[str, Any] = {"ok": False}
    before, compiled = autotune.stats(), kernel_cache.stats["compiled"]
    with autotune.mode(mode):
        try:
            side.poison_allocator(p.operand_shapes[2], getattr(ts[0], "dtype", None))
            t0 = time.perf_counter()
            y = calls.op_call(p, *ts, "auto")()
            side.sync()
            col["cold_s"] = time.perf_counter() - t0
            cand = autotune.choose(p, limit)
        except Exception as exc:  # declined or failed: the row stays, with why
            col["reason"] = f"{type(exc).__name__}: {exc}"[:300]
            return col
        after = autotune.stats()
        col.update(pick=cand.label, arith=arithmetic(cand, p, limit), tol=tolerance(cand, p),
                   timed=after["timed"] - before["timed"], compiled=kernel_cache.stats["compiled"] - compiled)
        ok, col["rel_err"], why = calls.check(side, y, ref, col["tol"])
        if ok and side.torch is not None:  # the same call into a NaN-poisoned out=
            out = side.torch.full_like(y, float("nan"))
            calls.op_call(p, *ts, "auto", out=out)()
            side.sync()
            ok, _, why = calls.check(side, out, ref, col["tol"])
            why = why and f"out=: {why}"
        fn = calls.torch_path_call(side, p, *ts)
        if ok and fn is not None:
            side.poison_allocator(p.operand_shapes[2], ts[0].dtype)
            ok, col["torch_rel_err"], why = calls.check(side, fn(), ref, col["tol"])
            why = why and f"convlab.torch: {why}"
    col["ok"], col["reason"] = ok, why
    return col


def oracle(side: calls.Side, p: Any, ts: tuple, ref: np.ndarray, cands: list, limit: int, probe: int
           ) -> dict[str, dict]:
    """Every candidate forced through the public op: its check and probe median, per plugin the best."""
    best: dict[str, dict] = {}
    for cand in cands:
        fn = calls.op_call(p, *ts, (cand.plugin.name, cand.config))
        tol = tolerance(cand, p)
        try:
            side.poison_allocator(p.operand_shapes[2], getattr(ts[0], "dtype", None))
            ok, err, why = calls.check(side, fn(), ref, tol)
            ms = statistics.median(side.clock(fn, probe)) if ok else None
        except Exception as exc:
            ok, err, why, ms = False, None, f"{type(exc).__name__}: {exc}"[:300], None
        row = {"label": cand.label, "ok": ok, "rel_err": err, "reason": why, "probe_ms": ms,
               "arith": arithmetic(cand, p, limit), "tol": tol, "fn": fn}
        mine = best.get(cand.plugin.name)
        if mine is None or (ok and (not mine["ok"] or ms < mine["probe_ms"])):
            best[cand.plugin.name] = row
    return best


def timed_rounds(side: calls.Side, p: Any, ts: tuple, ref: np.ndarray, auto: dict, plugins: dict,
                 cudnn: dict, opts: AutoOptions) -> tuple[dict[str, float], dict[str, str]]:
    """Medians of every checked contender in interleaved rounds, and the reasons of those whose last
    timed output disagreed with float64 (or that raised): they get no median."""
    shape, dtype = p.operand_shapes[2], getattr(ts[0], "dtype", None)
    fns, tols = {}, {}
    for lay, (fn, tol) in cudnn.items():
        fns[f"cudnn:{lay}"], tols[f"cudnn:{lay}"] = (None, fn), tol
    for m in opts.modes:
        if auto[m]["ok"]:
            fns[f"auto:{m}"], tols[f"auto:{m}"] = (m, calls.op_call(p, *ts, "auto")), auto[m]["tol"]
            torch_fn = calls.torch_path_call(side, p, *ts)
            if torch_fn is not None:
                fns[f"torch:{m}"], tols[f"torch:{m}"] = (m, torch_fn), auto[m]["tol"]
    for n, r in plugins.items():
        if r["ok"]:
            fns[f"plugin:{n}"], tols[f"plugin:{n}"] = (None, r["fn"]), r["tol"]
    contenders = {name: Contender(fn, opts.repeat, opts.warmup, settle=1, poison=lambda: side.poison_allocator(
        shape, dtype), keep=side.host, context=(lambda m=m: autotune.mode(m)) if m else contextlib.nullcontext)
        for name, (m, fn) in fns.items()}
    medians, failed = {}, {}
    for name, t in interleave(contenders, side.clock, opts.rounds).items():
        ok, _, why = calls.check(side, t.kept, ref, tols[name], host=True) if t.done else (False, 0, t.error)
        if ok and t.median is not None:
            medians[name] = t.median
        elif not ok:
            failed[name] = f"last timed call: {why}"
    return medians, failed


def run_case(side: calls.Side, entry: Any, problem: Any, token: str, opts: AutoOptions,
             rng: np.random.Generator) -> list[dict]:
    """The rows of one layer-op in one dtype, one per layout (module docstring)."""
    dtype, precision, left_out = DTYPES[token]
    p = problem.replace(dtype=dtype)
    base = {"label": entry.label, "op": p.op, "dtype": token, "problem": p.to_dict(), "flops": p.flops}
    limit = settings.get_workspace_limit()
    rows = []
    with settings.float32_precision(precision), without(left_out):
        cands = registry.candidates(p, limit)
        if not cands:  # declined: the row stays, with every plugin's reason
            why = "no eligible plugin: " + "; ".join(f"{r.name}: {r.reason}" for r in plugin_rows(p, limit))
            return [dict(base, layout=lay, status="declined", reason=why[:500]) for lay in opts.layouts]
        host = measure.random_operands(p, rng)
        ref = calls.reference(side, p, host)
        tensors = {lay: tuple(side.tensor(v, lay) for v in host) for lay in LAYOUTS}
        cudnn, cudnn_checks = {}, {}
        if side.gpu:
            side.torch.backends.cudnn.allow_tf32 = precision == "high"
            eps = 2.0**-10 if precision == "high" and dtype == "float32" else \
                unit_roundoff("float32" if dtype in ("float16", "bfloat16") else dtype)
            for lay in LAYOUTS:
                fn = calls.cudnn_call(side, p, *tensors[lay])
                ok, err, why = calls.check(side, fn(), ref.output, measure.tolerance(p, eps))
                cudnn_checks[lay] = {"ok": ok, "rel_err": err, "reason": why}
                if ok:
                    cudnn[lay] = (fn, measure.tolerance(p, eps))
        for lay in opts.layouts:
            ts = tensors[lay]
            autotune.clear_cache(memory=True, disk=True)
            auto = {m: auto_column(side, p, ts, ref.output, limit, m) for m in opts.modes}
            plugins = oracle(side, p, ts, ref.output, cands, limit, opts.probe) if opts.oracle else {}
            medians, failed = timed_rounds(side, p, ts, ref.output, auto, plugins, cudnn, opts)
            rows.append(summarize_row(dict(base, layout=lay, reference=ref.name), auto, plugins, medians, failed,
                                      cudnn_checks, side.why_no_cudnn))
    return rows


def run(suites: list, opts: AutoOptions, stem: Path, command: str, *, limit: int | None = None,
        shard: tuple[int, int] = (0, 1), resume: bool = False) -> dict:
    """Every (suite layer, op, dtype) of ``suites`` (conv2d entries, the first ``limit`` of each; the
    layer-ops whose index mod shard[1] is shard[0]): rows into STEM.json after each, STEM.md at the end."""
    side = calls.Side()
    versions = dict(runtime.versions(), convlab=__version__)
    if side.torch is not None:
        versions.update(torch=side.torch.__version__,
                        cudnn=str(side.torch.backends.cudnn.version()) if side.gpu else "none")
    data: dict[str, Any] = {"device": runtime.device_name(), "simulator": runtime.SIMULATOR, "versions": versions,
                            "command": command, "rounds": opts.rounds, "repeat": opts.repeat,
                            "cudnn": side.why_no_cudnn or "cudnn.benchmark=True", "rows": []}
    json_path = stem.with_suffix(".json")
    stem.parent.mkdir(parents=True, exist_ok=True)
    if resume and json_path.exists():
        data["rows"] = json.loads(json_path.read_text())["rows"]
    done = {(r["suite"], r["label"], r["op"], r["dtype"]) for r in data["rows"]}
    rng, index = np.random.default_rng(0), -1
    for suite in suites:
        for entry in [e for e in suite.entries if e.kind == "conv2d"][:limit]:
            for problem in (q for q in entry.problems if q.op in opts.ops):
                index += 1
                if index % shard[1] != shard[0]:
                    continue
                for token in (t for t in opts.dtypes if (suite.name, entry.label, problem.op, t) not in done):
                    for row in run_case(side, entry, problem, token, opts, rng):
                        data["rows"].append(dict(row, suite=suite.name))
                        print(f"{suite.name} {entry.label} {problem.op} {token} {row['layout']}: {row['status']}",
                              flush=True)
                    data["summary"] = summary(data["rows"])
                    atomic_write_json(json_path, data, indent=1)
    data["summary"] = summary(data["rows"])
    atomic_write_json(json_path, data, indent=1)
    atomic_write(stem.with_suffix(".md"), markdown(data))
    return data
