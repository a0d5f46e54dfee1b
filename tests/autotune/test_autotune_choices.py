"""The autotuner's choices (convlab.autotune), on the simulator with injected fake timings: never an
ineligible or wrong candidate, early drops, interleaved re-timing of close contenders, failures that
are reported and not cached, the simulator's declared priority, cache hits seen by explain and the ops,
and the tuning depth (configs timed per plugin).

The throw-away plugins and fake timings are in ``tuning_fakes``; ``conftest.py`` isolates each test.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import convlab
from convlab import autotune, reference, runtime
from convlab.plugin import registry
from convlab.testing.strategies import problems

from tuning_fakes import CORRECT, LIMIT, FakeTimer, expected_winner, tiny


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(problem=st.sampled_from(["forward", "dgrad", "wgrad"]).flatmap(lambda op: problems(op, max_out=3)),
       deterministic=st.booleans())
def test_never_chooses_ineligible_or_disqualified(problem, deterministic):
    rng = np.random.default_rng(0)
    a, b, bias = (rng.standard_normal(s) if s else None for s in (*problem.operand_shapes[:2],
                                                                 problem.bias_shape))
    assume(np.any(reference.solve(problem, a, b, bias) != 0))  # else "1 % off" is still exact
    autotune.set_deterministic(deterministic)
    timer = FakeTimer(problem)
    result = autotune.tune(problem, workspace_limit=LIMIT, force=True, timer=timer)
    eligible = {c.label for c in registry.candidates(problem, LIMIT)}
    status = {c.label: c.verdict for c in result.candidates}
    assert result.source == "tuned" and result.winner_label in eligible
    assert result.winner_label == expected_winner(problem, deterministic)
    assert status["tt_wrong[default]"].startswith("wrong: rel err")
    assert status["tt_crash[default]"].startswith("error: RuntimeError: launch failed on purpose")
    assert "tt_picky[huge=1]" not in status  # over the workspace limit: never a candidate
    assert ("tt_nondet[default]" in status) != deterministic
    assert all(status[label] == "ok" for label in eligible & CORRECT if label in status)
    assert autotune.choose(problem, LIMIT).label == result.winner_label  # remembered, not re-timed
    assert len(timer.calls) == len(set(timer.calls)) and not timer.bad


def test_slow_candidates_are_dropped_early_and_failures_are_not_fatal():
    problem = tiny()
    result = autotune.tune(problem, workspace_limit=LIMIT, timer=FakeTimer(problem))
    rows = {c.label: c for c in result.candidates}
    assert rows["direct[default]"].dropped_early and rows["direct[default]"].samples == autotune.PROBE
    assert not rows["tt_host[v=2]"].dropped_early and rows["tt_host[v=2]"].samples == 6
    assert rows["tt_picky[huge=0]"].median_ms == pytest.approx(0.3)
    assert result.checked_against == "host float64" and "tt_wrong" in str(result)


def test_close_contenders_are_retimed_interleaved(monkeypatch):
    """Timed one after another, tt_host[v=1] looks 5 % slower than v=2 (conditions drifted); re-timed
    round-robin it is 10 % faster, and the decision follows the interleaved samples."""
    problem = tiny()
    monkeypatch.setattr(registry, "_plugins", {"tt_host": registry.get("tt_host"),
                                               "direct": registry.get("direct")})
    first = {"tt_host[v=1]": 1.0, "tt_host[v=2]": 0.95, "direct[default]": 5.0}
    final = {"tt_host[v=1]": 0.9, "tt_host[v=2]": 1.0}
    calls = []

    def timer(cand):
        seen = calls.count(cand.label)
        calls.append(cand.label)
        return [(first if seen == 0 else final)[cand.label]] * 6

    result = autotune.tune(problem, workspace_limit=LIMIT, timer=timer)
    rounds = calls[3:]
    assert calls[:3] == ["tt_host[v=1]", "tt_host[v=2]", "direct[default]"]
    assert rounds == ["tt_host[v=1]", "tt_host[v=2]"] * autotune.FINAL_ROUNDS  # direct: not close
    assert result.winner_label == "tt_host[v=1]" and "final round" in " ".join(result.notes)
    rows = {c.label: c for c in result.candidates}
    assert rows["tt_host[v=1]"].median_ms == pytest.approx(0.9)
    assert rows["tt_host[v=1]"].samples == 6 * autotune.FINAL_ROUNDS


def test_every_candidate_failing_is_reported_not_cached(monkeypatch):
    problem = tiny()
    monkeypatch.setattr(registry, "_plugins", {"tt_wrong": registry.get("tt_wrong"),
                                               "tt_crash": registry.get("tt_crash")})
    result = autotune.tune(problem, workspace_limit=LIMIT, timer=FakeTimer(problem))
    assert result.winner is None and result.reason == "no candidate ran correctly"
    assert not autotune.cache_path().exists()
    with pytest.raises(RuntimeError, match="no candidate ran .* correctly"):
        autotune.choose(problem, LIMIT)


@pytest.mark.skipif(not runtime.SIMULATOR, reason="on a GPU, tune() without a timer really times")
def test_simulator_without_timer_uses_declared_priority():
    problem = tiny()
    result = autotune.tune(problem, workspace_limit=LIMIT)
    assert result.source == "priority" and "simulator" in result.reason
    assert result.winner_label == registry.candidates(problem, LIMIT)[0].label == "tt_wrong[default]"
    assert autotune.stats()["checked"] == 0 and not autotune.cache_path().exists()
    empty = autotune.tune(tiny(n=0), workspace_limit=LIMIT, timer=FakeTimer(problem))
    assert empty.source == "priority" and "N = 0" in empty.reason and autotune.stats()["timed"] == 0


def test_cache_hit_does_no_timing_and_explain_reports_it():
    problem = tiny(bias=True)
    first = autotune.tune(problem, workspace_limit=LIMIT, timer=FakeTimer(problem))
    autotune.clear_cache(memory=True, disk=False)  # like a new process: the file must answer
    timer = FakeTimer(problem)
    second = autotune.tune(problem, workspace_limit=LIMIT, timer=timer)
    assert second.source == "cache" and timer.calls == [] and second.winner_label == first.winner_label
    assert second.medians() == first.medians()
    expl = convlab.explain(problem, workspace_limit=LIMIT)
    text = str(expl)
    assert expl.source == "cache" and expl.chosen == "tt_nondet" and "from the cache" in text
    assert "wrong: rel err" in text and "error: RuntimeError" in text and "0.3 ms" in text
    x, w, b = (np.random.rand(*s).astype("float32") for s in ((1, 2, 4, 4), (2, 2, 3, 3), (2,)))
    y = convlab.conv2d(x, w, b, workspace_limit=LIMIT)  # "auto" -> strategy.auto -> the cached winner
    np.testing.assert_allclose(y, reference.forward(problem, x, w, b), rtol=1e-4, atol=1e-5)
    assert autotune.stats()["timed"] == len(first.candidates) - 2  # all but wrong and crash, once


def test_tuning_depth_times_each_plugins_first_configs_and_retunes_when_it_changes():
    """set_tune_configs(1): one config per plugin (its preferred) is compiled and timed; back to all
    configs, the stored entry's candidate list differs, so the shape is tuned again."""
    problem = tiny()
    previous = autotune.set_tune_configs(1)
    try:
        result = autotune.tune(problem, workspace_limit=LIMIT, timer=FakeTimer(problem))
        labels = [c.label for c in result.candidates]
        assert len(labels) == len({label.split("[")[0] for label in labels})  # one config a plugin
        assert "tt_host[v=1]" in labels and "tt_host[v=2]" not in labels
        autotune.set_tune_configs(None)
        again = autotune.tune(problem, workspace_limit=LIMIT, timer=FakeTimer(problem))
        assert again.source == "tuned" and "tt_host[v=2]" in {c.label for c in again.candidates}
    finally:
        autotune.set_tune_configs(previous)
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="count"):
            autotune.set_tune_configs(bad)
