"""One function runs a (plugin, config) candidate: convlab.call.candidate.run_candidate. No other module of
convlab, the benchmarks or the tools calls a plugin's ``run`` (the registry's ``run``, through which a
plugin such as widen runs another inside its own ``run``, is the plugin contract's, not a caller's)."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from convlab import runtime
from convlab.call import candidate as entry
from convlab.plugin import registry
from convlab.plugin.registry import Candidate
from convlab.problem import make_problem
from convlab.reference import solve

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {ROOT / "convlab" / "call" / "candidate.py", ROOT / "convlab" / "plugin" / "registry.py"}


def _plugin_run_calls(tree: ast.AST) -> list[int]:
    """Lines of ``<x>.run(problem, config, ...)`` calls: a ``run`` attribute called with six or more
    arguments, or with ``workspace_limit=`` (a plan's or a client's ``run`` takes fewer; ``self.run``:
    a class's own, as the cuDNN baseline's; ``Base.run(self, ...)``: a subclass's run delegating to its
    base class, as a mutant's)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run" \
                and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "self") \
                and not (node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "self"):
            if len(node.args) >= 6 or any(k.arg == "workspace_limit" for k in node.keywords):
                lines.append(node.lineno)
    return lines


def test_the_finder_finds_a_plugin_run():
    assert _plugin_run_calls(ast.parse("plugin.run(p, c, a, b, None, out, workspace_limit=1)")) == [1]
    assert _plugin_run_calls(ast.parse("found.run(recs, stream); client.run(info)")) == []
    assert _plugin_run_calls(ast.parse("self.run(p, None, None, None, None, None, workspace_limit=0)")) == []
    assert _plugin_run_calls(ast.parse("parent.run(self, p, c, a, b, None, out, workspace_limit=1)")) == []


def test_no_module_but_the_entry_runs_a_plugin():
    found = [f"{p.relative_to(ROOT)}:{line}" for folder in ("convlab", "benchmarks", "tools")
             for p in sorted((ROOT / folder).rglob("*.py")) if p not in ALLOWED
             for line in _plugin_run_calls(ast.parse(p.read_text(), str(p)))]
    assert not found, "run a candidate through convlab.call.candidate.run_candidate:\n" + "\n".join(found)


def test_the_entry_allocates_out_and_runs_the_candidate():
    prob = make_problem("forward", 1, 2, 4, 4, 2, 3, 3, padding=1)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in prob.operand_shapes[:2])
    direct = registry.get("direct")
    out = entry.run_candidate(Candidate(direct, direct.configs(prob)[0]), prob, runtime.to_device(a),
                              runtime.to_device(b))
    assert tuple(out.shape) == prob.operand_shapes[2]
    assert np.allclose(runtime.to_host(out), solve(prob, a, b, None), rtol=1e-4, atol=1e-4)
