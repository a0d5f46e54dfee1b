"""benchmarks/gemm_bench.py on the simulator: the SIMT GEMM checked against float64 on its first run and on
its last timed call (a kernel that goes wrong after its first run is caught), rows in the JSON."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from convlab import runtime

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gemm_bench.py"


@pytest.fixture
def gemm_bench():
    spec = importlib.util.spec_from_file_location("gemm_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the simulator's sizes and tiles")
def test_checked_on_the_first_and_the_last_timed_call(gemm_bench, tmp_path, monkeypatch):
    out = tmp_path / "g.json"
    argv = ["--out", str(out), "--size", "16", "16", "8", "--itypes", "f32", "--tiles", "8x16x4/2x2", "--warmup", "0"]
    assert gemm_bench.main(argv) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["ok"] and row["rel_err"] < 1e-6 and row["last_rel_err"] < 1e-6 and row["tolerance"] < 1e-5
    real, calls = gemm_bench.matmul, []

    def wrong_after_the_first(a, b, c, tile):
        calls.append(tile)
        real(a, b, c, tile=tile)
        if len(calls) > 1:
            c.copy_to_device(c.copy_to_host() * 1.01)

    monkeypatch.setattr(gemm_bench, "matmul", wrong_after_the_first)
    assert gemm_bench.main(argv) == 1
    (row,) = json.loads(out.read_text())["rows"]
    assert not row["ok"] and row["rel_err"] < 1e-6 and row["error"].startswith("last timed call: rel err")
