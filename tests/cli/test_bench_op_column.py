"""The benchmark's "op" column (convlab.bench.harness.op_call): the candidate through the public op with
``algorithm=(plugin, config)`` forced computes what the plugin's ``run`` computes, for every op kind
(a dgrad with bias goes through conv_transpose2d); the table shows the column ('-' on the simulator)."""
import numpy as np
import pytest

import convlab
from convlab import measure, runtime
from convlab.bench import harness, report
from convlab.plugin import registry

CASES = [  # (public op, host args, kwargs, transpose entry)
    ("conv2d", ((1, 4, 5, 5), (4, 2, 3, 3), (4,)), {"padding": 1, "stride": (1, 2), "groups": 2}, False),
    ("conv2d_backward_data", ((1, 4, 5, 3), (4, 2, 3, 3), None), {"padding": 1, "stride": (1, 2),
                                                                    "groups": 2}, False),
    ("conv2d_backward_weight", ((1, 4, 5, 5), (1, 4, 5, 3), None), {"padding": 1, "stride": (1, 2),
                                                                      "groups": 2}, False),
    ("conv_transpose2d", ((1, 4, 3, 3), (4, 1, 3, 3), (2,)), {"padding": 1, "stride": 2,
                                                              "output_padding": 1, "groups": 2}, True),
]


def _problem(op, shapes, kwargs):
    rng = np.random.default_rng(0)
    host = [None if s is None else rng.standard_normal(s).astype(np.float32) for s in shapes]
    args = {"conv2d_backward_data": (host[0], host[1], (1, 4, 5, 5)),
            "conv2d_backward_weight": (host[0], host[1], (4, 2, 3, 3))}.get(op, tuple(host[:2]))
    bias = {"bias": host[2]} if host[2] is not None else {}
    return convlab.problem_for(op, *args, **kwargs, **bias), host


@pytest.mark.parametrize("op, shapes, kwargs, transpose", CASES, ids=[c[0] for c in CASES])
def test_the_public_op_with_the_candidate_forced_equals_its_run(op, shapes, kwargs, transpose):
    problem, host = _problem(op, shapes, kwargs)
    dev = measure.to_device(*host)
    limit = 2**28
    for cand in registry.candidates(problem, limit, all_configs=False):
        via_run = runtime.full(problem.operand_shapes[2], np.nan, problem.dtype)
        measure.run_candidate(cand, problem, *dev, via_run, limit)
        via_op = runtime.full(problem.operand_shapes[2], np.nan, problem.dtype)
        assert harness.op_call(cand, problem, dev, via_op, limit, transpose)() is via_op
        np.testing.assert_allclose(via_op.copy_to_host(), via_run.copy_to_host(), rtol=1e-6, atol=1e-6,
                                   err_msg=cand.label)


def test_the_table_has_the_op_column():
    res = report.ProblemResult("s", "1x4x5x5", "conv2d", "forward", {}, 1, 1)
    res.candidates = [measure.CandidateResult("direct", "default", status="ok", median_ms=1.5,
                                              op_median_ms=1.75),
                      measure.CandidateResult("im2col", "default", status="ok")]
    lines = report.table([res]).splitlines()
    assert "op ms" in lines[0]
    assert "1.5000" in lines[2] and "1.7500" in lines[2]
    assert lines[3].split()[1:3] == ["-", "-"]


def _row(plugin, kernel_ms, op_ms):
    return measure.CandidateResult(plugin, "default", status="ok", median_ms=kernel_ms, op_median_ms=op_ms)


def test_the_table_summarises_op_against_kernel_above_the_floor():
    """Rows whose kernel takes more than 0.2 ms count; the public op must be within 10% of the kernel;
    rows above the bar are named with their ratio."""
    fwd = report.ProblemResult("s", "layer1", "conv2d", "forward", {}, 1, 1)
    fwd.candidates = [_row("direct", 1.0, 1.05), _row("im2col", 0.1, 0.5)]  # the second is under the floor
    dgrad = report.ProblemResult("s", "layer2", "conv2d", "dgrad", {}, 1, 1)
    dgrad.candidates = [_row("direct", 0.5, 0.6)]
    text = report.table([fwd, dgrad])
    assert "public op vs kernel where the kernel takes > 0.2 ms: 1 of 2 within 10%" in text
    assert "above: layer2 dgrad direct[default]: kernel 0.5000 ms, op 0.6000 ms (1.20x)" in text
    assert "layer1" not in text.split("public op vs kernel")[1]
    fwd.candidates, dgrad.candidates = [_row("direct", 1.0, 1.05)], [_row("direct", 0.5, 0.52)]
    assert "2 of 2 within 10% (ALL)" in report.table([fwd, dgrad])
    assert report.op_vs_kernel([report.ProblemResult("s", "l", "conv2d", "forward", {}, 1, 1)]) == []


def test_a_suite_at_another_batch():
    from convlab.bench.suite import load_suite

    suite = load_suite("resnet50")
    b8 = suite.with_batch(8)
    assert b8.name == "resnet50_b8" and len(b8.entries) == len(suite.entries)
    for old, new in zip(suite.problems(), b8.problems()):
        assert new[1].n == 8 and new[1].replace(n=old[1].n) == old[1] and new[0].label == old[0].label
    with pytest.raises(ValueError, match="batch"):
        suite.with_batch(0)
