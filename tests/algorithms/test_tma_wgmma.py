"""The tma_wgmma plugin's predicate, configs and cost declaration on the named sm_90 target (no GPU needed);
its results are the conformance suite's (tests/plugin), on the simulator's stand-ins."""
from __future__ import annotations

import pytest

import convlab
from convlab.kernels.hopper.config import SMEM_LIMIT, HopperConfig
from convlab.plugin import registry
from convlab.problem import make_problem, make_problem_nd
from convlab.runtime.targets import get

SM90, SM80 = get("sm_90"), get("sm_80")


@pytest.fixture(scope="module")
def plugin():
    return registry.get("tma_wgmma")


@pytest.mark.parametrize("problem,words", [
    (make_problem("forward", 2, 16, 8, 8, 16, 3, 3, groups=2, dtype="float16"), "groups"),
    (make_problem("dgrad", 2, 16, 8, 8, 16, 3, 3, stride=2, dtype="float16"), "stride"),
    (make_problem("forward", 2, 16, 8, 8, 12, 3, 3, dtype="float16"), "16 bytes"),
    (make_problem("wgrad", 2, 3, 8, 8, 16, 3, 3, dtype="float16"), "16 bytes"),
    (make_problem("forward", 2, 16, 8, 8, 16, 3, 3, dtype="float32"), "precision"),
    (make_problem_nd("forward", 1, 16, (40, 8, 8), 16, (3, 3, 3), padding=(17, 1, 1), dtype="float16"),
     "corner"),
    (make_problem("forward", 1, 16, 600, 8, 16, 3, 1, dilation=(130, 1), padding=(130, 0), dtype="bfloat16"),
     "copy engine"),
])
def test_declines_with_the_limit_it_meets(plugin, problem, words):
    verdict = plugin.check(problem, target=SM90)
    assert not verdict and words in verdict.reason, verdict.reason


def test_needs_the_hopper_features_and_tf32_wgrad_is_declined(plugin):
    pr = make_problem("forward", 2, 16, 8, 8, 16, 3, 3, dtype="float16")
    assert plugin.check(pr, target=SM90) and "tma" in plugin.check(pr, target=SM80).reason
    with convlab.float32_precision("high"):
        assert plugin.check(pr.replace(dtype="float32"), target=SM90)
        assert "MN-major" in plugin.check(make_problem("wgrad", 2, 16, 8, 8, 16, 3, 3, dtype="float32"),
                                          target=SM90).reason


@pytest.mark.parametrize("problem", [
    make_problem("forward", 32, 3, 224, 224, 64, 7, 7, stride=2, padding=3, dtype="float16"),
    make_problem("forward", 32, 256, 14, 14, 256, 3, 3, padding=1, dtype="bfloat16"),
    make_problem("dgrad", 16, 16, 512, 512, 16, 3, 3, dtype="float16"),
    make_problem("wgrad", 32, 64, 56, 56, 64, 3, 3, padding=1, dtype="float16"),
    make_problem_nd("forward", 2, 32, (8, 16, 16), 64, (3, 3, 3), padding=1, dtype="float16"),
])
def test_gpu_configs_fit_sm90(plugin, problem):
    """Every offered config fits 227 KiB and the register file, its tiles suit the layer: few channels
    take narrow stages (C = 3 and 16: 32-byte rows), few output channels narrow tiles."""
    configs = plugin.configs(problem, target=SM90)
    assert configs
    kind = "wgrad" if problem.op == "wgrad" else "fprop"
    for config in configs:
        cfg = HopperConfig(config["BM"], config["BN"], config["BK"], config["STAGES"], config["CONSUMERS"])
        assert cfg.reason("f16", 2, kind) == "" and cfg.layout("f16", 2)["total"] <= SMEM_LIMIT
        assert cfg.threads() in (256, 384)
    first = configs[0]
    if problem.op != "wgrad" and problem.c <= 16:
        assert first["BK"] == 16
    if problem.k == 16 and problem.op == "forward" or problem.op == "dgrad" and problem.c == 16:
        assert first["BN"] == 16


def test_cost_features_describe_a_persistent_tensor_kernel(plugin):
    pr = make_problem("forward", 32, 64, 56, 56, 64, 3, 3, padding=1, dtype="float16")
    config = plugin.configs(pr, target=SM90)[0]
    f = plugin.cost_features(pr, config, SM90, 2**30)
    assert (f.family, f.arith, f.kind, f.blocks_per_sm) == ("tma_wgmma", "f16", "tensor", 1)
    assert f.flops >= pr.flops and f.launches >= 1 and f.blocks >= 1
    assert plugin.workspace_bytes(pr, config, 2**30, target=SM90) > 0  # an NCHW call's copies (an upper bound)


@pytest.mark.parametrize("op", ["forward", "wgrad"])
def test_a_unit_height_problem_with_height_padding_keeps_its_two_axes(op):
    """Its one output row reads only the padding (the forward's output is the bias alone, wgrad's dw 0): it
    must not run as the 1D embedding, which drops the height padding (a dgrad of such a forward has
    stride 3 and is declined)."""
    import numpy as np

    from convlab import reference, runtime
    from convlab.call.candidate import run_candidate
    from convlab.dtypes import np_dtype
    from convlab.kernels.hopper.geometry import Geometry
    from convlab.measure import plugin_tolerance, random_operands, rel_error
    from convlab.plugin.registry import Candidate

    problem = make_problem(op, 1, 16, 1, 9, 16, 1, 3, stride=(3, 1), padding=(1, 1), dtype="float16",
                           bias=op != "wgrad")
    assert Geometry.axes_of(problem) == 2
    assert Geometry.axes_of(problem.replace(padding=(0, 1))) == 1
    plugin = registry.get("tma_wgmma")
    assert plugin.check(problem, target=SM90) and not plugin.check(problem.replace(op="dgrad"), target=SM90)
    host = random_operands(problem, np.random.default_rng(3))
    out = runtime.to_device(np.full(problem.operand_shapes[2], np.nan, np_dtype(problem.dtype)))
    config = plugin.configs(problem)[0]
    run_candidate(Candidate(plugin, config), problem, *(None if h is None else runtime.to_device(h) for h in host),
                  out, 2**28)
    got, want = runtime.to_host(out), reference.solve(problem, *host)
    assert np.all(np.isfinite(got)) and rel_error(got, want) <= plugin_tolerance(plugin, problem, config, want)
