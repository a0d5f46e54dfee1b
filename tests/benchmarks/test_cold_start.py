"""benchmarks/cold_start.py: its per-mode counts are the tuner's own (checked against the tuner's
counters on the simulator), and ``counts`` runs in the compile-only runtime on a one-layer suite."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import convlab
from convlab import autotune, make_problem, runtime

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import cold_start  # noqa: E402


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the simulator's tuner with an injected timer")
def test_counted_candidates_are_what_the_tuner_times(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVLAB_CACHE_DIR", str(tmp_path))
    problem = make_problem("wgrad", 1, 4, 4, 4, 4, 1, 1)
    limit = convlab.get_workspace_limit()
    budget = autotune.set_budget(None)
    try:
        for mode in cold_start.MODES:
            built, timed = cold_start.chosen(problem, mode, limit)
            autotune.clear_cache(memory=True, disk=True)
            autotune.reset_stats()
            with autotune.mode(mode):
                result = autotune.tune(problem, timer=lambda cand: [1.0, 1.0, 1.0])
            assert autotune.stats()["timed"] == len(timed), mode
            assert {r.label for r in result.candidates if r.samples} == {c.label for c in timed}, mode
            if mode == "heuristic":
                assert [c.label for c in built] == [result.winner_label] and not timed
    finally:
        autotune.set_budget(budget)
        autotune.clear_cache(memory=True, disk=False)


def test_counts_in_the_compile_only_runtime(tmp_path):
    suite = tmp_path / "one.json"
    suite.write_text(json.dumps({"name": "one", "problems": [{"x": [2, 8, 6, 6], "w": [8, 8, 3, 3],
                                                              "padding": 1}]}))
    stem = tmp_path / "counts"
    env = dict(os.environ, CONVLAB_RUNTIME="compile", CONVLAB_TARGET="sm_90", CONVLAB_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "cold_start.py"), "counts", "--suite",
                           str(suite), "--out", str(stem)], capture_output=True, text=True, env=env,
                          timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(stem.with_suffix(".json").read_text())
    assert data["target"] == "sm_90" and data["top_k"] == autotune.TOP_K
    modes = data["suites"]["one"]
    assert all(modes[m]["layer_ops"] == 3 and not modes[m]["declined"] for m in cold_start.MODES)
    assert modes["heuristic"]["candidates_timed"] == 0 and modes["heuristic"]["kernels_compiled"] >= 3
    assert modes["heuristic"]["kernels_compiled"] <= modes["tune"]["kernels_compiled"] \
        <= modes["exhaustive"]["kernels_compiled"]
    assert 0 < modes["tune"]["candidates_timed"] <= modes["exhaustive"]["candidates_timed"]
    text = stem.with_suffix(".md").read_text()
    assert "CONVLAB_RUNTIME=compile python benchmarks/cold_start.py counts" in text
    assert "| one | 3 | tune |" in text
