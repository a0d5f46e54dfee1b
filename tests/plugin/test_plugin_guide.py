"""docs/ADDING_A_PLUGIN.md and docs/plugin_template: the guide's worked example is registered, passes the
conformance suite and can be forced; the template is a complete package that passes it; the guide names
only files in the repository.
"""
from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata

import numpy as np

import convlab
from convlab import autotune, measure, reference
from convlab.plugin import registry
from convlab.testing import check_plugin

from plugin_pkg_meta import REPO


def guide_example() -> str:
    """The plugin source that docs/ADDING_A_PLUGIN.md presents as ``algorithms/depthwise_example.py``."""
    text = (REPO / "docs" / "ADDING_A_PLUGIN.md").read_text()
    block = text.split("<!-- guide-example -->", 1)[1].split("```python\n", 1)[1]
    return block.split("\n```", 1)[0]


def test_guide_example_plugin_is_registered_tested_and_forced(monkeypatch, tmp_path):
    monkeypatch.setenv("CONVLAB_CACHE_DIR", str(tmp_path / "cache"))
    module = type(sys)("depthwise_example_from_guide")
    exec(compile(guide_example(), "docs/ADDING_A_PLUGIN.md", "exec"), module.__dict__)
    try:
        assert "depthwise_example" in {p.name for p in convlab.plugins("forward")}
        report = check_plugin("depthwise_example")
        assert all(v.startswith("ok (") for v in report.values())
        assert len(report) == len(convlab.testing.applicable_checks("depthwise_example"))
        dense = convlab.make_problem("forward", 1, 4, 5, 5, 4, 3, 3)
        row = {r.name: r for r in convlab.explain(dense).rows}["depthwise_example"]
        assert row.reason == "needs groups == C == K (depthwise), got groups=1, C=4, K=4"
        depthwise = convlab.make_problem("forward", 1, 4, 5, 5, 4, 3, 3, padding=1, groups=4)
        x, w, _ = measure.random_operands(depthwise)
        y = convlab.conv2d(x, w, padding=1, groups=4, algorithm=("depthwise_example", "threads=256"))
        err = measure.rel_error(y, reference.solve(depthwise, x, w))
        assert err <= measure.tolerance(depthwise, float(np.finfo(np.float32).eps))
    finally:
        convlab.unregister("depthwise_example")
        autotune.clear_cache(memory=True, disk=False)


# ---- the plugin template of docs/plugin_template ----------------------------------------------------------
TEMPLATE = REPO / "docs" / "plugin_template"


def test_plugin_template_is_a_complete_package_that_passes_conformance(monkeypatch, tmp_path):
    monkeypatch.setenv("CONVLAB_CACHE_DIR", str(tmp_path / "cache"))
    meta = tomllib.loads((TEMPLATE / "pyproject.toml").read_text())
    (name, target), = meta["project"]["entry-points"][registry.ENTRY_POINT_GROUP].items()
    assert meta["project"]["dependencies"] == ["convlab"] and "do not install" not in \
        (TEMPLATE / "pyproject.toml").read_text()
    monkeypatch.syspath_prepend(str(TEMPLATE / "src"))
    fake = [metadata.EntryPoint(name, target, registry.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(registry.metadata, "entry_points",
                        lambda **kw: [ep for ep in fake if kw.get("group") in (None, ep.group)])
    try:
        registry.load(reload=True)
        plugin = convlab.get_plugin(name)
        assert f"{type(plugin).__module__}:{type(plugin).__name__}" == target
        report = check_plugin(name)
        assert all(v.startswith("ok (") for v in report.values())
        assert len(report) == len(convlab.testing.applicable_checks(plugin))
        assert "docs/plugin_template/" in (REPO / "docs" / "ADDING_A_PLUGIN.md").read_text()
    finally:
        convlab.unregister(name)
        for module in [m for m in sys.modules if m.startswith("my_convlab_plugins")]:
            del sys.modules[module]
        autotune.clear_cache(memory=True, disk=False)


def test_the_guide_needs_nothing_outside_the_repository():
    root = REPO
    guide = (root / "docs" / "ADDING_A_PLUGIN.md").read_text()
    assert "shared/" not in guide and "NUMBA_NOTES" not in guide
    paths = set(re.findall(r"`((?:convlab|algorithms|tests|docs|notebooks)/[\w/.]+)`", guide))
    for path in paths - {"algorithms/depthwise_example.py"}:  # the file the guide has you write
        assert (root / path).exists() or list(root.glob(path + ".*")), \
            f"the guide names {path}, which is not in the repository"
    assert "sample_problems" in guide and "replace=True" in guide
