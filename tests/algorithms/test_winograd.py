"""What is specific to the winograd plugin (the conformance suite covers the rest on the simulator's
configs): every form and tile a GPU is offered runs correctly here, the precision and lossy rules with
their reasons, wgrad's decline where it does not pay, the declared error growth against a fresh
measurement, and the features the cost model gets."""
import numpy as np
import pytest

import convlab
from convlab import make_problem, reference, runtime
from convlab.algorithms.winograd.plan import make_plan
from convlab.kernels.transform import emulate
from convlab.kernels.winograd.toomcook import winograd
from convlab.measure import random_operands, rel_error, to_device, tolerance
from convlab.plugin.cost import Features
from convlab.runtime.targets import get as get_target

PLUGIN = convlab.get_plugin("winograd")
SM90 = get_target("sm_90")


def _check(problem, config, seed=0):
    host = random_operands(problem, np.random.default_rng(seed))
    out = runtime.full(problem.operand_shapes[2], np.nan, problem.dtype)
    PLUGIN.run(problem, config, *to_device(*host), out, workspace_limit=1 << 28)
    err = rel_error(runtime.to_host(out), reference.solve(problem, *host))
    tol = tolerance(problem, PLUGIN.error_eps(problem, config))
    assert err <= tol, (problem.describe(), config.name, err, tol)


@pytest.mark.parametrize("m", [2, 4, 6])
@pytest.mark.parametrize("op", ["forward", "dgrad"])
def test_fused_every_tile(op, m):
    problem = make_problem(op, 1, 3, 7, 8, 5, 3, 3, padding=1, bias=True)
    _check(problem, convlab.Config(m=m, form="fused"))


@pytest.mark.parametrize("m", [2, 6])
def test_nonfused_simt_other_tiles(m):
    """The simulator's configs run m = 4 on SIMT; the other tiles here (1D: F(m, 3) on the width)."""
    problem = make_problem("forward", 2, 3, 1, 13, 4, 1, 3, padding=(0, 1), groups=1, bias=True)
    _check(problem, convlab.Config(m=m, form="nonfused", gemm="simt"))


@pytest.mark.parametrize("dtype,op", [("float16", "forward"), ("float32", "dgrad")])
def test_tensor_core_gemm(dtype, op):
    """gemm=tc (offered on GPU targets only): f16 operands for a half problem, 3xTF32 for float32."""
    problem = make_problem(op, 1, 2, 4, 4, 3, 3, 3, padding=1, dtype=dtype)
    config = convlab.Config(m=2, form="nonfused", gemm="tc")
    assert config in PLUGIN.configs(problem, SM90)
    _check(problem, config)


def test_precision_highest_declines_large_tiles_with_the_reason():
    problem = make_problem("forward", 1, 8, 14, 14, 8, 3, 3, padding=1)
    big = convlab.Config(m=6, form="fused")
    verdict = PLUGIN.applicable(problem, big, target=SM90)
    assert not verdict and "precision 'highest'" in verdict.reason and "over 10x" in verdict.reason
    assert PLUGIN.configs(problem, SM90)[-1]["m"] == 6  # the declined ones last
    with convlab.float32_precision("high"):
        assert PLUGIN.applicable(problem, big, target=SM90)
    assert PLUGIN.applicable(problem.replace(dtype="float16"), big, target=SM90)


def test_forbidding_lossy_algorithms():
    problem = make_problem("forward", 1, 2, 5, 5, 2, 3, 3, padding=1)
    x, w = (np.random.default_rng(0).standard_normal(s).astype(np.float32) for s in problem.operand_shapes[:2])
    convlab.conv2d(x, w, padding=1, algorithm="winograd")  # records a plan
    with convlab.allow_lossy(False):
        assert not convlab.get_allow_lossy()
        verdict = PLUGIN.applicable(problem)
        assert not verdict and "lossy" in verdict.reason and "set_allow_lossy(False)" in verdict.reason
        with pytest.raises(ValueError, match="lossy"):
            convlab.conv2d(x, w, padding=1, algorithm="winograd")  # the plan re-checks: the setting is state
        assert "winograd" not in {c.plugin.name for c in convlab.plugin.registry.candidates(problem)}
    assert convlab.get_allow_lossy() and PLUGIN.applicable(problem)


def test_wgrad_declines_where_it_does_not_pay():
    depthwise = make_problem("wgrad", 1, 16, 16, 16, 16, 3, 3, padding=1, groups=16)
    verdict = PLUGIN.applicable(depthwise, target=SM90)
    assert not verdict and "does not pay" in verdict.reason
    assert PLUGIN.applicable(make_problem("wgrad", 8, 64, 56, 56, 64, 3, 3, padding=1), target=SM90)


def test_other_declines():
    for problem, words in ((make_problem("forward", 1, 2, 8, 8, 2, 3, 3, stride=2), "stride 1"),
                           (make_problem("forward", 1, 2, 8, 8, 2, 3, 3, dilation=2), "dilation 1"),
                           (make_problem("forward", 1, 2, 8, 8, 2, 5, 5), "3x3 filter"),
                           (make_problem("forward", 1, 2, 1, 20, 2, 1, 9), "3x3 filter")):
        verdict = PLUGIN.applicable(problem)
        assert not verdict and words in verdict.reason


@pytest.mark.parametrize("m", [4, 6])
def test_declared_growth_covers_a_fresh_measurement(m):
    """The emulated error over direct FMA's on new inputs (a seed the table was not measured with) stays
    within the declared growth (accuracy.py)."""
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((1, 4, 14, 14)).astype(np.float32).astype(np.float64)
    w = rng.standard_normal((8, 4, 3, 3)).astype(np.float32).astype(np.float64)
    problem = make_problem("forward", 1, 4, 14, 14, 8, 3, 3)
    ref = reference.solve(problem, x, w, None)
    ratio = rel_error(emulate.winograd(x, w, winograd(m, 3), winograd(m, 3)), ref) / rel_error(
        emulate.direct_fma(x, w), ref)
    assert ratio <= PLUGIN.error_growth(problem, convlab.Config(m=m, form="fused"))


def test_cost_features_count_the_transforms_and_the_saving():
    problem = make_problem("forward", 32, 64, 56, 56, 64, 3, 3, padding=1)
    fused, nonfused = (PLUGIN.cost_features(problem, convlab.Config(m=4, form=f, **g), SM90, 1 << 26)
                       for f, g in (("fused", {}), ("nonfused", {"gemm": "simt"})))
    assert isinstance(fused, Features) and fused.launches == 2
    assert problem.flops / 4 < nonfused.flops < problem.flops / 2  # F(4x4, 3x3): 4x fewer multiplies
    plan = make_plan(problem, convlab.Config(m=4, form="nonfused", gemm="simt"), 1 << 26)
    assert 1 < plan.nb < problem.n and nonfused.launches == 1 + 3 * -(-problem.n // plan.nb)  # sub-batched
    assert nonfused.aux_bytes > fused.aux_bytes > 0


def test_explain_prints_the_accuracy_note():
    text = str(convlab.explain(make_problem("forward", 1, 2, 6, 6, 2, 3, 3, padding=1)))
    line = next(row for row in text.splitlines() if " winograd " in row)
    assert "accuracy: F(" in line and "x fp32 FMA's rounding error" in line
