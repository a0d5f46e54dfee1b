"""The Toom-Cook generator of convlab.kernels.winograd.toomcook: every F(m, r) the winograd plugin can
use convolves exactly in rational arithmetic, its A^T and B^T are dyadic (exact in binary floating
point), and a wrong matrix is caught."""
import random
from fractions import Fraction

import pytest

from convlab.kernels.winograd.toomcook import (LAVIN_POINTS, POINTS, Transforms, correlate_exact, tensor_error,
                                               winograd)

#: the forward / dgrad tiles (m, r) and the wgrad ones (r, m): output tile m, filter r, n = m + r - 1 <= 8
USED = sorted({(m, r) for r in range(1, 8) for m in (1, 2, 4, 6) if m + r - 1 <= 8}
              | {(r, m) for r in range(1, 8) for m in (1, 2, 4, 6) if m + r - 1 <= 8})


@pytest.mark.parametrize("m,r", USED)
def test_every_used_tile_convolves_exactly(m, r):
    t = winograd(m, r)
    assert len(t.AT) == m and len(t.G) == t.n and len(t.BT) == t.n
    assert tensor_error(t) == []
    rng = random.Random(m * 10 + r)
    g = [Fraction(rng.randint(-9, 9), rng.randint(1, 7)) for _ in range(r)]
    d = [Fraction(rng.randint(-9, 9), rng.randint(1, 7)) for _ in range(t.n)]
    want = [sum(g[a] * d[i + a] for a in range(r)) for i in range(m)]
    assert correlate_exact(t, g, d) == want


@pytest.mark.parametrize("m", [2, 4, 6])
def test_points_and_dyadic_data_transforms(m):
    t = winograd(m, 3)
    assert t.points == POINTS[:m + 1]
    for matrix in (t.AT, t.BT):  # exact in float32: denominators are powers of two
        for row in matrix:
            for v in row:
                assert v.denominator & (v.denominator - 1) == 0, (t.name, v)


def test_lavin_points_convolve_too():
    assert tensor_error(winograd(4, 3, LAVIN_POINTS)) == []


def test_a_wrong_entry_is_caught():
    t = winograd(4, 3)
    bt = [list(row) for row in t.BT]
    bt[2][3] += Fraction(1, 1024)
    broken = Transforms(t.m, t.r, t.points, t.AT, t.G, tuple(map(tuple, bt)))
    assert tensor_error(broken)


def test_bad_arguments():
    with pytest.raises(ValueError, match="m >= 1"):
        winograd(0, 3)
    with pytest.raises(ValueError, match="finite points"):
        winograd(9, 9)
    with pytest.raises(ValueError, match="distinct"):
        winograd(2, 3, (Fraction(0), Fraction(0), Fraction(1)))
