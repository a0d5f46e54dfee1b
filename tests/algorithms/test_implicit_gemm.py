"""implicit_gemm specifics: predicate reasons, config variety, split-K with its ordered second pass.

Generic properties (every op/config against the reference, bad input, workspace honesty ...) are the
conformance suite's job; these tests cover what only this plugin has.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import convlab
from convlab import Config, make_problem, reference, runtime
from convlab.algorithms import implicit_gemm
from convlab.algorithms.implicit_gemm import common, forward, launches, plugin as ig_plugin, wgrad
from convlab.kernels.simt.tile import Tile
from convlab.measure import random_operands, rel_error, to_device, tolerance

PLUGIN = convlab.get_plugin("implicit_gemm")
LIMIT = 1 << 26


def _run(prob, config, limit=LIMIT, rng=None):
    a, b, bias = random_operands(prob, rng or np.random.default_rng(7))
    da, db, dbias = to_device(a, b, bias)
    out = runtime.full(prob.operand_shapes[2], np.nan, prob.dtype)
    PLUGIN.run(prob, config, da, db, dbias, out, workspace_limit=limit)
    got = out.copy_to_host()
    return got, rel_error(got, reference.solve(prob, a, b, bias))


@pytest.mark.parametrize("kwargs, reason", [
    (dict(op="forward", n=1, c=16, h=8, w=8, k=16, r=1, s=1, dtype="float64"),
     "supports dtypes ['float32'], not float64"),
    (dict(op="forward", n=4096, c=512, h=1024, w=1024, k=16, r=1, s=1),
     "x (4096, 512, 1024, 1024) has 2**31 elements or more (32-bit indexing)"),
    (dict(op="dgrad", n=1, c=1, h=1024, w=1024, k=4096, r=1, s=1),
     "y (1, 4096, 1024, 1024) has 2**31 elements or more (32-bit indexing)"),
])
def test_predicate_names_the_failing_condition(kwargs, reason):
    verdict = PLUGIN.applicable(make_problem(**kwargs))
    assert not verdict and verdict.reason == reason


@pytest.mark.parametrize("kwargs, aligned", [
    (dict(op="forward", c=16, h=8, k=16, padding=1), True),
    (dict(op="forward", c=16, h=7, k=24, padding=1), True),              # M, N remainders: masked
    (dict(op="forward", c=3, h=8, k=16, padding=1), False),              # K = 27
    (dict(op="forward", c=32, h=8, k=32, padding=1, groups=32), False),  # depthwise
    (dict(op="dgrad", c=16, h=8, k=16, padding=1), True),
    (dict(op="dgrad", c=16, h=8, k=16, padding=1, stride=2), False),     # four phases
    (dict(op="dgrad", c=16, h=8, k=32, padding=1, groups=2), False),
    (dict(op="wgrad", c=16, h=8, k=16, padding=1), True),
    (dict(op="wgrad", c=16, h=5, k=16, padding=1), False),               # N*P*Q = 50
    (dict(op="wgrad", c=16, h=8, k=16, padding=1, groups=4), False),
])
def test_accepts_any_size_groups_and_stride_and_picks_the_kernel(kwargs, aligned):
    """Everything within 32-bit indexing is accepted; the aligned kernel runs one group, stride-1
    dgrad and K % BK == 0, the general one the rest."""
    prob = make_problem(n=2, w=kwargs["h"], r=3, s=3, **kwargs)
    assert PLUGIN.applicable(prob)
    tile = Tile(16, 16, 8, 2, 2)
    if prob.op == "wgrad":
        assert wgrad.is_aligned(prob) == aligned
        kern = launches.wgrad_prepared(prob, tile, LIMIT, runtime.target())[0]
        assert kern is wgrad.wgrad_kernel(16, 16, 2, 2, not aligned)
    else:
        assert implicit_gemm.gathers.is_aligned(prob, tile) == aligned
        kerns = {launch[0] for launch in launches.prepared(prob, tile, LIMIT, runtime.target())}
        assert kerns == {forward.gather_kernel(16, 16, 8, 2, 2, prob.op == "forward", not aligned)}


def test_accepts_padding_dilation_stride_and_bias():
    for kwargs in (dict(op="forward", h=7, stride=2, padding=2, dilation=2, bias=True),
                   dict(op="dgrad", h=8, padding=2, dilation=2, bias=True),
                   dict(op="dgrad", h=9, stride=(2, 3), padding=2, dilation=2, bias=True),
                   dict(op="wgrad", h=7, stride=2, padding=2, dilation=2)):
        h = kwargs.pop("h")
        assert PLUGIN.applicable(make_problem(n=2, c=16, h=h, w=h, k=16, r=3, s=3, **kwargs))


@pytest.mark.parametrize("op", ["forward", "dgrad", "wgrad"])
def test_configs_differ_and_validate(op):
    prob = make_problem(op, 2, 16, 8, 8, 16, 3, 3, padding=1)
    configs = PLUGIN.configs(prob)
    tiles = [implicit_gemm.tile_of(c) for c in configs]
    assert len(set(tiles)) == len(tiles) >= 3
    assert len({(t.bm, t.bn) for t in tiles}) >= 2 and len({(t.tm, t.tn) for t in tiles}) >= 2
    check = wgrad.check_tile if op == "wgrad" else forward.check_tile
    gpu = ig_plugin.WGRAD_TILES_GPU if op == "wgrad" else ig_plugin.GATHER_TILES_GPU
    for t in gpu:  # the GPU list obeys the loaders' rules too (checked here without compiling)
        check(Tile(*t))
    assert len({Tile(*t).threads for t in gpu}) >= 2
    assert all(Tile(*t).bm * Tile(*t).bn <= 1024 for t in
               (ig_plugin.GATHER_TILES_SIM + ig_plugin.WGRAD_TILES_SIM))


@pytest.mark.parametrize("bad, rule", [(dict(BK=4), "multiple of 8"), (dict(TM=3), "power of two"),
                                       (dict(BM=512, TM=1), "threads per block")])
def test_malformed_config_is_a_value_error(bad, rule):
    prob = make_problem("forward", 2, 16, 8, 8, 16, 3, 3, padding=1)
    cfg = Config(dict(PLUGIN.configs(prob)[0], **bad))
    with pytest.raises(ValueError, match=rule):
        PLUGIN.workspace_bytes(prob, cfg, LIMIT)


@pytest.mark.parametrize("kwargs", [
    dict(op="forward", n=2, c=8, h=6, w=10, k=32, r=2, s=3, padding=(1, 0), bias=True),
    dict(op="dgrad", n=1, c=16, h=8, w=6, k=16, r=2, s=3, padding=(0, 2), dilation=(2, 1), bias=True),
    dict(op="wgrad", n=2, c=8, h=9, w=9, k=16, r=2, s=2, stride=2, dilation=2),
], ids=["forward", "dgrad", "wgrad"])
def test_every_config_matches_the_reference(kwargs):
    prob = make_problem(**kwargs)
    for config in PLUGIN.configs(prob):
        _, err = _run(prob, config)
        assert err <= tolerance(prob, PLUGIN.compute_eps("float32")), (config, err)


def test_wgrad_split_k_second_pass_is_exact_deterministic_and_bounded():
    prob = make_problem("wgrad", 2, 4, 8, 8, 16, 3, 3, padding=1)  # N*P*Q = 128: room to split
    config = PLUGIN.configs(prob)[0]
    tile = implicit_gemm.tile_of(config)
    splits, chunk, n_tiles = common.plan(prob, tile, LIMIT)
    assert splits >= 2 and chunk % 8 == 0 and splits * chunk >= 128
    tiles = math.ceil(16 / tile.bm) * n_tiles
    need = PLUGIN.workspace_bytes(prob, config, LIMIT)
    assert need == (splits * tiles * tile.bm * tile.bn + tiles) * 4
    first, err = _run(prob, config)
    assert err <= tolerance(prob, PLUGIN.compute_eps("float32"))
    again, _ = _run(prob, config)
    assert np.array_equal(first.view(np.uint32), again.view(np.uint32))  # same bits every run
    # a limit below the split's needs shrinks the split to nothing: no workspace, same answer
    assert PLUGIN.workspace_bytes(prob, config, need - 1) == 0
    single, err = _run(prob, config, limit=need - 1)
    assert err <= tolerance(prob, PLUGIN.compute_eps("float32"))
    assert common.plan(prob, tile, need - 1)[0] == 1


def test_forward_split_k_adds_bias_once():
    prob = make_problem("forward", 2, 16, 4, 4, 16, 3, 3, padding=1, bias=True)  # K = 144
    config = next(c for c in PLUGIN.configs(prob) if c["BK"] == 8)
    assert common.plan(prob, implicit_gemm.tile_of(config), LIMIT)[0] >= 2
    _, err = _run(prob, config)
    assert err <= tolerance(prob, PLUGIN.compute_eps("float32"))


@pytest.mark.parametrize("kwargs", [
    dict(op="forward", n=1, c=260, h=4, w=4, k=4, r=1, s=1, groups=2, bias=True),  # K = 130
    dict(op="dgrad", n=1, c=2, h=4, w=3, k=260, r=2, s=1, stride=(2, 1), groups=2, bias=True),  # 2 phases
    dict(op="wgrad", n=2, c=4, h=9, w=9, k=4, r=1, s=1, groups=2),  # N*P*Q = 162
], ids=["forward", "dgrad", "wgrad"])
def test_general_split_k_is_deterministic_and_bounded(kwargs):
    """Groups, a ragged last chunk and (dgrad) stride phases with the reduction split over blocks: the
    workspace holds every group's tiles, the bits repeat, and a limit below it plans fewer splits."""
    prob = make_problem(**kwargs)
    config = Config(BM=16, BN=16, BK=8, TM=2, TN=2)
    tile = implicit_gemm.tile_of(config)
    if prob.op == "wgrad":
        sizes = [prob.gemm_shape()]
    else:
        sizes = [(ga.m, ga.n, ga.k) for ga in implicit_gemm.gathers.gathers(prob)]
    plans = [common.plan(prob, tile, LIMIT, size) for size in sizes]
    assert any(splits >= 2 for splits, _, _ in plans) and any(k % 8 for _, _, k in sizes)
    need = PLUGIN.workspace_bytes(prob, config, LIMIT)
    tiles = [math.ceil(m / 16) * n_tiles * prob.groups for (m, _, _), (_, _, n_tiles) in zip(sizes, plans)]
    assert need == max((splits * t * 256 + t) * 4 if splits > 1 else 0
                       for (splits, _, _), t in zip(plans, tiles))
    first, err = _run(prob, config)
    assert err <= tolerance(prob, PLUGIN.compute_eps("float32"))
    again, _ = _run(prob, config)
    assert np.array_equal(first.view(np.uint32), again.view(np.uint32))
    assert PLUGIN.workspace_bytes(prob, config, need - 1) < need  # fewer splits (or none) fit


@pytest.mark.parametrize("op", ["forward", "dgrad"])
def test_narrow_gpu_tile_on_grouped_layers(op):
    """The GPU list's 256x8 tile (ResNeXt's 4..8 channels per group) on a small grouped problem."""
    config = Config(BM=256, BN=8, BK=8, TM=8, TN=4)
    assert implicit_gemm.tile_of(config) in map(Tile._make, ig_plugin.GATHER_TILES_GPU)
    prob = make_problem(op, 1, 8, 6, 6, 12, 3, 3, padding=1, groups=2, bias=True)  # N = 4 or 6
    _, err = _run(prob, config)
    assert err <= tolerance(prob, PLUGIN.compute_eps("float32"))


def test_strided_dgrad_phases_without_taps_write_the_bias():
    """1x1 stride 2: dx pixels at odd rows or columns receive no tap (their phases have K = 0) and hold
    the bias alone; the phases tile dx exactly once."""
    prob = make_problem("dgrad", 1, 5, 7, 6, 3, 1, 1, stride=2, bias=True)
    phases = implicit_gemm.gathers.gathers(prob)
    assert [ga.k for ga in phases] == [3, 0, 0, 0] and sum(ga.m for ga in phases) == 7 * 6
    got, err = _run(prob, Config(BM=16, BN=16, BK=8, TM=2, TN=2))
    assert err <= tolerance(prob, PLUGIN.compute_eps("float32"))
    a, b, bias = random_operands(prob, np.random.default_rng(7))
    assert np.array_equal(got[:, :, 1::2, :], np.broadcast_to(bias[None, :, None, None], (1, 5, 3, 6)))


def test_strided_conv_transpose2d_with_bias_through_the_public_op():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 4, 4)).astype(np.float32)  # DCGAN-like: 4x4 kernel, stride 2, pad 1
    w = rng.standard_normal((6, 3, 4, 4)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    got = convlab.conv_transpose2d(x, w, bias, stride=2, padding=1, algorithm="implicit_gemm")
    assert got.shape == (2, 3, 8, 8)
    prob = convlab.problem_for("conv_transpose2d", x, w, bias, stride=2, padding=1)
    assert rel_error(got, reference.dgrad(prob, x, w, bias)) <= tolerance(prob, PLUGIN.compute_eps("float32"))


def test_conv_transpose2d_with_bias_through_the_public_op():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 16, 4, 4)).astype(np.float32)  # C_in 16 -> C_out 16, 3x3, pad 1
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(16).astype(np.float32)
    got = convlab.conv_transpose2d(x, w, bias, padding=1, algorithm="implicit_gemm")
    prob = convlab.problem_for("conv_transpose2d", x, w, bias, padding=1)
    ref = reference.dgrad(prob, x, w, bias)
    assert rel_error(got, ref) <= tolerance(prob, PLUGIN.compute_eps("float32"))


@pytest.mark.parametrize("op, big, small", [
    ("forward", dict(n=1, c=16, h=8, w=8, k=32), dict(n=1, c=16, h=4, w=4, k=16)),   # 8 tiles, then 1
    ("wgrad", dict(n=2, c=4, h=8, w=8, k=16, r=3, s=3, padding=1), dict(n=1, c=16, h=4, w=4, k=16)),
], ids=["forward", "wgrad"])
def test_cached_launch_keeps_its_own_grid(op, big, small):
    """A problem launched again after another of the same tile uses its own grid. (The simulator's
    kernel[grid, block] configures and returns the tile's one kernel object, so a cached configured kernel
    launched with the last-configured problem's grid: tiles or splits missing, NaN left in the output.)"""
    big, small = (make_problem(op, **dict(dict(r=1, s=1), **kw)) for kw in (big, small))
    config = Config(BM=16, BN=16, BK=8, TM=2, TN=2)
    grids = [(math.ceil(p.gemm_shape()[0] / 16) * math.ceil(p.gemm_shape()[1] / 16),
              common.plan(p, implicit_gemm.tile_of(config), LIMIT)[0])
             for p in (big, small)]
    assert grids[0] != grids[1]  # the two launches need different grids
    for prob in (big, small, big):
        _, err = _run(prob, config)
        assert err <= tolerance(prob, PLUGIN.compute_eps("float32")), (prob, err)


def test_workspace_counters_are_zero_even_after_a_launch_that_raised():
    """The split-K workspace comes from convlab.runtime.scratch with its counters zero on entry: fresh, after a
    normal return (kernels reset them) and after a launch that raised (which may leave them non-zero)."""
    from convlab.runtime import scratch

    scratch.release()
    with launches.workspace(64, 3) as buf:
        assert buf.size == 67 and not buf.copy_to_host()[64:].any()
        buf[:64].copy_to_device(np.ones(64, np.float32))
    with pytest.raises(RuntimeError):
        with launches.workspace(64, 3) as buf:
            assert buf.copy_to_host()[:64].all()  # the same pooled buffer, partials left as they were
            buf[64:].copy_to_device(np.full(3, 2, np.float32))  # counters left non-zero
            raise RuntimeError("kernel failed")
    with launches.workspace(64, 3) as buf:
        assert not buf.copy_to_host()[64:].any()
    scratch.release()


def test_registry_discovers_the_plugin_package():
    """Built-ins are found by pkgutil over convlab.algorithms: a subpackage is imported like a module."""
    import pkgutil

    import convlab.algorithms
    from convlab.plugin import registry

    assert type(PLUGIN).__module__ == "convlab.algorithms.implicit_gemm.plugin"
    assert not registry.load_errors()
    found = {(m.name, m.ispkg) for m in pkgutil.iter_modules(convlab.algorithms.__path__)}
    assert {("implicit_gemm", True), ("explicit_gemm", True), ("tensor_core", True), ("direct", False)} <= found
    modules = {type(p).__module__ for p in convlab.plugins()}
    assert {f"convlab.algorithms.{n}" for n in ("direct", "explicit_gemm.im2col", "explicit_gemm.col2im",
                                                 "implicit_gemm.plugin", "tensor_core.plugin")} <= modules
    assert not any(m.startswith("convlab.algorithms._") for m in modules)
