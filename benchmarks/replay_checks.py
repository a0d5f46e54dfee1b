"""Every op with every applicable plugin forced: record, then replay on new inputs (GPU selftest part).

Used by ``benchmarks/overhead_bench.py --selftest``: a replay bug may hit one plugin's kernels only
(their scalar parameter types differ), so each plugin that applies to a case is forced with
``algorithm=name``; the first call records the plan, the second (new random inputs, NaN-poisoned
``out``) must replay it (plan statistics), match the float64 reference within the reduction-scaled
tolerance, and on a GPU every plan must be thin.
"""
from __future__ import annotations

import numpy as np

from convlab import runtime
from convlab.call import plan


#: case: (op, array shapes (a, b[, bias]), the op's shape argument or None, keyword arguments)
PLUGIN_CASES = {
    "conv2d": ("conv2d", ((1, 4, 5, 5), (4, 2, 3, 3), (4,)), None,
               {"padding": 1, "stride": (1, 2), "groups": 2}),
    "dgrad": ("conv2d_backward_data", ((1, 4, 5, 3), (4, 2, 3, 3)), (1, 4, 5, 5),
              {"padding": 1, "stride": (1, 2), "groups": 2}),
    "wgrad": ("conv2d_backward_weight", ((1, 4, 5, 5), (1, 4, 5, 3)), (4, 2, 3, 3),
              {"padding": 1, "stride": (1, 2), "groups": 2}),
    "transpose": ("conv_transpose2d", ((1, 4, 3, 3), (4, 1, 3, 3), (2,)), None,
                  {"padding": 1, "stride": 2, "output_padding": 1, "groups": 2}),
    "conv2d_plain": ("conv2d", ((2, 16, 8, 8), (16, 16, 3, 3)), None, {"padding": 1}),
    "dgrad_plain": ("conv2d_backward_data", ((2, 16, 8, 8), (16, 16, 3, 3)), (2, 16, 8, 8), {"padding": 1}),
    "wgrad_plain": ("conv2d_backward_weight", ((2, 16, 8, 8), (2, 16, 8, 8)), (16, 16, 3, 3),
                    {"padding": 1}),
    "transpose_plain": ("conv_transpose2d", ((2, 16, 8, 8), (16, 16, 3, 3)), None, {"padding": 1}),
}


#: the cases a quick selftest runs: grouped, strided, with bias (the plain ones add little coverage)
QUICK_CASES = ("conv2d", "dgrad", "wgrad", "transpose")


def plugins_replay_check(cases: tuple[str, ...] | None = None, budget_s: float | None = None) -> dict:
    """Every op with every applicable plugin forced (``algorithm=name``): record on one input, then
    replay on new inputs into a NaN-poisoned ``out`` and against the float64 reference (a replay bug may
    hit one plugin only). ``cases``: names of PLUGIN_CASES (default all); ``budget_s``: stop starting new
    (case, plugin) pairs after this many seconds (each compiles its kernels on a GPU); the ones left
    out are listed under ``skipped``, not counted as failures."""
    import time

    import convlab
    from convlab import reference
    from convlab.measure import rel_error, tolerance
    from convlab.plugin import registry

    rng = np.random.default_rng(2)
    rows, ok, skipped = {}, True, []
    start = time.perf_counter()
    for case, (op, shapes, shape_arg, kwargs) in PLUGIN_CASES.items():
        if cases is not None and case not in cases:
            continue
        fn = getattr(convlab, op)
        rand = lambda: [rng.standard_normal(s).astype(np.float32) for s in shapes]  # noqa: E731
        host = rand()
        tail = () if shape_arg is None else (shape_arg,)
        bias = {"bias": host[2]} if len(host) == 3 else {}
        prob = convlab.problem_for(op, host[0], host[1], *tail, **kwargs, **bias)
        for name in [p.name for p in registry.plugins(prob.op) if registry.verdict(p, prob)]:
            if budget_s is not None and time.perf_counter() - start > budget_s:
                skipped.append(f"{case}/{name}")
                continue
            try:
                plan.clear()
                for _ in range(2):  # record, then replay on new inputs
                    host = rand()
                    dev = [runtime.to_device(h) for h in host]
                    dbias = {"bias": dev[2]} if len(dev) == 3 else {}
                    out = runtime.full(prob.operand_shapes[2], np.nan, np.float32)
                    before = plan.stats()["replayed"]
                    fn(dev[0], dev[1], *tail, algorithm=name, out=out, **kwargs, **dbias)
                replayed = plan.stats()["replayed"] == before + 1
                want = reference.solve(prob, *[h.astype(np.float64) for h in host])
                err = rel_error(out.copy_to_host(), want)
                thin = [p.thin for p in plan._table().plans.values()]
                good = bool(replayed and err <= tolerance(prob, np.finfo(np.float32).eps)
                            and (runtime.SIMULATOR or all(thin)))
                rows[f"{case}/{name}"] = {"ok": good, "rel_err": err, "replayed": replayed, "thin": thin}
            except Exception as exc:  # noqa: BLE001  (recorded per case)
                good = False
                rows[f"{case}/{name}"] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            ok = ok and good
    return {"ok": ok, "cases": rows, "skipped": skipped, "seconds": time.perf_counter() - start}
