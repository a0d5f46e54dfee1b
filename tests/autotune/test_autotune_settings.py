"""The autotuner's keys and settings: the exact and pow2 key policies (a pow2 neighbour answered from the
cache only where the stored winner applies to it), deterministic mode, pretune, clearing the cache and
bad input.
"""
from __future__ import annotations

import pytest

import convlab
from convlab import Config, autotune, make_problem
from convlab.autotune import cache as tuning_cache

from tuning_fakes import FAKE_MS, LIMIT, FakeTimer, HostExact, tiny


def test_key_policy():
    key = tuning_cache.tuning_key
    a, b = tiny(n=3, h=5, w=7), tiny(n=4, h=5, w=7)  # GEMM M = 45 and 60: neither divisible by 16
    assert key(a, "exact") != key(b, "exact") != key(tiny(n=3, h=6, w=8), "exact")
    assert key(a, "pow2") == key(b, "pow2") == key(tiny(n=3, h=6, w=8), "pow2")
    assert "|n4|" in key(a, "pow2") and "|h8|" in key(a, "pow2") and "|q8|" in key(a, "pow2")
    assert key(a, "pow2") != key(tiny(n=4, h=6, w=8), "pow2")  # M = 96: the div16 flag differs
    assert key(a, "pow2") != key(tiny(n=3, h=5, w=7, c=4), "pow2")  # channels stay exact
    assert key(a, "pow2") != key(tiny(n=3, h=5, w=7, stride=2), "pow2")
    assert key(a, "pow2") != key(a, "pow2", deterministic=True)
    assert "div16=M0N1K1" in key(make_problem("forward", 1, 16, 3, 3, 16, 1, 1), "exact")
    with pytest.raises(ValueError, match="policy"):
        autotune.set_key_policy("round")
    assert autotune.set_key_policy("pow2") == "exact" and autotune.get_key_policy() == "pow2"
    autotune.tune(a, workspace_limit=LIMIT, timer=FakeTimer(a))
    timer = FakeTimer(b)
    assert autotune.tune(b, workspace_limit=LIMIT, timer=timer).source == "cache" and not timer.calls
    autotune.set_key_policy("exact")
    assert autotune.tune(b, workspace_limit=LIMIT, timer=timer).source == "tuned" and timer.calls


class Sized(HostExact):
    """Offers configs that depend on the shape (as im2col's tile choice does); ``wide`` needs W >= 8."""

    name, priority = "tt_sized", 4

    def configs(self, problem):
        return [Config(tile=min(problem.w, 9))] + ([Config(wide=1)] if problem.w >= 8 else [])


def test_pow2_key_shared_when_configs_depend_on_the_shape():
    """A neighbour under the pow2 policy is answered from the entry tuned on another shape, judged by
    that shape's candidates and fingerprints; it is re-tuned when the stored winner does not apply."""
    convlab.register(Sized)
    try:
        autotune.set_key_policy("pow2")
        a, b = tiny(n=3, h=5, w=8), tiny(n=3, h=5, w=7)  # same pow2 key, different tt_sized configs
        assert tuning_cache.tuning_key(a, "pow2") == tuning_cache.tuning_key(b, "pow2")
        ms = dict(FAKE_MS, **{"tt_sized[tile=8]": 0.05, "tt_sized[tile=7]": 0.05, "tt_sized[wide=1]": 0.04})
        assert autotune.tune(a, workspace_limit=LIMIT, timer=FakeTimer(a, ms)).winner_label == \
            "tt_sized[wide=1]"
        timer = FakeTimer(b, ms)
        again = autotune.tune(b, workspace_limit=LIMIT, timer=timer)  # wide=1 does not apply to W = 7
        assert again.source == "tuned" and timer.calls and again.winner_label == "tt_sized[tile=7]"
        assert any("not eligible for this shape" in n for n in again.notes), again.notes
        timer = FakeTimer(a, ms)  # the entry now holds b's choice, tile=7, which a does not offer
        assert autotune.tune(a, workspace_limit=LIMIT, timer=timer).source == "tuned"
        ms["tt_host[v=2]"] = 0.001  # a winner every neighbour can run
        autotune.tune(a, workspace_limit=LIMIT, force=True, timer=FakeTimer(a, ms))
        timer = FakeTimer(b, ms)
        shared = autotune.tune(b, workspace_limit=LIMIT, timer=timer)
        assert shared.source == "cache" and not timer.calls and shared.winner_label == "tt_host[v=2]"
        assert any("shared: tuned on [3, 2, 5, 8]" in n for n in shared.notes), shared.notes
    finally:
        convlab.unregister(Sized.name)


def test_deterministic_setting():
    with pytest.raises(TypeError, match="bool"):
        autotune.set_deterministic("yes")
    problem = tiny()
    ms = dict(FAKE_MS, **{"tt_nondet[default]": 0.0001})
    assert autotune.tune(problem, workspace_limit=LIMIT, timer=FakeTimer(problem, ms)).winner_label \
        == "tt_nondet[default]"
    assert autotune.set_deterministic(True) is False and autotune.get_deterministic()
    result = autotune.tune(problem, workspace_limit=LIMIT, timer=FakeTimer(problem, ms))
    assert result.source == "tuned" and result.key.endswith("|det")
    assert "tt_nondet[default]" not in result.medians()
    assert autotune.choose(problem, LIMIT).plugin.deterministic
    assert "excluded: not deterministic" in str(convlab.explain(problem, workspace_limit=LIMIT))


def test_pretune_clear_cache_and_bad_input(isolated):
    probs = [tiny(), tiny("wgrad")]
    results = autotune.pretune(probs, workspace_limit=LIMIT, timer=FakeTimer(probs[0]))
    assert [r.source for r in results] == ["tuned", "tuned"]
    assert autotune.cache_path().parent == isolated and autotune.cache_path().exists()
    autotune.clear_cache()
    assert not autotune.cache_path().exists()
    again = autotune.tune(probs[0], workspace_limit=LIMIT, timer=FakeTimer(probs[0]))
    assert again.source == "tuned" and autotune.stats()["tuned"] == 3
    with pytest.raises(TypeError, match="problems\\[1\\]"):
        autotune.pretune([probs[0], "forward"])
    with pytest.raises(TypeError, match="problem"):
        autotune.tune("forward")
    with pytest.raises(ValueError, match="workspace_limit"):
        autotune.tune(probs[0], workspace_limit=-1)
