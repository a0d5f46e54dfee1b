"""The im2col boxes of the Hopper kernels' input maps (convlab.kernels.hopper.geometry) are the rows of the
reference im2col, and the predicate accepts exactly the geometries whose maps encode.

For random forward forms (1D to 3D, padding negative to past the corner limits, strides, dilations,
odd sizes, fewer output positions than the formula gives, corners drawn at their limits), a random
tile row, tap and channel block: the elements tensormap.im2col_box fetches (the simulator's copy) equal
x[n, o * stride - pad + tap * dil, c] over the tile's rows (zeros outside x, past the last image, past
C). Pure numpy: no kernel runs."""
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from convlab.kernels.arch import tensormap
from convlab.kernels.arch.tensormap import CORNER_LIMIT, OFFSET_LIMIT
from convlab.kernels.hopper.geometry import Geometry, dense_map


@st.composite
def geometries(draw):
    nd = draw(st.integers(1, 3))
    edge = draw(st.booleans())  # pads and dilations around the corner limits of nd
    limit = CORNER_LIMIT[nd] if nd > 1 else 40
    axes = []
    for _ in range(nd):
        k = draw(st.integers(1, 4))
        d = draw(st.integers(1, 12 if edge else 3))
        s = draw(st.integers(1, 9 if edge else 3))
        p = draw(st.integers(-d * (k - 1), limit + 2 if edge else 2))
        size = draw(st.integers(max(1, d * (k - 1) + 1 - 2 * p), max(1, d * (k - 1) + 1 - 2 * p) + 6))
        full = (size + 2 * p - d * (k - 1) - 1) // s + 1
        out = draw(st.integers(max(1, full - 2), full))  # conv_transpose's output_padding: fewer outputs
        axes.append((size, k, out, s, p, d))
    size, kernel, out, stride, pad, dil = (tuple(a[i] for a in axes) for i in range(6))
    n, c = draw(st.integers(1, 3)), draw(st.integers(1, 20))
    return Geometry(size, kernel, out, stride, pad, dil, n=n, c=c, k=16)


def _reference_rows(geo: Geometry, x: np.ndarray, m0: int, rows: int, tap: int, c0: int, bk: int) -> np.ndarray:
    want = np.zeros((rows, bk), x.dtype)
    offs = geo.offsets(tap)[::-1]  # outermost first
    for i in range(rows):
        n, rest = divmod(m0 + i, geo.pixels)
        if n >= geo.n:
            continue
        idx = []
        for out, s, p in zip(reversed(geo.out), reversed(geo.stride), reversed(geo.padding)):
            rest, o = divmod(rest, out)
            idx.append(o * s - p)
        pos = [a + b for a, b in zip(reversed(idx), offs)]
        if all(0 <= v < size for v, size in zip(pos, geo.size)):
            cs = slice(c0, min(c0 + bk, geo.c))
            want[i, :cs.stop - c0] = x[(n, *pos, cs)]
    return want


@settings(max_examples=300, deadline=None)
@given(geo=geometries(), data=st.data())
def test_im2col_boxes_are_the_reference_rows(geo, data):
    bk = data.draw(st.sampled_from([16, 32, 64]))
    bm = data.draw(st.sampled_from([8, 24, 64]))
    why = geo.reason("float16", 2, bm, 16, bk)
    lower, upper = geo.corners()
    limit = CORNER_LIMIT[geo.nd]
    reach = max(d * (t - 1) for d, t in zip(geo.dilation, geo.kernel))
    fits = all(-limit <= v < limit for v in lower + upper) and max(geo.stride) <= 8 and reach < OFFSET_LIMIT[geo.nd]
    assert (why == "") == fits, (why, geo)
    if why:
        return
    cs = -(-geo.c // 8) * 8
    amap = geo.input_map("float16", cs, 0, bm, bk, 2)
    assert tensormap.reason(amap) == "" and [amap.positions(a) for a in range(geo.nd)] == list(geo.out[::-1])
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    x = np.zeros((geo.n, *geo.size, cs), np.float16)
    x[..., :geo.c] = rng.integers(1, 1000, (geo.n, *geo.size, geo.c))
    m0 = data.draw(st.integers(0, math.ceil(geo.m / bm) - 1)) * bm
    tap = data.draw(st.integers(0, geo.taps - 1))
    c0 = data.draw(st.integers(0, math.ceil(geo.c / bk) - 1)) * bk
    flat, ok = tensormap.im2col_box(amap, (c0,) + geo.start(m0), geo.offsets(tap))
    got = np.where(ok, x.reshape(-1)[flat], 0).reshape(bm, bk)
    np.testing.assert_array_equal(got, _reference_rows(geo, x, m0, bm, tap, c0, bk))
    bmap = geo.filter_map("float16", cs, 0, 16, bk, 2)
    assert tensormap.reason(bmap) == ""
    assert tensormap.reason(dense_map("float16", (geo.k, geo.m), 2, 0, (16, bm), 32)) == ""


def test_dgrad_forms_flip_the_padding():
    from convlab.problem import make_problem

    pr = make_problem("dgrad", 2, 8, 7, 9, 16, 3, 5, padding=(0, 3), dilation=(2, 1))
    geo = Geometry.of(pr)
    assert (geo.c, geo.k, geo.size, geo.out, geo.padding) == (16, 8, (pr.p, pr.q), (7, 9), (4, 1))
    one_d = Geometry.of(make_problem("forward", 1, 8, 1, 9, 8, 1, 3, padding=(0, 1)))
    assert (one_d.nd, one_d.size, one_d.kernel) == (1, (9,), (3,))


def test_the_predicate_flips_exactly_at_each_corner_limit():
    """lower = -pad reaches -limit (accepted) then -limit - 1 (declined, naming the corner); upper =
    pad - dil * (kernel - 1) at stride 1 reaches limit - 1 and -limit (accepted), then limit and -limit - 2
    (declined); for 1D, 2D and 3D maps."""
    for nd, limit in CORNER_LIMIT.items():
        def geo(pad, dil, k):
            size = max(1, dil * (k - 1) + 1 - 2 * pad) + 3
            out = size + 2 * pad - dil * (k - 1)
            return Geometry((size,) * nd, (k,) * nd, (out,) * nd, (1,) * nd, (pad,) * nd, (dil,) * nd, n=1, c=8, k=16)
        why = lambda g: g.reason("float16", 2, 64, 16, 16)  # noqa: E731
        assert why(geo(limit, 1, 2)) == "" and why(geo(limit - 1, 1, 1)) == ""
        assert "lower corner" in why(geo(limit + 1, 1, 3))
        assert "upper corner" in why(geo(limit, 1, 1))
        dil = limit // 2  # upper = 0 - dil * 2 at pad 0, kernel 3
        assert why(geo(0, dil, 3)) == "" and "upper corner" in why(geo(0, dil + 1, 3))


def test_the_driver_encoders_take_the_maps_arguments():
    """cuda.bindings converts no plain int to cuuint32_t / cuuint64_t: the encoders' arguments are the
    driver's types, so a call gets past argument conversion (here, without a driver, to the library load)."""
    import pytest

    pytest.importorskip("cuda.bindings")
    maps = (tensormap.TiledMap("float16", (40, 5, 3), (80, 400), (8, 3, 2), 0, 0),
            tensormap.Im2colMap("float16", (16, 6, 6, 2), (32, 192, 1152), (-1, -1), (1, 1), 16, 32,
                                (1, 1, 1, 1), 0, 0))
    for m in maps:
        encoder, args = tensormap.driver_args(m)
        try:
            encoder(*args)
        except TypeError as exc:
            raise AssertionError(f"{type(m).__name__}: {exc}") from None
        except Exception:  # noqa: BLE001  (no driver on this machine: past the conversion)
            pass
