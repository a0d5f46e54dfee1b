"""Tolerances per plugin and config (convlab.measure.plugin_tolerance): composites answer for the plugin
and config they run, the autotuner's and the benchmarks' check (measure.check_candidate) uses the same
function, and the half-precision output term is the exact result's rounding."""
import numpy as np

import convlab
from convlab import measure, reference, runtime
from convlab.plugin import registry
from convlab.plugin.contract import Config
from convlab.plugin.registry import Candidate
from convlab.problem import make_problem, make_problem_nd


def test_composites_take_the_eps_of_the_config_they_run():
    widen = registry.get("widen")
    problem = make_problem_nd("forward", 1, 4, (3, 4, 4), 4, (2, 3, 3), padding=1, dtype="float16")
    configs = registry.safe_configs(widen, problem)
    assert configs
    for config in configs:
        inner = registry.get(config["via"])
        rest = Config({k: v for k, v in config.items() if k != "via"})
        assert widen.compute_eps("float16", config) == inner.compute_eps("float32", rest)
    implicit = Config(BK=8, BM=32, BN=16, TM=4, TN=2, via="implicit_gemm")
    assert widen.compute_eps("float16", Config(via="tf32x3")) == 2.0**-20
    assert widen.compute_eps("float16", implicit) == 2.0**-23  # fp32 FMA, not the TF32 of another plugin
    assert widen.compute_eps("float16") >= max(widen.compute_eps("float16", c) for c in configs)


def test_a_plugin_without_a_config_parameter_still_answers():
    class Old(convlab.Algorithm):
        name = "_test_old_eps"

        def compute_eps(self, dtype):
            return 0.5

    assert Old().compute_eps("float32", Config(BM=8)) == Old().compute_eps("float32") == 0.5


def test_the_tuners_check_uses_the_plugin_tolerance_with_the_config():
    problem = make_problem("forward", 2, 4, 5, 5, 4, 3, 3, padding=1, dtype="float16", bias=True)
    widen = registry.get("widen")
    config = registry.safe_configs(widen, problem)[0]
    host = measure.random_operands(problem, np.random.default_rng(0))
    dev = measure.to_device(*host)
    limit = convlab.get_workspace_limit()
    trusted = measure.trusted_output(problem, host, dev, limit)
    out = runtime.empty(problem.operand_shapes[2], problem.dtype)
    poison = np.full(problem.operand_shapes[2], np.nan, problem.dtype)
    row = measure.CandidateResult(widen.name, config.name)
    assert measure.check_candidate(row, Candidate(widen, config), problem, dev, out, poison, trusted, limit)
    assert row.tolerance == measure.plugin_tolerance(widen, problem, config, trusted.output)


def test_the_half_output_term_is_the_rounding_of_the_exact_result():
    problem = make_problem("forward", 2, 8, 6, 6, 8, 3, 3, padding=1, dtype="float16")
    host = measure.random_operands(problem, np.random.default_rng(1))
    want = reference.solve(problem, *host)
    rounding = measure.output_rounding(problem, want)
    assert rounding == measure.rel_error(want.astype(np.float16), want) < 2.0**-11
    assert measure.output_rounding(problem) == 2.0**-11  # without a reference: its bound
    assert measure.output_rounding(problem.replace(dtype="float32"), want) == 0.0
    tol = measure.plugin_tolerance(registry.get("tensor_core"), problem, None, want)
    assert rounding < tol < rounding + 2.0**-15
