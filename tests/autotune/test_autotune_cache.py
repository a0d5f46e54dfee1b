"""The autotuner's cache file (convlab.autotune.cache): round trips across processes, invalidation when a
plugin's source, configs or convlab's version change, corrupt or unusable files, two processes writing
at once, and the benchmark's code path (benchmarks/autotune_bench.py: a second process answers from
the cache).
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import convlab
from convlab import autotune

from tuning_fakes import FAKE_MS, LIMIT, REPO, FakeTimer, tiny


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

    env = dict(os.environ, CONVLAB_CACHE_DIR=str(env_dir), NUMBA_ENABLE_CUDASIM="1", CONVLAB_TUNE_MODE="tune")
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
    from convlab.autotune import cache_entries
    monkeypatch.setattr(cache_entries, "TIMED", "some other way")  # entries timed otherwise are tuned again
    result = tune()
    assert result.source == "tuned" and any("timed by plan replay, now some other way" in n
                                            for n in result.notes)
    assert tune().source == "cache"
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
