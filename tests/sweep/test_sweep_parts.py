"""The parts of convlab.sweep that need no cluster: tasks, dtypes, the journal, the cache merge, the
command-line checks."""
from __future__ import annotations

import json
import sys

import pytest

from convlab.autotune.cache import TuningCache
from convlab.bench.suite import load_suite
from convlab.cli import parser as cli
from convlab.sweep import expand, parse_dtypes
from convlab.runtime import settings
from convlab.sweep.core import applied, client_settings, compile_group, compile_keys, next_index, spread
from convlab.sweep.tune import _shipped
from convlab.sweep.bench import Journal


def test_expand_limits_shapes_and_crosses_dtypes_and_precision():
    tiny = load_suite("tiny")
    tasks = expand([tiny], ("forward", "wgrad"), ("float16", "float32+high", "float32"), limit=2)
    assert len(tasks) == 2 * 2 * 3 and len({t.id for t in tasks}) == len(tasks)
    assert [(t.problem.dtype, t.precision, t.dtype) for t in tasks[:3]] == [
        ("float16", "highest", "float16"), ("float32", "high", "float32+high"), ("float32", "highest", "float32")]
    assert {t.entry.label for t in tasks} == {e.label for e in tiny.entries[:2]}
    assert len(expand([tiny])) == len(tiny.problems())


def test_parse_dtypes_names_the_allowed_tokens():
    assert parse_dtypes("float32, bfloat16") == ("float32", "bfloat16")
    with pytest.raises(ValueError, match="float32\\+high"):
        parse_dtypes("float8")


def test_journal_keeps_finished_results_and_drops_other_settings_and_torn_lines(tmp_path):
    journal = Journal(tmp_path / "j.jsonl", {"repeat": 3})
    journal.start({})
    journal.append("a", {"label": "x"})
    with open(journal.path, "a") as handle:
        handle.write('{"task": "b", "res')
    assert journal.load() == {"a": {"label": "x"}}
    assert Journal(tmp_path / "j.jsonl", {"repeat": 4}).load() == {}


def test_cache_merge_keeps_the_later_entry_and_writes_nothing_when_nothing_is_new(tmp_path):
    path = tmp_path / "autotune-x-sm90.json"
    cache = TuningCache(path)
    cache.put("k1", {"winner": "a"})
    mine = cache.get("k1")
    assert cache.merge({"k1": dict(mine, winner="old", written_at=mine["written_at"] - 1)}) == 0
    assert cache.merge({"k1": mine}) == 0
    assert cache.merge({"k2": {"winner": "b", "written_at": 5.0}, "k1": dict(mine, winner="new",
                                                                             written_at=mine["written_at"] + 1)}) == 2
    entries = json.loads(path.read_text())["entries"]
    assert entries["k1"]["winner"] == "new" and entries["k2"]["winner"] == "b"
    assert TuningCache(path).get("k2")["winner"] == "b"


def test_cli_sweep_options_are_checked(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["tune", "--workers", "0"])
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["tune", "--workers", "2", "--scheduler", "tcp://x:1"])
    assert cli.main(["bench", "--suite", "tiny", "--dtypes", "float16"]) == 2
    assert "sweep options" in capsys.readouterr().err


def test_import_convlab_does_not_import_dask():
    import subprocess

    code = "import sys, convlab, convlab.cli.parser; print(any(m.split('.')[0] in ('dask', 'distributed') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_spread_runs_float32_first_and_side_by_side_tasks_compile_different_kernels():
    tokens = ("float16", "float32+high", "float32", "bfloat16")
    tasks = expand([load_suite("tiny")], ("forward", "dgrad", "wgrad"), tokens, 2)
    order = spread(tasks)
    assert sorted(t.id for t in order) == sorted(t.id for t in tasks)  # the same tasks, each once
    groups = sorted({compile_group(t) for t in tasks})
    assert len(groups) == 12 and [compile_group(t) for t in order[:12]] == groups  # one of each group first
    assert [t.dtype for t in order[:3]] == ["float32"] * 3 and [t.dtype for t in order[3:6]] == ["float32+high"] * 3
    assert all(compile_group(a) != compile_group(b) for a, b in zip(order, order[1:]))  # neighbours differ
    for t in order:  # a layer's float32 task comes before its other dtypes of the same op
        if t.dtype != "float32":
            first = next(i for i, u in enumerate(order) if u.entry is t.entry and u.problem.op == t.problem.op)
            assert order[first].dtype == "float32" and first < order.index(t)
    for g in groups:  # a group keeps its own (layer) order
        assert [t.id for t in order if compile_group(t) == g] == [t.id for t in tasks if compile_group(t) == g]
    assert spread([]) == []


def test_next_task_skips_what_a_running_task_compiles_and_waits_when_all_would():
    tasks = expand([load_suite("tiny")], ("forward", "dgrad"), ("float32", "float32+high"), 2)
    t = {(x.entry.label, x.problem.op, x.dtype): x for x in tasks}
    (l1, l2), f32, high = list(dict.fromkeys(x.entry.label for x in tasks)), "float32", "float32+high"
    shared = lambda a, b: compile_keys(t[a]) & compile_keys(t[b])  # noqa: E731
    assert shared((l1, "forward", f32), (l1, "forward", high))  # the same layer's float32 kernels
    assert shared((l1, "forward", high), (l2, "forward", high))  # the same token's kernels
    assert not shared((l1, "forward", f32), (l1, "dgrad", f32))  # another op
    assert not shared((l1, "forward", f32), (l2, "forward", high))
    running = [t[l1, "forward", f32]]
    pending = [t[l1, "forward", high], t[l2, "forward", f32], t[l2, "dgrad", high]]
    assert next_index(pending, running) == 2  # the first that shares nothing
    assert next_index(pending[:2], running) is None  # all would: wait for it
    assert next_index(pending[:2], []) == 0 and next_index([], []) is None  # nothing runs: go on
    warm = {("dtype", f32, "forward")}  # a float32 forward task has finished: its kernels are on disk
    assert next_index(pending[:2], running, warm) == 1


def test_workers_apply_the_clients_tuning_mode_budget_and_depth_and_restore_theirs():
    before = (settings.get_tune_mode(), settings.get_tune_budget(), settings.get_tune_configs())
    settings.set_tune_mode("exhaustive"), settings.set_tune_budget(3.0), settings.set_tune_configs(2)
    try:
        spec = client_settings(None, None)
    finally:
        settings.set_tune_mode(before[0]), settings.set_tune_budget(before[1]), settings.set_tune_configs(before[2])
    assert (spec["tune_mode"], spec["tune_budget"], spec["tune_configs"]) == ("exhaustive", 3.0, 2)
    with applied(spec, "highest"):
        assert (settings.get_tune_mode(), settings.get_tune_budget(), settings.get_tune_configs()) == \
            ("exhaustive", 3.0, 2)
    assert (settings.get_tune_mode(), settings.get_tune_budget(), settings.get_tune_configs()) == before


def test_only_entries_decided_now_in_the_clients_mode_are_shipped():
    entry = {"winner": "direct[]", "mode": "tune"}
    assert _shipped(entry, "tuned", "tune") is entry
    assert _shipped({**entry, "mode": "heuristic"}, "heuristic", "heuristic") is not None
    assert _shipped({**entry, "mode": "exhaustive"}, "tuned", "tune") is None  # another mode's entry
    assert _shipped(entry, "cache", "tune") is None and _shipped(entry, "priority", "tune") is None
    assert _shipped(None, "tuned", "tune") is None
