"""``convlab bench auto`` on the simulator (``--smoke``): both layouts in the JSON and the Markdown,
cuDNN's columns skipped with the reason, a deliberately wrong plugin failing its rows (and never the
oracle), a wrong replay caught on the last timed call, declined rows kept, and the interleaved rounds."""
from __future__ import annotations

import json

import pytest

import convlab
from convlab import Config, reference, runtime
from convlab.bench import rounds
from convlab.cli.parser import main
from convlab.plugin import registry


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
    monkeypatch.setenv("CONVLAB_CACHE_DIR", str(tmp_path / "user-cache"))  # never emptied by the run
    registry.load()
    monkeypatch.setattr(registry, "_plugins", dict(registry._plugins))  # restored after the test
    return lambda *argv: main(["bench", "auto", "--smoke", "--cache-dir", str(tmp_path / "cache"), *argv])


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the simulator smoke run")
def test_smoke_rows_checks_layouts_and_declines(bench, tmp_path):
    convlab.register(WrongOnHost)
    stem = tmp_path / "auto"
    assert bench("--out", str(stem), "--ops", "forward", "--dtypes", "float32,float16",
                 "--plugins", "direct,tb_wrong") == 0
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
    assert bench("--out", str(stem), "--ops", "wgrad", "--dtypes", "float32", "--layouts", "channels_last",
                 "--plugins", "direct") == 0
    data = json.loads(stem.with_suffix(".json").read_text())
    assert data["command"].startswith("convlab bench auto --out ") and "--smoke" in data["command"]
    (row,) = data["rows"]
    assert row["status"] == "ok" and row["reference"] == "host float64"
    for col in row["auto"].values():
        assert col["ok"] and col["pick"] == "direct[default]" and col["arith"] == "fp32"
        assert col["rel_err"] < 1e-5 and col["torch_rel_err"] < 1e-5 and col["median_ms"] > 0
        assert col["torch_ms"] > 0 and col["cold_s"] > 0 and col["regret"] is not None


class WrongWhenTimed(convlab.Algorithm):
    """Right on its first two runs (the oracle's check and its probe), 1 % off from then on (the timed
    rounds); the lowest priority, so "auto" never picks it."""

    name, ops, priority = "tb_wrong_when_timed", frozenset({"forward"}), -99
    dtypes = frozenset({"float32"})
    runs = 0

    def configs(self, problem):
        return [Config()]

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        type(self).runs += 1
        host = [None if v is None else runtime.to_host(v) for v in (a, b, bias)]
        scale = 1.0 if type(self).runs <= 2 else 1.01
        runtime.copy_into(out, (reference.solve(problem, *host) * scale).astype(problem.dtype))


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the simulator smoke run")
def test_an_output_gone_wrong_in_the_rounds_is_caught_on_the_last_timed_call(bench, tmp_path):
    convlab.register(WrongWhenTimed)
    stem = tmp_path / "late"
    assert bench("--out", str(stem), "--ops", "forward", "--dtypes", "float32", "--layouts", "nchw",
                 "--modes", "heuristic", "--plugins", f"direct,{WrongWhenTimed.name}") == 0
    (row,) = json.loads(stem.with_suffix(".json").read_text())["rows"]
    late, direct = row["plugins"][WrongWhenTimed.name], row["plugins"]["direct"]
    assert WrongWhenTimed.runs > 2 and late["probe_ms"] is not None  # passed its first check and probe
    assert not late["ok"] and late["reason"].startswith("last timed call: rel err") and late["median_ms"] is None
    assert direct["ok"] and row["oracle"]["label"] == "direct[default]" and row["status"] == "ok"


def test_rounds_hold_each_contenders_mode_and_settle_each_turn():
    from convlab import autotune

    calls = []

    def contender(name, mode):
        context = (lambda: autotune.mode(mode)) if mode else rounds.contextlib.nullcontext
        return rounds.Contender(lambda: calls.append((name, autotune.get_mode())), samples=6, warmup=1,
                                settle=1, context=context)

    got = rounds.interleave({"a": contender("a", "exhaustive"), "b": contender("b", None)},
                            lambda fn, n: [fn() or 1.0 for _ in range(n)], 3)
    assert set(got) == {"a", "b"} and got["a"].samples == [1.0] * 6
    mode = autotune.get_mode()
    turn_a, turn_b = [("a", "exhaustive")] * 3, [("b", mode)] * 3  # one untimed call, then 2 samples
    assert calls == [("a", "exhaustive"), ("b", mode)] + (turn_a + turn_b) * 3
