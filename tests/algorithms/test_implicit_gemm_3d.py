"""implicit_gemm on NCDHW problems: the 3D kernels against float64 (no depth unfold), and the 3D gathers
as the 2D tables plus a depth column."""
from __future__ import annotations

import numpy as np
import pytest

import convlab
from convlab import make_problem, reference, runtime
from convlab.problem import make_problem_nd
from convlab.algorithms import implicit_gemm
from convlab.algorithms.implicit_gemm import wgrad
from convlab.measure import random_operands, rel_error, to_device, tolerance

PLUGIN = convlab.get_plugin("implicit_gemm")


def _run(prob, config):
    """(output, relative error against float64) of one run into a NaN-poisoned output."""
    a, b, bias = random_operands(prob, np.random.default_rng(7))
    da, db, dbias = to_device(a, b, bias)
    out = runtime.full(prob.operand_shapes[2], np.nan, prob.dtype)
    PLUGIN.run(prob, config, da, db, dbias, out, workspace_limit=1 << 26)
    got = out.copy_to_host()
    return got, rel_error(got, reference.solve(prob, a, b, bias))


@pytest.mark.parametrize("kwargs, kernel", [
    (dict(op="forward", n=1, c=8, spatial=(3, 4, 4), k=8, kernel=(2, 2, 2), padding=(1, 0, 1), bias=True), "aligned"),
    (dict(op="forward", n=2, c=4, spatial=(4, 3, 5), k=6, kernel=(2, 3, 2), stride=(2, 1, 2), padding=(1, 1, 0),
          dilation=(1, 1, 2), groups=2, bias=True), "general"),
    (dict(op="dgrad", n=1, c=3, spatial=(5, 4, 5), k=6, kernel=(3, 2, 3), stride=(2, 1, 3), padding=(1, 0, 1),
          dilation=(1, 2, 1), groups=3, bias=True), "general"),
    (dict(op="wgrad", n=2, c=4, spatial=(4, 5, 4), k=6, kernel=(2, 3, 2), stride=(2, 1, 1), padding=(1, 1, 0),
          dilation=(1, 1, 2), groups=2), "general"),
], ids=["forward-aligned", "forward-grouped", "dgrad-phases", "wgrad-grouped"])
def test_3d_runs_natively(kwargs, kernel):
    """NCDHW operands straight into the 3D kernels (no depth unfold): the depth axis in the kk table, the
    rows' depth decode, dgrad's phases over three axes (some without taps) and wgrad's carry into the
    output depth, each against float64 under the plugin's first config."""
    kw = dict(kwargs)
    prob = make_problem_nd(kw.pop("op"), kw.pop("n"), kw.pop("c"), kw.pop("spatial"), kw.pop("k"),
                           kw.pop("kernel"), **kw)
    tile = implicit_gemm.tile_of(PLUGIN.configs(prob)[0])
    if prob.op == "wgrad":
        assert wgrad.is_aligned(prob) == (kernel == "aligned")
    else:
        assert implicit_gemm.gathers.is_aligned(prob, tile) == (kernel == "aligned")
        assert all(ga.depth is not None for ga in implicit_gemm.gathers.gathers(prob))
    got, err = _run(prob, PLUGIN.configs(prob)[0])
    assert err <= tolerance(prob, PLUGIN.compute_eps("float32")) and not np.isnan(got).any()


def test_3d_gathers_extend_the_2d_tables():
    """A 3D problem with a depth of one (T = D = Do = 1) gathers exactly as its 2D plane: the same sizes,
    geometry, groups and kk table, then a depth column of zeros."""
    two = make_problem("dgrad", 2, 6, 7, 5, 4, 3, 2, stride=(2, 1), padding=1, groups=2)
    three = make_problem_nd("dgrad", 2, 6, (1, 7, 5), 4, (1, 3, 2), stride=(1, 2, 1), padding=(0, 1, 1), groups=2)
    for a, b in zip(implicit_gemm.gathers.gathers(two), implicit_gemm.gathers.gathers(three), strict=True):
        assert (a.m, a.n, a.k, a.geo, a.out_img, a.extra) == (b.m, b.n, b.k, b.geo, b.out_img, b.extra)
        assert np.array_equal(b.table[:a.table.size], a.table) and not b.table[a.table.size:].any()
