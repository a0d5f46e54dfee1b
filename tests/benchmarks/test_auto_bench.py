"""benchmarks/auto_bench.py on the simulator (``--smoke``): both layouts in the JSON and the Markdown,
cuDNN's columns skipped with the reason, a deliberately wrong plugin failing its rows (and never the
oracle), declined rows kept, and the interleaved rounds."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

import convlab
from convlab import Config, reference, runtime
from convlab.plugin import registry

REPO = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class WrongOnHost(convlab.Algorithm):
    """1 % off everywhere, computed on the host; the highest priority, so a pick without timing is it."""

    name, ops, priority = "tb_wrong", frozenset({"forward", "dgrad", "wgrad"}), 99
    dtypes = frozenset({"float32", "float64"})

    def configs(self, problem):
        return [Config()]

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        host = [None if v is None else runtime.to_host(v) for v in (a, b, bias)]
        runtime.copy_into(out, (reference.solve(problem, *host) * 1.01).astype(problem.dtype))


@pytest.fixture
def bench(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVLAB_CACHE_DIR", str(tmp_path / "cache"))
    registry.load()
    monkeypatch.setattr(registry, "_plugins", dict(registry._plugins))  # restored after the test
    return _load("auto_bench")


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the simulator smoke run")
def test_smoke_rows_checks_layouts_and_declines(bench, tmp_path):
    convlab.register(WrongOnHost)
    stem = tmp_path / "auto"
    assert bench.main(["--smoke", "--out", str(stem), "--ops", "forward", "--dtypes", "float32,float16",
                       "--plugins", "direct,tb_wrong"]) == 0
    data = json.loads(stem.with_suffix(".json").read_text())
    assert data["device"] == "CUDA simulator" and data["versions"]["numba"]
    rows = {(r["dtype"], r["layout"]): r for r in data["rows"]}
    assert set(rows) == {(d, lay) for d in ("float32", "float16") for lay in ("nchw", "channels_last")}
    for lay in ("nchw", "channels_last"):
        row = rows["float32", lay]
        assert row["status"] == "failed" and "rel err" in row["reason"]  # the pick is the wrong plugin
        for mode in ("heuristic", "tune", "exhaustive"):
            col = row["auto"][mode]
            assert col["pick"] == "tb_wrong[default]" and not col["ok"] and col["ratio"] is None
        assert not row["plugins"]["tb_wrong"]["ok"] and row["plugins"]["direct"]["ok"]
        assert row["oracle"]["label"] == "direct[default]" and row["oracle"]["median_ms"] > 0
        assert row["cudnn"]["best"] is None and "no torch CUDA device" in row["cudnn"]["reason"]
        declined = rows["float16", lay]  # neither kept plugin takes float16 (widen is unregistered)
        assert declined["status"] == "declined" and "float16" in declined["reason"]
    modes = data["summary"]["modes"]
    assert all(m["rows"] == 4 and m["ok"] == 0 and m["ratio_over"] == 0 for m in modes.values())
    assert data["summary"]["status"] == {"failed": 2, "declined": 2}
    text = stem.with_suffix(".md").read_text()
    assert "| 3x3 p1 | forward | float32 | channels_last |" in text and "| float32 | nchw |" in text
    assert "declined" in text and "no torch CUDA device" in text


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the simulator smoke run")
def test_correct_picks_are_timed_checked_and_compared_with_the_oracle(bench, tmp_path):
    stem = tmp_path / "ok"
    assert bench.main(["--smoke", "--out", str(stem), "--ops", "wgrad", "--dtypes", "float32",
                       "--layouts", "channels_last", "--plugins", "direct"]) == 0
    (row,) = json.loads(stem.with_suffix(".json").read_text())["rows"]
    assert row["status"] == "ok" and row["reference"] == "host float64"
    for col in row["auto"].values():
        assert col["ok"] and col["pick"] == "direct[default]" and col["arith"] == "fp32"
        assert col["rel_err"] < 1e-5 and col["torch_rel_err"] < 1e-5 and col["median_ms"] > 0
        assert col["torch_ms"] > 0 and col["cold_s"] > 0 and col["regret"] is not None


def test_rounds_interleave_contenders_and_hold_each_ones_mode():
    parts = _load("auto_bench_parts")
    from convlab import autotune

    calls = []

    class Clock(parts.Side):
        def __init__(self):
            self.gpu, self.torch = False, None

    def contender(name):
        return lambda: calls.append((name, autotune.get_mode()))

    got = parts.rounds(Clock(), {"a": ("exhaustive", contender("a")), "b": (None, contender("b"))}, 3, 2,
                       warmup=1)
    assert set(got) == {"a", "b"}
    mode = autotune.get_mode()
    turn_a, turn_b = [("a", "exhaustive")] * 3, [("b", mode)] * 3  # one untimed call, then 2 samples
    assert calls == [("a", "exhaustive"), ("b", mode)] + (turn_a + turn_b) * 3
