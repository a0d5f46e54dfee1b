"""``convlab bench report`` (convlab.bench.coverage): per-suite ratios from bench JSONs (the fastest checked
candidate, later files win), the rows' table, and the flagged layers."""
import json
import math

from convlab.bench import coverage
from convlab.bench.report import FORMAT

from cli_helpers import run_cli


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
    files = [json.loads(p.read_text()) for p in paths]
    table, flags = coverage.coverage(coverage.merged(files), None)
    rows = {(r[0], r[1]): r for r in table}
    suite = rows["s", "forward"]  # a: 1 / 0.25 = 4 (the second file), b: 0.25 (direct), dw: 2, c: 1
    assert suite[2] == 4 and math.isclose(suite[3], (4 * 0.25 * 2 * 1) ** (1 / 4)) and suite[5] == 1
    assert math.isclose(rows["depthwise (all suites)", "forward"][3], 2.0)
    assert any("b / forward: only direct" in f for f in flags)
    assert not any("c / forward" in f for f in flags)  # direct is fastest there, but not the only one
    assert any("b / forward: 0.25 of cuDNN (direct)" in f for f in flags)
    # without tf32x3 layer a is implicit_gemm's 1.0
    table, _ = coverage.coverage(coverage.merged(files), {"implicit_gemm", "direct", "depthwise"})
    assert math.isclose({(r[0], r[1]): r for r in table}["s", "forward"][3], (1 * 0.25 * 2 * 1) ** (1 / 4))


def test_the_command_prints_the_rows_and_the_ratios(tmp_path, capsys):
    rec = _rec("n1 8x4x4 w8x3x3", "forward", [("implicit_gemm", 2.0, "ok"), ("direct", 4.0, "ok")], 1.0)
    rec.update(kind="conv2d", problem=dict(rec["problem"], dtype="float32"), flops=1, bytes=1)
    for c in rec["candidates"]:
        c["config"] = "default"
    rec["cudnn"]["config"] = "default"
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"format": FORMAT, "results": [rec]}))
    code, out, _ = run_cli(capsys, "bench", "report", str(path))
    assert code == 0
    assert "implicit_gemm[default]" in out and "| s | forward | 1 | 0.500 | 0.50 | 0 | implicit_gemm 1 |" in out
    code, _, err = run_cli(capsys, "bench", "report", str(tmp_path / "missing.json"))
    assert code == 2 and "cannot read" in err
