"""What is specific to the im2col and col2im plugins (the conformance suite covers the rest): sub-batches
under a tiny workspace limit, the exact workspace reported and allocated, declining when one image does
not fit, the 1x1 shortcut without a column buffer, and wgrad's k-split partial sums."""
import numpy as np
import pytest

import convlab
from convlab import make_problem, reference, runtime
from convlab.runtime import device, scratch
from convlab.algorithms.explicit_gemm.common import column_plan, tile_of
from convlab.measure import random_operands, rel_error, to_device, tolerance


@pytest.fixture
def allocations(monkeypatch):
    """Element counts of every device allocation made through convlab.runtime.device.empty (the scratch
    pool is emptied first, so each column buffer the plugin lends is a new allocation)."""
    scratch.release()
    sizes = []
    original = device.empty

    def recording(shape, dtype):
        sizes.append(int(np.prod(shape)))
        return original(shape, dtype)

    monkeypatch.setattr(device, "empty", recording)
    return sizes


def _run(name, problem, limit, rng):
    plugin = convlab.get_plugin(name)
    config = plugin.configs(problem)[0]
    host = random_operands(problem, rng)
    out = runtime.full(problem.operand_shapes[2], np.nan, problem.dtype)
    plugin.run(problem, config, *to_device(*host), out, workspace_limit=limit)
    err = rel_error(out.copy_to_host(), reference.solve(problem, *host))
    assert err <= tolerance(problem, plugin.compute_eps(problem.dtype)), (problem.describe(), err)
    return plugin, config


def _problem(op, **kw):
    args = dict(n=5, c=4, h=7, w=6, k=6, r=3, s=2, stride=(2, 1), padding=1, dilation=(1, 2), groups=2)
    args.update(kw)
    return make_problem(op, **args)


@pytest.mark.parametrize("name,op,bias", [("im2col", "forward", True), ("im2col", "wgrad", False),
                                          ("col2im", "dgrad", True)])
def test_sub_batches_under_a_tiny_limit(name, op, bias, allocations):
    problem = _problem(op, bias=bias)
    per_image = problem.c * problem.r * problem.s * problem.p * problem.q * problem.itemsize
    plugin = convlab.get_plugin(name)
    config = plugin.configs(problem)[0]
    plan = column_plan(problem, tile_of(config), 10 ** 9, runtime.target())
    limit = 2 * per_image + plan.part * problem.itemsize + 4  # room for two images' columns
    plan = column_plan(problem, tile_of(config), limit, runtime.target())
    assert plan.nb == 2 and plan.cols * problem.itemsize == 2 * per_image  # 5 images: 2 + 2 + 1
    _run(name, problem, limit, np.random.default_rng(7))
    allocated = sum(allocations) * problem.itemsize
    assert allocated == plugin.workspace_bytes(problem, config, limit) <= limit


@pytest.mark.parametrize("name,op", [("im2col", "forward"), ("im2col", "wgrad"), ("col2im", "dgrad")])
def test_declines_when_one_image_does_not_fit(name, op):
    problem = _problem(op)
    plugin = convlab.get_plugin(name)
    per_image = problem.c * problem.r * problem.s * problem.p * problem.q * problem.itemsize
    verdict = plugin.applicable(problem, workspace_limit=per_image - 1)
    assert not verdict and "workspace" in verdict.reason
    call = {"forward": convlab.conv2d, "wgrad": convlab.conv2d_backward_weight,
            "dgrad": convlab.conv2d_backward_data}[op]
    a, b, _ = random_operands(problem)
    shape = problem.w_shape if op == "wgrad" else problem.x_shape
    args = (a, b) if op == "forward" else (a, b, shape)
    with pytest.raises(ValueError, match="workspace"):
        call(*args, stride=problem.stride, padding=problem.padding, dilation=problem.dilation,
             groups=problem.groups, algorithm=name, workspace_limit=per_image - 1)


@pytest.mark.parametrize("name,op,bias", [("im2col", "forward", True), ("im2col", "wgrad", False),
                                          ("col2im", "dgrad", True)])
def test_pointwise_needs_no_column_buffer(name, op, bias, allocations):
    problem = make_problem(op, 3, 6, 5, 4, 4, 1, 1, groups=2, bias=bias)
    plugin, config = _run(name, problem, 0 if op != "wgrad" else 10 ** 6, np.random.default_rng(8))
    plan = column_plan(problem, tile_of(config), 10 ** 6, runtime.target())
    assert plan.pointwise and plan.cols == 0
    assert sum(allocations) == plan.part  # wgrad may still sum k-split partials
    if op != "wgrad":
        assert plugin.workspace_bytes(problem, config, 0) == 0 and plugin.applicable(problem, None, 0)


def test_wgrad_k_splits_are_summed_in_order():
    problem = make_problem("wgrad", 2, 3, 12, 12, 4, 3, 3)
    plugin = convlab.get_plugin("im2col")
    config = plugin.configs(problem)[0]
    plan = column_plan(problem, tile_of(config), 10 ** 6, runtime.target())
    assert plan.ksplit > 1 and plan.part == plan.ksplit * 4 * 3 * 3 * 3
    _run("im2col", problem, 10 ** 6, np.random.default_rng(9))


def test_registered_with_priority_above_direct():
    names = [p.name for p in convlab.plugins("forward")]
    assert names.index("im2col") < names.index("direct")
    assert convlab.get_plugin("col2im").ops == {"dgrad"} and convlab.get_plugin("col2im").priority == 10


def test_flat_launches_cover_whole_images():
    from convlab.kernels.conv.columns import flat_launches, launch_shape
    from convlab.kernels.data.splitk import sm_count
    threads, per_sm = launch_shape()
    assert flat_launches(6, 49) == [(0, 6, min(per_sm * sm_count(), -(-6 * 49 // threads)), threads)]
    big = flat_launches(12, 2**30, whole=3)  # 3 rows of an image per launch: 3 * 2**30 < 2**32
    assert [(r0, rows) for r0, rows, _, _ in big] == [(0, 3), (3, 3), (6, 3), (9, 3)]
    from convlab.runtime.targets import get, using
    with using("sm_90"):  # a GPU's launches, planned on the CPU: 256 threads, 16 blocks an SM
        assert flat_launches(6, 49)[0][2:] == (min(16 * 132, -(-6 * 49 // 256)), 256)
    assert launch_shape(get("sm_80")) == (256, 16)
    with pytest.raises(ValueError, match="32-bit"):
        flat_launches(8, 2**31, whole=4)


@pytest.mark.parametrize("name,op,bias", [("im2col", "forward", True), ("im2col", "wgrad", False),
                                          ("col2im", "dgrad", True)])
def test_unfold_and_fold_in_several_launches(name, op, bias, monkeypatch):
    """Images past the 32-bit pair limit go to further launches, each starting at its own image (the
    limit shrunk here to two images' (row, pixel) pairs)."""
    from convlab.kernels.conv import columns as _columns, fold as _fold, unfold as _unfold
    problem = _problem(op, bias=bias)
    # pairs per row: the fold's dx pixels; the unfold's 16-byte chunks of columns (P*Q = 24 fp32: 6)
    pixels = problem.h * problem.w if op == "dgrad" else problem.p * problem.q // 4
    monkeypatch.setattr(_columns, "PAIR_LIMIT", 2 * problem.c * pixels + 1)
    launches = []
    original = _columns.flat_launches
    def recording(*args, **kwargs):
        launches.append(original(*args, **kwargs))
        return launches[-1]

    for module in (_unfold, _fold):
        monkeypatch.setattr(module, "flat_launches", recording)
    _run(name, problem, 10 ** 9, np.random.default_rng(5))
    assert launches and all(len(one) == 3 for one in launches)  # 5 images: 2 + 2 + 1


@pytest.mark.parametrize("dtype,vector", [("float16", True), ("float32", True), ("float32", False)])
def test_unfold_into_split_major_layout(dtype, vector):
    """The unfold against numpy: 3 images in groups of ipb = 2 (split-major strides; the fourth slot is
    left unwritten), each image's P*Q = 25 padded to 40 with zeros; chunks of 8 halves or 4 floats
    cross output rows (Q = 5), taps read the padding. ``vector``: 16-byte stores (an aligned buffer) or the scalar kernel (a view one element
    off, so not 16-byte aligned)."""
    from convlab.kernels.conv.unfold import _vector_width, unfold_into
    pr = make_problem("wgrad", 3, 2, 5, 7, 4, 3, 2, padding=(1, 0), dilation=(1, 2), dtype=dtype)
    assert (pr.p, pr.q) == (5, 5)
    pqo, ipb = 40, 2
    crs = pr.c * pr.r * pr.s
    strides = (crs * ipb * pqo, pqo, ipb * pqo)  # [z][(c, r, s)][i * pqo + pq]
    x = np.random.default_rng(3).standard_normal(pr.x_shape).astype(dtype)
    size = 2 * crs * ipb * pqo
    buf = runtime.full((size + 1,), np.nan, dtype)
    cols = buf[:size] if vector else buf[1:]
    assert (_vector_width(cols, pqo, strides) > 1) == vector
    unfold_into(pr, runtime.to_device(x), cols, 0, pr.n, pq_out=pqo, images_per_block=ipb, strides=strides)
    got = cols.copy_to_host()
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (0, 0)))
    want = np.full(size, np.nan, dtype)
    for n in range(pr.n):
        for c in range(pr.c):
            for r in range(pr.r):
                for s in range(pr.s):
                    tap = xp[n, c, r:r + pr.p, 2 * s:2 * s + pr.q].reshape(-1)
                    at = (n // ipb) * strides[0] + (n % ipb) * strides[1] + ((c * pr.r + r) * pr.s + s) * strides[2]
                    want[at:at + pqo] = np.pad(tap, (0, pqo - tap.size))
    assert np.array_equal(got, want, equal_nan=True)
