"""The tuning modes (convlab.autotune.modes): how many candidates each mode compiles and times, the cost
model's top-k per plugin in "tune", the per-shape budget, what the cache entry records, heuristic
entries replaced by "tune", set_tune_configs capping every mode, and bad mode names.

The throw-away plugins of ``tuning_fakes`` run on the host; ``Ranked`` declares ``cost_hints`` so that a
test model (``costmodel.using``, with sm_90's ceilings standing in for the simulator's) orders its four
configs c=4 (cheapest) .. c=1.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import convlab
from convlab import Config, autotune, runtime
from convlab.runtime import settings
from convlab.autotune import costmodel, modes, tuner
from convlab.plugin import registry

from tuning_fakes import FAKE_MS, LIMIT, REPO, FakeTimer, HostExact, tiny

MS = dict(FAKE_MS, **{f"tt_ranked[c={c}]": 0.4 + 0.05 * c for c in range(1, 5)})


class Ranked(HostExact):
    """Four configs; the model's estimate falls with c (c=4 cheapest), the fake times too. No launch
    declared: each config's estimate is a launch (4 us) below any other plugin's on a tiny problem."""

    name, priority = "tt_ranked", 6

    def configs(self, problem):
        return [Config(c=c) for c in (1, 2, 3, 4)]

    def cost_hints(self, problem, config, target):
        return {"flops": 1e4 * (5 - config["c"]), "bytes": 1.0, "launches": 0, "family": "tt_ranked"}


@pytest.fixture(autouse=True)
def ranked_model():
    convlab.register(Ranked)
    with costmodel.using(costmodel.Model("sm_90"), ceilings="sm_90") as model:
        yield model
    convlab.unregister(Ranked.name)
    settings.set_tune_budget(settings.DEFAULT_TUNE_BUDGET_S)


def _labels(result, status=None):
    return [r.label for r in result.candidates if status is None or r.status == status]


def test_mode_setting_context_manager_and_bad_names():
    assert autotune.get_mode() == "tune" and autotune.TUNE_MODES == ("heuristic", "tune", "exhaustive")
    assert autotune.set_mode("heuristic") == "tune" and autotune.get_mode() == "heuristic"
    with autotune.mode("exhaustive") as name:
        assert name == autotune.get_mode() == "exhaustive"
    assert autotune.get_mode() == "heuristic"
    for bad in ("fast", "Tune", None, 3):
        with pytest.raises(ValueError, match="heuristic.*tune.*exhaustive"):
            autotune.set_mode(bad)
    with pytest.raises(ValueError, match="mode must be one of"):
        with autotune.mode("fast"):
            pytest.fail("the block must not run")
    assert autotune.get_mode() == "heuristic"
    with pytest.raises(ValueError, match="seconds"):
        autotune.set_budget(-1)
    assert autotune.set_budget(None) == settings.DEFAULT_TUNE_BUDGET_S and autotune.get_budget() is None


@pytest.mark.parametrize("value, mode, warned", [(None, "heuristic", False), ("tune", "tune", False),
                                                 (" Exhaustive ", "exhaustive", False), ("fast", "heuristic", True)])
def test_environment_variable(value, mode, warned):
    """Unset: the default, heuristic; a bad value warns and falls back to it."""
    env = dict(os.environ, PYTHONWARNINGS="default")
    env.pop("CONVLAB_TUNE_MODE", None)
    if value is not None:
        env["CONVLAB_TUNE_MODE"] = value
    code = "from convlab.runtime import settings; print(settings.get_tune_mode())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO.parent,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == mode, done.stderr[-800:]
    assert ("CONVLAB_TUNE_MODE" in done.stderr and "'heuristic', 'tune', 'exhaustive'" in done.stderr) == warned


def test_heuristic_times_nothing_and_compiles_only_the_pick(monkeypatch):
    problem = tiny()
    ran = []
    for plugin in registry.plugins():
        original = plugin.run
        monkeypatch.setattr(plugin, "run",
                            lambda *a, _o=original, _n=plugin.name, **k: (ran.append(_n), _o(*a, **k)))
    autotune.set_mode("heuristic")
    timer = FakeTimer(problem, MS)
    result = autotune.tune(problem, workspace_limit=LIMIT, timer=timer)
    assert result.source == "heuristic" and result.mode == "heuristic"
    est = result.estimates
    assert result.winner_label == "tt_ranked[c=4]" and est["tt_ranked[c=4]"] < est["tt_ranked[c=1]"]
    assert timer.calls == [] and ran == []
    assert {k: autotune.stats()[k] for k in ("timed", "checked", "tuned", "heuristic")} == \
        {"timed": 0, "checked": 0, "tuned": 0, "heuristic": 1}
    assert all(r.status == "not run" for r in result.candidates)
    x, w = (np.ones(s, np.float32) for s in problem.operand_shapes[:2])
    convlab.conv2d(x, w, workspace_limit=LIMIT)  # "auto": the remembered heuristic pick runs, alone
    assert ran == ["tt_ranked"] and autotune.stats()["timed"] == 0


def test_tune_times_the_model_top_k_per_plugin_best_first(monkeypatch):
    problem = tiny()
    timer = FakeTimer(problem, MS)
    result = autotune.tune(problem, workspace_limit=LIMIT, timer=timer)
    assert result.source == "tuned" and result.mode == "tune" and modes.TOP_K == 2
    ranked = [label for label in dict.fromkeys(timer.calls) if label.startswith("tt_ranked")]
    assert ranked == ["tt_ranked[c=4]", "tt_ranked[c=3]"]  # its two cheapest estimates, best first
    skipped = {r.label: r.error for r in result.candidates if r.status == "not run"}
    assert set(skipped) == {"tt_ranked[c=2]", "tt_ranked[c=1]"}
    assert "rank 3 of tt_ranked's 4" in skipped["tt_ranked[c=2]"]
    assert "top 2 a plugin" in skipped["tt_ranked[c=2]"]
    assert "tt_host[v=1]" in timer.calls and "tt_host[v=2]" in timer.calls  # two configs: both in its top 2
    assert "est " in str(result) and any("mode 'tune'" in n for n in result.notes)
    entry = tuner.stored(result.key)
    assert entry["mode"] == "tune" and entry["k"] == 2 and "tt_ranked[c=2]" not in entry["candidates_timed"]
    assert "tt_ranked[c=4]" in entry["candidates_timed"] and entry["estimates"]["tt_ranked[c=1]"] > 0
    assert sorted(entry["candidates"]) == sorted(_labels(result))  # every eligible one: staleness
    monkeypatch.setattr(modes, "TOP_K", 1)
    timer = FakeTimer(problem, MS)
    autotune.tune(problem, workspace_limit=LIMIT, force=True, timer=timer)
    assert [c for c in timer.calls if c.startswith("tt_ranked")][0] == "tt_ranked[c=4]"
    assert not {"tt_ranked[c=3]", "tt_host[v=2]"} & set(timer.calls)  # tt_host's tie: its first config


class HalfWrong(HostExact):
    """The model's favourite config (v=1) is off by 1 %; v=2 is right."""

    name, priority = "tt_halfwrong", 7

    def cost_hints(self, problem, config, target):
        return {"flops": 1e4 * config["v"], "launches": 0}

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        super().run(problem, config, a, b, bias, out, workspace_limit=workspace_limit)
        if config["v"] == 1:
            out.copy_to_device(out.copy_to_host() * np.float32(1.01))


def test_tune_goes_down_the_ranking_when_its_top_k_all_fail(monkeypatch):
    problem = tiny()
    monkeypatch.setattr(registry, "_plugins", {"tt_halfwrong": HalfWrong()})
    monkeypatch.setattr(modes, "TOP_K", 1)
    calls = []
    result = autotune.tune(problem, workspace_limit=LIMIT, timer=lambda c: calls.append(c.label) or [0.1] * 6)
    rows = {r.label: r.verdict for r in result.candidates}
    assert rows["tt_halfwrong[v=1]"].startswith("wrong") and result.winner_label == "tt_halfwrong[v=2]"
    assert calls and set(calls) == {"tt_halfwrong[v=2]"}
    assert any("none of the top 1 a plugin ran correctly" in n for n in result.notes)


def test_exhaustive_times_every_candidate_in_registry_order():
    problem = tiny()
    autotune.set_mode("exhaustive")
    timer = FakeTimer(problem, MS)
    result = autotune.tune(problem, workspace_limit=LIMIT, timer=timer)
    first = list(dict.fromkeys(timer.calls))
    correct = [c.label for c in registry.candidates(problem, LIMIT)
               if c.plugin.name not in ("tt_wrong", "tt_crash")]
    assert first == correct and len(correct) >= 8 and not _labels(result, "not run")
    assert tuner.stored(result.key)["mode"] == "exhaustive" and "k" not in tuner.stored(result.key)


def test_budget_cuts_timing_short():
    problem = tiny()
    autotune.set_budget(0.0)
    timer = FakeTimer(problem, MS)
    result = autotune.tune(problem, workspace_limit=LIMIT, timer=timer)
    assert timer.calls == ["tt_ranked[c=4]"]  # the model's best; the budget was spent after it
    cut = [r for r in result.candidates if "budget" in r.error]
    assert len(cut) >= 4 and all(r.status == "not run" for r in cut)
    assert any("per-shape budget of 0 s spent" in n for n in result.notes)
    assert result.winner_label == "tt_ranked[c=4]"
    autotune.set_budget(None)
    timer = FakeTimer(problem, MS)
    autotune.tune(problem, workspace_limit=LIMIT, force=True, timer=timer)
    assert len(set(timer.calls)) > 4


def test_heuristic_entry_is_replaced_by_tune_and_a_tuned_one_answers_heuristic():
    problem = tiny()
    autotune.set_mode("heuristic")
    first = autotune.tune(problem, workspace_limit=LIMIT)
    entry = tuner.stored(first.key)
    assert entry["mode"] == "heuristic" and entry["winner"] == "tt_ranked[c=4]"
    assert entry["model"].startswith("sm_90:") and entry["ranking"].startswith("cost model")
    timer = FakeTimer(problem, MS)
    assert autotune.tune(problem, workspace_limit=LIMIT, timer=timer).source == "cache" and not timer.calls
    autotune.set_mode("tune")
    tuned = autotune.tune(problem, workspace_limit=LIMIT, timer=timer)
    assert tuned.source == "tuned" and timer.calls
    assert any("cache entry replaced: it is a heuristic pick" in n for n in tuned.notes), tuned.notes
    assert tuner.stored(first.key)["mode"] == "tune"
    assert tuned.winner_label == min((c for c in timer.calls), key=MS.get)
    autotune.set_mode("heuristic")
    timer = FakeTimer(problem, MS)
    again = autotune.tune(problem, workspace_limit=LIMIT, timer=timer)
    assert again.source == "cache" and again.mode == "tune" and not timer.calls
    assert again.winner_label == tuned.winner_label
    autotune.set_mode("exhaustive")  # a tune entry timed a subset: exhaustive tunes again
    assert autotune.tune(problem, workspace_limit=LIMIT, timer=timer).source == "tuned"


def test_heuristic_entry_of_another_model_is_decided_again():
    problem = tiny()
    autotune.set_mode("heuristic")
    autotune.tune(problem, workspace_limit=LIMIT)
    other = costmodel.Model("sm_90", launch_ms=0.5)
    with costmodel.using(other, ceilings="sm_90"):
        again = autotune.tune(problem, workspace_limit=LIMIT)
    assert again.source == "heuristic" and any("another cost model" in n for n in again.notes)


def test_tune_configs_cap_every_mode():
    problem = tiny()
    autotune.set_tune_configs(1)
    try:
        for mode in ("heuristic", "tune", "exhaustive"):
            autotune.set_mode(mode)
            result = autotune.tune(problem, workspace_limit=LIMIT, force=True, timer=FakeTimer(problem, MS))
            assert not {"tt_ranked[c=2]", "tt_ranked[c=4]", "tt_host[v=2]"} & set(_labels(result)), mode
            assert "tt_ranked[c=1]" in _labels(result)
    finally:
        autotune.set_tune_configs(None)


@pytest.mark.skipif(not runtime.SIMULATOR, reason="what the simulator answers: a GPU times the candidates")
def test_simulator_without_timer_and_without_model():
    problem = tiny()
    assert autotune.tune(problem, workspace_limit=LIMIT).source == "priority"  # tune: nothing to time
    autotune.set_mode("heuristic")
    with costmodel.using(None):  # no model (a corrupt file, the simulator): declared priority
        result = autotune.tune(problem, workspace_limit=LIMIT, force=True)
    assert result.source == "heuristic" and result.winner_label == registry.candidates(problem, LIMIT)[0].label
    assert result.picked_by == "priority"
    assert "declared priority" in result.reason and not result.estimates
    assert tuner.stored(result.key) is None  # a priority pick is not stored (modes.py)


def test_memo_key_and_explain_follow_the_mode():
    problem = tiny()
    keys = {}
    for mode in autotune.TUNE_MODES:
        with autotune.mode(mode):
            keys[mode] = tuner.memo_key(problem, LIMIT)
    assert len(set(keys.values())) == 3
    autotune.tune(problem, workspace_limit=LIMIT, timer=FakeTimer(problem, MS))
    text = str(convlab.explain(problem, workspace_limit=LIMIT))
    assert "candidates (estimate, median, check):" in text
    line = next(x for x in text.splitlines() if "tt_ranked[c=4]" in x and "est" in x)
    assert "ms" in line.split("est", 1)[1] and f"{MS['tt_ranked[c=4]']:.4g} ms" in line
    assert "not run: not timed: rank" in text
    assert "pick: tuned (mode 'tune': candidates checked and timed)" in text.splitlines()
    row = next(x for x in text.splitlines() if x.strip().startswith("tt_ranked") and "prio" in x)
    assert "est " in row and "median" in row  # the plugin's row: its best estimate beside its median
    with autotune.mode("heuristic"):
        text = str(convlab.explain(tiny(n=2), workspace_limit=LIMIT))
    assert "by the cost model, nothing timed" in text and "est " in text
    assert "pick: the cost model's (mode 'heuristic': nothing timed)" in text.splitlines()
    with autotune.mode("heuristic"):  # the shape tuned above: its tuned entry answers the default mode
        again = convlab.explain(problem, workspace_limit=LIMIT)
    assert again.picked_by == "tuned" and "pick: tuned (mode 'tune'" in str(again)
    assert "note: tuning mode heuristic (the default): the cost model's pick; nothing compiled" in text
    with autotune.mode("tune"):
        text = str(convlab.explain(tiny(n=2), workspace_limit=LIMIT))
    assert f"note: tuning mode tune: each plugin's top {autotune.TOP_K} by the cost model" in text
