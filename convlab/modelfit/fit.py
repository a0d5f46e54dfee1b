"""Refit the cost model on measured results and judge it: ``python -m convlab.modelfit``.

    python -m convlab.modelfit --results results/ --out convlab/autotune/model/sm_90.json \\
        --report results/autotune_model/<device>/<commit>/report.md [--target sm_90]

1. reads the measurements under ``--results`` (:mod:`.readers`: which files; :mod:`.measured`: which rows);
2. fits the constants on all of them (:mod:`.fitting`) and writes ``--out`` (the JSON that
   :func:`convlab.autotune.costmodel.model_for` loads for the target class);
3. with ``--report``: leave one network out (:mod:`.evaluate`) for the mode's TOP_K and for k = 1..4,
   and writes the Markdown table (:mod:`.report`) and its figures as JSON (FIGURES) beside it.

The output is deterministic (no timestamps): refitting the same data gives the same files. Exit status
0; 1 when no measurement was found; 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import collections
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from convlab.runtime.fileio import atomic_write, atomic_write_json
from convlab.runtime.targets import TARGETS, get as get_target

from convlab.autotune import modes
from convlab.autotune.costmodel import Model, target_class

from . import evaluate, measured
from .fitting import fit, rms_log_error
from .report import COMMAND, markdown

K_CHOICES = (1, 2, 3, 4)
FIGURES = "figures.json"  # the report's figures as JSON, written beside it


def fit_all(layers: Sequence[evaluate.LayerOp], target_name: str, files: dict[str, int]) -> Model:
    """The model fitted on every layer-op's rows, with what it was fitted on in ``meta``."""
    target = get_target(target_name)
    rows = [r for lay in layers for r in lay.rows()]
    model = fit(rows, target, target_class(target))
    model.meta = {"command": COMMAND, "files": files, "rows": len(rows), "layer_ops": len(layers),
                  "rms_log_error": round(rms_log_error(model, rows, target), 4)}
    return model


def judge_all(layers: Sequence[evaluate.LayerOp], target_name: str) -> dict[str, Any]:
    """Leave-one-network-out judgements at every k of K_CHOICES (one fit per network)."""
    target = get_target(target_name)
    cls = target_class(target)
    nets = sorted({lay.network for lay in layers} - {"other"})
    per_net: dict[str, list] = {}
    per_k: dict[int, list] = {k: [] for k in K_CHOICES}
    for net in nets:
        model = evaluate.held_out_fit(layers, net, target, cls)
        mine = [lay for lay in layers if lay.network == net]
        for k in K_CHOICES:
            js = [evaluate.judge(model, lay, target, k) for lay in mine]
            per_k[k].extend(js)
            if k == modes.TOP_K:
                per_net[net] = js
    return {"per_network": per_net, "per_k": per_k}


def figures(judged: dict[str, Any]) -> dict[str, Any]:
    """The JSON-friendly figures of :func:`judge_all`'s judgements."""
    nets = {net: asdict(evaluate.summarise(js)) for net, js in judged["per_network"].items()}
    everyone = [j for js in judged["per_network"].values() for j in js]
    by_dtype: dict[str, list] = collections.defaultdict(list)
    for j in everyone:
        dtype = j.layer.problem.dtype + ("+high" if j.layer.precision == "high" else "")
        by_dtype[dtype].append(j)
    worst = sorted((j for j in everyone if len(j.layer.cands) > 1), key=lambda j: -j.regret)[:12]
    return {"k": modes.TOP_K, "networks": nets, "all": asdict(evaluate.summarise(everyone)),
            "dtypes": {d: asdict(evaluate.summarise(js)) for d, js in sorted(by_dtype.items())},
            "k_choices": {k: asdict(evaluate.summarise(js)) for k, js in judged["per_k"].items()},
            "worst": [{"network": j.layer.network, "problem": j.layer.problem.describe(),
                       "precision": j.layer.precision, "pick": j.pick.label, "pick_ms": j.pick.ms,
                       "best": j.best.label, "best_ms": j.best.ms, "regret": j.regret} for j in worst]}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m convlab.modelfit", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default="results", metavar="DIR", help="folder of result files (results)")
    p.add_argument("--out", required=True, metavar="FILE.json", help="the model file to write")
    p.add_argument("--report", default=None, metavar="FILE.md",
                   help="also judge the model (leave one network out) and write this Markdown table")
    gpus = sorted(n for n, t in TARGETS.items() if not t.simulator)
    p.add_argument("--target", default="sm_90", choices=gpus,
                   help="the named target whose ceilings the results were measured against (sm_90)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    root = Path(args.results)
    if not root.is_dir():
        _parser().error(f"--results: {args.results!r} is not a folder")
    rows = measured.load(root)
    if not rows:
        print(f"no measurements found under {root}", file=sys.stderr)
        return 1
    files = dict(sorted(collections.Counter(m.file for m in rows).items()))
    target = get_target(args.target)
    layers = evaluate.layer_ops(rows, target)
    model = fit_all(layers, args.target, files)
    atomic_write_json(Path(args.out), model.to_dict(), indent=1, sort_keys=True)
    print(f"wrote {args.out}: {len(model.groups)} groups from {model.meta['rows']} rows "
          f"(rms log error {model.meta['rms_log_error']})")
    if args.report:
        data = figures(judge_all(layers, args.target))
        data["files"], data["model"] = files, model.to_dict()
        data["wgmma_rows"] = sum("MMA=wgmma" in m.config for m in rows)
        data["plugins"] = {p: dict(sorted(collections.Counter(m.file for m in rows if m.plugin == p).items()))
                           for p in sorted({m.plugin for m in rows})}
        report = Path(args.report)
        atomic_write(report, markdown(data))
        atomic_write_json(report.parent / FIGURES, data, indent=1, sort_keys=True)
        print(f"wrote {report} and {report.parent / FIGURES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
