"""The error distribution of the correct plugins against the float64 reference, the data the
tolerance's constants are set from (convlab.measure.tolerance), and the half-accumulating mutants' errors.

For every plugin, op and accepted config, on its class examples (convlab.testing.classes) and on
``--draws`` derandomized hypothesis draws (the conformance suite's strategies), one run on random
operands: the relative error, the tolerance, the arithmetic's eps, the reduction length L and the
output rounding of the exact result. Then the same on problems of reduction 64 to 1152 for the
half-accumulation mutants (convlab.testing.mutants.half_accumulated, and the kernel-level
half_accumulator of tensor_core).

    python tools/error_survey.py --out results/conformance/simulator/COMMIT [--draws 12] [--plugins a,b]

Writes ``errors.json`` (one row per run) and prints the summary: per arithmetic, the largest
``(err - output rounding) / (eps * sqrt(L))`` (the accumulation constant's use) and ``err / tol``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings

from convlab import measure, reference
from convlab.plugin import registry
from convlab.problem import make_problem
from convlab.testing import checks, class_examples
from convlab.testing.strategies import any_problems


def _row(plugin, problem, config, rng, source: str) -> dict:
    host = measure.random_operands(problem, rng)
    got = checks._run(plugin, problem, config, host)
    want = reference.solve(problem, *host)
    eps = plugin.compute_eps(problem.dtype, config)
    return {"plugin": plugin.name, "config": config.name, "source": source, "problem": problem.describe(),
            "dtype": problem.dtype, "L": problem.reduction_length, "outputs": int(want.size), "eps": eps,
            "err": measure.rel_error(got, want), "rounding": measure.output_rounding(problem, want),
            "tol": measure.plugin_tolerance(plugin, problem, config, want)}


def survey(plugin, op: str, draws: int, rng: np.random.Generator) -> list[dict]:
    rows: list[dict] = []
    for problem in class_examples(plugin, op):
        rows += [_row(plugin, problem, c, rng, "class") for c in checks._accepted_configs(plugin, problem)]
    dtypes, ndims = tuple(sorted(plugin.dtypes)), tuple(plugin.ndims)

    @settings(max_examples=draws, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(problem=any_problems(op, dtypes, None, ndims))
    def draw(problem):
        for config in checks._accepted_configs(plugin, problem):
            rows.append(_row(plugin, problem, config, rng, "draw"))

    draw()
    return rows


def half_mutants(rng: np.random.Generator) -> list[dict]:
    """The half-accumulating mutants on forward fp16 problems of 256 outputs, L = 64 .. 1152."""
    from convlab.testing.kernel_mutants import KERNEL_MUTANTS
    from convlab.testing.mutants import half_accumulated

    tc = registry.get("tensor_core")
    kernel = next(m for m in KERNEL_MUTANTS if m.name == "half_accumulator")
    rows = []
    for channels in (8, 16, 32, 64, 128):
        problem = make_problem("forward", 2, channels, 4, 4, 8, 3, 3, padding=1, dtype="float16")
        host = measure.random_operands(problem, rng)
        want = reference.solve(problem, *host)
        config = checks._accepted_configs(tc, problem)[0]
        with kernel.make(tc) as mutated:
            got = checks._run(mutated, problem, config, host)
        for name, out in (("half_accumulator", got), ("half_sum", half_accumulated(problem, *host))):
            rows.append({"plugin": f"tensor_core~{name}", "config": config.name, "source": "mutant",
                         "problem": problem.describe(), "dtype": "float16", "L": problem.reduction_length,
                         "outputs": int(want.size), "err": measure.rel_error(out, want),
                         "rounding": measure.output_rounding(problem, want),
                         "tol": measure.plugin_tolerance(tc, problem, config, want), "eps": 2.0**-23})
    return rows


def summary(rows: list[dict]) -> list[str]:
    lines = []
    for eps in sorted({r["eps"] for r in rows if r["source"] != "mutant"}):
        mine = [r for r in rows if r["eps"] == eps and r["source"] != "mutant"]
        acc = max((r["err"] - r["rounding"]) / (eps * math.sqrt(r["L"])) for r in mine)
        worst = max(mine, key=lambda r: r["err"] / r["tol"])
        lines.append(f"eps 2**{math.log2(eps):.0f}: {len(mine)} runs, max (err - rounding) / (eps sqrt L) "
                     f"{acc:.3g}, max err / tol {worst['err'] / worst['tol']:.3g} ({worst['plugin']} "
                     f"{worst['problem']})")
    for r in rows:
        if r["source"] == "mutant":
            lines.append(f"{r['plugin']:30s} L {r['L']:5d}: err {r['err']:.3g}, tol {r['tol']:.3g}, "
                         f"err / tol {r['err'] / r['tol']:.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--draws", type=int, default=12)
    ap.add_argument("--plugins", default=None, help="comma-separated (default: every registered one)")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    names = args.plugins.split(",") if args.plugins else [p.name for p in registry.plugins()]
    rows: list[dict] = []
    for name in names:
        plugin = registry.get(name)
        for op in sorted(plugin.ops):
            start = time.perf_counter()
            rows += survey(plugin, op, args.draws, rng)
            print(f"{name} {op}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    rows += half_mutants(rng)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "errors.json").write_text(json.dumps(rows, indent=1))
    text = summary(rows)
    (args.out / "summary.txt").write_text("\n".join(text) + "\n")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
