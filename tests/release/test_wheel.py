"""The release: the sdist and the wheel build from the tree, the wheel holds every package and data file
of it, and installed into a fresh virtual environment without a package index it imports, runs a
convolution on the simulator, lists its plugins and suites (``convlab list``) and answers ``convlab --version``.

The fresh environment has no pip and no dependencies of its own: a ``.pth`` file puts this
interpreter's site-packages after the wheel's, so numpy and numba come from here while ``convlab``
comes from the wheel (the editable install's hook in those site-packages is a ``.pth`` file there,
which a path added by a ``.pth`` does not run).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

import convlab

REPO = Path(__file__).resolve().parents[2]
pytest.importorskip("build", reason="building the wheel needs 'build' (pip install -e '.[test]')")

#: what the tree has that the distributions need not carry
_NOT_SHIPPED = shutil.ignore_patterns(".git", ".venv", "__pycache__", "build", "dist", "*.egg-info", "results",
                                      "notebooks", "benchmarks", ".hypothesis", ".pytest_cache", "site")


def _tree_files() -> tuple[set[str], set[str]]:
    """(package dirs, data files) of the source tree as wheel paths (``algorithms/`` is
    ``convlab/algorithms/``)."""
    packages, data = set(), set()
    for top, prefix in (("convlab", "convlab"), ("algorithms", "convlab/algorithms")):
        for path in (REPO / top).rglob("*"):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            rel = prefix + "/" + path.relative_to(REPO / top).as_posix()
            if path.name == "__init__.py":
                packages.add(rel.rsplit("/", 1)[0])
            elif path.suffix == ".json":
                data.add(rel)
    return packages, data


def _build(tmp: Path) -> dict[str, Path]:
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=_NOT_SHIPPED)
    out = tmp / "dist"
    # the wheel is built from the unpacked sdist, so a file missing from the sdist fails here
    run = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
                         capture_output=True, text=True)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    wheels, sdists = list(out.glob("*.whl")), list(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in out.iterdir())
    return {"wheel": wheels[0], "sdist": sdists[0], "tmp": tmp}


def _check_contents(dists: dict[str, Path]) -> None:
    version = convlab.__version__
    assert dists["wheel"].name == f"convlab-{version}-py3-none-any.whl"
    assert dists["sdist"].name == f"convlab-{version}.tar.gz"
    names = set(zipfile.ZipFile(dists["wheel"]).namelist())
    packages, data = _tree_files()
    assert packages and data
    missing = sorted(p for p in packages if f"{p}/__init__.py" not in names)
    assert not missing, f"packages not in the wheel (setup.cfg [options] packages): {missing}"
    assert not sorted(data - names), "data files not in the wheel (setup.cfg package_data)"
    meta = zipfile.ZipFile(dists["wheel"]).read(f"convlab-{version}.dist-info/METADATA").decode()
    assert f"Version: {version}" in meta and "License: BSD-3-Clause" in meta
    assert f"convlab-{version}.dist-info/licenses/LICENSE" in names
    with tarfile.open(dists["sdist"]) as sdist:
        members = set(sdist.getnames())
    assert {f"convlab-{version}/LICENSE", f"convlab-{version}/README.md", f"convlab-{version}/setup.cfg"} <= members


def _check_installed(dists: dict[str, Path]) -> None:
    venv = dists["tmp"] / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    here = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (Path(site) / "zz_convlab_test_deps.pth").write_text("\n".join(here) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", "--no-deps",
                    "--quiet", "--disable-pip-version-check", str(dists["wheel"])], check=True)
    script = ("import numpy as np, convlab, convlab.reference as ref\n"
              "rng = np.random.default_rng(0)\n"
              "x = rng.standard_normal((1, 3, 5, 5)).astype(np.float32)\n"
              "w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)\n"
              "y = convlab.conv2d(x, w, padding=1)\n"
              "prob = convlab.problem_for('conv2d', x, w, padding=1)\n"
              "want = ref.forward(prob, x.astype(np.float64), w.astype(np.float64))\n"
              "err = np.linalg.norm(y - want) / np.linalg.norm(want)\n"
              "assert y.shape == (1, 4, 5, 5) and err < 1e-5, err\n"
              "from convlab import runtime\n"
              "print(convlab.__file__, runtime.SIMULATOR)\n"
              "from convlab.cli import main\n"
              "raise SystemExit(main(['list']))\n")
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "NUMBA_ENABLE_CUDASIM": "1", "HOME": str(dists["tmp"]),
           "CONVLAB_CACHE_DIR": str(dists["tmp"] / "cache")}
    run = subprocess.run([str(python), "-c", script], cwd=dists["tmp"], env=env, check=True, capture_output=True,
                         text=True)
    first, listing = run.stdout.split("\n", 1)
    where, simulator = first.split()
    assert Path(where).is_relative_to(site), f"convlab imported from {where}, not the wheel's {site}"
    assert simulator == "True"
    version = subprocess.run([str(venv / "bin" / "convlab"), "--version"], cwd=dists["tmp"], env=env, check=True,
                             capture_output=True, text=True).stdout.strip()
    assert version == f"convlab {convlab.__version__}"
    shipped = [p.name for p in convlab.plugins() if type(p).__module__.startswith("convlab.algorithms.")]
    suites = [p.stem for p in (REPO / "convlab" / "suites").glob("*.json")]
    assert shipped and suites
    assert [n for n in shipped + suites if f"  {n} " not in listing] == [], listing


def test_wheel_and_sdist_build_and_the_wheel_installs_offline_and_runs(tmp_path):
    # one test, so that pytest-xdist builds the distributions once
    dists = _build(tmp_path)
    _check_contents(dists)
    _check_installed(dists)
