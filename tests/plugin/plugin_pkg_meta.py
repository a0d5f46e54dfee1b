"""The plugin package of the plugin tests (tests/plugin/plugin_pkg, ``convlab-test-plugins``): where it is,
its pyproject.toml, its entry points and the names of its plugins. Imported by the test modules as
``plugin_pkg_meta`` (this folder is on ``sys.path`` under pytest's default import mode).
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from convlab.plugin import registry

REPO = Path(__file__).resolve().parents[2]
PKG = Path(__file__).resolve().parent / "plugin_pkg"
PYPROJECT = tomllib.loads((PKG / "pyproject.toml").read_text())
ENTRY_POINTS = PYPROJECT["project"]["entry-points"][registry.ENTRY_POINT_GROUP]
EXAMPLES = ("example_pointwise", "example_faulty_predicate", "example_faulty_kernel")
