"""The autotuner (convlab.autotune) and its cache (convlab.autotune.cache), on the simulator with injected
fake timings: choices, correctness checks, cache round trips across processes, invalidation, corrupt
files, concurrent writers, key policy, deterministic mode, explain, and the benchmark's code path.

Throw-away plugins compute on the host (numpy reference) so they run fast; the registry is narrowed to
``direct`` plus these, so the tests do not depend on which other plugins exist.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import convlab
from convlab import Algorithm, Config, Verdict, autotune, make_problem, reference, runtime
from convlab.autotune import cache as tuning_cache
from convlab.plugin import registry
from convlab.testing.strategies import problems

REPO = Path(__file__).resolve().parents[2]
LIMIT = 1 << 20


def _host_solve(problem, a, b, bias, out, scale=1.0):
    """Write the float64 reference (times ``scale``) into the device array ``out``."""
    host = [None if v is None else v.copy_to_host() for v in (a, b, bias)]
    out.copy_to_device((reference.solve(problem, *host) * scale).astype(problem.dtype))


class HostExact(Algorithm):
    name, ops, priority = "tt_host", frozenset({"forward", "dgrad", "wgrad"}), 5

    def configs(self, problem):
        return [Config(v=1), Config(v=2)]

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        _host_solve(problem, a, b, bias, out)


class Wrong(HostExact):
    """Off by 1 % everywhere: highest priority and fastest, so only the check keeps it out."""

    name, priority = "tt_wrong", 10

    def configs(self, problem):
        return [Config()]

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        _host_solve(problem, a, b, bias, out, scale=1.01)


class Crashy(Wrong):
    name, priority = "tt_crash", 8

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        raise RuntimeError("launch failed on purpose")


class Picky(HostExact):
    """Only stride-1 problems with even C; its 'huge' config never fits the workspace limit."""

    name, priority = "tt_picky", 3

    def check(self, problem):
        if problem.stride != (1, 1) or problem.c % 2:
            return Verdict.no("needs stride 1 and even C")
        return Verdict.yes()

    def configs(self, problem):
        return [Config(huge=0), Config(huge=1)]

    def workspace_bytes(self, problem, config, workspace_limit):
        return (1 << 40) if config["huge"] else 0


class NonDet(HostExact):
    name, priority, deterministic = "tt_nondet", 1, False

    def configs(self, problem):
        return [Config()]


FAKE_MS = {"tt_wrong[default]": 0.01, "tt_crash[default]": 0.02, "tt_picky[huge=1]": 0.001,
           "tt_nondet[default]": 0.2, "tt_picky[huge=0]": 0.3, "tt_host[v=2]": 0.5, "tt_host[v=1]": 1.0,
           "direct[default]": 5.0}
CORRECT = {"tt_nondet[default]", "tt_picky[huge=0]", "tt_host[v=2]", "tt_host[v=1]", "direct[default]"}


class FakeTimer:
    """Fake milliseconds by label; asserts the tuner only times eligible, checked candidates."""

    def __init__(self, problem, ms=FAKE_MS):
        self.problem, self.ms, self.calls, self.bad = problem, ms, [], []

    def __call__(self, cand):  # the tuner swallows exceptions from here, so record, assert later
        if not registry.verdict(cand.plugin, self.problem, cand.config, LIMIT) or \
                cand.plugin.name in ("tt_wrong", "tt_crash"):
            self.bad.append(cand.label)
        self.calls.append(cand.label)
        return [self.ms[cand.label] * f for f in (1.0, 1.1, 0.9, 1.0, 1.05, 0.95)]


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """A private cache folder, a registry of direct + the throw-away plugins, default settings."""
    monkeypatch.setenv("CONVLAB_CACHE_DIR", str(tmp_path / "cache"))
    registry.load()
    monkeypatch.setattr(registry, "_plugins", {"direct": registry.get("direct")})
    for cls in (HostExact, Wrong, Crashy, Picky, NonDet):
        convlab.register(cls)
    policy, det = autotune.set_key_policy("exact"), autotune.set_deterministic(False)
    autotune.clear_cache(memory=True, disk=False)
    autotune.reset_stats()
    yield tmp_path / "cache"
    for cls in (HostExact, Wrong, Crashy, Picky, NonDet):
        convlab.unregister(cls.name)
    autotune.set_key_policy(policy)
    autotune.set_deterministic(det)
    autotune.clear_cache(memory=True, disk=False)


def tiny(op="forward", **kw):
    args = dict(n=1, c=2, h=4, w=4, k=2, r=3, s=3)
    args.update(kw)
    return make_problem(op, **args)


def expected_winner(problem, deterministic=False):
    labels = {c.label for c in registry.candidates(problem, LIMIT)} & CORRECT
    if deterministic:
        labels.discard("tt_nondet[default]")
    return min(labels, key=FAKE_MS.get)


# ---- choices and checks ---------------------------------------------------------------------------
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


# ---- the cache file -------------------------------------------------------------------------------
_SCRIPT = """
import json, sys
import convlab
from convlab import autotune, make_problem
from convlab.plugin import registry
registry.load()
registry._plugins = {"direct": registry.get("direct")}
problem = make_problem("forward", 1, 2, 4, 4, 2, 3, 3)
calls = []
def timer(c):
    calls.append(c.label)
    return [1.0, 1.0, 1.0]
if sys.argv[1] == "tune":
    r = autotune.tune(problem, timer=timer)
    source, label = r.source, r.winner_label
else:  # what an op does: strategy.auto -> autotune.choose, no timer
    label, source = autotune.choose(problem, convlab.get_workspace_limit()).label, None
print(json.dumps({"source": source, "winner": label, "calls": len(calls), "stats": autotune.stats(),
                  "path": str(autotune.cache_path())}))
"""


def _run(script: Path, *args: str, env_dir: Path) -> dict:
    import os

    env = dict(os.environ, CONVLAB_CACHE_DIR=str(env_dir), NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          env=env, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cache_round_trip_across_processes(tmp_path, isolated):
    script = tmp_path / "tune_once.py"
    script.write_text(_SCRIPT)
    first = _run(script, "tune", env_dir=isolated)
    assert first["source"] == "tuned" and first["calls"] == 1
    second = _run(script, "choose", env_dir=isolated)
    assert second["winner"] == "direct[default]" and second["stats"]["cache_hits"] == 1
    assert second["stats"]["timed"] == second["stats"]["priority"] == second["stats"]["tuned"] == 0
    assert Path(first["path"]).parent == isolated and json.loads(Path(first["path"]).read_text())["entries"]


_PLUGIN_SRC = '''
from convlab import Algorithm, Config, reference

SIZES = {sizes!r}


class Edited(Algorithm):
    name, ops, priority = "tt_src", frozenset({{"forward"}}), 2

    def configs(self, problem):
        return [Config(size=s) for s in SIZES]

    def workspace_bytes(self, problem, config, workspace_limit):
        return 0 if config["size"] == 1 else 1 << 40  # only size=1 is ever eligible

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        host = [None if v is None else v.copy_to_host() for v in (a, b, bias)]
        out.copy_to_device(reference.solve(problem, *host).astype(problem.dtype))
'''


def _load_plugin(path: Path, sizes, comment=""):
    path.write_text(_PLUGIN_SRC.format(sizes=sizes) + comment)
    spec = importlib.util.spec_from_file_location("tt_edited_plugin", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    convlab.unregister("tt_src")
    convlab.register(module.Edited)
    return module


def test_invalidation_on_source_configs_and_version(tmp_path, monkeypatch):
    problem = tiny()
    path = tmp_path / "tt_edited_plugin.py"
    monkeypatch.delitem(sys.modules, "tt_edited_plugin", raising=False)
    _load_plugin(path, [1, 2])
    ms = dict(FAKE_MS, **{"tt_src[size=1]": 0.05})

    def tune():
        return autotune.tune(problem, workspace_limit=LIMIT, timer=FakeTimer(problem, ms))

    assert tune().winner_label == "tt_src[size=1]"
    assert tune().source == "cache"
    time.sleep(0.01)
    _load_plugin(path, [1, 2], comment="# an edited kernel\n")  # same configs, new source
    result = tune()
    assert result.source == "tuned" and any("source or configs of tt_src changed" in n for n in result.notes)
    assert tune().source == "cache"
    _load_plugin(path, [1, 3], comment="# an edited kernel\n")  # same eligible set, other config names
    assert tune().source == "tuned" and tune().source == "cache"
    monkeypatch.setattr(convlab._version, "__version__", "99.0")
    result = tune()
    assert result.source == "tuned" and any("written by convlab" in n for n in result.notes)
    convlab.unregister("tt_src")  # the candidate set changes
    result = tune()
    assert result.source == "tuned" and any("candidate set changed" in n for n in result.notes)
    sys.modules.pop("tt_edited_plugin", None)


def test_corrupt_or_unusable_cache_file_warns_and_rebuilds(isolated):
    problem = tiny()
    path = autotune.cache_path()
    path.parent.mkdir(parents=True)
    for garbage in ('{"format": 1, "entries": {', "[1, 2]", '{"format": 99, "entries": {}}'):
        autotune.clear_cache(memory=True, disk=False)
        path.write_text(garbage)
        with pytest.warns(RuntimeWarning, match="corrupt"):
            result = autotune.tune(problem, workspace_limit=LIMIT, timer=FakeTimer(problem))
        assert result.source == "tuned"
        assert result.key in json.loads(path.read_text())["entries"]  # rebuilt
    path.unlink()
    path.mkdir()  # a folder where the file should be: unreadable and unwritable
    autotune.clear_cache(memory=True, disk=False)
    with pytest.warns(RuntimeWarning, match="cannot"):
        assert autotune.tune(problem, workspace_limit=LIMIT, timer=FakeTimer(problem)).source == "tuned"
    assert autotune.tune(problem, workspace_limit=LIMIT, timer=FakeTimer(problem)).source == "cache"


_WRITER = """
import sys, time
from pathlib import Path
from convlab.autotune.cache import TuningCache
path, tag, go = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
cache = TuningCache(path)
while not go.exists():
    time.sleep(0.005)
for i in range(40):
    cache.put(f"{tag}-{i}", {"winner": f"{tag}{i}", "pad": "x" * 2000})
"""


def test_two_processes_writing_at_once_keep_every_entry(tmp_path):
    script, go = tmp_path / "writer.py", tmp_path / "go"
    script.write_text(_WRITER)
    path = tmp_path / "shared" / "autotune-test-sm00.json"
    procs = [subprocess.Popen([sys.executable, str(script), str(path), tag, str(go)], cwd=REPO,
                              stderr=subprocess.PIPE, text=True) for tag in ("a", "b")]
    time.sleep(1.5)  # both imported and waiting
    go.touch()
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    entries = json.loads(path.read_text())["entries"]
    assert sorted(entries) == sorted(f"{t}-{i}" for t in "ab" for i in range(40))
    assert not list(path.parent.glob("*.tmp"))  # temp files renamed, none left behind


# ---- keys and settings -----------------------------------------------------------------------------
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


# ---- the benchmark's code path (simulator: wall-clock timer, one tiny shape) ---------------------------
def test_benchmark_code_path(tmp_path):
    import os

    suite = tmp_path / "one.json"
    suite.write_text(json.dumps({"name": "one", "problems": [{"x": [1, 2, 3, 3], "w": [2, 2, 2, 2]}]}))
    out = tmp_path / "bench.json"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "autotune_bench.py"), "--out", str(out),
                           "--suite", str(suite), "--ops", "forward,wgrad", "--repeat", "2", "--plugins",
                           "direct", "--cache-dir", str(tmp_path / "c")], capture_output=True, text=True,
                          env=env, timeout=180, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["device"] == "CUDA simulator" and data["versions"]["numba"]
    assert [s["op"] for s in data["shapes"]] == ["forward", "wgrad"]
    for shape in data["shapes"]:
        assert shape["regret"] == 0.0 and shape["warm"]["pick"] == "direct[default]"
        assert shape["exhaustive_ms"]["direct[default]"] > 0 and shape["warm"]["tuning_s"] > 0
    second = data["second_process"]
    assert second["retimed"] == 0 and second["cache_hits"] == 2 and second["same_picks_as_first_process"]


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
