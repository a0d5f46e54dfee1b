"""Plugins from another package: discovery through the ``convlab.algorithms`` entry-point group, and
isolation of broken plugins.

The package is tests/plugin/plugin_pkg (``convlab-test-plugins``): one working 1x1 plugin
(``example_pointwise``) and three broken on purpose (a raising predicate, a raising kernel, a module that
fails to import). Two ways in:

- for real: the package is built into a wheel and pip-installed into a temporary folder, and a fresh
  interpreter with that folder on its path runs the conformance suite (tests/plugin/test_conformance.py, which
  parametrises over every registered plugin) and a probe of the registry;
- simulated: ``importlib.metadata.entry_points``, as ``convlab.plugin.registry`` calls it, is monkeypatched to
  return the package's entry points, for fast in-process checks of each failure mode.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
import zipfile
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

import convlab
from convlab import autotune, measure, reference, runtime
from convlab.plugin import registry
from convlab.testing import check_plugin

REPO = Path(__file__).resolve().parents[2]
PKG = Path(__file__).resolve().parent / "plugin_pkg"
PYPROJECT = tomllib.loads((PKG / "pyproject.toml").read_text())
ENTRY_POINTS = PYPROJECT["project"]["entry-points"][registry.ENTRY_POINT_GROUP]
EXAMPLES = ("example_pointwise", "example_faulty_predicate", "example_faulty_kernel")
ONE_BY_ONE = convlab.make_problem("forward", 1, 4, 3, 3, 4, 1, 1, bias=True)


# ---- installing the package for real ------------------------------------------------------------
def build_wheel(src: Path, dest: Path) -> Path:
    """A wheel of the package in ``src``, written from its pyproject.toml with the standard library only
    (the test needs no build backend; ``pip install tests/plugin/plugin_pkg`` builds the same thing)."""
    project = PYPROJECT["project"]
    dist = project["name"].replace("-", "_")
    info = f"{dist}-{project['version']}.dist-info"
    files = {str(p.relative_to(src)): p.read_bytes()
             for package in PYPROJECT["tool"]["setuptools"]["packages"]
             for p in sorted((src / package).glob("*.py"))}
    files[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {project['name']}\n"
                                 f"Version: {project['version']}\n").encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: convlab-tests\nRoot-Is-Purelib: true\n" \
                             b"Tag: py3-none-any\n"
    files[f"{info}/entry_points.txt"] = (f"[{registry.ENTRY_POINT_GROUP}]\n" + "".join(
        f"{name} = {value}\n" for name, value in ENTRY_POINTS.items())).encode()
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = ("\n".join(record + [f"{info}/RECORD,,"]) + "\n").encode()
    wheel = dest / f"{dist}-{project['version']}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return wheel


PROBE = r"""
import json, warnings
import numpy as np
import convlab
from convlab import measure, reference
from convlab.plugin import registry
problem = convlab.make_problem("forward", 1, 4, 3, 3, 4, 1, 1, bias=True)
found = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    found["plugins"] = [p.name for p in convlab.plugins()]
found["warnings"] = [str(w.message) for w in caught]
found["load_errors"] = convlab.load_errors()
found["explain"] = {r.name: [r.eligible, r.reason] for r in convlab.explain(problem).rows}
found["candidates"] = sorted({c.plugin.name for c in registry.candidates(problem)})
x, w, b = measure.random_operands(problem)
y = convlab.conv2d(x, w, b, algorithm="example_pointwise")
found["rel_error"] = measure.rel_error(y, reference.solve(problem, x, w, b))
found["tolerance"] = measure.tolerance(problem, float(np.finfo(np.float32).eps))
print("PROBE" + json.dumps(found))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """Environment of a fresh interpreter that has the plugin package pip-installed."""
    tmp = tmp_path_factory.mktemp("plugin_env")
    wheel = build_wheel(PKG, tmp)
    site = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--disable-pip-version-check", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, text=True, timeout=120)
    assert (site / "convlab_test_plugins" / "pointwise.py").is_file()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
               CONVLAB_CACHE_DIR=str(tmp / "cache"))
    return env


def test_installed_package_is_registered_and_eligible(installed):
    done = subprocess.run([sys.executable, "-c", PROBE], env=installed, capture_output=True, text=True,
                          timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.split("PROBE", 1)[1])
    for name in EXAMPLES + ("direct",):
        assert name in found["plugins"]
    # the module that fails to import: reported by entry-point name, with a warning, and excluded
    (where, error), = [(k, v) for k, v in found["load_errors"].items() if "example_broken_import" in k]
    assert "ModuleNotFoundError" in error and "convlab_test_plugins_missing_dependency" in error
    assert any("example_broken_import" in w for w in found["warnings"])
    assert found["explain"]["example_pointwise"] == [True, ""]
    assert found["explain"]["example_faulty_predicate"] == [
        False, "predicate raised RuntimeError: predicate exploded"]
    assert {"example_pointwise", "direct"} <= set(found["candidates"])
    assert "example_faulty_predicate" not in found["candidates"]
    assert found["rel_error"] <= found["tolerance"]


def test_installed_package_goes_through_the_conformance_suite(installed, tmp_path):
    """tests/plugin/test_conformance.py picks the installed plugins up: the good one passes every check, the
    broken ones fail under their own names, and the failed import fails the load check."""
    junit = tmp_path / "junit.xml"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         str(REPO / "tests" / "plugin" / "test_conformance.py"), "-k", "example_ or every_builtin_plugin_loaded",
         f"--junitxml={junit}"], env=installed, capture_output=True, text=True, timeout=540, cwd=REPO)
    assert junit.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    outcome = {}
    for case in ET.parse(junit).iter("testcase"):
        failure = case.find("failure") if case.find("failure") is not None else case.find("error")
        if failure is not None:
            outcome[case.get("name")] = "failed: " + failure.get("message", "")
        else:
            outcome[case.get("name")] = "skipped" if case.find("skipped") is not None else "passed"
    good = {k: v for k, v in outcome.items() if "example_pointwise-forward-" in k}
    assert len(good) == len(convlab.testing.CHECKS), outcome
    assert set(good.values()) == {"passed"}, good
    for name in ("example_faulty_kernel", "example_faulty_predicate"):
        assert any(name in k and v != "passed" for k, v in outcome.items()), (name, outcome)
    assert "kernel exploded" in outcome["test_conformance[example_faulty_kernel-forward-matches_reference]"]
    assert "example_broken_import" in outcome["test_every_builtin_plugin_loaded"]
    assert not any(k.startswith("test_conformance[direct") for k in outcome)


def test_installed_plugin_is_checked_and_benchmarked_by_the_cli(installed, tmp_path):
    cli = [sys.executable, "-c", "import sys; from convlab.cli import main; sys.exit(main())"]
    check = subprocess.run(cli + ["check", "example_pointwise", "--max-examples", "3"], env=installed,
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "example_pointwise: 6/6 conformance checks passed" in check.stdout
    bench = subprocess.run(cli + ["bench", "--x", "1,4,3,3", "--w", "4,4,1,1", "--bias", "--ops", "forward",
                                  "--plugins", "example_pointwise,direct", "--all-configs", "--no-torch",
                                  "--quiet", "--out", str(tmp_path / "results"), "--name", "pointwise"],
                           env=installed, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert bench.returncode == 0, bench.stdout + bench.stderr
    rows = json.loads((tmp_path / "results" / "pointwise.json").read_text())["results"][0]["candidates"]
    checked = {(r["plugin"], r["config"]): r["status"] for r in rows}
    assert checked[("example_pointwise", "threads=128")] == checked[("example_pointwise", "threads=32")] \
        == checked[("direct", "default")] == "ok"


# ---- simulated entry points: each failure mode, in process ---------------------------------------
@pytest.fixture
def example_plugins(monkeypatch, tmp_path):
    """The package's entry points served by a monkeypatched ``importlib.metadata.entry_points``."""
    errors_before = set(registry.load_errors())  # the real plugins, loaded before the patch
    monkeypatch.syspath_prepend(str(PKG))
    monkeypatch.setenv("CONVLAB_CACHE_DIR", str(tmp_path / "cache"))
    fake = [metadata.EntryPoint(name, value, registry.ENTRY_POINT_GROUP)
            for name, value in ENTRY_POINTS.items()]

    def entry_points(**kw):
        return [ep for ep in fake if kw.get("group") in (None, ep.group)]

    monkeypatch.setattr(registry.metadata, "entry_points", entry_points)
    try:
        with pytest.warns(RuntimeWarning, match="example_broken_import"):
            registry.load(reload=True)
        yield
    finally:
        for name in EXAMPLES:
            convlab.unregister(name)
        for key in set(registry._load_errors) - errors_before:
            del registry._load_errors[key]
        for module in [m for m in sys.modules if m.startswith("convlab_test_plugins")]:
            del sys.modules[module]
        autotune.clear_cache(memory=True, disk=False)


def test_entry_points_register_and_a_failed_import_is_reported(example_plugins):
    names = {p.name for p in convlab.plugins()}
    assert set(EXAMPLES) | {"direct"} <= names
    errors = {k: v for k, v in convlab.load_errors().items() if "example_broken_import" in k}
    assert len(errors) == 1 and "ModuleNotFoundError" in next(iter(errors.values()))
    check_plugin("example_pointwise", max_examples=2)


def test_raising_predicate_is_reported_by_name_and_excluded(example_plugins):
    rows = {r.name: r for r in convlab.explain(ONE_BY_ONE).rows}
    assert not rows["example_faulty_predicate"].eligible
    assert rows["example_faulty_predicate"].reason == "predicate raised RuntimeError: predicate exploded"
    assert rows["example_pointwise"].eligible and rows["direct"].eligible
    assert "example_faulty_predicate" not in {c.plugin.name for c in registry.candidates(ONE_BY_ONE)}
    x, w, b = measure.random_operands(ONE_BY_ONE)
    with pytest.raises(ValueError, match="example_faulty_predicate.*predicate exploded"):
        convlab.conv2d(x, w, b, algorithm="example_faulty_predicate")
    with pytest.raises(AssertionError, match="example_faulty_predicate"):
        check_plugin("example_faulty_predicate", checks=["check_declines_with_reason"], max_examples=3)


def test_raising_kernel_is_reported_by_name_and_not_chosen_by_tuning(example_plugins):
    result = autotune.tune(ONE_BY_ONE, timer=lambda candidate: [1.0])
    rows = {r.plugin: r for r in result.candidates}
    assert rows["example_faulty_kernel"].verdict == "error: RuntimeError: kernel exploded"
    assert rows["example_pointwise"].status == "ok"
    assert result.winner is not None and result.winner.plugin.name != "example_faulty_kernel"
    x, w, b = measure.random_operands(ONE_BY_ONE)
    y = convlab.conv2d(x, w, b)  # "auto" answers from the tuning result just stored
    err = measure.rel_error(y, reference.solve(ONE_BY_ONE, x, w, b))
    assert err <= measure.tolerance(ONE_BY_ONE, float(np.finfo(np.float32).eps))
    with pytest.raises(AssertionError, match="example_faulty_kernel.*kernel exploded"):
        check_plugin("example_faulty_kernel", checks=["check_matches_reference"], max_examples=2)


class _UntimedRuntime:
    """convlab.runtime as the autotuner sees it on the simulator: nothing is timed, so "auto" picks by
    declared priority (on a GPU too, where tuning would check the raising kernel and never pick it)."""

    SIMULATOR = True

    def __getattr__(self, name):
        return getattr(runtime, name)


def test_raising_kernel_does_not_break_auto(example_plugins, monkeypatch):
    monkeypatch.setattr(autotune.tuner, "runtime", _UntimedRuntime())  # "auto" first picks the faulty kernel
    x, w, b = measure.random_operands(ONE_BY_ONE)
    try:
        with pytest.warns(RuntimeWarning, match="example_faulty_kernel"):
            y = convlab.conv2d(x, w, b)  # "auto" must step past the raising kernel
        err = measure.rel_error(y, reference.solve(ONE_BY_ONE, x, w, b))
        assert err <= measure.tolerance(ONE_BY_ONE, float(np.finfo(np.float32).eps))
        assert "example_faulty_kernel" in registry.broken_plugins()
        assert "kernel raised" in registry.verdict(registry.get("example_faulty_kernel"), ONE_BY_ONE).reason
        with pytest.raises(RuntimeError, match="exploded"):  # forcing it still shows its error
            registry.unmark_broken("example_faulty_kernel")
            convlab.conv2d(x, w, b, algorithm="example_faulty_kernel")
    finally:
        registry.unmark_broken()


# ---- the guide's worked example ------------------------------------------------------------------
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
        assert all(v.startswith("ok (") for v in report.values()) and len(report) == len(convlab.testing.CHECKS)
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
        assert len(report) == len(convlab.testing.CHECKS)
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
