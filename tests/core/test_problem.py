"""The problem model: derived sizes, GEMM views, counts and validation."""
import pytest

from hypothesis import given
from hypothesis import strategies as st

from convlab import make_problem
from convlab.problem import Problem
from convlab.testing.strategies import problems


def test_output_size_and_gemm_views():
    fwd = make_problem("forward", 16, 3, 227, 227, 96, 11, 11, stride=4)
    assert (fwd.p, fwd.q) == (55, 55)
    assert fwd.gemm_shape() == (16 * 55 * 55, 96, 3 * 11 * 11)
    assert fwd.replace(op="dgrad").gemm_shape() == (16 * 227 * 227, 3, 96 * 11 * 11)
    assert fwd.replace(op="wgrad").gemm_shape() == (96, 3 * 11 * 11, 16 * 55 * 55)
    assert fwd.flops == 2 * 16 * 96 * 55 * 55 * 3 * 11 * 11


def test_groups_divide_the_gemm():
    prob = make_problem("forward", 2, 8, 9, 9, 12, 3, 3, padding=1, groups=4)
    assert prob.w_shape == (12, 2, 3, 3)
    assert prob.gemm_shape() == (2 * 81, 3, 2 * 9)


def test_bytes_count_each_operand_once():
    prob = make_problem("forward", 1, 2, 4, 4, 3, 3, 3, bias=True)
    assert prob.bytes == (1 * 2 * 16 + 3 * 2 * 9 + 1 * 3 * 2 * 2 + 3) * 4


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(stride=0), ValueError, "stride"),
    (dict(padding=-1), ValueError, "padding"),
    (dict(dilation=(1, 0)), ValueError, "dilation"),
    (dict(stride=1.5), TypeError, "stride"),
    (dict(groups=3), ValueError, "divisible by groups"),
    (dict(groups=0), ValueError, "groups"),
    (dict(dtype="int8"), TypeError, "dtype"),
    (dict(r=9), ValueError, "empty"),
])
def test_validation_names_the_argument(kwargs, exc, match):
    args = dict(op="forward", n=1, c=4, h=5, w=5, k=4, r=3, s=3)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        make_problem(**args)


def test_problem_is_hashable_and_describable():
    a = make_problem("forward", 1, 4, 5, 5, 4, 3, 3)
    assert a == make_problem("forward", 1, 4, 5, 5, 4, 3, 3) and hash(a) == hash(a.replace())
    assert "forward f32" in a.describe()


@given(problem=st.sampled_from(["forward", "dgrad", "wgrad"]).flatmap(problems))
def test_dict_round_trip(problem):
    assert Problem.from_dict(problem.to_dict()) == problem
    with pytest.raises(ValueError, match="groups"):
        Problem.from_dict(dict(problem.to_dict(), groups=0))
