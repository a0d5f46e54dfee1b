"""Small cases of every plugin and op, for compute-sanitizer (memcheck, racecheck) on a real GPU.

    compute-sanitizer --tool memcheck python3 tools/sanitize_cases.py [PLUGIN ...]   (default: every plugin)

Environment: SANITIZE_DTYPES (comma list of DTYPES), SANITIZE_SHAPES (comma list of indices into SHAPES),
SANITIZE_NDIMS (comma list of 1, 2, 3), SANITIZE_CONFIGS (configs per plugin and problem, default 2): a
shorter run for the slow racecheck.

Every registered plugin runs every op, dtype and number of spatial dimensions it declares on a few small
problems it accepts (2D: one GEMM-aligned, one grouped/strided/dilated/odd, ...; 3D: one padded, one
grouped with depth stride and dilation; 1D: one padded, one depthwise with stride and dilation, as the
2D embeddings the ops hand the plugins, which run one-axis kernels where they have them); each result is
checked against the float64 reference, so the sanitizer log and the printed errors cover the same
launches.
"""
from __future__ import annotations

import itertools
import os
import sys

import numpy as np

import convlab
from convlab import make_problem, make_problem_nd, measure, reference, runtime
from convlab.plugin import registry
from convlab.problem import np_dtype
from convlab.call.candidate import run_candidate
from convlab.plugin.registry import Candidate

DTYPES = ("float64", "float32", "float16", "bfloat16", "tf32")  # tf32: float32 under precision "high"
SHAPES = [  # (n, c, h, w, k, r, s, stride, padding, dilation, groups, bias)
    (2, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, True),      # GEMM-aligned: every plugin applies
    (2, 128, 6, 6, 32, 3, 3, 1, 1, 1, 1, True),     # few output tiles, long reduction: split-K
    (1, 6, 9, 7, 4, 3, 2, 2, (1, 0), (1, 2), 2, True),  # grouped, strided, dilated, odd sizes
    (2, 32, 4, 4, 16, 1, 1, 1, 0, 1, 1, False),     # 1x1 shortcut paths
    (8, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, False),     # batch 8: tensor_core's wgrad splits the images
    (2, 3, 9, 9, 8, 3, 3, 2, 1, 1, 1, True),        # a stem, stride 2: tensor_core's strided dgrad (fp32)
]
SHAPES_3D = [  # (n, c, (d, h, w), k, kernel, stride, padding, dilation, groups, bias)
    (2, 8, (5, 6, 6), 16, (3, 3, 3), 1, 1, 1, 1, True),                     # padded, GEMM-aligned
    (1, 6, (7, 6, 5), 4, (3, 2, 2), (2, 1, 1), (1, 0, 1), (2, 1, 1), 2, True),  # grouped, depth stride/dilation
]
SHAPES_1D = [  # (n, c, l, k, s, stride, padding, dilation, groups, bias)
    (2, 16, 20, 16, 3, 1, 1, 1, 1, True),           # padded, GEMM-aligned
    (1, 6, 23, 6, 5, 2, 2, 2, 6, True),             # depthwise, strided, dilated
]


def problems(dtype: str, op: str, ndims: set[int]):
    """The problems of ``op`` in ``dtype`` (tf32: float32) for the numbers of dimensions asked."""
    dt = "float32" if dtype == "tf32" else dtype
    picks = os.environ.get("SANITIZE_SHAPES")
    if 2 in ndims:
        for n, c, h, w, k, r, s, st, pd, dl, g, bias in ([SHAPES[int(i)] for i in picks.split(",")] if picks
                                                         else SHAPES):
            yield make_problem(op, n, c, h, w, k, r, s, stride=st, padding=pd, dilation=dl, groups=g,
                               bias=bias and op != "wgrad", dtype=dt)
    if 1 in ndims:
        for n, c, length, k, s, st, pd, dl, g, bias in SHAPES_1D:
            yield make_problem_nd(op, n, c, (length,), k, (s,), stride=st, padding=pd, dilation=dl, groups=g,
                                  bias=bias and op != "wgrad", dtype=dt).lowered()
    if 3 in ndims:
        for n, c, sp, k, ker, st, pd, dl, g, bias in SHAPES_3D:
            yield make_problem_nd(op, n, c, sp, k, ker, stride=st, padding=pd, dilation=dl, groups=g,
                                  bias=bias and op != "wgrad", dtype=dt)


def _case(plugin, prob, config, rng) -> tuple[float, bool]:
    """Run one (plugin, problem, config) on fresh operands into a NaN-poisoned output; (error, ok)."""
    host = measure.random_operands(prob, rng)
    a, b, bb = measure.to_device(*host)
    out = runtime.full(prob.operand_shapes[2], np.nan, np_dtype(prob.dtype))
    run_candidate(Candidate(plugin, config), prob, a, b, bb, out, convlab.get_workspace_limit())
    err = measure.rel_error(runtime.to_host(out), reference.solve(prob, *host))
    return err, err <= measure.tolerance(prob, plugin.compute_eps(prob.dtype))


def main(names: list[str]) -> int:
    failures, runs = 0, 0
    rng = np.random.default_rng(0)
    dtypes = os.environ.get("SANITIZE_DTYPES", ",".join(DTYPES)).split(",")
    ndims = {int(v) for v in os.environ.get("SANITIZE_NDIMS", "1,2,3").split(",")}
    per_problem = int(os.environ.get("SANITIZE_CONFIGS", "2"))
    for op, dtype in itertools.product(("forward", "dgrad", "wgrad"), dtypes):
        with convlab.float32_precision("high" if dtype == "tf32" else "highest"):
            for prob in problems(dtype, op, ndims):
                for plugin in convlab.plugins(op):
                    if names and plugin.name not in names:
                        continue
                    if dtype == "tf32" and plugin.name != "tensor_core":
                        continue  # the float32 plugins ran under "highest"
                    for config in registry.safe_configs(plugin, prob)[:per_problem]:
                        if not registry.verdict(plugin, prob, config):
                            continue
                        runs += 1
                        try:
                            err, ok = _case(plugin, prob, config, rng)
                        except Exception as exc:  # noqa: BLE001  (a failing case is reported, the rest run)
                            failures += 1
                            print(f"ERROR {plugin.name}[{config.name}] {dtype} {prob.describe()} "
                                  f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                                  flush=True)
                            continue
                        failures += not ok
                        print(f"{'ok  ' if ok else 'FAIL'} {plugin.name}[{config.name}] {dtype} "
                              f"{prob.describe()} err={err:.2e}", flush=True)
    print(f"{runs} runs, {failures} failures or errors")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
