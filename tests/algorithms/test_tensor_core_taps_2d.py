"""The 2D (1D) tap gather of the tensor-core plugins' backward-weight (taps.py). Only planes of
wgrad.GATHER_MIN_PIXELS output pixels and more take it, which no simulator-sized sample reaches, so the
conformance suite runs these plugins' 2D wgrad samples on the unfolded route: here the threshold is
lowered and the gather runs on strides, dilations, paddings, odd sizes and filters, 1D, both layouts of
x and every input type (fp16, bf16, TF32, 3xTF32), each against the float64 reference into a
NaN-poisoned dw."""
import pytest

import convlab
from convlab.algorithms.tensor_core import taps, wgrad
from convlab.plugin import registry
from convlab.problem import make_problem, make_problem_nd
from tc_helpers import run_layouts, split_like_the_simulator, spy  # noqa: F401  (a fixture)

CASES = [  # (plugin, problem, x channels-last)
    ("tensor_core", make_problem("wgrad", 2, 8, 7, 9, 16, 3, 3, stride=2, padding=1, dtype="float16"), False),
    ("tensor_core", make_problem("wgrad", 2, 8, 7, 9, 16, 3, 3, stride=2, padding=1, dtype="float16"), True),
    ("tensor_core", make_problem("wgrad", 1, 16, 9, 7, 8, 3, 5, stride=(1, 2), padding=(1, 2), dilation=(2, 1),
                                 dtype="bfloat16"), True),
    ("tensor_core", make_problem("wgrad", 2, 8, 6, 5, 8, 2, 2, dtype="float16"), True),  # even filter, no padding
    ("tensor_core", make_problem("wgrad", 1, 8, 15, 15, 8, 7, 7, stride=2, padding=3, dtype="float16"), False),
    ("tensor_core", make_problem("wgrad", 3, 4, 5, 6, 8, 3, 3, padding=1, dtype="float32"), False),  # TF32
    ("tf32x3", make_problem("wgrad", 2, 4, 6, 5, 4, 3, 2, stride=(2, 1), padding=(1, 0), dtype="float32"), False),
    # 1D, as the op runs it: its 2D embedding of height 1
    ("tensor_core", make_problem_nd("wgrad", 2, 8, (21,), 8, (5,), stride=2, padding=2, dtype="float16").lowered(),
     False),
]


@pytest.fixture(autouse=True)
def _every_plane_gathers(monkeypatch, split_like_the_simulator):
    monkeypatch.setattr(wgrad, "GATHER_MIN_PIXELS", 1)


@pytest.mark.parametrize("name, problem, x_last", CASES,
                         ids=[f"{n}-{p.dtype}-{'x'.join(map(str, p.kernel_size))}-s{p.strides[-1]}"
                              f"{'-cl' if last else ''}" for n, p, last in CASES])
def test_the_2d_tap_gather_matches_the_reference(monkeypatch, name, problem, x_last):
    plugin = registry.get(name)
    runs = spy(monkeypatch, taps, "run_taps")
    with convlab.float32_precision("high"):  # tensor_core's float32 is TF32 under "high"; tf32x3 takes either
        assert wgrad.tap_gather(problem) and plugin.applicable(problem)
        err, tol = run_layouts(problem, (x_last, False, False), seed=11, plugin=plugin)
    assert len(runs) == 1
    assert err <= tol, (err, tol)
