"""tensor_core in 3D (and 1D through its 2D embedding): the N-d gather, channels-last-3d operands read as
they are, the strided dgrad's column route on the channel-major fold, and wgrad's tap gather (no unfold of x).

Generic properties (every dtype and layout against the reference) are the conformance suite's, which
draws 3D problems for the plugin; these tests cover what the 3D routes add."""
import pytest

import convlab
from convlab import runtime
from convlab.algorithms.tensor_core import strided, taps
from convlab.algorithms.tensor_core.configs import tc_config
from convlab.algorithms.tensor_core.gather import ALIGN
from convlab.kernels.data import transpose
from convlab.kernels.tensor_core import conv as tc_conv, wgrad as tc_wgrad
from convlab.kernels.tensor_core.config import TcConfig
from convlab.ops.explain import plugin_rows
from convlab.problem import make_problem_nd

from tc_helpers import TC, run_layouts, run_tc, spy


def test_forward_reads_channels_last_3d_operands_as_they_are(monkeypatch):
    """NDHWC x with whole chunks of channels, a KTRSC filter and an NDHWC output: no layout copy at all."""
    problem = make_problem_nd("forward", 2, 8, (3, 4, 5), 16, (2, 3, 3), padding=1, dilation=(2, 1, 1),
                              dtype="float16", bias=True)
    copies = spy(monkeypatch, transpose, "to_channels_last")
    err, tol = run_layouts(problem, (True, True, True))
    assert err <= tol and not copies


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_dgrad_as_a_forward_of_the_flipped_filter(dtype):
    """Stride-1 dgrad with padding on every axis, 5 channels (padded to 8 in the NDHWC copy), with bias."""
    problem = make_problem_nd("dgrad", 1, 5, (4, 5, 4), 8, (3, 1, 2), padding=(1, 0, 1), dtype=dtype, bias=True)
    err, tol = run_tc(problem, seed=2)
    assert err <= tol


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("limit", [2**28, 1], ids=["one pass", "one image a pass"])
def test_strided_dgrad_column_route_on_the_fold(limit, dtype, monkeypatch):
    """A dgrad (float32 as TF32, or bf16) strided on two axes: per image the float32 [CTRS, DoPQ] columns
    on the batched tensor-core GEMM (one filter for every image), folded by fold_volume (the channel-major
    fold); pass by pass under a small limit."""
    problem = make_problem_nd("dgrad", 2, 3, (5, 4, 5), 4, (3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1),
                              dtype=dtype, bias=True)
    monkeypatch.setattr(strided, "images_per_pass", lambda pr, _limit, real=strided.images_per_pass:
                        real(pr, limit))
    folds = spy(monkeypatch, strided, "fold_volume")
    with convlab.float32_precision("high"):
        assert TC.applicable(problem)
        err, tol = run_tc(problem, seed=4)
    assert err <= tol
    assert [call[4] for call in folds] == ([0, 1] if limit == 1 else [0])  # n0 of each pass


@pytest.mark.parametrize("dtype, x_last", [("float16", True), ("bfloat16", False), ("float32", False)])
def test_wgrad_gathers_the_taps_of_x(dtype, x_last, monkeypatch):
    """Backward-weight over three images: x gathered tap by tap (channels-last x read as it is, an NCDHW
    one transposed once, never unfolded T*R*S times), dy split-major, the partials of every split summed
    in order into dw."""
    problem = make_problem_nd("wgrad", 3, 8, (3, 4, 5), 12, (2, 3, 2), stride=(1, 2, 1), padding=(1, 1, 0),
                              dilation=(1, 1, 2), dtype=dtype)
    unfolds = spy(monkeypatch, taps, "unfold_into")
    copies = spy(monkeypatch, transpose, "to_channels_last")
    with convlab.float32_precision("high"):
        the_plan = taps.plan(problem, tc_config(TC.configs(problem)[0]), ALIGN[dtype], runtime.target())
        err, tol = run_layouts(problem, (x_last, False, False), seed=5)
    assert err <= tol
    assert the_plan.splits * the_plan.parts > 1  # the ordered sum over partials
    assert all((call[0].c, call[0].kernel_size) == (problem.k, (1, 1)) for call in unfolds)  # dy only, not x
    assert len(copies) == (0 if x_last else 1)


def test_wgrad_gather_needs_mma_sync_and_a_swizzling_tile():
    with pytest.raises(ValueError, match="wgmma"):
        tc_wgrad.make_tc_wgrad("f16", TcConfig(64, 32, 16, 64, 32, 3, MMA="wgmma"), 3)
    with pytest.raises(ValueError, match="swizzled"):
        tc_wgrad.make_tc_wgrad("tf32", TcConfig(16, 32, 8, 16, 16, 2), 3)
    assert all("MMA" not in c and c["BM"] % 32 == 0 for c in TC.configs(
        make_problem_nd("wgrad", 1, 4, (3, 3, 3), 4, (1, 1, 1), dtype="float32")))


def test_generated_gather_adds_the_depth_axis():
    """The 3D kernel is the 2D one with the depth in front: its parameters appended, the depth bound
    tested beside height and width, the tap carry reaching t."""
    two, three = (tc_conv.kernel_source("f16", TcConfig(32, 32, 16, 16, 32, 2), nd=nd) for nd in (2, 3))
    head2, head3 = two.splitlines()[0], three.splitlines()[0]
    assert head3 == head2.replace(", vec):", tc_conv.DEPTH_PARAMS + ", vec):")
    assert "U(ad0 + dt) < D and U(ah0 + dr) < H and U(aw0 + ds) < W" in three and "ad0" not in two
    assert "dt = U(dt + dd)" in three and "dt" not in two


@pytest.mark.parametrize("nd", [1, 3])
def test_explain_lists_the_gemm_plugins_for_1d_and_3d(nd):
    """1D through the 2D embedding, 3D natively: implicit_gemm and tensor_core (fp16) both accept."""
    spatial, kernel = ((9,), (3,)) if nd == 1 else ((3, 4, 4), (2, 3, 3))
    for dtype, name in (("float32", "implicit_gemm"), ("float16", "tensor_core")):
        problem = make_problem_nd("forward", 1, 8, spatial, 8, kernel, padding=1, dtype=dtype).lowered()
        rows = {r.name: r for r in plugin_rows(problem, 2**28)}
        assert rows[name].eligible, rows[name].reason


@pytest.mark.parametrize("itype, cfg", [("f16", TcConfig(16, 32, 16, 16, 16, 2)),
                                        ("tf32", TcConfig(64, 64, 16, 32, 32, 3))])
def test_wgrad_gather_parameters_keep_their_values(itype, cfg):
    """No line of the generated kernel assigns a name the loader reads as a parameter (the pipeline's own
    locals, such as its ldmatrix swizzle ``sw``, would shadow it from there on)."""
    import re
    for nd in (2, 3):
        source = tc_wgrad.kernel_source(itype, cfg, nd)
        params = set(source.splitlines()[0].split("(", 1)[1].split(")")[0].split(", "))
        assigned = {name for names in re.findall(r"^\s*([\w, ]+?) = ", source, re.M) for name in names.split(", ")}
        assert not params & assigned
