"""The rows and the report of ``convlab bench auto`` (convlab.bench.auto): one row per layer, op, dtype and
layout with its medians, ratios against cuDNN's best layout and regret against the oracle; the summary per
tuning mode; the Markdown table.

Means are over the rows whose contenders were both checked and timed; failed and declined rows are
counted, never averaged.
"""
from __future__ import annotations

import math
from typing import Any

from convlab.runtime.settings import TUNE_MODES

from .user_calls import LAYOUTS


def summarize_row(row: dict, auto: dict, plugins: dict, medians: dict, failed: dict, cudnn_checks: dict,
                  why_no_cudnn: str) -> dict:
    """Medians, ratios against cuDNN's best layout, regret against the oracle, the row's status.
    ``failed``: contender -> why its last timed output disagreed (its column fails)."""
    for lay, reason in ((k.split(":", 1)[1], v) for k, v in failed.items() if k.startswith("cudnn:")):
        cudnn_checks[lay] = dict(cudnn_checks.get(lay, {}), ok=False, reason=reason)
    cud = {lay: medians.get(f"cudnn:{lay}") for lay in LAYOUTS}
    best_cudnn = min((v for v in cud.values() if v), default=None)
    row["cudnn"] = {**cud, "best": best_cudnn, "checks": cudnn_checks, "reason": why_no_cudnn}
    row["plugins"] = {}
    for n, r in plugins.items():
        got = {k: v for k, v in r.items() if k != "fn"} | {"median_ms": medians.get(f"plugin:{n}")}
        if f"plugin:{n}" in failed:
            got.update(ok=False, reason=failed[f"plugin:{n}"])
        row["plugins"][n] = got
    timed = {n: r for n, r in row["plugins"].items() if r["median_ms"] is not None}
    name = min(timed, key=lambda n: timed[n]["median_ms"]) if timed else None
    row["oracle"] = None if name is None else {"plugin": name, "label": timed[name]["label"],
                                               "median_ms": timed[name]["median_ms"],
                                               "arith": timed[name]["arith"]}
    for m, col in auto.items():
        for path, what in (("auto", ""), ("torch", "convlab.torch, ")):
            if f"{path}:{m}" in failed and col["ok"]:
                col["ok"], col["reason"] = False, what + failed[f"{path}:{m}"]
        col["median_ms"], col["torch_ms"] = medians.get(f"auto:{m}"), medians.get(f"torch:{m}")
        if not col["ok"]:
            col["median_ms"] = col["torch_ms"] = None
        col["ratio"] = best_cudnn / col["median_ms"] if best_cudnn and col["median_ms"] else None
        col["torch_ratio"] = best_cudnn / col["torch_ms"] if best_cudnn and col["torch_ms"] else None
        oracle_ms = row["oracle"]["median_ms"] if row["oracle"] else None
        col["regret"] = col["median_ms"] / oracle_ms - 1 if oracle_ms and col["median_ms"] else None
    row["auto"] = auto
    if row["oracle"] is not None and best_cudnn:
        row["oracle"]["ratio"] = best_cudnn / row["oracle"]["median_ms"]
    bad = [m for m, c in auto.items() if not c["ok"]]
    row["status"] = "ok" if not bad else ("failed" if len(bad) == len(auto) else "partly failed")
    row["reason"] = "; ".join(f"{m}: {auto[m].get('reason')}" for m in bad)
    return row


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def modes_in(rows: list[dict]) -> list[str]:
    """The tuning modes some row measured, in TUNE_MODES order; all of them for no rows."""
    seen = {m for r in rows for m in r.get("auto", {})}
    return [m for m in TUNE_MODES if m in seen] or list(TUNE_MODES)


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
             "Times in ms (medians of interleaved rounds, the public op on torch tensors, each contender's "
             "last timed output checked against float64); cold: seconds of the first call, tuning included; "
             "ratio = cuDNN's best layout / convlab (> 1: convlab faster); oracle: each plugin's best config "
             "forced through the public op.", "",
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
