"""The GPU's own tile sizes (per op, sm_80's first config and sm_90's own last one: a wgmma tile) of
every plugin that plans for a target, run on the simulator as on that target (convlab.testing.gpu_tiles)."""
import numpy as np
import pytest

from convlab.plugin import registry
from convlab.testing.gpu_tiles import check_gpu_tile, gpu_tile_cases

CASES = [(plugin, *case) for plugin in registry.plugins() for case in gpu_tile_cases(plugin)]


@pytest.mark.parametrize("plugin,op,target,config,problem", CASES,
                         ids=[f"{p.name}-{op}-{t}-{c.name}" for p, op, t, c, _ in CASES])
def test_a_gpu_tile_on_the_simulator(plugin, op, target, config, problem):
    check_gpu_tile(plugin, op, target, config, problem, np.random.default_rng(0))


def test_every_plugin_with_gpu_configs_has_runs():
    from convlab.runtime import targets

    planned = {p.name for p, *_ in CASES}
    assert {"tensor_core", "tf32x3", "implicit_gemm", "depthwise", "im2col", "col2im"} <= planned
    wgmma = [c for p, op, t, c, _ in CASES if p.name == "tensor_core" and c.get("MMA") == "wgmma"]
    assert wgmma and all(t in targets.GPU_TARGETS for _, _, t, _, _ in CASES)
