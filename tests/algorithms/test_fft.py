"""What is specific to the fft plugin (the conformance suite covers the rest on the simulator's configs):
the GEMM product path that the simulator's configs leave to product=inline, overlap-save over several
tiles, the FFT passes against numpy, the declines with their reasons, the declared error growth against a
fresh measurement, and the features the cost model gets."""
import numpy as np
import pytest

import convlab
from convlab import make_problem, make_problem_nd, reference, runtime
from convlab.algorithms.fft.plan import make_plan
from convlab.kernels.fft.stages import bit_reverse, passes
from convlab.kernels.transform import emulate
from convlab.measure import random_operands, rel_error, to_device, tolerance
from convlab.runtime.targets import get as get_target

PLUGIN = convlab.get_plugin("fft")
SM90 = get_target("sm_90")


def _check(problem, config, seed=0):
    host = random_operands(problem, np.random.default_rng(seed))
    out = runtime.full(problem.operand_shapes[2], np.nan, problem.dtype)
    PLUGIN.run(problem, config, *to_device(*host), out, workspace_limit=1 << 28)
    err = rel_error(runtime.to_host(out), reference.solve(problem, *host))
    assert err <= tolerance(problem, PLUGIN.error_eps(problem, config)), (problem.describe(), config.name, err)


@pytest.mark.parametrize("op", ["forward", "dgrad"])
def test_gemm_products(op):
    """product=gemm (the simulator's configs take inline where it applies): one SIMT GEMM per bin."""
    problem = make_problem_nd(op, 2, 5, (11,), 3, (4,), padding=2, bias=True).lowered()
    assert convlab.Config(n=64, product="gemm") in PLUGIN.configs(problem, SM90)
    _check(problem, convlab.Config(n=64, product="gemm"))


def test_overlap_save_over_many_tiles():
    """A 1D signal longer than its transform: tiles of 64 - 9 + 1 = 56 outputs each, the last partial."""
    problem = make_problem_nd("forward", 1, 2, (150,), 2, (9,), padding=4, dtype="float16").lowered()
    config = convlab.Config(n=64, product="inline")
    assert make_plan(problem, config, 1 << 28).tiles == (1, 3)
    _check(problem, config)


def test_the_passes_are_a_dft():
    for n in (2, 4, 8, 32, 128):
        assert sorted(h for _, h in passes(n))[-1] < n
        z = np.random.default_rng(n).standard_normal(n) + 1j * np.random.default_rng(n + 1).standard_normal(n)
        got = emulate._dft_lines(z.astype(np.complex64), False)
        assert np.allclose(got, np.fft.fft(z), rtol=1e-5, atol=1e-4 * np.sqrt(n))
        assert sorted(bit_reverse(i, n) for i in range(n)) == list(range(n))


def test_declines_with_reasons():
    for problem, words in ((make_problem("forward", 1, 2, 8, 8, 2, 3, 3, stride=2), "stride 1"),
                           (make_problem("forward", 1, 2, 40, 40, 2, 3, 3, dilation=17), "longer than")):
        verdict = PLUGIN.applicable(problem)
        assert not verdict and words in verdict.reason
    assert PLUGIN.applicable(make_problem("forward", 1, 2, 12, 12, 2, 3, 3, dilation=3, padding=3))


def test_declared_growth_covers_a_fresh_measurement():
    rng = np.random.default_rng(4321)
    x = rng.standard_normal((1, 2, 1, 300)).astype(np.float32).astype(np.float64)
    w = rng.standard_normal((3, 2, 1, 3)).astype(np.float32).astype(np.float64)
    problem = make_problem("forward", 1, 2, 1, 300, 3, 1, 3)
    ref = reference.solve(problem, x, w, None)
    ratio = rel_error(emulate.fft_conv(x, w, (1, 256)), ref) / rel_error(emulate.direct_fma(x, w), ref)
    assert ratio <= PLUGIN.error_growth(problem, convlab.Config(n=256, product="gemm"))


def test_cost_features_and_the_crossover():
    """The model's FLOPs relative to dense ones fall with the filter's size: a 31-tap 1D filter's far below
    a 3x3 one's and below a quarter of dense."""
    small = make_problem("forward", 8, 64, 56, 56, 64, 3, 3, padding=1)
    large = make_problem_nd("forward", 8, 64, (4096,), 64, (31,), padding=15).lowered()
    f_small = min(PLUGIN.cost_features(small, c, SM90, 1 << 28).flops for c in PLUGIN.configs(small, SM90))
    f_large = min(PLUGIN.cost_features(large, c, SM90, 1 << 28).flops for c in PLUGIN.configs(large, SM90))
    assert f_large / large.flops < f_small / small.flops / 2 and f_large < large.flops / 4
