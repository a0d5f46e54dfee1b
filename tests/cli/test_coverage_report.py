"""tools/coverage_report.py: issue 13's per-suite ratios from bench JSONs (fastest candidate, later files win)."""
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import coverage_report  # noqa: E402


def _rec(label, op, cands, cudnn, groups=1, channels=8):
    return {"suite": "s", "label": label, "op": op, "problem": {"groups": groups, "x": [1, channels, 4, 4]},
            "candidates": [{"plugin": p, "status": st, "median_ms": 9.0, "op_median_ms": ms}
                           for p, ms, st in cands],
            "cudnn": {"plugin": "cudnn", "status": "ok", "median_ms": cudnn, "op_median_ms": None}}


def test_report_takes_the_fastest_correct_candidate_and_later_files(tmp_path):
    first = [_rec("a", "forward", [("implicit_gemm", 2.0, "ok"), ("tf32x3", 0.5, "wrong")], 1.0),
             _rec("b", "forward", [("direct", 4.0, "ok")], 1.0),
             _rec("dw", "forward", [("depthwise", 0.5, "ok")], 1.0, groups=8),
             _rec("c", "forward", [("direct", 1.0, "ok"), ("implicit_gemm", 2.0, "ok")], 1.0)]
    second = [_rec("a", "forward", [("implicit_gemm", 1.0, "ok"), ("tf32x3", 0.25, "ok"), ("im2col", 0.1, "wrong")],
                   1.0)]
    paths = []
    for i, recs in enumerate((first, second)):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps({"results": recs}))
    table, flags = coverage_report.report(coverage_report.rows_of([str(p) for p in paths]), None)
    rows = {(r[0], r[1]): r for r in table}
    suite = rows["s", "forward"]  # a: 1 / 0.25 = 4 (the second file), b: 0.25 (direct), dw: 2, c: 1
    assert suite[2] == 4 and math.isclose(suite[3], (4 * 0.25 * 2 * 1) ** (1 / 4)) and suite[5] == 1
    assert math.isclose(rows["depthwise (all suites)", "forward"][3], 2.0)
    assert any("b / forward: only direct" in f for f in flags)
    assert not any("c / forward" in f for f in flags)  # direct is fastest there, but not the only one
    assert any("b / forward: 0.25 of cuDNN (direct)" in f for f in flags)
    # without tf32x3 layer a is implicit_gemm's 1.0
    table, _ = coverage_report.report(coverage_report.rows_of([str(p) for p in paths]), {"implicit_gemm", "direct",
                                                                                        "depthwise"})
    assert math.isclose({(r[0], r[1]): r for r in table}["s", "forward"][3], (1 * 0.25 * 2 * 1) ** (1 / 4))
