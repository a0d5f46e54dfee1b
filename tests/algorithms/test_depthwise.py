"""The depthwise plugin beyond the conformance suite: its reasons, configs, stride phases, the split wgrad
(bit-for-bit deterministic), every sample problem on every config, and the public ops."""
import numpy as np
import pytest

import convlab
from convlab import measure, reference, runtime
from convlab.ops import strategy
from convlab.algorithms.depthwise import plan as dw
from convlab.kernels.conv.depthwise_common import axis
from convlab.testing.checks import check_matches_reference

PLUGIN = convlab.get_plugin("depthwise")


@pytest.mark.parametrize("problem,reason", [
    (convlab.make_problem("forward", 1, 8, 6, 6, 8, 3, 3, groups=2), "groups=2 != C=8: not depthwise"),
    (convlab.make_problem("wgrad", 1, 4, 6, 6, 4, 3, 3), "groups=1 != C=4: not depthwise"),
    (convlab.make_problem("forward", 1, 2, 16, 16, 2, 12, 11, groups=2), "filter 12x11 has more than 121"),
    (convlab.make_problem("dgrad", 1, 2, 900, 900, 2, 3, 3, dilation=400, groups=2), "no tile fits"),
    (convlab.make_problem("forward", 2**16, 2, 128, 128, 2, 3, 3, groups=2), "32-bit indexing"),
    (convlab.make_problem("wgrad", 70000, 2, 8, 8, 2, 3, 3, groups=2), "at most 65535 images"),
])
def test_declines_with_reason(problem, reason):
    verdict = PLUGIN.applicable(problem)
    assert not verdict and reason in verdict.reason


def test_accepts_any_multiplier_and_ranks_first():
    for k in (3, 6):  # M = 1 and M = 2
        problem = convlab.make_problem("forward", 1, 3, 6, 6, k, 3, 3, padding=1, groups=3)
        assert PLUGIN.applicable(problem)
        assert strategy.by_priority(problem, 1 << 20).plugin is PLUGIN
    dense = convlab.make_problem("forward", 1, 16, 4, 4, 16, 3, 3, padding=1)
    assert strategy.by_priority(dense, 1 << 20).plugin is not PLUGIN


def test_configs():
    problem = convlab.make_problem("forward", 2, 4, 7, 7, 4, 3, 3, padding=1, groups=4)
    configs = PLUGIN.configs(problem)
    tiles = dw.TILES_SIM if runtime.SIMULATOR else dw.TILES_GPU
    assert sorted(dw.TILES_WGRAD_GPU) == sorted(dw.TILES_GPU)  # one set of plain tiles, two orders
    planes = [c for c in configs if c["PL"] > 1]
    assert len(configs) - len(planes) == len(tiles) and planes and configs[0] is planes[0]
    for config in configs:
        per_plane = config["TW"] * config["TH"] // config["VH"]
        assert per_plane & (per_plane - 1) == 0 and config["TH"] % config["VH"] == 0
        assert per_plane * config["PL"] <= (32 if runtime.SIMULATOR else 256)
    for config in planes:  # a plane tile covers the whole 7x7 plane: one tile, PL planes per block
        assert dw.blocks(problem, dw.tile_of(config))[:2] == (1, 1)
    # a wide dilated filter keeps only the tiles whose halo (and wgrad's reduction buffer) fit 48 KiB of
    # shared memory, or declines
    wide = convlab.make_problem("wgrad", 1, 2, 90, 90, 2, 7, 7, dilation=11, groups=2, dtype="float64")
    kept = [(c["TH"], c["TW"], c["VH"]) for c in PLUGIN.configs(wide)]
    assert sorted(kept) == sorted(t for t in tiles if dw.fits(wide, t + (1,))) and len(kept) < len(tiles)
    assert bool(kept) == bool(PLUGIN.applicable(wide))
    if runtime.SIMULATOR:
        assert kept == [(4, 4, 2)]


def test_plane_tiles_only_for_small_planes():
    """Plane tiles: the smallest size covering the largest stride phase; none once planes are large;
    wgrad offers each also unsplit."""
    big = convlab.make_problem("forward", 1, 2, 40, 40, 2, 3, 3, padding=1, groups=2)
    assert all(c["PL"] == 1 for c in PLUGIN.configs(big))
    # dgrad of stride 2: dx 15x15 in phases of at most 8 rows and columns: the 8-tile (not 16) covers it
    dgrad = convlab.make_problem("dgrad", 1, 2, 15, 15, 2, 3, 3, stride=2, padding=1, groups=2)
    sizes = {(c["TH"], c["TW"]) for c in PLUGIN.configs(dgrad) if c["PL"] > 1}
    assert sizes == ({(8, 8)} if runtime.SIMULATOR else {(8, 8)})
    wgrad = convlab.make_problem("wgrad", 2, 3, 7, 7, 3, 3, 3, padding=1, groups=3)
    planes = [c for c in PLUGIN.configs(wgrad) if c["PL"] > 1]
    assert {c.get("SPLIT", 0) for c in planes} == {0, 1}
    assert all(dw.wgrad_plan(wgrad, c, 1 << 20, runtime.target())[0] == 1 for c in planes if c.get("SPLIT"))


@pytest.mark.parametrize("op", sorted(PLUGIN.ops))
def test_plane_tiles_with_partial_group_and_multiplier(op):
    """PL planes per block where the last group is partly empty (K = 6 channels, PL = 4 on the
    simulator's 4x4 plane tile), channel multiplier 2, stride 2 (dgrad: phases), split and unsplit wgrad."""
    rng = np.random.default_rng(5)
    problem = convlab.make_problem(op, 2, 3, 7, 8, 6, 3, 3, stride=2, padding=1, groups=3,
                                   bias=op != "wgrad")
    configs = [c for c in PLUGIN.configs(problem) if c["PL"] > 1]
    assert configs and configs[0] == PLUGIN.configs(problem)[0]
    for config in configs:
        host = measure.random_operands(problem, rng)
        a, b, bias = measure.to_device(*host)
        out = runtime.full(problem.operand_shapes[2], np.nan, problem.dtype)
        PLUGIN.run(problem, config, a, b, bias if op != "wgrad" else None, out, workspace_limit=1 << 20)
        got = out.copy_to_host()
        tol = measure.tolerance(problem, float(np.finfo(np.float32).eps))
        assert measure.rel_error(got, reference.solve(problem, *host)) <= tol, config


@pytest.mark.parametrize("k,stride,dil", [(3, 1, 1), (3, 2, 1), (5, 2, 1), (3, 2, 2), (7, 3, 2), (4, 4, 1)])
def test_dgrad_phases_partition_the_taps(k, stride, dil):
    """Each filter tap belongs to exactly one residue class, and it maps the class's outputs to dy."""
    ax = axis(True, k, stride, 1, dil)
    taps = sorted(r for phase in ax.phases for r, _ in phase.taps)
    assert taps == list(range(k))
    for phase in ax.phases:
        for r, off in phase.taps:  # output h = t*stride + o0 reads dy[t + off]: h + pad - r*dil = p*stride
            t = phase.t_lo + 2
            assert (t * stride + phase.o0) + 1 - r * dil == (t + off) * stride


@pytest.mark.parametrize("op", sorted(PLUGIN.ops))
def test_every_sample_problem_on_every_config(op):
    """Hypothesis may not draw each sample: run them all (check_matches_reference poisons with NaN)."""
    rng = np.random.default_rng(7)
    for problem in PLUGIN.sample_problems(op):
        assert PLUGIN.applicable(problem), problem.describe()
        check_matches_reference(PLUGIN, problem, rng)


def _wgrad(problem, config, limit, host):
    a, b, _ = measure.to_device(*host)
    out = runtime.full(problem.w_shape, np.nan, problem.dtype)
    PLUGIN.run(problem, config, a, b, None, out, workspace_limit=limit)
    return out.copy_to_host()


def test_wgrad_split_is_deterministic_and_fits_the_limit():
    problem = convlab.make_problem("wgrad", 8, 2, 9, 10, 4, 3, 3, stride=2, padding=1, groups=2)
    config = min((c for c in PLUGIN.configs(problem) if c["PL"] == 1), key=lambda c: c["TH"] * c["TW"])
    limit = 1 << 20
    splits, chunk = dw.wgrad_plan(problem, config, limit, runtime.target())
    assert splits > 1 and (splits - 1) * chunk < dw.blocks(problem, dw.tile_of(config))[2]
    assert PLUGIN.workspace_bytes(problem, config, limit) == splits * 4 * 9 * 4
    host = measure.random_operands(problem, np.random.default_rng(3))
    first, second = _wgrad(problem, config, limit, host), _wgrad(problem, config, limit, host)
    assert np.array_equal(first, second)
    want = reference.solve(problem, *host)
    assert measure.rel_error(first, want) <= measure.tolerance(problem, float(np.finfo(np.float32).eps))
    # a workspace limit too small for two partials: one block per filter sums everything, no workspace
    tight = 2 * 4 * 9 * 4 - 1
    assert dw.wgrad_plan(problem, config, tight, runtime.target())[0] == 1
    assert PLUGIN.workspace_bytes(problem, config, tight) == 0
    unsplit = _wgrad(problem, config, tight, host)
    assert measure.rel_error(unsplit, want) <= measure.tolerance(problem, float(np.finfo(np.float32).eps))


def test_public_ops():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 2, 7, 6)).astype(np.float32)
    w = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    y = convlab.conv2d(x, w, bias, stride=2, padding=1, groups=2, algorithm="depthwise")
    problem = convlab.make_problem("forward", 1, 2, 7, 6, 4, 3, 3, stride=2, padding=1, groups=2, bias=True)
    tol = measure.tolerance(problem, float(np.finfo(np.float32).eps))
    assert measure.rel_error(y, reference.solve(problem, x, w, bias)) <= tol
    # conv_transpose2d: the depthwise dgrad with roles swapped, carrying a bias of its output channels
    bias_t = rng.standard_normal(2).astype(np.float32)
    got = convlab.conv_transpose2d(y, w, bias_t, stride=2, padding=1, output_padding=(0, 1), groups=2,
                                   algorithm="depthwise")
    dgrad = convlab.make_problem("dgrad", 1, 2, 7, 6, 4, 3, 3, stride=2, padding=1, groups=2, bias=True)
    assert measure.rel_error(got, reference.solve(dgrad, y, w, bias_t)) <= tol


@pytest.mark.skipif(runtime.SIMULATOR, reason="PTX needs the GPU compiler")
@pytest.mark.parametrize("op,r,stride", [("forward", 3, 2), ("dgrad", 5, 2), ("wgrad", 7, 1)])
def test_ptx_keeps_registers_and_32_bit_indices(op, r, stride):
    """Accumulators and the filter stay in registers (no local memory); index math stays 32-bit: the
    first plane tile and the first plain tile."""
    problem = convlab.make_problem(op, 2, 8, 28, 28, 8, r, r, stride=stride, padding=r // 2, groups=8)
    configs = PLUGIN.configs(problem)
    assert configs[0]["PL"] > 1
    for config in (configs[0], next(c for c in configs if c["PL"] == 1)):
        kernel = dw.launch_plan(problem, config, 1 << 30, runtime.target()).launch.dispatcher
        host = measure.random_operands(problem, np.random.default_rng(1))
        a, b, _ = measure.to_device(*host)
        out = runtime.empty(problem.operand_shapes[2], problem.dtype)
        PLUGIN.run(problem, config, a, b, None, out, workspace_limit=1 << 30)  # compiles the kernel
        (ptx,) = kernel.inspect_asm().values()
        assert ".local" not in ptx and "mul.lo.s64" not in ptx and "mul.lo.u64" not in ptx, config
