"""Plugins from another package, installed for real: tests/plugin/plugin_pkg (``convlab-test-plugins``:
one working 1x1 plugin, ``example_pointwise``, and three broken on purpose: a raising predicate, a raising
kernel, a module that fails to import) is built into a wheel and pip-installed into a temporary folder,
and a fresh interpreter with that folder on its path runs a probe of the registry, the conformance suite
(tests/plugin/test_conformance.py, which parametrises over every registered plugin) and the command line.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

import convlab
from convlab.plugin import registry

from plugin_pkg_meta import ENTRY_POINTS, EXAMPLES, PKG, PYPROJECT, REPO


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
    applicable = [n for n in convlab.testing.CHECKS if n != "check_channels_last_operands"]  # NCHW plugin
    assert len(good) == len(applicable), outcome
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
    assert "example_pointwise: 7/7 conformance checks passed" in check.stdout
    bench = subprocess.run(cli + ["bench", "--x", "1,4,3,3", "--w", "4,4,1,1", "--bias", "--ops", "forward",
                                  "--plugins", "example_pointwise,direct", "--all-configs", "--no-torch",
                                  "--quiet", "--out", str(tmp_path / "results"), "--name", "pointwise"],
                           env=installed, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert bench.returncode == 0, bench.stdout + bench.stderr
    rows = json.loads((tmp_path / "results" / "pointwise.json").read_text())["results"][0]["candidates"]
    checked = {(r["plugin"], r["config"]): r["status"] for r in rows}
    assert checked[("example_pointwise", "threads=128")] == checked[("example_pointwise", "threads=32")] \
        == checked[("direct", "default")] == "ok"
