"""A plugin owns its cost (``Algorithm.cost_features``, convlab.plugin.cost): a third-party plugin is ranked
by the features it declares, as the built-ins are; each built-in declares its own; the cost model names
no plugin; and the built-ins' features on the fitted networks' layers are those the shipped sm_90 model
was fitted on.

The last is pinned by tests/autotune/golden/features_sm90.json: a digest of the features of every
candidate (sm_90, 256 MiB, float32 under "highest" and "high", float16) on every third layer of the
networks the fit measured, per suite, op, precision and plugin. A change there means the shipped
constants were fitted on other features: refit (``python -m convlab.modelfit``, bump
``costmodel.FEATURES_VERSION``) or say why not, then regenerate and review the diff:

    CONVLAB_UPDATE_GOLDEN=1 python -m pytest tests/autotune/test_plugin_cost.py -p no:cacheprovider
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
from pathlib import Path

import pytest

import convlab
from convlab import Algorithm, Config, make_problem
from convlab.autotune import costmodel
from convlab.autotune.features import features
from convlab.autotune.ranking import rank
from convlab.bench.suite import load_suite
from convlab.plugin import registry
from convlab.plugin.cost import ARITH_CEILING, KINDS, Features, generic
from convlab.runtime.targets import get as get_target

SM90 = get_target("sm_90")
LIMIT = 256 * 2**20
GOLDEN = Path(__file__).parent / "golden" / "features_sm90.json"
#: the networks whose layers the shipped fit measured (convlab/autotune/model/sm_90.json, meta.files)
FITTED = ("burn", "dcgan", "efficientnet_b0", "mobilenetv2", "resnet50", "resnext50")
CONTEXTS = (("float32", "highest"), ("float32", "high"), ("float16", "highest"))


class Declared(Algorithm):
    """A third-party plugin whose two configs differ only in what it declares: ``fast`` does a tenth of
    the work in one launch, ``slow`` (its preferred config) all of it in three."""

    name, ops, priority = "tt_declared", frozenset({"forward"}), 50

    def configs(self, problem):
        return [Config(speed="slow"), Config(speed="fast"), Config(speed="broken")]

    def cost_features(self, problem, config, target, workspace_limit):
        if config["speed"] == "broken":
            raise RuntimeError("no features for this one")
        share, launches = (0.1, 1) if config["speed"] == "fast" else (1.0, 3)
        return Features(self.name, "fp32", share * problem.flops, share * problem.bytes, 0.0, launches,
                        4 * target.sm_count, 1, 256, 2, kind="simt_gemm")

    def cost_hints(self, problem, config, target):
        return {"aux_bytes": 1e6} if config["speed"] == "fast" else {}


def test_a_third_party_plugin_is_ranked_by_the_features_it_declares():
    convlab.register(Declared)
    try:
        plugin, problem = registry.get("tt_declared"), make_problem("forward", 8, 64, 28, 28, 64, 3, 3, padding=1)
        cands = [c for c in registry.candidates(problem, LIMIT, target=SM90) if c.plugin is plugin]
        r = rank(problem, cands, LIMIT, SM90)
        assert r.by_model and [c.config["speed"] for c in r.order] == ["fast", "slow", "broken"]
        fast = features(plugin, problem, Config(speed="fast"), SM90, LIMIT)
        assert fast == Features("tt_declared", "fp32", 0.1 * problem.flops, 0.1 * problem.bytes, 1e6, 1,
                                4 * SM90.sm_count, 1, 256, 2, kind="simt_gemm")  # the hint on top
        model = costmodel.model_for(SM90)
        assert r.estimates["tt_declared[speed=fast]"] == model.estimate_ms(fast, "forward", SM90)
        assert model.group("tt_declared", "fp32", "forward", "simt_gemm") == costmodel.default_group("fp32", "simt_gemm")
        broken = features(plugin, problem, Config(speed="broken"), SM90, LIMIT)  # a declaration that raises
        assert broken == generic(plugin, problem, Config(speed="broken"), SM90, LIMIT)
    finally:
        convlab.unregister("tt_declared")


def _guide_and_template_plugins() -> list[Algorithm]:
    """The plugin of docs/ADDING_A_PLUGIN.md's example (registered by its code) and the template's."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    block = (docs / "ADDING_A_PLUGIN.md").read_text().split("<!-- guide-example -->", 1)[1]
    guide: dict = {"__name__": "depthwise_example_from_guide"}
    exec(compile(block.split("```python\n", 1)[1].split("\n```", 1)[0], "ADDING_A_PLUGIN.md", "exec"), guide)
    template: dict = {"__name__": "pointwise_from_template"}
    path = docs / "plugin_template" / "src" / "my_convlab_plugins" / "pointwise.py"
    exec(compile(path.read_text(), str(path), "exec"), template)
    return [guide["Depthwise"](), template["Pointwise"]()]


def test_the_guide_and_the_template_declare_the_features_they_are_ranked_by():
    try:
        for plugin in _guide_and_template_plugins():
            problem = make_problem("forward", 8, 64, 28, 28, 64, 1 if plugin.name == "my_pointwise" else 3,
                                   1 if plugin.name == "my_pointwise" else 3, padding=1, groups=64)
            for config in plugin.configs(problem, SM90):
                declared = plugin.cost_features(problem, config, SM90, LIMIT)
                assert features(plugin, problem, config, SM90, LIMIT) == declared != \
                    generic(plugin, problem, config, SM90, LIMIT)
                assert declared.threads == config["threads"] and declared.kind == "per_output"
    finally:
        convlab.unregister("depthwise_example")


def test_a_plugin_that_declares_nothing_gets_the_generic_view():
    class Plain(Algorithm):
        name, ops = "tt_plain", frozenset({"forward"})

    problem = make_problem("forward", 2, 8, 16, 16, 32, 3, 3, padding=1)
    f = Plain().cost_features(problem, Config(), SM90, LIMIT)
    assert f == features(Plain(), problem, Config(), SM90, LIMIT) == generic(Plain(), problem, Config(), SM90, LIMIT)
    assert (f.family, f.arith, f.kind, f.launches, f.flops) == ("tt_plain", "fp32", "other", 1,
                                                                  problem.flops * 4 * 128 * 128 / (512 * 32))


def test_each_kind_has_default_efficiencies_and_tensor_arithmetic_is_tensor():
    assert set(costmodel.DEFAULT_EFFICIENCY) == set(KINDS)
    tensor = costmodel.default_group("f16", "per_output")
    assert tensor.e_compute == costmodel.DEFAULT_EFFICIENCY["tensor"]
    assert costmodel.default_group("fp32", "stencil").e_compute == costmodel.DEFAULT_EFFICIENCY["stencil"]
    assert costmodel.default_group("fp32", "unheard of") == costmodel.default_group("fp32")


def _builtins() -> list[Algorithm]:
    return [p for p in registry.plugins() if type(p).__module__.startswith("convlab.algorithms.")]


def test_every_builtin_plugin_declares_its_features_and_they_never_fall_back(real):
    """Each built-in plugin overrides cost_features; called directly (no
    fallback to the generic view), it answers every first config on one layer of each op and dtype."""
    declared = {p.name for p in _builtins() if type(p).cost_features is not Algorithm.cost_features}
    assert declared == {p.name for p in _builtins()}
    layers = [make_problem(op, 4, 32, 14, 14, k, 3, 3, stride=2, padding=1, groups=groups)
              for op in ("forward", "dgrad", "wgrad") for k, groups in ((64, 1), (32, 32))]
    seen = set()
    for problem in [p.replace(dtype=d) for p in layers for d in ("float32", "float16")]:
        with convlab.float32_precision("high"):
            for cand in registry.candidates(problem, LIMIT, target=SM90, per_plugin=2):
                if cand.plugin.name in declared:
                    f = cand.plugin.cost_features(problem, cand.config, SM90, LIMIT)
                    assert isinstance(f, Features) and f.kind in KINDS and f.flops >= problem.flops * 0.99
                    seen.add(cand.plugin.name)
    assert seen == declared


def _non_docstring_strings(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs}


def test_the_cost_model_names_no_plugin(real):
    """The formula, the features' door, the ranking and the plugin-side record hold no plugin's name."""
    root = Path(costmodel.__file__).parents[1]
    names = {p.name for p in _builtins()} - set(ARITH_CEILING)  # "tf32x3": a plugin and an arithmetic
    for path in [root / "autotune" / f"{m}.py" for m in ("costmodel", "features", "ranking")] + \
            [root / "plugin" / "cost.py"]:
        assert not _non_docstring_strings(path) & names, path


def _digests() -> dict[str, str]:
    """{suite|op|dtype+precision|plugin: "<rows>:<sha256 of the rows' features>"} (module docstring)."""
    rows: dict[str, list[str]] = {}
    for suite in FITTED:
        for entry in load_suite(suite).entries[::3]:
            for problem in entry.problems:
                for dtype, precision in CONTEXTS:
                    pr = problem.replace(dtype=dtype)
                    with convlab.float32_precision(precision):
                        for cand in registry.candidates(pr, LIMIT, target=SM90):
                            f = features(cand.plugin, pr, cand.config, SM90, LIMIT)
                            rows.setdefault(f"{suite}|{pr.op}|{dtype}+{precision}|{cand.plugin.name}", []).append(
                                f"{entry.label}|{cand.config.name}|{json.dumps(f.as_dict(), sort_keys=True)}")
    return {key: f"{len(v)}:{hashlib.sha256(chr(10).join(sorted(v)).encode()).hexdigest()[:16]}"
            for key, v in sorted(rows.items())}


def test_builtin_features_are_those_the_shipped_model_was_fitted_on(real):
    found = _digests()
    if os.environ.get("CONVLAB_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(found, indent=0, sort_keys=True) + "\n")
        pytest.skip("golden features written")
    want = json.loads(GOLDEN.read_text())
    changed = sorted(k for k in set(want) | set(found) if want.get(k) != found.get(k))
    assert not changed, ("features differ from those the shipped sm_90 model was fitted on (module "
                         "docstring: refit, or regenerate after review):\n" + "\n".join(changed[:40]))
