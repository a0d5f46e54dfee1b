"""The default mode "heuristic": a first call of a new shape runs the cost model's pick and times nothing;
tuning is asked for (``convlab.tune``), and its picks then answer the default mode; ``picked_by`` and
explain say whose pick it is.

A device is simulated for the tuner (``runtime.HAS_DEVICE``), so that a timing mode would time: the
tuner's timing entry (``measure_candidates``) is wrapped to count its calls and to time with fake
milliseconds (the candidates are the host plugins of ``tuning_fakes``)."""
from __future__ import annotations

import pytest

import convlab
from convlab import autotune, runtime
from convlab.autotune import costmodel, tuner
from convlab.runtime import settings

from test_autotune_modes import MS, Ranked
from tuning_fakes import LIMIT, FakeTimer, tiny


@pytest.fixture
def timing(monkeypatch):
    """The calls of the tuner's timing entry, on a simulated device with the ranked test model."""
    calls = []
    real = tuner.measure_candidates

    def measured(problem, key, timed, limit, timer, *args, **kw):
        calls.append([c.label for c in timed])
        return real(problem, key, timed, limit, FakeTimer(problem, MS), *args, **kw)

    monkeypatch.setattr(tuner, "measure_candidates", measured)
    monkeypatch.setattr(runtime, "HAS_DEVICE", True)
    convlab.register(Ranked)
    with costmodel.using(costmodel.Model("sm_90"), ceilings="sm_90"):
        yield calls
    convlab.unregister(Ranked.name)


def test_the_default_mode_is_heuristic():
    assert settings.DEFAULT_TUNE_MODE == "heuristic"
    assert "tuning mode heuristic (the default)" in autotune.modes.describe("heuristic")


def test_a_default_first_call_times_nothing(timing):
    autotune.set_mode(settings.DEFAULT_TUNE_MODE)
    problem = tiny()
    winner = autotune.choose(problem, LIMIT)  # what algorithm="auto" asks for at a shape's first call
    assert timing == [] and autotune.stats()["timed"] == autotune.stats()["checked"] == 0
    assert winner.label == "tt_ranked[c=4]" and autotune.stats()["heuristic"] == 1
    result = tuner.remembered(tuner.memo_key(problem, LIMIT))
    assert result.source == "heuristic" and result.picked_by == "model"
    with autotune.mode("tune"):  # the control: a timing mode reaches the timing entry
        autotune.choose(problem, LIMIT)
    assert len(timing) == 1 and autotune.stats()["timed"] > 0


def test_convlab_tune_times_then_the_default_mode_runs_the_tuned_pick(timing):
    autotune.set_mode("heuristic")
    a, b = tiny(), tiny(n=2)
    assert autotune.choose(a, LIMIT).label == "tt_ranked[c=4]" and timing == []  # the model's pick first
    previous_budget = autotune.get_budget()
    results = convlab.tune([a, b], budget=5.0, workspace_limit=LIMIT, progress=False)
    assert len(timing) == 2 and [r.source for r in results] == ["tuned", "tuned"]
    assert [r.picked_by for r in results] == ["tuned", "tuned"] and results[0].mode == "tune"
    assert autotune.get_mode() == "heuristic" and autotune.get_budget() == previous_budget
    fastest = min((label for label in MS if label in {c.label for c in results[0].candidates if c.samples}),
                  key=MS.get)
    assert results[0].winner_label == fastest
    assert autotune.choose(a, LIMIT).label == fastest  # remembered for the default mode too
    again = autotune.tune(a, workspace_limit=LIMIT)
    assert again.picked_by == "tuned" and len(timing) == 2  # the stored tuned entry answers
    text = str(convlab.explain(a, workspace_limit=LIMIT))
    assert "pick: tuned (mode 'tune': candidates checked and timed)" in text.splitlines()
    rerun = convlab.tune(a, workspace_limit=LIMIT, progress=False)  # resumes: nothing timed again
    assert rerun[0].source == "cache" and len(timing) == 2


def test_convlab_tune_bad_arguments():
    with pytest.raises(ValueError, match="mode must be one of"):
        convlab.tune(tiny(), mode="fast")
    with pytest.raises(ValueError, match="budget"):
        convlab.tune(tiny(), budget=-1)
    with pytest.raises(TypeError, match=r"problems\[1\] must be a convlab Problem"):
        convlab.tune([tiny(), "x"])
    with pytest.raises(TypeError, match="problems must be a convlab Problem or an iterable"):
        convlab.tune(3)
    assert autotune.get_mode() == "tune"  # the conftest's, untouched by the refused calls
