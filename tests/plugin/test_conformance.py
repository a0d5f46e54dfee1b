"""Every registered plugin x every op it declares x every conformance check.

A new plugin is tested here without new test code: registering it is enough.
"""
import numpy as np
import pytest

import convlab
from convlab.testing import CHECKS, applicable_checks, check_plugin, parametrize_with_checks, run_check


@parametrize_with_checks()
def test_conformance(plugin, op, check):
    assert check(plugin, op) >= 1  # examples run


def test_parametrize_with_checks_follows_declarations():
    class NonDeterministic(convlab.Algorithm):
        name, ops, deterministic = "_test_nondet", frozenset({"wgrad"}), False

    pairs = applicable_checks(NonDeterministic())
    assert ("wgrad", "check_deterministic") not in pairs and ("wgrad", "check_matches_reference") in pairs
    assert {op for op, _ in pairs} == {"wgrad"}
    mark = parametrize_with_checks([NonDeterministic()])
    ids = mark.kwargs["ids"]
    assert ids == [f"_test_nondet-wgrad-{name[6:]}" for _, name in pairs]


def test_a_plugin_that_compiles_per_shape_draws_fewer_examples_on_a_gpu():
    from hypothesis import settings

    from convlab.testing import examples_for

    class PerShape(convlab.Algorithm):
        name, ops, compiles_per_shape = "_test_per_shape", frozenset({"forward"}), True

    profile = settings.default.max_examples
    assert examples_for(PerShape(), simulator=True) is None  # the profile's count
    assert examples_for(PerShape(), simulator=False) == max(5, profile // 4)
    assert examples_for(convlab.get_plugin("direct"), simulator=False) is None
    assert convlab.get_plugin("depthwise").compiles_per_shape


def test_narrow_predicate_asks_for_sample_problems():
    class Narrow(convlab.Algorithm):
        name, ops = "_test_narrow", frozenset({"forward"})

        def check(self, problem):
            return convlab.Verdict.no("only 4093x4091 images") if (problem.h, problem.w) != (4093, 4091) \
                else convlab.Verdict.yes()

    with pytest.raises(AssertionError, match="sample_problems"):
        run_check("check_matches_reference", Narrow(), "forward", max_examples=5)


def test_every_builtin_plugin_loaded():
    assert not convlab.load_errors(), convlab.load_errors()
    assert "direct" in {p.name for p in convlab.plugins()}


class _DropsLastElement(convlab.Algorithm):
    """A wrong plugin: direct's result with the last output element never written."""

    name = "_test_drops_last"
    ops = frozenset({"forward"})

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        convlab.get_plugin("direct").run(problem, config, a, b, bias, out, workspace_limit=workspace_limit)
        host = out.copy_to_host()
        host.reshape(-1)[-1] = np.nan
        out.copy_to_device(host)


class _OffByBias(convlab.Algorithm):
    """A wrong plugin: ignores the bias."""

    name = "_test_ignores_bias"
    ops = frozenset({"forward"})

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        convlab.get_plugin("direct").run(problem, config, a, b, None, out, workspace_limit=workspace_limit)


class _SilentDecline(convlab.Algorithm):
    """A wrong plugin: declines float64 without a reason (via a raising predicate)."""

    name = "_test_raising_predicate"
    ops = frozenset({"forward"})

    def check(self, problem):
        if problem.dtype == "float64":
            raise RuntimeError("boom")
        return convlab.Verdict.yes()

    def run(self, problem, config, a, b, bias, out, *, workspace_limit):
        convlab.get_plugin("direct").run(problem, config, a, b, bias, out, workspace_limit=workspace_limit)


# Fixed problems the broken plugins accept (each check is called directly: no hypothesis shrinking).
_PROBLEMS = [convlab.make_problem("forward", 1, 4, 5, 6, 3, 3, 2, padding=1, bias=True),
             convlab.make_problem("forward", 2, 4, 7, 5, 4, 2, 3, stride=2, groups=2, bias=True,
                                  dtype="float64")]


@pytest.mark.parametrize("broken,check", [(_DropsLastElement, "check_output_fully_written"),
                                          (_OffByBias, "check_matches_reference"),
                                          (_SilentDecline, "check_declines_with_reason")])
def test_suite_catches_broken_plugins(broken, check):
    convlab.register(broken)
    try:
        plugin = convlab.get_plugin(broken.name)
        with pytest.raises(AssertionError):
            for problem in _PROBLEMS:
                CHECKS[check](plugin, problem, np.random.default_rng())
        with pytest.raises(AssertionError, match=check):  # and check_plugin reports it by name
            check_plugin(plugin, checks=[check], max_examples=10, shrink=False)
    finally:
        convlab.unregister(broken.name)


def test_check_plugin_applies_the_convlab_profile_from_a_plain_call():
    """Outside pytest's profile (hypothesis's default: a 200 ms deadline) a slow plugin still passes."""
    import time

    from hypothesis import settings

    from convlab.testing import profiles

    class Slow(convlab.Algorithm):
        name, ops = "_test_slow", frozenset({"forward"})

        def run(self, problem, config, a, b, bias, out, *, workspace_limit):
            time.sleep(0.25)
            convlab.get_plugin("direct").run(problem, config, a, b, bias, out, workspace_limit=workspace_limit)

    previous = settings.get_current_profile_name()
    settings.load_profile("default")
    try:
        assert profiles.active_name() == profiles.DEFAULT_PROFILE and profiles.active().deadline is None
        assert run_check("check_matches_reference", Slow(), "forward", max_examples=1) >= 2
    finally:
        settings.load_profile(previous)


def test_ci_draws_are_the_same_on_every_run(monkeypatch):
    from convlab.testing import checks, profiles

    if not profiles.active().derandomize:
        pytest.skip("a random profile is active")
    seen = []
    monkeypatch.setitem(checks.CHECKS, "check_declines_with_reason", lambda p, problem, rng: seen.append(problem))
    runs = []
    for _ in range(2):
        seen.clear()
        run_check("check_declines_with_reason", "im2col", "forward", max_examples=4)
        runs.append(list(seen))
    assert runs[0] == runs[1] and len(runs[0]) >= 4


def _probes(op: str, name: str, dtype: str) -> list:
    """The smallest problems of class ``name`` (one option set on a plain 8-channel 3x3 problem), with
    groups 1 and depthwise; a plugin the class examples leave without the class must decline them all."""
    from convlab.problem import make_problem_nd

    def one(groups, n=1, spatial=(6, 7), kernel=(3, 3), **options):
        fields = dict(padding=1, dtype=dtype, bias=False, groups=groups)
        fields.update(options)
        return make_problem_nd(op, n, 8, spatial, 8, kernel, **fields).lowered()

    options = {"batch>1": dict(n=2), "padding>=2": dict(padding=2), "dilation H": dict(dilation=(2, 1)),
               "dilation W": dict(dilation=(1, 2)), "stride>1": dict(stride=2), "bias": dict(bias=True),
               "1D": dict(spatial=(7,), kernel=(3,), padding=1),
               "padded unit height": dict(spatial=(1, 7), kernel=(1, 3), stride=(3, 1), padding=1),
               "3D": dict(spatial=(3, 4, 5), kernel=(2, 3, 3), padding=(0, 1, 1)),
               "dilation D": dict(spatial=(4, 4, 5), kernel=(2, 3, 3), padding=(0, 1, 1), dilation=(2, 1, 1)),
               "groups>1": dict(groups=2)}
    if name.startswith("long"):  # 8 x 8 x 3 x 3 = 576 products (wgrad: 2 x 16 x 16 = 512 pixels)
        kw = dict(n=2, spatial=(16, 16)) if op == "wgrad" else dict(spatial=(2, 4))
        return [make_problem_nd(op, kw.get("n", 1), 64 if op != "wgrad" else 8, kw["spatial"], 8, (3, 3),
                                padding=1, dtype=dtype, groups=g) for g in (1, 8 if op == "wgrad" else 1)]
    probes = []
    for groups in (1, 8):
        option = dict(options[name])
        if name == "groups>1" and groups == 8:
            continue
        probes.append(one(option.pop("groups", groups), **option))
    return probes


@pytest.mark.parametrize("plugin", [p.name for p in convlab.plugins()])
def test_class_examples_reach_every_class_the_plugin_takes(plugin):
    """A class the fixed examples miss for a plugin is one it declines: its smallest problems of that
    class, in every dtype it takes (float32 also as TF32), are declined (a plugin's limits are its
    predicate's, never the candidate list's)."""
    from convlab.plugin import registry
    from convlab.testing import class_examples, missing_classes

    plugin = convlab.get_plugin(plugin)
    for op in sorted(plugin.ops):
        missing = set(missing_classes(plugin, op))
        assert ("bias" in missing) == (op == "wgrad") or "bias" not in plugin.ops, (op, missing)
        for name in sorted(missing - {"bias"} if op == "wgrad" else missing):
            own = {"long float32": {"float32"}, "long half": {"float16", "bfloat16"}}.get(name, plugin.dtypes)
            for dtype in sorted(own & plugin.dtypes):
                for precision in ("highest", "high") if dtype == "float32" and name != "long float32" else ("highest",):
                    with convlab.float32_precision(precision):
                        taken = [p.describe() for p in _probes(op, name, dtype) if registry.verdict(plugin, p)]
                    assert not taken, (f"{plugin.name} {op}: no class example reaches {name!r}, yet the "
                                       f"plugin takes {taken} (float32 precision {precision!r})")
        assert any(p.n >= 2 for p in class_examples(plugin, op))
