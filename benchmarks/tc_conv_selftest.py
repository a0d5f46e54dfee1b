"""The self-test of ``benchmarks/tc_conv_bench.py --selftest``: the tensor_core plugin against float64.

Every op x dtype on a few shapes (padding, stride, dilation, bias, remainders in M and N), the plugin's
output against the host float64 reference, through ``plugin.run`` on device arrays (bf16 as its uint16
bits, ``convlab.runtime.kernel_view``) and through the public ``convlab.conv2d`` (fp16, bf16); and the
float32 precision rule (declined under "highest"). Every check is in its own try/except: failures
become rows. Run it through ``tc_conv_bench.py --selftest``.
"""
from __future__ import annotations

import time
import traceback

import numpy as np

import convlab
from convlab import reference, runtime
from convlab.measure import random_operands, rel_error, tolerance
from convlab.problem import np_dtype

DTYPES = ("float16", "bfloat16", "float32")  # float32 = TF32 under precision "high"
SELFTEST = [  # (op, n, c, h, w, k, r, s, options)
    ("forward", 2, 16, 9, 11, 24, 3, 3, dict(padding=1, bias=True)),
    ("forward", 3, 32, 17, 13, 40, 3, 2, dict(stride=2, dilation=(1, 2), padding=(1, 0))),
    ("forward", 2, 8, 15, 15, 136, 1, 1, {}),
    ("forward", 4, 64, 14, 14, 130, 5, 5, dict(padding=2, stride=(1, 2))),
    ("dgrad", 2, 24, 9, 11, 16, 3, 3, dict(padding=1, bias=True)),
    ("dgrad", 3, 40, 10, 12, 32, 3, 3, dict(dilation=2, padding=(0, 3))),
    ("dgrad", 2, 136, 7, 7, 64, 1, 1, {}),
    ("wgrad", 2, 24, 9, 11, 16, 3, 3, dict(padding=1)),
    ("wgrad", 3, 40, 10, 12, 32, 3, 3, dict(stride=2, dilation=2, padding=(0, 3))),
    ("wgrad", 8, 136, 7, 7, 64, 1, 1, {}),
]


def log(*args) -> None:
    print(*args, flush=True)


def selftest(plugin, rows: list) -> None:
    for op, n, c, h, w, k, r, s, opts in SELFTEST:
        for dtype in DTYPES:
            row = {"part": "selftest", "op": op, "dtype": dtype}
            try:
                with convlab.float32_precision("high"):
                    pr = convlab.make_problem(op, n, c, h, w, k, r, s, dtype=dtype, **opts)
                    row["problem"] = pr.describe()
                    verdict = plugin.applicable(pr)
                    if not verdict:
                        row.update(status="declined", error=verdict.reason)
                        continue
                    host = random_operands(pr, np.random.default_rng(7))
                    # device arrays as the kernels read them: bf16 as its uint16 bits
                    dev = [None if v is None else runtime.to_device(runtime.kernel_view(v)) for v in host]
                    out = runtime.to_device(runtime.kernel_view(  # NaN poison (bf16: bits 0x7FC0)
                        np.full(pr.operand_shapes[2], np.nan, np_dtype(dtype))))
                    configs = plugin.configs(pr)  # every config; one with bias (fewer compiles)
                    for config in configs[:1] if pr.bias else configs:
                        t0 = time.perf_counter()
                        plugin.run(pr, config, *dev, out, workspace_limit=2**30)
                        runtime.synchronize()
                        got = np.asarray(out.copy_to_host().view(np_dtype(dtype)), np.float64)
                        err = rel_error(got, reference.solve(pr, *host))
                        tol = tolerance(pr, plugin.compute_eps(dtype))
                        row[f"rel_err[{config.name}]"] = err
                        row["tolerance"] = tol
                        row["first_s"] = round(time.perf_counter() - t0, 2)
                        row["status"] = "ok" if err <= tol and row.get("status", "ok") == "ok" else "WRONG"
            except Exception as exc:  # a failure is a row, never fatal
                row.update(status="error", error=f"{type(exc).__name__}: {exc}"[:400],
                           trace=traceback.format_exc()[-800:])
            finally:
                rows.append(row)
                log(row)
    for name, fn in (("declines float32 under highest", _highest_rule), ("conv2d fp16 via the API", _api),
                     ("conv2d bf16 via the API", lambda p: _api(p, "bfloat16"))):
        row = {"part": "selftest", "op": name}
        try:
            row.update(fn(plugin))
        except Exception as exc:
            row.update(status="error", error=f"{type(exc).__name__}: {exc}"[:400])
        rows.append(row)
        log(row)


def _highest_rule(plugin) -> dict:
    pr = convlab.make_problem("forward", 1, 16, 8, 8, 16, 3, 3, dtype="float32")
    with convlab.float32_precision("highest"):
        v = plugin.applicable(pr)
    return {"status": "ok" if not v and "high" in v.reason else "WRONG", "error": v.reason}


def _api(plugin, dtype: str = "float16") -> dict:
    """conv2d on host arrays of ``dtype`` (bfloat16: ml_dtypes) through the public op, forced to us."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 16, 12, 12)).astype(np_dtype(dtype))
    w = rng.standard_normal((32, 16, 3, 3)).astype(np_dtype(dtype))
    y = convlab.conv2d(x, w, padding=1, algorithm="tensor_core")
    y = y.copy_to_host() if hasattr(y, "copy_to_host") else np.asarray(y)
    pr = convlab.make_problem("forward", 2, 16, 12, 12, 32, 3, 3, padding=1, dtype=dtype)
    err = rel_error(y, reference.solve(pr, x, w))
    return {"status": "ok" if y.dtype == np_dtype(dtype) and err <= tolerance(pr, 2**-23) else "WRONG",
            "rel_err": err, "out_dtype": str(y.dtype)}
