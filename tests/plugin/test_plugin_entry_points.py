"""Plugins from another package through simulated entry points: ``importlib.metadata.entry_points``, as
``convlab.plugin.registry`` calls it, is monkeypatched to return the entry points of tests/plugin/plugin_pkg,
for fast in-process checks of each failure mode (a failed import, a raising predicate, a raising kernel)
and of the isolation of broken plugins from "auto" and the autotuner.
"""
from __future__ import annotations

import sys
from importlib import metadata

import numpy as np
import pytest

import convlab
from convlab import autotune, measure, reference, runtime
from convlab.plugin import registry
from convlab.testing import check_plugin

from plugin_pkg_meta import ENTRY_POINTS, EXAMPLES, PKG

ONE_BY_ONE = convlab.make_problem("forward", 1, 4, 3, 3, 4, 1, 1, bias=True)


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
    with autotune.mode("tune"):  # a mode that checks and times (the default, heuristic, does neither)
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
        faulty = registry.get("example_faulty_kernel")
        assert "example_faulty_kernel" in registry.set_aside_for(ONE_BY_ONE)  # for this problem only
        assert "kernel raised" in registry.verdict(faulty, ONE_BY_ONE).reason
        assert registry.verdict(faulty, ONE_BY_ONE.replace(n=ONE_BY_ONE.n + 1))
        with pytest.raises(RuntimeError, match="exploded"):  # forcing it still shows its error
            registry.clear_set_aside("example_faulty_kernel")
            convlab.conv2d(x, w, b, algorithm="example_faulty_kernel")
    finally:
        registry.clear_set_aside()
