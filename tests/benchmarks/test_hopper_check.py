"""tools/hopper_check.py without a GPU: ``--list``, the probe cases on the simulator's stand-ins, every
conv case names a problem the plugin's predicate can judge, and the bookkeeping a blind call relies on
(each case recorded whatever happens, a crash as an error, a timing only after its correct check,
``--resume`` skipping what is done, the summary of it all)."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from convlab import runtime

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "hopper_check.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("hopper_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_list_runs_without_a_gpu():
    done = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "probe/im2col" in done.stdout and "time/burn/16ch_512x512_3x3/wgrad/float16" in done.stdout


@pytest.mark.skipif(not runtime.SIMULATOR, reason="the probes on the stand-ins")
def test_probe_cases_pass_on_the_stand_ins(tool):
    for cid, phase, spec in tool.cases():
        if cid.startswith("probe/"):
            assert tool.run_case(cid, phase, spec)["status"] == "ok", cid


def test_every_conv_case_is_a_problem_the_predicate_judges(tool):
    from convlab.plugin import registry
    from convlab.runtime.targets import get

    plugin = registry.get("tma_wgmma")
    for _, _, spec in tool.cases():
        if spec["kind"] == "conv":
            pr = tool._problem(spec)
            assert pr.dtype == spec["dtype"] and pr.op == spec["op"]
            registry.verdict(plugin, pr, target=get("sm_90"))  # no exception


def test_cases_are_recorded_whatever_happens_and_resumed(tool, tmp_path, monkeypatch):
    todo = [("a", "check", {"kind": "conv"}), ("b", "check", {"kind": "conv"}),
            ("t/a", "time", {"kind": "conv", "check": "a"}), ("t/b", "time", {"kind": "conv", "check": "b"}),
            ("t/c", "time", {"kind": "conv", "check": "c"})]
    ran = []

    def fake(cid, phase, spec):
        ran.append(cid)
        if cid == "b":
            raise RuntimeError("boom")
        return {"status": "ok"}
    monkeypatch.setattr(tool, "run_case", fake)
    tool.work(tmp_path, todo, float("inf"), "one")
    got = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "cases").glob("*.json")}
    assert got["a"]["status"] == "ok" and got["b"]["status"] == "error" and "boom" in got["b"]["error"]
    assert got["t__a"]["status"] == "ok" and got["t__b"]["status"] == "skipped" and "t__c" not in got
    assert ran == ["a", "b", "t/a"]
    ran.clear()
    tool.work(tmp_path, todo, float("inf"), "two")  # a resumed call runs nothing done
    assert ran == []
    tool.summarise(tmp_path, True)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["incomplete"] and len(summary["cases"]) == 4
    assert "| b | error |" in (tmp_path / "README.md").read_text()
