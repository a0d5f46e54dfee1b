"""Benchmark results: the result records, the metadata block, JSON and CSV files, and the text table.

JSON layout (``convlab bench``; read back by ``convlab plot``)::

    {"format": "convlab-bench/1", "date": ISO-8601 UTC, "device": name, "compute_capability": [9, 0],
     "simulator": false, "versions": {...}, "settings": {...}, "note": "...",
     "results": [ProblemResult as a dict: suite, label, kind, op, problem, flops, bytes, reference,
                 auto {plugin, config, source}, declined {plugin: reason},
                 candidates [CandidateResult], cudnn CandidateResult | null, best], ...}

CSV: one row per (problem, candidate), cuDNN included as plugin ``cudnn``.
"""
from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable

from convlab import runtime
from convlab.runtime.fileio import atomic_write, atomic_write_json
from convlab.measure import CandidateResult
from convlab._version import __version__

from .text import SIMULATOR_NOTE, SIMULATOR_WALL_CLOCK_NOTE, legend, simulator_note, wrap as _wrap  # noqa: F401

FORMAT = "convlab-bench/1"


@dataclass
class ProblemResult:
    """One (suite entry, op) problem: its candidates, the auto pick, the declining plugins, cuDNN."""

    suite: str
    label: str
    kind: str
    op: str
    problem: dict
    flops: int
    bytes: int
    reference: str = ""
    auto: dict = field(default_factory=dict)
    declined: dict = field(default_factory=dict)
    candidates: list[CandidateResult] = field(default_factory=list)
    cudnn: CandidateResult | None = None
    best: str | None = None
    error: str = ""  # set when the problem itself could not be set up (operands, reference)
    worker: str = ""  # sweeps (convlab.sweep): the Dask worker that ran it, and its device
    device: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ProblemResult":
        """The inverse of ``dataclasses.asdict`` (a results file's or a sweep journal's record)."""
        known = {f.name for f in fields(cls)}
        res = cls(**{k: v for k, v in data.items() if k in known})
        res.candidates = [CandidateResult.from_dict(c) for c in data.get("candidates", [])]
        res.cudnn = CandidateResult.from_dict(data["cudnn"]) if data.get("cudnn") else None
        return res


def user_ms(row: Any) -> float | None:
    """A candidate's time as a user's call meets it: through the public op (``op_median_ms``: plan
    replay, thin launches, graph) where it was timed (GPU), else ``median_ms`` (``plugin.run``; cuDNN's
    is torch's own call). ``row``: a CandidateResult or its dict."""
    if isinstance(row, dict):
        return row.get("op_median_ms") or row.get("median_ms")
    return row.op_median_ms or row.median_ms


def rank(res: ProblemResult) -> None:
    """Mark the fastest checked candidate and every checked candidate's ratio to cuDNN (torch's own
    call), both by :func:`user_ms`."""
    timed = [r for r in res.candidates if r.status == "ok" and user_ms(r)]
    if timed:
        res.best = min(timed, key=user_ms).label
    base = res.cudnn
    if base is not None and base.status == "ok" and base.median_ms:
        for r in timed:
            r.vs_cudnn = base.median_ms / user_ms(r)


def summary(res: ProblemResult) -> str:
    """One line: how many candidates passed, the fastest, cuDNN."""
    if res.error:
        return f"failed: {res.error}"
    ok = sum(r.status == "ok" for r in res.candidates)
    best = next((r for r in res.candidates if r.label == res.best), None)
    text = f"{ok}/{len(res.candidates)} candidates ok"
    if best is not None:
        text += f", fastest {best.label} {user_ms(best):.4g} ms"
    if res.cudnn is not None and res.cudnn.median_ms:
        text += f", cuDNN {res.cudnn.median_ms:.4g} ms"
    return text


_PROBLEM_COLS = ("suite", "label", "kind", "op", "flops", "bytes", "reference", "worker", "device")
_SHAPE_COLS = ("dtype", "x", "w", "stride", "padding", "dilation", "groups", "bias")
_ROW_COLS = tuple(f.name for f in fields(CandidateResult))


def metadata(settings: dict[str, Any], extra_versions: dict[str, str] | None = None,
             device: tuple[str, list[int]] | None = None) -> dict[str, Any]:
    """Device, versions and date for a results file (``device``: (name, compute capability) of the
    machines that ran it, when not this process's device, as in a sweep)."""
    name, cc = device or (runtime.device_name(), list(runtime.compute_capability()))
    meta = {"format": FORMAT, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "device": name, "compute_capability": cc,
            "simulator": runtime.target().simulator,
            "versions": {"convlab": __version__, **runtime.versions(), **(extra_versions or {})},
            "settings": settings}
    if not runtime.HAS_DEVICE:
        meta["note"] = simulator_note(bool(settings.get("simulator_wall_clock")))
    return meta


def to_json(meta: dict[str, Any], results: Iterable[ProblemResult]) -> dict[str, Any]:
    return {**meta, "results": [asdict(r) for r in results]}


def csv_rows(results: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flat rows (one per problem and candidate) from results in their JSON form."""
    rows = []
    for res in results:
        base = {k: res.get(k, "") for k in _PROBLEM_COLS}
        base.update({k: res["problem"][k] for k in _SHAPE_COLS})
        for k in ("x", "w", "stride", "padding", "dilation"):
            base[k] = "x".join(map(str, base[k]))
        for cand in res["candidates"] + ([res["cudnn"]] if res.get("cudnn") else []):
            rows.append({**base, **{k: cand.get(k) for k in _ROW_COLS}})
    return rows


def write(out_dir: str | os.PathLike, stem: str, data: dict[str, Any]) -> tuple[Path, Path]:
    """Write ``stem.json`` and ``stem.csv`` atomically; returns their paths."""
    out = Path(out_dir)
    jpath, cpath = out / f"{stem}.json", out / f"{stem}.csv"
    atomic_write_json(jpath, data, indent=1)
    rows = csv_rows(data["results"])
    cols = list(_PROBLEM_COLS) + list(_SHAPE_COLS) + list(_ROW_COLS)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(cpath, buf.getvalue())
    return jpath, cpath


def load(path: str | os.PathLike) -> dict[str, Any]:
    """A results JSON file; ValueError when it is not one."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None
    if (not isinstance(data, dict) or data.get("format") != FORMAT
            or not isinstance(data.get("results"), list)):
        raise ValueError(f"{path} is not a convlab bench results file (format {FORMAT})")
    return data


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of the positive finite values (None when there are none)."""
    vals = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None


def _fmt(value: float | None, spec: str) -> str:
    width = int(spec.split(".")[0])
    return f"{'-':>{width}}" if value is None else format(value, spec)


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.1f}"


#: the call path's bar: the public op within OP_WITHIN of the kernel wherever the kernel takes > OP_FLOOR_MS
OP_FLOOR_MS, OP_WITHIN = 0.2, 0.10


def op_vs_kernel(results: Iterable[ProblemResult]) -> list[str]:
    """Per op, over the candidates whose kernel takes more than OP_FLOOR_MS: how many have the public
    op ('op ms') within OP_WITHIN of the kernel ('ms'), the geometric mean and worst op / kernel, and
    each row above the bar. Empty when no row has both times (simulator)."""
    per_op: dict[str, list[tuple[float, str]]] = {}
    for res in results:
        op = "transpose" if res.kind == "conv_transpose2d" else res.op
        for r in res.candidates:
            if r.median_ms and r.op_median_ms and r.median_ms > OP_FLOOR_MS:
                per_op.setdefault(op, []).append((r.op_median_ms / r.median_ms,
                                                  f"{res.label} {op} {r.label}: kernel {r.median_ms:.4f} ms, "
                                                  f"op {r.op_median_ms:.4f} ms"))
    if not per_op:
        return []
    rows = [x for v in per_op.values() for x in v]
    met = sum(ratio <= 1 + OP_WITHIN for ratio, _ in rows)
    lines = [f"public op vs kernel where the kernel takes > {OP_FLOOR_MS} ms: {met} of {len(rows)} within "
             f"{OP_WITHIN:.0%}" + (" (ALL)" if met == len(rows) else "")]
    for op, vals in sorted(per_op.items()):
        ratios = [v for v, _ in vals]
        lines.append(f"  {op:<9} {sum(v <= 1 + OP_WITHIN for v in ratios)}/{len(ratios)} within, op/kernel "
                     f"geomean {geomean(ratios):.3f}, max {max(ratios):.3f}")
    for ratio, what in sorted(rows, reverse=True):
        if ratio > 1 + OP_WITHIN:
            lines.append(f"  above: {what} ({ratio:.2f}x)")
    return lines


def table(results: Iterable[ProblemResult]) -> str:
    """Fixed-width text table: one line per candidate; '*' marks the auto pick, '<' the fastest; 'ms' is
    ``plugin.run``, 'op ms' the candidate through the public op (call path included, '-' on the
    simulator); fastest and xcuDNN by the op's time where there is one (:func:`user_ms`)."""
    results = list(results)
    labels = [r.label for res in results for r in res.candidates + ([res.cudnn] if res.cudnn else [])]
    pw = max([len(x) for x in labels] + [14])  # plugin[config] column
    sw = max([len(res.label) for res in results] + [5])  # shape column
    pad = f"{'':<{sw}} {'':<9}   "
    head = (f"{'shape':<{sw}} {'op':<9} {'plugin[config]':<{pw + 2}} {'ms':>9} {'op ms':>9} {'TFLOP/s':>8} "
            f"{'GB/s':>8} {'xcuDNN':>7} {'MiB':>6}  check")
    lines, ratios = [head, "-" * len(head)], {}
    for res in results:
        op = "transpose" if res.kind == "conv_transpose2d" else res.op
        rows = res.candidates + ([res.cudnn] if res.cudnn else [])
        for i, r in enumerate(rows):
            mark = ("*" if r.auto else " ") + ("<" if r.label == res.best else " ")
            check = r.status if r.rel_error is None else f"{r.status} {r.rel_error:.1e}"
            line = (f"{res.label if i == 0 else '':<{sw}} {op if i == 0 else '':<9} "
                    f"{mark}{r.label:<{pw}} {_fmt(r.median_ms, '9.4f')} {_fmt(r.op_median_ms, '9.4f')} "
                    f"{_fmt(r.tflops, '8.2f')} "
                    f"{_fmt(r.gbs, '8.1f')} {_fmt(r.vs_cudnn, '7.2f')} {_mib(r.extra_mem_bytes):>6}  {check}")
            if r.error and r.status == "error":
                lines.extend(_wrap(line + ": ", r.error, len(line) + 2))
            else:
                lines.append(line)
        best: dict[str, float] = {}  # each plugin's best config on this problem
        for r in res.candidates:
            if r.vs_cudnn:
                best[r.plugin] = max(best.get(r.plugin, 0.0), r.vs_cudnn)
        for plugin, ratio in best.items():
            ratios.setdefault((plugin, op), []).append(ratio)
        for name, reason in res.declined.items():
            first = f"{pad}{name:<{pw}} declines: "
            lines.extend(_wrap(first, reason, len(first)))
        if res.auto.get("plugin") and not any(r.auto for r in res.candidates):
            lines.append(f"{pad}auto picks {res.auto['plugin']}[{res.auto['config']}] "
                         "(not run: outside --plugins)")
        if res.error:
            first = f"{res.label:<{sw}} {op:<9}   problem failed: "
            lines.extend(_wrap(first, res.error, len(first)))
        if "error" in res.auto:
            first = f"{pad}auto pick failed: "
            lines.extend(_wrap(first, res.auto["error"], len(first)))
    if ratios:
        lines.append("")
        lines.append("geometric mean of cuDNN ms / plugin ms (above 1: faster than cuDNN):")
        for (plugin, op), vals in sorted(ratios.items()):
            lines.append(f"  {plugin:<20} {op:<9} {geomean(vals):.3f} over {len(vals)} problem(s)")
    overhead = op_vs_kernel(results)
    if overhead:
        lines.extend(["", *overhead])
    lines.extend(["", legend(res.label for res in results)])
    return "\n".join(lines)
